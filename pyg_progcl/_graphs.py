"""The check of a graph where a user's graph enters (:func:`check_graph`); a graph derived
from a checked one (augmented views, sampled batches) is passed on with ``check=False``."""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import is_sparse

from ._checks import check_edge_index, check_features, check_int

_SPARSE_COMPRESSED = {
    torch.sparse_csr: ("crow_indices", "col_indices"),
    torch.sparse_csc: ("ccol_indices", "row_indices"),
}


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
            None if x is None else (stored_values(x).sum(),),
            None if adjacency else _extremes(edge_index),
            None if edge_weight is None else _extremes(edge_weight),
        )
        if x_sum is not None and not math.isfinite(x_sum[0]):  # (or an overflowing sum)
            bad = int((~torch.isfinite(stored_values(x))).sum())
            if bad:
                raise ValueError(
                    f"`x` has {bad} NaN or infinite value(s); node features must be finite"
                )
        if adjacency:
            _check_adjacency(edge_index, nodes)
        else:
            _report_range("edge_index", index_range, nodes)
        if weight_range is not None and not all(map(math.isfinite, weight_range)):
            bad = int((~torch.isfinite(edge_weight)).sum())
            raise ValueError(
                f"`edge_weight` has {bad} NaN or infinite value(s); weights must be finite"
            )
        if weight_range is not None and weight_range[0] < 0:
            raise ValueError(
                f"`edge_weight` has negative weights (min {weight_range[0]}); weights must be >= 0"
            )


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


def stored_values(x: Tensor) -> Tensor:
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
    if not check_features(x).is_floating_point():
        raise ValueError(
            f"`x` must be a floating-point tensor (got {x.dtype}); cast integer or boolean "
            "features once with x.float()"
        )
    if num_nodes is not None and x.size(0) != check_int("num_nodes", num_nodes, minimum=0):
        raise ValueError(f"`x` must have num_nodes = {num_nodes} rows (got {x.size(0)})")
    return x.size(0)


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
