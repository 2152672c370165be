"""The contract every loss shares: ``forward → compute_loss → reduce``."""

from __future__ import annotations

import contextlib
import math
import os
from typing import Optional

import torch
from torch import Tensor

from .._checks import (
    check_bool,
    check_choice,
    check_int,
    check_optional,
    check_positive,
    check_views,
    check_within,
)
from .._compat import is_compiling
from ._engine import NegativeBlock, Plan, contrastive_losses, full_precision

__all__ = ["ContrastiveLoss"]

REDUCTIONS = ("mean", "sum", "none")

#: The share of the device's free memory a step may take without ``memory_budget``.
MEMORY_FRACTION = 0.5

#: The temperatures a loss accepts (docs/design.md, *Input validation*).
TAU_RANGE = (1e-20, 1e20)


class ContrastiveLoss(torch.nn.Module):
    r"""Base of every loss: the symmetric objective of GRACE (docs/algorithms.md §1),

    .. math::
        J = \frac{1}{2N} \sum_{i=1}^{N} \big[\ell(u_i) + \ell(v_i)\big], \qquad
        \ell(u_i) = -\log \frac{e^{\theta(u_i, v_i)/\tau}}{e^{\theta(u_i, v_i)/\tau} + Ng_i},

    over the anchors of both projected views ``u = h1``, ``v = h2`` (``θ`` the cosine
    similarity). A subclass supplies :meth:`negative_term` or :meth:`compute_loss`
    (docs/own_loss.md).

    Args:
        tau: Temperature :math:`\tau` in ``[1e-20, 1e20]`` (``TAU_RANGE``).
        block_size: Anchors per row block (exact, ``O(B·N)`` memory); ``None``: as
            :meth:`plan` says.
        num_negatives: ``k`` sampled negatives per anchor and view instead of all.
        reduction: ``'mean'`` (``J``), ``'sum'`` (``2N·J``) or ``'none'`` (``[2, N]``).
        memory_budget: Bytes the step's ``N×N`` (or ``B×N``) matrices may take; ``None``:
            ``MEMORY_FRACTION`` of the device's free memory at each call.
        compile_blocks: Fuses each row or sampled block with ``torch.compile`` (design.md).
    """

    #: ``B×C`` matrices a step holds at its peak (measured, docs/design.md).
    peak_matrices = 5

    def __init__(
        self,
        tau: float = 0.5,
        block_size: Optional[int] = None,
        num_negatives: Optional[int] = None,
        reduction: str = "mean",
        memory_budget: Optional[float] = None,
        compile_blocks: bool = False,
    ):
        super().__init__()
        why = "where float32 logits θ/τ and gradients stay exact; in use: 0.05 .. 2"
        self.tau = check_within("tau", tau, *TAU_RANGE, why)
        self.block_size = check_optional(check_int, "block_size", block_size, 1)
        self.num_negatives = check_optional(check_int, "num_negatives", num_negatives, 1)
        self.reduction = check_choice("reduction", reduction, REDUCTIONS)
        self.memory_budget = check_optional(check_positive, "memory_budget", memory_budget)
        self.compile_blocks = check_bool("compile_blocks", compile_blocks)

    def reset_parameters(self):
        """Losses without state have nothing to reset."""

    def negative_term(self, block: NegativeBlock) -> Tensor:
        """``[B]`` shifted ``log Ng_i`` of the block's anchors; every subclass defines it."""
        raise NotImplementedError

    def forward(self, h1: Tensor, h2: Tensor) -> Tensor:
        """The reduced loss of two projected views ``h1``, ``h2`` ``[N, d]``, in float32 (or
        float64) under autocast too; a subclass overrides :meth:`compute_loss` instead."""
        self.check_inputs(h1, h2)
        with full_precision(h1):
            if type(self).compute_loss is not ContrastiveLoss.compute_loss:  # (its own)
                return self.reduce(self.compute_loss(h1, h2))
            rows, reduced = slice(0, h1.size(0)), self.reduction != "none"
            return self.reduce(contrastive_losses(self, h1, h2, rows, reduced))

    def compute_loss(self, h1: Tensor, h2: Tensor, anchors: Optional[slice] = None) -> Tensor:
        """``[2, M]`` losses ``ℓ(u_i)`` (row 0) and ``ℓ(v_i)`` (row 1) of checked views
        ``[N, d]`` for the rows ``anchors`` (a ``slice`` of step 1; default: all), each
        against all ``N`` nodes; :meth:`forward` and ``DistributedLoss`` call it."""
        return contrastive_losses(self, h1, h2, anchor_rows(anchors, h1.size(0)))

    def plan(self, h: Tensor, anchors: Optional[slice] = None) -> Plan:
        """The path and block size for views like ``h``: ``'dense'`` where
        :attr:`peak_matrices` ``N×N`` matrices fit the budget (or ``block_size >= N``), else
        ``'rows'`` as large as it allows, or ``'sampled'`` (docs/design.md)."""
        n, k, block_size = h.size(0), self.num_negatives, self.block_size
        rows = anchor_rows(anchors, n)
        m = rows.stop - rows.start
        budget = self.memory_budget
        if budget is None:
            budget = math.inf if is_compiling() else MEMORY_FRACTION * free_memory(h.device)
        itemsize = h.dtype.itemsize if h.dtype in (torch.float32, torch.float64) else 4
        unit = max(self.peak_matrices * (n if k is None else k + 1) * itemsize, 1)
        fitting = m if budget >= unit * m else int(budget // unit)
        size = max(1, min(m, block_size or fitting))
        if k is not None:
            return Plan("sampled", size)
        if m == n and (block_size or fitting) >= n:
            return Plan("dense", n)
        return Plan("rows", size)

    def reduce(self, losses: Tensor) -> Tensor:
        """Applies the loss's ``reduction`` to per-anchor ``losses``."""
        if self.reduction == "mean":
            return losses.mean()
        return losses.sum() if self.reduction == "sum" else losses

    def check_inputs(self, h1: Tensor, h2: Tensor) -> None:
        """Checks the views and what the loss's options need; :meth:`forward` calls it first."""
        check_views(h1, h2)
        if self.num_negatives is not None and self.num_negatives >= h1.size(0):
            raise ValueError(
                f"`num_negatives` must be < the number of nodes N={h1.size(0)} "
                f"(got {self.num_negatives})"
            )

    def extra_repr(self) -> str:
        options = {**self._options(), "block_size": self.block_size}
        options.update(num_negatives=self.num_negatives, compile_blocks=self.compile_blocks or None)
        parts = [f"tau={self.tau:g}"] + [f"{k}={v!r}" for k, v in options.items() if v is not None]
        if self.memory_budget is not None:
            parts.append(f"memory_budget={self.memory_budget:g}")
        if self.reduction != "mean":
            parts.append(f"reduction={self.reduction!r}")
        return ", ".join(parts)

    def _options(self) -> dict:
        return {}


def free_memory(device: torch.device) -> int:
    """Bytes free on ``device`` (``mem_get_info``, else the host's ``MemAvailable``)."""
    backend = getattr(torch, device.type, None)
    if device.type != "cpu" and hasattr(backend, "mem_get_info"):
        return int(backend.mem_get_info(device)[0])
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def anchor_rows(anchors: Optional[slice], num_nodes: int) -> slice:
    """``anchors`` (default: all rows) as a ``slice(start, stop)`` within ``num_nodes``."""
    if anchors is None:
        return slice(0, num_nodes)
    if not isinstance(anchors, slice) or anchors.step not in (None, 1):
        raise ValueError(f"`anchors` must be a slice of consecutive rows, step 1 (got {anchors!r})")
    start, stop, _ = anchors.indices(num_nodes)
    return slice(start, max(start, stop))
