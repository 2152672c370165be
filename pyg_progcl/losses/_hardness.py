"""ProGCL's negative terms on a block: negatives weighted by their hardness (weight), or
hard negatives synthesised from the hardest (mix) (docs/algorithms.md §5.2-5.3)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..mixture import BetaMixture
from ._engine import NegativeBlock, row_chunks, transpose_, underflow_threshold

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
            b, *sums = block.memo(f"b:{log}", lambda: self._hardness(block, 0, log, True))
            b, sums = (b.T, sums[1]) if own_view == 1 else (b, sums[0])
        else:
            b, sums, _ = self._hardness(block, own_view, log)
        return _uniform_where_underflowed(block, b, sums, log)

    @torch.no_grad()
    def each_view(self, block: NegativeBlock) -> Iterator[tuple[Tensor, Tensor, bool]]:
        """Both views' :meth:`weights` (``log=False``) on the dense path, in one ``N×N`` matrix
        (one hardness pass): the second's is the first's transposed (not shared_weights)."""
        b, rows, cols = self._hardness(block, 0, False, not self.schedule.shared_weights)
        yield _uniform_where_underflowed(block, b, rows, False)
        yield _uniform_where_underflowed(block, transpose_(b), cols, False)

    def _hardness(self, block: NegativeBlock, view: int, log: bool, columns: bool = False):
        """``(b, row sums, column sums or None)`` of the pairs of ``view``'s anchors, ``b``
        (or ``log b``) 0 (``-inf``) where excluded."""
        logits = self.schedule.weight_logits(block, view)
        b = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        rows, cols = b.new_empty(b.size(0)), b.new_zeros(b.size(1)) if columns else None
        work = None  # (every pass on a chunk in cache, the formula's in one reused buffer)
        for part in row_chunks(b):
            s = torch.mul(logits[part], block.tau / 2, out=b[part])
            work = s.new_empty(2, *s.shape) if work is None else work[:, : s.size(0)]
            s = self.mixture.hardness_(s.add_(1.0), self.floor, work)  # (θ+1)/2
            at = torch.arange(s.size(0), device=s.device)
            s.index_put_((at, block.excluded[part]), s.new_zeros(()))
            rows[part] = s.sum(dim=1)
            if columns:
                cols += s.sum(dim=0)
            if log:
                s.log_()
        return b, rows, cols


def _uniform_where_underflowed(block: NegativeBlock, b: Tensor, sums: Tensor, log: bool):
    """``(b, log mean_k b, uniform)`` with the rows whose sum ``sums`` underflowed made
    uniform (a new matrix if any: ``b`` itself is left as it is)."""
    small = sums < underflow_threshold(sums.dtype)
    if bool(small.any()):
        b = torch.where(small.unsqueeze(1), b.new_full((), 0.0 if log else 1.0), b)
        rows = torch.arange(b.size(0), device=b.device)
        b.index_put_((rows, block.excluded), b.new_full((), float("-inf") if log else 0.0))
        sums = torch.where(small, sums.new_full((), block.count), sums)
        return b, torch.log(sums / block.count), True
    return b, torch.log(sums / block.count), False


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
    return torch.logaddexp(log_grace, _MixedLogSum.apply(logit, b, perm, eps, block.tau))


class _MixedLogSum(torch.autograd.Function):
    """``log Σ_a exp((θ_mix(a) - 1)/τ)`` of a block's ``[B, K]`` shifted logits of the
    selected negatives, their ``b`` and the pairing ``π``, with a gradient in the logits
    only. Written by hand for memory: it keeps the logits and ``b`` (autograd would keep
    four more ``[B, K]`` intermediates) and recomputes the mixed logits in backward."""

    @staticmethod
    def forward(ctx, logit: Tensor, b: Tensor, perm: Tensor, eps: float, tau: float):
        ctx.eps, ctx.tau = eps, tau
        out = logit.new_empty(logit.size(0))
        for part in row_chunks(logit):
            out[part] = _mixed_logits(logit[part], b[part], perm, eps, tau)[0].logsumexp(dim=1)
        ctx.save_for_backward(logit, b, perm, out)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        logit, b, perm, out = ctx.saved_tensors
        g = torch.empty_like(logit)
        for part in row_chunks(logit):
            mixed, own, pair = _mixed_logits(logit[part], b[part], perm, ctx.eps, ctx.tau)
            p = mixed.sub_(out[part, None]).exp_().mul_(grad[part, None])  # softmax · grad
            g[part] = own.mul_(p).index_add_(1, perm, pair.mul_(p))  # (θ_π(a) through a)
        return g.masked_fill_(logit < -2.0 / ctx.tau, 0.0), None, None, None, None


def _mixed_logits(logit: Tensor, b: Tensor, perm: Tensor, eps: float, tau: float):
    """``((θ_mix - 1)/τ, w, w_π)`` of the shifted logits ``(θ - 1)/τ``:
    ``w θ_a + w_π θ_π(a) - ε/((b_a + b_π + ε)τ)`` with ``w = b_a/(b_a + b_π + ε)``,
    ``w_π = b_π/(b_a + b_π + ε)``; logits below ``θ = -1`` (rounding) count as ``-1``."""
    logit = logit.clamp(min=-2.0 / tau)
    b_pair = b.index_select(1, perm)
    norm = (b + b_pair).add_(eps).reciprocal_()
    own, pair = b * norm, b_pair.mul_(norm)
    mixed = (logit * own).addcmul_(logit.index_select(1, perm), pair)
    return mixed.sub_(norm.mul_(eps / tau)), own, pair


def _select_both(block: NegativeBlock, hardness: Hardness, k: int) -> list[tuple]:
    """Both views' selections on the dense path, the second's from the first's ``b``
    transposed (``shared_weights``: the same negatives, each view its own pairing)."""
    views = hardness.each_view(block)
    first = select_hardest(next(views)[0], k)
    if hardness.schedule.shared_weights:
        return [first, (*first[:2], torch.randperm(k, device=first[0].device))]
    return [first, select_hardest(next(views)[0], k)]


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
    keep = x >= kth
    # Ties at the k-th value (more than k kept in a row): the first ones by column, resolved
    # in the tied rows only, a chunk of them at a time.
    if int(torch.count_nonzero(keep)) > x.size(0) * k:
        tied = (_row_counts(keep) > k).nonzero().squeeze(1)
        for part in row_chunks(x[: tied.numel()]):  # (chunks of as many rows as are tied)
            rows = tied[part]
            sub, at = x[rows], kth[rows]
            above, ties = sub > at, sub == at
            first = ties.cumsum(dim=1, dtype=torch.int32) <= k - _row_counts(above).unsqueeze(1)
            keep[rows] = above.logical_or_(ties.logical_and_(first))
    # (The flat positions hold no row index: half the memory of nonzero's (row, column).)
    flat = torch.nonzero(keep.reshape(-1)).view(x.size(0), k)
    return flat.sub_(torch.arange(0, flat.size(0) * n, n, device=x.device).unsqueeze(1))


def _row_counts(mask: Tensor) -> Tensor:
    """``True`` entries per row of a boolean matrix, summed as bytes a row chunk at a time
    (the int32 copy the sum makes stays a chunk's, in cache, not four times the matrix)."""
    out = torch.empty(mask.size(0), dtype=torch.int32, device=mask.device)
    for part in row_chunks(mask):
        torch.sum(mask[part].view(torch.uint8), dim=1, dtype=torch.int32, out=out[part])
    return out
