"""Argument checks shared by every module: bad input raises a ``ValueError``
that names the argument and the expected form, never a silent NaN."""

from __future__ import annotations

import inspect
import math
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import is_sparse


def _number(name: str, value, form: str) -> float:
    """``float(value)``, or a ``ValueError`` naming ``name`` and ``form`` (None, a string)."""
    try:
        if isinstance(value, (str, bytes, bool)):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be {form} (got {value!r})") from None


def check_probability(name: str, value: float, *, upper_open: bool = False) -> float:
    """Checks ``value`` lies in ``[0, 1]`` (or ``[0, 1)`` with ``upper_open``)."""
    value = _number(name, value, "a probability")
    ok = 0.0 <= value < 1.0 if upper_open else 0.0 <= value <= 1.0
    if not ok or math.isnan(value):
        form = "[0, 1)" if upper_open else "[0, 1]"
        raise ValueError(f"`{name}` must be a probability in {form} (got {value})")
    return value


def check_positive(name: str, value: float, strict: bool = True) -> float:
    """Checks ``value`` is a finite number > 0 (``>= 0`` unless ``strict``)."""
    form = "a finite number " + ("> 0" if strict else ">= 0")
    value = _number(name, value, form)
    if not (math.isfinite(value) and (value > 0 if strict else value >= 0)):
        raise ValueError(f"`{name}` must be {form} (got {value})")
    return value


def check_nonnegative(name: str, value: float) -> float:
    """Checks ``value`` is a finite number >= 0."""
    return check_positive(name, value, strict=False)


def check_int(name: str, value, minimum: int = 1) -> int:
    """Checks ``value`` is an integer >= ``minimum``."""
    number = _number(name, value, f"an integer >= {minimum}")
    if not number.is_integer() or number < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum} (got {value!r})")
    return int(value)


