"""Step time of two checkouts of the package, back to back: ``benchmarks/speed.py`` rows.

Every (dataset, method) row of ``speed.py`` runs as a worker process of each checkout's
own ``speed.py`` (its package first on ``PYTHONPATH``), in the order A B B A per round,
so that a drift of the machine hits both alike. Reported per row: the median step of
each checkout, their ratio (with its range over the rounds), and whether the final losses
agree. Use it to show that a refactor costs no time::

    git worktree add /tmp/before <commit>
    python benchmarks/compare_trees.py /tmp/before . --root DATA --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
METHODS = ["grace", "dcl", "hcl", "progcl-weight", "progcl-mix"]


def worker(tree: Path, args, dataset: str, method: str) -> dict:
    """One ``speed.py --worker`` row of the checkout ``tree``."""
    cmd = [sys.executable, str(tree / "benchmarks" / "speed.py"), "--worker"]
    cmd += ["--dataset", dataset, "--method", method, "--root", str(args.root)]
    cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare(args, dataset: str, method: str) -> dict:
    """``args.rounds`` rounds of A B B A for one row."""
    runs: dict[str, list[dict]] = {"a": [], "b": []}
    for _ in range(args.rounds):
        for side in "abba":
            runs[side].append(worker(args.a if side == "a" else args.b, args, dataset, method))
    a, b = ([r["step_s"] for r in runs[s]] for s in "ab")
    ratios = [y / x for x, y in zip(a, b)]
    losses = [r["loss"] for r in runs["a"] + runs["b"]]
    return {
        "dataset": dataset, "method": method, "a_ms": 1e3 * statistics.median(a),
        "b_ms": 1e3 * statistics.median(b), "ratio": statistics.median(b) / statistics.median(a),
        "ratio_range": (min(ratios), max(ratios)), "same_loss": max(losses) - min(losses) < 1e-4,
        "a_runs": a, "b_runs": b,
        "a_peak_mb": max(r["peak_mb"] for r in runs["a"]),
        "b_peak_mb": max(r["peak_mb"] for r in runs["b"]),
    }  # fmt: skip


def row(r: dict) -> str:
    low, high = r["ratio_range"]
    return (
        f"| {r['dataset']} | {r['method']} | {r['a_ms']:.0f} | {r['b_ms']:.0f} "
        f"| {r['ratio']:.3f} ({low:.2f}–{high:.2f}) | {r['a_peak_mb']:.0f} | {r['b_peak_mb']:.0f} "
        f"| {'yes' if r['same_loss'] else 'NO'} |"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", type=Path, help="checkout A (e.g. before a change)")
    p.add_argument("b", type=Path, help="checkout B (e.g. after it)")
    p.add_argument("--root", type=Path, required=True, help="dataset root")
    p.add_argument("--datasets", nargs="+", default=["Cora", "Amazon-Photo"])
    p.add_argument("--methods", nargs="+", default=METHODS)
    p.add_argument("--rounds", type=int, default=1, help="rounds of A B B A")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--output", type=Path, default=HERE / "results" / "compare_trees.md")
    args = p.parse_args(argv)
    args.a, args.b = args.a.resolve(), args.b.resolve()
    lines = [
        "| dataset | method | A step (ms) | B step (ms) | B / A (range) | A peak (MB) "
        "| B peak (MB) | same loss |",
        "|---|---|---|---|---|---|---|---|",
    ]
    results = []
    for dataset in args.datasets:
        for method in args.methods:
            results.append(compare(args, dataset, method))
            lines.append(row(results[-1]))
            print(lines[-1], flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n")
    args.output.with_suffix(".json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
