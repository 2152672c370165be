"""ProGCL's fit schedules: when :meth:`.ProGCLLoss.fit` refits the mixture, and which
similarities the weights come from (docs/algorithms.md §5.4)."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Callable, Optional, Union

import torch
from torch import Tensor

from .._checks import check_bool, check_choice, check_nonnegative, check_probability
from ..mixture import MixtureDegeneracyWarning
from .engine import Pairs, normalize_views

#: MiB of frozen weights :class:`FrozenFit` holds between steps by default (what does not
#: fit is recomputed block by block at every step).
FROZEN_CACHE_MIB = 512.0


class FitSchedule(torch.nn.Module):
    """Base of the schedules: what a call of :meth:`.ProGCLLoss.fit` does, and from which
    similarities the hardness ``b`` is computed (here: the current ones, at every step).

    A refit *degenerates* when :meth:`~pyg_progcl.BetaMixture.degeneracy` finds a problem
    (e.g. a false-negative spike at cosine 1, under which near-duplicate negatives lose
    their repulsion and long runs collapse; docs/algorithms.md §5.4); the buffer
    ``degenerated`` records whether one has since the last :meth:`reset_parameters`.
    """

    #: Whether the weights of the second direction are those of the first (reference code).
    shared_weights = False
    #: Lower bound the schedule puts on ``p(TN | s')`` in ``b`` now (on top of the loss's
    #: ``posterior_floor``; 0: none).
    posterior_floor = 0.0

    def __init__(self):
        super().__init__()
        self.register_buffer("degenerated", torch.zeros((), dtype=torch.bool))

    def fit(self, loss, h1: Tensor, h2: Tensor, generator: Optional[torch.Generator]) -> None:
        """Refits ``loss``'s mixture on ``h1``, ``h2`` (with :meth:`refit`) if due."""
        raise NotImplementedError

    def refit(self, loss, h1: Tensor, h2: Tensor, generator: Optional[torch.Generator]) -> None:
        """``loss.refit(h1, h2, generator)``, noting in ``degenerated`` if it degenerated."""
        loss.refit(h1, h2, generator)
        if loss.mixture.problems_:
            self.degenerated.fill_(True)

    def fitted(self, loss) -> bool:
        """Whether ``loss`` weights its negatives yet (before that it is GRACE's)."""
        return loss.mixture.fitted

    def weight_logits(
        self, pairs: Pairs, logits: Tensor, tau: float, out: Optional[Tensor] = None
    ) -> Tensor:
        """The shifted logits ``b`` is computed from for the stored block ``pairs`` whose
        current logits are ``logits``."""
        return logits

    def check_nodes(self, h: Tensor) -> None:
        """Checks views of ``h``'s nodes can be weighted (a frozen schedule needs its own)."""

    def reset_parameters(self) -> None:
        """Forgets what the schedule holds."""
        self.degenerated.fill_(False)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # States saved before the buffer existed: no refit had degenerated as far as known.
        state_dict.setdefault(prefix + "degenerated", torch.zeros((), dtype=torch.bool))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class OnlineFit(FitSchedule):
    r"""Every :meth:`.ProGCLLoss.fit` refits the mixture, warm-started (ProGCL's online
    refit); ``b`` comes from the current similarities at every step.

    Args:
        keep_healthy: Reject a refit that leaves the mixture degenerate: the mixture keeps
            its last healthy parameters (or stays unfitted, the loss GRACE's), and the
            rejected fit does not warn.
        degenerate_floor: From the first degenerate refit on, floor the posterior
            :math:`p(\mathrm{true\ neg.} \mid s')` in ``b`` at this value for the rest of
            training (0: never): no negative then loses more than ``1 - degenerate_floor``
            of its hardness. Until a refit degenerates the loss is ``'online'``'s exactly.
    """

    def __init__(self, keep_healthy: bool = False, degenerate_floor: float = 0.0):
        super().__init__()
        self.keep_healthy = check_bool("keep_healthy", keep_healthy)
        self.degenerate_floor = check_probability("degenerate_floor", degenerate_floor)
        self.rejected = 0  # refits rejected since construction

    @property
    def posterior_floor(self) -> float:
        return self.degenerate_floor if bool(self.degenerated) else 0.0

    def fit(self, loss, h1, h2, generator=None) -> None:
        if not self.keep_healthy:
            self.refit(loss, h1, h2, generator)
            return
        mixture = loss.mixture
        before = {k: t.clone() for k, t in mixture.state_dict().items()}
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always", MixtureDegeneracyWarning)
            self.refit(loss, h1, h2, generator)
        if mixture.problems_:
            mixture.load_state_dict(before)
            self.rejected += 1

    def extra_repr(self) -> str:
        parts = ["keep_healthy=True"] if self.keep_healthy else []
        if self.degenerate_floor:
            parts.append(f"degenerate_floor={self.degenerate_floor:g}")
        return ", ".join(parts)


class FitOnce(FitSchedule):
    """The first :meth:`.ProGCLLoss.fit` fits the mixture (unless it was passed in fitted),
    later calls keep it; ``b`` comes from the current similarities."""

    def fit(self, loss, h1, h2, generator=None) -> None:
        if not loss.mixture.fitted:
            self.refit(loss, h1, h2, generator)


