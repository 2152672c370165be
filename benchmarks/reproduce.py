"""Side-by-side reproduction of the papers' linear-probe tables (docs/algorithms.md §8).

Trains every (dataset, method) cell with its preset (docs/algorithms.md §7), evaluates it
with the dataset's protocol (docs/algorithms.md §6), and writes a markdown table that puts
the measured accuracy next to the published one, with the epochs and seeds
actually run and the wall time of each cell. Full protocols take hours on a
few CPU cores: ``--epochs`` / ``--epoch-fraction`` and ``--seeds`` shorten
them, and the table says exactly what was run. On a GPU::

    python benchmarks/reproduce.py --device cuda --seeds 5 --root DATA

runs the published protocols. Cells are saved to the JSON file as they finish;
``--resume`` skips cells already there (same epochs, seeds and device).

Examples::

    # what fits a small CPU budget
    python benchmarks/reproduce.py --root DATA --datasets Cora CiteSeer \\
        --methods grace progcl-weight --seeds 1
    python benchmarks/reproduce.py --root DATA --datasets Amazon-Photo \\
        --methods grace progcl-weight --epochs 100 --probe-epochs 1000
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

import torch  # noqa: E402
from _stamp import machine as train_machine  # noqa: E402
from _stamp import versions  # noqa: E402

from pyg_progcl.cli import train  # noqa: E402
from pyg_progcl.cli.datasets import canonical_name, load_dataset  # noqa: E402
from pyg_progcl.cli.presets import METHODS, get_preset  # noqa: E402

DEFAULT_DATASETS = ["Cora", "CiteSeer", "Amazon-Photo", "Coauthor-CS"]

#: Published accuracies (%, mean, std) of docs/algorithms.md §8, by dataset and method.
#: ProGCL's number (as cited by later papers) does not say weight or mix; it is
#: shown for both.
PUBLISHED: dict[str, dict[str, tuple[float, float]]] = {
    "Cora": {"grace": (83.3, 0.4)},
    "CiteSeer": {"grace": (72.1, 0.5)},
    "Amazon-Photo": {"grace": (92.15, 0.24), "gca": (92.53, 0.16), "progcl": (93.64, 0.13)},
    "Amazon-Computers": {"grace": (87.46, 0.22), "gca": (88.94, 0.15), "progcl": (89.55, 0.16)},
    "Coauthor-CS": {"grace": (92.93, 0.01), "gca": (93.10, 0.01), "progcl": (93.67, 0.12)},
    "WikiCS": {"grace": (78.19, 0.01), "gca": (78.35, 0.05), "progcl": (78.45, 0.04)},
    "Coauthor-Physics": {"grace": (95.26, 0.02), "gca": (95.73, 0.03)},
    "ogbn-arxiv": {"grace": (71.51, 0.11)},
}
#: Reference accuracies for ProGCL at the published protocol and epochs, in %: the published
#: ProGCL number, rounded up (Amazon-Photo, Coauthor-CS), or GRACE's plus 0.2 (Cora, CiteSeer).
TARGETS = {"Cora": 83.5, "CiteSeer": 72.3, "Amazon-Photo": 93.7, "Coauthor-CS": 93.7}


def published(dataset: str, method: str) -> Optional[tuple[float, float]]:
    key = "progcl" if method.startswith("progcl") else method
    return PUBLISHED.get(dataset, {}).get(key)


def machine(device: str) -> dict[str, Any]:
    """A description of the machine the numbers come from."""
    return {**train_machine(device), "platform": platform.platform(), **versions()}


def cell_key(dataset: str, method: str, epochs: int, seeds: int, device: str) -> str:
    return f"{dataset}|{method}|{epochs}|{seeds}|{device}"


def cell_epochs(dataset: str, method: str, args: argparse.Namespace) -> int:
    """Training epochs of one cell: the preset's, shortened by the budget flags."""
    epochs = get_preset(dataset, method).epochs
    if args.epochs is not None:
        return min(args.epochs, epochs) if args.cap else args.epochs
    if args.epoch_fraction is not None:
        return max(1, round(epochs * args.epoch_fraction))
    return epochs


