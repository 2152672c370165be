"""ProGCL's negative terms on a block: weight and mix (docs/algorithms.md §5.2-5.3)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..mixture import BetaMixture
from ._engine import NegativeBlock

MIX_EPS = 1e-8


class Hardness:
    """The hardness ``b = s'·p(TN | s')`` in log space, on the blocks of one loss call."""

    def __init__(self, mixture: BetaMixture, schedule):
        self.mixture, self.schedule = mixture, schedule
        self.floor = schedule.floor_now()
        self._dense, self.selection = None, None  # (dense log b; ProGCL-mix's, both views')

    def log_b(self, block: NegativeBlock) -> Tensor:
        """``[B, C]`` ``log b`` of the block's pairs, ``-inf`` where excluded."""
        shared = self.schedule.shared_weights
        if block.dense and self._dense is not None:
            return self._dense.T if block.view == 1 and not shared else self._dense
        with torch.no_grad():
            logits = self.schedule.weight_logits(block, 0 if shared or block.dense else block.view)
            s = torch.add(logits.new_ones(()), logits, alpha=block.tau / 2)  # (θ + 1)/2
            lb = self.mixture.log_hardness_(s, self.floor)
            lb.scatter_(1, block.excluded.unsqueeze(1), float("-inf"))
        if not block.dense:
            return lb
        self._dense = lb
        return self.log_b(block)

    def log_weights(self, block: NegativeBlock) -> Tensor:
        """``[B, C]`` ``log w``, ``w = b / mean_k b``, of the block's pairs (``-inf`` excluded)."""
        # (log_softmax: each row's max, sum and shift in one pass over the row)
        return torch.log_softmax(self.log_b(block), dim=1).add_(math.log(block.count))


def weighted_log_negatives(block: NegativeBlock, hardness: Hardness) -> Tensor:
    """ProGCL-weight's ``log Ng = log Σ_k w_k (e^{inter_k} + e^{intra_k})``, ``w = b / mean b``."""
    lw = hardness.log_weights(block)
    if not block._exp_fits():
        return block.log_sum_exp_both(1.0, lw)
    inter = block._inter_sums((1.0,), lw, logits=block._take_logits())
    return torch.log(inter[0] + block._intra_sums((1.0,), lw)[0])


def mixed_log_negatives(block: NegativeBlock, hardness: Hardness, num_mix: int, eps: float):
    r"""ProGCL-mix's ``log Ng``: GRACE's negatives plus
    :math:`\sum_a e^{\theta_{mix}(a)/\tau}`,
    :math:`\theta_{mix}(a) = (b_a\theta_a + b_{\pi(a)}\theta_{\pi(a)})/(b_a + b_{\pi(a)} + \epsilon)`
    over the ``num_mix`` inter-view negatives of largest ``b`` and a random pairing ``π``."""
    k = min(num_mix, block.count)
    if block.dense:
        if hardness.selection is None:
            first = select_hardest(hardness.log_b(block), k)
            if hardness.schedule.shared_weights:  # (the same b: a new pairing only)
                second = (*first[:2], torch.randperm(k, device=first[0].device))
            else:  # (the second view's b in its own orientation: a copy along memory)
                second = select_hardest(hardness.log_b(block).T.contiguous(), k)
            hardness.selection = [first, second]
        index = (hardness.selection[0][0], hardness.selection[1][0])
        _, b, perm = hardness.selection[block.view]
    else:
        index, b, perm = select_hardest(hardness.log_b(block), k)
    if block._exp_fits():
        logits = None if block.dense else block._take_logits()
        inter, logit = block._inter_sums((1.0,), gather=index, logits=logits)
        log_grace = torch.log(inter[0] + block._intra_sums((1.0,))[0])
    else:
        own = index[block.view] if block.dense else index
        log_grace, logit = block.log_sum_exp_both(), block.inter.gather(1, own)
    return torch.logaddexp(log_grace, mixed_logits(logit, b, perm, eps, block.tau).logsumexp(1))


def mixed_logits(logit: Tensor, b: Tensor, perm: Tensor, eps: float, tau: float) -> Tensor:
    """``(θ_mix - 1)/τ`` of the shifted logits ``(θ - 1)/τ`` of the selected negatives:
    ``w θ_a + w_π θ_π(a) - ε/((b_a + b_π + ε)τ)`` with ``w = b_a/(b_a + b_π + ε)``,
    ``w_π = b_π/(b_a + b_π + ε)``; logits below ``θ = -1`` (rounding) count as ``-1``."""
    logit = logit.clamp(min=-2.0 / tau)
    b_pair = b.index_select(1, perm)
    norm = (b + b_pair).add_(eps).reciprocal_()
    mixed = logit * (b * norm) + logit.index_select(1, perm) * (b_pair * norm)
    return mixed - norm * (eps / tau)


def select_hardest(log_b: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The ``k`` hardest negatives of each row, their ``b``, and a random pairing ``π``."""
    with torch.no_grad():
        idx = largest(log_b, k)
        return idx, log_b.gather(1, idx).exp_(), torch.randperm(k, device=idx.device)


def largest(x: Tensor, k: int) -> Tensor:
    """Column indices of the ``k`` largest entries of each row of ``x`` (no NaN), ascending;
    ties at the ``k``-th value go to the lowest columns (docs/design.md)."""
    rows, n = x.shape
    if k >= n:
        return torch.arange(n, device=x.device).expand(rows, n)
    kth = torch.topk(x, k, dim=1, sorted=False).values.amin(dim=1, keepdim=True)
    above, ties = x > kth, x == kth
    room = k - above.sum(dim=1, keepdim=True, dtype=torch.int32)
    keep = above.logical_or_(ties.logical_and_(ties.cumsum(1, dtype=torch.int32) <= room))
    # (each kept entry's rank in its row is its slot; the rest go to a spare slot k)
    slot = torch.where(keep, keep.cumsum(1).sub_(1), k)
    columns = torch.arange(n, device=x.device).expand(rows, n)
    return x.new_empty(rows, k + 1, dtype=torch.long).scatter_(1, slot, columns)[:, :k]
