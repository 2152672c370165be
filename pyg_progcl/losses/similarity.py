"""The block machinery shared by every loss: anchors against their negatives.

Every loss of this package is ``ℓ_i = -log( e^{p_i} / (e^{p_i} + Ng_i) )`` for an anchor
``i`` with positive logit ``p_i = θ(a_i, o_i)/τ`` and a loss-specific negative term
``Ng_i`` built from the anchor's inter-view logits ``θ(a_i, o_k)/τ`` and intra-view logits
``θ(a_i, a_k)/τ`` (``k ≠ i``). This module forms those logits for a block of anchors and
hands them to the loss as a :class:`NegativeBlock`; the loss only supplies ``log Ng_i``.

Losses whose ``log Ng`` is a function of per-anchor exponential sums (GRACE, DCL, HCL,
ProGCL-weight: :meth:`ContrastiveLoss.exp_sums`) run on :mod:`.blockwise`, which serves
both directions from one pass over row blocks. Everything else (ProGCL-mix, τ < 0.025
where exponentials underflow, sampled negatives, underflowed ProGCL weights) runs here,
one direction at a time, with the same result per anchor:

* dense: one block of all ``N`` anchors; the inter-view Gram matrix of the second
  direction is the transpose of the first (three matrix products, not four);
* row blocks of ``B`` anchors against all ``N`` nodes, each recomputed in backward
  (``torch.utils.checkpoint``), so only one block's ``B×N`` intermediates are alive;
* ``k`` sampled negatives per anchor, shared by a block of anchors (a ``B×(k+1)`` product).

Logits are stored shifted by their upper bound ``1/τ`` (cosines are ≤ 1), so that
``exp`` never overflows; every ``Ng`` formula is homogeneous in the exponentials, so the
shift cancels in ``ℓ``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

if TYPE_CHECKING:  # blockwise imports this module
    from .blockwise import ExpSums
    from .pool import BlockPool

#: Above this many nodes the losses switch to row blocks when ``block_size`` is ``None``.
DENSE_MAX_NODES = 4096
#: Elements of one ``B×N`` block chosen automatically (32 MiB per float32 matrix).
BLOCK_ELEMENTS = 1 << 23
#: ``exp`` of a shifted logit above ``-EXP_SPAN`` stays a normal float32.
EXP_SPAN = 80.0
#: Elements per row chunk of the CPU's elementwise chains (512 KiB of float32: chains of
#: in-place passes stay in cache; measured 3x faster than whole-matrix passes).
CHUNK_ELEMENTS = 1 << 17


def row_chunks(x: Tensor) -> tuple[slice, ...]:
    """Row slices of ``x`` for a chain of elementwise passes: cache-sized on the CPU, one
    slice on accelerators (where every extra kernel launch costs more than memory traffic)."""
    n = x.size(0)
    if x.device.type != "cpu":
        return (slice(0, n),)
    rows = max(1, CHUNK_ELEMENTS // max(x[0].numel(), 1))
    return tuple(slice(i, min(i + rows, n)) for i in range(0, n, rows))


@dataclass
class Pairs:
    """The node pairs behind a block's stored inter-view matrix: anchors ``rows`` (``None``:
    all) of view ``view`` (0: ``u``, 1: ``v``) against the nodes ``cols`` (``None``: all) of
    the other view.

    Lets a loss recompute the block from other embeddings of the same nodes (ProGCL's
    frozen schedule computes its weights from the views of its fit epoch).
    """

    view: int = 0
    rows: slice | None = None
    cols: Tensor | None = None

    def logits(self, u: Tensor, v: Tensor, tau: float, out: Tensor | None = None) -> Tensor:
        """The shifted inter-view logits ``(θ - 1)/τ`` of these pairs in views ``u``, ``v``
        (written to ``out`` if given)."""
        a, o = (u, v) if self.view == 0 else (v, u)
        a = a if self.rows is None else a[self.rows]
        return _gram(a / tau, o if self.cols is None else o[self.cols], tau, out)


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

    def elementwise_of_inter(
        self, name: str, fn: Callable[[Tensor], Tensor], native: bool = False
    ) -> Tensor:
        """``fn`` (elementwise) applied to the inter-view logits, computed once and cached.

        The two directions of the dense path share one cache: the second direction's
        inter-view matrix is the transpose of the first, and so is ``fn`` of it. With
        ``native=True`` the cached orientation is returned (reduce it over :attr:`dim`).
        """
        value = self.cached(name, lambda: fn(self.native_inter))
        return value.T if self.transposed and not native else value

    def cached(self, name: str, fn: Callable[[], Tensor]) -> Tensor:
        """``fn()`` computed once per block (once for both dense directions)."""
        if name not in self.cache:
            self.cache[name] = fn()
        return self.cache[name]

    @property
    def native_inter(self) -> Tensor:
        """The inter-view logits in their stored orientation (negatives along :attr:`dim`)."""
        return self.inter.T if self.transposed else self.inter

    def rows(self) -> Tensor:
        return torch.arange(self.inter.size(0), device=self.inter.device)

    def exp_fits(self, scale: float = 1.0) -> bool:
        """Whether ``exp(scale · logit)`` of every negative is a normal float (no underflow)."""
        return scale * 2.0 / self.tau <= EXP_SPAN and self.inter.dtype != torch.float16

    def exp_inter(self, native: bool = False) -> Tensor:
        """``exp`` of the inter-view logits (shared by both dense directions)."""
        return self.elementwise_of_inter("exp", torch.exp, native)

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


LogNegatives = Callable[[NegativeBlock], Tensor]


def anchor_losses(block: NegativeBlock, log_negatives: LogNegatives) -> Tensor:
    """``ℓ_i = -p_i + log(e^{p_i} + Ng_i)`` for each anchor of ``block``."""
    return torch.logaddexp(block.pos, log_negatives(block)) - block.pos


def _mask(logits: Tensor, excluded: Tensor) -> Tensor:
    rows = torch.arange(logits.size(0), device=logits.device)
    return logits.index_put_((rows, excluded), logits.new_tensor(float("-inf")))


def _gram(a: Tensor, b: Tensor, tau: float, out: Tensor | None = None) -> Tensor:
    """``(a bᵀ - 1)/τ`` for unit rows ``a`` (already divided by τ) and ``b`` in one GEMM."""
    return torch.addmm(a.new_tensor(-1.0 / tau), a, b.T, out=out)


def normalize_views(h1: Tensor, h2: Tensor) -> tuple[Tensor, Tensor]:
    """Unit-normalised views in float32 or float64 (half inputs are upcast)."""
    dtype = h1.dtype if h1.dtype in (torch.float32, torch.float64) else torch.float32
    return F.normalize(h1.to(dtype), dim=1), F.normalize(h2.to(dtype), dim=1)


def dense_blocks(u: Tensor, v: Tensor, tau: float) -> Iterator[NegativeBlock]:
    """Both directions with all ``N`` anchors; three Gram matrices in all."""
    n = u.size(0)
    us, vs = u / tau, v / tau
    diag = torch.arange(n, device=u.device)
    pos = ((us * v).sum(1)) - 1.0 / tau
    uv = _mask(_gram(us, v, tau), diag)
    uu = _mask(_gram(us, u, tau), diag)
    vv = _mask(_gram(vs, v, tau), diag)
    cache: dict = {}
    yield NegativeBlock(pos, uv, uu, diag, n - 1, tau, cache)
    yield NegativeBlock(pos, uv.T, vv, diag, n - 1, tau, cache, transposed=True)


def _row_block(a: Tensor, o: Tensor, start: int, stop: int, view: int, tau: float) -> NegativeBlock:
    """Anchors ``start:stop`` of ``a`` (view ``view``) against all nodes."""
    a_blk = a[start:stop] / tau
    excluded = torch.arange(start, stop, device=a.device)
    pos = (a_blk * o[start:stop]).sum(1) - 1.0 / tau
    inter = _mask(_gram(a_blk, o, tau), excluded)
    intra = _mask(_gram(a_blk, a, tau), excluded)
    pairs = Pairs(view, slice(start, stop))
    return NegativeBlock(pos, inter, intra, excluded, a.size(0) - 1, tau, pairs=pairs)


def _sampled_block(
    a: Tensor, o: Tensor, start: int, stop: int, view: int, cols: Tensor, tau: float
) -> NegativeBlock:
    """Anchors ``start:stop`` against ``k + 1`` shared sampled nodes ``cols``.

    Each anchor drops one column: itself if it was sampled, else the last one, so that
    every anchor keeps exactly ``k`` negatives, a uniform sample of the other ``N - 1``.
    """
    k = cols.numel() - 1
    a_blk = a[start:stop] / tau
    anchors = torch.arange(start, stop, device=a.device)
    hit = anchors.unsqueeze(1) == cols.unsqueeze(0)
    excluded = torch.where(hit.any(1), hit.int().argmax(1), torch.full_like(anchors, k))
    pos = (a_blk * o[start:stop]).sum(1) - 1.0 / tau
    inter = _mask(_gram(a_blk, o[cols], tau), excluded)
    intra = _mask(_gram(a_blk, a[cols], tau), excluded)
    return NegativeBlock(
        pos, inter, intra, excluded, k, tau, pairs=Pairs(view, slice(start, stop), cols)
    )


def auto_block_size(num_nodes: int, num_columns: int | None = None) -> int | None:
    """The block size chosen when a loss has ``block_size=None`` (``None`` = dense)."""
    if num_columns is None and num_nodes <= DENSE_MAX_NODES:
        return None
    cols = num_nodes if num_columns is None else num_columns
    return max(1, min(num_nodes, BLOCK_ELEMENTS // max(cols, 1)))


def contrastive_loss(
    h1: Tensor,
    h2: Tensor,
    tau: float,
    log_negatives: LogNegatives,
    block_size: int | None = None,
    num_negatives: int | None = None,
    generator: torch.Generator | None = None,
    sums: ExpSums | None = None,
    pool: BlockPool | None = None,
) -> Tensor:
    """``J = (1/2N) Σ_i [ℓ(u_i) + ℓ(v_i)]`` with ``Ng`` from ``log_negatives``.

    Args:
        h1, h2: Projected views ``[N, d]`` (checked by the caller).
        tau: Temperature.
        log_negatives: Maps a :class:`NegativeBlock` to ``[B]`` shifted ``log Ng``.
        block_size: Anchors per row block; ``None`` chooses (dense up to
            ``DENSE_MAX_NODES`` nodes); ``block_size >= N`` is the dense path.
        num_negatives: ``k`` sampled negatives per anchor and view; ``None`` = all.
        generator: Random generator of the negative sampling.
        sums: The loss's :class:`~pyg_progcl.losses.blockwise.ExpSums`, if it has them:
            row blocks then serve both directions in one pass (three Gram blocks, not four).
        pool: The caller's :class:`~pyg_progcl.losses.blockwise.BlockPool` for that pass.
    """
    u, v = normalize_views(h1, h2)
    n = u.size(0)
    if num_negatives is None:
        block_size = auto_block_size(n) if block_size is None else block_size
        if sums is not None and sums.fits(tau):
            from .blockwise import blockwise_loss

            try:
                return blockwise_loss(u, v, tau, sums, min(block_size or n, n), pool)
            except FloatingPointError:  # underflowed weights: the per-direction path copes
                pass
        if block_size is None or block_size >= n:  # one block of all anchors: the dense path
            total = sum(anchor_losses(b, log_negatives).sum() for b in dense_blocks(u, v, tau))
            return total / (2 * n)
    elif block_size is None:
        block_size = auto_block_size(n, num_negatives + 1)
    total = u.new_zeros(())
    for view, (a, o) in enumerate(((u, v), (v, u))):
        for start in range(0, n, block_size):
            stop = min(start + block_size, n)
            if num_negatives is None:
                args = (a, o, start, stop, view)
                make = _row_block
            else:
                cols = torch.randperm(n, generator=generator, device="cpu")[: num_negatives + 1]
                args = (a, o, start, stop, view, cols.to(a.device))
                make = _sampled_block
            total = total + _block_sum(make, args, tau, log_negatives)
    return total / (2 * n)


def _block_sum(make, args, tau: float, log_negatives: LogNegatives) -> Tensor:
    def fn(*tensors):
        return anchor_losses(make(*tensors, tau), log_negatives).sum()

    if torch.is_grad_enabled() and any(t.requires_grad for t in args if isinstance(t, Tensor)):
        return checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


def sample_negative_pairs(
    num_nodes: int, num_samples: int, device=None, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """Uniform pairs ``(i, k)`` with ``k ≠ i`` (off-diagonal), without an ``N×N`` matrix."""
    i = torch.randint(num_nodes, (num_samples,), generator=generator)
    k = torch.randint(num_nodes - 1, (num_samples,), generator=generator)
    k = k + (k >= i).long()
    return i.to(device), k.to(device)


#: Columns of the grid sample of :func:`sample_negative_similarities`.
SAMPLE_COLUMNS = 64


@torch.no_grad()
def sample_negative_similarities(
    h1: Tensor, h2: Tensor, num_samples: int, generator: torch.Generator | None = None
) -> Tensor:
    """Cosines ``θ(u_i, v_k)``, ``k ≠ i``, of ``num_samples`` inter-view negative pairs.

    Like the reference code, which takes every row of 100 random columns, the pairs form a
    grid: ``r = ⌈M / 63⌉`` random anchors against 64 random nodes, one ``[r, d] × [d, 64]``
    product, positives dropped, the first ``M`` kept (the anchors are in random order).
    Unlike it, ``M`` does not grow with ``N``. Graphs too small for such a grid get ``M``
    independent uniform pairs instead. (Measured on Cora, 50,000 samples: 0.5 ms, against
    6-38 ms for gathering ``M`` independent pairs.)
    """
    u, v = normalize_views(h1, h2)
    n = u.size(0)
    rows = -(-num_samples // (SAMPLE_COLUMNS - 1))
    if n < SAMPLE_COLUMNS or rows > n:
        i, k = sample_negative_pairs(n, num_samples, u.device, generator)
        return (u[i] * v[k]).sum(1).clamp_(-1.0, 1.0)
    anchors = torch.randperm(n, generator=generator)[:rows].to(u.device)
    nodes = torch.randperm(n, generator=generator)[:SAMPLE_COLUMNS].to(u.device)
    theta = u[anchors] @ v[nodes].T
    negative = anchors.unsqueeze(1) != nodes.unsqueeze(0)
    return theta[negative][:num_samples].clamp_(-1.0, 1.0)
