"""The loss engine: every anchor's loss against its negatives, on one of three paths.

Every loss of this package is :math:`\\ell_i = -\\log \\frac{e^{p_i}}{e^{p_i} + Ng_i}` for an
anchor ``i`` with positive logit :math:`p_i = \\theta(a_i, o_i)/\\tau` and a loss-specific
negative term :math:`Ng_i` over its inter-view logits :math:`\\theta(a_i, o_k)/\\tau` and
intra-view logits :math:`\\theta(a_i, a_k)/\\tau`, ``k ≠ i`` (docs/algorithms.md §1). A
:class:`NegativeBlock` holds them for a block of anchors of one view; a loss turns a block
into its ``log Ng`` (:meth:`~pyg_progcl.losses.ContrastiveLoss.negative_term`), and the
engine does the rest with autograd:

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
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from .._compat import autocast_enabled

#: All anchors at once (the dense path) up to this many nodes when ``block_size`` is unset:
#: its three ``N×N`` matrices and their exponentials then take at most 1.5 GiB in float32.
DENSE_MAX_NODES = 8192
#: Elements of one automatically sized ``B×N`` block: just above it (32 MiB of float32).
#: glibc maps blocks of 32 MiB or more on their own and unmaps them when freed; smaller
#: ones come from its heap, which held about 0.9 GB of freed blocks after the 24 row blocks
#: of a 12,000-node graph (measured resident memory; 0.08 GB with blocks above 32 MiB).
BLOCK_ELEMENTS = 1 << 23
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


@dataclass
class NegativeBlock:
    """A block of ``B`` anchors of one view with ``C`` candidate negatives per view.

    Logits are shifted by their upper bound ``1/τ`` (cosines are at most 1), so ``exp``
    never overflows; every ``Ng`` formula is homogeneous in the exponentials, so the shift
    cancels in the loss.

    Attributes:
        pos: ``[B]`` shifted positive logits ``(θ(a_i, o_i) - 1)/τ``.
        inter: ``[B, C]`` shifted inter-view logits ``(θ(a_i, o_k) - 1)/τ``.
        intra: ``[B, C]`` shifted intra-view logits ``(θ(a_i, a_k) - 1)/τ``.
        excluded: ``[B]`` column of each row that is not a negative (the anchor itself,
            or a surplus sample); it holds ``-inf`` in ``inter`` and ``intra``.
        count: Negatives per view and anchor (``N - 1``, or ``k`` when sampled).
        tau: The temperature.
        view: The anchors' view: 0 (``a = u = h1``) or 1 (``a = v = h2``).
        rows: The anchors' rows (``None``: all ``N``, the dense path).
        cols: The candidate negatives' rows (``None``: all ``N``).
        call: Values shared by the blocks of one loss call (:meth:`memo`).
    """

    pos: Tensor
    inter: Tensor
    intra: Tensor
    excluded: Tensor
    count: int
    tau: float
    view: int = 0
    rows: Optional[slice] = None
    cols: Optional[Tensor] = None
    call: dict = field(default_factory=dict, repr=False)

    @property
    def dense(self) -> bool:
        """Whether the block holds all anchors against all nodes (the dense path, whose
        second view's inter-view logits are the transpose of the first's)."""
        return self.rows is None and self.cols is None

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
        return scale * 2.0 / self.tau <= EXP_SPAN and self.inter.dtype != torch.float16

    def log_sum_exp_both(
        self, scale: float = 1.0, log_weight: Optional[Tensor] = None, share: Optional[str] = ""
    ) -> Tensor:
        """``log Σ_k w_k [exp(scale·inter_k) + exp(scale·intra_k)]`` over all ``2·count``
        negatives, with detached weights ``w = exp(log_weight)`` (``[B, C]``; default 1).

        A plain sum of exponentials where none underflows, a max-shifted log-sum-exp
        otherwise. On the dense path the inter-view sums of both views come from one
        matrix (row sums for the first view's anchors, column sums for the second's) where
        the second view's weights are the transpose of the first's; ``share`` names that
        matrix (``""``: unweighted, ``None``: not shared).
        """
        if self.exp_fits(scale):
            inter = self._inter_exp_sums(scale, log_weight, share)
            total = inter + _ExpSums.apply(self.intra, log_weight, scale, False)[0]
            if log_weight is None or bool((total > torch.finfo(total.dtype).tiny).all()):
                return torch.log(total)
        inter, intra = self.inter * scale, self.intra * scale
        if log_weight is not None:
            inter, intra = inter + log_weight, intra + log_weight
        return torch.logaddexp(torch.logsumexp(inter, dim=1), torch.logsumexp(intra, dim=1))

    def _inter_exp_sums(self, scale: float, log_weight: Optional[Tensor], share) -> Tensor:
        if not self.dense or share is None:
            return _ExpSums.apply(self.inter, log_weight, scale, False)[0]
        native = None if log_weight is None else self.native(log_weight)
        sums = self.memo(
            f"exp:{share}:{scale}",
            lambda: _ExpSums.apply(self.native(self.inter), native, scale, True),
        )
        return sums[self.view]

    def inter_in(self, u: Tensor, v: Tensor, view: Optional[int] = None) -> Tensor:
        """The shifted inter-view logits of this block's pairs in other views ``u``, ``v``
        of the same nodes, from the anchors of ``view`` (default: the block's)."""
        view = self.view if view is None else view
        if self.dense:  # (the second view's matrix is the transpose of the first's)
            logits = shifted_logits(u, v, self.tau)
            return logits if view == 0 else logits.T
        a, o = (u, v) if view == 0 else (v, u)
        return shifted_logits(a[self.rows], o if self.cols is None else o[self.cols], self.tau)


class _ExpSums(torch.autograd.Function):
    """Row sums and (``columns``) column sums of ``e = exp(scale·x + log_w)``.

    Written by hand to save time and memory: one ``e`` is made and kept for backward
    (autograd would also keep ``scale·x + log_w``), and the gradient of both sums of a dense
    matrix is formed in one pass (autograd would add the two up in another matrix).
    """

    @staticmethod
    def forward(ctx, x: Tensor, log_w: Optional[Tensor], scale: float, columns: bool):
        e = torch.mul(x, scale) if scale != 1 else x.clone()
        e = (e if log_w is None else e.add_(log_w)).exp_()
        ctx.save_for_backward(e)
        ctx.scale = scale
        return e.sum(dim=1), e.sum(dim=0) if columns else e.new_zeros(0)

    @staticmethod
    @once_differentiable
    def backward(ctx, g_rows: Tensor, g_cols: Tensor):
        (e,) = ctx.saved_tensors
        grad = torch.mul(e, g_rows.unsqueeze(1))
        if g_cols.numel():
            grad.addcmul_(e, g_cols.unsqueeze(0))
        return grad.mul_(ctx.scale) if ctx.scale != 1 else grad, None, None, None


#: A loss's negative term: ``[B]`` shifted ``log Ng`` of a block's anchors.
NegativeTermFn = Callable[[NegativeBlock], Tensor]


def _masked(logits: Tensor, excluded: Tensor) -> Tensor:
    """``logits`` with ``-inf`` at each row's excluded column, written outside autograd:
    no term sends a gradient through ``exp(-inf) = 0``, and the Gram product's backward
    keeps no copy of its gradient to zero these entries again."""
    rows = torch.arange(logits.size(0), device=logits.device)
    with torch.no_grad():
        logits.index_put_((rows, excluded), logits.new_full((), float("-inf")))
    return logits


def dense_blocks(u: Tensor, v: Tensor, tau: float) -> Iterator[NegativeBlock]:
    """Both views' blocks of all ``N`` anchors from three Gram matrices: the second view's
    inter-view logits are the transpose of the first's, and its intra-view logits are read
    transposed too (the matrix is symmetric), so both reduce along one memory order. Each
    intra-view matrix is made when its view's block is asked for."""
    n, call = u.size(0), {}
    diag = torch.arange(n, device=u.device)
    pos = (u * v).sum(1).sub(1.0).div(tau)
    uv = _masked(shifted_logits(u, v, tau), diag)
    uu = _masked(shifted_logits(u, u, tau), diag)
    yield NegativeBlock(pos, uv, uu, diag, n - 1, tau, 0, call=call)
    del uu
    vv = _masked(shifted_logits(v, v, tau), diag)
    yield NegativeBlock(pos, uv.T, vv.T, diag, n - 1, tau, 1, call=call)


def row_block(a: Tensor, o: Tensor, rows: slice, view: int, tau: float, call: dict):
    """The anchors ``rows`` of view ``a`` against all nodes."""
    excluded = torch.arange(rows.start, rows.stop, device=a.device)
    pos = (a[rows] * o[rows]).sum(1).sub(1.0).div(tau)
    inter = _masked(shifted_logits(a[rows], o, tau), excluded)
    intra = _masked(shifted_logits(a[rows], a, tau), excluded)
    return NegativeBlock(pos, inter, intra, excluded, a.size(0) - 1, tau, view, rows, call=call)


def sampled_block(a: Tensor, o: Tensor, rows: slice, view: int, cols: Tensor, tau, call):
    """The anchors ``rows`` against ``k + 1`` shared sampled nodes ``cols``; each anchor
    drops one column (itself if sampled, else the last), keeping ``k`` uniform negatives
    among the other ``N - 1``."""
    k = cols.numel() - 1
    anchors = torch.arange(rows.start, rows.stop, device=a.device)
    hit = anchors.unsqueeze(1) == cols.unsqueeze(0)
    excluded = torch.where(hit.any(1), hit.int().argmax(1), torch.full_like(anchors, k))
    pos = (a[rows] * o[rows]).sum(1).sub(1.0).div(tau)
    inter = _masked(shifted_logits(a[rows], o[cols], tau), excluded)
    intra = _masked(shifted_logits(a[rows], a[cols], tau), excluded)
    return NegativeBlock(pos, inter, intra, excluded, k, tau, view, rows, cols, call)


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
