"""The loss engine: every anchor's loss ``ℓ_i = log(e^{p_i} + Ng_i) - p_i``, where a loss
turns a :class:`NegativeBlock` of anchors into its ``log Ng``, on the ``dense``, ``rows``
or ``sampled`` path (docs/design.md)."""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .._compat import autocast_enabled

#: ``exp`` of a shifted logit above ``-EXP_SPAN`` is a normal float32.
EXP_SPAN = 80.0


def full_precision(like: Tensor) -> contextlib.AbstractContextManager:
    """Turns autocast off on ``like``'s device: the losses compute in float32 at least."""
    if autocast_enabled(like.device.type):
        return torch.autocast(like.device.type, enabled=False)
    return contextlib.nullcontext()


class _Normalize(torch.autograd.Function):
    """``h / ‖h‖`` row by row, with the gradient ``(g − u (u·g)) / ‖h‖`` by hand."""

    @staticmethod
    def forward(ctx, h: Tensor) -> Tensor:
        scale = h.abs().amax(dim=1, keepdim=True).clamp_(min=torch.finfo(h.dtype).tiny)
        g = h / scale
        norm = torch.linalg.vector_norm(g, dim=1, keepdim=True)
        u = g.div_(norm.clamp(min=1e-12))
        # ‖h‖ = ‖g‖·scale (``F.normalize``'s eps where the row is 0)
        ctx.save_for_backward(u, torch.where(norm > 0, norm.mul_(scale), 1e-12))
        return u

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        u, norm = ctx.saved_tensors
        with full_precision(grad):  # (a backward called under autocast computes as forward)
            return torch.addcmul(grad, u, (u * grad).sum(1, keepdim=True), value=-1).div_(norm)


def normalize_views(h1: Tensor, h2: Tensor) -> tuple[Tensor, Tensor]:
    """Unit rows of both views in float32 or float64, exact for every finite row."""
    full = [h if h.dtype in (torch.float32, torch.float64) else h.float() for h in (h1, h2)]
    return _Normalize.apply(full[0]), _Normalize.apply(full[1])


def shifted_logits(a: Tensor, b: Tensor, tau: float) -> Tensor:
    """``(a bᵀ - 1)/τ`` of unit rows: logits shifted by their bound, so ``exp`` never overflows."""
    product = torch.addmm if a.dim() == 2 else torch.baddbmm
    return product(a.new_full((), -1.0 / tau), a, b.mT, alpha=1.0 / tau)


def _exclude(x: Tensor, excluded: Tensor) -> Tensor:
    """``x`` with ``-inf`` at each row's ``excluded`` column, in place, outside autograd."""
    index = excluded.unsqueeze(1)
    with torch.no_grad():
        return x.scatter_(-1, index if x.dim() == 2 else index.expand(len(x), -1, 1), -math.inf)


class Plan(NamedTuple):
    """A loss's ``path`` (``'dense'``, ``'rows'`` or ``'sampled'``) and anchors per block."""

    path: str
    block_size: int


