"""Node encoders: GRACE's message-passing stack and an MLP of the same widths."""

from __future__ import annotations

import contextlib
import copy
import inspect
import warnings
from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor
from torch_geometric.nn import GCNConv, GINConv, GraphConv, SAGEConv
from torch_geometric.nn.resolver import activation_resolver
from torch_geometric.utils import is_sparse, to_torch_csr_tensor

from ._checks import check_choice, check_input_width, check_int
from ._compat import autocast_enabled, is_compiling, stacklevel_outside_package

__all__ = ["GCNEncoder", "MLPEncoder"]


def _csr_adjacency_t(
    edge_index: Tensor, edge_weight: Optional[Tensor], x: Tensor
) -> Optional[Tensor]:
    """The transposed adjacency (rows = targets) as a CSR tensor of ``x``'s dtype; ``None``
    with self-loops or repeated edges (a convolution treats those unlike a coalesced matrix)."""
    if bool((edge_index[0] == edge_index[1]).any()):
        return None
    weight = torch.ones(edge_index.size(1), device=x.device) if edge_weight is None else edge_weight
    weight = weight.to(x.dtype)  # as GCNConv's edge-list path does
    with warnings.catch_warnings():  # torch's one-time "CSR support is in beta" notices
        warnings.filterwarnings("ignore", message="Sparse (CSR tensor support|invariant checks)")
        adj = to_torch_csr_tensor(edge_index.flip(0), weight, size=(x.size(0), x.size(0)))
    return adj if adj.values().numel() == edge_index.size(1) else None


def parameter_dtype(module: torch.nn.Module) -> Optional[torch.dtype]:
    """The type of ``module``'s first initialised floating-point parameter, or ``None``."""
    lazy = torch.nn.parameter.UninitializedParameter
    kept = (p for p in module.parameters() if p.is_floating_point() and not isinstance(p, lazy))
    return next((p.dtype for p in kept), None)


def as_parameter_dtype(t: Optional[Tensor], module: torch.nn.Module) -> Optional[Tensor]:
    """Floating-point ``t`` (features, edge weights) cast to :func:`parameter_dtype` of
    ``module``; half-precision ``t`` under autocast is left to autocast."""
    if t is None or not t.is_floating_point():
        return t
    dtype = parameter_dtype(module)
    autocast = t.dtype in (torch.float16, torch.bfloat16) and autocast_enabled(t.device.type)
    return t if dtype is None or t.dtype == dtype or autocast else t.to(dtype)


#: Convolutions whose sparse aggregation (``message_and_aggregate``) needs no edge features.
SPARSE_CONVS = (GCNConv, SAGEConv, GINConv, GraphConv)
#: Convolutions whose first operation on ``x`` is a linear map, which takes a sparse ``x``.
LINEAR_FIRST_CONVS = (GCNConv,)
#: The largest share of non-zeros of CPU features that enter the first layer as CSR.
SPARSE_FEATURE_DENSITY = 0.1


def sparse_features(x: Tensor) -> Tensor:
    """``x`` as a CSR matrix if it is a dense CPU feature matrix (without gradient) with at
    most :data:`SPARSE_FEATURE_DENSITY` non-zeros, else ``x``: ``x @ W`` costs ``O(nnz · out)``."""
    if x.layout != torch.strided or x.device.type != "cpu" or x.dim() != 2 or x.requires_grad:
        return x
    if int(torch.count_nonzero(x)) > SPARSE_FEATURE_DENSITY * x.numel():
        return x
    return _to_csr(x)


