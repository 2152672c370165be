"""True- vs false-negative analysis of the similarities a contrastive loss sees (ProGCL,
Xia et al., ICML 2022, https://arxiv.org/abs/2110.02027; docs/algorithms.md §5)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Optional, Union

import torch
from torch import Tensor

from .._checks import check_choice, check_int, check_matrix
from .._compat import stacklevel_outside_package
from .._labels import check_labels
from ..losses._engine import normalize_views
from ..losses._sampling import sample_negative_pairs
from ..mixture import DEGENERACY_KINDS, BetaMixture, MixtureDegeneracyWarning

__all__ = [
    "Diagnosis",
    "diagnose",
    "false_negative_rate",
    "separation_auc",
    "topk_false_negative_share",
]

Source = Union[torch.nn.Module, Tensor, tuple]

#: The default ``block_elements`` of :func:`topk_false_negative_share` (16 MiB in float32).
BLOCK_ELEMENTS = 1 << 22


@dataclass
class NegativeSample:
    """Uniformly sampled negative pairs ``(i, k)``, ``k ≠ i``, of one embedding.

    Attributes:
        cos: ``[M]`` cosine similarities ``θ(u_i, v_k)`` in ``[-1, 1]``.
        same_label: ``[M]`` bool, ``True`` for a false negative (``y_i = y_k``).
        pairs: ``[2, M]`` node indices ``(i, k)`` of the pairs (``None`` if unknown).
    """

    cos: Tensor
    same_label: Tensor
    pairs: Optional[Tensor] = None

    @property
    def scaled(self) -> Tensor:
        """Similarities mapped to ``[0, 1]`` by ``s' = (θ + 1) / 2`` (the mixture's scale)."""
        return (self.cos + 1.0) / 2.0


@dataclass
class Diagnosis:
    """Everything :func:`diagnose` measured: the sample, the fitted mixture, the numbers.

    Attributes:
        sample: The sampled negative similarities with their true/false-negative mask.
        mixture: The :class:`BetaMixture` fitted (cold, to convergence) on ``sample``.
        summary: Plain floats (see :func:`diagnose`), ready for JSON.
    """

    sample: NegativeSample
    mixture: BetaMixture
    summary: dict = field(default_factory=dict)


def embed(
    source: Source,
    data=None,
    embeddings: str = "views",
    augment: bool = True,
    seed: int = 0,
) -> tuple[Tensor, Tensor]:
    """The unit-normalised ``[N, d]`` embeddings ``(u, v)`` whose cross similarities are
    analysed, without gradients.

    Args:
        source: A :class:`~pyg_progcl.GRACEModel`, an encoder, a ``[N, d]`` tensor (each
            compared with itself) or a pair ``(h1, h2)``.
        data: The graph (``x``, ``edge_index``); needed when ``source`` is a model.
        embeddings: ``'views'`` (projected views) or ``'encoder'`` (the encoder output).
        augment: With ``'views'``, augment as in training (from ``seed``, the global
            random state restored); else both views are the un-augmented graph.
    """
    check_choice("embeddings", embeddings, ("views", "encoder"))
    if isinstance(source, Tensor):
        h1 = h2 = source
    elif isinstance(source, (tuple, list)) and len(source) == 2:
        h1, h2 = source
    elif isinstance(source, torch.nn.Module):
        if data is None:
            raise ValueError("`data` is required when `source` is a model")
        h1, h2 = _model_embeddings(source, data, embeddings, augment, seed)
    else:
        raise ValueError(
            "`source` must be a model, a [N, d] tensor or a pair (h1, h2) "
            f"(got {type(source).__name__})"
        )
    check_matrix("h1" if h1 is not h2 else "source", h1)
    check_matrix("h2", h2)
    if h1.shape != h2.shape:
        raise ValueError(
            f"`h1` and `h2` must have one shape (got {list(h1.shape)}, {list(h2.shape)})"
        )
    return normalize_views(h1.detach(), h2.detach())


@torch.no_grad()
def _model_embeddings(model, data, embeddings: str, augment: bool, seed: int):
    """Embeds ``data`` in eval mode; only the augmenters run in training mode if asked."""
    modes = [(m, m.training) for m in model.modules()]
    device = next(iter(model.parameters()), torch.empty(0)).device
    devices = [device.index or 0] if device.type == "cuda" else []
    x, edge_index = data.x.to(device), data.edge_index.to(device)
    try:
        model.eval()
        if embeddings == "encoder" or not hasattr(model, "views"):
            z = model(x, edge_index)
            return z, z
        if not augment and callable(getattr(model, "project", None)):
            h = model.project(model(x, edge_index))  # GRACEModel.views always augments
            return h, h
        if augment:
            for name in ("augment1", "augment2"):
                aug = getattr(model, name, None)
                if isinstance(aug, torch.nn.Module):
                    aug.train()
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            return model.views(x, edge_index)
    finally:
        for module, mode in modes:
            module.training = mode


def negative_similarity_sample(
    source: Source,
    data=None,
    labels: Optional[Tensor] = None,
    num_samples: int = 50_000,
    seed: int = 0,
    **embed_kwargs,
) -> NegativeSample:
    """A :class:`NegativeSample` of ``num_samples`` uniform off-diagonal pairs (with
    replacement; ``source``, ``data`` and ``embed_kwargs`` as in :func:`embed`; ``labels``
    default to ``data.y``; ``seed`` draws the pairs and the augmentations)."""
    num_samples = check_int("num_samples", num_samples, 1)
    u, v = embed(source, data, seed=seed, **embed_kwargs)
    return _sample(u, v, _labels(data, labels, u), num_samples, seed)


def _labels(data, labels: Optional[Tensor], u: Tensor) -> Tensor:
    """``labels`` (default ``data.y``) checked as a probe's, with at least 2 classes."""
    labels = getattr(data, "y", None) if labels is None else labels
    if labels is None:
        raise ValueError("`labels` is required (pass labels=... or a `data` with `y`)")
    labels = check_labels(labels, u.size(0), "labels")
    if labels.unique().numel() < 2:
        raise ValueError("`labels` must contain at least 2 classes to split true/false negatives")
    return labels.to(u.device)


