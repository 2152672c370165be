"""ProGCL's negative terms on a block: negatives weighted by their hardness (weight), or
hard negatives synthesised from the hardest (mix) (docs/algorithms.md §5.2-5.3)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..mixture import BetaMixture
from ._engine import NegativeBlock, row_chunks, underflow_threshold

#: The default :math:`\epsilon` of ProGCL-mix's mixing formula.
MIX_EPS = 1e-8


class Hardness:
    """The hardness ``b = s'·p(TN | s')`` of a fitted mixture, on the blocks of one call.

    Args:
        mixture: The fitted :class:`~pyg_progcl.BetaMixture`.
        schedule: The loss's :class:`~pyg_progcl.losses.FitSchedule`: which similarities
            ``b`` comes from (:meth:`~pyg_progcl.losses.FitSchedule.weight_logits`) and its
            floor of ``p(TN | s')`` now.
    """

    def __init__(self, mixture: BetaMixture, schedule):
        self.mixture, self.schedule = mixture, schedule
        self.floor = schedule.posterior_floor

    @torch.no_grad()
    def weights(
        self, block: NegativeBlock, log: bool = True, view: Optional[int] = None
    ) -> tuple[Tensor, Tensor, bool]:
        """``(log b, log mean_k b, uniform)`` of the block's anchors (``[B, C]``, ``[B]``;
        with ``log=False``, ``b`` itself); ``uniform``: whether some rows were made uniform.

        Weights are scale-free, so ``b`` stays exact in log space however small it is. An
        anchor whose ``b`` all underflowed gets uniform weights (GRACE's row). On the dense
        path both views share one matrix: ``b`` of the first view's pairs, read transposed
        for the second (as it is with the schedule's ``shared_weights``); ``view`` asks for
        either view's there (default: the block's).
        """
        view = block.view if view is None else view
        own_view = 0 if self.schedule.shared_weights else view
        if block.dense:
            b, *sums = block.memo(f"b:{log}", lambda: self._hardness(block, 0, log))
            b, sums = (b.T, sums[1]) if own_view == 1 else (b, sums[0])
        else:
            b, sums, _ = self._hardness(block, own_view, log)
        small = sums < underflow_threshold(sums.dtype)
        if bool(small.any()):
            b = torch.where(small.unsqueeze(1), b.new_full((), 0.0 if log else 1.0), b)
            rows = torch.arange(b.size(0), device=b.device)
            b.index_put_((rows, block.excluded), b.new_full((), float("-inf") if log else 0.0))
            sums = torch.where(small, sums.new_full((), block.count), sums)
            return b, torch.log(sums / block.count), True
        return b, torch.log(sums / block.count), False

    def forget(self, block: NegativeBlock) -> None:
        """Drops the dense path's matrix of ``b`` from the call's values (ProGCL-mix needs
        only its selection)."""
        for log in (False, True):
            block.call.pop(f"b:{log}", None)

    def _hardness(self, block: NegativeBlock, view: int, log: bool) -> tuple[Tensor, ...]:
        """``b`` (or ``log b``) of the pairs of ``view``'s anchors, 0 (``-inf``) where
        excluded, and its sums over rows and (on the dense path) columns."""
        logits = self.schedule.weight_logits(block, view)
        b = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        for part in row_chunks(b):  # (the formula's passes on a chunk in cache)
            s = torch.mul(logits[part], block.tau / 2, out=b[part])
            self.mixture.hardness_(s.add_(1.0), self.floor)  # (θ+1)/2
        rows = torch.arange(b.size(0), device=b.device)
        b.index_put_((rows, rows if block.dense else block.excluded), b.new_zeros(()))
        sums = b.sum(dim=1), b.sum(dim=0) if block.dense else None
        return b.log_() if log else b, *sums


def mixed_log_negatives(block: NegativeBlock, hardness: Hardness, num_mix: int, eps: float):
    r"""ProGCL-mix's ``log Ng``: GRACE's negatives plus
    :math:`\sum_a e^{\theta_{mix}(a)/\tau}`,
    :math:`\theta_{mix}(a) = (b_a\theta_a + b_{\pi(a)}\theta_{\pi(a)})/(b_a + b_{\pi(a)} + \epsilon)`
    over the ``num_mix`` inter-view negatives of largest ``b`` and a random pairing ``π``.

    The dense path selects both views' negatives at once, so that one inter-view matrix
    gives both views' logits. A row block's selection is kept in the call's values for its
    recomputation in backward (the same negatives, without selecting them again).
    """
    k = min(num_mix, block.count)
    if block.dense:
        both = block.memo("selection", lambda: _select_both(block, hardness, k))
        index, (_, b, perm) = (both[0][0], both[1][0]), both[block.view]
    else:
        key = ("selection", block.view, block.rows.start)
        selection = block.call.pop(key, None)
        if selection is None:
            selection = select_hardest(hardness.weights(block, log=False)[0], k)
            if torch.is_grad_enabled() and block.anchors.requires_grad:
                block.call[key] = selection
        index, b, perm = selection
    log_grace, logit = block._log_sum_exp_gathered(index)
    logit = logit.clamp(min=-2.0 / block.tau)  # (θ below -1: rounding)
    # (θ_mix - 1)/τ of the shifted logits: w θ_a + w_π θ_π(a) + c, without gradient in w, c
    b_pair = b.index_select(1, perm)
    norm = (b + b_pair).add_(eps).reciprocal_()
    mixed = logit * (b * norm)
    mixed = mixed.addcmul_(logit.index_select(1, perm), b_pair.mul_(norm))
    return torch.logaddexp(log_grace, mixed.sub_(norm.mul_(eps / block.tau)).logsumexp(dim=1))


def _select_both(block: NegativeBlock, hardness: Hardness, k: int) -> list[tuple]:
    """Both views' selections on the dense path; ``b`` itself is not needed after them."""
    selections = [select_hardest(hardness.weights(block, False, view)[0], k) for view in (0, 1)]
    hardness.forget(block)
    return selections


@torch.no_grad()
def select_hardest(b: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The ``k`` hardest negatives of each row (column indices, ascending), their ``b``, and
    a random pairing ``π`` of their positions. ``b`` is used as it is, as in the formula:
    where both ``b`` of a pair lie far below ``ε``, ``θ_mix`` tends to 0 continuously.
    A transposed ``b`` (the dense path's second view) is copied first: ``topk`` would copy
    it anyway, and the masks and gathers then run along memory."""
    b = b.contiguous()
    idx = largest(b, k)
    return idx, b.gather(1, idx), torch.randperm(k, device=idx.device)


def largest(x: Tensor, k: int) -> Tensor:
    """Column indices of the ``k`` largest entries of each row of ``x`` (no NaN), ascending;
    ties at the ``k``-th value go to the lowest columns, so the order (which decides the
    pairs of ``π``) is canonical whatever the selection algorithm."""
    n = x.size(1)
    if k >= n:
        return torch.arange(n, device=x.device).expand(x.size(0), n)
    kth = torch.topk(x, k, dim=1, sorted=False).values.amin(dim=1, keepdim=True)
    keep = x >= kth
    # Ties at the k-th value (more than k kept in a row): the first ones by column, resolved
    # in the tied rows only.
    if int(torch.count_nonzero(keep)) > x.size(0) * k:
        tied = (_row_counts(keep) > k).nonzero().squeeze(1)
        every = tied.numel() == x.size(0)
        sub, at = (x, kth) if every else (x[tied], kth[tied])
        above, ties = sub > at, sub == at
        first = ties.cumsum(dim=1, dtype=torch.int32) <= k - _row_counts(above).unsqueeze(1)
        fixed = above.logical_or_(ties.logical_and_(first))
        if every:
            keep = fixed
        else:
            keep[tied] = fixed
    return torch.nonzero(keep, as_tuple=True)[1].view(x.size(0), k)


def _row_counts(mask: Tensor) -> Tensor:
    """``True`` entries per row of a boolean matrix (summed as bytes: faster than bools)."""
    return mask.view(torch.uint8).sum(dim=1, dtype=torch.int32)