@dataclass
class NegativeBlock:
    """A block of ``B`` anchors of one view with ``C`` candidate negatives per view, its
    logits shifted by ``-1/τ`` (so ``exp`` never overflows). A loss of one's own reads the
    attributes below and :meth:`log_sum_exp_both` (docs/own_loss.md).

    Attributes:
        pos: ``[B]`` shifted positive logits ``(θ(a_i, o_i) - 1)/τ``.
        anchors: ``[B, d]`` the anchors ``a_i`` (unit rows).
        others: ``[C, d]`` the candidates of the other view ``o_k``.
        peers: ``[C, d]`` the candidates of the anchors' own view ``a_k``.
        excluded: ``[B]`` column of each row that is not a negative (the anchor itself,
            or a surplus sample).
        count: Negatives per view and anchor (``N - 1``, or ``k`` when sampled).
        tau: The temperature.
        view: The anchors' view: 0 (``a = u = h1``) or 1 (``a = v = h2``); ``None``: both
            views of the dense path (``batched_views``), stacked ``[2, N, d]``.
        rows: The anchors' rows (``None``: all ``N``, the dense path).
        cols: The candidate negatives' rows (``None``: all ``N``).
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
    pair: Any = field(default=None, repr=False)  # (the dense path's DensePair)
    _own: dict = field(default_factory=dict, init=False, repr=False)

    @property
    def dense(self) -> bool:
        """Whether the block is the dense path's (all anchors against all nodes)."""
        return self.pair is not None

    @property
    def inter(self) -> Tensor:
        """``[B, C]`` shifted inter-view logits ``(θ(a_i, o_k) - 1)/τ``, ``-inf`` if excluded."""
        if not self.dense:
            return self._logits("inter", self.anchors, self.others)
        x = self._logits("inter", self.pair.u, self.pair.v, self.pair.own)
        return {0: x, 1: x.T}.get(self.view) if self.view is not None else torch.stack([x, x.T])

    @property
    def intra(self) -> Tensor:
        """``[B, C]`` shifted intra-view logits ``(θ(a_i, a_k) - 1)/τ`` (see :attr:`inter`)."""
        return self._logits("intra", self.anchors, self.peers)

    def _split(self) -> list[NegativeBlock]:
        """A block of both views (``view=None``) as one block per view."""
        p = self.pair
        return [
            NegativeBlock(self.pos, a, o, a, self.excluded, self.count, self.tau, view, pair=p)
            for view, (a, o) in enumerate(((p.u, p.v), (p.v, p.u)))
        ]

    def _logits(self, name: str, a: Tensor, o: Tensor, own: Optional[dict] = None) -> Tensor:
        own = self._own if own is None else own
        if name not in own:
            own[name] = _exclude(shifted_logits(a, o, self.tau), self.excluded)
        return own[name]

    def _detached_logits(self) -> Tensor:
        """The inter-view logits without gradient or exclusion, made once (dense: view 0's)."""
        own = self.pair.own if self.dense else self._own
        if "detached" not in own:
            a, o = (self.pair.u, self.pair.v) if self.dense else (self.anchors, self.others)
            with torch.no_grad():
                own["detached"] = shifted_logits(a, o, self.tau)
        return own["detached"]

    def _take_logits(self) -> Optional[Tensor]:
        """:meth:`_detached_logits` if made, handed over to be overwritten."""
        return (self.pair.own if self.dense else self._own).pop("detached", None)

    def _exp_fits(self, scale: float = 1.0) -> bool:
        """Whether ``exp(scale · logit)`` of every negative is a normal float."""
        return scale * 2.0 / self.tau <= EXP_SPAN and self.anchors.dtype != torch.float16

    def log_sum_exp_both(
        self, scale: Union[float, tuple[float, ...]] = 1.0, log_weight: Optional[Tensor] = None
    ) -> Tensor:
        """``log Σ_k w_k [exp(scale·inter_k) + exp(scale·intra_k)]`` over all ``2·count``
        negatives, with detached weights ``w = exp(log_weight)`` (``[B, C]``; default 1). A
        tuple of scales gives ``[S, B]``, one row per scale, from the same products.
        """
        scales = (float(scale),) if isinstance(scale, (int, float)) else tuple(scale)
        if not all(0 < s < float("inf") for s in scales):  # (-inf at the excluded entries)
            raise ValueError(f"`scale` must be positive and finite (got {scale})")
        if not self._exp_fits(max(scales)):
            out = torch.stack([self._log_sum_exp(s, log_weight) for s in scales])
        elif log_weight is None:
            out = torch.log(self._inter_sums(scales) + self._intra_sums(scales))
        else:
            # (one copy along memory: the dense second view's weights are a transpose)
            lw = _exclude(log_weight.clone(memory_format=torch.contiguous_format), self.excluded)
            shift = lw.amax(dim=1)  # (the largest weight 1: no row's sum underflows)
            lw.sub_(shift.unsqueeze(1))
            out = torch.log(self._inter_sums(scales, lw) + self._intra_sums(scales, lw)) + shift
        return out[0] if isinstance(scale, (int, float)) else out

    def _log_sum_exp(self, s: float, log_weight: Optional[Tensor]) -> Tensor:
        inter, intra = self.inter * s, self.intra * s
        if log_weight is not None:
            inter, intra = inter + log_weight, intra + log_weight
        return torch.logaddexp(inter.logsumexp(dim=-1), intra.logsumexp(dim=-1))

    def _inter_sums(self, scales, log_weight: Optional[Tensor] = None, gather=None, logits=None):
        """``[S, B]`` inter-view sums (and the logits at ``gather``), from ``logits`` if given."""
        if self.dense and log_weight is None:
            sums, gathered = self.pair.inter_sums(self.view, scales, gather)
        else:
            index = () if gather is None else ((1, gather),)
            spec = _Sums(self.tau, self.excluded, scales, gather=index)
            sums, _, *got = _ExpGram.apply(self.anchors, self.others, log_weight, logits, spec)
            gathered = got[0] if got else None
        return sums if gather is None else (sums, gathered)

    def _intra_sums(self, scales, log_weight: Optional[Tensor] = None) -> Tensor:
        spec = _Sums(self.tau, self.excluded, scales)
        peers = None if self.peers is self.anchors else self.peers
        return _ExpGram.apply(self.anchors, peers, log_weight, None, spec)[0]


