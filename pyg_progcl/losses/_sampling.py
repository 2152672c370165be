"""Uniform negative pairs and their similarities, without an ``N×N`` matrix."""

from __future__ import annotations

import torch
from torch import Tensor

from ._engine import full_precision, normalize_views

SAMPLE_COLUMNS = 64  # (of the grid sample)
GATHER_ELEMENTS = 1 << 22


def sample_negative_pairs(
    num_nodes: int,
    num_samples: int,
    device=None,
    generator: torch.Generator | None = None,
    anchors: slice | None = None,
) -> tuple[Tensor, Tensor]:
    """Uniform pairs ``(i, k)``, ``k ≠ i``, ``i`` among ``anchors`` (default: all nodes)."""
    lo, hi, _ = (anchors or slice(0, num_nodes)).indices(num_nodes)
    i = torch.randint(hi - lo, (num_samples,), generator=generator) + lo
    k = torch.randint(num_nodes - 1, (num_samples,), generator=generator)
    k.add_(k >= i)
    return i.to(device, non_blocking=True), k.to(device, non_blocking=True)


@torch.no_grad()
def sample_negative_similarities(
    h1: Tensor,
    h2: Tensor,
    num_samples: int,
    generator: torch.Generator | None = None,
    anchors: slice | None = None,
) -> Tensor:
    """Cosines ``θ(u_i, v_k)``, ``k ≠ i``, of ``num_samples`` inter-view negative pairs, the
    anchors ``i`` among ``anchors`` (default: all nodes): a grid of ``⌈M / 63⌉`` random
    anchors against 64 random nodes, positives dropped, the first ``M`` kept; graphs too
    small for a grid get ``M`` independent uniform pairs."""
    with full_precision(h1):  # (fits the mixture on float32 cosines under autocast too)
        u, v = normalize_views(h1, h2)
        n = u.size(0)
        lo, hi, _ = (anchors or slice(0, n)).indices(n)
        rows = -(-num_samples // (SAMPLE_COLUMNS - 1))
        if n < SAMPLE_COLUMNS or rows > hi - lo:
            i, k = sample_negative_pairs(n, num_samples, u.device, generator, slice(lo, hi))
            return _pair_similarities(u, v, i, k).clamp_(-1.0, 1.0)
        picked = torch.randperm(hi - lo, generator=generator)[:rows] + lo
        nodes = torch.randperm(n, generator=generator)[:SAMPLE_COLUMNS]
        picked, nodes = (t.to(u.device, non_blocking=True) for t in (picked, nodes))
        theta = (u[picked] @ v[nodes].T).view(-1)
        # (the first M negatives: a stable sort of the positives last, no host read)
        positive = (picked.unsqueeze(1) == nodes.unsqueeze(0)).view(-1)
        first = torch.argsort(positive, stable=True)[:num_samples]
        return theta[first].clamp_(-1.0, 1.0)


def _pair_similarities(u: Tensor, v: Tensor, i: Tensor, k: Tensor) -> Tensor:
    """``u[i]·v[k]`` row by row, gathering ``GATHER_ELEMENTS`` at a time."""
    out = u.new_empty(i.numel())
    step = max(1, GATHER_ELEMENTS // max(u.size(1), 1))
    for start in range(0, i.numel(), step):
        stop = start + step
        torch.sum(u[i[start:stop]].mul_(v[k[start:stop]]), 1, out=out[start:stop])
    return out
