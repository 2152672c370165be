"""ProGCL-mix's negative term: GRACE's negatives plus hard negatives synthesised from the
``K`` of largest hardness ``b`` (docs/algorithms.md §5.3)."""

from __future__ import annotations

import torch
from torch import Tensor

from ._engine import BlockPool, NegativeBlock, row_chunks, transpose_, underflow_threshold
from ._engine.ops import EXP_SPAN
from ._selection import largest
from ._weights import HardnessWeights

#: The default :math:`\epsilon` of ProGCL-mix's mixing formula.
MIX_EPS = 1e-8
#: Elements per row chunk of :class:`MixedSums` on the CPU (2 MiB of float32).
MIX_CHUNK_ELEMENTS = 1 << 19


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
        logit = block.inter.gather(1, idx.long())
        return log_mixed_sum(logit, b_top, perm, block.tau, self.mix_eps)

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


def log_mixed_sum(logit: Tensor, b: Tensor, perm: Tensor, tau: float, eps: float) -> Tensor:
    """``log Σ_a e^{(θ_mix(a) - 1)/τ}`` per row of the selected negatives' shifted logits
    ``logit = (θ - 1)/τ`` and hardness ``b`` (``[B, K]``), paired by ``perm``; cosines below
    -1 (rounding) count as -1."""
    return torch.logsumexp(_mixed_logits(logit, b, perm, tau, eps)[0], dim=1)


def _mixed_logits(
    logit: Tensor, b: Tensor, perm: Tensor, tau: float, eps: float, clamp: bool = True
):
    """``((θ_mix - 1)/τ, b_π, b + b_π + ε)`` of :func:`log_mixed_sum` (differentiable in
    ``logit``; ``b`` carries no gradient), as
    ``(θ_mix - 1)/τ = (b·logit + b_π·logit_π - ε/τ) / (b + b_π + ε)``; ``clamp=False``
    when no ``logit`` lies below ``-2/τ``. The result lies in ``[-2/τ, 0]`` (up to rounding)."""
    logit = logit.clamp(min=-2.0 / tau) if clamp else logit
    b_pair = b.index_select(1, perm)
    den = torch.add(b, b_pair).add_(eps)
    num = torch.mul(b, logit)
    num = num.add(num.index_select(1, perm)).sub_(eps / tau)
    return num.div_(den), b_pair, den


class MixedSums:
    """ProGCL-mix's synthesised negatives as the one-pass engine's extra term
    (:class:`~pyg_progcl.losses._engine.onepass.ExtraTerm`), read from the whole
    inter-view matrix at once.

    The ``u`` anchors' hardest negatives are in the rows of ``b(u·vᵀ)``, the ``v``
    anchors' in its columns; forward selects both (``π`` drawn for ``u``, then ``v``: the
    per-direction path's order), backward adds the mixed term's gradient at the selected
    entries to the engine's ``∂J/∂(u·vᵀ)``, so the term costs no Gram product of its own.
    Both run in torch operations on row chunks (cache-sized on the CPU). One object serves
    one forward call.
    """

    def __init__(self, weights: HardnessWeights, num_mix: int, mix_eps: float = MIX_EPS):
        self.weights, self.num_mix, self.mix_eps = weights, num_mix, mix_eps
        self.saved: list[tuple] = []  # per view: π and its gradient factors

    @torch.no_grad()
    def forward(self, logits: Tensor, pool: BlockPool) -> Tensor:
        n = logits.size(0)
        k = min(self.num_mix, n - 1)
        perms = [torch.randperm(k, device=logits.device) for _ in range(2)]
        b = self.weights.block_weights(logits, pool.take(n, logits), slice(0, n))
        b.fill_diagonal_(0.0)  # (the anchor itself)
        out = logits.new_empty(2, n)
        out[0] = self._mix(logits, _uniform_if_underflowed(b, copy=True), perms[0], k)
        transpose_(b)  # the v anchors' negatives in rows
        out[1] = self._mix(logits.T, _uniform_if_underflowed(b), perms[1], k)
        pool.give([b])
        return out

    def _mix(self, logits: Tensor, b: Tensor, perm: Tensor, k: int) -> Tensor:
        """``log X`` of the anchors whose negatives are the rows of ``logits`` and ``b``;
        keeps the gradient factors for backward."""
        # The mixed logits lie in [-2/τ, 0], and the engine runs only where e^{-2/τ} is a
        # normal float: the log-sum-exp needs no shift by the row maximum.
        if not 2.0 / self.weights.tau <= EXP_SPAN:
            raise RuntimeError(
                f"the one-pass mixed term needs 2 / tau <= {EXP_SPAN:g} (got tau="
                f"{self.weights.tau:g}): its unshifted log-sum-exp would underflow; the "
                "per-direction path serves such temperatures"
            )
        tau, lowest = self.weights.tau, -2.0 / self.weights.tau  # (θ = -1)
        selected = largest(b, k)
        out, chunks = logits.new_empty(logits.size(0)), []
        for rows in row_chunks(logits, MIX_CHUNK_ELEMENTS):
            idx = selected[rows]
            logit, b_top = logits[rows].gather(1, idx), b[rows].gather(1, idx)
            below = logit < lowest if float(logit.min()) < lowest else None
            mixed, b_pair, den = _mixed_logits(
                logit, b_top, perm, tau, self.mix_eps, clamp=below is not None
            )
            soft = mixed.exp_()  # kept for backward
            total = soft.sum(dim=1, keepdim=True)
            out[rows] = total.log().squeeze(1)
            soft.div_(den)  # softmax(mixed)·total/den: total divides in backward
            if below is not None:
                soft.masked_fill_(below, 0.0)  # (none below the clamp)
            chunks.append((rows, b_top.mul_(soft), b_pair.mul_(soft), idx.int(), total))
        self.saved.append((perm, chunks))
        return out

    def backward(self, grad: Tensor, out: Tensor) -> None:
        """``∂J/∂θ_c`` (``θ = u·v``) of the selected ``c``: through ``θ_mix(c)`` with
        weight ``b_c/(b_c + b_π(c) + ε)`` and through ``θ_mix(π⁻¹(c))``, scaled by the
        softmax of the mixed logits; none below the clamp at -1."""
        tau = self.weights.tau
        for view, (perm, chunks) in enumerate(self.saved):
            for rows, own, pair, idx, total in chunks:  # e^mixed·b/den, e^mixed·b_π/den
                scale = grad[view, rows].unsqueeze(1) / total.mul_(tau)
                g = own.mul_(scale).index_add_(1, perm, pair.mul_(scale))
                target = out[rows] if view == 0 else out[:, rows].T
                target.scatter_add_(1, idx.long(), g)
        self.saved = []


def _uniform_if_underflowed(b: Tensor, copy: bool = False) -> Tensor:
    """``b`` (anchor ``i``'s own entry at ``[i, i]``) with the rows whose ``b`` all
    underflowed set to 1 off the anchor's own entry (GRACE's row, as on the other paths),
    in place, or if ``copy`` in a copy where there are such rows."""
    small = b.sum(dim=1) < underflow_threshold(b.dtype)
    if bool(small.any()):
        b = b.clone() if copy else b
        b[small] = 1.0
        own = small.nonzero()[:, 0]
        b[own, own] = 0.0
    return b
