"""ProGCL: negatives re-weighted or mixed by their probability of being true negatives."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._checks import check_choice, check_int, check_positive, check_views
from ..mixture import BetaMixture
from .base import ContrastiveLoss
from .similarity import (
    NegativeBlock,
    dense_blocks,
    normalize_views,
    sample_negative_similarities,
)


class ProGCLLoss(ContrastiveLoss):
    r"""ProGCL-weight and ProGCL-mix on GRACE's InfoNCE.

    From `ProGCL: Rethinking Hard Negative Mining in Graph Contrastive Learning`
    (Xia et al., ICML 2022). With hardness
    :math:`b_{ik} = p(\mathrm{true\ neg.} \mid s'_{ik})\, s'_{ik}`, :math:`s' = (\theta+1)/2`
    (no gradient through :math:`b`):

    * ``mode='weight'``: :math:`Ng_i = \sum_{k\neq i} w_{ik}
      (e^{\theta(u_i,v_k)/\tau} + e^{\theta(u_i,u_k)/\tau})`,
      :math:`w_{ik} = b_{ik} / \mathrm{mean}_{j\neq i} b_{ij}`;
    * ``mode='mix'``: GRACE's denominator plus :math:`\sum_a e^{\theta_{mix}(a)/\tau}`,
      :math:`\theta_{mix}(a) = (b_a\theta_a + b_{\pi(a)}\theta_{\pi(a)})/(b_a + b_{\pi(a)} + \epsilon)`
      over the ``num_mix`` negatives of largest :math:`b` and a random pairing :math:`\pi`.

    Before the first :meth:`fit` the loss equals :class:`InfoNCELoss` exactly. After it,
    :math:`b` comes from the current similarities and the mixture's current parameters at
    every call. The fit schedule (warm-up, refit every epoch) belongs to the trainer.

    Args:
        tau: Temperature.
        mode: ``'weight'`` or ``'mix'``.
        num_samples: Inter-view negative similarities ``M`` sampled per :meth:`fit`.
        num_mix: Negatives mixed per anchor (``K``; capped at the negatives available).
        fit_iters: EM iterations per refit (the paper's ``I = 10``), warm-started.
        mix_eps: The :math:`\epsilon` of the mixing formula.
        mixture: The :class:`BetaMixture` to use (default: the reference initialisation).
        block_size, num_negatives: see :class:`ContrastiveLoss`.
    """

    def __init__(
        self,
        tau: float = 0.5,
        mode: str = "weight",
        num_samples: int = 50_000,
        num_mix: int = 1000,
        fit_iters: int = 10,
        mix_eps: float = 1e-8,
        mixture: BetaMixture | None = None,
        **kwargs,
    ):
        super().__init__(tau, **kwargs)
        self.mode = check_choice("mode", mode, {"weight", "mix"})
        self.num_samples = check_int("num_samples", num_samples, 1)
        self.num_mix = check_int("num_mix", num_mix, 1)
        self.fit_iters = check_int("fit_iters", fit_iters, 1)
        self.mix_eps = check_positive("mix_eps", mix_eps)
        self.mixture = BetaMixture() if mixture is None else mixture

    @property
    def fitted(self) -> bool:
        """Whether the mixture has been fitted (before that the loss is GRACE's)."""
        return self.mixture.fitted

    def reset_parameters(self):
        """Returns the mixture to its initial parameters (the loss is GRACE's again)."""
        self.mixture.reset_parameters()

    @torch.no_grad()
    def fit(self, h1: Tensor, h2: Tensor, generator: torch.Generator | None = None) -> ProGCLLoss:
        """Refits the mixture on ``num_samples`` off-diagonal inter-view similarities.

        No ``N×N`` matrix is formed; EM warm-starts from the previous fit.
        """
        check_views(h1, h2)
        theta = sample_negative_similarities(h1, h2, self.num_samples, generator)
        self.mixture.fit((theta + 1) / 2, max_iter=self.fit_iters)
        return self

    @torch.no_grad()
    def negative_weights(self, h1: Tensor, h2: Tensor) -> Tensor:
        """Dense ``[N, N]`` weights ``w_ik`` of the anchors ``u_i = h1[i]`` (diagonal 0).

        For inspection on small graphs; the loss itself never forms this matrix.
        """
        check_views(h1, h2)
        u, v = normalize_views(h1, h2)
        block = next(dense_blocks(u, v, self.tau))
        log_b = self._block_log_hardness(block)
        log_w = log_b - torch.logsumexp(log_b, dim=1, keepdim=True) + math.log(block.count)
        return torch.exp(log_w)

    def log_hardness(self, cosine: Tensor) -> Tensor:
        r""":math:`\log b = \log s' + \log p(\mathrm{true\ neg.} \mid s')` for cosines of any shape."""
        s = self.mixture._clamp(cosine.add(1.0).mul_(0.5))
        log_posterior = -torch.nn.functional.softplus(self.mixture.log_odds_false_negative(s))
        return log_posterior.add_(torch.log(s))

    def _block_log_hardness(self, block: NegativeBlock) -> Tensor:
        def fn(inter: Tensor) -> Tensor:
            with torch.no_grad():
                log_b = self.log_hardness(inter * block.tau + 1.0)
                return log_b.index_put_(
                    (block.rows(), block.excluded), log_b.new_tensor(-torch.inf)
                )

        return block.elementwise_of_inter("log_hardness", fn)

    def log_negatives(self, block: NegativeBlock) -> Tensor:
        if not self.fitted:
            return block.log_sum_exp_both()
        log_b = self._block_log_hardness(block)
        if self.mode == "weight":
            return self._log_weighted(block, log_b)
        return torch.logaddexp(block.log_sum_exp_both(), self._log_mixed(block, log_b))

    def _log_weighted(self, block: NegativeBlock, log_b: Tensor) -> Tensor:
        # w = b / mean b; b is scaled by its row maximum first, so its largest entry is 1.
        log_b = log_b - log_b.amax(dim=1, keepdim=True)
        log_mean_b = torch.log(torch.exp(log_b).sum(dim=1) / block.count)
        log_num = torch.logaddexp(
            block.log_sum_exp(block.inter + log_b), block.log_sum_exp(block.intra + log_b)
        )
        return log_num - log_mean_b

    def _log_mixed(self, block: NegativeBlock, log_b: Tensor) -> Tensor:
        k = min(self.num_mix, block.count)
        log_b_top, idx = torch.topk(log_b, k, dim=1)
        b = torch.exp(log_b_top)
        theta = block.inter.gather(1, idx) * block.tau + 1.0
        perm = torch.randperm(k, device=theta.device)
        mixed = (b * theta + b[:, perm] * theta[:, perm]) / (b + b[:, perm] + self.mix_eps)
        return torch.logsumexp((mixed - 1.0) / block.tau, dim=1)

    def _options(self) -> dict:
        opts = {"mode": self.mode, "num_samples": self.num_samples, "fit_iters": self.fit_iters}
        if self.mode == "mix":
            opts["num_mix"] = self.num_mix
        return opts