def check_bool(name: str, value) -> bool:
    """Checks ``value`` is ``True`` or ``False``."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False (got {value!r})")
    return value


def short_repr(value, limit: int = 80) -> str:
    """``repr(value)`` for a message of one line: the type's name where the repr spans
    several lines or more than ``limit`` characters (a module, a large tensor)."""
    text = repr(value)
    return text if "\n" not in text and len(text) <= limit else f"a {type(value).__name__}"


def check_choice(name: str, value: str, choices) -> str:
    """Checks ``value`` is one of ``choices`` (an unhashable ``value`` is not)."""
    try:
        known = value in choices
    except TypeError:  # (a list or dict looked up in a set or dict of choices)
        known = False
    if not known:
        raise ValueError(f"`{name}` must be one of {sorted(choices)} (got {short_repr(value)})")
    return value


def check_matrix(name: str, x: Tensor, min_rows: int = 2, finite: bool = True) -> Tensor:
    """Checks ``x`` is a finite (unless not ``finite``) floating-point ``[N, d]`` tensor
    with ``N >= min_rows``."""
    if not isinstance(x, Tensor):
        raise ValueError(
            f"`{name}` must be a torch.Tensor of shape [N, d] (got {type(x).__name__})"
        )
    if x.layout != torch.strided:
        raise ValueError(
            f"`{name}` must be a dense tensor (got a {x.layout} tensor); pass {name}.to_dense()"
        )
    if x.dim() != 2:
        raise ValueError(f"`{name}` must have shape [N, d] (got shape {list(x.shape)})")
    if x.size(0) < min_rows:
        raise ValueError(f"`{name}` needs at least {min_rows} rows (nodes) (got {x.size(0)})")
    if x.size(1) < 1:
        raise ValueError(f"`{name}` needs at least one feature column (got shape {list(x.shape)})")
    if not x.is_floating_point():
        raise ValueError(f"`{name}` must be a floating-point tensor (got {x.dtype})")
    if finite and not torch.isfinite(x).all():
        raise ValueError(f"`{name}` contains NaN or inf values; embeddings must be finite")
    return x


def check_views(h1: Tensor, h2: Tensor, finite: bool = True) -> None:
    """Checks two projected views are finite ``[N, d]`` tensors of one shape, N >= 2
    (``finite=False``: their form only); values are read on the host once for both, not
    under ``torch.compile``."""
    check_matrix("h1", h1, finite=False)
    check_matrix("h2", h2, finite=False)
    if h1.shape != h2.shape:
        raise ValueError(
            f"`h1` and `h2` must have the same shape [N, d] (got {list(h1.shape)} and "
            f"{list(h2.shape)})"
        )
    if not finite or getattr(torch.compiler, "is_compiling", lambda: False)():  # (torch >= 2.3)
        return
    finite = torch.isfinite(torch.stack([h1.detach().abs().amax(), h2.detach().abs().amax()]))
    if not finite.all().item():
        name = "h1" if not bool(finite[0]) else "h2"
        raise ValueError(f"`{name}` contains NaN or inf values; embeddings must be finite")


#: The integer types of node indices that torch's indexing and PyG take; narrower ones
#: are refused, not cast.
INDEX_DTYPES = (torch.int64, torch.int32)
_INDEX_HINTS = {torch.uint8: 255, torch.int8: 127, torch.int16: 32767}


def check_edge_index(edge_index: Tensor, adjacency: bool = False) -> Tensor:
    """Checks ``edge_index`` is an int64 or int32 ``[2, num_edges]`` tensor (``adjacency``:
    or a sparse adjacency, which :func:`check_graph` checks)."""
    if adjacency and is_sparse(edge_index):
        return edge_index
    if not isinstance(edge_index, Tensor):
        kind = " or a sparse adjacency" if adjacency else ""
        raise ValueError(
            f"`edge_index` must be a tensor of shape [2, num_edges]{kind} (got "
            f"{type(edge_index).__name__ if adjacency else type(edge_index)})"
        )
    shape = list(edge_index.shape)
    if edge_index.dim() == 2 and edge_index.size(1) == 2 and edge_index.size(0) != 2:
        raise ValueError(
            f"`edge_index` must have shape [2, num_edges] (got {shape}, which looks "
            "transposed: pass edge_index.t())"
        )
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"`edge_index` must have shape [2, num_edges] (got {shape})")
    if edge_index.is_floating_point() or edge_index.is_complex():
        raise ValueError(
            f"`edge_index` must be an integer tensor (got {edge_index.dtype}); node indices "
            "are integers, e.g. edge_index.long()"
        )
    if edge_index.dtype not in INDEX_DTYPES:
        high = _INDEX_HINTS.get(edge_index.dtype)
        hint = "" if high is None else f", which holds node ids up to {high} only"
        hint = ": a mask, not node indices)" if edge_index.dtype == torch.bool else hint + ")"
        raise ValueError(
            f"`edge_index` must be an int64 or int32 tensor (got {edge_index.dtype}{hint}"
            + ("" if edge_index.dtype == torch.bool else "; cast it with edge_index.long()")
        )
    return edge_index


def check_features(x: Tensor) -> Tensor:
    """Checks ``x`` is a ``[num_nodes, num_features]`` tensor (dense or sparse)."""
    if not (isinstance(x, Tensor) and x.dim() == 2):
        shape = list(x.shape) if isinstance(x, Tensor) else type(x)
        raise ValueError(f"`x` must be a tensor of shape [num_nodes, num_features] (got {shape})")
    return x


def check_input_width(x: Tensor, encoder) -> None:
    """Checks ``x`` is ``[num_nodes, encoder.in_channels]`` where the encoder states a width."""
    width = getattr(encoder, "in_channels", None)
    known = isinstance(x, Tensor) and isinstance(width, int) and width > 0
    if known and (x.dim() != 2 or x.size(1) != width):
        got = f"{x.size(1)} features per node" if x.dim() == 2 else f"shape {list(x.shape)}"
        raise ValueError(
            f"`x` must have shape [num_nodes, {width}] (the encoder's in_channels = {width}) "
            f"(got {got})"
        )


# A graph's tensors reach native code that does not check indices: :func:`check_graph`
# runs wherever a user's graph enters, remembering nothing between calls; a graph derived
# from a checked one (augmented views, sampled batches) is passed on with ``check=False``.

_SPARSE_COMPRESSED = {
    torch.sparse_csr: ("crow_indices", "col_indices"),
    torch.sparse_csc: ("ccol_indices", "row_indices"),
}


def accepts_check(module) -> bool:
    """Whether ``module``'s ``forward`` takes the ``check`` keyword of the package's."""
    try:
        return "check" in inspect.signature(module.forward).parameters
    except (AttributeError, TypeError, ValueError):
        return False


@torch.compiler.disable  # (host reads: it runs eagerly under torch.compile)
def check_graph(
    x: Optional[Tensor],
    edge_index,
    edge_weight: Optional[Tensor] = None,
    *,
    num_nodes: Optional[int] = None,
) -> None:
    """Checks a graph before it reaches native code; a ``ValueError`` names the argument
    and what was found.

    * ``x``: a 2-D floating-point tensor, dense or sparse, of finite values (``None``
      only with ``num_nodes``, which defaults to ``x.size(0)``).
    * ``edge_index``: an integer ``[2, num_edges]`` tensor with entries in ``[0,
      num_nodes)``, or a sparse adjacency (torch.sparse, ``torch_sparse.SparseTensor``)
      of size ``[num_nodes, num_nodes]``.
    * ``edge_weight``: ``None`` or ``num_edges`` finite floating-point values ``>= 0``.

    One pass over each tensor, read on the host at once (one synchronisation on a GPU).
    """
    with torch.no_grad():  # (learnable features or weights: no graph for the reductions)
        nodes = _check_x_form(x, num_nodes)
        check_edge_index(edge_index, adjacency=True)
        _check_edge_weight_form(edge_weight, edge_index)
        adjacency = is_sparse(edge_index)
        x_sum, index_range, weight_range = _read_on_host(
            None if x is None else (_stored_values(x).sum(),),
            None if adjacency else _extremes(edge_index),
            None if edge_weight is None else _extremes(edge_weight),
        )
        _report_x(x, x_sum)
        if adjacency:
            _check_adjacency(edge_index, nodes)
        else:
            _report_range("edge_index", index_range, nodes)
        _report_edge_weight(edge_weight, weight_range)


@torch.compiler.disable
def check_node_features(x: Tensor) -> None:
    """:func:`check_graph`'s checks of ``x`` alone (for models that ignore the graph)."""
    with torch.no_grad():
        _check_x_form(x, None)
        _report_x(x, _read_on_host((_stored_values(x).sum(),))[0])


