"""Both directions of a loss from one pass over row blocks (three Gram blocks, not four).

A row block ``R`` of anchors yields the blocks ``uvᵀ[R]``, ``uuᵀ[R]`` and ``vvᵀ[R]``. Their
rows hold everything the anchors ``u_i, i ∈ R`` need; their *columns* hold a part of what
every anchor ``v_k`` needs (``θ(v_k, u_i) = uvᵀ[i, k]`` and, the intra-view Gram matrix being
symmetric, ``θ(v_k, v_i) = vvᵀ[i, k]``). A loss whose ``log Ng`` is a function of a few sums

    S_j(a) = Σ_{k≠a} w_ak (e^{s_j·inter_ak} + e^{s_j·intra_ak})      (shifted logits)

can therefore accumulate row sums for the ``u`` anchors and column sums for the ``v``
anchors in one pass, then combine them. Backward recomputes each block once and forms
``∂J/∂logits`` directly from the sums' gradients, so a step costs ``3 + 3 + 6 = 12`` Gram
products instead of the ``16`` of recomputing per direction; ``11`` where a block keeps its
``uvᵀ`` exponentials (:data:`KEEP_ELEMENTS`), and ``7`` with one block, whose matrices are
kept and whose intra-view gradients act through ``G + Gᵀ``. The weights ``w`` (ProGCL's
hardness) carry no gradient. The block matrices come from the loss's :class:`BlockPool`
and go back to it after backward.

The pass works in linear space: it is exact as long as every anchor's weights and weighted
sums are normal floats. It reports the anchors where they are not (ProGCL weights that
underflow, docs/design.md), and :mod:`.dispatch` recomputes those in log space.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Protocol

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .ops import EXP_SPAN, row_chunks, underflow_threshold
from .pool import BlockPool

#: Row-blocked losses keep ``B×N`` blocks for backward while the kept matrices hold at most
#: this many elements in all (512 MiB of float32): ProGCL first its weights ``w``
#: (recomputing them is its main extra cost), then single-scale losses their ``w·e^{u·vᵀ}``
#: (one Gram product fewer per block). Amazon-Photo keeps both (≈ 0.47 GB), Coauthor-CS none.
KEEP_ELEMENTS = 1 << 27

#: ``combine(*, pos, log_sums, log_weight_mean, count) -> log Ng``, called with keywords
#: only (see :class:`ExpSums`): an implementation names what it uses and takes ``**_``.
Combine = Callable[..., Tensor]


class ExtraTerm(Protocol):
    """A positive term ``X`` added to every anchor's ``Ng`` beside the exponential sums,
    read from the whole inter-view matrix at once (one block of all anchors; ProGCL-mix's
    synthesised negatives). One object serves one forward call."""

    def forward(self, logits: Tensor, pool: BlockPool) -> Tensor:
        """``[2, N]`` detached shifted ``log X`` of the ``u`` anchors (from the rows of the
        shifted, masked logits ``u·vᵀ``) and of the ``v`` anchors (from its columns);
        ``[N, N]`` scratch matrices come from ``pool`` and go back to it."""

    def backward(self, grad: Tensor, out: Tensor) -> None:
        """Adds ``∂J/∂(u_i·v_k)`` through ``log X`` to ``out[i, k]``, given ``grad``
        ``= ∂J/∂ log X`` of forward's output."""


