"""The shared loss module: input checks, block / sampling options, the reduction."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_int, check_positive, check_views
from .blockwise import ExpSums
from .pool import BlockPool
from .similarity import LogNegatives, NegativeBlock, contrastive_loss


class ContrastiveLoss(torch.nn.Module):
    r"""Base of every loss: ``J = (1/2N) Σ_i [ℓ(u_i) + ℓ(v_i)]`` with
    ``ℓ_i = -log e^{p_i} / (e^{p_i} + Ng_i)``; subclasses supply ``log Ng_i``.

    Args:
        tau: Temperature :math:`\tau > 0`.
        block_size: Anchors per row block (exact, ``O(B·N)`` memory, recomputed in
            backward). ``None`` picks dense computation up to 4096 nodes and blocks of
            ``2^23 / N`` anchors above; ``block_size >= N`` forces the dense path (fastest
            where its ``~5 N²`` floats fit).
        num_negatives: ``k`` sampled negatives per anchor and view (``2k`` in all)
            instead of all ``2(N-1)``; ``None`` uses all of them.

    Attributes:
        pool: The :class:`~pyg_progcl.losses.pool.BlockPool` of the CPU block matrices.
    """

    def __init__(
        self, tau: float = 0.5, block_size: int | None = None, num_negatives: int | None = None
    ):
        super().__init__()
        self.tau = check_positive("tau", tau)
        self.block_size = None if block_size is None else check_int("block_size", block_size, 1)
        self.num_negatives = (
            None if num_negatives is None else check_int("num_negatives", num_negatives, 1)
        )
        self.pool = BlockPool()  # CPU block matrices reused from call to call

    def reset_parameters(self):
        """Losses without state have nothing to reset."""

    def exp_sums(self) -> ExpSums | None:
        """How ``log Ng`` follows from exponential sums over the negatives, if it does
        (:class:`~pyg_progcl.losses.blockwise.ExpSums`); such losses compute both
        directions from one pass over row blocks."""
        return None

    def log_negatives(self, block: NegativeBlock) -> Tensor:
        """``[B]`` shifted ``log Ng_i`` for the anchors of ``block``."""
        spec = self.exp_sums()
        if spec is None or spec.weight is not None:
            raise NotImplementedError
        log_sums = [block.log_sum_exp_both(scale) for scale in spec.scales]
        return spec.combine(block.pos, log_sums, None, block.count)

    def call_negatives(self) -> LogNegatives:
        """The :meth:`log_negatives` of one forward call (and of the recomputation of its
        blocks in backward); a loss may bind state to the call here."""
        return self.log_negatives

    def check_inputs(self, h1: Tensor, h2: Tensor) -> None:
        """Checks the views and what the loss's options need of them (subclasses add
        their own checks); :meth:`forward` calls it first."""
        check_views(h1, h2)
        if self.num_negatives is not None and self.num_negatives >= h1.size(0):
            raise ValueError(
                f"`num_negatives` must be < the number of nodes N={h1.size(0)} "
                f"(got {self.num_negatives})"
            )

    def forward(self, h1: Tensor, h2: Tensor) -> Tensor:
        """Scalar loss of two projected views ``h1``, ``h2`` of shape ``[N, d]``."""
        self.check_inputs(h1, h2)
        return contrastive_loss(
            h1,
            h2,
            self.tau,
            self.call_negatives(),
            self.block_size,
            self.num_negatives,
            sums=self.exp_sums(),
            pool=self.pool,
        )

    def extra_repr(self) -> str:
        parts = [f"tau={self.tau:g}"]
        parts += [f"{k}={v!r}" for k, v in self._options().items()]
        if self.block_size is not None:
            parts.append(f"block_size={self.block_size}")
        if self.num_negatives is not None:
            parts.append(f"num_negatives={self.num_negatives}")
        return ", ".join(parts)

    def _options(self) -> dict:
        return {}


class InfoNCELoss(ContrastiveLoss):
    r"""GRACE's InfoNCE with inter- and intra-view negatives.

    From `Deep Graph Contrastive Representation Learning` (Zhu et al., 2020):
    :math:`\ell(u_i) = -\log \frac{e^{\theta(u_i,v_i)/\tau}}{e^{\theta(u_i,v_i)/\tau}
    + \sum_{k\neq i} e^{\theta(u_i,v_k)/\tau} + \sum_{k\neq i} e^{\theta(u_i,u_k)/\tau}}`.

    Args: see :class:`ContrastiveLoss`.
    """

    def exp_sums(self) -> ExpSums:
        return ExpSums((1.0,), _log_first_sum)


def _log_first_sum(pos: Tensor, log_sums: list[Tensor], log_weight_mean, count: int) -> Tensor:
    return log_sums[0]