def _extremes(values: Tensor) -> Optional[tuple[Tensor, Tensor]]:
    return None if values.numel() == 0 else tuple(torch.aminmax(values))


def _read_on_host(*parts: Optional[tuple[Tensor, ...]]) -> list[Optional[tuple[float, ...]]]:
    """The 0-d tensors of ``parts`` as Python floats, copied to the host together."""
    flat = [t for part in parts if part is not None for t in part]
    if not flat:
        return list(parts)
    device = flat[0].device if flat[0].device.type != "mps" else torch.device("cpu")  # no f64
    values = iter(torch.stack([t.to(device, torch.float64) for t in flat]).tolist())
    return [None if part is None else tuple(next(values) for _ in part) for part in parts]


def _stored_values(x: Tensor) -> Tensor:
    """The values ``x`` stores: all of a dense tensor, the non-zeros of a sparse one."""
    if x.layout == torch.strided:
        return x
    return x._values() if x.layout == torch.sparse_coo else x.values()


def _check_x_form(x: Optional[Tensor], num_nodes: Optional[int]) -> int:
    """Checks the node features' shape and type; returns the number of nodes."""
    if x is None:
        if num_nodes is None:
            raise ValueError("`x` is None: pass node features, or `num_nodes` without them")
        return check_int("num_nodes", num_nodes, minimum=0)
    if not isinstance(x, Tensor) or x.dim() != 2:
        shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"`x` must be a tensor of shape [num_nodes, num_features] (got {shape})")
    if not x.is_floating_point():
        raise ValueError(
            f"`x` must be a floating-point tensor (got {x.dtype}); cast integer or boolean "
            "features once with x.float()"
        )
    if num_nodes is not None and x.size(0) != check_int("num_nodes", num_nodes, minimum=0):
        raise ValueError(f"`x` must have num_nodes = {num_nodes} rows (got {x.size(0)})")
    return x.size(0)