@dataclass(frozen=True)
class ExpSums:
    r"""A loss's ``log Ng`` as a function of a few exponential sums over each anchor's
    negatives, :math:`S_j(i) = \sum_{k\neq i} w_{ik} (e^{s_j \cdot inter_{ik}} + e^{s_j
    \cdot intra_{ik}})` of its shifted logits (a :class:`NegativeBlock`'s ``inter`` and
    ``intra``) with detached weights :math:`w` (default 1). Such a term serves both
    directions from one pass over row blocks of anchors (the one-pass engine, as long as
    every :math:`e^{s_j \cdot logit}` is a normal float32 at the loss's ``τ``: :meth:`fits`);
    :meth:`NegativeTerm.from_sums` makes unweighted sums a :class:`NegativeTerm` for every
    path (weighted ones need their own ``log_negatives``).

    Attributes:
        scales: The ``s_j``.
        combine: ``log Ng`` of a block of anchors, differentiable, called with the
            keywords ``pos`` (``[B]`` shifted positive logits), ``log_sums`` (the ``[B]``
            ``log S_j``, one per scale), ``log_weight_mean`` (``[B]`` ``log mean_k w_ak``
            with ``weight``, else ``None``) and ``count`` (negatives per view and anchor);
            it names the ones it uses and takes the others as ``**_``.
        weight: ``weight(logits, out, rows)``: detached ``[B, N]`` weights of the block of
            shifted inter-view logits ``u[rows]·vᵀ``, written to ``out`` if given (the
            excluded entries are zeroed by the caller); ``None``: all weights are 1.
        column_weight: Like ``weight``, the weights of the column sums (the ``v``
            anchors), where they differ from the row sums' (``[i, k]``: anchor ``v_k``'s
            weight of the negatives ``u_i``, ``v_i``); single-scale losses only.
        extra: An :class:`ExtraTerm` added to ``Ng`` (``log Ng = logaddexp(combine(...),
            log X)``); only with one block of all anchors.
    """

    scales: tuple[float, ...]
    combine: Combine
    weight: Optional[Callable[[Tensor, Optional[Tensor], slice], Tensor]] = None
    column_weight: Optional[Callable[[Tensor, Optional[Tensor], slice], Tensor]] = None
    extra: Optional[ExtraTerm] = None

    def fits(self, tau: float) -> bool:
        """Whether every ``e^{s·logit}`` is a normal float32 (shifted logits are ≥ -2/τ)."""
        return max(self.scales) * 2.0 / tau <= EXP_SPAN


def one_pass_losses(
    u: Tensor,
    v: Tensor,
    tau: float,
    spec: ExpSums,
    block_size: int,
    pool: Optional[BlockPool] = None,
) -> tuple[Tensor, Tensor]:
    """``[2, N]`` losses of the anchors ``u_i`` (row 0) and ``v_i`` (row 1) of unit rows
    ``u``, ``v``, from one pass over their row blocks of ``block_size`` anchors (the
    column sums need every row: a part of the anchors is computed per direction).

    ``pool`` supplies the CPU block matrices and takes them back after backward.

    Returns:
        ``(losses, underflow)``: ``underflow`` (``[2, N]`` bool, no gradient) marks the
        anchors whose weights or weighted sums are (almost) zero in linear space; their
        ``losses`` are finite but meaningless, and no gradient reaches them through
        entries the caller replaces.
    """
    return _Blockwise.apply(u, v, tau, spec, block_size, pool or BlockPool(0))


class _Workspace:
    """The ``[B, N]`` matrices of one pass: one per role, reused from block to block."""

    def __init__(self, like: Tensor, pool: BlockPool):
        self.like, self.pool, self.mats = like, pool, {}

    def take(self, role: str, rows: int) -> Tensor:
        """The role's matrix (valid until the next block)."""
        mat = self.mats.get(role)
        if mat is None or mat.size(0) < rows:
            self.pool.give([mat])
            mat = self.mats[role] = self.pool.take(rows, self.like)
        return mat[:rows]

    def fresh(self, rows: int) -> Tensor:
        """A matrix of the caller's own (kept for backward)."""
        return self.pool.take(rows, self.like)

    def release(self, *roles: str) -> None:
        """Gives the matrices of ``roles`` (default: all) back to the pool."""
        for role in roles or list(self.mats):
            self.pool.give([self.mats.pop(role, None)])


