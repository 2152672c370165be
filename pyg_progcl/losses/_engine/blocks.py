"""Blocks of anchors against their negatives: what a loss's negative term reads.

Every loss of this package is ``ℓ_i = -log( e^{p_i} / (e^{p_i} + Ng_i) )`` for an anchor
``i`` with positive logit ``p_i = θ(a_i, o_i)/τ`` and a loss-specific negative term
``Ng_i`` built from the anchor's inter-view logits ``θ(a_i, o_k)/τ`` and intra-view logits
``θ(a_i, a_k)/τ`` (``k ≠ i``). A :class:`NegativeBlock` holds these logits for a block of
anchors of one view (docs/algorithms.md §1).

Logits are stored shifted by their upper bound ``1/τ`` (cosines are ≤ 1), so that
``exp`` never overflows; every ``Ng`` formula is homogeneous in the exponentials, so the
shift cancels in ``ℓ``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Callable, Union

import torch
from torch import Tensor

from .ops import EXP_SPAN, gram, mask_entries

#: Anchors of a block: a contiguous range, or the indices of chosen anchors.
Rows = Union[slice, Tensor]


@dataclass
class Pairs:
    """The node pairs behind a block's stored inter-view matrix: anchors ``rows`` (``None``:
    all) of view ``view`` (0: ``u``, 1: ``v``) against the nodes ``cols`` (``None``: all) of
    the other view.

    Lets a loss recompute the block from other embeddings of the same nodes (ProGCL's
    frozen schedule computes its weights from the views of its fit epoch).
    """

    view: int = 0
    rows: Rows | None = None
    cols: Tensor | None = None

    def logits(self, u: Tensor, v: Tensor, tau: float, out: Tensor | None = None) -> Tensor:
        """The shifted inter-view logits ``(θ - 1)/τ`` of these pairs in views ``u``, ``v``
        (written to ``out`` if given)."""
        a, o = (u, v) if self.view == 0 else (v, u)
        a = a if self.rows is None else a[self.rows]
        return gram(a / tau, o if self.cols is None else o[self.cols], tau, out)


@dataclass
class NegativeBlock:
    """A block of ``B`` anchors with ``C`` candidate negatives per view.

    Attributes:
        pos: ``[B]`` shifted positive logits ``(θ(a_i, o_i) - 1)/τ``.
        inter: ``[B, C]`` shifted inter-view logits ``(θ(a_i, o_k) - 1)/τ``.
        intra: ``[B, C]`` shifted intra-view logits ``(θ(a_i, a_k) - 1)/τ``.
        excluded: ``[B]`` column of each row that is not a negative (the anchor itself,
            or a surplus sample); it holds ``-inf`` in ``inter`` and ``intra``.
        count: Negatives per view and anchor (``N - 1``, or ``k`` when sampled).
        tau: Temperature.
        cache: Values computed once per block (shared by the two dense directions).
        transposed: Whether ``inter`` is the transpose of the stored matrix (the dense
            path's second direction).
        pairs: The node pairs of the stored (native) inter-view matrix.
    """

    pos: Tensor
    inter: Tensor
    intra: Tensor
    excluded: Tensor
    count: int
    tau: float
    cache: dict = field(default_factory=dict, repr=False)
    transposed: bool = False
    pairs: Pairs = field(default_factory=Pairs)

    @property
    def dim(self) -> int:
        """Dimension of the stored (native) inter-view matrix that runs over negatives.

        The dense path's second direction is the transpose of the first: reducing the
        native matrix over dim 0 reads it contiguously, its ``.T`` view over dim 1 does not.
        The intra-view matrices are symmetric, so they pair with either orientation.
        """
        return 0 if self.transposed else 1

    @property
    def native_inter(self) -> Tensor:
        """The inter-view logits in their stored orientation (negatives along :attr:`dim`)."""
        return self.inter.T if self.transposed else self.inter

    def cached(self, name: str, fn: Callable[[], Tensor]):
        """``fn()`` computed once per block (once for both dense directions)."""
        if name not in self.cache:
            self.cache[name] = fn()
        return self.cache[name]

    def rows(self) -> Tensor:
        """``arange(B)``: with :attr:`excluded`, the index of each anchor's own entry."""
        return torch.arange(self.inter.size(0), device=self.inter.device)

    def exp_fits(self, scale: float = 1.0) -> bool:
        """Whether ``exp(scale · logit)`` of every negative is a normal float (no underflow)."""
        return scale * 2.0 / self.tau <= EXP_SPAN and self.inter.dtype != torch.float16

    def exp_inter(self, native: bool = False) -> Tensor:
        """``exp`` of the inter-view logits (computed once for both dense directions; with
        ``native=True`` in the stored orientation, reduce it over :attr:`dim`)."""
        value = self.cached("exp", lambda: torch.exp(self.native_inter))
        return value.T if self.transposed and not native else value

    def log_sum_exp(self, logits: Tensor, scale: float = 1.0) -> Tensor:
        """Row-wise ``log Σ_k exp(scale · logits)`` over the valid negatives.

        Uses a plain ``exp``-sum (the logits are ≤ 0) when no term can underflow, and the
        max-shifted ``torch.logsumexp`` otherwise (very small ``τ``).
        """
        if scale == 0:
            return torch.full_like(self.pos, math.log(self.count))
        scaled = logits if scale == 1 else logits * scale
        if self.exp_fits(scale):
            return torch.log(torch.exp(scaled).sum(dim=1))
        return torch.logsumexp(scaled, dim=1)

    def log_sum_exp_both(self, scale: float = 1.0) -> Tensor:
        """``log Σ_k [exp(scale·inter_k) + exp(scale·intra_k)]`` over all ``2·count`` negatives."""
        if scale == 1 and self.exp_fits():
            inter = self.exp_inter(native=True).sum(dim=self.dim)
            return torch.log(inter + torch.exp(self.intra).sum(dim=self.dim))
        return torch.logaddexp(
            self.log_sum_exp(self.inter, scale), self.log_sum_exp(self.intra, scale)
        )


#: A loss's negative term on the per-direction paths: ``[B]`` shifted ``log Ng``.
LogNegatives = Callable[[NegativeBlock], Tensor]


def anchor_losses(block: NegativeBlock, log_negatives: LogNegatives) -> Tensor:
    """``ℓ_i = -p_i + log(e^{p_i} + Ng_i)`` for each anchor of ``block``."""
    return torch.logaddexp(block.pos, log_negatives(block)) - block.pos


def dense_blocks(u: Tensor, v: Tensor, tau: float) -> Iterator[NegativeBlock]:
    """Both directions with all ``N`` anchors; three Gram matrices in all (the second
    direction's inter-view matrix is the transpose of the first's)."""
    n = u.size(0)
    us, vs = u / tau, v / tau
    diag = torch.arange(n, device=u.device)
    pos = ((us * v).sum(1)) - 1.0 / tau
    uv = mask_entries(gram(us, v, tau), diag)
    uu = mask_entries(gram(us, u, tau), diag)
    vv = mask_entries(gram(vs, v, tau), diag)
    cache: dict = {}
    yield NegativeBlock(pos, uv, uu, diag, n - 1, tau, cache)
    yield NegativeBlock(pos, uv.T, vv, diag, n - 1, tau, cache, transposed=True)


def row_block(a: Tensor, o: Tensor, rows: Rows, view: int, tau: float) -> NegativeBlock:
    """Anchors ``rows`` of ``a`` (view ``view``) against all nodes."""
    a_blk = a[rows] / tau
    if isinstance(rows, slice):
        excluded = torch.arange(rows.start, rows.stop, device=a.device)
    else:
        excluded = rows
    pos = (a_blk * o[rows]).sum(1) - 1.0 / tau
    inter = mask_entries(gram(a_blk, o, tau), excluded)
    intra = mask_entries(gram(a_blk, a, tau), excluded)
    return NegativeBlock(pos, inter, intra, excluded, a.size(0) - 1, tau, pairs=Pairs(view, rows))


def sampled_block(
    a: Tensor, o: Tensor, rows: slice, view: int, cols: Tensor, tau: float
) -> NegativeBlock:
    """Anchors ``rows`` against ``k + 1`` shared sampled nodes ``cols``.

    Each anchor drops one column: itself if it was sampled, else the last one, so that
    every anchor keeps exactly ``k`` negatives, a uniform sample of the other ``N - 1``.
    """
    k = cols.numel() - 1
    a_blk = a[rows] / tau
    anchors = torch.arange(rows.start, rows.stop, device=a.device)
    hit = anchors.unsqueeze(1) == cols.unsqueeze(0)
    excluded = torch.where(hit.any(1), hit.int().argmax(1), torch.full_like(anchors, k))
    pos = (a_blk * o[rows]).sum(1) - 1.0 / tau
    inter = mask_entries(gram(a_blk, o[cols], tau), excluded)
    intra = mask_entries(gram(a_blk, a[cols], tau), excluded)
    return NegativeBlock(pos, inter, intra, excluded, k, tau, pairs=Pairs(view, rows, cols))
