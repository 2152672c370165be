"""Elementwise and matrix operations shared by the engine's paths."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import Tensor

from ..._compat import autocast_enabled

#: ``exp`` of a shifted logit above ``-EXP_SPAN`` stays a normal float32.
EXP_SPAN = 80.0
#: Elements per row chunk of the CPU's elementwise chains (512 KiB of float32: chains of
#: in-place passes stay in cache).
CHUNK_ELEMENTS = 1 << 17
#: Side of the square tiles of :func:`transpose_` on the CPU (384: three 576 KiB tiles in
#: cache; 2.0x / 2.7x faster than ``copy_`` of the transposed view at Cora's / Amazon-Photo's
#: size on a 2-core x86-64 machine, where 256 and 512 were slower).
TRANSPOSE_TILE = 384


def underflow_threshold(dtype: torch.dtype) -> float:
    """Sums below this (``2^24`` times the smallest normal float) count as underflowed."""
    return torch.finfo(dtype).tiny * 2.0**24


def full_precision(like: Tensor) -> contextlib.AbstractContextManager:
    """Turns autocast off on ``like``'s device (a no-op context where it is off).

    bfloat16 keeps 8 significant bits (a logit ``θ/τ`` at ``τ = 0.2`` moves by up to
    ``5 · 2^-9`` from rounding a cosine near 1) and float16's sums of ``2N`` terms
    ``e^{θ/τ}`` overflow: the losses compute in float32 whatever the caller's autocast
    says (:func:`normalize_views` upcasts half inputs).
    """
    if autocast_enabled(like.device.type):
        return torch.autocast(like.device.type, enabled=False)
    return contextlib.nullcontext()


def normalize_views(h1: Tensor, h2: Tensor) -> tuple[Tensor, Tensor]:
    """Unit-normalised views in float32 or float64 (half inputs are upcast)."""
    dtype = h1.dtype if h1.dtype in (torch.float32, torch.float64) else torch.float32
    return F.normalize(h1.to(dtype), dim=1), F.normalize(h2.to(dtype), dim=1)


def gram(a: Tensor, b: Tensor, tau: float, out: Tensor | None = None) -> Tensor:
    """``(a bᵀ - 1)/τ`` for unit rows ``a`` (already divided by τ) and ``b`` in one GEMM."""
    return torch.addmm(a.new_full((), -1.0 / tau), a, b.T, out=out)


def mask_entries(logits: Tensor, excluded: Tensor) -> Tensor:
    """Sets ``logits[i, excluded[i]]`` to ``-inf`` in place (the anchor itself)."""
    rows = torch.arange(logits.size(0), device=logits.device)
    return logits.index_put_((rows, excluded), logits.new_full((), float("-inf")))


def transpose_(x: Tensor) -> Tensor:
    """Transposes the square matrix ``x`` in place, swapping cache-sized tiles (a copy of
    the transposed view strides through memory, and needs a second matrix)."""
    n, tile = x.size(0), TRANSPOSE_TILE
    if x.device.type != "cpu":
        return x.copy_(x.T.clone())
    for i in range(0, n, tile):
        for j in range(i, n, tile):
            upper, lower = x[i : i + tile, j : j + tile], x[j : j + tile, i : i + tile]
            kept = upper.clone()
            if i != j:  # (a diagonal tile is both)
                upper.copy_(lower.T)
            lower.copy_(kept.T)
    return x


def row_chunks(x: Tensor, elements: int = CHUNK_ELEMENTS) -> tuple[slice, ...]:
    """Row slices of ``x`` for a chain of elementwise passes: of ``elements`` (cache-sized)
    on the CPU, one slice on accelerators (where every extra kernel launch costs more than
    memory traffic)."""
    n = x.size(0)
    if x.device.type != "cpu":
        return (slice(0, n),)
    rows = max(1, elements // max(x[0].numel(), 1))
    return tuple(slice(i, min(i + rows, n)) for i in range(0, n, rows))