class DensePair:
    """What the dense path's two blocks share: the views, the inter-view matrix and its sums."""

    def __init__(self, u: Tensor, v: Tensor, tau: float, excluded: Tensor):
        self.u, self.v, self.tau, self.excluded = u, v, tau, excluded
        self.own, self.progcl = {}, None  # (own: "detached" logits, "inter", sums by key)

    def inter_sums(self, view, scales: tuple, gather=None) -> tuple[Tensor, Optional[Tensor]]:
        """``(sums [S, N], gathered)`` of ``view``'s anchors (``None``: both) from one matrix."""
        key = (scales, gather is not None)
        if key not in self.own:
            gathers = () if gather is None else ((1, gather[0]), (0, gather[1]))
            logits = None if gather is None else self.own.pop("detached", None)
            spec = _Sums(self.tau, self.excluded, scales, columns=True, gather=gathers)
            rows, cols, *got = _ExpGram.apply(self.u, self.v, None, logits, spec)
            self.own[key] = (rows, cols, got)
        rows, cols, got = self.own[key]
        if view is None:
            return torch.stack([rows, cols], dim=1), None
        return (rows, cols)[view], (got[view] if got else None)


@dataclass(frozen=True)
class _Sums:
    """What :class:`_ExpGram` computes over ``x = (a oᵀ - 1)/τ`` (``-inf`` at ``excluded``):
    row (and ``columns``) sums of ``exp(s·x + log_w)`` per scale ``s``, and ``x`` (dim 1) or
    ``xᵀ`` (dim 0) gathered at each ``(dim, index)`` of ``gather``."""

    tau: float
    excluded: Tensor
    scales: tuple[float, ...] = (1.0,)
    columns: bool = False
    gather: tuple = ()


