"""The contract every loss shares: ``forward → compute_loss → reduce``."""

from __future__ import annotations

import math
import os
from typing import Optional

import torch
from torch import Tensor

from .._checks import check_choice, check_int, check_positive, check_views
from .._compat import is_compiling
from ._engine import NegativeBlock, Plan, contrastive_losses, full_precision, normalize_views

__all__ = ["ContrastiveLoss"]

REDUCTIONS = ("mean", "sum", "none")

#: The share of the device's free memory (CUDA: ``torch.cuda.mem_get_info``; CPU: the
#: kernel's ``MemAvailable``) that a loss step's matrices may take when no
#: ``memory_budget`` is given: the rest is the model's, the optimiser's and the allocator's.
MEMORY_FRACTION = 0.5

#: The temperatures a loss accepts: float32 losses (up to ``2/τ + log 2N`` per anchor),
#: their sums and gradients stay finite, and logits ``(θ-1)/τ`` keep float32's resolution
#: of ``θ``, with margin on both sides (docs/design.md, *Input validation*).
TAU_RANGE = (1e-20, 1e20)


class ContrastiveLoss(torch.nn.Module):
    r"""Base of every loss: the symmetric objective of GRACE (docs/algorithms.md §1),

    .. math::
        J = \frac{1}{2N} \sum_{i=1}^{N} \big[\ell(u_i) + \ell(v_i)\big], \qquad
        \ell(u_i) = -\log \frac{e^{\theta(u_i, v_i)/\tau}}{e^{\theta(u_i, v_i)/\tau} + Ng_i},

    over the anchors of both projected views ``u = h1``, ``v = h2`` (``θ`` the cosine
    similarity). A subclass supplies :meth:`negative_term`, which maps a
    :class:`~pyg_progcl.losses.NegativeBlock` of anchors to their ``log Ng_i``; the loss
    computes every anchor's loss with it, exact, on one of three paths (:meth:`plan`), and
    :meth:`reduce` applies the ``reduction``. A subclass that computes its per-anchor
    losses otherwise overrides :meth:`compute_loss` instead (docs/own_loss.md).

    Args:
        tau: Temperature :math:`\tau` in ``[1e-20, 1e20]`` (``TAU_RANGE``: float32
            logits :math:`\theta/\tau` and their gradients stay finite and exact).
        block_size: Anchors per row block (exact, ``O(B·N)`` memory; a block's gradient is
            taken as it is computed, or it is recomputed in backward where per-anchor
            losses are returned). ``None`` computes all anchors at once where the loss's ``N×N``
            matrices fit ``memory_budget``, else in blocks as large as it allows
            (:meth:`plan`); ``block_size >= N`` forces all anchors at once.
        num_negatives: ``k`` sampled negatives per anchor and view (``2k`` in all)
            instead of all ``2(N-1)``; ``None`` uses all of them.
        reduction: ``'mean'`` (``J``), ``'sum'`` (``2N·J``) or ``'none'``: the ``[2, N]``
            losses ``ℓ(u_i)`` (row 0) and ``ℓ(v_i)`` (row 1), as torch's losses take it.
        memory_budget: Bytes the step's ``N×N`` (or ``B×N``) matrices may take; ``None``:
            half the device's free memory at each call (unbounded under ``torch.compile``).
    """

    #: How many ``B×C`` matrices of the computing dtype a step of the loss holds at its
    #: peak (forward and backward; measured, docs/design.md): the budget's unit.
    peak_matrices = 5

    def __init__(
        self,
        tau: float = 0.5,
        block_size: Optional[int] = None,
        num_negatives: Optional[int] = None,
        reduction: str = "mean",
        memory_budget: Optional[float] = None,
    ):
        super().__init__()
        self.tau = check_positive("tau", tau)
        if not TAU_RANGE[0] <= self.tau <= TAU_RANGE[1]:
            raise ValueError(
                f"`tau` must lie in [{TAU_RANGE[0]:g}, {TAU_RANGE[1]:g}], where float32 "
                f"logits θ/τ and their gradients stay finite and exact (got {self.tau:g}); "
                "temperatures in use lie in 0.05 .. 2"
            )
        self.block_size = None if block_size is None else check_int("block_size", block_size, 1)
        self.num_negatives = (
            None if num_negatives is None else check_int("num_negatives", num_negatives, 1)
        )
        self.reduction = check_choice("reduction", reduction, REDUCTIONS)
        self.memory_budget = (
            None if memory_budget is None else check_positive("memory_budget", memory_budget)
        )

    def reset_parameters(self):
        """Losses without state have nothing to reset."""

    def negative_term(self, block: NegativeBlock) -> Tensor:
        """``[B]`` shifted ``log Ng_i`` of the block's anchors (logits ``(θ - 1)/τ``: the
        shift cancels in the loss); every subclass defines it."""
        raise NotImplementedError

    def forward(self, h1: Tensor, h2: Tensor) -> Tensor:
        """The loss of two projected views ``h1``, ``h2`` of shape ``[N, d]``, reduced.

        Computed in float32 (float64 for float64 views) under autocast too: half-precision
        views are upcast and autocast is off inside the loss. A subclass overrides
        :meth:`compute_loss`, not this method:
        :class:`~pyg_progcl.distributed.DistributedLoss` calls ``compute_loss`` and
        refuses a loss whose ``forward`` is its own."""
        self.check_inputs(h1, h2)
        with full_precision(h1):
            if type(self).compute_loss is not ContrastiveLoss.compute_loss:  # (its own)
                return self.reduce(self.compute_loss(h1, h2))
            return self.reduce(self._losses(h1, h2, None, reduced=self.reduction != "none"))

    def compute_loss(self, h1: Tensor, h2: Tensor, anchors: Optional[slice] = None) -> Tensor:
        """Per-anchor losses ``ℓ(u_i)`` (row 0) and ``ℓ(v_i)`` (row 1) of checked views.

        The extension point beside :meth:`negative_term`: a subclass may override it to
        compute its losses its own way; :meth:`forward` and
        :class:`~pyg_progcl.distributed.DistributedLoss` both call it.

        Args:
            h1, h2: The projected views ``[N, d]`` (checked by :meth:`check_inputs`).
            anchors: The rows whose losses are returned (a ``slice`` of step 1), each
                against all ``N`` nodes (default: all). ``DistributedLoss`` passes a rank's
                own rows; an override without this argument is called on all rows there
                and its losses cut to the rank's, ``W`` times the work.

        Returns:
            ``[2, M]`` losses of the ``M`` anchors (``[2, N]`` by default).
        """
        return self._losses(h1, h2, anchors)

    def _losses(self, h1: Tensor, h2: Tensor, anchors: Optional[slice], reduced=False):
        rows = anchor_rows(anchors, h1.size(0))
        how = self.plan(h1, rows)
        u, v = normalize_views(h1, h2)
        term, k = self.negative_term, self.num_negatives
        return contrastive_losses(u, v, self.tau, term, how, rows, k, reduced)

    def plan(self, h: Tensor, anchors: Optional[slice] = None) -> Plan:
        """The path and block size this loss takes for views like ``h`` (``[N, d]``).

        All anchors at once (``'dense'``) when :attr:`peak_matrices` ``N×N`` matrices of
        the computing dtype fit the memory budget (or ``block_size >= N``), else row blocks
        (``'rows'``) as large as it allows, or ``'sampled'`` blocks of ``k + 1`` columns
        with ``num_negatives``; ``block_size`` overrides the budget. The budget is
        ``memory_budget``, else ``MEMORY_FRACTION`` of the device's free memory (under
        ``torch.compile``, which plans memory itself: unbounded)."""
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
        """Checks the views and what the loss's options need of them (subclasses add
        their own checks); :meth:`forward` calls it first."""
        check_views(h1, h2)
        if self.num_negatives is not None and self.num_negatives >= h1.size(0):
            raise ValueError(
                f"`num_negatives` must be < the number of nodes N={h1.size(0)} "
                f"(got {self.num_negatives})"
            )

    def extra_repr(self) -> str:
        options = {**self._options(), "block_size": self.block_size}
        options["num_negatives"] = self.num_negatives
        parts = [f"tau={self.tau:g}"] + [f"{k}={v!r}" for k, v in options.items() if v is not None]
        if self.memory_budget is not None:
            parts.append(f"memory_budget={self.memory_budget:g}")
        if self.reduction != "mean":
            parts.append(f"reduction={self.reduction!r}")
        return ", ".join(parts)

    def _options(self) -> dict:
        return {}


def free_memory(device: torch.device) -> int:
    """Bytes free on ``device``: ``mem_get_info`` where its backend has one (CUDA), else the
    host's available memory (``MemAvailable`` of ``/proc/meminfo``, or free pages)."""
    backend = getattr(torch, device.type, None)
    if device.type != "cpu" and hasattr(backend, "mem_get_info"):
        return int(backend.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def anchor_rows(anchors: Optional[slice], num_nodes: int) -> slice:
    """``anchors`` (default: all rows) as a ``slice(start, stop)`` within ``num_nodes``."""
    if anchors is None:
        return slice(0, num_nodes)
    if not isinstance(anchors, slice) or anchors.step not in (None, 1):
        raise ValueError(f"`anchors` must be a slice of consecutive rows, step 1 (got {anchors!r})")
    start, stop, _ = anchors.indices(num_nodes)
    return slice(start, max(start, stop))