class _Blocks:
    """The shifted, masked Gram blocks of anchors ``start:stop`` and their weights.

    Matrices come from ``work`` (valid until the next block), except the ``u·vᵀ`` block
    with ``fresh_uv`` and the weights with ``fresh_w`` (kept for backward).
    """

    def __init__(
        self,
        u: Tensor,
        v: Tensor,
        start: int,
        stop: int,
        tau: float,
        spec: ExpSums,
        work: _Workspace,
        weights: Optional[tuple] = None,
        uv_exp: Optional[Tensor] = None,
        fresh_uv: bool = False,
        fresh_w: bool = False,
    ):
        rows = torch.arange(stop - start, device=u.device)
        self.diag, self.work = (rows, rows + start), work
        us, vs = u[start:stop] / tau, v[start:stop] / tau
        shift = u.new_full((), -1.0 / tau)  # (filled on the device: no host copy)
        self.uv_is_exp = uv_exp is not None  # kept from forward: already exponentiated
        if self.uv_is_exp:
            self.uv = uv_exp
        else:
            out = work.fresh(len(rows)) if fresh_uv else work.take("uv", len(rows))
            self.uv = self._masked(torch.addmm(shift, us, v.T, out=out))
        self.uu = self._masked(torch.addmm(shift, us, u.T, out=work.take("uu", len(rows))))
        self.vv = self._masked(torch.addmm(shift, vs, v.T, out=work.take("vv", len(rows))))
        self.w, self.w2 = weights or (None, None)
        if weights is None:
            self.w = self._weight_matrix(spec.weight, "w", start, stop, fresh_w)
            self.w2 = self._weight_matrix(spec.column_weight, "w2", start, stop, fresh_w)

    def _weight_matrix(self, weight, role: str, start: int, stop: int, fresh: bool):
        if weight is None:
            return None
        out = self.work.fresh(stop - start) if fresh else self.work.take(role, stop - start)
        w = weight(self.uv, out, slice(start, stop))
        return w.index_put_(self.diag, w.new_zeros(()))

    @property
    def weights(self) -> tuple:
        """``(w, w2)``: the row sums' and (``None``: the same) the column sums' weights."""
        return self.w, self.w2

    def _masked(self, logits: Tensor) -> Tensor:
        return logits.index_put_(self.diag, logits.new_full((), float("-inf")))

    def exps(self, scales: tuple[float, ...], sums: bool = False):
        """``w·e^{s·logit}`` of the three blocks for each scale ``s`` (the last scale
        overwrites the logits), and with ``sums`` their ``[scales, B]`` row sums (``uv``,
        ``uu``: the ``u`` anchors) and ``[scales, N]`` column sums (``uv``, ``vv``: the ``v``
        anchors); one chain of passes per cache-sized row chunk. With column weights
        ``w2`` the ``uv`` block's exponentials stay unweighted (each sum weights its own)."""
        mats = (self.uv, self.uu, self.vv)
        w_rows, w_cols = self.w, self.w if self.w2 is None else self.w2
        last = len(scales) - 1
        rows = self.uv.size(0)
        exps = [
            mats if j == last else tuple(self.work.take(f"{k}@{j}", rows) for k in range(3))
            for j in range(last + 1)
        ]
        su = self.uv.new_zeros(last + 1, self.uv.size(0)) if sums else None
        sv = self.uv.new_zeros(last + 1, self.uv.size(1)) if sums else None
        for rows in row_chunks(self.uv):
            for j, scale in enumerate(scales):
                for k, logits in enumerate(mats):
                    if k == 0 and self.uv_is_exp:
                        continue
                    e = exps[j][k][rows]
                    if scale != 1:
                        torch.mul(logits[rows], scale, out=e)
                    elif j != last:
                        e.copy_(logits[rows])
                    e.exp_()
                    if k == 0 and self.w2 is not None:  # uv unweighted: each sum weights it
                        if sums:
                            su[j, rows] += torch.mul(e, w_rows[rows]).sum(1)
                            sv[j] += torch.mul(e, w_cols[rows]).sum(0)
                        continue
                    weight = w_cols if k == 2 else w_rows
                    if weight is not None:
                        e.mul_(weight[rows])
                    if sums and k < 2:
                        su[j, rows] += e.sum(1)
                    if sums and k != 1:
                        sv[j] += e.sum(0)
        return (exps, su, sv) if sums else exps


