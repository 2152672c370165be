"""Equal-budget tuning: every method searches the same grid on tuning seeds, and its best
cell is reported on held-out seeds that no choice saw.

The ProGCL author states that the paper's hyperparameters were grid-searched per dataset
(https://github.com/junxia97/ProGCL/issues/4); the presets run the public configurations untuned.
This script gives GRACE and ProGCL the same search, so that a tuned ProGCL is compared
with an equally tuned GRACE rather than with GRACE's published configuration:

1. every ``--grid`` cell (preset overrides, e.g. ``tau=0.3,0.5 lr=5e-4,1e-3``) of every
   method runs on ``--tune-seeds``;
2. each method's cell of the highest mean tuning accuracy (the preset breaks ties) and its
   untuned preset run on ``--test-seeds``;
3. the held-out runs are paired per seed (seed ``s`` fixes the evaluation split) against
   GRACE's preset and against GRACE's tuned cell with ``benchmarks/compare.py``.

Each (method, cell, seed) is one ``python -m pyg_progcl train`` process with one torch
thread (``--device cuda``: on the GPU), ``--jobs`` at a time; its JSON is kept, so a rerun
skips what is done. Example::

    python benchmarks/tune.py --dataset Cora --root DATA \\
        --grid tau=0.3,0.4,0.5,0.6 lr=5e-4,1e-3 --tune-seeds 20 21 22 23 24 \\
        --test-seeds 30 31 32 33 34 35 36 37 38 39 --jobs 2 \\
        --output-dir runs/tune_cora
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from _stamp import machine  # noqa: E402
from compare import load_runs, merge, table  # noqa: E402

from pyg_progcl.cli.evaluation import mean_std  # noqa: E402
from pyg_progcl.cli.presets import get_preset  # noqa: E402


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """``['tau=0.3,0.5', 'lr=1e-3']`` -> ``{'tau': ['0.3', '0.5'], 'lr': ['1e-3']}``."""
    grid = {}
    for item in items:
        name, _, values = item.partition("=")
        if not values:
            raise ValueError(f"--grid: expected NAME=V1,V2,... (got {item!r})")
        grid[name.strip().replace("-", "_")] = [v.strip() for v in values.split(",")]
    return grid


def cells(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    """Every combination of the grid's values."""
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def cell_name(cell: dict[str, str]) -> str:
    return "preset" if not cell else "_".join(f"{k}{v}" for k, v in cell.items())


def is_preset(dataset: str, method: str, cell: dict[str, str]) -> bool:
    """Whether ``cell`` sets every field to the preset's own value."""
    preset = get_preset(dataset, method)
    return all(float(getattr(preset, k)) == float(v) for k, v in cell.items())


def launch(cmd: list[str]) -> None:
    """Runs one trainer process from the repository root."""
    subprocess.run(cmd, check=True, cwd=HERE.parent)


def run_one(args, method: str, cell: dict[str, str], seed: int, variant: str | None) -> Path:
    """One trainer process; returns its JSON (kept: an existing file is not rerun)."""
    path = args.output_dir / method / cell_name(cell) / f"seed{seed}.json"
    if path.exists():
        return path
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in cell.items()]
    cmd = [sys.executable, "-m", "pyg_progcl", "train", "--dataset", args.dataset,
           "--method", method, "--seed", str(seed), "--seeds", "1", "--threads", "1",
           "--device", args.device, "--quiet", "--output", str(path), *flags]  # fmt: skip
    if args.root:
        cmd += ["--root", args.root]
    launch(cmd)
    if variant:  # a setting of its own for compare.py
        result = json.loads(path.read_text())
        path.write_text(json.dumps({"variant": variant, **result}, indent=2) + "\n")
    return path


def run_all(args, jobs: list[tuple]) -> list[Path]:
    with ThreadPoolExecutor(args.jobs) as pool:
        return list(pool.map(lambda job: run_one(args, *job), jobs))


def accuracy(paths: list[Path]) -> tuple[float, float]:
    return mean_std(json.loads(p.read_text())["accuracy_mean"] for p in paths)


