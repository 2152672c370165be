"""ProGCL-weight's negative term on the engine's blocks: ``w = b / mean b`` in log space
on the per-direction paths, linear weights ``b`` on the one-pass engine
(docs/algorithms.md §5.2)."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from ..mixture import BetaMixture
from ._engine import ExpSums, NegativeBlock, NegativeTerm, Pairs, row_chunks, underflow_threshold
from .schedules import FitSchedule, FrozenFit


def _log_weighted_sum(*, log_sums: list[Tensor], log_weight_mean: Tensor, **_) -> Tensor:
    """``log Σ_k w_k e^{logit_k}`` with ``w = b / mean b`` from ``log Σ_k b_k e^{logit_k}``."""
    return log_sums[0] - log_weight_mean


class HardnessWeights:
    """The hardness ``b = s'·p(TN | s')`` of a fitted mixture on the engine's blocks.

    Args:
        mixture: The fitted :class:`~pyg_progcl.BetaMixture`.
        tau: The loss's temperature (blocks hold logits ``(θ - 1)/τ``).
        schedule: The loss's :class:`~.schedules.FitSchedule`: which similarities ``b``
            is computed from, the lower bound of the posterior ``p(TN | s')`` in ``b``
            (its :attr:`~.schedules.FitSchedule.posterior_floor` now, kept as ``floor``)
            and (frozen) the weight blocks it holds between steps.
    """

    def __init__(self, mixture: BetaMixture, tau: float, schedule: FitSchedule):
        self.mixture, self.tau, self.schedule = mixture, tau, schedule
        self.floor = schedule.posterior_floor

    def term(self) -> NegativeTerm:
        """ProGCL-weight's :class:`~pyg_progcl.losses.NegativeTerm`, on every path."""
        if self.schedule.shared_weights:  # the v anchors' rows of the first direction's matrix
            columns = functools.partial(self.block_weights, view=1)
            return NegativeTerm(
                self.log_negatives, ExpSums((1.0,), _log_weighted_sum, self.block_weights, columns)
            )
        return NegativeTerm(
            self.log_negatives, ExpSums((1.0,), _log_weighted_sum, self.block_weights)
        )

    def of_logits(self, logits: Tensor, out: Tensor | None = None) -> Tensor:
        """Detached ``b`` of shifted inter-view logits, ``s' = (θ + 1)/2 = 1 + τ·logit/2``,
        written to ``out`` if given, in cache-sized row chunks."""
        with torch.no_grad():
            b = torch.empty_like(logits) if out is None else out
            one = logits.new_ones(())
            for rows in row_chunks(logits):
                s = torch.add(one, logits[rows], alpha=self.tau / 2, out=b[rows])
                self.mixture.hardness_(s, self.floor)
            return b

    def block_weights(
        self, logits: Tensor, out: Tensor | None, rows: slice, view: int = 0
    ) -> Tensor:
        """The one-pass engine's weights: ``b`` of the inter-view block ``u[rows]·vᵀ`` with
        current shifted ``logits`` (``view=1``, shared weights' column sums: of
        ``v[rows]·uᵀ``); a frozen schedule's from its views, held between steps."""
        if not isinstance(self.schedule, FrozenFit):
            return self.of_logits(logits, out)

        def compute() -> Tensor:
            frozen = Pairs(view, rows).logits(*self.schedule.views_like(logits), self.tau, out)
            return self.of_logits(frozen, out)

        key = (rows.start, rows.stop, view, logits.dtype, logits.device)
        return self.schedule.weight_block(key, compute, out)

    def log_hardness(self, block: NegativeBlock) -> tuple[Tensor, Tensor, bool]:
        """``(log b, log mean_k b, shared)`` for the block's anchors (``log b`` in the stored
        orientation, negatives along ``block.dim``).

        Weights are scale-free, so ``b`` stays exact in log space however small it is. An
        anchor whose ``b`` all underflowed (sum below ``2^24`` times the smallest normal
        float) gets uniform weights, i.e. GRACE's row; then ``shared`` is ``False`` and the
        returned ``log b`` is a corrected copy. (``shared``: the block's cached ``log b``,
        whose products the dense directions may share; not so for a transposed read.)
        """
        log_b, *sums = self._block_log_hardness(block)
        sum_b = sums[1 - block.dim]
        small = sum_b < underflow_threshold(sum_b.dtype)
        if not bool(small.any()):
            return log_b, torch.log(sum_b / block.count), not self._reads_transposed(block)
        anchors = small.unsqueeze(block.dim)
        log_b = torch.where(anchors, log_b.new_zeros(()), log_b)
        excluded = (block.rows(), block.excluded)
        log_b = log_b.index_put_(excluded, log_b.new_full((), float("-inf")))
        sum_b = torch.where(small, sum_b.new_full((), float(block.count)), sum_b)
        return log_b, torch.log(sum_b / block.count), False

    def log_negatives(self, block: NegativeBlock) -> Tensor:
        """``log Σ_k w_ik (e^{inter_ik} + e^{intra_ik})`` with ``w = b / mean b``.

        Each product is one ``exp(logit + log b)``, whose backward is a single product;
        the dense path's inter-view one serves both directions (rows, then columns).
        """
        log_b, log_mean_b, shared = self.log_hardness(block)
        if block.exp_fits():

            def weighted_inter() -> Tensor:
                return torch.add(block.native_inter, log_b).exp_()

            inter = block.cached("weighted_exp", weighted_inter) if shared else weighted_inter()
            intra = torch.add(block.intra, log_b).exp_()  # intra-view matrices are symmetric
            total = inter.sum(dim=block.dim) + intra.sum(dim=block.dim)
            if bool((total > torch.finfo(total.dtype).tiny).all()):
                return torch.log(total) - log_mean_b
        log_b = log_b.T if block.transposed else log_b  # log-sum-exp: no term underflows
        inter = torch.logsumexp(block.inter + log_b, dim=1)
        return torch.logaddexp(inter, torch.logsumexp(block.intra + log_b, dim=1)) - log_mean_b

    def _block_log_hardness(self, block: NegativeBlock) -> tuple[Tensor, Tensor, Tensor]:
        """``(log b, Σ_k b over dim 1, Σ_k b over dim 0)`` of the block's stored inter-view
        matrix, detached; excluded entries hold ``-inf``. Computed once per block (once for
        both dense directions: row sums serve one, column sums the other)."""

        def make() -> tuple[Tensor, Tensor, Tensor]:
            with torch.no_grad():
                logits = self.schedule.weight_logits(block.pairs, block.native_inter, self.tau)
                b = self.of_logits(logits)
                b.index_put_((block.rows(), block.excluded), b.new_zeros(()))
                sums = b.sum(dim=1), b.sum(dim=0)
                return b.log_(), *sums

        log_b, rows, cols = block.cached("log_hardness", make)
        if self._reads_transposed(block):
            return log_b.T, cols, rows
        return log_b, rows, cols

    def _reads_transposed(self, block: NegativeBlock) -> bool:
        """Whether the block's ``b`` is the transpose of what its stored orientation holds:
        the dense second direction with shared weights (anchor ``v_i`` weighted by row ``i``
        of the first direction's matrix, which the shared cache holds)."""
        return self.schedule.shared_weights and block.transposed
