"""ProGCL: negatives re-weighted or mixed by their probability of being true negatives."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import torch
from torch import Tensor

from .._checks import (
    check_bool,
    check_choice,
    check_int,
    check_nonnegative,
    check_positive,
    check_views,
)
from ..mixture import BetaMixture
from .base import ContrastiveLoss, _log_first_sum
from .blockwise import ExpSums
from .similarity import (
    LogNegatives,
    NegativeBlock,
    Pairs,
    dense_blocks,
    normalize_views,
    row_chunks,
    sample_negative_similarities,
)

#: The default :math:`\epsilon` of ProGCL-mix's mixing formula.
MIX_EPS = 1e-8

#: MiB of frozen weights :class:`ProGCLLoss` holds between steps by default (what does not
#: fit is recomputed block by block at every step).
FROZEN_CACHE_MIB = 512.0

#: When :meth:`ProGCLLoss.fit` fits the mixture, and which similarities ``b`` comes from.
SCHEDULES = ("online", "fit-once", "frozen")


def check_shared_weights(shared_weights, schedule: str) -> bool:
    """Checks ``shared_weights`` is a bool, and ``True`` only with ``schedule='frozen'``."""
    check_bool("shared_weights", shared_weights)
    if shared_weights and schedule != "frozen":
        raise ValueError(
            "`shared_weights=True` reuses the frozen weight matrix of the reference code "
            f"and needs schedule='frozen' (got {schedule!r})"
        )
    return shared_weights


class ProGCLLoss(ContrastiveLoss):
    r"""ProGCL-weight and ProGCL-mix on GRACE's InfoNCE.

    From `ProGCL: Rethinking Hard Negative Mining in Graph Contrastive Learning`
    (Xia et al., ICML 2022). With hardness
    :math:`b_{ik} = p(\mathrm{true\ neg.} \mid s'_{ik})\, s'_{ik}`, :math:`s' = (\theta+1)/2`
    (no gradient through :math:`b`):

    * ``mode='weight'``: :math:`Ng_i = \sum_{k\neq i} w_{ik}
      (e^{\theta(u_i,v_k)/\tau} + e^{\theta(u_i,u_k)/\tau})`,
      :math:`w_{ik} = b_{ik} / \mathrm{mean}_{j\neq i} b_{ij}`;
    * ``mode='mix'``: GRACE's denominator plus :math:`\sum_a e^{\theta_{mix}(a)/\tau}`,
      :math:`\theta_{mix}(a) = (b_a\theta_a + b_{\pi(a)}\theta_{\pi(a)})/(b_a + b_{\pi(a)} + \epsilon)`
      over the ``num_mix`` negatives of largest :math:`b` and a random pairing :math:`\pi`.

    Until it is fitted (:attr:`fitted`) the loss equals :class:`InfoNCELoss` exactly: before
    the first :meth:`fit`, unless ``mixture`` was passed in already fitted (then, except
    with ``'frozen'``, which needs a fit to store its views, it weights from the first
    step). The trainer owns the warm-up and calls :meth:`fit` every epoch after it;
    ``schedule`` decides what a call changes:

    * ``'online'`` (spec §5.1): every call refits the mixture (warm-started); :math:`b`
      comes from the current similarities at every step;
    * ``'fit-once'``: the first call fits the mixture, later calls keep it; :math:`b` from
      the current similarities;
    * ``'frozen'`` (the reference code's schedule): the first call fits the mixture and
      freezes the two normalised views it was given; :math:`b` comes from *their*
      similarities at every later step, so the weights are those of the fit epoch. Only
      the ``2·N·d`` stored floats are state (``state_dict``); the ``N×N`` weights they
      give are held between steps up to ``frozen_cache_mib`` (Amazon-Photo: 234 MB in
      float32) and recomputed block by block (one Gram product more per block) beyond.
      The loss needs the same ``N`` nodes in the same order at every step (full-graph
      training). The reference code also floors :math:`\beta` of the
      high-similarity component at 1.01 in its fit (pass
      ``mixture=BetaMixture(min_beta_high=1.01)``) and weights the second direction with
      the first direction's matrix (``shared_weights=True``).

    With ``'online'``, negatives that become near-duplicates are classed as false
    negatives and lose their repulsion; on long runs this can let the encoder merge them
    (CiteSeer, 400 epochs: the loss fell from 7.86 to 7.1-7.4 while probe accuracy fell
    from 72 % to 68 %; docs/reproduction.md). A falling loss with a high-similarity
    component of :math:`\beta < 1` and large weight (``mixture.beta``, ``mixture.weight``;
    ``beta_FN`` / ``w_FN`` in the trainer's progress bar) is the sign to stop earlier or
    to use ``'frozen'``, which cannot collapse this way. Measured against ``'online'``
    (docs/reproduction.md, "Fit schedules"): at 400 epochs it lost less on CiteSeer and
    gained less on Cora; at the published 200 it was behind on both; at Amazon-Photo's
    published 2500 (one seed) it ended 0.47 ahead (online collapsed, −0.67 against GRACE).

    Args:
        tau: Temperature.
        mode: ``'weight'`` or ``'mix'``.
        num_samples: Inter-view negative similarities ``M`` sampled per :meth:`fit`.
        num_mix: Negatives mixed per anchor (``K``; capped at the negatives available).
        fit_iters: EM iterations per refit (the paper's ``I = 10``), warm-started.
        mix_eps: The :math:`\epsilon` of the mixing formula.
        mixture: The :class:`BetaMixture` to use (default: the reference initialisation);
            one passed in already fitted is kept by ``'fit-once'`` and ``'frozen'``.
        schedule: ``'online'``, ``'fit-once'`` or ``'frozen'`` (see above).
        shared_weights: With ``'frozen'``: weight the anchors of both views by the first
            direction's matrix, index by index, as the reference code does: anchor
            :math:`v_i`'s negatives :math:`u_k`, :math:`v_k` get
            :math:`b(\theta(u_i, v_k))` instead of the pair's own
            :math:`b(\theta(v_i, u_k))`. The one-pass row blocks then weight their
            column sums with a second matrix (measured: a step 1.06x / 1.16x GRACE's on
            Cora / Amazon-Photo, against 1.01x / 1.07x without it); at 200 epochs it
            changed no accuracy measurably.
        frozen_cache_mib: With ``'frozen'``: MiB of weight blocks held between steps
            (``4·N²`` bytes hold all in float32, twice that with ``shared_weights``;
            Coauthor-CS: 1282 MiB). It trades memory for time and changes no value: each
            block beyond it costs a Gram product and the hardness at every step
            (Coauthor-CS, one CPU thread: a training step 1.29x GRACE's at the default,
            1.12x holding all, +0.8 GB).
        block_size, num_negatives: see :class:`ContrastiveLoss`.
    """

    def __init__(
        self,
        tau: float = 0.5,
        mode: str = "weight",
        num_samples: int = 50_000,
        num_mix: int = 1000,
        fit_iters: int = 10,
        mix_eps: float = MIX_EPS,
        mixture: BetaMixture | None = None,
        schedule: str = "online",
        shared_weights: bool = False,
        frozen_cache_mib: float = FROZEN_CACHE_MIB,
        **kwargs,
    ):
        super().__init__(tau, **kwargs)
        self.mode = check_choice("mode", mode, {"weight", "mix"})
        self.num_samples = check_int("num_samples", num_samples, 2)
        self.num_mix = check_int("num_mix", num_mix, 1)
        self.fit_iters = check_int("fit_iters", fit_iters, 1)
        self.mix_eps = check_positive("mix_eps", mix_eps)
        self.mixture = BetaMixture() if mixture is None else mixture
        self.schedule = check_choice("schedule", schedule, SCHEDULES)
        self.shared_weights = check_shared_weights(shared_weights, schedule)
        self.frozen_cache_mib = check_nonnegative("frozen_cache_mib", frozen_cache_mib)
        # 'frozen': the unit-norm views of the fit (None before it; in the state_dict after)
        self.register_buffer("frozen_u", None)
        self.register_buffer("frozen_v", None)
        self._held: tuple[Tensor | None, dict] = (None, {})  # (frozen_u, b per row block)

    @property
    def fitted(self) -> bool:
        """Whether the loss weights its negatives yet (before that it is GRACE's): the
        mixture is fitted, and with ``'frozen'`` the fit's views are stored."""
        if self.schedule == "frozen":
            return self.frozen_u is not None
        return self.mixture.fitted

    @property
    def _frozen_weights(self) -> dict[tuple, Tensor]:
        """The ``b`` blocks held for the current frozen views; a new fit, a loaded state or
        ``.to()`` replaces the views' tensor and with it what was held."""
        if self._held[0] is not self.frozen_u:
            self._held = (self.frozen_u, {})
        return self._held[1]

    def reset_parameters(self):
        """Returns the mixture to its initial parameters and drops frozen views (the loss
        is GRACE's again)."""
        self.mixture.reset_parameters()
        self.frozen_u = self.frozen_v = None
        self._held = (None, {})  # free the held weights now, not at the next weighted step

    @torch.no_grad()
    def fit(self, h1: Tensor, h2: Tensor, generator: torch.Generator | None = None) -> ProGCLLoss:
        """Fits the mixture on ``num_samples`` off-diagonal inter-view similarities, as
        the ``schedule`` says (``'online'``: every call; otherwise the first call only,
        and ``'frozen'`` then keeps ``h1``, ``h2``).

        No ``N×N`` matrix is formed; EM warm-starts from the previous fit.
        """
        check_views(h1, h2)
        if self.schedule != "online" and self.fitted:
            return self
        if self.schedule == "online" or not self.mixture.fitted:
            theta = sample_negative_similarities(h1, h2, self.num_samples, generator)
            self.mixture.fit((theta + 1) / 2, max_iter=self.fit_iters)
        if self.schedule == "frozen":
            self.frozen_u, self.frozen_v = (t.detach().clone() for t in normalize_views(h1, h2))
        return self

    def check_inputs(self, h1: Tensor, h2: Tensor) -> None:
        super().check_inputs(h1, h2)
        self._check_frozen_nodes(h1)

    def _check_frozen_nodes(self, h1: Tensor) -> None:
        if self.frozen_u is not None and h1.size(0) != self.frozen_u.size(0):
            raise ValueError(
                f"`h1` has {h1.size(0)} nodes but schedule='frozen' was fitted on "
                f"{self.frozen_u.size(0)}: the frozen weights need the same nodes at every step"
            )

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # The frozen views exist only after a fit: take their shape (or absence) from the
        # state. Another schedule has none: a state with views is then an unexpected key.
        for name in ("frozen_u", "frozen_v"):
            saved = state_dict.get(prefix + name) if self.schedule == "frozen" else None
            setattr(self, name, None if saved is None else torch.empty_like(saved))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @torch.no_grad()
    def negative_weights(self, h1: Tensor, h2: Tensor) -> Tensor:
        """Dense ``[N, N]`` weights ``w_ik`` of the anchors ``u_i = h1[i]`` (diagonal 0).

        For inspection on small graphs; the loss itself never forms this matrix. Before
        the loss is :attr:`fitted` they are GRACE's (every ``w_ik = 1``). With
        ``schedule='frozen'`` (once fitted) these are the weights of the fit's views,
        whatever ``h1``, ``h2`` hold (they must have the fit's ``N``).
        """
        check_views(h1, h2)
        self._check_frozen_nodes(h1)
        if not self.fitted:
            n = h1.size(0)
            return 1.0 - torch.eye(n, dtype=h1.dtype, device=h1.device)
        u, v = normalize_views(h1, h2)
        block = next(dense_blocks(u, v, self.tau))
        log_b, log_mean_b, _ = self._log_hardness(block)
        return torch.exp(log_b - log_mean_b.unsqueeze(1))

    def hardness(self, cosine: Tensor) -> Tensor:
        r""":math:`b = s' \, p(\mathrm{true\ neg.} \mid s')`, :math:`s' = (\theta + 1)/2`, any shape."""
        with torch.no_grad():
            return self._hardness_of(cosine.add(1.0).mul_(0.5))

    def _hardness_of(self, s: Tensor) -> Tensor:
        """``b = s · σ(-D(s))``, overwriting ``s`` (clamped to the mixture's support)."""
        m = self.mixture
        a, b, c = m.log_odds_coefficients()
        s.clamp_(m.eps, 1.0 - m.eps)
        # (torch.special.xlogy / xlog1py would fuse the products but are not vectorised
        # on the CPU: measured 4x and 13x slower than log + mul.)
        minus_d = torch.log(s).mul_(-a)
        minus_d.add_(torch.neg(s).log1p_(), alpha=-b).sub_(c)
        return s.mul_(minus_d.sigmoid_())

    def _block_log_hardness(self, block: NegativeBlock) -> tuple[Tensor, Tensor, Tensor]:
        """``(log b, Σ_k b over dim 1, Σ_k b over dim 0)`` of the block's stored inter-view
        matrix, detached; excluded entries hold ``-inf``. Computed once per block (once for
        both dense directions: row sums serve one, column sums the other).

        With ``shared_weights`` the pairs are those of view 0's anchors (``b(θ(u_i, v_k))``
        for anchor ``i`` of either view), and the dense second direction reads the matrix
        transposed."""

        def make() -> tuple[Tensor, Tensor, Tensor]:
            with torch.no_grad():
                logits = block.native_inter
                if self.frozen_u is not None:
                    u0, v0 = self._frozen_views(logits)
                    pairs = block.pairs
                    if self.shared_weights:
                        pairs = dataclasses.replace(pairs, view=0)
                    logits = pairs.logits(u0, v0, self.tau)
                b = self._hardness_of_logits(logits)
                b.index_put_((block.rows(), block.excluded), b.new_zeros(()))
                sums = b.sum(dim=1), b.sum(dim=0)
                return b.log_(), *sums

        log_b, rows, cols = block.cached("log_hardness", make)
        if self._reads_transposed(block):
            return log_b.T, cols, rows
        return log_b, rows, cols

    def _reads_transposed(self, block: NegativeBlock) -> bool:
        """Whether the block's ``b`` is the transpose of what its stored orientation holds:
        the dense second direction with ``shared_weights`` (anchor ``v_i`` weighted by row
        ``i`` of the first direction's matrix, which the shared cache holds)."""
        return self.shared_weights and block.transposed

    def _log_hardness(self, block: NegativeBlock) -> tuple[Tensor, Tensor, bool]:
        """``(log b, log mean_k b, shared)`` for the block's anchors (``log b`` in the stored
        orientation, negatives along ``block.dim``).

        Weights are scale-free, so ``b`` stays exact in log space however small it is. An
        anchor whose ``b`` all underflowed (sum below ``2^24`` times the smallest normal
        float) gets uniform weights, i.e. GRACE's row; then ``shared`` is ``False`` and the
        returned ``log b`` is a corrected copy. (``shared``: the block's cached ``log b``,
        whose products the dense directions may share; not so for a transposed read.)
        """
        log_b, *sums = self._block_log_hardness(block)
        sum_b = sums[1 - block.dim]
        small = sum_b < torch.finfo(sum_b.dtype).tiny * 2.0**24
        if not bool(small.any()):
            return log_b, torch.log(sum_b / block.count), not self._reads_transposed(block)
        anchors = small.unsqueeze(block.dim)
        log_b = torch.where(anchors, log_b.new_zeros(()), log_b)
        excluded = (block.rows(), block.excluded)
        log_b = log_b.index_put_(excluded, log_b.new_tensor(float("-inf")))
        sum_b = torch.where(small, sum_b.new_tensor(float(block.count)), sum_b)
        return log_b, torch.log(sum_b / block.count), False

    def exp_sums(self) -> ExpSums | None:
        if not self.fitted:
            return ExpSums((1.0,), _log_first_sum)
        if self.mode == "mix":
            return None
        if self.shared_weights:  # the v anchors' rows of the first direction's matrix
            columns = functools.partial(self._block_weights, view=1)
            return ExpSums((1.0,), _log_weighted_sum, self._block_weights, columns)
        return ExpSums((1.0,), _log_weighted_sum, self._block_weights)

    def _frozen_views(self, like: Tensor) -> tuple[Tensor, Tensor]:
        return self.frozen_u.to(like), self.frozen_v.to(like)

    def _block_weights(
        self, logits: Tensor, out: Tensor | None, rows: slice, view: int = 0
    ) -> Tensor:
        """``b`` of the inter-view block ``u[rows]·vᵀ``: from its current shifted
        ``logits``, or with ``'frozen'`` from the stored views' (held between steps while
        all held blocks fit ``frozen_cache_mib``; the caller may overwrite what it gets).
        ``view=1`` (``shared_weights``' column sums): ``b`` of the stored ``v[rows]·uᵀ``."""
        if self.frozen_u is None:
            return self._hardness_of_logits(logits, out)
        key = (rows.start, rows.stop, view, logits.dtype, logits.device)
        held = self._frozen_weights
        if key in held:
            return held[key].clone() if out is None else out.copy_(held[key])
        logits = Pairs(view, rows).logits(*self._frozen_views(logits), self.tau, out)
        b = self._hardness_of_logits(logits, out)
        held_bytes = sum(t.nbytes for t in held.values()) + b.nbytes
        if held_bytes <= self.frozen_cache_mib * 2**20:
            held[key] = b.clone()
        return b

    def _hardness_of_logits(self, logits: Tensor, out: Tensor | None = None) -> Tensor:
        """Detached ``b`` of shifted inter-view logits: ``s' = (θ + 1)/2 = 1 + τ·logit/2``,
        written to ``out`` if given.

        Computed in cache-sized row chunks (see :func:`row_chunks`).
        """
        with torch.no_grad():
            b = torch.empty_like(logits) if out is None else out
            one = logits.new_ones(())
            for rows in row_chunks(logits):
                self._hardness_of(torch.add(one, logits[rows], alpha=self.tau / 2, out=b[rows]))
            return b

    def log_negatives(self, block: NegativeBlock) -> Tensor:
        return self._log_negatives(block, {})

    def call_negatives(self) -> LogNegatives:
        """ProGCL-mix keeps each block's selection (its hardest negatives, their ``b`` and
        the pairing π) from the forward call for the block's recomputation in backward."""
        if self.mode != "mix":
            return self.log_negatives
        return functools.partial(self._log_negatives, selections={})

    def _log_negatives(self, block: NegativeBlock, selections: dict) -> Tensor:
        if not self.fitted:
            return block.log_sum_exp_both()
        if self.mode == "weight":
            return self._log_weighted(block)
        return torch.logaddexp(block.log_sum_exp_both(), self._log_mixed(block, selections))

    def _log_weighted(self, block: NegativeBlock) -> Tensor:
        """``log Σ_k w_ik (e^{inter_ik} + e^{intra_ik})`` with ``w = b / mean b``.

        Each product is one ``exp(logit + log b)``, whose backward is a single product;
        the dense path's inter-view one serves both directions (rows, then columns).
        """
        log_b, log_mean_b, shared = self._log_hardness(block)
        if block.exp_fits():

            def weighted_inter() -> Tensor:
                return torch.add(block.native_inter, log_b).exp_()

            inter = block.cached("weighted_exp", weighted_inter) if shared else weighted_inter()
            intra = torch.add(block.intra, log_b).exp_()  # intra-view matrices are symmetric
            total = inter.sum(dim=block.dim) + intra.sum(dim=block.dim)
            if bool((total > torch.finfo(total.dtype).tiny).all()):
                return torch.log(total) - log_mean_b
        log_b = log_b.T if block.transposed else log_b  # log-sum-exp: no term underflows
        inter = torch.logsumexp(block.inter + log_b, dim=1)
        return torch.logaddexp(inter, torch.logsumexp(block.intra + log_b, dim=1)) - log_mean_b

    def _log_mixed(self, block: NegativeBlock, selections: dict) -> Tensor:
        """``log Σ_a e^{θ_mix(a)/τ}`` (shifted) over the ``num_mix`` hardest negatives.

        A row block's selection is kept in ``selections`` (one dict per forward call) when it
        will be recomputed in backward, which then takes it from there (without it, the
        checkpoint's restored RNG state gives the same selection, at the cost of another).
        """
        rows = block.pairs.rows  # None: a dense block, never recomputed
        key = None if rows is None else (block.pairs.view, rows.start)
        selection = selections.pop(key, None)
        if selection is None:
            selection = self._select(block)
            if key is not None and torch.is_grad_enabled() and block.inter.requires_grad:
                idx, b_top, perm = selection  # int32: Amazon-Photo keeps 2 × 7650 × 1000 × 4 B
                selections[key] = idx.int(), b_top, perm
        idx, b_top, perm = selection
        theta = (block.inter.gather(1, idx.long()) * block.tau + 1.0).clamp(min=-1.0)
        b_pair, theta_pair = b_top.index_select(1, perm), theta.index_select(1, perm)
        mixed = (b_top * theta + b_pair * theta_pair) / (b_top + b_pair + self.mix_eps)
        return torch.logsumexp((mixed - 1.0) / block.tau, dim=1)

    @torch.no_grad()
    def _select(self, block: NegativeBlock) -> tuple[Tensor, Tensor, Tensor]:
        """The block's ``num_mix`` hardest negatives per anchor (ascending columns), their
        ``b`` and a random pairing π of their positions.

        ``b`` is used as it is, as in the spec's formula: where both ``b`` of a pair lie far
        below ε, ``θ_mix`` and its gradient tend to 0, continuously (no rescaling switches
        on at some threshold).
        """
        k = min(self.num_mix, block.count)
        log_b = self._log_hardness(block)[0]
        log_b = log_b.T if block.transposed else log_b
        idx = _largest(log_b, k)
        return idx, torch.exp(log_b.gather(1, idx)), torch.randperm(k, device=idx.device)

    def _options(self) -> dict:
        opts = {"mode": self.mode, "num_samples": self.num_samples, "fit_iters": self.fit_iters}
        if self.mode == "mix":
            opts["num_mix"] = self.num_mix
            if self.mix_eps != MIX_EPS:
                opts["mix_eps"] = self.mix_eps
        if self.schedule != "online":
            opts["schedule"] = self.schedule
        if self.shared_weights:
            opts["shared_weights"] = True
        if self.frozen_cache_mib != FROZEN_CACHE_MIB:
            opts["frozen_cache_mib"] = self.frozen_cache_mib
        return opts


def _largest(x: Tensor, k: int) -> Tensor:
    """Column indices of the ``k`` largest entries of each row of ``x``, ascending; ties at
    the ``k``-th value go to the lowest columns. The order is thus canonical, whatever the
    selection algorithm (π pairs positions, so the order decides the pairs)."""
    n = x.size(1)
    if k >= n:
        return torch.arange(n, device=x.device).expand(x.size(0), n)
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        # numpy's introselect on values, then a mask: near argpartition's time, and
        # ordered (one thread, k = 1000: 73-78 ms against 75-81 ms for 1096 x 7650,
        # 82-102 against 75-81 for 2708 x 2708; numpy has no bfloat16)
        kth = torch.from_numpy(np.partition(x.numpy(), n - k, axis=1)[:, n - k : n - k + 1])
    else:
        kth = torch.topk(x, k, dim=1, sorted=False).values.amin(dim=1, keepdim=True)
    x = x.contiguous()  # (the dense path's second direction is a transpose)
    keep = x >= kth  # at least k per row
    over = keep.view(torch.uint8).sum(dim=1, dtype=torch.int32) > k
    if bool(over.any()):  # ties at the k-th value: those rows keep their first ties by column
        sub, kth = x[over], kth[over]
        above, ties = sub > kth, sub == kth
        room = k - above.sum(dim=1, keepdim=True)
        keep[over] = above | (ties & (ties.cumsum(dim=1) <= room))
    return torch.nonzero(keep, as_tuple=True)[1].view(x.size(0), k)


def _log_weighted_sum(pos: Tensor, log_sums: list[Tensor], log_weight_mean: Tensor, count: int):
    """``log Σ_k w_k e^{logit_k}`` with ``w = b / mean b``."""
    return log_sums[0] - log_weight_mean
