"""Any loss of the package over the global batch of all ranks (data parallel training)."""

from __future__ import annotations

import inspect
import math
from typing import Optional

import torch
from torch import Tensor

from .._checks import check_views
from ..losses import ContrastiveLoss, FrozenFit, ProGCLLoss
from ..losses._engine import full_precision
from ..losses._sampling import sample_negative_similarities
from .comm import Group, all_gather_with_grad, same_rows, world
from .mixture import fit_mixture

__all__ = ["DistributedLoss"]


class DistributedLoss(torch.nn.Module):
    r"""A loss of :mod:`pyg_progcl.losses` whose negatives are the whole global batch.

    Every rank passes its own rows ``h1``, ``h2`` (``b`` seeds each, equal on every rank).
    The views of all ``W`` ranks are gathered, gradients flowing back to their owners; a
    rank's anchors are its own ``b`` seeds, and their negatives all ``W·b`` seeds of the
    global batch in both views, exactly as in one process holding the global batch.

    Each rank runs the wrapped loss's ``check_inputs``, ``compute_loss`` and ``reduce`` on
    the gathered views (docs/distributed.md); the mean over the ranks of the returned values
    is the single-process loss (``reduction='sum'`` returns ``W`` times this rank's share).

    Args:
        loss: The loss (not ``ProGCLLoss`` with the frozen schedule).
        group: The process group (default: the default group, which must be initialised).
    """

    def __init__(self, loss: ContrastiveLoss, group: Group = None):
        super().__init__()
        if not isinstance(loss, ContrastiveLoss):
            raise ValueError(f"`loss` must be a pyg_progcl loss (got {type(loss).__name__})")
        if isinstance(getattr(loss, "schedule", None), FrozenFit):
            raise ValueError(
                "schedule='frozen' keeps per-node views of one graph and cannot be "
                "distributed over batches of seeds; use 'floored' or 'online'"
            )
        if type(loss).forward is not ContrastiveLoss.forward:
            raise ValueError(
                f"{type(loss).__name__} overrides `forward`, which DistributedLoss does not "
                "run (it calls check_inputs, compute_loss(h1, h2, anchors=rows) and reduce "
                "on the global batch); override `compute_loss` instead"
            )
        self.loss, self.group = loss, group
        keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        self._takes_anchors = any(  # (whether compute_loss takes the keyword `anchors`)
            (p.name == "anchors" and p.kind in keyword) or p.kind == inspect.Parameter.VAR_KEYWORD
            for p in inspect.signature(loss.compute_loss).parameters.values()
        )

    def forward(self, h1: Tensor, h2: Tensor) -> Tensor:
        """The loss of this rank's anchors against the global batch, in full precision
        under autocast too (as the wrapped loss's ``forward``)."""
        u, v, anchors = self._global_batch(h1, h2)
        self.loss.check_inputs(u, v)
        with full_precision(u):
            out = self.loss.reduce(self._own_losses(u, v, anchors))
        return out * world(self.group)[1] if self.loss.reduction == "sum" else out

    def _own_losses(self, u: Tensor, v: Tensor, anchors: slice) -> Tensor:
        """``[2, b]`` losses of this rank's anchors from the wrapped ``compute_loss``."""
        if self._takes_anchors:
            losses = self.loss.compute_loss(u, v, anchors=anchors)
            rows, call = anchors.stop - anchors.start, "compute_loss(h1, h2, anchors=rows)"
        else:
            losses, rows, call = self.loss.compute_loss(u, v), u.size(0), "compute_loss(h1, h2)"
        if tuple(losses.shape) != (2, rows):
            raise ValueError(
                f"{type(self.loss).__name__}.{call} must return [2, {rows}] per-anchor losses "
                f"(got shape {list(losses.shape)})"
            )
        return losses if self._takes_anchors else losses[:, anchors]

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
        """``fit_iters`` warm-started EM iterations on ``⌈M / W⌉`` similarities per rank
        (this rank's anchors against all ``W·b`` seeds), statistics summed over the ranks;
        drawn from ``generator`` (default: torch's global one; seed each rank differently)."""
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
