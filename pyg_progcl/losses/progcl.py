"""ProGCL: negatives re-weighted or mixed by their probability of being true negatives."""

from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor

from .._checks import check_choice, check_int, check_views, check_within, short_repr
from ..mixture import BetaMixture
from ._engine import NegativeBlock, batched_views
from ._hardness import MIX_EPS, Hardness, mixed_log_negatives, weighted_log_negatives
from ._sampling import sample_negative_similarities
from .base import ContrastiveLoss
from .schedules import DEFAULT_SCHEDULE, FitSchedule, FrozenFit, as_schedule

__all__ = ["ProGCLLoss"]

MIX_EPS_RANGE = (1e-30, 1.0)
FIT_BYTES_PER_SAMPLE = 120  # (a fit's peak host memory per sample)
MAX_NUM_SAMPLES = 10**8


class ProGCLLoss(ContrastiveLoss):
    r"""ProGCL-weight and ProGCL-mix, from `ProGCL: Rethinking Hard Negative Mining in Graph
    Contrastive Learning` (Xia et al., ICML 2022, https://arxiv.org/abs/2110.02027). A two-component
    :class:`~pyg_progcl.BetaMixture` of the inter-view negative similarities
    :math:`s' = (\theta+1)/2` gives each negative its hardness
    :math:`b_{ik} = p(\mathrm{true\ neg.} \mid s'_{ik})\, s'_{ik}` (no gradient through
    :math:`b`; docs/algorithms.md §5):

    * ``mode='weight'``: :math:`Ng_i = \sum_{k\neq i} w_{ik}
      (e^{\theta(u_i,v_k)/\tau} + e^{\theta(u_i,u_k)/\tau})`,
      :math:`w_{ik} = b_{ik} / \mathrm{mean}_{j\neq i} b_{ij}`;
    * ``mode='mix'``: GRACE's denominator plus :math:`\sum_a e^{\theta_{mix}(a)/\tau}`,
      :math:`\theta_{mix}(a) = (b_a\theta_a + b_{\pi(a)}\theta_{\pi(a)})/(b_a + b_{\pi(a)} + \epsilon)`
      over the ``num_mix`` negatives of largest :math:`b` and a random pairing :math:`\pi`.

    Until it is :attr:`fitted` the loss equals :class:`InfoNCELoss`; the training loop
    calls :meth:`fit` every epoch after its warm-up.

    .. code-block:: python

        loss_fn = ProGCLLoss(tau=0.4)
        for epoch in range(200):
            h1, h2 = model.views(data.x, data.edge_index)
            if epoch >= 100:                    # warm-up with GRACE's loss, then refit
                loss_fn.fit(h1.detach(), h2.detach())
            loss = loss_fn(h1, h2)

    Args:
        mode: ``'weight'`` or ``'mix'``.
        num_samples: Negative similarities sampled per fit, at most ``10**8``.
        num_mix: Negatives mixed per anchor (capped at the negatives available).
        fit_iters: EM iterations per fit (the paper's ``I = 10``), warm-started.
        mix_eps: The :math:`\epsilon` of the mixing formula, in ``[1e-30, 1]``.
        mixture: The :class:`~pyg_progcl.BetaMixture`; one passed in already fitted
            weights from the first step.
        schedule: ``'floored'``, ``'online'``, ``'frozen'`` or a
            :class:`~pyg_progcl.losses.schedules.FitSchedule`.
        tau, \*\*kwargs: See :class:`ContrastiveLoss`.
    """

    peak_matrices = 8

    def __init__(
        self,
        tau: float = 0.5,
        mode: str = "weight",
        num_samples: int = 50_000,
        num_mix: int = 1000,
        fit_iters: int = 10,
        mix_eps: float = MIX_EPS,
        mixture: Optional[BetaMixture] = None,
        schedule: Union[str, FitSchedule] = DEFAULT_SCHEDULE,
        **kwargs,
    ):
        super().__init__(tau, **kwargs)
        self.mode = check_choice("mode", mode, {"weight", "mix"})
        self.num_samples = check_int("num_samples", num_samples, 2)
        if self.num_samples > MAX_NUM_SAMPLES:
            raise ValueError(
                f"`num_samples` must be at most {MAX_NUM_SAMPLES:_} (got {self.num_samples:_}): "
                f"a fit peaks at about {FIT_BYTES_PER_SAMPLE} bytes per sample"
            )
        self.num_mix = check_int("num_mix", num_mix, 1)
        self.fit_iters = check_int("fit_iters", fit_iters, 1)
        why = "it guards the 0/0 of two vanishing hardnesses b <= 1 as a normal float32"
        self.mix_eps = check_within("mix_eps", mix_eps, *MIX_EPS_RANGE, why)
        if mixture is not None and not isinstance(mixture, BetaMixture):
            raise ValueError(
                f"`mixture` must be a pyg_progcl.BetaMixture or None (got {short_repr(mixture)})"
            )
        self.mixture = BetaMixture() if mixture is None else mixture
        self.schedule = as_schedule(schedule)

    @classmethod
    def reference_code(
        cls,
        tau: float = 0.5,
        mode: str = "weight",
        *,
        shared_weights: bool = True,
        min_beta_high: Optional[float] = 1.01,
        mixture: Optional[BetaMixture] = None,
        **kwargs,
    ) -> ProGCLLoss:
        """ProGCL as the authors' code runs it (https://github.com/junxia97/ProGCL): the
        frozen schedule with ``shared_weights``, and :math:`\\beta` of the mixture's high
        component floored at ``min_beta_high`` (docs/reproduction.md)."""
        mixture = BetaMixture(min_beta_high=min_beta_high) if mixture is None else mixture
        schedule = FrozenFit(shared_weights=shared_weights)
        return cls(tau, mode, mixture=mixture, schedule=schedule, **kwargs)

    @property
    def fitted(self) -> bool:
        """Whether the loss weights its negatives yet (before that it is GRACE's)."""
        return self.schedule.fitted(self)

    @property
    def degenerate_fits(self) -> dict[str, int]:
        """:attr:`.BetaMixture.degenerate_fits` of the mixture (``{kind: count}``)."""
        return self.mixture.degenerate_fits

    def reset_parameters(self):
        """Resets the mixture and the schedule (the loss is GRACE's again)."""
        self.mixture.reset_parameters()
        self.schedule.reset_parameters()

    @torch.no_grad()
    def fit(self, h1: Tensor, h2: Tensor, generator: Optional[torch.Generator] = None):
        """Fits the mixture on ``h1``, ``h2`` as the ``schedule`` says. Returns ``self``."""
        # (a refit reads finiteness with its result; the frozen schedule keeps the views)
        check_views(h1, h2, finite=isinstance(self.schedule, FrozenFit))
        self.schedule.fit(self, h1, h2, generator)
        return self

    @torch.no_grad()
    def refit(self, h1: Tensor, h2: Tensor, generator: Optional[torch.Generator] = None):
        """Fits the mixture on sampled similarities of ``h1``, ``h2``. Returns ``self``."""
        theta = sample_negative_similarities(h1, h2, self.num_samples, generator)
        self.mixture.fit((theta + 1) / 2, max_iter=self.fit_iters)
        return self

    def check_inputs(self, h1: Tensor, h2: Tensor) -> None:
        super().check_inputs(h1, h2)
        self.schedule.check_nodes(h1)
        self.mixture.fitted  # noqa: B018 (eager: refreshes the copy compiled blocks read)

    @batched_views
    def negative_term(self, block: NegativeBlock) -> Tensor:
        if not self.fitted:  # GRACE's until the first fit
            return block.log_sum_exp_both()
        if block.view is None:  # (the dense path's views: one hardness, a block each)
            return torch.stack([self.negative_term(b) for b in block._split()])
        hardness = block.pair.progcl if block.dense else None
        if hardness is None:
            hardness = Hardness(self.mixture, self.schedule)
            if block.dense:
                block.pair.progcl = hardness
        if self.mode == "mix":
            return mixed_log_negatives(block, hardness, self.num_mix, self.mix_eps)
        return weighted_log_negatives(block, hardness)

    def _options(self) -> dict:
        opts = {"mode": self.mode, "num_samples": self.num_samples, "fit_iters": self.fit_iters}
        if self.mode == "mix":
            opts["num_mix"] = self.num_mix
            if self.mix_eps != MIX_EPS:
                opts["mix_eps"] = self.mix_eps
        return opts