class _ExpGram(torch.autograd.Function):
    """The sums of :class:`_Sums` over the Gram matrix of ``a`` and ``o`` (docs/design.md)."""

    @staticmethod
    def forward(ctx, a: Tensor, o: Optional[Tensor], log_w: Optional[Tensor], logits, spec: _Sums):
        ctx.same = o is None  # (a view against itself)
        o = a if o is None else o
        x = _exclude(shifted_logits(a, o, spec.tau) if logits is None else logits, spec.excluded)
        gathered = [(x if dim else x.T).gather(1, index) for dim, index in spec.gather]
        single = len(spec.scales) == 1  # (then x becomes its exponential)
        exps = [_exp(x, s, log_w, out=x if single else None) for s in spec.scales]
        rows = torch.stack([e.sum(dim=-1) for e in exps])
        cols = torch.stack([e.sum(dim=0) for e in exps]) if spec.columns else x.new_zeros(0)
        ctx.spec = spec
        ctx.save_for_backward(a, o, log_w if len(exps) > 1 else None, x)
        return rows, cols, *gathered

    @staticmethod
    def backward(ctx, g_rows: Tensor, g_cols: Tensor, *g_gathered: Tensor):
        a, o, log_w, kept = ctx.saved_tensors
        spec, single = ctx.spec, len(ctx.spec.scales) == 1
        need = ctx.needs_input_grad[0], ctx.needs_input_grad[0 if ctx.same else 1]
        with full_precision(g_rows):  # (a backward called under autocast computes as forward)
            if single and not (spec.columns or spec.gather):  # (rows only: r∘(E o), Eᵀ(r∘a))
                r = g_rows[0].mul(spec.scales[0] / spec.tau).unsqueeze(-1)
                out = [r * (kept @ o) if need[0] else None, kept.mT @ (r * a) if need[1] else None]
            else:  # (∂/∂x = Σ_s s·e_s ∘ (g_rows ⊕ g_cols), /τ)
                grad = None
                for j, s in enumerate(spec.scales):
                    e = kept if single else _exp(kept, s, log_w)
                    term = e * g_rows[j].mul(s / spec.tau).unsqueeze(-1)
                    if spec.columns:
                        term.addcmul_(e, g_cols[j].mul(s / spec.tau))
                    grad = term if grad is None else grad.add_(term)
                for (dim, index), g in zip(spec.gather, g_gathered):
                    (grad if dim else grad.T).scatter_add_(1, index, g.div(spec.tau))
                out = [grad @ o if need[0] else None, grad.mT @ a if need[1] else None]
        return *((out[0] + out[1], None) if ctx.same else out), None, None, None  # (g + gᵀ) a


def _exp(x: Tensor, scale: float, log_w: Optional[Tensor], out: Optional[Tensor] = None):
    """``exp(scale·x + log_w)`` (into ``out``, which may be ``x``)."""
    e = torch.mul(x, scale, out=out) if scale != 1 or out is None else x
    return (e if log_w is None else e.add_(log_w)).exp_()


#: A loss's negative term: ``[B]`` shifted ``log Ng`` of a block's anchors.
NegativeTermFn = Callable[[NegativeBlock], Tensor]
#: :func:`_row_losses` through ``torch.compile``, made once, at the first ``compile_blocks``.
_compiled_row_losses = functools.cache(lambda: torch.compile(_row_losses, dynamic=True))


def positive_logits(a: Tensor, o: Tensor, tau: float) -> Tensor:
    """``(θ(a_i, o_i) - 1)/τ`` of unit rows."""
    return torch.linalg.vecdot(a, o).sub(1.0).mul(1.0 / tau)


def batched_views(term: NegativeTermFn) -> NegativeTermFn:
    """Marks a negative term that takes the dense path's two views as one block."""
    term.batched_views = True
    return term


def dense_blocks(u: Tensor, v: Tensor, tau: float, batched: bool = False) -> list[NegativeBlock]:
    """Both views' blocks of all ``N`` anchors (one block of both views when ``batched``)."""
    n, diag = u.size(0), torch.arange(u.size(0), device=u.device)
    pos, pair = positive_logits(u, v, tau), DensePair(u, v, tau, diag)
    if not batched:
        return NegativeBlock(pos, u, v, u, diag, n - 1, tau, 0, pair=pair)._split()
    views = torch.stack([u, v])
    return [NegativeBlock(pos, views, views.flip(0), views, diag, n - 1, tau, None, pair=pair)]


def row_block(anchors, peers, positives, others, rows: slice, view: int, tau: float, cols=None):
    """The anchors ``rows`` of a view with their ``peers`` in it, ``positives`` and ``others``
    in the other: all nodes, or ``k + 1`` sampled nodes ``cols`` less one each."""
    index, k = torch.arange(rows.start, rows.stop, device=anchors.device), len(others) - 1
    pos = positive_logits(anchors, positives, tau)
    if cols is not None:  # (each anchor's own column if sampled, else the surplus last one)
        hit = index.unsqueeze(1) == cols.unsqueeze(0)
        index = torch.where(hit.any(1), hit.int().argmax(1), torch.full_like(index, k))
    return NegativeBlock(pos, anchors, others, peers, index, k, tau, view, rows, cols)


def anchor_losses(block: NegativeBlock, term: NegativeTermFn) -> Tensor:
    """``ℓ_i = log(e^{p_i} + Ng_i) - p_i = -log σ(p_i - log Ng_i)`` of ``block``'s anchors."""
    return F.logsigmoid(block.pos - term(block)).neg()


