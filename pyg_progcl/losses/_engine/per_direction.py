"""Per-anchor losses one direction at a time, from blocks of anchors (any negative term).

* dense: one block of all ``N`` anchors per direction; the inter-view Gram matrix of the
  second direction is the transpose of the first (three matrix products, not four);
* row blocks of ``B`` anchors against all ``N`` nodes, each recomputed in backward
  (``torch.utils.checkpoint``), so only one block's ``B×N`` intermediates are alive;
* ``k`` sampled negatives per anchor, shared by a block of anchors (a ``B×(k+1)`` product).

Every negative term works here, in log space where it must (ProGCL-mix, temperatures
whose exponentials underflow, sampled negatives, underflowed ProGCL weights).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .blocks import LogNegatives, Rows, anchor_losses, dense_blocks, row_block, sampled_block


def dense_losses(u: Tensor, v: Tensor, tau: float, log_negatives: LogNegatives) -> Tensor:
    """``[2, N]`` losses of the anchors ``u_i`` (row 0) and ``v_i`` (row 1), all at once."""
    return torch.stack([anchor_losses(b, log_negatives) for b in dense_blocks(u, v, tau)])


def row_block_losses(
    u: Tensor,
    v: Tensor,
    tau: float,
    log_negatives: LogNegatives,
    block_size: int,
    anchors: slice | None = None,
) -> Tensor:
    """``[2, M]`` losses of the ``anchors`` (default: all) from row blocks of
    ``block_size`` anchors against all nodes, direction by direction."""
    lo, hi, _ = (anchors or slice(0, u.size(0))).indices(u.size(0))
    directions = []
    for view, (a, o) in enumerate(((u, v), (v, u))):
        blocks = []
        for start in range(lo, hi, block_size):
            args = (a, o, slice(start, min(start + block_size, hi)), view)
            blocks.append(block_losses(row_block, args, tau, log_negatives))
        directions.append(torch.cat(blocks))
    return torch.stack(directions)


def sampled_losses(
    u: Tensor,
    v: Tensor,
    tau: float,
    log_negatives: LogNegatives,
    block_size: int,
    num_negatives: int,
    generator: torch.Generator | None = None,
    anchors: slice | None = None,
) -> Tensor:
    """``[2, M]`` losses of the ``anchors`` (default: all) with ``num_negatives`` uniformly
    sampled negatives (among all nodes) per anchor and view, one sample shared by each
    block of anchors (drawn block by block, view 0 first)."""
    n = u.size(0)
    lo, hi, _ = (anchors or slice(0, n)).indices(n)
    directions = []
    for view, (a, o) in enumerate(((u, v), (v, u))):
        blocks = []
        for start in range(lo, hi, block_size):
            cols = torch.randperm(n, generator=generator, device="cpu")[: num_negatives + 1]
            rows = slice(start, min(start + block_size, hi))
            args = (a, o, rows, view, cols.to(a.device))
            blocks.append(block_losses(sampled_block, args, tau, log_negatives))
        directions.append(torch.cat(blocks))
    return torch.stack(directions)


def chosen_anchor_losses(
    u: Tensor,
    v: Tensor,
    tau: float,
    log_negatives: LogNegatives,
    chosen: Tensor,
    block_size: int,
    first: int = 0,
) -> Tensor:
    """The losses of the anchors ``first + i`` where ``chosen[view, i]`` holds, against all
    nodes, in row blocks; in the order of ``chosen.nonzero()``."""
    out = []
    for view, (a, o) in enumerate(((u, v), (v, u))):
        rows = chosen[view].nonzero().view(-1) + first
        for start in range(0, rows.numel(), block_size):
            args = (a, o, rows[start : start + block_size], view)
            out.append(block_losses(row_block, args, tau, log_negatives))
    return torch.cat(out)


def block_losses(make: Callable, args: tuple, tau: float, log_negatives: LogNegatives) -> Tensor:
    """The losses of the block ``make(*args, tau)``, recomputed in backward when it needs a
    gradient (only one block's ``B×N`` intermediates are alive at a time)."""

    def losses(*inputs: Tensor | Rows | int) -> Tensor:
        return anchor_losses(make(*inputs, tau), log_negatives)

    if torch.is_grad_enabled() and any(t.requires_grad for t in args if isinstance(t, Tensor)):
        return checkpoint(losses, *args, use_reentrant=False)
    return losses(*args)
