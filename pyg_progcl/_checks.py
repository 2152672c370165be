"""Argument checks: bad input raises a ``ValueError`` naming the argument and the form expected."""

from __future__ import annotations

import inspect
import math

import torch
from torch import Tensor
from torch_geometric.utils import is_sparse


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
    if not (0.0 <= value < 1.0 if upper_open else 0.0 <= value <= 1.0):  # (False for NaN)
        form = "[0, 1)" if upper_open else "[0, 1]"
        raise ValueError(f"`{name}` must be a probability in {form} (got {value})")
    return value


def check_positive(name: str, value: float, strict: bool = True) -> float:
    """Checks ``value`` is a finite number > 0 (``>= 0`` unless ``strict``)."""
    form = "a finite number " + ("> 0" if strict else ">= 0")
    value = _number(name, value, form)
    if not (math.isfinite(value) and (value > 0 if strict else value >= 0)):
        raise ValueError(f"`{name}` must be {form} (got {value})")
    return value


def check_within(name: str, value: float, low: float, high: float, why: str) -> float:
    """Checks ``value`` is a number > 0 in ``[low, high]``; ``why`` ends the message."""
    value = check_positive(name, value)
    if not low <= value <= high:
        raise ValueError(f"`{name}` must lie in [{low:g}, {high:g}] (got {value:g}): {why}")
    return value


def check_nonnegative(name: str, value: float) -> float:
    """Checks ``value`` is a finite number >= 0."""
    return check_positive(name, value, strict=False)


def check_int(name: str, value, minimum: int = 1) -> int:
    """Checks ``value`` is an integer >= ``minimum``."""
    number = _number(name, value, f"an integer >= {minimum}")
    if not number.is_integer() or number < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum} (got {value!r})")
    return int(value)


def check_optional(check, name: str, value, *args):
    """``check(name, value, *args)``, or ``None`` where ``value`` is ``None``."""
    return None if value is None else check(name, value, *args)


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


def check_matrix(name: str, x: Tensor, min_rows: int = 2, finite: bool = True) -> Tensor:
    """Checks ``x`` is a finite (unless not ``finite``) floating-point ``[N, d]`` tensor
    with ``N >= min_rows``."""
    if not isinstance(x, Tensor):
        raise ValueError(
            f"`{name}` must be a torch.Tensor of shape [N, d] (got {type(x).__name__})"
        )
    if x.layout != torch.strided:
        raise ValueError(
            f"`{name}` must be a dense tensor (got a {x.layout} tensor); pass {name}.to_dense()"
        )
    if x.dim() != 2:
        raise ValueError(f"`{name}` must have shape [N, d] (got shape {list(x.shape)})")
    if x.size(0) < min_rows:
        raise ValueError(f"`{name}` needs at least {min_rows} rows (nodes) (got {x.size(0)})")
    if x.size(1) < 1:
        raise ValueError(f"`{name}` needs at least one feature column (got shape {list(x.shape)})")
    if not x.is_floating_point():
        raise ValueError(f"`{name}` must be a floating-point tensor (got {x.dtype})")
    if finite and not torch.isfinite(x).all():
        raise ValueError(f"`{name}` contains NaN or inf values; embeddings must be finite")
    return x


def check_views(h1: Tensor, h2: Tensor, finite: bool = True) -> None:
    """Checks two projected views are finite ``[N, d]`` tensors of one shape, N >= 2
    (``finite=False``: their form only); values are read on the host once for both, not
    under ``torch.compile``."""
    check_matrix("h1", h1, finite=False)
    check_matrix("h2", h2, finite=False)
    if h1.shape != h2.shape:
        raise ValueError(
            f"`h1` and `h2` must have the same shape [N, d] (got {list(h1.shape)} and "
            f"{list(h2.shape)})"
        )
    if not finite or getattr(torch.compiler, "is_compiling", lambda: False)():  # (torch >= 2.3)
        return
    finite = torch.isfinite(torch.stack([h1.detach().abs().amax(), h2.detach().abs().amax()]))
    if not finite.all().item():
        name = "h1" if not bool(finite[0]) else "h2"
        raise ValueError(f"`{name}` contains NaN or inf values; embeddings must be finite")


#: The integer types of node indices that torch's indexing and PyG take; narrower ones
#: are refused, not cast.
INDEX_DTYPES = (torch.int64, torch.int32)
_INDEX_HINTS = {torch.uint8: 255, torch.int8: 127, torch.int16: 32767}


def check_edge_index(edge_index: Tensor, adjacency: bool = False) -> Tensor:
    """Checks ``edge_index`` is an int64 or int32 ``[2, num_edges]`` tensor (``adjacency``:
    or a sparse adjacency, which :func:`check_graph` checks)."""
    if adjacency and is_sparse(edge_index):
        return edge_index
    if not isinstance(edge_index, Tensor):
        kind = " or a sparse adjacency" if adjacency else ""
        raise ValueError(
            f"`edge_index` must be a tensor of shape [2, num_edges]{kind} (got "
            f"{type(edge_index).__name__ if adjacency else type(edge_index)})"
        )
    shape = list(edge_index.shape)
    if edge_index.dim() == 2 and edge_index.size(1) == 2 and edge_index.size(0) != 2:
        raise ValueError(
            f"`edge_index` must have shape [2, num_edges] (got {shape}, which looks "
            "transposed: pass edge_index.t())"
        )
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"`edge_index` must have shape [2, num_edges] (got {shape})")
    if edge_index.is_floating_point() or edge_index.is_complex():
        raise ValueError(
            f"`edge_index` must be an integer tensor (got {edge_index.dtype}); node indices "
            "are integers, e.g. edge_index.long()"
        )
    if edge_index.dtype not in INDEX_DTYPES:
        high = _INDEX_HINTS.get(edge_index.dtype)
        hint = "" if high is None else f", which holds node ids up to {high} only"
        hint = ": a mask, not node indices)" if edge_index.dtype == torch.bool else hint + ")"
        raise ValueError(
            f"`edge_index` must be an int64 or int32 tensor (got {edge_index.dtype}{hint}"
            + ("" if edge_index.dtype == torch.bool else "; cast it with edge_index.long()")
        )
    return edge_index


def check_features(x: Tensor) -> Tensor:
    """Checks ``x`` is a ``[num_nodes, num_features]`` tensor (dense or sparse)."""
    if not (isinstance(x, Tensor) and x.dim() == 2):
        shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"`x` must be a tensor of shape [num_nodes, num_features] (got {shape})")
    return x


def check_input_width(x: Tensor, encoder) -> None:
    """Checks ``x`` is ``[num_nodes, encoder.in_channels]`` where the encoder states a width."""
    width = getattr(encoder, "in_channels", None)
    known = isinstance(x, Tensor) and isinstance(width, int) and width > 0
    if known and (x.dim() != 2 or x.size(1) != width):
        got = f"{x.size(1)} features per node" if x.dim() == 2 else f"shape {list(x.shape)}"
        raise ValueError(
            f"`x` must have shape [num_nodes, {width}] (the encoder's in_channels = {width}) "
            f"(got {got})"
        )


def accepts_check(module) -> bool:
    """Whether ``module``'s ``forward`` takes the ``check`` keyword of the package's."""
    try:
        return "check" in inspect.signature(module.forward).parameters
    except (AttributeError, TypeError, ValueError):
        return False