class FrozenFit(FitSchedule):
    """The reference code's schedule: the first :meth:`.ProGCLLoss.fit` fits the mixture
    (unless it was passed in fitted) and freezes the two normalised views it was given;
    ``b`` comes from *their* similarities at every later step, so the weights are those of
    the fit epoch.

    Only the ``2·N·d`` stored floats are state (buffers ``frozen_u``, ``frozen_v``); the
    ``N×N`` weights they give are held between steps up to ``cache_mib`` MiB and recomputed
    block by block beyond (which trades memory for time and changes no value). The loss
    needs the same ``N`` nodes in the same order at every step (full-graph training).

    Args:
        cache_mib: MiB of weight blocks held between steps (``4·N²`` bytes hold all in
            float32, twice that with ``shared_weights``).
        shared_weights: Weight the anchors of both views by the first direction's matrix,
            index by index, as the reference code does: anchor :math:`v_i`'s negatives
            :math:`u_k`, :math:`v_k` get :math:`b(\\theta(u_i, v_k))` instead of the pair's
            own :math:`b(\\theta(v_i, u_k))`. Only to imitate that code
            (:meth:`.ProGCLLoss.reference_code`).
    """

    def __init__(self, cache_mib: float = FROZEN_CACHE_MIB, shared_weights: bool = False):
        super().__init__()
        self.cache_mib = check_nonnegative("cache_mib", cache_mib)
        self.shared_weights = check_bool("shared_weights", shared_weights)
        self.register_buffer("frozen_u", None)
        self.register_buffer("frozen_v", None)
        self._held: tuple[Optional[Tensor], dict] = (None, {})  # (frozen_u, b per row block)

    def fit(self, loss, h1, h2, generator=None) -> None:
        if self.frozen_u is not None:
            return
        if not loss.mixture.fitted:
            self.refit(loss, h1, h2, generator)
        self.frozen_u, self.frozen_v = (t.detach().clone() for t in normalize_views(h1, h2))

    def fitted(self, loss) -> bool:
        return self.frozen_u is not None

    def weight_logits(self, pairs, logits, tau, out=None) -> Tensor:
        if self.shared_weights:  # the pairs of view 0's anchors, whatever the block's view
            pairs = dataclasses.replace(pairs, view=0)
        return pairs.logits(*self.views_like(logits), tau, out)

    def views_like(self, like: Tensor) -> tuple[Tensor, Tensor]:
        """The frozen views in ``like``'s dtype and device."""
        return self.frozen_u.to(like), self.frozen_v.to(like)

    @property
    def held_blocks(self) -> dict[tuple, Tensor]:
        """The weight blocks held for the current frozen views, by ``(start, stop, view,
        dtype, device)``; a new fit, a loaded state or ``.to()`` replaces the views and
        drops what was held for the old ones."""
        if self._held[0] is not self.frozen_u:
            self._held = (self.frozen_u, {})
        return self._held[1]

    def weight_block(
        self, key: tuple, compute: Callable[[], Tensor], out: Optional[Tensor]
    ) -> Tensor:
        """The weight block ``key``: held from an earlier step (copied to ``out``), or
        computed now and held while all held blocks fit ``cache_mib``."""
        held = self.held_blocks
        if key in held:
            return held[key].clone() if out is None else out.copy_(held[key])
        b = compute()
        if sum(t.nbytes for t in held.values()) + b.nbytes <= self.cache_mib * 2**20:
            held[key] = b.clone()
        return b

    def check_nodes(self, h: Tensor) -> None:
        if self.frozen_u is not None and h.size(0) != self.frozen_u.size(0):
            raise ValueError(
                f"`h1` has {h.size(0)} nodes but schedule='frozen' was fitted on "
                f"{self.frozen_u.size(0)}: the frozen weights need the same nodes at every step"
            )

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self.frozen_u = self.frozen_v = None
        self._held = (None, {})  # free the held weights now, not at the next weighted step

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # The frozen views exist only after a fit: take their shape (or absence) from the state.
        for name in ("frozen_u", "frozen_v"):
            saved = state_dict.get(prefix + name)
            setattr(self, name, None if saved is None else torch.empty_like(saved))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        parts = [] if self.cache_mib == FROZEN_CACHE_MIB else [f"cache_mib={self.cache_mib:g}"]
        return ", ".join(parts + (["shared_weights=True"] if self.shared_weights else []))


#: The ``degenerate_floor`` of ``schedule='floored'``.
DEGENERATE_FLOOR = 0.5
#: The schedule of ``ProGCLLoss()`` and of the presets.
DEFAULT_SCHEDULE = "floored"

#: Schedules by name (``ProGCLLoss(schedule=...)``).
SCHEDULES: dict[str, Callable[[], FitSchedule]] = {
    "online": OnlineFit,
    "floored": functools.partial(OnlineFit, degenerate_floor=DEGENERATE_FLOOR),
    "guarded": functools.partial(OnlineFit, keep_healthy=True),
    "fit-once": FitOnce,
    "frozen": FrozenFit,
}


def as_schedule(schedule: Union[str, FitSchedule]) -> FitSchedule:
    """A schedule from its name in :data:`SCHEDULES`, or the schedule itself."""
    if isinstance(schedule, FitSchedule):
        return schedule
    return SCHEDULES[check_choice("schedule", schedule, SCHEDULES)]()


def schedule_name(schedule: FitSchedule) -> str:
    """The name in :data:`SCHEDULES` of the schedule with the same class and options, else
    of its class (its class name if none)."""
    named = {name: make() for name, make in SCHEDULES.items()}
    for name, made in named.items():
        if type(made) is type(schedule) and made.extra_repr() == schedule.extra_repr():
            return name
    by_class = {type(made): name for name, made in reversed(named.items())}
    return by_class.get(type(schedule), type(schedule).__name__)
