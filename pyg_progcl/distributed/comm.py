"""Collectives of the distributed losses: a gather with per-rank gradients, a sum, a check."""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor

__all__: list[str] = []

Group = Optional[dist.ProcessGroup]


def world(group: Group = None) -> tuple[int, int]:
    """``(rank, world size)`` of this process in ``group``; a clear error without one."""
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            "pyg_progcl.distributed needs an initialised default process group "
            "(torch.distributed.init_process_group, or a launcher such as torchrun)"
        )
    return dist.get_rank(group), dist.get_world_size(group)


def all_reduce_sum(x: Tensor, group: Group = None) -> Tensor:
    """The sum of ``x`` over the ranks (a new tensor; ``x`` is left as it is)."""
    out = x.clone()
    dist.all_reduce(out, group=group)
    return out


def same_rows(x: Tensor, name: str, group: Group = None) -> None:
    """Checks every rank passes ``x`` with as many rows: a ``ValueError`` on every rank
    (the same message) if not, before any collective that would hang on it."""
    sizes = [torch.zeros(1, dtype=torch.long, device=x.device) for _ in range(world(group)[1])]
    dist.all_gather(sizes, torch.tensor([x.size(0)], device=x.device), group=group)
    counts = [int(s) for s in sizes]
    if len(set(counts)) > 1:
        raise ValueError(
            f"`{name}` must have as many rows on every rank (the local part of an equal "
            f"split of the global batch); got {counts} by rank"
        )


class _AllGather(torch.autograd.Function):
    """Forward: the rows of every rank, rank by rank. Backward: the gradient summed over
    the ranks (each rank's loss reads every rank's rows), then this rank's rows of it."""

    @staticmethod
    def forward(ctx, x: Tensor, group: Group) -> Tensor:
        rank, size = world(group)
        parts = [torch.empty_like(x) for _ in range(size)]
        dist.all_gather(parts, x.contiguous(), group=group)
        ctx.group, ctx.rows = group, slice(rank * x.size(0), (rank + 1) * x.size(0))
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return all_reduce_sum(grad.contiguous(), ctx.group)[ctx.rows], None


def all_gather_with_grad(x: Tensor, group: Group = None) -> Tensor:
    """Every rank's ``x`` (equal shapes), concatenated in rank order; the gradient reaching
    this rank's ``x`` is the sum over ranks of each rank's gradient on those rows."""
    return _AllGather.apply(x, group)
