"""Uniform negative pairs and their similarities, without an ``N×N`` matrix."""

from __future__ import annotations

import torch
from torch import Tensor

from ._engine import full_precision, normalize_views

#: Columns of the grid sample of :func:`sample_negative_similarities`.
SAMPLE_COLUMNS = 64
#: Elements of the ``[pairs, d]`` rows that the independent-pairs sample gathers at once
#: (16 MiB of float32 per view): its memory grows with ``M``, not with ``M·d``.
GATHER_ELEMENTS = 1 << 22


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
    k.add_(k >= i)  # (in place: the pairs hold 16 bytes each, no more)
    # (non-blocking: pageable host memory is staged at once, and the stream does not wait)
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
    anchors ``i`` among ``anchors`` (default: all nodes; a rank's own rows in
    :mod:`pyg_progcl.distributed`).

    The pairs form a grid, as in the reference code (which takes 100 random columns):
    ``r = ⌈M / 63⌉`` random anchors against 64 random nodes, one ``[r, d] × [d, 64]``
    product, positives dropped, the first ``M`` kept; ``M`` does not grow with ``N``.
    Graphs too small for a grid get ``M`` independent uniform pairs, gathered in chunks of
    ``GATHER_ELEMENTS``.
    """
    with full_precision(h1):  # (fits the mixture on float32 cosines under autocast too)
        u, v = normalize_views(h1, h2)
        n = u.size(0)
        lo, hi, _ = (anchors or slice(0, n)).indices(n)
        rows = -(-num_samples // (SAMPLE_COLUMNS - 1))
        if n < SAMPLE_COLUMNS or rows > hi - lo:
            i, k = sample_negative_pairs(n, num_samples, u.device, generator, slice(lo, hi))
            return _pair_similarities(u, v, i, k).clamp_(-1.0, 1.0)
        # (drawn on the host by ``generator``, copied without waiting for the device)
        picked = torch.randperm(hi - lo, generator=generator)[:rows] + lo
        picked = picked.to(u.device, non_blocking=True)
        nodes = torch.randperm(n, generator=generator)[:SAMPLE_COLUMNS].to(
            u.device, non_blocking=True
        )
        theta = (u[picked] @ v[nodes].T).view(-1)
        # The first M negatives of the grid in row order, by a stable sort of the positives
        # last: a shape known in advance (a boolean index would read its count on the host).
        positive = (picked.unsqueeze(1) == nodes.unsqueeze(0)).view(-1)
        first = torch.argsort(positive, stable=True)[:num_samples]
        return theta[first].clamp_(-1.0, 1.0)


def _pair_similarities(u: Tensor, v: Tensor, i: Tensor, k: Tensor) -> Tensor:
    """``u[i]·v[k]`` row by row, gathering ``GATHER_ELEMENTS`` at a time (``M`` gathered
    rows of both views at once would take ``8·M·d`` bytes)."""
    out = u.new_empty(i.numel())
    step = max(1, GATHER_ELEMENTS // max(u.size(1), 1))
    for start in range(0, i.numel(), step):
        stop = start + step
        torch.sum(u[i[start:stop]].mul_(v[k[start:stop]]), 1, out=out[start:stop])
    return out
