"""ProGCL's negative terms on a block: negatives weighted by their hardness (weight), or
hard negatives synthesised from the hardest (mix) (docs/algorithms.md §5.2-5.3)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..mixture import BetaMixture
from ._engine import NegativeBlock, underflow_threshold

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
    def weights(self, block: NegativeBlock, log: bool = True) -> tuple[Tensor, Tensor, bool]:
        """``(log b, log mean_k b, uniform)`` of the block's anchors (``[B, C]``, ``[B]``;
        with ``log=False``, ``b`` itself); ``uniform``: whether some rows were made uniform.

        Weights are scale-free, so ``b`` stays exact in log space however small it is. An
        anchor whose ``b`` all underflowed gets uniform weights (GRACE's row). On the dense
        path both views share one matrix: ``b`` of the first view's pairs, read transposed
        for the second (as it is with the schedule's ``shared_weights``).
        """
        own_view = 0 if self.schedule.shared_weights else block.view
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

    def _hardness(self, block: NegativeBlock, view: int, log: bool) -> tuple[Tensor, ...]:
        """``b`` (or ``log b``) of the pairs of ``view``'s anchors, 0 (``-inf``) where
        excluded, and its sums over rows and (on the dense path) columns."""
        s = self.schedule.weight_logits(block, view).mul(block.tau / 2).add_(1.0)  # (θ+1)/2
        b = self.mixture.hardness_(s, self.floor)
        rows = torch.arange(b.size(0), device=b.device)
        b.index_put_((rows, rows if block.dense else block.excluded), b.new_zeros(()))
        sums = b.sum(dim=1), b.sum(dim=0) if block.dense else None
        return b.log_() if log else b, *sums


def mixed_log_negatives(block: NegativeBlock, b: Tensor, num_mix: int, eps: float = MIX_EPS):
    r"""ProGCL-mix's ``log Ng``: GRACE's negatives plus
    :math:`\sum_a e^{\theta_{mix}(a)/\tau}`,
    :math:`\theta_{mix}(a) = (b_a\theta_a + b_{\pi(a)}\theta_{\pi(a)})/(b_a + b_{\pi(a)} + \epsilon)`
    over the ``num_mix`` inter-view negatives of largest ``b`` and a random pairing ``π``.

    A row block's selection is kept in the call's values for its recomputation in
    backward (the same negatives, without selecting them again).
    """
    key = ("selection", block.view, block.rows.start) if not block.dense else None
    selection = block.call.pop(key, None)
    if selection is None:
        selection = select_hardest(b, min(num_mix, block.count))
        if key is not None and torch.is_grad_enabled() and block.inter.requires_grad:
            block.call[key] = selection
    idx, b, perm = selection
    if block.dense and block.view == 1:  # (gathered from the stored matrix, whose gradient
        logit = block.native(block.inter).gather(0, idx.T).T  # then keeps its layout)
    else:
        logit = block.inter.gather(1, idx)
    logit = logit.clamp(min=-2.0 / block.tau)  # (θ below -1: rounding)
    b_pair = b.index_select(1, perm)
    mixed = (b * logit + b_pair * logit.index_select(1, perm) - eps / block.tau) / (
        b + b_pair + eps
    )  # (θ_mix - 1)/τ of the shifted logits
    return torch.logaddexp(block.log_sum_exp_both(), torch.logsumexp(mixed, dim=1))


@torch.no_grad()
def select_hardest(b: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The ``k`` hardest negatives of each row (column indices, ascending), their ``b``, and
    a random pairing ``π`` of their positions. ``b`` is used as it is, as in the formula:
    where both ``b`` of a pair lie far below ``ε``, ``θ_mix`` tends to 0 continuously."""
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
    # Masks in row-major order whatever x's layout (the dense path's second view reads a
    # transpose), so that the cumulative count and nonzero run along memory.
    keep = torch.ge(x, kth, out=torch.empty(x.shape, dtype=torch.bool, device=x.device))
    if int(keep.sum()) > keep.size(0) * k:  # ties at the k-th value: the first ones by column
        ties = torch.eq(x, kth, out=torch.empty_like(keep))
        torch.gt(x, kth, out=keep)
        room = k - keep.sum(dim=1, keepdim=True, dtype=torch.int32)
        keep |= ties & (ties.cumsum(dim=1, dtype=torch.int32) <= room)
    return torch.nonzero(keep, as_tuple=True)[1].view(x.size(0), k)
