"""The loss engine: every anchor's loss against its negatives, on one of three paths.

Every loss of this package is :math:`\\ell_i = -\\log \\frac{e^{p_i}}{e^{p_i} + Ng_i}` for an
anchor ``i`` with positive logit :math:`p_i = \\theta(a_i, o_i)/\\tau` and a loss-specific
negative term :math:`Ng_i` over its inter-view logits :math:`\\theta(a_i, o_k)/\\tau` and
intra-view logits :math:`\\theta(a_i, a_k)/\\tau`, ``k ≠ i`` (docs/algorithms.md §1). A
:class:`NegativeBlock` holds them for a block of anchors of one view; a loss turns a block
into its ``log Ng`` (:meth:`~pyg_progcl.losses.ContrastiveLoss.negative_term`), and the
engine does the rest with autograd and one hand-written backward (:class:`_GramSums`):

==============  ============================================================  ==========
path            when                                                          memory
==============  ============================================================  ==========
``dense``       all anchors of ``N <= DENSE_MAX_NODES`` nodes, no             ``O(N²)``
                ``block_size``: one block per view (3 Gram products)
``row blocks``  otherwise: ``B`` anchors per block against all nodes, each    ``O(B·N)``
                recomputed in backward (``torch.utils.checkpoint``)
``sampled``     ``num_negatives=k``: ``k`` uniform negatives per anchor and   ``O(B·k)``
                view, shared by a block of anchors
==============  ============================================================  ==========
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from .._compat import autocast_enabled

#: All anchors at once (the dense path) up to this many nodes when ``block_size`` is unset:
#: its three ``N×N`` matrices then take at most 0.75 GiB in float32.
DENSE_MAX_NODES = 8192
#: Elements of one automatically sized ``B×N`` block: just above it (32 MiB of float32).
#: glibc maps blocks of 32 MiB or more on their own and unmaps them when freed; smaller
#: ones come from its heap, which held about 0.9 GB of freed blocks after the 24 row blocks
#: of a 12,000-node graph (measured resident memory; 0.08 GB with blocks above 32 MiB).
BLOCK_ELEMENTS = 1 << 23
#: Elements of a row chunk of the elementwise passes that would otherwise need a temporary
#: of a block's size (4 MiB of float32): they run on a chunk in cache.
CHUNK_ELEMENTS = 1 << 20
#: Rows and columns of the tiles :func:`transpose_` works in on the CPU, sized for its
#: caches; other devices take tiles 8 times as wide (a few dozen kernel launches).
TRANSPOSE_TILE = 256
#: ``exp`` of a shifted logit above ``-EXP_SPAN`` is a normal float32.
EXP_SPAN = 80.0


def full_precision(like: Tensor) -> contextlib.AbstractContextManager:
    """Turns autocast off on ``like``'s device: the losses compute in float32 at least
    (bfloat16 moves a logit ``θ/τ`` by up to ``5·2^-9`` at ``τ = 0.2``, float16's sums of
    ``2N`` exponentials overflow)."""
    if autocast_enabled(like.device.type):
        return torch.autocast(like.device.type, enabled=False)
    return contextlib.nullcontext()


def normalize_views(h1: Tensor, h2: Tensor) -> tuple[Tensor, Tensor]:
    """Unit-normalised views in float32 or float64 (half inputs are upcast)."""
    dtype = h1.dtype if h1.dtype in (torch.float32, torch.float64) else torch.float32
    return F.normalize(h1.to(dtype), dim=1), F.normalize(h2.to(dtype), dim=1)


def underflow_threshold(dtype: torch.dtype) -> float:
    """Sums below this (``2^24`` times the smallest normal float) count as underflowed."""
    return torch.finfo(dtype).tiny * 2.0**24


def shifted_logits(a: Tensor, b: Tensor, tau: float) -> Tensor:
    """``(a bᵀ - 1)/τ`` of unit rows in one matrix product: logits shifted by their upper
    bound ``1/τ``, so that their exponentials never overflow."""
    return torch.addmm(a.new_full((), -1.0 / tau), a / tau, b.T)


def _masked(logits: Tensor, excluded: Tensor) -> Tensor:
    """``logits`` with ``-inf`` at each row's excluded column, written outside autograd:
    no term sends a gradient through ``exp(-inf) = 0``."""
    rows = torch.arange(logits.size(0), device=logits.device)
    with torch.no_grad():
        logits.index_put_((rows, excluded), logits.new_full((), float("-inf")))
    return logits


@dataclass
class NegativeBlock:
    """A block of ``B`` anchors of one view with ``C`` candidate negatives per view.

    Logits are shifted by their upper bound ``1/τ`` (cosines are at most 1), so ``exp``
    never overflows; every ``Ng`` formula is homogeneous in the exponentials, so the shift
    cancels in the loss.

    Attributes:
        pos: ``[B]`` shifted positive logits ``(θ(a_i, o_i) - 1)/τ``.
        anchors: ``[B, d]`` the anchors ``a_i`` (unit rows).
        others: ``[C, d]`` the candidates of the other view ``o_k``.
        peers: ``[C, d]`` the candidates of the anchors' own view ``a_k``.
        excluded: ``[B]`` column of each row that is not a negative (the anchor itself,
            or a surplus sample).
        count: Negatives per view and anchor (``N - 1``, or ``k`` when sampled).
        tau: The temperature.
        view: The anchors' view: 0 (``a = u = h1``) or 1 (``a = v = h2``).
        rows: The anchors' rows (``None``: all ``N``, the dense path).
        cols: The candidate negatives' rows (``None``: all ``N``).
        call: Values shared by the blocks of one loss call (:meth:`memo`).
    """

    pos: Tensor
    anchors: Tensor
    others: Tensor
    peers: Tensor
    excluded: Tensor
    count: int
    tau: float
    view: int = 0
    rows: Optional[slice] = None
    cols: Optional[Tensor] = None
    call: dict = field(default_factory=dict, repr=False)
    _logits: dict = field(default_factory=dict, init=False, repr=False)

    @property
    def dense(self) -> bool:
        """Whether the block holds all anchors against all nodes (the dense path, whose
        second view's inter-view logits are the transpose of the first's)."""
        return self.rows is None and self.cols is None

    @property
    def inter(self) -> Tensor:
        """``[B, C]`` shifted inter-view logits ``(θ(a_i, o_k) - 1)/τ``, ``-inf`` where
        excluded; made at the first use (the built-in losses need only sums of their
        exponentials, which :meth:`log_sum_exp_both` forms without them)."""
        return self._logits_of("inter", self.others)

    @property
    def intra(self) -> Tensor:
        """``[B, C]`` shifted intra-view logits ``(θ(a_i, a_k) - 1)/τ``, ``-inf`` where
        excluded (see :attr:`inter`)."""
        return self._logits_of("intra", self.peers)

    def _logits_of(self, name: str, o: Tensor) -> Tensor:
        if name not in self._logits:
            self._logits[name] = _masked(shifted_logits(self.anchors, o, self.tau), self.excluded)
        return self._logits[name]

    def native(self, matrix: Tensor) -> Tensor:
        """A dense ``[N, N]`` matrix of this block's orientation in the first view's (the
        transpose for the second view), or back."""
        return matrix.T if self.view == 1 else matrix

    def memo(self, name: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, computed once for both views of the dense path (anew elsewhere)."""
        if not self.dense:
            return fn()
        if name not in self.call:
            self.call[name] = fn()
        return self.call[name]

    def exp_fits(self, scale: float = 1.0) -> bool:
        """Whether ``exp(scale · logit)`` of every negative is a normal float."""
        return scale * 2.0 / self.tau <= EXP_SPAN and self.anchors.dtype != torch.float16

    @torch.no_grad()
    def inter_in(
        self, u: Optional[Tensor] = None, v: Optional[Tensor] = None, view: Optional[int] = None
    ) -> Tensor:
        """The shifted inter-view logits of this block's pairs in views ``u``, ``v`` of the
        same nodes (default: the block's own), from the anchors of ``view`` (default: the
        block's), without gradient; the excluded entries are not masked. The block's own
        matrix (on the dense path: made once for both views) is kept for
        :meth:`log_sum_exp_both`, which exponentiates it in place."""
        view = self.view if view is None else view
        own = u is None
        if own and not self.dense:  # (kept for the block's exponential sums, see above)
            if "own" not in self._logits:
                self._logits["own"] = shifted_logits(self.anchors, self.others, self.tau)
            return self._logits["own"]
        u, v = self._views if own else (u, v)
        if self.dense:  # (the second view's matrix is the transpose of the first's)
            logits = self.memo("logits", lambda: shifted_logits(u, v, self.tau)) if own else None
            logits = shifted_logits(u, v, self.tau) if logits is None else logits
            return logits if view == 0 else logits.T
        a, o = (u, v) if view == 0 else (v, u)
        return shifted_logits(a[self.rows], o if self.cols is None else o[self.cols], self.tau)

    @property
    def _views(self) -> tuple[Tensor, Tensor]:
        """``(u, v)`` of the dense path."""
        return (self.anchors, self.others) if self.view == 0 else (self.others, self.anchors)

    def log_sum_exp_both(
        self,
        scale: Union[float, tuple[float, ...]] = 1.0,
        log_weight: Optional[Tensor] = None,
        share: Optional[str] = "",
    ) -> Tensor:
        """``log Σ_k w_k [exp(scale·inter_k) + exp(scale·intra_k)]`` over all ``2·count``
        negatives, with detached weights ``w = exp(log_weight)`` (``[B, C]``; default 1).
        A tuple of scales gives ``[S, B]``, one row per scale, from the same products.

        A plain sum of exponentials where none underflows, a max-shifted log-sum-exp of
        :attr:`inter` and :attr:`intra` otherwise. On the dense path the inter-view sums of
        both views come from one matrix (row sums for the first view's anchors, column sums
        for the second's) where the second view's weights are the transpose of the first's;
        ``share`` names that matrix (``""``: unweighted, ``None``: not shared).
        """
        scales = (float(scale),) if isinstance(scale, (int, float)) else tuple(scale)
        if not all(0 < s < float("inf") for s in scales):  # (-inf at the excluded entries)
            raise ValueError(f"`scale` must be positive and finite (got {scale})")
        if self.exp_fits(max(scales)):
            total = self._exp_sums(scales, log_weight, share)
            if log_weight is None or bool((total > torch.finfo(total.dtype).tiny).all()):
                out = torch.log(total)
                return out[0] if isinstance(scale, (int, float)) else out
        out = []
        for s in scales:
            inter, intra = self.inter * s, self.intra * s
            if log_weight is not None:
                inter, intra = inter + log_weight, intra + log_weight
            out.append(torch.logaddexp(inter.logsumexp(dim=1), intra.logsumexp(dim=1)))
        return out[0] if isinstance(scale, (int, float)) else torch.stack(out)

    def _exp_sums(self, scales, log_weight: Optional[Tensor], share) -> Tensor:
        """``[S, B]`` sums of the inter- and intra-view exponentials."""
        return self._gram_sums(scales, log_weight, share)[0] + self._intra_sums(scales, log_weight)

    def _gram_sums(self, scales=(1.0,), log_weight=None, share="", gather=None):
        """``([S, B] inter-view exponential sums, inter-view logits at gather)``. On the
        dense path ``gather`` holds both views' ``[N, K]`` column indices and the sums and
        logits of both views come from one matrix (memo ``share``); else this block's."""
        if not self.dense:
            spec = self._spec(scales, gather=() if gather is None else ((1, gather),))
            logits = self._take_own_logits()
            rows, _, *got = _GramSums.apply(self.anchors, self.others, log_weight, logits, spec)
            return rows, (got[0] if got else None)
        if share is None:  # (this view's weights alone)
            logits = self._take_own_logits() if self.view == 0 else None
            return self._dense_weighted(self.others, scales, log_weight, logits), None
        native = None if log_weight is None else self.native(log_weight)
        gathers = () if gather is None else ((1, gather[0]), (0, gather[1].T))
        key = ("exp", share, scales, gather is not None)

        def both():
            u, v = self._views
            logits = self._take_own_logits()
            spec = self._spec(scales, columns=True, gather=gathers)
            return _GramSums.apply(u, v, native, logits, spec)

        rows, cols, *got = self.memo(key, both)
        if self.view == 0:
            return rows, (got[0] if got else None)
        return cols, (got[1].T if got else None)

    def _take_own_logits(self) -> Optional[Tensor]:
        """The block's own inter-view logits if :meth:`inter_in` made them (on the dense
        path: the first view's matrix, shared by both blocks), handed over to be
        exponentiated in place; ``None`` otherwise."""
        return self.call.pop("logits", None) if self.dense else self._logits.pop("own", None)

    def _log_sum_exp_gathered(self, index) -> tuple[Tensor, Tensor]:
        """``(log_sum_exp_both(), [B, K] inter-view logits at the columns index)`` from the
        same products. On the dense path ``index`` holds both views' indices (first, second)
        and one matrix serves both."""
        if not self.exp_fits():
            own = index[self.view] if self.dense else index
            return self.log_sum_exp_both(), self.inter.gather(1, own)
        sums, logits = self._gram_sums(gather=index)
        return torch.log(sums[0] + self._intra_sums((1.0,), None)[0]), logits

    def _intra_sums(self, scales, log_weight: Optional[Tensor]) -> Tensor:
        if not self.dense:
            spec = self._spec(scales)
            return _GramSums.apply(self.anchors, self.peers, log_weight, None, spec)[0]
        if log_weight is None:  # (a view against itself: one product in backward)
            spec = self._spec(scales, symmetric=True)
            return _GramSums.apply(self.anchors, self.anchors, None, None, spec)[0]
        return self._dense_weighted(self.anchors, scales, log_weight)

    def _dense_weighted(self, o: Tensor, scales, log_weight, logits=None) -> Tensor:
        """Row sums of ``exp(s·anchors oᵀ + log_weight)``: in this view's orientation where
        the weights are stored so, else as column sums of the transposed matrix, where they
        are the transpose of a stored one (the second view's of the first's ``b``), so that
        every pass runs along memory. ``o`` is the other view, or this one (the intra-view
        matrix is symmetric: its transpose is itself)."""
        if log_weight is None or log_weight.is_contiguous() or self.view == 0:
            return _GramSums.apply(self.anchors, o, log_weight, logits, self._spec(scales))[0]
        spec = self._spec(scales, columns=True)
        return _GramSums.apply(o, self.anchors, log_weight.T, None, spec)[1]

    def _spec(self, scales, columns=False, gather=(), symmetric=False) -> _Sums:
        return _Sums(
            self.tau, self.excluded, tuple(scales), columns, gather, symmetric, not self.dense
        )


