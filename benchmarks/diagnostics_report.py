"""False-negative diagnostics on real graphs: GCN vs MLP encoder, before and after ProGCL.

The ProGCL paper's evidence (Xia et al., ICML 2022, https://arxiv.org/abs/2110.02027):
under message passing the most similar negatives are mostly false negatives (same
class), and a Beta mixture of the negative similarities can tell them apart; an MLP
encoder (no message passing) does not show it. For each dataset this script trains the
``progcl-weight`` preset (docs/algorithms.md §7) with a GCN and with an MLP encoder of the same widths
(same seed, augmentations and loss), tracks :func:`pyg_progcl.diagnostics.summarize`
every few epochs, and writes

* ``benchmarks/results/diagnostics.json``: every summary (before, after, over epochs),
* ``benchmarks/results/diagnostics.md``: the key numbers and what was run,
* ``docs/figures/diagnostics_histograms.png``: true/false-negative similarity histograms
  with the fitted mixture, after training, GCN vs MLP, one row per dataset,
* ``docs/figures/diagnostics_tracking.png``: the summaries over the epochs.

Training is shortened to fit a few CPU minutes (the markdown states the epochs)::

    python benchmarks/diagnostics_report.py --root DATA
    python benchmarks/diagnostics_report.py --root DATA --epochs Cora=100 \\
        --datasets Cora --cache /tmp/diag.pt       # then --replot re-draws from the cache
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

import torch  # noqa: E402
from _stamp import versions  # noqa: E402

from pyg_progcl.cli import build_model, seed_everything  # noqa: E402
from pyg_progcl.cli.control import compare_encoders  # noqa: E402
from pyg_progcl.cli.datasets import canonical_name, load_dataset  # noqa: E402
from pyg_progcl.cli.presets import get_preset  # noqa: E402
from pyg_progcl.diagnostics import (  # noqa: E402
    Diagnosis,
    NegativeSample,
    summarize,
)
from pyg_progcl.mixture import BetaMixture  # noqa: E402

DEFAULT_EPOCHS = {"Cora": 200, "Amazon-Photo": 50}
DEFAULT_EVERY = {"Cora": 20, "Amazon-Photo": 5}
METHOD = "progcl-weight"
DIAGNOSE = dict(num_samples=50_000, top_k=10, num_anchors=4096, seed=0)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.environ.get("PYG_PROGCL_DATA"))
    parser.add_argument("--datasets", nargs="+", default=list(DEFAULT_EPOCHS))
    parser.add_argument("--epochs", nargs="*", default=[], help="NAME=N, e.g. Cora=200")
    parser.add_argument("--every", nargs="*", default=[], help="NAME=N: track every N epochs")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--json", default=str(HERE / "results" / "diagnostics.json"))
    parser.add_argument("--markdown", default=str(HERE / "results" / "diagnostics.md"))
    parser.add_argument("--figures", default=str(HERE.parent / "docs" / "figures"))
    parser.add_argument("--cache", help="save the histograms' samples here (for --replot)")
    parser.add_argument("--replot", action="store_true", help="only re-draw from --json/--cache")
    args = parser.parse_args(argv)
    if args.replot and not args.cache:
        parser.error("--replot re-draws from the samples saved with --cache FILE: give --cache")
    return args


def _per_dataset(pairs, defaults) -> dict:
    values = dict(defaults)
    for item in pairs:
        name, _, number = item.partition("=")
        values[canonical_name(name)] = int(number)
    return values


def run_dataset(name: str, root: str, epochs: int, every: int) -> tuple[dict, dict]:
    """Trains GCN and MLP with the preset; returns (JSON record, {panel: Diagnosis})."""
    data = load_dataset(name, root)
    config = get_preset(name, METHOD, epochs=epochs, eval_every=0)
    tic = time.perf_counter()
    reports = compare_encoders(data, config, every=every, **DIAGNOSE)
    record = {"config": config.to_dict(), "num_nodes": int(data.num_nodes), "encoders": {}}
    panels = {}
    for enc, rep in reports.items():
        seed_everything(DIAGNOSE["seed"])  # the initial model again, as training built it
        initial = build_model(config.replace(encoder=enc), data.num_features)
        record["encoders"][enc] = {
            "before": rep.before.summary,
            "after": rep.after.summary,
            "before_encoder_output": summarize(initial, data, embeddings="encoder", **DIAGNOSE),
            "after_encoder_output": summarize(rep.model, data, embeddings="encoder", **DIAGNOSE),
            "probe_accuracy": rep.accuracy,
            "history": rep.history,
        }
        panels[f"{name}, {enc.upper()} after {epochs} epochs"] = rep.after
    record["wall_time_s"] = time.perf_counter() - tic
    return record, panels


def _pack(diag: Diagnosis) -> dict:
    return {
        "cos": diag.sample.cos.half(),
        "same": diag.sample.same_label,
        "mixture": diag.mixture.state_dict(),
        "summary": diag.summary,
    }


def _unpack(item: dict) -> Diagnosis:
    mixture = BetaMixture()
    mixture.load_state_dict(item["mixture"])
    sample = NegativeSample(item["cos"].float(), item["same"])
    return Diagnosis(sample, mixture, item["summary"])


def draw_figures(results: dict, panels: dict, folder: Path) -> list[Path]:
    """The two PNGs: histograms after training, and the tracking curves."""
    from matplotlib.figure import Figure

    from pyg_progcl.diagnostics.plots import draw_similarity_histogram, draw_tracking

    folder.mkdir(parents=True, exist_ok=True)
    names = list(results["datasets"])
    fig = Figure(figsize=(9.0, 3.0 * len(names)), layout="constrained")
    axes = fig.subplots(len(names), 2, squeeze=False)
    for row, (title, diag) in zip(axes.ravel(), panels.items()):
        draw_similarity_histogram(row, diag, title=title, bins=50)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    labels = [lab.split(" (λ")[0] for lab in labels]
    fig.legend(handles, labels, loc="outside lower center", ncols=5, fontsize=7)
    hist = folder / "diagnostics_histograms.png"
    fig.savefig(hist, dpi=72)

    fig = Figure(figsize=(9.0, 2.9 * len(names)), layout="constrained")
    axes = fig.subplots(len(names), 2, squeeze=False)
    for (left, right), name in zip(axes, names):
        encs = results["datasets"][name]["encoders"]
        history = {enc.upper(): encs[enc]["history"] for enc in encs}
        draw_tracking(left, right, history, legend=False)
        left.set_title(f"{name}: false negatives among the 10 most similar", fontsize=9)
        right.set_title(f"{name}: telling true from false negatives", fontsize=9)
    handles, labels = [], []
    for ax in axes[0]:
        h, lab = ax.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=7)
    track = folder / "diagnostics_tracking.png"
    fig.savefig(track, dpi=72)
    return [hist, track]


ROWS = [
    ("fn_share_topk", "FN share, top-10 by similarity"),
    ("fn_rate", "FN share, chance"),
    ("fn_share_topk_lift", "lift over chance"),
    ("fn_share_topk_hardness", "FN share, top-10 by hardness b"),
    ("auc_similarity", "AUC, similarity"),
    ("auc_posterior", "AUC, mixture posterior"),
    ("mean_cos_tn", "mean cos, true neg."),
    ("mean_cos_fn", "mean cos, false neg."),
    ("weight_fn", "mixture weight of FN part"),
]


INTRO = [
    "# False-negative diagnostics (GCN vs MLP, before/after ProGCL-weight)",
    "",
    "Generated by `benchmarks/diagnostics_report.py`. Negatives are the inter-view",
    "pairs the loss sees (projected, augmented views); 'false negative' (FN) = same",
    f"label. {DIAGNOSE['num_samples']:,} sampled pairs per row for the histograms, the",
    "cold-fitted Beta mixture and the AUCs; top-10 ranking over all candidates for",
    f"min(N, {DIAGNOSE['num_anchors']}) anchors. AUC: ROC-AUC at telling true from false",
    "negatives (1 perfect, 0.5 chance). The mixture rows are the cold fit (reference",
    "initialisation, EM to convergence); the loss's own online mixture is listed too.",
    "Training is shortened (the run line says how); wall times are from a shared CPU.",
    "",
]
TABLE_HEAD = ["| | GCN before | GCN after | MLP before | MLP after |", "|---|---|---|---|---|"]


def _table(cells: list[dict], rows) -> list[str]:
    return TABLE_HEAD + [
        f"| {label} | " + " | ".join(f"{c[key]:.3f}" for c in cells) + " |" for key, label in rows
    ]


def dataset_section(name: str, rec: dict, threads: int) -> list[str]:
    """One dataset's run line, its table of the loss's negatives (with the online
    mixture's FN weight and the probe accuracy) and its table of the encoder output."""
    cfg, encs = rec["config"], rec["encoders"]
    both = ("gcn", "mlp")
    lines = [
        f"## {name} ({rec['num_nodes']} nodes)",
        "",
        f"Run: preset `{name}` / `{METHOD}` shortened to {cfg['epochs']} epochs "
        f"(warm-up {cfg['warmup_epochs']}, lr {cfg['lr']}, τ {cfg['tau']}, "
        f"{cfg['augmentation']} augmentation, hidden {cfg['hidden']}), seed 0, "
        f"{rec['wall_time_s']:.0f} s for both encoders on {threads} CPU thread(s).",
        "",
    ]
    lines += _table([encs[e][s] for e in both for s in ("before", "after")], ROWS)
    online = [encs[e]["after"].get("loss_weight_fn", math.nan) for e in both]
    lines.append(
        f"| ... of the loss's online mixture | – | {online[0]:.3f} | – | {online[1]:.3f} |"
    )
    acc = [encs[e]["probe_accuracy"] for e in both]
    lines.append(f"| linear-probe accuracy | – | {acc[0]:.3f} | – | {acc[1]:.3f} |")
    lines += [
        "",
        "The same for the encoder output `z = f(G)` compared with itself (what a linear",
        "probe sees; no projection head, no augmentation):",
        "",
    ]
    cells = [encs[e][f"{s}_encoder_output"] for e in both for s in ("before", "after")]
    return lines + _table(cells, ROWS[:6]) + [""]


def markdown(results: dict) -> str:
    lines = list(INTRO)
    for name, rec in results["datasets"].items():
        lines += dataset_section(name, rec, results["threads"])
    lines += [
        "Figures: `docs/figures/diagnostics_histograms.png` (after training),",
        "`docs/figures/diagnostics_tracking.png` (over epochs).",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    names = [canonical_name(n) for n in args.datasets]
    # Datasets without a default here: the preset's epochs, tracked 10 times.
    presets = {n: get_preset(n, METHOD).epochs for n in names}
    epochs = _per_dataset(args.epochs, {**presets, **DEFAULT_EPOCHS})
    every = {n: max(1, epochs[n] // 10) for n in names}
    every = _per_dataset(args.every, {**every, **DEFAULT_EVERY})
    json_path = Path(args.json)
    if args.replot:
        results = json.loads(json_path.read_text())
        panels = {k: _unpack(v) for k, v in torch.load(args.cache, weights_only=False).items()}
    else:
        results = {"method": METHOD, "diagnose": DIAGNOSE, "threads": args.threads}
        results.update({"versions": versions(), "datasets": {}})
        panels = {}
        for name in names:
            print(f"{name}: {epochs[name]} epochs, tracking every {every[name]}", flush=True)
            record, new = run_dataset(name, args.root, epochs[name], every[name])
            results["datasets"][name] = record
            panels.update(new)
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(results, indent=1) + "\n")
            print(f"  done in {record['wall_time_s']:.0f} s", flush=True)
        if args.cache:
            torch.save({k: _pack(v) for k, v in panels.items()}, args.cache)
    md = Path(args.markdown)
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(markdown(results))
    for path in [json_path, md, *draw_figures(results, panels, Path(args.figures))]:
        print(f"wrote {path} ({path.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