def run_cell(dataset, method, data, args) -> dict[str, Any]:
    """Trains one (dataset, method) cell; returns its summary."""
    preset = get_preset(dataset, method)
    overrides: dict[str, Any] = {"eval_every": args.eval_every}
    epochs = cell_epochs(dataset, method, args)
    if epochs != preset.epochs:
        overrides["epochs"] = epochs  # the warm-up keeps its fraction of training
    if args.probe_epochs is not None:
        overrides["probe_epochs"] = args.probe_epochs
    config = get_preset(dataset, method, **overrides)
    tic = time.perf_counter()
    result = train(config, data, seeds=args.seeds, device=args.device, progress=not args.quiet)
    wall = time.perf_counter() - tic
    return {
        "dataset": dataset,
        "method": method,
        "protocol": config.protocol,
        "split": config.split,
        "epochs": config.epochs,
        "preset_epochs": preset.epochs,
        "warmup_epochs": config.warmup_epochs,
        "probe_epochs": config.probe_epochs,
        "seeds": len(result["seeds"]),
        "accuracies": result["accuracies"],
        "accuracy_mean": result["accuracy_mean"],
        "accuracy_std": result["accuracy_std"],
        "epoch_time_s": result["epoch_time_s"],
        "wall_time_s": wall,
        "config": result["config"],
    }


def _pct(mean: float, std: float, digits: int = 2) -> str:
    return f"{100 * mean:.{digits}f} ± {100 * std:.{digits}f}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"


TABLE_HEADER = [
    "| Dataset | Method | Protocol | Published | Measured | Epochs run (preset) "
    "| Seeds | Probe epochs | Time / epoch | Wall time |",
    "|---|---|---|---|---|---|---|---|---|---|",
]


def table_row(c: dict[str, Any]) -> str:
    """One cell of the methods × datasets table, with its published number (and target)."""
    progcl = c["method"].startswith("progcl")
    pub = published(c["dataset"], c["method"])
    pub_text = f"{pub[0]:.2f} ± {pub[1]:.2f}" if pub else "–"
    target = TARGETS.get(c["dataset"]) if progcl else None
    if target is not None:
        pub_text += f" (target ≥ {target})"
    epochs = f"{c['epochs']} ({c['preset_epochs']})"
    if progcl:
        epochs += f", warm-up {c['warmup_epochs']}"
    probe = str(c["probe_epochs"]) if c["protocol"] == "gca" else "– (CV)"
    return (
        f"| {c['dataset']} | {c['method']} | {c['protocol']} ({c['split']}) | {pub_text} "
        f"| {_pct(c['accuracy_mean'], c['accuracy_std'])} | {epochs} | {c['seeds']} "
        f"| {probe} | {1000 * c['epoch_time_s']:.0f} ms | {_duration(c['wall_time_s'])} |"
    )


def _budget(c: dict[str, Any]) -> tuple:
    """What a ProGCL cell and its GRACE cell must share: dataset, epochs and evaluation."""
    return c["dataset"], c["epochs"], c["protocol"], c["split"], c["probe_epochs"]


def versus_grace(cells: list[dict[str, Any]]) -> list[str]:
    """One line per ProGCL cell: its mean against GRACE's at the same budget, with a verdict."""
    grace_at = {_budget(c): c for c in cells if c["method"] == "grace"}
    lines = []
    for other in cells:
        grace = grace_at.get(_budget(other))
        if not other["method"].startswith("progcl") or grace is None:
            continue
        delta = 100 * (other["accuracy_mean"] - grace["accuracy_mean"])
        verdict = "better" if delta > 0 else "not better"
        if min(grace["seeds"], other["seeds"]) < 3 and abs(delta) < 1.0:
            verdict += ", within seed-to-seed noise"
        if other["epochs"] < other["preset_epochs"]:
            verdict += ", shortened run"
        lines.append(
            f"- {other['dataset']}: {other['method']} {delta:+.2f} vs grace ({verdict}; "
            f"{other['epochs']} epochs, {other['seeds']} seed(s))"
        )
    return lines