@dataclass(frozen=True)
class _Sums:
    """What :class:`_GramSums` computes over one matrix ``x = (a oᵀ - 1)/τ`` (``-inf`` at
    ``excluded``): row sums (and ``columns`` sums) of ``exp(s·x + log_w)`` for each scale
    ``s``, and ``x`` at the positions ``gather`` (``(dim, index)`` pairs). ``symmetric``:
    ``a`` is ``o`` (a view against itself), without weights, columns or gathers.
    ``checkpointed``: the call runs under ``torch.utils.checkpoint``, which then keeps (and
    recomputes) the matrix kept for backward."""

    tau: float
    excluded: Tensor
    scales: tuple[float, ...] = (1.0,)
    columns: bool = False
    gather: tuple[tuple[int, Tensor], ...] = ()
    symmetric: bool = False
    checkpointed: bool = False

    def sums(self, x: Tensor, log_w: Optional[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """``(rows [S, B], columns [S, C] or [S, 0], kept)``. One scale exponentiates ``x``
        in place and keeps the exponentials; several keep ``x`` and exponentiate a row
        chunk at a time (one matrix, whatever the number of scales)."""
        if len(self.scales) == 1:
            e = _exp(x, log_w, self.scales[0], out=x)
            cols = e.sum(dim=0)[None] if self.columns else e.new_zeros(1, 0)
            return e.sum(dim=1)[None], cols, e
        rows = x.new_empty(len(self.scales), x.size(0))
        cols = x.new_zeros(len(self.scales), x.size(1) if self.columns else 0)
        for part in row_chunks(x):
            w = None if log_w is None else log_w[part]
            for j, s in enumerate(self.scales):
                e = _exp(x[part], w, s)
                rows[j, part] = e.sum(dim=1)
                if self.columns:
                    cols[j] += e.sum(dim=0)
        return rows, cols, x

    def gradient_(self, kept: Tensor, log_w, g_rows: Tensor, g_cols: Optional[Tensor]):
        """``∂/∂x = Σ_s s·e_s ∘ (g_rows_s ⊕ g_cols_s)`` written into ``kept`` (see :meth:`sums`),
        a row chunk at a time where column terms or several scales need temporaries."""
        if len(self.scales) == 1 and g_cols is None:
            return kept.mul_(g_rows[0].unsqueeze(1) * self.scales[0])
        for part in row_chunks(kept):
            w = None if log_w is None else log_w[part]
            grad = None
            for j, s in enumerate(self.scales):
                coef = g_rows[j, part].unsqueeze(1) * s
                if g_cols is not None:
                    coef = coef + g_cols[j].unsqueeze(0) * s
                if len(self.scales) == 1:  # (kept: the exponentials)
                    kept[part].mul_(coef)
                else:  # (kept: the logits, exponentiated again a chunk at a time)
                    term = _exp(kept[part], w, s).mul_(coef)
                    grad = term if grad is None else grad.add_(term)
            if grad is not None:
                kept[part] = grad
        return kept


def _exp(x: Tensor, log_w: Optional[Tensor], scale: float, out: Optional[Tensor] = None):
    """``exp(scale·x + log_w)`` (into ``out``, which may be ``x``)."""
    e = torch.mul(x, scale, out=out) if scale != 1 or out is None else x
    return (e if log_w is None else e.add_(log_w)).exp_()


def row_chunks(x: Tensor) -> Iterator[slice]:
    """Slices of rows of ``x`` holding about ``CHUNK_ELEMENTS`` elements each."""
    step = max(1, CHUNK_ELEMENTS // max(x.size(1), 1))
    return (slice(start, start + step) for start in range(0, x.size(0), step))


def transpose_(x: Tensor, add: bool = False) -> Tensor:
    """``x`` becomes ``xᵀ`` (``add``: ``x + xᵀ``), for a square ``x``, in place a pair of
    tiles at a time: no second matrix, and each tile's strided reads stay in cache (on the
    CPU, a few times faster than a transposed copy into fresh memory; ``x + xᵀ`` takes
    about half a matrix product with ``x``, docs/design.md)."""
    n, tile = x.size(0), TRANSPOSE_TILE * (1 if x.device.type == "cpu" else 8)
    spare = x.new_empty(tile, tile)
    for i in range(0, n, tile):
        for j in range(i, n, tile):
            p, q = x[i : i + tile, j : j + tile], x[j : j + tile, i : i + tile]
            t = spare[: p.size(0), : p.size(1)]
            t = torch.add(p, q.T, out=t) if add else t.copy_(p)
            if j > i:  # (on a diagonal tile p is q)
                p.copy_(t if add else q.T)
            q.copy_(t.T)
    return x


class _GramSums(torch.autograd.Function):
    """The sums of :class:`_Sums` over the Gram matrix of ``a`` and ``o``.

    Written by hand for time and memory: the logits are made in one buffer (or taken from
    ``logits``, the same values computed without gradient) that is kept for backward and
    becomes the gradient there, in place (autograd keeps the logits, the exponentials of
    each scale and a gradient, each fresh memory); the gradient of a symmetric matrix is
    ``(G + Gᵀ)·a`` with ``G + Gᵀ`` formed elementwise (weighted: in place, see
    :func:`transpose_`), one product instead of two. A second backward (``retain_graph``)
    recomputes the kept matrix.
    """

    @staticmethod
    def forward(ctx, a: Tensor, o: Tensor, log_w, logits: Optional[Tensor], spec: _Sums):
        x = shifted_logits(a, o, spec.tau) if logits is None else logits
        x = _masked(x, spec.excluded)
        gathered = [x.gather(dim, index) for dim, index in spec.gather]
        rows, cols, kept = spec.sums(x, log_w)
        ctx.spec, ctx.kept = spec, None if spec.checkpointed else kept
        ctx.one_view = a is o and not spec.symmetric  # (a view against itself, weighted)
        ctx.save_for_backward(a, o, log_w, kept if spec.checkpointed else None)
        return rows, cols, *gathered

    @staticmethod
    @once_differentiable
    def backward(ctx, g_rows: Tensor, g_cols: Tensor, *g_gathered: Tensor):
        a, o, log_w, kept = ctx.saved_tensors  # (checkpoint recomputes them at each backward)
        spec, kept = ctx.spec, kept if ctx.kept is None else ctx.kept
        ctx.kept = None  # (its memory becomes the gradient: a second backward recomputes it)
        if kept is None:
            kept = spec.sums(_masked(shifted_logits(a, o, spec.tau), spec.excluded), log_w)[2]
        if spec.symmetric:
            g_cols = g_rows
        grad = spec.gradient_(kept, log_w, g_rows, g_cols if g_cols.numel() else None)
        for (dim, index), g in zip(spec.gather, g_gathered):
            grad.scatter_add_(dim, index, g)
        if spec.symmetric or ctx.one_view:
            grad = transpose_(grad, add=True) if ctx.one_view else grad
            return grad.mm(a).div_(spec.tau), None, None, None, None
        grad_a = grad.mm(o).div_(spec.tau) if ctx.needs_input_grad[0] else None
        grad_o = grad.T.mm(a).div_(spec.tau) if ctx.needs_input_grad[1] else None
        return grad_a, grad_o, None, None, None


#: A loss's negative term: ``[B]`` shifted ``log Ng`` of a block's anchors.
NegativeTermFn = Callable[[NegativeBlock], Tensor]


def dense_blocks(u: Tensor, v: Tensor, tau: float) -> Iterator[NegativeBlock]:
    """Both views' blocks of all ``N`` anchors. Their sums come from three Gram matrices:
    the second view's inter-view logits are the transpose of the first's, its sums the
    columns of that matrix."""
    n, call = u.size(0), {}
    diag = torch.arange(n, device=u.device)
    pos = (u * v).sum(1).sub(1.0).div(tau)
    yield NegativeBlock(pos, u, v, u, diag, n - 1, tau, 0, call=call)
    yield NegativeBlock(pos, v, u, v, diag, n - 1, tau, 1, call=call)


def row_block(a: Tensor, o: Tensor, rows: slice, view: int, tau: float, call: dict):
    """The anchors ``rows`` of view ``a`` against all nodes."""
    excluded = torch.arange(rows.start, rows.stop, device=a.device)
    pos = (a[rows] * o[rows]).sum(1).sub(1.0).div(tau)
    return NegativeBlock(pos, a[rows], o, a, excluded, a.size(0) - 1, tau, view, rows, call=call)


def sampled_block(a: Tensor, o: Tensor, rows: slice, view: int, cols: Tensor, tau, call):
    """The anchors ``rows`` against ``k + 1`` shared sampled nodes ``cols``; each anchor
    drops one column (itself if sampled, else the last), keeping ``k`` uniform negatives
    among the other ``N - 1``."""
    k = cols.numel() - 1
    anchors = torch.arange(rows.start, rows.stop, device=a.device)
    hit = anchors.unsqueeze(1) == cols.unsqueeze(0)
    excluded = torch.where(hit.any(1), hit.int().argmax(1), torch.full_like(anchors, k))
    pos = (a[rows] * o[rows]).sum(1).sub(1.0).div(tau)
    return NegativeBlock(pos, a[rows], o[cols], a[cols], excluded, k, tau, view, rows, cols, call)


def anchor_losses(block: NegativeBlock, term: NegativeTermFn) -> Tensor:
    """``ℓ_i = log(e^{p_i} + Ng_i) - p_i`` of each anchor of ``block``."""
    return torch.logaddexp(block.pos, term(block)) - block.pos


def auto_block_size(num_rows: int, num_columns: int) -> int:
    """Anchors per block when ``block_size`` is unset: just over ``BLOCK_ELEMENTS`` per
    matrix."""
    return max(1, min(num_rows, BLOCK_ELEMENTS // max(num_columns, 1) + 1))


def contrastive_losses(
    h1: Tensor,
    h2: Tensor,
    tau: float,
    term: NegativeTermFn,
    block_size: Optional[int] = None,
    num_negatives: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    anchors: Optional[slice] = None,
) -> Tensor:
    """``[2, M]`` losses ``ℓ(u_i)`` (row 0) and ``ℓ(v_i)`` (row 1) of the anchors ``i`` in
    ``anchors`` (default: all ``N``), each against all nodes, on the path the options call
    for (see the module's table). ``h1``, ``h2`` are checked by the caller."""
    u, v = normalize_views(h1, h2)
    n = u.size(0)
    lo, hi, _ = (anchors or slice(0, n)).indices(n)
    fits = n <= DENSE_MAX_NODES if block_size is None else block_size >= n
    if num_negatives is None and hi - lo == n and fits:
        return torch.stack([anchor_losses(b, term) for b in dense_blocks(u, v, tau)])
    columns = n if num_negatives is None else num_negatives + 1
    size = block_size or auto_block_size(hi - lo, columns)
    call, out = {}, []
    for view, (a, o) in enumerate(((u, v), (v, u))):
        blocks = []
        for start in range(lo, hi, size):
            rows = slice(start, min(start + size, hi))
            if num_negatives is None:
                args = (row_block, a, o, rows, view)
            else:
                cols = torch.randperm(n, generator=generator)[:columns].to(u.device)
                args = (sampled_block, a, o, rows, view, cols)
            blocks.append(_block_losses(args, tau, call, term))
        out.append(torch.cat(blocks))
    return torch.stack(out)


def _block_losses(args: tuple, tau: float, call: dict, term: NegativeTermFn) -> Tensor:
    """The losses of the block ``make(*inputs, tau, call)``, recomputed in backward when
    they need a gradient: only one block's ``B×N`` intermediates are alive at a time."""
    make, *inputs = args

    def losses(*inputs) -> Tensor:
        return anchor_losses(make(*inputs, tau, call), term)

    if torch.is_grad_enabled() and (inputs[0].requires_grad or inputs[1].requires_grad):
        return checkpoint(losses, *inputs, use_reentrant=False)
    return losses(*inputs)
