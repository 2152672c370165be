"""ProGCL-mix's negative term: GRACE's negatives plus hard negatives synthesised from the
``K`` of largest hardness ``b`` (docs/algorithms.md §5.3)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .engine import NegativeBlock
from .weights import HardnessWeights

#: The default :math:`\epsilon` of ProGCL-mix's mixing formula.
MIX_EPS = 1e-8


class MixedNegatives:
    r"""``log Ng_i = log(Σ_{k≠i} (e^{inter_ik} + e^{intra_ik}) + Σ_a e^{θ_mix(a)/τ})`` (shifted),
    :math:`\theta_{mix}(a) = (b_a\theta_a + b_{\pi(a)}\theta_{\pi(a)})/(b_a + b_{\pi(a)} + \epsilon)`
    over the ``num_mix`` negatives of largest ``b`` and a random pairing ``π``.

    One object serves one forward call: a row block's selection (its hardest negatives,
    their ``b`` and ``π``) is kept for the block's recomputation in backward, which takes
    it from there (without it, the checkpoint's restored RNG state would give the same
    selection, at the cost of another).

    Args:
        weights: The fitted mixture's hardness on blocks.
        num_mix: Negatives mixed per anchor (capped at the negatives available).
        mix_eps: The :math:`\epsilon` of the mixing formula.
    """

    def __init__(self, weights: HardnessWeights, num_mix: int, mix_eps: float = MIX_EPS):
        self.weights, self.num_mix, self.mix_eps = weights, num_mix, mix_eps
        self.selections: dict = {}

    def __call__(self, block: NegativeBlock) -> Tensor:
        return torch.logaddexp(block.log_sum_exp_both(), self.log_mixed(block))

    def log_mixed(self, block: NegativeBlock) -> Tensor:
        """``log Σ_a e^{θ_mix(a)/τ}`` (shifted) over the ``num_mix`` hardest negatives."""
        rows = block.pairs.rows  # a dense block (None) is never recomputed
        key = (block.pairs.view, rows.start) if isinstance(rows, slice) else None
        selection = self.selections.pop(key, None)
        if selection is None:
            selection = self.select(block)
            if key is not None and torch.is_grad_enabled() and block.inter.requires_grad:
                idx, b_top, perm = selection  # int32: Amazon-Photo keeps 2 × 7650 × 1000 × 4 B
                self.selections[key] = idx.int(), b_top, perm
        idx, b_top, perm = selection
        theta = (block.inter.gather(1, idx.long()) * block.tau + 1.0).clamp(min=-1.0)
        b_pair, theta_pair = b_top.index_select(1, perm), theta.index_select(1, perm)
        mixed = (b_top * theta + b_pair * theta_pair) / (b_top + b_pair + self.mix_eps)
        return torch.logsumexp((mixed - 1.0) / block.tau, dim=1)

    @torch.no_grad()
    def select(self, block: NegativeBlock) -> tuple[Tensor, Tensor, Tensor]:
        """The block's ``num_mix`` hardest negatives per anchor (ascending columns), their
        ``b`` and a random pairing π of their positions.

        ``b`` is used as it is, as in the formula: where both ``b`` of a pair lie far below
        ε, ``θ_mix`` and its gradient tend to 0, continuously (no rescaling switches on at
        some threshold).
        """
        k = min(self.num_mix, block.count)
        log_b = self.weights.log_hardness(block)[0]
        log_b = log_b.T if block.transposed else log_b
        idx = largest(log_b, k)
        return idx, torch.exp(log_b.gather(1, idx)), torch.randperm(k, device=idx.device)


def largest(x: Tensor, k: int) -> Tensor:
    """Column indices of the ``k`` largest entries of each row of ``x``, ascending; ties at
    the ``k``-th value go to the lowest columns. The order is thus canonical, whatever the
    selection algorithm (π pairs positions, so the order decides the pairs)."""
    n = x.size(1)
    if k >= n:
        return torch.arange(n, device=x.device).expand(x.size(0), n)
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        # numpy's introselect on values, then a mask: about top-k's time, and ordered
        # (numpy has no bfloat16)
        kth = torch.from_numpy(np.partition(x.numpy(), n - k, axis=1)[:, n - k : n - k + 1])
    else:
        kth = torch.topk(x, k, dim=1, sorted=False).values.amin(dim=1, keepdim=True)
    x = x.contiguous()  # (the dense path's second direction is a transpose)
    keep = x >= kth  # at least k per row
    over = keep.view(torch.uint8).sum(dim=1, dtype=torch.int32) > k
    if bool(over.any()):  # ties at the k-th value: those rows keep their first ties by column
        sub, kth = x[over], kth[over]
        above, ties = sub > kth, sub == kth
        room = k - above.sum(dim=1, keepdim=True)
        keep[over] = above | (ties & (ties.cumsum(dim=1) <= room))
    return torch.nonzero(keep, as_tuple=True)[1].view(x.size(0), k)
