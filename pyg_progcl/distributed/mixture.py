"""ProGCL's Beta mixture fitted on every rank's sample at once."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from ..mixture import BetaMixture
from .comm import Group, all_reduce_sum, world

__all__: list[str] = []


@torch.no_grad()
def fit_mixture(
    mixture: BetaMixture, samples: Tensor, max_iter: int | None = None, group: Group = None
) -> BetaMixture:
    """EM on this rank's ``samples`` (values in ``[0, 1]``) with the sufficient statistics
    summed over the ranks (one small all-reduce per iteration).

    Every rank ends with the parameters of ``mixture.fit`` on all ranks' samples at once
    (up to the order of floating-point sums), at the same iteration, given mixtures that
    start alike; invalid samples on any rank raise the same ``ValueError`` on every rank.
    ``samples``: this rank's 1-D sample (ranks may hold different numbers of values);
    ``max_iter`` defaults to the mixture's own. Returns ``mixture`` (warm-started).
    """
    world(group)
    valid = isinstance(samples, Tensor) and samples.dim() == 1 and samples.numel() >= 2
    valid = valid and bool(((samples >= 0) & (samples <= 1)).all())
    device = samples.device if isinstance(samples, Tensor) else "cpu"
    if int(all_reduce_sum(torch.tensor([0 if valid else 1], device=device), group)):
        raise ValueError(
            "`samples` must be a 1-D tensor of at least 2 values in [0, 1] on every rank (map cosines "
            "by (cos + 1) / 2)"
        )
    return mixture.fit(samples, max_iter, reduce=functools.partial(all_reduce_sum, group=group))