def _sample(u: Tensor, v: Tensor, labels: Tensor, num_samples: int, seed: int) -> NegativeSample:
    gen = torch.Generator().manual_seed(int(seed))
    i, k = sample_negative_pairs(u.size(0), num_samples, u.device, gen)
    cos = (u[i] * v[k]).sum(1).clamp_(-1.0, 1.0)
    pairs = torch.stack([i, k]).cpu()
    return NegativeSample(cos.float().cpu(), (labels[i] == labels[k]).cpu(), pairs)


def fit_mixture(sample: Union[NegativeSample, Tensor], max_iter: int = 500) -> BetaMixture:
    """Fits a fresh :class:`BetaMixture` (reference initialisation) to convergence.

    A degenerate fit warns, naming the kinds found; EM that stops at ``max_iter`` is only
    recorded in its ``problems_``. ``sample``: a :class:`NegativeSample` or cosines.
    """
    cos = sample.cos if isinstance(sample, NegativeSample) else sample
    mixture = BetaMixture(max_iter=max_iter)
    mixture.fit((cos.double().clamp(-1, 1) + 1) / 2)
    kinds = [k for k in mixture.degenerate_fits if k != "not-converged"]
    if kinds:
        found = ", ".join(DEGENERACY_KINDS[k] for k in kinds)
        warnings.warn(
            MixtureDegeneracyWarning(
                f"the Beta mixture fitted to the sampled similarities is degenerate ({found}): "
                "the posterior-based numbers (auc_posterior, flagged_*, "
                "fn_share_topk_hardness) describe that fit; its problems_ say what is wrong"
            ),
            stacklevel=stacklevel_outside_package(),
        )
    return mixture