class _Blockwise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, v, tau, spec, block_size, pool):
        n = u.size(0)
        su, sv = u.new_zeros(len(spec.scales), n), u.new_zeros(len(spec.scales), n)
        wu, wv = u.new_zeros(n), u.new_zeros(n)
        kept, weights, uv_exps = [], [], []
        weighted = (spec.weight is not None) + (spec.column_weight is not None)
        blocked = block_size < n
        if spec.extra is not None and blocked:
            raise ValueError("an extra term needs one block of all anchors")
        extra = None
        keep_weights = blocked and weighted and weighted * n * n <= KEEP_ELEMENTS
        single = len(spec.scales) == 1 and spec.column_weight is None  # kept: w·e^{uv}
        keep_uv = blocked and single and (1 + weighted) * n * n <= KEEP_ELEMENTS
        work = _Workspace(u, pool)
        for start in range(0, n, block_size):
            stop = min(start + block_size, n)
            blocks = _Blocks(
                u, v, start, stop, tau, spec, work, fresh_uv=keep_uv, fresh_w=keep_weights
            )
            if spec.extra is not None:  # (before the exponentials overwrite the logits)
                extra = spec.extra.forward(blocks.uv, pool)
            if blocks.w is not None:
                wu[start:stop] = blocks.w.sum(1)
                wv += (blocks.w if blocks.w2 is None else blocks.w2).sum(0)
                if keep_weights:
                    weights.append(blocks.weights)
            exps, su[:, start:stop], block_sv = blocks.exps(spec.scales, sums=True)
            sv += block_sv
            if keep_uv:
                uv_exps.append(exps[0][0])
            if not blocked:  # one block: keep it for backward instead of recomputing
                kept = exps
                if blocks.w2 is not None:  # unweighted uv exponentials: both weights stay
                    weights.append(blocks.weights)
        if kept and not weights:  # one block: its exponentials stay, its weights do not
            work.release("w")
        elif not kept:
            work.release()
        underflow, (su, sv, wu, wv) = _underflow(su, sv, wu, wv, spec.weight is not None)
        pos = ((u * v).sum(1) - 1.0) / tau
        ctx.save_for_backward(u, v, pos, su, sv, wu, wv, extra)
        ctx.tau, ctx.spec, ctx.block_size, ctx.work = tau, spec, block_size, work
        ctx.kept, ctx.weights, ctx.uv_exps = kept, weights, uv_exps
        ctx.mark_non_differentiable(underflow)
        return _objective(pos, su, sv, wu, wv, spec, n, extra), underflow

    @staticmethod
    @once_differentiable
    def backward(ctx, grad, _):
        u, v, pos, su, sv, wu, wv, extra = ctx.saved_tensors
        tau, spec, n = ctx.tau, ctx.spec, u.size(0)
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in (pos, su, sv, extra) if t is not None]
            losses = _objective(*leaves[:3], wu, wv, spec, n, *leaves[3:])
            g_pos, g_su, g_sv, *g_extra = torch.autograd.grad(losses, leaves, grad)
        g_pos, g_su, g_sv = g_pos / tau, g_su / tau, g_sv / tau  # ∂logit/∂(x·y) = 1/τ
        du, dv = v * g_pos.unsqueeze(1), u * g_pos.unsqueeze(1)  # through u_i·v_i
        work = _Workspace(u, ctx.work.pool)
        for index, start in enumerate(range(0, n, ctx.block_size)):
            stop = min(start + ctx.block_size, n)
            w = ctx.weights[index] if ctx.weights else None  # (w, w2)
            uv_exp = ctx.uv_exps[index] if ctx.uv_exps else None
            for held in (ctx.weights, ctx.uv_exps):  # release the kept matrices block by block
                if held:
                    held[index] = None
            blocks = None if ctx.kept else _Blocks(u, v, start, stop, tau, spec, work, w, uv_exp)
            exps = ctx.kept or blocks.exps(spec.scales)
            uv_weights = None  # (w, w2) where the uv exponentials are unweighted
            if spec.column_weight is not None:
                uv_weights = w if ctx.kept else blocks.weights
            g_uv, g_uu, g_vv = _logit_grads(
                exps, spec.scales, g_su[:, start:stop], g_sv, uv_weights
            )
            if g_extra:  # (one block of all anchors)
                spec.extra.backward(g_extra[0], g_uv)
            if stop - start == n:  # one block: the intra-view grads act through a symmetric matrix
                sym = work.take("sym", n)
                du += g_uv @ v + torch.add(g_uu, g_uu.T, out=sym) @ u
                dv += g_uv.T @ u + torch.add(g_vv, g_vv.T, out=sym) @ v
            else:
                du[start:stop] += (g_uv @ v).add_(g_uu @ u)
                du += g_uu.T @ u[start:stop]
                dv += (g_uv.T @ u[start:stop]).add_(g_vv.T @ v[start:stop])
                dv[start:stop] += g_vv @ v
            if not ctx.kept:  # (one block: its matrices go back with ctx.work below)
                work.pool.give((*(w or ()), uv_exp))
        work.release()
        ctx.work.release()  # (one block: the forward's matrices)
        ctx.kept, ctx.weights, ctx.uv_exps = [], [], []
        return du, dv, None, None, None, None


