"""The GRACE model: encoder, projection head and two augmenters (docs/algorithms.md §1)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Callable, Optional, Union

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint
from torch_geometric.data import Data
from torch_geometric.data.data import BaseData
from torch_geometric.nn.inits import reset

from ._checks import accepts_check, check_input_width, check_int
from ._compat import is_compiling
from .augment import Augmenter, ComposeAugmenters
from .encoders import _to_csr, as_parameter_dtype, sparse_features

__all__ = ["GRACEModel"]

AugmentSpec = Union[None, Augmenter, Sequence[Augmenter], Callable]

#: The ``projector`` argument that asks for GRACE's projection head.
DEFAULT_PROJECTOR = "default"


def _as_augmenter(name: str, augment: AugmentSpec) -> Optional[Callable]:
    """``None`` (the identity) and callables are kept, a list becomes a :class:`ComposeAugmenters`."""
    if isinstance(augment, (list, tuple)):
        return ComposeAugmenters(*augment)
    if augment is None or callable(augment):
        return augment
    raise ValueError(
        f"`{name}` must be None, an Augmenter, a list of Augmenters or a callable "
        f"(x, edge_index, edge_weight) -> (x, edge_index, edge_weight) (got {augment!r})"
    )


def _output_width(encoder) -> Optional[tuple[str, int]]:
    """``(attribute, width)`` of the encoder's stated output width: ``out_channels`` (times
    ``heads`` where concatenated), else ``hidden_channels``; ``None`` where it states none."""
    for name in ("out_channels", "hidden_channels"):
        width = getattr(encoder, name, None)
        if isinstance(width, int) and not isinstance(width, bool) and width > 0:
            heads = getattr(encoder, "heads", 1)
            if getattr(encoder, "concat", False) and isinstance(heads, int):
                return f"{name} x heads", width * heads
            return name, width
    return None


@contextlib.contextmanager
def _augmenting(augment) -> Iterator[None]:
    """Runs an augmenter module (and its members) in training mode; the modes are restored."""
    modules = list(augment.modules()) if isinstance(augment, torch.nn.Module) else []
    modes = [module.training for module in modules]
    try:
        for module in modules:
            module.training = True
        yield
    finally:
        for module, mode in zip(modules, modes):
            module.training = mode


def _unpack(x, edge_index, edge_weight) -> tuple[Tensor, Tensor, Optional[Tensor]]:
    """Accepts ``(x, edge_index, edge_weight)`` or a single ``Data`` (its ``edge_weight``, if any)."""
    if isinstance(x, BaseData):
        if not isinstance(x, Data):
            raise ValueError(f"`x` must be a tensor or a homogeneous Data (got {type(x).__name__})")
        if edge_index is not None or edge_weight is not None:
            raise ValueError("pass either a Data object or (x, edge_index, edge_weight), not both")
        x, edge_index, edge_weight = x.x, x.edge_index, x.get("edge_weight")
    if x is None or edge_index is None:
        raise ValueError("`x` and `edge_index` are required (node features and connectivity)")
    return x, edge_index, edge_weight


class GRACEModel(torch.nn.Module):
    r"""The GRACE / GCA model (Zhu et al., "Deep Graph Contrastive Representation
    Learning", 2020, https://arxiv.org/abs/2006.04131): two augmented views encoded and
    projected, ``h_k = g(f(t_k(G)))`` with ``g(z) = W_2 ELU(W_1 z + b_1) + b_2`` (or any
    ``projector``), for ``loss(h1, h2)`` (docs/algorithms.md §1).

    .. code-block:: python

        model = GRACEModel(GCNEncoder(F, 128), 128, 128,
                           augment1=[EdgeDrop(0.2), FeatureMask(0.3)],
                           augment2=[EdgeDrop(0.4), FeatureMask(0.4)])
        loss = loss_fn(*model.views(data.x, data.edge_index))
        z = model(data.x, data.edge_index)   # embeddings for a linear probe

    Args:
        encoder: Maps ``(x, edge_index, edge_weight)`` to ``[num_nodes, hidden_channels]``,
            e.g. :class:`~pyg_progcl.GCNEncoder`.
        hidden_channels: The encoder's output width (checked where it states one).
        proj_channels: Hidden size of the default projection head (required with it, not
            allowed with another ``projector``).
        augment1, augment2: The views' augmentations: an augmenter, a list of them, or a
            callable of ``(x, edge_index, edge_weight)`` returning those; :obj:`None` is
            the identity.
        recompute_views: Recompute each view in backward (``torch.utils.checkpoint``).
        projector: The projection head ``g``: any module, :obj:`None` for none, or
            :obj:`"default"` for GRACE's.
    """

    def __init__(
        self,
        encoder: torch.nn.Module,
        hidden_channels: int,
        proj_channels: Optional[int] = None,
        augment1: AugmentSpec = None,
        augment2: AugmentSpec = None,
        recompute_views: bool = False,
        projector: Union[torch.nn.Module, str, None] = DEFAULT_PROJECTOR,
    ):
        super().__init__()
        self.recompute_views = bool(recompute_views)
        if not callable(encoder):
            raise ValueError(f"`encoder` must be a torch.nn.Module (got {encoder!r})")
        self.hidden_channels = check_int("hidden_channels", hidden_channels, minimum=1)
        stated = _output_width(encoder)
        if stated is not None and stated[1] != self.hidden_channels:
            raise ValueError(
                f"`hidden_channels` ({self.hidden_channels}) must equal the encoder's output "
                f"width ({stated[1]}, its `{stated[0]}`)"
            )
        self.encoder = encoder
        self.proj_channels = None
        if isinstance(projector, str) and projector == DEFAULT_PROJECTOR:
            if proj_channels is None:
                raise ValueError("`proj_channels` is required for the default projection head")
            self.proj_channels = check_int("proj_channels", proj_channels, minimum=1)
            projector = torch.nn.Sequential(
                torch.nn.Linear(self.hidden_channels, self.proj_channels),
                torch.nn.ELU(),
                torch.nn.Linear(self.proj_channels, self.hidden_channels),
            )
        elif projector is not None and not isinstance(projector, torch.nn.Module):
            raise ValueError(
                f"`projector` must be a torch.nn.Module, None or {DEFAULT_PROJECTOR!r} "
                f"(got {projector!r})"
            )
        elif proj_channels is not None:
            raise ValueError(
                "`proj_channels` sizes the default projection head: with another "
                "`projector`, leave it out"
            )
        self.projector = projector
        self.augment1 = _as_augmenter("augment1", augment1)
        self.augment2 = _as_augmenter("augment2", augment2)
        self.reset_parameters()

    def reset_parameters(self):
        r"""Resets the encoder, the projection head and what the augmenters prepared."""
        reset(self.encoder)
        reset(self.projector)  # (None: a no-op)
        for augment in (self.augment1, self.augment2):
            if isinstance(augment, Augmenter):
                augment.reset_parameters()

    def forward(
        self,
        x: Tensor,
        edge_index: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
        *,
        check: bool = True,
    ) -> Tensor:
        r"""Returns the encoder embeddings ``f(G)`` ``[num_nodes, hidden_channels]`` of the
        un-augmented graph (or of a ``Data`` in place of ``x``); ``check=False`` skips the
        graph's check (only for a graph derived from a checked one)."""
        return self._encode(*self._checked(x, edge_index, edge_weight, check))

    def project(self, z: Tensor) -> Tensor:
        r"""Applies the projection head ``g`` (``z`` itself where there is none)."""
        return z if self.projector is None else self.projector(z)

    def views(
        self,
        x: Tensor,
        edge_index: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
    ) -> tuple[Tensor, Tensor]:
        r"""Returns the projected views ``(h1, h2) = (g(f(t_1(G))), g(f(t_2(G))))``,
        each ``[num_nodes, hidden_channels]``, augmented in every mode (``eval()`` affects
        the encoder only); prepares adaptive augmenters. Accepts a ``Data`` for ``x``.

        Raises:
            ValueError: If the graph is malformed, or has another number of nodes than the
                graph the adaptive augmenters were prepared on.
        """
        x, edge_index, edge_weight = self._checked(x, edge_index, edge_weight)
        shared: dict = {}  # (the centralities both views' adaptive augmenters use)
        for augment in (self.augment1, self.augment2):
            if isinstance(augment, Augmenter):
                augment._prepare_with(x, edge_index, x.size(0), shared, force=False)
        return (
            self._view(self.augment1, x, edge_index, edge_weight),
            self._view(self.augment2, x, edge_index, edge_weight),
        )

    def _checked(self, x, edge_index, edge_weight, check: bool = True):
        """The graph's tensors as :meth:`input_features` feeds them (edge weights cast to the
        encoder's parameter type), then checked."""
        x, edge_index, edge_weight = _unpack(x, edge_index, edge_weight)
        x, edge_weight = self.input_features(x), as_parameter_dtype(edge_weight, self.encoder)
        if check:
            from ._graphs import check_graph  # (loaded with the first graph checked)

            check_graph(x, edge_index, edge_weight)
        return x, edge_index, edge_weight

    def input_features(self, x: Tensor) -> Tensor:
        """The features as the model feeds them to its augmenters and encoder: in the
        encoder's parameter type, and CSR where the encoder takes ``sparse_features`` or
        ``x`` is sparse. Pass ``model.input_features(x)`` to convert once."""
        check_input_width(x, self.encoder)
        x = as_parameter_dtype(x, self.encoder)
        if is_compiling() or x.layout == torch.sparse_csr:  # (compiled: dense features)
            return x
        if x.layout != torch.strided:
            return _to_csr(x)
        return sparse_features(x) if getattr(self.encoder, "sparse_features", False) else x

    def _view(self, augment, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]):
        if self.recompute_views and torch.is_grad_enabled():  # (the same RNG state in backward)
            args = (augment, x, edge_index, edge_weight)
            return checkpoint(self._augment_and_encode, *args, use_reentrant=False)
        return self._augment_and_encode(augment, x, edge_index, edge_weight)

    def _augment_and_encode(self, augment, x, edge_index, edge_weight) -> Tensor:
        """One view of a checked graph (the output of a callable not an Augmenter is checked)."""
        if augment is not None:
            with _augmenting(augment):
                x, edge_index, edge_weight = augment(x, edge_index, edge_weight)
            if not isinstance(augment, Augmenter):
                x, edge_index, edge_weight = self._checked(x, edge_index, edge_weight)
        return self.project(self._encode(x, edge_index, edge_weight))

    def _encode(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> Tensor:
        """The encoder on a checked graph: with ``check=False`` where it takes it."""
        kwargs = {"check": False} if accepts_check(self.encoder) else {}
        graph = (x, edge_index) if edge_weight is None else (x, edge_index, edge_weight)
        return self.encoder(*graph, **kwargs)

    def __repr__(self) -> str:
        args = [repr(self.encoder), str(self.hidden_channels)]
        if self.proj_channels is not None:
            args.append(str(self.proj_channels))
        else:
            args.append("projector=" + " ".join(repr(self.projector).split()))
        for name in ("augment1", "augment2"):
            if getattr(self, name) is not None:
                args.append(f"{name}={getattr(self, name)!r}")
        if self.recompute_views:
            args.append("recompute_views=True")
        return f"{self.__class__.__name__}({', '.join(args)})"
