"""Plots of the diagnostics (matplotlib, optional: ``pip install pyg_progcl[plot]``),
built on :class:`matplotlib.figure.Figure` directly (no ``pyplot``: the user's backend is
never changed)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Optional, Union

import torch

from ..mixture import BetaMixture, beta_log_prob
from .core import Diagnosis, NegativeSample, fit_mixture

__all__ = ["plot_similarity_histogram", "plot_tracking"]

TN_COLOR, FN_COLOR = "tab:blue", "tab:red"


def _figure(**kwargs):
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - exercised only without matplotlib
        raise ImportError(
            "pyg_progcl.diagnostics plots need matplotlib: pip install pyg_progcl[plot]"
        ) from exc
    return Figure(**kwargs)


def _save(fig, path: Optional[Union[str, os.PathLike]], dpi: int) -> None:
    if path is not None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=dpi, format="png")


def _draw_bars(ax, s: torch.Tensor, fn: torch.Tensor, lo: float, hi: float, bins: int) -> float:
    """True- and false-negative histograms of ``s`` (densities of all negatives, ``fn``
    the false ones); returns the top of their sum."""
    width = (hi - lo) / bins
    scale = 1.0 / (s.numel() * width)
    left = torch.linspace(lo, hi, bins + 1, dtype=torch.float64)[:-1].numpy()
    for mask, color, label in (
        (~fn, TN_COLOR, "true negatives (other label)"),
        (fn, FN_COLOR, "false negatives (same label)"),
    ):
        hist = torch.histc(s[mask], bins, lo, hi) * scale
        ax.bar(left, hist.numpy(), width, align="edge", color=color, alpha=0.45, label=label)
    return float(torch.histc(s, bins, lo, hi).max()) * scale


def _draw_mixture(ax, mixture: BetaMixture, lo: float, hi: float) -> None:
    """The mixture's two weighted component densities and their sum (nothing where the
    range lies within ``eps`` of 1, where the densities are not evaluated)."""
    start, stop = max(lo, mixture.eps), min(hi, 1 - mixture.eps)
    if start >= stop:
        return
    grid = torch.linspace(start, stop, 400, dtype=torch.float64)
    log_p = beta_log_prob(grid, mixture.alpha.double(), mixture.beta.double())
    dens = torch.exp(log_p) * mixture.weight.double()  # (λ_c Beta(s; α_c, β_c), [G, 2])
    t, g = mixture.true_negative_index, grid.numpy()
    for c, color, tag in ((t, TN_COLOR, "TN"), (1 - t, FN_COLOR, "FN")):
        ax.plot(g, dens[:, c].numpy(), color=color, lw=2, label=f"mixture: {tag} part")
    ax.plot(g, dens.sum(1).numpy(), color="black", lw=1, ls="--", label="mixture total")


#: Similarities spread over less than this are said to coincide (no histogram to draw).
COINCIDE = 1e-6
#: Ranges narrower than this are zoomed into, and the panel says so.
NARROW = 0.01


def draw_similarity_histogram(ax, diagnosis, mixture=None, title=None, bins: int = 60):
    """Draws the histogram of :func:`plot_similarity_histogram` into a matplotlib ``ax``:
    the x axis spans the similarities (0.1 % to 99.9 % quantiles), however narrow; a
    panel whose similarities coincide says so in place of a histogram."""
    if isinstance(diagnosis, Diagnosis):
        sample, mixture, summary = diagnosis.sample, mixture or diagnosis.mixture, diagnosis.summary
    elif isinstance(diagnosis, NegativeSample):
        sample, mixture, summary = diagnosis, mixture or fit_mixture(diagnosis), {}
    else:
        raise ValueError(
            f"`diagnosis` must be a Diagnosis or a NegativeSample (got {type(diagnosis).__name__})"
        )
    s = sample.scaled.double().clamp(0, 1)
    ax.set_xlabel("s' = (cos + 1) / 2 of negative pairs")
    ax.set_ylabel("density (all negatives = 1)")
    if title:
        ax.set_title(title, fontsize=10)
    if s.numel() == 0 or float(s.max() - s.min()) < COINCIDE:
        _note_coinciding(ax, s)
        return ax
    lo, hi = torch.quantile(s, torch.tensor([0.001, 0.999], dtype=s.dtype)).tolist()
    if hi - lo < COINCIDE:  # (a few outliers around one value)
        lo, hi = float(s.min()), float(s.max())
    pad = 0.05 * (hi - lo) if hi - lo < NARROW else max(0.02, 0.05 * (hi - lo))
    lo, hi = max(0.0, lo - pad), min(1.0, hi + pad)
    top = _draw_bars(ax, s, sample.same_label, lo, hi, bins)
    _draw_mixture(ax, mixture, lo, hi)
    ax.set_ylim(0, 1.35 * top)
    ax.set_xlim(lo, hi)
    lines = []
    if "fn_share_topk" in summary:
        k = int(summary["top_k"])
        lines.append(
            f"FN among top-{k}: {summary['fn_share_topk']:.2f} (chance {summary['fn_rate']:.2f})"
        )
    if "auc_similarity" in summary:
        lines.append(
            f"AUC sim {summary['auc_similarity']:.3f}, posterior {summary['auc_posterior']:.3f}"
        )
    lines.append(f"mixture: FN part λ={float(mixture.weight[1 - mixture.true_negative_index]):.2f}")
    if hi - lo < NARROW:
        lines.append(f"zoomed: all s' within {lo:.5f} .. {hi:.5f}")
        ax.ticklabel_format(axis="x", useOffset=True)
    ax.text(0.02, 0.97, "\n".join(lines), transform=ax.transAxes, va="top", fontsize=7.5)
    return ax


def _note_coinciding(ax, s: torch.Tensor) -> None:
    """The note of a panel whose similarities coincide."""
    if s.numel() == 0:
        text = "no negative pairs sampled"
    else:
        value = float(s.mean())
        ax.set_xlim(max(0.0, value - 0.01), min(1.0, value + 0.01))
        text = (
            f"all {s.numel():,} negative pairs at s' = {value:.6f}\n(cosine {2 * value - 1:.6f}):"
            " nothing tells\ntrue from false negatives here"
        )
    ax.set_yticks([])
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=8.5,
            bbox={"boxstyle": "round", "facecolor": "whitesmoke", "edgecolor": "gray"})  # fmt: skip


def _figure_legend(fig, axes, ncols: int) -> None:
    """One legend below the figure's panels: the labels of ``axes``, each once."""
    seen: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    if seen:
        fig.legend(
            list(seen.values()), list(seen), loc="outside lower center", ncols=ncols, fontsize=7
        )


