"""What each CPU-specific mechanism saves of an end-to-end training step.

A mechanism that exists only for speed has to save at least 10 % of a step to stay. For
each one, ``benchmarks/speed.py`` rows (GCN encoder, both views, the loss, backward, an
Adam step and ProGCL's refit) run with the mechanism and without it, every run in its own
process, in the order A B B A per round (A: with, B: without), so that a drift of the
machine hits both alike. The mechanisms and what "without" means:

- ``huge-pages``: torch's CPU allocator with transparent huge pages
  (``THP_MEM_ALLOC_ENABLE=1``) against without (``0``).
- ``block-pool``: the loss's :class:`BlockPool` keeps its ``[B, N]`` matrices between
  calls, against a pool of 0 bytes (every call allocates anew).
- ``tiled-transpose``: ProGCL-mix's in-place tiled transpose of its ``N×N`` hardness,
  against ``x.copy_(x.T.clone())``.
- ``numpy-selection``: ProGCL-mix's hardest-negative selection on the torch path (no
  compiled passes) by numpy's partition, against the ``torch.topk`` selection that GPUs run.

    python benchmarks/mechanisms.py --root DATA --rounds 2
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: mechanism -> (methods it is measured on, environment of every run of it)
MECHANISMS = {
    "huge-pages": (["grace", "progcl-mix"], {}),
    "block-pool": (["grace", "progcl-mix"], {}),
    "tiled-transpose": (["progcl-mix"], {}),
    "numpy-selection": (["progcl-mix"], {"PYG_PROGCL_KERNELS": "0"}),
}


def _module(*names: str):
    """The first of ``names`` that imports (the package's private modules by either name)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(f"none of {names} imports")


def switch_off(mechanism: str) -> None:
    """Replaces ``mechanism`` in this process by the plain alternative it is measured against
    (``huge-pages`` is switched by the environment, before torch starts)."""
    if mechanism == "block-pool":
        pool = _module("pyg_progcl.losses._engine.pool", "pyg_progcl.losses.engine.pool")
        pool.BlockPool.__init__.__defaults__ = (0,)
    elif mechanism == "tiled-transpose":
        mixing = _module("pyg_progcl.losses._mixing", "pyg_progcl.losses.mixing")
        mixing.transpose_ = lambda x: x.copy_(x.T.clone())
    elif mechanism == "numpy-selection":
        selection = _module("pyg_progcl.losses._selection", "pyg_progcl.losses.selection")
        selection._largest_numpy = _largest_topk
    elif mechanism != "huge-pages":
        raise ValueError(f"unknown mechanism {mechanism!r}")


def _largest_topk(x, k: int, nonnegative: bool = False):
    """The selection's ``torch.topk`` branch (ties at the ``k``-th value to the lowest
    columns), as GPUs run it."""
    import torch

    selection = _module("pyg_progcl.losses._selection", "pyg_progcl.losses.selection")
    kth = torch.topk(x, k, dim=1, sorted=False).values.amin(dim=1, keepdim=True)
    keep = x >= kth
    if int(keep.sum()) > keep.size(0) * k:
        selection._first_ties(x, kth, keep, k)
    return torch.nonzero(keep, as_tuple=True)[1].view(x.size(0), k)


def worker(args) -> None:
    """One speed.py row in this process, with ``args.mechanism`` on or off."""
    if args.variant == "without":
        switch_off(args.mechanism)
    sys.path.insert(0, str(HERE))
    import speed

    row_args = argparse.Namespace(
        dataset=args.dataset, method=args.method, root=args.root, device="cpu",
        steps=args.steps, warmup=args.warmup, hidden=128, block_size=None, pretrain=0,
    )  # fmt: skip
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    print(json.dumps(speed.run_one(row_args)))


def run(args, mechanism: str, dataset: str, method: str, variant: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--mechanism", mechanism, "--variant", variant]
    cmd += ["--dataset", dataset, "--method", method, "--root", str(args.root)]
    cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    cmd += ["--threads", str(args.threads)]
    env = {**os.environ, **MECHANISMS[mechanism][1]}
    env["THP_MEM_ALLOC_ENABLE"] = "1" if mechanism == "huge-pages" and variant == "with" else "0"
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare(args, mechanism: str, dataset: str, method: str) -> dict:
    """``args.rounds`` rounds of with, without, without, with."""
    steps: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(args.rounds):
        for variant in ("with", "without", "without", "with"):
            steps[variant].append(run(args, mechanism, dataset, method, variant)["step_s"])
    with_s, without_s = (statistics.median(steps[v]) for v in ("with", "without"))
    return {
        "mechanism": mechanism, "dataset": dataset, "method": method,
        "with_ms": 1e3 * with_s, "without_ms": 1e3 * without_s,
        "saving": 1 - with_s / without_s, "runs": steps,
    }  # fmt: skip


def table(rows: list[dict]) -> str:
    lines = [
        "| mechanism | dataset | method | with (ms) | without (ms) | saved of a step |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['mechanism']} | {r['dataset']} | {r['method']} | {r['with_ms']:.0f} "
            f"| {r['without_ms']:.0f} | {100 * r['saving']:+.1f} % |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=os.environ.get("PYG_PROGCL_DATA"))
    p.add_argument("--datasets", nargs="+", default=["Cora", "Amazon-Photo"])
    p.add_argument("--mechanisms", nargs="+", default=list(MECHANISMS), choices=MECHANISMS)
    p.add_argument("--methods", nargs="+", help="only these of each mechanism's methods")
    p.add_argument("--rounds", type=int, default=2, help="rounds of A B B A")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    p.add_argument("--output", type=Path, default=HERE / "results" / "mechanisms.md")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mechanism", help=argparse.SUPPRESS)
    p.add_argument("--variant", choices=("with", "without"), help=argparse.SUPPRESS)
    p.add_argument("--dataset", help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.root is None:
        p.error("give --root DATA or set PYG_PROGCL_DATA")
    if args.worker:
        return worker(args)
    rows = []
    for mechanism in args.mechanisms:
        for dataset in args.datasets:
            for method in MECHANISMS[mechanism][0]:
                if args.methods and method not in args.methods:
                    continue
                rows.append(compare(args, mechanism, dataset, method))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    argv = [a for a in sys.argv[1:] if a != str(args.root) and a != "--root"]
    command = " ".join(["python benchmarks/mechanisms.py --root DATA", *argv])
    args.output.write_text(
        "# What each CPU-specific mechanism saves of a training step\n\n"
        f"`{command.strip()}`\n\n{table(rows)}\n\n"
        f"Raw step times (s):\n\n```json\n{json.dumps(rows, indent=1)}\n```\n"
    )


if __name__ == "__main__":
    main()