def _logit_grads(
    exps, scales, g_su: Tensor, g_sv: Tensor, uv_weights: Optional[tuple] = None
) -> tuple[Tensor, Tensor, Tensor]:
    """``∂J/∂(x·y)`` of the three blocks, ``Σ_j s_j w e^{s_j·logit} ∂J/∂S_j`` (in place of the
    first scale's exponentials), where a ``uv`` entry feeds a row sum (its ``u`` anchor)
    and a column sum (its ``v`` anchor); ``uv_weights = (w, w2)`` weight the two for
    unweighted ``uv`` exponentials (column weights)."""
    g_su, g_sv = _times_scales(g_su, scales), _times_scales(g_sv, scales)
    out = exps[0]
    for rows in row_chunks(out[0]):
        for j, (e_uv, e_uu, e_vv) in enumerate(exps):
            gu, gv = g_su[j, rows].unsqueeze(1), g_sv[j].unsqueeze(0)
            g = (
                gu + gv
                if uv_weights is None
                else uv_weights[0][rows] * gu + uv_weights[1][rows] * gv
            )
            terms = (e_uv[rows].mul_(g), e_uu[rows].mul_(gu), e_vv[rows].mul_(gv))
            if j:
                for acc, term in zip(out, terms):
                    acc[rows] += term
    return out


def _times_scales(g: Tensor, scales: tuple[float, ...]) -> Tensor:
    """``g[j] · s_j`` for each scale: Python numbers, not a tensor copied to the device."""
    return torch.stack([row * scale for row, scale in zip(g, scales)])


def _objective(pos, su, sv, wu, wv, spec: ExpSums, n: int, extra=None) -> Tensor:
    """``[2, N]`` losses from the positive logits and the sums of both directions' anchors
    (and the extra term's ``[2, N]`` ``log X``)."""
    losses = []
    for view, (sums, wsum) in enumerate(((su, wu), (sv, wv))):
        log_w = None if spec.weight is None else torch.log(wsum / (n - 1))
        log_ng = spec.combine(
            pos=pos, log_sums=list(torch.log(sums)), log_weight_mean=log_w, count=n - 1
        )
        if extra is not None:
            log_ng = torch.logaddexp(log_ng, extra[view])
        losses.append(torch.logaddexp(pos, log_ng) - pos)
    return torch.stack(losses)


def _underflow(su, sv, wu, wv, weighted: bool) -> tuple[Tensor, tuple]:
    """``[2, N]`` anchors whose sums (or weights) underflowed, and the sums with those
    raised to a normal float (finite logarithms: their losses are replaced by the caller)."""
    tiny = underflow_threshold(su.dtype)
    bad = torch.stack([(su < tiny).any(0), (sv < tiny).any(0)])
    if weighted:
        bad |= torch.stack([wu < tiny, wv < tiny])
    if bool(bad.any()):
        su, sv, wu, wv = (t.clamp(min=tiny) for t in (su, sv, wu, wv))
    return bad, (su, sv, wu, wv)
