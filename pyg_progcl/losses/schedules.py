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
from ._engine import Pairs, normalize_views

#: MiB of frozen weights :class:`FrozenFit` holds between steps by default (what does not
#: fit is recomputed block by block at every step).
FROZEN_CACHE_MIB = 512.0


class FitSchedule(torch.nn.Module):
    r"""Base of the schedules: what a call of :meth:`.ProGCLLoss.fit` does, and from which
    similarities the hardness ``b`` is computed (here: the current ones, at every step).

    A refit *degenerates* when :meth:`~pyg_progcl.BetaMixture.degeneracy` finds a problem
    (e.g. a false-negative spike at cosine 1, under which near-duplicate negatives lose
    their repulsion and long runs collapse; docs/algorithms.md §5.4); the buffer
    ``degenerated`` records whether one has since the last :meth:`reset_parameters`.

    Args:
        floor: Lower bound of the posterior :math:`p(\mathrm{true\ neg.} \mid s')` in ``b``
            from the first fit on (0: ProGCL's formula): no negative loses more than
            ``1 - floor`` of its hardness, however sure the mixture is that it is a false
            negative. (:class:`FlooredFit`'s engages at the first degenerate refit.)
    """

    #: The schedule's name in :data:`SCHEDULES` (``ProGCLLoss(schedule=name)``).
    name = ""
    #: Whether the weights of the second direction are those of the first (reference code).
    shared_weights = False

    def __init__(self, floor: float = 0.0):
        super().__init__()
        self.floor = check_probability("floor", floor)
        self.register_buffer("degenerated", torch.zeros((), dtype=torch.bool))

    @property
    def posterior_floor(self) -> float:
        """The lower bound the schedule puts on ``p(TN | s')`` in ``b`` now (0: none)."""
        return self.floor

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
            rejected fit does not warn (``'guarded'``).
        floor: See :class:`FitSchedule`.
    """

    def __init__(self, keep_healthy: bool = False, floor: float = 0.0):
        super().__init__(floor)
        self.keep_healthy = check_bool("keep_healthy", keep_healthy)
        self.rejected = 0  # refits rejected since construction

    @property
    def name(self) -> str:
        return "guarded" if self.keep_healthy else "online"

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
        return ", ".join(parts + _floor_repr(self.floor, 0.0))


#: The ``floor`` of ``schedule='floored'``.
DEGENERATE_FLOOR = 0.5


class FlooredFit(OnlineFit):
    r"""``'floored'``, the default: :class:`OnlineFit` (refit at every call, ``b`` from the
    current similarities) until a refit degenerates; from then on, for the rest of
    training, the posterior :math:`p(\mathrm{true\ neg.} \mid s')` in ``b`` is floored at
    ``floor``, so that no negative loses more than ``1 - floor`` of its hardness. Until a
    refit degenerates the loss is ``'online'``'s exactly.

    Args:
        floor: The floor engaged at the first degenerate refit (0: never, ``'online'``).
        keep_healthy: See :class:`OnlineFit`.
    """

    name = "floored"

    def __init__(self, floor: float = DEGENERATE_FLOOR, keep_healthy: bool = False):
        super().__init__(keep_healthy, floor)

    @property
    def posterior_floor(self) -> float:
        return self.floor if bool(self.degenerated) else 0.0

    def extra_repr(self) -> str:
        parts = ["keep_healthy=True"] if self.keep_healthy else []
        return ", ".join(_floor_repr(self.floor, DEGENERATE_FLOOR) + parts)


class FitOnce(FitSchedule):
    """The first :meth:`.ProGCLLoss.fit` fits the mixture (unless it was passed in fitted),
    later calls keep it; ``b`` comes from the current similarities.

    Args:
        floor: See :class:`FitSchedule`.
    """

    name = "fit-once"

    def extra_repr(self) -> str:
        return ", ".join(_floor_repr(self.floor, 0.0))

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
        floor: See :class:`FitSchedule`.
    """

    name = "frozen"

    def __init__(
        self, cache_mib: float = FROZEN_CACHE_MIB, shared_weights: bool = False, floor: float = 0.0
    ):
        super().__init__(floor)
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
        parts += ["shared_weights=True"] if self.shared_weights else []
        return ", ".join(parts + _floor_repr(self.floor, 0.0))


#: The schedule of ``ProGCLLoss()`` and of the presets.
DEFAULT_SCHEDULE = "floored"

#: Schedules by name (``ProGCLLoss(schedule=...)``); each takes a ``floor``.
SCHEDULES: dict[str, Callable[..., FitSchedule]] = {
    "online": OnlineFit,
    "floored": FlooredFit,
    "guarded": functools.partial(OnlineFit, keep_healthy=True),
    "fit-once": FitOnce,
    "frozen": FrozenFit,
}


def _floor_repr(floor: float, default: float) -> list[str]:
    """``["floor=…"]`` where ``floor`` is not the schedule's ``default``."""
    return [] if floor == default else [f"floor={floor:g}"]


def as_schedule(schedule: Union[str, FitSchedule], floor: Optional[float] = None) -> FitSchedule:
    """A schedule from its name in :data:`SCHEDULES` (with its ``floor``; ``None``: the
    schedule's default), or the schedule itself."""
    if isinstance(schedule, FitSchedule):
        return schedule
    make = SCHEDULES[check_choice("schedule", schedule, SCHEDULES)]
    return make() if floor is None else make(floor=floor)


def schedule_name(schedule: FitSchedule) -> str:
    """The schedule's :attr:`~FitSchedule.name` (its class name if it has none)."""
    return schedule.name or type(schedule).__name__


def with_posterior_floor(schedule: FitSchedule, posterior_floor: float) -> FitSchedule:
    """The single-floor schedule that computes what ``schedule`` did with the former
    ``ProGCLLoss(posterior_floor=...)`` (a floor from the first fit, combined by ``max``
    with the schedule's own): ``schedule`` with that floor, or for a :class:`FlooredFit`
    whose floor it reaches, an :class:`OnlineFit` floored from the first fit.

    Raises:
        ValueError: for a ``posterior_floor`` below a :class:`FlooredFit`'s floor, which
            no single floor equals (one floor before the first degenerate refit, a higher
            one after).
    """
    posterior_floor = check_probability("posterior_floor", posterior_floor)
    if not posterior_floor:
        return schedule
    if not isinstance(schedule, FlooredFit):
        schedule.floor = max(schedule.floor, posterior_floor)
        return schedule
    if posterior_floor >= schedule.floor:  # max(x, floor) = x from the first fit on
        return OnlineFit(schedule.keep_healthy, posterior_floor)
    raise ValueError(
        f"`posterior_floor={posterior_floor:g}` with schedule='floored' has no single-floor "
        f"equivalent (p(TN | s') floored at {posterior_floor:g}, then at {schedule.floor:g} "
        f"from the first degenerate refit): use schedule='online' with floor={posterior_floor:g} "
        "(from the first fit) or schedule='floored' with a floor (from the first degenerate "
        "refit)"
    )


def legacy_floor(schedule: str, posterior_floor: float) -> tuple[str, Optional[float]]:
    """``(schedule, floor)``, the names of :func:`with_posterior_floor` for a config: the
    schedule's name and its floor (``None``: the schedule's default, where
    ``posterior_floor`` is 0)."""
    made = with_posterior_floor(as_schedule(schedule), posterior_floor)
    return made.name, (made.floor if posterior_floor else None)