def contrastive_losses(loss, h1: Tensor, h2: Tensor, anchors: slice, reduced=False) -> Tensor:
    """``[2, M]`` losses ``ℓ(u_i)``, ``ℓ(v_i)`` of a ``ContrastiveLoss`` for the rows
    ``anchors``, on its :meth:`plan`'s path; ``reduced``: for a mean or sum."""
    how, term, tau = loss.plan(h1, anchors), loss.negative_term, loss.tau
    u, v = normalize_views(h1, h2)
    if how.path == "dense":
        blocks = dense_blocks(u, v, tau, getattr(term, "batched_views", False))
        losses = [anchor_losses(b, term) for b in blocks]
        return losses[0] if len(losses) == 1 else torch.stack(losses)
    blocks = _compiled_row_losses() if loss.compile_blocks else _row_losses
    args = (tau, how, anchors, loss.num_negatives)
    grad = torch.is_grad_enabled() and (u.requires_grad or v.requires_grad)
    if reduced and grad:
        return _ReducedBlocks.apply(u, v, term, args, blocks)
    # (per-anchor losses: each block recomputed in backward, its RNG state restored)
    run = functools.partial(checkpoint, blocks, use_reentrant=False) if grad else blocks
    out: list[list[Tensor]] = [[], []]
    for view, parts, rows, cols in _blocks(u, v, *args):
        out[view].append(run(term, *parts, rows, view, tau, cols))
    return torch.stack([torch.cat(losses) for losses in out])


def _blocks(u, v, tau: float, how: Plan, anchors: slice, num_negatives=None):
    """``(view, parts, rows, cols)`` of each row or sampled block, ``parts`` :func:`row_block`'s."""
    n, size = u.size(0), how.block_size
    for view, (a, o) in enumerate(((u, v), (v, u))):
        for start in range(anchors.start, anchors.stop, size):
            rows = slice(start, min(start + size, anchors.stop))
            cols = torch.randperm(n)[: num_negatives + 1] if how.path == "sampled" else None
            cols = cols if cols is None else cols.to(u.device, non_blocking=True)
            parts = [t for x in (a, o) for t in (x[rows], x if cols is None else x[cols])]
            yield view, parts, rows, cols


class _ReducedBlocks(torch.autograd.Function):
    """``[2, N]`` losses of the row blocks, each block's gradient taken as it is computed
    with respect to its four parts and added where they lie in ``u`` and ``v``."""

    @staticmethod
    def forward(ctx, u: Tensor, v: Tensor, term: NegativeTermFn, args: tuple, run) -> Tensor:
        ctx.wanted, out = ctx.needs_input_grad[:2], [[], []]
        grads = [torch.zeros_like(t) if w else None for t, w in zip((u, v), ctx.wanted)]
        for view, parts, rows, cols in _blocks(u.detach(), v.detach(), *args):
            into = [(grads[i], at) for i in (view, 1 - view) for at in (rows, cols)]
            leaves = [p.detach().requires_grad_(g is not None) for p, (g, _) in zip(parts, into)]
            with torch.enable_grad():
                losses = run(term, *leaves, rows, view, args[0], cols)
                need = [p for p in leaves if p.requires_grad]
                got = torch.autograd.grad(losses.sum(), need, materialize_grads=True)
            for (total, at), part in zip([t for t in into if t[0] is not None], got):
                if isinstance(at, Tensor):  # (at: all rows, a slice or the sampled rows)
                    total.index_add_(0, at, part)
                else:
                    (total if at is None else total[at]).add_(part)
            out[view].append(losses.detach())
        ctx.save_for_backward(*(g for g in grads if g is not None))
        return torch.stack([torch.cat(losses) for losses in out])

    @staticmethod
    def backward(ctx, g: Tensor):
        grads, g = iter(ctx.saved_tensors), g[0, 0]  # (equal for every anchor)
        return *(next(grads) * g if wanted else None for wanted in ctx.wanted), None, None, None


def _row_losses(term: NegativeTermFn, *inputs) -> Tensor:
    return anchor_losses(row_block(*inputs), term)
