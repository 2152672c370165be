"""The ``k`` largest entries of each row, in a canonical order: ProGCL-mix's selection of
the hardest negatives (docs/algorithms.md §5.3)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ._engine import thread_pool

#: Elements per row chunk of a CPU selection (2 MiB of float32): the chunks run on
#: ``torch.get_num_threads()`` threads, since numpy releases the GIL in its loops.
SELECT_CHUNK_ELEMENTS = 1 << 19


def largest(x: Tensor, k: int, nonnegative: bool = False) -> Tensor:
    """Column indices of the ``k`` largest entries of each row of ``x``, ascending; ties at
    the ``k``-th value go to the lowest columns. The order is thus canonical, whatever the
    selection algorithm (π pairs positions, so the order decides the pairs).

    ``nonnegative``: the caller guarantees every entry is ``+0`` or above; such floats
    order as their bit patterns do as integers, which the CPU partitions in ~0.7x the
    time."""
    n = x.size(1)
    if k >= n:
        return torch.arange(n, device=x.device).expand(x.size(0), n)
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        return _largest_numpy(x, k, nonnegative)  # (numpy has no bfloat16)
    kth = torch.topk(x, k, dim=1, sorted=False).values.amin(dim=1, keepdim=True)
    keep = x >= kth  # at least k per row
    if int(keep.sum()) > keep.size(0) * k:
        _first_ties(x, kth, keep, k)
    return torch.nonzero(keep, as_tuple=True)[1].view(x.size(0), k)


def _first_ties(x: Tensor, kth: Tensor, keep: Tensor, k: int) -> None:
    """Where ``keep = x >= kth`` holds more than ``k`` entries of a row (ties at the
    ``k``-th value), keeps the row's entries above ``kth`` and its first ties by column,
    as many as make ``k``, in place (one cumulative count of the ties per row)."""
    torch.gt(x, kth, out=keep)
    room = k - keep.sum(dim=1, keepdim=True, dtype=torch.int32)
    ties = x == kth
    keep |= ties & (ties.cumsum(dim=1, dtype=torch.int32) <= room)


def _largest_numpy(x: Tensor, k: int, nonnegative: bool) -> Tensor:
    """:func:`largest` with numpy's introselect and ``flatnonzero`` (together about a third
    of ``torch.topk`` plus ``torch.nonzero``), row chunks on parallel threads."""
    x = x.contiguous().numpy()  # (a transposed input is 8x slower to partition)
    if nonnegative:
        x = x.view(np.int32 if x.dtype == np.float32 else np.int64)
    out = np.empty((x.shape[0], k), dtype=np.int64)
    step = max(1, SELECT_CHUNK_ELEMENTS // x.shape[1])
    chunks = [slice(i, min(i + step, x.shape[0])) for i in range(0, x.shape[0], step)]
    threads = min(torch.get_num_threads(), len(chunks))
    if threads > 1:
        list(thread_pool(threads).map(lambda rows: _select_rows(x, k, out, rows), chunks))
    else:
        for rows in chunks:
            _select_rows(x, k, out, rows)
    return torch.from_numpy(out)


def _select_rows(x: np.ndarray, k: int, out: np.ndarray, rows: slice) -> None:
    """Writes :func:`largest` of ``x[rows]`` to ``out[rows]``."""
    x, n = x[rows], x.shape[1]
    kth = np.partition(x, n - k, axis=1)[:, n - k : n - k + 1]
    keep = x >= kth  # at least k per row
    if np.count_nonzero(keep) > keep.shape[0] * k:  # (in place: tensors share the arrays)
        _first_ties(*(torch.from_numpy(a) for a in (x, kth, keep)), k)
    flat = np.flatnonzero(keep).reshape(-1, k)  # flat indices, ascending in each row
    np.subtract(flat, np.arange(0, flat.shape[0] * n, n)[:, None], out=out[rows])