def markdown(cells: list[dict[str, Any]], info: dict[str, Any]) -> str:
    """The results as a markdown document (table, ProGCL-vs-GRACE, machine)."""
    lines = TABLE_HEADER + [table_row(c) for c in cells]
    lines += ["", "ProGCL against GRACE under the same budget (accuracy points):", ""]
    lines += versus_grace(cells)
    gpu = f", GPU {info['gpu']}" if "gpu" in info else ""
    total = sum(c["wall_time_s"] for c in cells)
    lines += [
        "",
        "Cells with fewer epochs than the preset are smoke tests of the pipeline, not "
        "reproductions; published numbers are means over 5-20 seeds.",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores ({info['torch_threads']} torch threads)"
        f"{gpu}; device {info['device']}; torch {info['torch']}, torch_geometric "
        f"{info['torch_geometric']}, pyg_progcl {info['pyg_progcl']}. "
        f"Total wall time {_duration(total)}.",
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=DEFAULT_DATASETS)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--epochs", type=int, help="epochs of every cell (default: the preset's)")
    budget.add_argument("--epoch-fraction", type=float, help="fraction of the preset's epochs")
    parser.add_argument(
        "--cap", action="store_true", help="--epochs is a maximum (presets with fewer keep theirs)"
    )
    parser.add_argument("--seeds", type=int, default=1, help="seeds per cell (papers: 5-20)")
    parser.add_argument("--probe-epochs", type=int, help="GCA-protocol probe epochs (3000)")
    parser.add_argument("--eval-every", type=int, default=0, help="intermediate evaluations")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads", type=int, help="torch CPU threads (1 avoids OpenMP stalls on a busy CPU)"
    )
    parser.add_argument("--root", help="data root (a folder with the datasets)")
    parser.add_argument("--output", default=str(HERE / "results" / "reproduce.md"))
    parser.add_argument("--json", help="cells as JSON (default: --output with .json)")
    parser.add_argument("--resume", action="store_true", help="skip cells already in --json")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    for name in ("epochs", "seeds", "probe_epochs"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1 (got {value})")
    if args.cap and args.epochs is None:
        parser.error("--cap makes --epochs a maximum: give --epochs N")
    if args.epoch_fraction is not None and not 0 < args.epoch_fraction <= 1:
        parser.error(f"--epoch-fraction must be in (0, 1] (got {args.epoch_fraction})")
    try:
        args.datasets = [canonical_name(d) for d in args.datasets]
    except ValueError as exc:
        parser.error(str(exc))
    args.json = args.json or str(Path(args.output).with_suffix(".json"))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    info = machine(args.device)
    json_path, md_path = Path(args.json), Path(args.output)
    done: dict[str, dict[str, Any]] = {}
    if args.resume and json_path.exists():
        done = {
            cell_key(c["dataset"], c["method"], c["epochs"], c["seeds"], c["device"]): c
            for c in json.loads(json_path.read_text())["cells"]
        }
    cells = []
    for dataset in args.datasets:
        data = None
        for method in args.methods:
            epochs = cell_epochs(dataset, method, args)
            key = cell_key(dataset, method, epochs, args.seeds, args.device)
            if key in done:
                cells.append(done[key])
                print(f"{dataset:>16} {method:<14} already in {json_path}, skipped", flush=True)
                continue
            if data is None:
                data = load_dataset(dataset, args.root)
            cell = run_cell(dataset, method, data, args)
            cell["device"] = args.device
            cells.append(cell)
            print(
                f"{dataset:>16} {method:<14} {_pct(cell['accuracy_mean'], cell['accuracy_std'])} "
                f"({cell['epochs']} epochs, {cell['seeds']} seed(s), "
                f"{_duration(cell['wall_time_s'])})",
                flush=True,
            )
            done[key] = cell
            json_path.parent.mkdir(parents=True, exist_ok=True)
            payload = {"machine": info, "cells": list(done.values())}
            json_path.write_text(json.dumps(payload, indent=2) + "\n")
    md_path.parent.mkdir(parents=True, exist_ok=True)
    # With --resume the table holds every cell of the JSON file (earlier runs too).
    text = markdown(list(done.values()) if args.resume else cells, info)
    md_path.write_text(text)
    print(text)
    print(f"wrote {md_path} and {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
