"""The checks of the command line's settings (:class:`~pyg_progcl.cli.TrainConfig`): a bad
value raises a ``ValueError`` that names the setting and the expected form, worded as the
library words its own (one line on stderr, exit status 2, from the command line)."""

from __future__ import annotations

import math

__all__: list[str] = []


def _number(name: str, value, form: str) -> float:
    """``float(value)``, or a ``ValueError`` naming ``name`` and ``form`` (None, a string)."""
    try:
        if isinstance(value, (str, bytes, bool)):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be {form} (got {value!r})") from None


def check_probability(name: str, value: float, *, upper_open: bool = False) -> float:
    """Checks ``value`` lies in ``[0, 1]`` (or ``[0, 1)`` with ``upper_open``)."""
    value = _number(name, value, "a probability")
    ok = 0.0 <= value < 1.0 if upper_open else 0.0 <= value <= 1.0
    if not ok or math.isnan(value):
        form = "[0, 1)" if upper_open else "[0, 1]"
        raise ValueError(f"`{name}` must be a probability in {form} (got {value})")
    return value


def check_positive(name: str, value: float) -> float:
    """Checks ``value`` is a finite number > 0."""
    value = _number(name, value, "a finite number > 0")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"`{name}` must be a finite number > 0 (got {value})")
    return value


def check_nonnegative(name: str, value: float) -> float:
    """Checks ``value`` is a finite number >= 0."""
    value = _number(name, value, "a finite number >= 0")
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"`{name}` must be a finite number >= 0 (got {value})")
    return value


def check_int(name: str, value, minimum: int = 1) -> int:
    """Checks ``value`` is an integer >= ``minimum``."""
    number = _number(name, value, f"an integer >= {minimum}")
    if not number.is_integer() or number < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum} (got {value!r})")
    return int(value)


def check_bool(name: str, value) -> bool:
    """Checks ``value`` is ``True`` or ``False``."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False (got {value!r})")
    return value


def short_repr(value, limit: int = 80) -> str:
    """``repr(value)`` for a message of one line: the type's name where the repr spans
    several lines or more than ``limit`` characters (a module, a large tensor)."""
    text = repr(value)
    return text if "\n" not in text and len(text) <= limit else f"a {type(value).__name__}"


def check_choice(name: str, value: str, choices) -> str:
    """Checks ``value`` is one of ``choices`` (an unhashable ``value`` is not)."""
    try:
        known = value in choices
    except TypeError:  # (a list or dict looked up in a set or dict of choices)
        known = False
    if not known:
        raise ValueError(f"`{name}` must be one of {sorted(choices)} (got {short_repr(value)})")
    return value