def _to_csr(x: Tensor) -> Tensor:
    """``x.to_sparse_csr()``, without torch's one-time "CSR support is in beta" notice."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support")
        return x.to_sparse_csr()


#: Slope of the reference code's ``'rrelu'`` (``F.rrelu`` with ``training=False``).
RRELU_EVAL_SLOPE = (1.0 / 8.0 + 1.0 / 3.0) / 2.0

#: The activation names an encoder (and a preset) accepts.
ACTIVATIONS = ("relu", "prelu", "rrelu", "elu", "leaky_relu", "tanh", "identity")

Activation = Union[str, torch.nn.Module, Callable[[Tensor], Tensor]]


class _FunctionActivation(torch.nn.Module):
    """Wraps a plain callable ``Tensor -> Tensor`` as a module."""

    def __init__(self, fn: Callable[[Tensor], Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x)

    def __repr__(self) -> str:
        return activation_name(self.fn)


def activation_name(activation: Activation) -> str:
    """Returns a short readable name of an activation (string, module or callable)."""
    if isinstance(activation, str):
        return activation
    if isinstance(activation, _FunctionActivation):
        activation = activation.fn
    if isinstance(activation, torch.nn.Module):
        return type(activation).__name__
    return getattr(activation, "__name__", type(activation).__name__)


def make_activation(activation: Activation) -> torch.nn.Module:
    """Builds one fresh activation module (one per layer) from one of :data:`ACTIVATIONS`
    (``'rrelu'``: a leaky ReLU of slope :data:`RRELU_EVAL_SLOPE`), a module (deep-copied),
    a module class, or a callable ``Tensor -> Tensor``."""
    if isinstance(activation, str):
        check_choice("activation", activation, ACTIVATIONS)
        if activation == "rrelu":
            return torch.nn.LeakyReLU(RRELU_EVAL_SLOPE)
        if activation == "identity":
            return torch.nn.Identity()
        return activation_resolver(activation)  # a new module on every call
    if isinstance(activation, type) and issubclass(activation, torch.nn.Module):
        return activation()
    if isinstance(activation, torch.nn.Module):
        return copy.deepcopy(activation)
    if callable(activation):
        return _FunctionActivation(activation)
    raise ValueError(
        f"`activation` must be one of {sorted(ACTIVATIONS)}, a torch.nn.Module or a "
        f"callable (got {activation!r})"
    )


def layer_widths(in_channels: int, hidden_channels: int, num_layers: int) -> list[int]:
    """Returns GRACE's widths ``[in, 2*hidden, ..., 2*hidden, hidden]`` (``[in, hidden]`` for 1 layer)."""
    return [in_channels] + [2 * hidden_channels] * (num_layers - 1) + [hidden_channels]


