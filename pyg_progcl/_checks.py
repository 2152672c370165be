"""Argument checks shared by every module: bad input raises a ``ValueError``
that names the argument and the expected form, never a silent NaN."""

from __future__ import annotations

import math

import torch
from torch import Tensor


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


def check_choice(name: str, value: str, choices) -> str:
    """Checks ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {sorted(choices)} (got {value!r})")
    return value


def check_matrix(name: str, x: Tensor, min_rows: int = 2) -> Tensor:
    """Checks ``x`` is a finite floating-point ``[N, d]`` tensor with ``N >= min_rows``."""
    if not isinstance(x, Tensor):
        raise ValueError(
            f"`{name}` must be a torch.Tensor of shape [N, d] (got {type(x).__name__})"
        )
    if x.dim() != 2:
        raise ValueError(f"`{name}` must have shape [N, d] (got shape {list(x.shape)})")
    if x.size(0) < min_rows:
        raise ValueError(f"`{name}` needs at least {min_rows} rows (nodes) (got {x.size(0)})")
    if x.size(1) < 1:
        raise ValueError(f"`{name}` needs at least one feature column (got shape {list(x.shape)})")
    if not x.is_floating_point():
        raise ValueError(f"`{name}` must be a floating-point tensor (got {x.dtype})")
    if not torch.isfinite(x).all():
        raise ValueError(f"`{name}` contains NaN or inf values; embeddings must be finite")
    return x


def check_views(h1: Tensor, h2: Tensor) -> None:
    """Checks two projected views are finite ``[N, d]`` tensors of one shape, N >= 2."""
    check_matrix("h1", h1)
    check_matrix("h2", h2)
    if h1.shape != h2.shape:
        raise ValueError(
            f"`h1` and `h2` must have the same shape [N, d] (got {list(h1.shape)} and "
            f"{list(h2.shape)})"
        )


def check_edge_index(edge_index: Tensor) -> Tensor:
    """Checks ``edge_index`` is an integer ``[2, num_edges]`` tensor."""
    if not (isinstance(edge_index, Tensor) and edge_index.dim() == 2 and edge_index.size(0) == 2):
        shape = list(edge_index.shape) if isinstance(edge_index, Tensor) else type(edge_index)
        raise ValueError(f"`edge_index` must be a tensor of shape [2, num_edges] (got {shape})")
    if edge_index.is_floating_point() or edge_index.is_complex():
        raise ValueError(f"`edge_index` must be an integer tensor (got {edge_index.dtype})")
    return edge_index


def check_features(x: Tensor) -> Tensor:
    """Checks ``x`` is a ``[num_nodes, num_features]`` tensor (dense or sparse)."""
    if not (isinstance(x, Tensor) and x.dim() == 2):
        shape = list(x.shape) if isinstance(x, Tensor) else type(x)
        raise ValueError(f"`x` must be a tensor of shape [num_nodes, num_features] (got {shape})")
    return x


def check_input_width(x: Tensor, encoder) -> None:
    """Checks ``x`` is ``[num_nodes, encoder.in_channels]`` where the encoder states a width
    (PyG's lazy modules state -1)."""
    width = getattr(encoder, "in_channels", None)
    known = isinstance(x, Tensor) and isinstance(width, int) and width > 0
    if known and (x.dim() != 2 or x.size(1) != width):
        raise ValueError(
            f"`x` must have shape [num_nodes, {width}] (the encoder's in_channels) "
            f"(got {list(x.shape)})"
        )
