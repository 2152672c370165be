"""ProGCL's fit schedules: when the mixture is refit, and from which similarities."""

from __future__ import annotations

import warnings
from typing import Optional, Union

import torch
from torch import Tensor

from .._checks import check_bool, check_choice, check_probability, short_repr
from .._compat import stacklevel_outside_package
from ..mixture import DEGENERACY_KINDS, MixtureDegeneracyWarning
from ._engine import NegativeBlock, normalize_views, shifted_logits

__all__ = ["FitSchedule", "FlooredFit", "FrozenFit", "OnlineFit"]


class FitSchedule(torch.nn.Module):
    r"""Base of the schedules: what a call of :meth:`.ProGCLLoss.fit` does, and from which
    similarities the hardness ``b`` is computed (here: the current ones). The buffer
    ``degenerated`` records whether a refit degenerated (docs/algorithms.md §5.4).

    Args:
        floor: Lower bound of the posterior :math:`p(\mathrm{true\ neg.} \mid s')` in ``b``
            from the first fit on (0: ProGCL's formula): no negative loses more than
            ``1 - floor`` of its hardness.
    """

    name = ""  # (``ProGCLLoss(schedule=name)``)
    default_floor = 0.0  # (not shown in the repr)
    shared_weights = False  # (the second direction weighted as the first: reference code)

    def __init__(self, floor: float = 0.0):
        super().__init__()
        self.floor = check_probability("floor", floor)
        self.register_buffer("degenerated", torch.zeros((), dtype=torch.bool))
        self._warned = False  # whether a degenerate refit was warned about

    @property
    def posterior_floor(self) -> float:
        """The lower bound the schedule puts on ``p(TN | s')`` in ``b`` now (0: none)."""
        return float(self.floor_now())

    def floor_now(self) -> Union[float, Tensor]:
        """:attr:`posterior_floor` as a number or a device value (no host read)."""
        return self.floor

    def fit(self, loss, h1: Tensor, h2: Tensor, generator: Optional[torch.Generator]) -> None:
        """Refits ``loss``'s mixture on ``h1``, ``h2`` (with :meth:`refit`) if due."""
        raise NotImplementedError

    def refit(self, loss, h1: Tensor, h2: Tensor, generator: Optional[torch.Generator]) -> None:
        """``loss.refit(h1, h2, generator)``, noting in ``degenerated`` if it degenerated."""
        mixture = loss.mixture
        before = dict(mixture.degenerate_fits)
        loss.refit(h1, h2, generator)
        if not mixture.problems_:
            return
        self.degenerated.fill_(True)
        new = [k for k, n in mixture.degenerate_fits.items() if n > before.get(k, 0)]
        kinds = [DEGENERACY_KINDS.get(k, k) for k in new if k != "not-converged"]
        if kinds and not self._warned and not self.floor:
            self._warned = True
            message = (
                f"ProGCL schedule '{schedule_name(self)}' has no floor and a mixture fit "
                f"degenerated ({', '.join(kinds)}): its weights may no longer tell true from "
                "false negatives; use schedule='floored' (--schedule floored) or a floor, "
                f"e.g. {type(self).__name__}(floor=0.5) (--floor 0.5)"
            )
            warnings.warn(
                MixtureDegeneracyWarning(message), stacklevel=stacklevel_outside_package()
            )

    def fitted(self, loss) -> bool:
        """Whether ``loss`` weights its negatives yet (before that it is GRACE's)."""
        return loss.mixture.fitted

    def weight_logits(self, block: NegativeBlock, view: int) -> Tensor:
        """The detached inter-view logits of ``view``'s anchors that ``b`` comes from."""
        return block._detached_logits()

    def check_nodes(self, h: Tensor) -> None:
        """Checks views of ``h``'s nodes can be weighted."""

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        frozen = [k for k in ("frozen_u", "frozen_v") if prefix + k in state_dict]
        if frozen and not isinstance(self, FrozenFit):
            raise ValueError(
                f"the state is of schedule 'frozen' (it holds {', '.join(frozen)}); this "
                f"loss's schedule is {schedule_name(self)!r}: load it into a loss with "
                "schedule='frozen'"
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def reset_parameters(self) -> None:
        """Forgets what the schedule holds."""
        self.degenerated.fill_(False)

    def extra_repr(self) -> str:
        return "" if self.floor == self.default_floor else f"floor={self.floor:g}"


class OnlineFit(FitSchedule):
    r"""``'online'``, the paper's: every :meth:`.ProGCLLoss.fit` refits, warm-started."""

    name = "online"

    def fit(self, loss, h1, h2, generator=None) -> None:
        self.refit(loss, h1, h2, generator)


#: The ``floor`` of ``schedule='floored'``.
DEGENERATE_FLOOR = 0.5


class FlooredFit(OnlineFit):
    r"""``'floored'``, the default: :class:`OnlineFit` until a refit degenerates; from then
    on the posterior :math:`p(\mathrm{true\ neg.} \mid s')` in ``b`` is floored at
    ``floor``, so that no negative loses more than ``1 - floor`` of its hardness.

    Args:
        floor: The floor engaged at the first degenerate refit (0: never, ``'online'``).
    """

    name = "floored"
    default_floor = DEGENERATE_FLOOR

    def __init__(self, floor: float = DEGENERATE_FLOOR):
        super().__init__(floor)

    def floor_now(self) -> Tensor:
        return self.degenerated.double() * self.floor  # (float64: the floor as given)


class FrozenFit(FitSchedule):
    """The reference code's schedule: the first :meth:`.ProGCLLoss.fit` fits the mixture
    (unless fitted) and freezes the normalised views (buffers ``frozen_u``, ``frozen_v``);
    ``b`` comes from *their* similarities at every later step (the same ``N`` nodes).

    Args:
        shared_weights: Weight the anchors of both views by the first direction's matrix,
            index by index: anchor :math:`v_i`'s negatives get :math:`b(\\theta(u_i, v_k))`
            instead of :math:`b(\\theta(v_i, u_k))`, as the reference code does.
        floor: See :class:`FitSchedule`.
    """

    name = "frozen"

    def __init__(self, shared_weights: bool = False, floor: float = 0.0):
        super().__init__(floor)
        self.shared_weights = check_bool("shared_weights", shared_weights)
        self.register_buffer("frozen_u", None)
        self.register_buffer("frozen_v", None)

    def fit(self, loss, h1, h2, generator=None) -> None:
        if self.frozen_u is not None:
            return
        if not loss.mixture.fitted:
            self.refit(loss, h1, h2, generator)
        self.frozen_u, self.frozen_v = (t.detach().clone() for t in normalize_views(h1, h2))

    def fitted(self, loss) -> bool:
        return self.frozen_u is not None

    def weight_logits(self, block: NegativeBlock, view: int) -> Tensor:
        u, v = (t.to(block.anchors) for t in (self.frozen_u, self.frozen_v))
        a, o = (u, v) if view == 0 else (v, u)
        if not block.dense:
            a, o = a[block.rows], o if block.cols is None else o[block.cols]
        return shifted_logits(a, o, block.tau)

    def check_nodes(self, h: Tensor) -> None:
        if self.frozen_u is not None and h.size(0) != self.frozen_u.size(0):
            raise ValueError(
                f"`h1` has {h.size(0)} nodes but schedule='frozen' was fitted on "
                f"{self.frozen_u.size(0)}: the frozen weights need the same nodes at every step"
            )

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self.frozen_u = self.frozen_v = None

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # (the frozen views' shape, or absence, comes from the state: both or neither,
        # finite [N, d] of one shape)
        views = {name: state_dict.get(prefix + name) for name in ("frozen_u", "frozen_v")}
        u, v = views.values()
        if not all(isinstance(t, Tensor) for t in (u, v)) and (u is not None or v is not None):
            missing = "frozen_u" if not isinstance(u, Tensor) else "frozen_v"
            raise ValueError(
                f"the frozen schedule's state lacks its view {missing!r} (a fitted state holds "
                "frozen_u and frozen_v)"
            )
        if u is not None and (u.dim() != 2 or u.shape != v.shape):
            raise ValueError(
                f"the frozen schedule's views must be two [N, d] tensors of one shape (got "
                f"frozen_u {list(u.shape)}, frozen_v {list(v.shape)})"
            )
        for name, t in views.items():
            if t is not None and (not t.is_floating_point() or not bool(torch.isfinite(t).all())):
                raise ValueError(
                    f"the frozen schedule's view {name!r} must hold finite floating-point "
                    f"values (got {t.dtype}"
                    f"{'' if not t.is_floating_point() else ' with NaN or infinity'})"
                )
            setattr(self, name, None if t is None else torch.empty_like(t))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        parts = ["shared_weights=True"] if self.shared_weights else []
        return ", ".join(parts + ([super().extra_repr()] if self.floor else []))


DEFAULT_SCHEDULE = "floored"
SCHEDULES = {s.name: s for s in (OnlineFit, FlooredFit, FrozenFit)}


def as_schedule(schedule: Union[str, FitSchedule], floor: Optional[float] = None) -> FitSchedule:
    """A schedule from its name in ``SCHEDULES`` (with ``floor`` if given), or itself."""
    if isinstance(schedule, FitSchedule):
        return schedule
    if not isinstance(schedule, str):
        hint = f"; pass {schedule.__name__}()" if isinstance(schedule, type) else ""
        raise ValueError(
            f"`schedule` must be one of {sorted(SCHEDULES)} or a FitSchedule instance (got "
            f"{short_repr(schedule)}{hint})"
        )
    make = SCHEDULES[check_choice("schedule", schedule, SCHEDULES)]
    return make() if floor is None else make(floor=floor)


def schedule_name(schedule: FitSchedule) -> str:
    """The schedule's :attr:`~FitSchedule.name` (its class name if it has none)."""
    return schedule.name or type(schedule).__name__