class _StackEncoder(torch.nn.Module):
    """Widths, one activation per layer, reset and repr."""

    def __init__(self, in_channels: int, hidden_channels: int, num_layers: int, activation):
        super().__init__()
        self.in_channels = check_int("in_channels", in_channels, minimum=1)
        self.hidden_channels = check_int("hidden_channels", hidden_channels, minimum=1)
        self.num_layers = check_int("num_layers", num_layers, minimum=1)
        self.activation_name = activation_name(activation)
        self.activations = torch.nn.ModuleList(
            [make_activation(activation) for _ in range(self.num_layers)]
        )
        self.layers = torch.nn.ModuleList()

    def _build_layers(self, make_layer: Callable[[int, int], torch.nn.Module]):
        widths = layer_widths(self.in_channels, self.hidden_channels, self.num_layers)
        self.layers.extend(make_layer(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.reset_parameters()

    def reset_parameters(self):
        r"""Resets all learnable parameters (layers and learnable activations)."""
        for module in list(self.layers) + list(self.activations):
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()

    def _extra_repr_args(self) -> str:
        return ""

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, "
            f"num_layers={self.num_layers}{self._extra_repr_args()}, "
            f"activation={self.activation_name})"
        )


class GCNEncoder(_StackEncoder):
    r"""GRACE / GCA's message-passing encoder (Zhu et al., 2020,
    https://arxiv.org/abs/2006.04131): ``H^(l+1) = act(conv_l(H^(l), A))``, widths ``in ->
    2*hidden -> ... -> hidden``, the activation after every layer, the last included
    (docs/algorithms.md §1).

    Args:
        in_channels, hidden_channels, num_layers: The input and embedding widths, the depth.
        conv: Any PyG convolution class, built as ``conv(in, out, **conv_kwargs)``
            (multi-head ones with ``concat=False``).
        activation: See :func:`make_activation`.
        conv_kwargs: Extra keyword arguments of every ``conv``.
        sparse: Propagate over a CSR adjacency for :data:`SPARSE_CONVS` (faster on a CPU);
            graphs with self-loops or repeated edges keep the edge list.
        sparse_features: Hand mostly-zero CPU features to a :data:`LINEAR_FIRST_CONVS`
            first layer as CSR (:func:`sparse_features`).
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        num_layers: int = 2,
        conv: type = GCNConv,
        activation: Activation = "relu",
        conv_kwargs: Optional[dict[str, Any]] = None,
        sparse: Optional[bool] = None,
        sparse_features: bool = False,
    ):
        if not (isinstance(conv, type) and issubclass(conv, torch.nn.Module)):
            raise ValueError(f"`conv` must be a PyG convolution class (got {conv!r})")
        if conv_kwargs is not None and not isinstance(conv_kwargs, dict):
            raise ValueError(f"`conv_kwargs` must be a dict or None (got {conv_kwargs!r})")
        super().__init__(in_channels, hidden_channels, num_layers, activation)
        self.conv = conv
        self.conv_kwargs = dict(conv_kwargs or {})
        parameters = inspect.signature(conv.forward).parameters  # (how it takes edge weights)
        self._edge_weight_arg = next(
            (n for n in ("edge_weight", "edge_attr") if n in parameters), None
        )
        self._sparse_arg = sparse
        self.sparse = bool(sparse) and conv in SPARSE_CONVS
        self.sparse_features = bool(sparse_features) and conv in LINEAR_FIRST_CONVS
        self._build_layers(lambda a, b: conv(a, b, **self.conv_kwargs))

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_weight: Optional[Tensor] = None,
        *,
        check: bool = True,
    ) -> Tensor:
        r"""Returns node embeddings ``[num_nodes, hidden_channels]`` of features ``x``
        (dense or sparse), edges ``[2, num_edges]`` or a sparse adjacency, and
        ``edge_weight``; ``check=False`` skips the graph's check (only for a graph derived
        from a checked one), which raises a ``ValueError`` for a malformed graph."""
        check_input_width(x, self)
        # (cast first: float64 values beyond float32's range become inf, which are refused)
        x, edge_weight = as_parameter_dtype(x, self), as_parameter_dtype(edge_weight, self)
        if check:
            from ._graphs import check_graph  # (loaded with the first graph checked)

            check_graph(x, edge_index, edge_weight)
        if edge_weight is not None and self._edge_weight_arg is None:
            raise ValueError(
                f"`edge_weight` was given but {self.conv.__name__} does not accept edge weights"
            )
        improved = issubclass(self.conv, GCNConv) and self.conv_kwargs.get("improved")
        if edge_weight is None and improved and not is_sparse(edge_index):
            # GCNConv(improved=True) adds self-loops of weight 2 only to weighted edge lists
            # (PyG 2.8): unit weights make every path give A + 2I.
            edge_weight = torch.ones(edge_index.size(1), dtype=x.dtype, device=x.device)
        edge_list = is_compiling() or autocast_enabled(x.device.type)  # (dense x, edge list)
        if self.sparse and not edge_list and not is_sparse(edge_index):
            adj = _csr_adjacency_t(edge_index, edge_weight, x)
            edge_index, edge_weight = (edge_index, edge_weight) if adj is None else (adj, None)
        if self.sparse_features and not edge_list:
            x = sparse_features(x)
        elif x.layout != torch.strided and (edge_list or self.conv not in LINEAR_FIRST_CONVS):
            x = x.to_dense()  # a sparse x only enters convolutions that start with x @ W
        kwargs = {} if edge_weight is None else {self._edge_weight_arg: edge_weight}
        # A caller's sparse adjacency under autocast: float32 (no half-precision kernels).
        float32 = is_sparse(edge_index) and autocast_enabled(x.device.type)
        if float32 and x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        with torch.autocast(x.device.type, enabled=False) if float32 else contextlib.nullcontext():
            for layer, act in zip(self.layers, self.activations):
                x = act(layer(x, edge_index, **kwargs))
        return x

    def _extra_repr_args(self) -> str:
        text = f", conv={self.conv.__name__}"
        text += f", conv_kwargs={self.conv_kwargs!r}" if self.conv_kwargs else ""
        return text + "".join(
            f", {k}=True" for k in ("sparse", "sparse_features") if getattr(self, k)
        )


class MLPEncoder(_StackEncoder):
    r"""An MLP with the widths of :class:`GCNEncoder`, ``H^(l+1) = act(H^(l) W_l + b_l)``:
    the ProGCL paper's control without message passing (Xia et al., 2022,
    https://arxiv.org/abs/2110.02027). It takes :class:`GCNEncoder`'s arguments and
    ignores ``conv``, ``conv_kwargs``, ``sparse`` and the graph (warning for edge weights).
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        num_layers: int = 2,
        conv: Optional[type] = None,
        activation: Activation = "relu",
        conv_kwargs: Optional[dict[str, Any]] = None,
        sparse: Optional[bool] = None,
        sparse_features: bool = False,
    ):
        super().__init__(in_channels, hidden_channels, num_layers, activation)
        self.sparse_features = bool(sparse_features)
        self._build_layers(torch.nn.Linear)

    def forward(
        self,
        x: Tensor,
        edge_index: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
        *,
        check: bool = True,
    ) -> Tensor:
        r"""Returns node embeddings ``[num_nodes, hidden_channels]`` (the graph is ignored;
        ``x`` and ``check`` as in :meth:`GCNEncoder.forward`)."""
        check_input_width(x, self)
        x = as_parameter_dtype(x, self)
        if check:
            from ._graphs import check_graph

            check_graph(x, torch.empty(2, 0, dtype=torch.long, device=x.device))  # (x alone)
        if edge_weight is not None:
            warnings.warn(
                "MLPEncoder ignores `edge_weight`: it uses no graph",
                stacklevel=stacklevel_outside_package(),
            )
        if is_compiling() or autocast_enabled(x.device.type):  # (dense x, as GCNEncoder's)
            x = x.to_dense() if x.layout != torch.strided else x
        elif self.sparse_features:
            x = sparse_features(x)
        for layer, act in zip(self.layers, self.activations):
            x = act(layer(x))
        return x
