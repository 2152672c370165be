"""Link prediction and clustering of finished runs, paired against GRACE.

Reads result files of ``python -m pyg_progcl train --probe linear link cluster --output``,
merges the runs of one dataset and method over their seeds, and prints a markdown table:
per method the mean ± std over seeds of the linear probe's accuracy, link prediction's
test AUC, AP and Hits@50, and clustering's NMI, ARI and accuracy (all in %), and under it
each method's mean per-seed difference to GRACE on the seeds both ran (the same seed
fixes the same training initialisation, edge split and probe split for both), with the
number of seeds on which it was ahead.

Example::

    python benchmarks/link_cluster.py runs/Cora_*.json runs/CiteSeer_*.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from pyg_progcl.cli.evaluation import mean_std  # noqa: E402

#: The table's columns: (title, probe, key); probe ``linear`` is the linear probe.
COLUMNS = [
    ("accuracy", "linear", "accuracy"),
    ("link AUC", "link", "auc"),
    ("link AP", "link", "ap"),
    ("Hits@50", "link", "hits@50"),
    ("NMI", "cluster", "nmi"),
    ("ARI", "cluster", "ari"),
    ("cluster acc.", "cluster", "acc"),
]
BASELINE = "grace"


def per_seed(run: dict) -> dict[tuple[int, int], dict[str, float]]:
    """``{(seed, split seed): {column title: value}}`` of one result file."""
    link, cluster = run.get("link"), run.get("cluster")
    if not link or not cluster or "skipped" in cluster or run.get("accuracies") is None:
        raise ValueError(
            f"{run['dataset']} / {run['method']}: not a --probe linear link cluster run"
        )
    split_seed = link["split"]["seed"]
    out = {}
    for i, seed in enumerate(run["seeds"]):
        values = {}
        for title, probe, key in COLUMNS:
            source = run["accuracies"] if probe == "linear" else run[probe][key]
            values[title] = source[i]
        out[(seed, split_seed)] = values
    return out


def merge(runs: list[dict]) -> dict[tuple[str, str], dict]:
    """``{(dataset, method): {(seed, split seed): values}}``; a seed run twice is an error."""
    merged: dict[tuple[str, str], dict] = {}
    for run in runs:
        cell = merged.setdefault((run["dataset"], run["method"]), {})
        for key, values in per_seed(run).items():
            if key in cell:
                raise ValueError(f"{run['dataset']} / {run['method']}: seed {key[0]} twice")
            cell[key] = values
    return merged


def table(merged: dict[tuple[str, str], dict]) -> str:
    """The markdown table: mean ± std per method, then the paired differences to GRACE."""
    titles = [title for title, _, _ in COLUMNS]
    lines = [
        "| dataset | method | seeds | " + " | ".join(titles) + " |",
        "|---|---|---|" + "---|" * len(titles),
    ]
    for (dataset, method), cell in sorted(merged.items()):
        stats = [mean_std([v[t] * 100 for v in cell.values()]) for t in titles]
        row = " | ".join(f"{m:.2f} ± {s:.2f}" for m, s in stats)
        lines.append(f"| {dataset} | {method} | {len(cell)} | {row} |")
        base = merged.get((dataset, BASELINE))
        if method == BASELINE or base is None:
            continue
        both = sorted(set(cell) & set(base))
        if not both:
            continue
        diffs = []
        for t in titles:
            delta = [(cell[k][t] - base[k][t]) * 100 for k in both]
            ahead = sum(d > 0 for d in delta)
            diffs.append(f"{sum(delta) / len(delta):+.2f} ({ahead} / {len(both)})")
        lines.append(
            f"| {dataset} | Δ {method} − grace | {len(both)} | " + " | ".join(diffs) + " |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="trainer result files (JSON)")
    args = parser.parse_args(argv)
    runs = [json.loads(path.read_text()) for path in args.files]
    print(table(merge(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