def _report_x(x: Optional[Tensor], total: Optional[tuple[float]]) -> None:
    """Refuses non-finite features, given ``(sum,)`` of their stored values (counted where
    the sum is not finite: it may have overflowed)."""
    if x is None or total is None or math.isfinite(total[0]):
        return
    bad = int((~torch.isfinite(_stored_values(x))).sum())
    if bad:
        raise ValueError(f"`x` has {bad} NaN or infinite value(s); node features must be finite")


def _report_range(name: str, extremes: Optional[tuple[float, float]], size: int) -> None:
    """Refuses node indices outside ``[0, size)``, given their ``(min, max)``."""
    if extremes is None:
        return
    low, high = (int(v) for v in extremes)
    if low < 0:
        raise ValueError(
            f"`{name}` has negative node indices (min {low}); entries must lie in [0, {size})"
        )
    if high >= size:
        raise ValueError(
            f"`{name}` has node indices >= num_nodes = {size} (max {high}); entries must "
            f"lie in [0, {size})"
        )


def _check_adjacency(adj, num_nodes: int) -> None:
    """Checks a sparse adjacency's size and stored indices (torch and ``torch_sparse`` check
    neither); block layouts (BSR / BSC) by size only."""
    size = [int(adj.size(0)), int(adj.size(1))]
    if size != [num_nodes, num_nodes]:
        raise ValueError(
            f"`edge_index` (a sparse adjacency) must have size [num_nodes, num_nodes] = "
            f"[{num_nodes}, {num_nodes}] (got {size})"
        )
    index = None
    if not isinstance(adj, Tensor):  # torch_sparse.SparseTensor
        index = torch.stack(adj.coo()[:2])
    elif adj.layout == torch.sparse_coo:
        index = adj._indices()
    elif adj.layout in _SPARSE_COMPRESSED:
        compressed, plain = (getattr(adj, name)() for name in _SPARSE_COMPRESSED[adj.layout])
        ptr_ok = compressed.numel() == num_nodes + 1 and int(compressed[0]) == 0
        ptr_ok = ptr_ok and int(compressed[-1]) == plain.numel()
        if not (ptr_ok and bool((compressed.diff() >= 0).all())):
            raise ValueError(
                f"`edge_index` (a sparse {adj.layout} adjacency) has invalid compressed indices"
            )
        index = plain
    if index is not None:
        _report_range("edge_index", _read_on_host(_extremes(index))[0], num_nodes)


def _check_edge_weight_form(edge_weight: Optional[Tensor], edge_index) -> None:
    """Checks edge weights' shape and type: 1-D, one per edge, floating point."""
    if edge_weight is None:
        return
    if not isinstance(edge_weight, Tensor) or edge_weight.dim() != 1:
        shape = list(edge_weight.shape) if isinstance(edge_weight, Tensor) else type(edge_weight)
        raise ValueError(f"`edge_weight` must be a 1-D tensor [num_edges] (got {shape})")
    if not is_sparse(edge_index) and edge_weight.numel() != edge_index.size(1):
        raise ValueError(
            f"`edge_weight` must have one entry per edge, num_edges = {edge_index.size(1)} "
            f"(got {edge_weight.numel()})"
        )
    if not edge_weight.is_floating_point():
        raise ValueError(
            f"`edge_weight` must be a floating-point tensor (got {edge_weight.dtype}); cast "
            "it with edge_weight.float()"
        )


def _report_edge_weight(
    edge_weight: Optional[Tensor], extremes: Optional[tuple[float, float]]
) -> None:
    """Refuses non-finite or negative edge weights, given their ``(min, max)``."""
    if edge_weight is None or extremes is None:
        return
    low, high = extremes
    if not (math.isfinite(low) and math.isfinite(high)):
        bad = int((~torch.isfinite(edge_weight)).sum())
        raise ValueError(
            f"`edge_weight` has {bad} NaN or infinite value(s); weights must be finite"
        )
    if low < 0:
        raise ValueError(f"`edge_weight` has negative weights (min {low}); weights must be >= 0")
