"""Uniform negative pairs and their similarities, without an ``N×N`` matrix."""

from __future__ import annotations

import torch
from torch import Tensor

from .ops import full_precision, normalize_views

#: Columns of the grid sample of :func:`sample_negative_similarities`.
SAMPLE_COLUMNS = 64


def sample_negative_pairs(
    num_nodes: int,
    num_samples: int,
    device=None,
    generator: torch.Generator | None = None,
    anchors: slice | None = None,
) -> tuple[Tensor, Tensor]:
    """Uniform pairs ``(i, k)`` with ``k ≠ i`` (off-diagonal), without an ``N×N`` matrix;
    ``i`` among ``anchors`` (default: all nodes)."""
    lo, hi, _ = (anchors or slice(0, num_nodes)).indices(num_nodes)
    i = torch.randint(hi - lo, (num_samples,), generator=generator) + lo
    k = torch.randint(num_nodes - 1, (num_samples,), generator=generator)
    k = k + (k >= i).long()
    return i.to(device), k.to(device)


@torch.no_grad()
def sample_negative_similarities(
    h1: Tensor,
    h2: Tensor,
    num_samples: int,
    generator: torch.Generator | None = None,
    anchors: slice | None = None,
) -> Tensor:
    """Cosines ``θ(u_i, v_k)``, ``k ≠ i``, of ``num_samples`` inter-view negative pairs, the
    anchors ``i`` among ``anchors`` (default: all nodes; a rank's own rows in
    :mod:`pyg_progcl.distributed`).

    Like the reference code, which takes every row of 100 random columns, the pairs form a
    grid: ``r = ⌈M / 63⌉`` random anchors against 64 random nodes, one ``[r, d] × [d, 64]``
    product, positives dropped, the first ``M`` kept (the anchors are in random order).
    Unlike it, ``M`` does not grow with ``N``. Graphs too small for such a grid get ``M``
    independent uniform pairs instead (gathering ``M`` independent pairs costs far more
    than one small product, docs/design.md).
    """
    with full_precision(h1):  # (fits the mixture on float32 cosines under autocast too)
        return _similarities(h1, h2, num_samples, generator, anchors)


def _similarities(h1, h2, num_samples, generator, anchors) -> Tensor:
    u, v = normalize_views(h1, h2)
    n = u.size(0)
    lo, hi, _ = (anchors or slice(0, n)).indices(n)
    rows = -(-num_samples // (SAMPLE_COLUMNS - 1))
    if n < SAMPLE_COLUMNS or rows > hi - lo:
        i, k = sample_negative_pairs(n, num_samples, u.device, generator, slice(lo, hi))
        return (u[i] * v[k]).sum(1).clamp_(-1.0, 1.0)
    picked = (torch.randperm(hi - lo, generator=generator)[:rows] + lo).to(u.device)
    nodes = torch.randperm(n, generator=generator)[:SAMPLE_COLUMNS].to(u.device)
    theta = u[picked] @ v[nodes].T
    negative = picked.unsqueeze(1) != nodes.unsqueeze(0)
    return theta[negative][:num_samples].clamp_(-1.0, 1.0)
