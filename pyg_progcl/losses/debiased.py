"""Debiased (DCL) and hard-negative debiased (HCL) contrastive losses."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._checks import check_nonnegative, check_probability
from ._engine import NegativeBlock, batched_views
from .base import ContrastiveLoss

__all__ = ["DebiasedInfoNCELoss", "HardInfoNCELoss"]

#: The largest scale ``(1 + β)/τ`` of HCL's logits that float32 sums keep finite.
HCL_MAX_SCALE = 1e30


def debiased_log_negatives(
    pos: Tensor, log_neg: Tensor, count: int, tau: float, tau_plus: float
) -> Tensor:
    r"""``log max((neg - τ⁺·M·pos) / (1 - τ⁺), M·e^{-1/τ})`` in the shifted log space,
    ``M = 2·count``: ``log neg + log(1 - e^a)``, ``a = log(τ⁺ M pos / neg)`` (``-inf`` for
    ``a >= 0``, so the floor wins)."""
    m = 2 * count
    log_floor = math.log(m) - 2.0 / tau
    if tau_plus == 0:
        return log_neg.clamp(min=log_floor)
    a = (pos - log_neg).add_(math.log(tau_plus * m))
    # (a clamped, so that the unused branch's gradient stays finite)
    safe = a.clamp(max=-torch.finfo(a.dtype).tiny)
    log_diff = log_neg + torch.log(-torch.expm1(safe)) - math.log1p(-tau_plus)
    return torch.where(a < 0, log_diff, float("-inf")).clamp(min=log_floor)


class DebiasedInfoNCELoss(ContrastiveLoss):
    r"""Debiased contrastive loss (DCL), from `Debiased Contrastive Learning` (Chuang et al.,
    NeurIPS 2020, https://arxiv.org/abs/2007.00224; docs/algorithms.md §3):
    :math:`Ng_i = \max\big((\sum_k e^{\theta_{ik}/\tau} - \tau^+ M e^{\theta_{ii}/\tau})
    /(1-\tau^+),\ M e^{-1/\tau}\big)` with :math:`M = 2(N-1)` negatives per anchor.

    Args:
        tau_plus: Class prior :math:`\tau^+ \in [0, 1)`; ``0`` gives GRACE exactly.
        tau, \*\*kwargs: see :class:`ContrastiveLoss`.
    """

    peak_matrices = 6

    def __init__(self, tau: float = 0.5, tau_plus: float = 0.1, **kwargs):
        super().__init__(tau, **kwargs)
        self.tau_plus = check_probability("tau_plus", tau_plus, upper_open=True)

    @batched_views
    def negative_term(self, block: NegativeBlock) -> Tensor:
        log_neg = block.log_sum_exp_both()
        return debiased_log_negatives(block.pos, log_neg, block.count, self.tau, self.tau_plus)

    def _options(self) -> dict:
        return {"tau_plus": self.tau_plus}


class HardInfoNCELoss(DebiasedInfoNCELoss):
    r"""Hard-negative debiased contrastive loss (HCL), from `Contrastive Learning with Hard
    Negative Samples` (Robinson et al., ICLR 2021, https://arxiv.org/abs/2010.04592;
    docs/algorithms.md §4): DCL with ``neg`` replaced by
    :math:`\sum_k w_{ik} e^{\theta_{ik}/\tau} / \mathrm{mean}_k w_{ik}`,
    :math:`w_{ik} = e^{\beta\theta_{ik}/\tau}`.

    Args:
        beta: Concentration :math:`\beta \ge 0` on hard negatives (``0``: DCL), at most
            ``1e30·tau - 1``.
        tau, tau_plus, \*\*kwargs: see :class:`DebiasedInfoNCELoss`.
    """

    peak_matrices = 7

    def __init__(self, tau: float = 0.5, tau_plus: float = 0.1, beta: float = 1.0, **kwargs):
        super().__init__(tau, tau_plus, **kwargs)
        self.beta = check_nonnegative("beta", beta)
        if (1.0 + self.beta) / self.tau > HCL_MAX_SCALE:
            raise ValueError(
                f"`beta` must be at most {HCL_MAX_SCALE:g}·tau - 1 = "
                f"{HCL_MAX_SCALE * self.tau - 1:g} (got {self.beta:g}): beyond, the logits "
                "(1 + beta)·θ/tau of the weighted negatives overflow float32"
            )

    def negative_term(self, block: NegativeBlock) -> Tensor:
        if self.beta == 0:
            return super().negative_term(block)
        # Σ e^{(1+β)θ/τ} / mean e^{βθ/τ}; the shifts of numerator and mean cancel.
        log_w, log_weighted = block.log_sum_exp_both((self.beta, 1 + self.beta))
        log_neg = log_weighted - (log_w - math.log(2 * block.count))
        return debiased_log_negatives(block.pos, log_neg, block.count, self.tau, self.tau_plus)

    def _options(self) -> dict:
        return {"tau_plus": self.tau_plus, "beta": self.beta}
