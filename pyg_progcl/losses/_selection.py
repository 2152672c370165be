"""The ``k`` largest entries of each row, in a canonical order: ProGCL-mix's selection of
the hardest negatives (docs/algorithms.md §5.3)."""

from __future__ import annotations

import torch
from torch import Tensor


def largest(x: Tensor, k: int) -> Tensor:
    """Column indices of the ``k`` largest entries of each row of ``x``, ascending.

    Ties at the ``k``-th value go to the lowest columns. The order is thus canonical,
    whatever the selection algorithm (π pairs positions, so the order decides the pairs).

    Args:
        x: A ``[B, N]`` matrix without NaN.
        k: How many entries to take from each row (all ``N`` if ``k >= N``).

    Returns:
        ``[B, min(k, N)]`` column indices (int64).
    """
    n = x.size(1)
    if k >= n:
        return torch.arange(n, device=x.device).expand(x.size(0), n)
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
