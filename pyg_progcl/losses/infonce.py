"""GRACE's InfoNCE (Zhu et al., 2020)."""

from __future__ import annotations

from torch import Tensor

from ._engine import NegativeBlock, batched_views
from .base import ContrastiveLoss

__all__ = ["InfoNCELoss"]


class InfoNCELoss(ContrastiveLoss):
    r"""GRACE's InfoNCE with inter- and intra-view negatives, from `Deep Graph Contrastive
    Representation Learning` (Zhu et al., 2020, https://arxiv.org/abs/2006.04131;
    docs/algorithms.md §1):
    :math:`Ng_i = \sum_{k\neq i} e^{\theta(u_i,v_k)/\tau} + \sum_{k\neq i} e^{\theta(u_i,u_k)/\tau}`.

    Args: see :class:`ContrastiveLoss`.
    """

    peak_matrices = 6

    @batched_views
    def negative_term(self, block: NegativeBlock) -> Tensor:
        return block.log_sum_exp_both()
