"""Any loss of the package over the global batch of all ranks (data parallel training)."""

from __future__ import annotations

import functools
import math
from typing import Optional

import torch
from torch import Tensor

from .._checks import check_views
from ..losses import (
    ContrastiveLoss,
    FrozenFit,
    ProGCLLoss,
    contrastive_losses,
    full_precision,
    sample_negative_similarities,
)
from .comm import Group, all_gather_with_grad, all_reduce_sum, same_rows, world
from .mixture import fit_mixture


class DistributedLoss(torch.nn.Module):
    r"""A loss of :mod:`pyg_progcl.losses` whose negatives are the whole global batch.

    Every rank passes its own rows ``h1``, ``h2`` (``b`` seeds each, equal on every rank).
    The views of all ``W`` ranks are gathered, gradients flowing back to their owners; a
    rank's anchors are its own ``b`` seeds, and their negatives all ``W·b`` seeds of the
    global batch in both views, exactly as in one process holding the global batch. The
    one-pass engine splits its work by rows: each rank computes its rows' blocks, and the
    column sums (and their gradients) are summed over the ranks.

    Convention (DistributedDataParallel averages gradients over the ranks): the mean over
    the ranks of the returned values is the single-process loss of the global batch, and
    the gradient reaching a rank's views is ``W`` times the single-process gradient on
    those rows, so that the averaged parameter gradients are the single-process ones.
    (``reduction='sum'`` returns ``W`` times this rank's share; ``'none'`` returns this
    rank's ``[2, b]`` per-anchor losses.)

    Args:
        loss: The loss (``ProGCLLoss`` with the frozen schedule needs full-graph views and
            is refused).
        group: The process group (default: the default group, which must be initialised).
    """

    def __init__(self, loss: ContrastiveLoss, group: Group = None):
        super().__init__()
        if not isinstance(loss, ContrastiveLoss):
            raise ValueError(f"`loss` must be a pyg_progcl loss (got {type(loss).__name__})")
        if isinstance(getattr(loss, "schedule", None), FrozenFit):
            raise ValueError(
                "schedule='frozen' keeps per-node views of one graph and cannot be "
                "distributed over batches of seeds; use 'online', 'guarded' or 'fit-once'"
            )
        self.loss, self.group = loss, group

    def forward(self, h1: Tensor, h2: Tensor) -> Tensor:
        """The loss of this rank's anchors against the global batch (see the class).

        Computed in float32 (float64 for float64 views) under autocast too, as the
        wrapped loss's :meth:`~pyg_progcl.losses.ContrastiveLoss.forward` is."""
        u, v, anchors = self._global_batch(h1, h2)
        self.loss.check_inputs(u, v)
        with full_precision(u):
            losses = contrastive_losses(
                u, v, self.loss.tau, self.loss.negative_term(), self.loss.block_size,
                self.loss.num_negatives, self.loss.pool, anchors=anchors,
                reduce=functools.partial(all_reduce_sum, group=self.group),
            )  # fmt: skip
            out = self.loss.reduce(losses)
        return out * world(self.group)[1] if self.loss.reduction == "sum" else out

    def _global_batch(self, h1: Tensor, h2: Tensor) -> tuple[Tensor, Tensor, slice]:
        """Every rank's views gathered (gradients flowing back to their owners) and this
        rank's rows of them; the same error on every rank for unequal local batches."""
        rank = world(self.group)[0]
        check_views(h1, h2)
        same_rows(h1, "h1", self.group)
        u, v = (all_gather_with_grad(h, self.group) for h in (h1, h2))
        b = h1.size(0)
        return u, v, slice(rank * b, (rank + 1) * b)

    @property
    def mixture(self):
        """The wrapped ProGCL loss's :class:`~pyg_progcl.BetaMixture`."""
        return self._progcl().mixture

    @property
    def degenerate_fits(self) -> dict[str, int]:
        """The wrapped ProGCL loss's degenerate fits by kind (every rank counts alike)."""
        return self._progcl().degenerate_fits

    @property
    def schedule(self):
        """The wrapped loss's fit schedule (``None`` for losses without a mixture)."""
        return getattr(self.loss, "schedule", None)

    @torch.no_grad()
    def fit(self, h1: Tensor, h2: Tensor, generator: Optional[torch.Generator] = None):
        """Refits the wrapped ProGCL loss's mixture as its schedule says, on every rank's
        sample at once (:meth:`refit`). Returns ``self``."""
        self._progcl().schedule.fit(self, h1, h2, generator)
        return self

    @torch.no_grad()
    def refit(self, h1: Tensor, h2: Tensor, generator: Optional[torch.Generator] = None):
        """``fit_iters`` EM iterations (warm-started) on ``⌈M / W⌉`` inter-view similarities
        per rank, this rank's anchors against all ``W·b`` seeds, with the statistics summed
        over the ranks (:func:`fit_mixture`); drawn from ``generator`` (default: torch's
        global one, which should differ between ranks: seed each rank with its own seed)."""
        loss = self._progcl()
        u, v, anchors = self._global_batch(h1.detach(), h2.detach())
        num = math.ceil(loss.num_samples / world(self.group)[1])
        theta = sample_negative_similarities(u, v, num, generator, anchors)
        fit_mixture(loss.mixture, (theta + 1) / 2, loss.fit_iters, self.group)
        return self

    def _progcl(self) -> ProGCLLoss:
        if not isinstance(self.loss, ProGCLLoss):
            raise ValueError(f"only a ProGCLLoss has a mixture to fit (got {self.loss!r})")
        return self.loss

    def extra_repr(self) -> str:
        return "" if self.group is None else f"group={self.group!r}"