def plot_similarity_histogram(
    diagnosis: Union[Diagnosis, NegativeSample],
    path: Optional[Union[str, os.PathLike]] = None,
    *,
    mixture: Optional[BetaMixture] = None,
    title: Optional[str] = None,
    bins: int = 60,
    dpi: int = 90,
):
    """Histogram of the negative similarities ``s' = (θ + 1)/2`` of true negatives
    (different label) and false negatives (same label), with the fitted mixture's
    components ``λ_c Beta(s'; α_c, β_c)`` over them (ProGCL, Xia et al., ICML 2022): a
    :class:`matplotlib.figure.Figure`.

    Args:
        diagnosis: A :class:`~.core.Diagnosis` or a :class:`~.core.NegativeSample`.
        path: Write a PNG here (folders are created); ``None``: only return the figure.
        mixture: Mixture to overlay (default: the diagnosis' own, or a cold fit).
    """
    fig = _figure(figsize=(5.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    draw_similarity_histogram(ax, diagnosis, mixture, title, bins)
    _figure_legend(fig, [ax], ncols=3)
    _save(fig, path, dpi)
    return fig


def plot_comparison(
    diagnoses: Mapping[str, Diagnosis],
    path: Optional[Union[str, os.PathLike]] = None,
    *,
    ncols: int = 2,
    suptitle: Optional[str] = None,
    bins: int = 50,
    dpi: int = 80,
):
    """Several similarity histograms in a grid, one per ``{title: diagnosis}``."""
    if not diagnoses:
        raise ValueError("`diagnoses` must name at least one diagnosis")
    n = len(diagnoses)
    ncols = min(ncols, n)
    nrows = -(-n // ncols)
    fig = _figure(figsize=(4.6 * ncols, 3.3 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (title, diag) in zip(axes, diagnoses.items()):
        draw_similarity_histogram(ax, diag, title=title, bins=bins)
    for ax in axes[n:]:
        ax.set_visible(False)
    _figure_legend(fig, axes[:n], ncols=5)
    if suptitle:
        fig.suptitle(suptitle, fontsize=11)
    _save(fig, path, dpi)
    return fig


TRACKED = {
    "fn_share_topk": ("FN share, top-k by similarity", "tab:red", "-"),
    "fn_share_topk_hardness": ("FN share, top-k by ProGCL hardness b", "tab:purple", "-"),
    "fn_rate": ("FN share, chance (all negatives)", "black", ":"),
    "auc_similarity": ("AUC, raw similarity", "tab:orange", "-"),
    "auc_posterior": ("AUC, mixture posterior (cold fit)", "tab:green", "-"),
    "loss_auc_posterior": ("AUC, the loss's online mixture", "tab:brown", "--"),
}


def draw_tracking(left, right, history, legend: bool = True) -> None:
    """Draws :func:`plot_tracking`'s two panels into the matplotlib axes ``left``, ``right``."""
    runs = dict(history) if isinstance(history, Mapping) else {"": list(history)}
    if not runs or not all(runs.values()):
        raise ValueError("`history` must hold at least one record {'epoch': ..., ...}")
    for r, (run, records) in enumerate(runs.items()):
        epochs = [rec["epoch"] for rec in records]
        for key, (label, color, ls) in TRACKED.items():
            if not any(key in rec for rec in records) or (key == "fn_rate" and r > 0):
                continue  # chance is the same for every run of one graph
            ax = left if key.startswith("fn_") else right
            name = f"{label} [{run}]" if run and key != "fn_rate" else label
            style = ls if len(runs) == 1 or key == "fn_rate" else ("-", "--", "-.", ":")[r % 4]
            values = [rec.get(key, math.nan) for rec in records]
            ax.plot(epochs, values, color=color, ls=style, label=name, marker="o", ms=2)
    left.set_ylabel("share of false negatives")
    left.set_title("false negatives among the top-k most similar", fontsize=9)
    right.set_ylabel("ROC-AUC, true vs false neg.")
    right.set_title("telling true from false negatives", fontsize=9)
    right.axhline(0.5, color="gray", lw=0.8, ls=":")
    for ax in (left, right):
        ax.set_xlabel("epoch")
        if legend:
            ax.legend(fontsize=6.5)


def plot_tracking(
    history: Union[Sequence[dict], Mapping[str, Sequence[dict]]],
    path: Optional[Union[str, os.PathLike]] = None,
    *,
    title: str = "False negatives over training",
    dpi: int = 80,
):
    """The summaries over training, a :class:`matplotlib.figure.Figure`: false-negative
    shares (left) and AUCs (right).

    Args:
        history: ``[{'epoch': e, **summary}, ...]`` (e.g. a
            :class:`~.tracker.DiagnosticsTracker`'s ``history``), or ``{run: history}``
            to overlay several runs (one line style each).
        path: Write a PNG here; ``None``: only return the figure.
    """
    fig = _figure(figsize=(9.0, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    draw_tracking(*axes, history, legend=False)
    _figure_legend(fig, axes, ncols=3)
    fig.suptitle(title, fontsize=11)
    _save(fig, path, dpi)
    return fig
