"""GRACE's InfoNCE (Zhu et al., 2020)."""

from __future__ import annotations

from torch import Tensor

from ._engine import ExpSums, NegativeTerm
from .base import ContrastiveLoss


def _log_first_sum(*, log_sums: list[Tensor], **_) -> Tensor:
    return log_sums[0]


#: GRACE's negative term: the plain sum over the ``2(N-1)`` negatives.
GRACE_TERM = NegativeTerm.from_sums(ExpSums((1.0,), _log_first_sum))


class InfoNCELoss(ContrastiveLoss):
    r"""GRACE's InfoNCE with inter- and intra-view negatives (docs/algorithms.md §1).

    From `Deep Graph Contrastive Representation Learning` (Zhu et al., 2020,
    https://arxiv.org/abs/2006.04131):
    :math:`Ng_i = \sum_{k\neq i} e^{\theta(u_i,v_k)/\tau} + \sum_{k\neq i} e^{\theta(u_i,u_k)/\tau}`.

    Args: see :class:`ContrastiveLoss`.
    """

    def negative_term(self) -> NegativeTerm:
        return GRACE_TERM