def search(args, grid_cells: list[dict[str, str]], out: list[str]) -> dict[str, dict[str, str]]:
    """Stage 1: every cell on the tuning seeds; adds the grid's table to ``out`` and
    returns each method's best cell."""
    seeds = args.tune_seeds
    jobs = [(m, c, s, None) for c in grid_cells for m in args.methods for s in seeds]
    paths = iter(run_all(args, jobs))
    scores = {c_name: {} for c_name in map(cell_name, grid_cells)}
    for cell in grid_cells:
        for method in args.methods:
            scores[cell_name(cell)][method] = accuracy([next(paths) for _ in seeds])
    best = {
        m: min(
            grid_cells,
            key=lambda c: (-scores[cell_name(c)][m][0], not is_preset(args.dataset, m, c)),
        )
        for m in args.methods
    }
    out.append(f"Tuning seeds {seeds}: mean ± std accuracy (%), * = the method's best cell\n")
    out.append("| cell | " + " | ".join(args.methods) + " |")
    out.append("|---" * (len(args.methods) + 1) + "|")
    for cell in grid_cells:
        name = cell_name(cell)
        row = [
            f"{100 * scores[name][m][0]:.2f} ± {100 * scores[name][m][1]:.2f}"
            + (" *" if best[m] == cell else "")
            for m in args.methods
        ]
        out.append(f"| {name} | " + " | ".join(row) + " |")
    return best


def held_out(args, best: dict[str, dict[str, str]], out: list[str]) -> None:
    """Stage 2: each method's best cell and its preset on the held-out seeds; adds the
    paired tables to ``out``."""
    tuned = f"tuned on seeds {args.tune_seeds[0]}–{args.tune_seeds[-1]}"
    jobs, labels = [], {}
    for method, cell in best.items():
        jobs += [(method, {}, s, None) for s in args.test_seeds]
        if not is_preset(args.dataset, method, cell):
            variant = f"{tuned}: " + ", ".join(f"{k} {v}" for k, v in cell.items())
            jobs += [(method, cell, s, variant) for s in args.test_seeds]
            labels[method] = f"{method} ({variant})"
    merged = merge([r for p in run_all(args, jobs) for r in load_runs(p)])
    out += [
        f"\nHeld-out seeds {args.test_seeds}, against GRACE's preset:\n",
        table(merged, "grace"),
    ]
    if "grace" in labels:
        out += [f"\nThe same, against GRACE {tuned}:\n", table(merged, labels["grace"])]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="Cora")
    parser.add_argument("--root", default=None, help="data root (see pyg_progcl.cli.datasets)")
    parser.add_argument("--methods", nargs="+", default=["grace", "progcl-weight"])
    parser.add_argument("--grid", nargs="+", required=True, help="NAME=V1,V2,... (preset fields)")
    parser.add_argument("--tune-seeds", type=int, nargs="+", required=True)
    parser.add_argument("--test-seeds", type=int, nargs="+", required=True)
    parser.add_argument("--jobs", type=int, default=2, help="trainer processes at a time")
    parser.add_argument("--device", default="cpu", help="each trainer's --device (cpu, cuda)")
    parser.add_argument("--output-dir", type=Path, default=HERE / "results" / "tune")
    args = parser.parse_args(argv)
    args.output_dir = args.output_dir.resolve()
    args.root = str(Path(args.root).resolve()) if args.root else None
    if set(args.tune_seeds) & set(args.test_seeds):
        parser.error("--tune-seeds and --test-seeds must be disjoint")
    if "grace" not in args.methods:
        parser.error("--methods must include grace (the baseline)")
    try:
        grid_cells = cells(parse_grid(args.grid))
        for method in args.methods:
            is_preset(args.dataset, method, grid_cells[0])  # unknown fields fail here
    except (ValueError, AttributeError, KeyError) as exc:
        parser.error(str(exc))
    command = " ".join(sys.argv[1:] if argv is None else argv)
    info = machine(args.device)
    where = f"on {info['gpu']}" if "gpu" in info else f"on the {args.device.upper()}"
    out = [
        f"# Equal-budget tuning on {args.dataset}\n",
        f"`python benchmarks/tune.py {command}`\n",
        f"Machine: {info['cpu']}, {info['cores']} cores; {where}, one torch thread per run, "
        f"{args.jobs} runs at a time.\n",
    ]
    held_out(args, search(args, grid_cells, out), out)
    report = "\n".join(out) + "\n"
    print(report)
    (args.output_dir / "tune.md").write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