def true_negative_posterior(mixture: BetaMixture, cos: Tensor) -> Tensor:
    """``p(true negative | s')`` of cosines ``cos`` under ``mixture``."""
    return mixture.true_negative_posterior((cos.double() + 1) / 2)


def separation_auc(scores: Tensor, is_true_negative: Tensor) -> float:
    """ROC-AUC of ``scores`` (higher = more likely a true negative); 0.5 is chance, ``nan``
    when only one kind is present."""
    from sklearn.metrics import roc_auc_score

    y = is_true_negative.cpu().numpy().astype(int)
    if y.min() == y.max():
        return math.nan
    return float(roc_auc_score(y, scores.detach().double().cpu().numpy()))


@torch.no_grad()
def topk_false_negative_share(
    u: Tensor,
    v: Tensor,
    labels: Tensor,
    top_k: int = 10,
    mixture: Optional[BetaMixture] = None,
    num_anchors: Optional[int] = 4096,
    num_candidates: Optional[int] = None,
    seed: int = 0,
    block_elements: int = BLOCK_ELEMENTS,
) -> dict:
    """Share of false negatives among each anchor's ``top_k`` most similar negatives,
    ``{'fn_share_topk'}``; with a ``mixture``, also among the ``top_k`` of largest ProGCL
    hardness ``b = p(true neg. | s') · s'``, ``'fn_share_topk_hardness'`` (docs/algorithms.md
    §5.2).

    Args:
        u, v, labels: Unit-normalised ``[N, d]`` embeddings and ``[N]`` labels.
        top_k: Negatives ranked per anchor (capped at the candidates available).
        mixture: Fitted mixture for the hardness ranking (skipped if ``None``).
        num_anchors: Anchors used (a uniform subset when ``N`` is larger; ``None``: all).
        num_candidates: Candidate negatives (a uniform subset; ``None``: all ``N``).
        seed: Seed of the subsets.
        block_elements: Elements of one row block (``B·C``).
    """
    top_k = check_int("top_k", top_k, 1)
    block_elements = check_int("block_elements", block_elements, 1)
    n = u.size(0)
    gen = torch.Generator().manual_seed(int(seed) + 1)
    anchors = _subset(n, num_anchors, "num_anchors", gen).to(u.device)
    cands = _subset(n, num_candidates, "num_candidates", gen).to(u.device)
    k = min(top_k, cands.numel() - 1)
    block = max(1, block_elements // cands.numel())
    hits = {"fn_share_topk": 0.0}
    if mixture is not None:
        hits["fn_share_topk_hardness"] = 0.0
    for start in range(0, anchors.numel(), block):
        rows = anchors[start : start + block]
        cos = (u[rows] @ v[cands].T).clamp_(-1.0, 1.0)
        self_pair = rows.unsqueeze(1) == cands.unsqueeze(0)
        same = labels[rows].unsqueeze(1) == labels[cands].unsqueeze(0)
        hits["fn_share_topk"] += _hits(cos, self_pair, same, k)
        if mixture is not None:
            hits["fn_share_topk_hardness"] += _hits(log_hardness(mixture, cos), self_pair, same, k)
    return {key: val / (anchors.numel() * k) for key, val in hits.items()}


def log_hardness(mixture: BetaMixture, cos: Tensor) -> Tensor:
    r"""ProGCL's hardness of cosines in log space (which keeps the ranking where :math:`b`
    underflows)."""
    return mixture.log_hardness((cos + 1.0) / 2.0)


def _hits(score: Tensor, self_pair: Tensor, same: Tensor, k: int) -> float:
    """Same-label candidates among each row's ``k`` largest scores, the anchor excluded."""
    idx = score.masked_fill(self_pair, -math.inf).topk(k, dim=1).indices
    return float(same.gather(1, idx).sum())


def _subset(n: int, size: Optional[int], name: str, gen: torch.Generator) -> Tensor:
    if size is not None:
        size = check_int(name, size, 2)
    if size is None or size >= n:
        return torch.arange(n)
    return torch.randperm(n, generator=gen)[:size].sort().values


def false_negative_rate(labels: Tensor) -> float:
    """Chance that a uniform negative pair is a false negative: ``Σ_c n_c(n_c−1) / N(N−1)``."""
    counts = torch.bincount(labels - labels.min()).double()
    n = float(labels.numel())
    return float((counts * (counts - 1)).sum() / (n * (n - 1)))


def mixture_summary(mixture: BetaMixture, prefix: str = "") -> dict:
    """The components' parameters as plain floats (``alpha_tn``, ``beta_fn``, ...) and
    ``degenerate``: 1.0 when :meth:`BetaMixture.degeneracy` finds the fit degenerate."""
    t = mixture.true_negative_index
    out = {}
    for tag, c in (("tn", t), ("fn", 1 - t)):
        out[f"{prefix}alpha_{tag}"] = float(mixture.alpha[c])
        out[f"{prefix}beta_{tag}"] = float(mixture.beta[c])
        out[f"{prefix}weight_{tag}"] = float(mixture.weight[c])
        out[f"{prefix}mean_{tag}"] = float(mixture.means[c])
    out[f"{prefix}degenerate"] = float(bool(mixture.degeneracy()))
    return out


def sample_summary(sample: NegativeSample, mixture: BetaMixture) -> dict:
    """Mean cosines, ``auc_similarity`` (pairs ranked by ``-θ``), ``auc_posterior`` (by
    ``p(TN | s')``) and ``flagged_*`` (the rule ``p(TN | s') < 0.5`` ⇒ false negative)."""
    tn = ~sample.same_label
    fn = sample.same_label
    return {
        "sample_fn_rate": float(fn.double().mean()),
        "mean_cos_tn": _mean(sample.cos[tn]),
        "mean_cos_fn": _mean(sample.cos[fn]),
        "auc_similarity": separation_auc(-sample.cos, tn),
        **_posterior_summary(true_negative_posterior(mixture, sample.cos), fn),
    }


def _posterior_summary(post: Tensor, fn: Tensor, prefix: str = "") -> dict:
    """``auc_posterior`` and the ``flagged_*`` numbers of the rule ``p(TN) < 0.5``."""
    flagged = post < 0.5
    return {
        f"{prefix}auc_posterior": separation_auc(post, ~fn),
        f"{prefix}flagged_fraction": float(flagged.double().mean()),
        f"{prefix}flagged_fn_precision": _mean(fn[flagged].double()),
        f"{prefix}flagged_fn_recall": _mean(flagged[fn].double()),
    }


def _mean(x: Tensor) -> float:
    return float(x.double().mean()) if x.numel() else math.nan


def diagnose(
    source: Source,
    data=None,
    labels: Optional[Tensor] = None,
    *,
    num_samples: int = 50_000,
    top_k: int = 10,
    num_anchors: Optional[int] = 4096,
    num_candidates: Optional[int] = None,
    embeddings: str = "views",
    augment: bool = True,
    loss: Optional[torch.nn.Module] = None,
    max_iter: int = 500,
    seed: int = 0,
) -> Diagnosis:
    """True/false-negative diagnosis of one embedding (ProGCL, Xia et al. 2022, Fig. 1/4):
    samples negative pairs, fits a Beta mixture to their similarities (cold) and measures
    how similarity and the mixture separate true negatives (different label) from false
    negatives (same label).

    Args:
        source: A model, a ``[N, d]`` embedding or a pair ``(h1, h2)`` (see :func:`embed`).
        data: The graph (needed for a model; its ``y`` are the default labels).
        labels: ``[N]`` integer labels, >= 2 classes.
        num_samples: Negative pairs sampled for the histogram, the mixture and the AUCs.
        top_k, num_anchors, num_candidates: See :func:`topk_false_negative_share`.
        embeddings, augment: See :func:`embed`.
        loss: A :class:`~pyg_progcl.losses.ProGCLLoss`; when it is fitted, the ``loss_*``
            entries describe its mixture and weights too.
        max_iter: EM budget of the cold fit.
        seed: Seed of every random choice (the global random state is left untouched).

    Returns:
        A :class:`Diagnosis`; its ``summary``: ``fn_rate`` (the chance level),
        ``fn_share_topk`` and ``fn_share_topk_hardness`` (:func:`topk_false_negative_share`),
        ``fn_share_topk_lift``, :func:`sample_summary`'s and :func:`mixture_summary`'s
        entries and sizes; with a fitted ``loss``, :func:`loss_summary`'s.
    """
    num_samples = check_int("num_samples", num_samples, 1)
    top_k = check_int("top_k", top_k, 1)
    u, v = embed(source, data, embeddings=embeddings, augment=augment, seed=seed)
    labels = _labels(data, labels, u)
    sample = _sample(u, v, labels, num_samples, seed)
    mixture = fit_mixture(sample, max_iter=max_iter)
    summary = {
        "num_nodes": float(u.size(0)),
        "num_classes": float(labels.unique().numel()),
        "num_samples": float(num_samples),
        "top_k": float(top_k),
        "fn_rate": false_negative_rate(labels),
    }
    summary.update(
        topk_false_negative_share(u, v, labels, top_k, mixture, num_anchors, num_candidates, seed)
    )
    summary["fn_share_topk_lift"] = summary["fn_share_topk"] / summary["fn_rate"]
    summary.update(sample_summary(sample, mixture))
    summary.update(mixture_summary(mixture))
    loss_mixture = getattr(loss, "mixture", None)
    if isinstance(loss_mixture, BetaMixture) and loss.fitted:
        schedule = getattr(loss, "schedule", None)  # (a frozen schedule's stored views)
        frozen_u, frozen_v = (getattr(schedule, key, None) for key in ("frozen_u", "frozen_v"))
        frozen_cos = None
        if frozen_u is not None:
            i, k = sample.pairs.to(frozen_u.device)
            frozen_cos = (frozen_u[i] * frozen_v[k]).sum(1).clamp_(-1.0, 1.0).float().cpu()
        summary.update(loss_summary(loss_mixture, float(loss.tau), sample, frozen_cos))
    return Diagnosis(sample, mixture, summary)


def loss_summary(
    mixture: BetaMixture, tau: float, sample: NegativeSample, weight_cos: Optional[Tensor] = None
) -> dict:
    r"""What a ProGCL loss's own mixture and weights do to the sampled negatives:
    ``loss_auc_posterior``, ``loss_flagged_*`` and the mixture's parameters as in
    :func:`sample_summary`; ``fn_mass``, the false negatives' share of GRACE's negative
    mass :math:`e^{\theta/\tau}`, and ``loss_fn_mass``, their share weighted by the hardness
    :math:`b = s' p(\mathrm{TN} \mid s')` (of ``weight_cos``, a frozen schedule's cosines)."""
    weight_cos = sample.cos if weight_cos is None else weight_cos
    fn = sample.same_label
    mass = torch.exp((sample.cos.double() - 1.0) / tau)
    weighted = mass * mixture.hardness_((weight_cos.double() + 1.0) / 2.0)
    return {
        **_posterior_summary(true_negative_posterior(mixture, weight_cos), fn, prefix="loss_"),
        "fn_mass": float(mass[fn].sum() / mass.sum()),
        "loss_fn_mass": float(weighted[fn].sum() / weighted.sum().clamp(min=1e-300)),
        **mixture_summary(mixture, prefix="loss_"),
    }


def summarize(source: Source, data=None, labels: Optional[Tensor] = None, **kwargs) -> dict:
    """The plain-float summary of :func:`diagnose` (for training logs and JSON)."""
    return diagnose(source, data, labels, **kwargs).summary
