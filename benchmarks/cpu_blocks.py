"""The command line's row blocks on the CPU (a ``B×N`` matrix within the last-level
cache) beside the dense path, per loss and graph size, in one process.

On the CPU the command line gives a loss ``block_size=cpu_block_size(N)``
(:func:`pyg_progcl.cli.build.cpu_block_size`; docs/design.md, *The CPU's cache*). This
script measures that choice: one loss step (forward and backward on random views, ProGCL
fitted once beforehand) with those blocks and on the dense path (``memory_budget`` that
every size fits), alternating A B B A per round, and reports the medians and their ratio::

    python benchmarks/cpu_blocks.py --nodes 2708 7650 18333 --rounds 1 \\
        --out benchmarks/results/cpu_blocks.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from _stamp import machine

from pyg_progcl import InfoNCELoss, ProGCLLoss
from pyg_progcl.cli.build import cpu_block_size

LOSSES = {
    "InfoNCE": lambda **kw: InfoNCELoss(0.4, **kw),
    "ProGCL-weight": lambda **kw: ProGCLLoss(0.4, mode="weight", **kw),
    "ProGCL-mix": lambda **kw: ProGCLLoss(0.4, mode="mix", **kw),
}
DENSE = {"memory_budget": 1e12}


def measure(name: str, n: int, d: int, rounds: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    h1 = torch.randn(n, d, generator=gen).requires_grad_()
    h2 = (h1.detach() + 0.5 * torch.randn(n, d, generator=gen)).requires_grad_()
    blocks = {"block_size": cpu_block_size(n)}
    losses = {"default": LOSSES[name](**blocks), "dense": LOSSES[name](**DENSE)}
    for loss_fn in losses.values():
        if isinstance(loss_fn, ProGCLLoss):
            loss_fn.fit(h1.detach(), h2.detach(), generator=torch.Generator().manual_seed(1))
    times = {key: [] for key in losses}

    def step(key):
        tic = time.perf_counter()
        losses[key](h1, h2).backward()
        times[key].append(time.perf_counter() - tic)

    step("default"), step("dense")  # (warm-up)
    times = {key: [] for key in losses}
    for _ in range(rounds):
        for key in ("default", "dense", "dense", "default"):
            step(key)
    plan = losses["default"].plan(h1)
    med = {key: statistics.median(t) for key, t in times.items()}
    return {"loss": name, "nodes": n, "plan": f"{plan.path} {plan.block_size}",
            "default_s": med["default"], "dense_s": med["dense"],
            "runs": {k: [round(x, 3) for x in t] for k, t in times.items()}}  # fmt: skip


def markdown(rows: list[dict], args) -> str:
    where = machine()
    out = ["# The CPU's cache-sized row blocks beside the dense path", "",
           f"`benchmarks/cpu_blocks.py --nodes {' '.join(map(str, args.nodes))} --rounds "
           f"{args.rounds}`, d = {args.dim}; {where['cpu']}, {where['torch_threads']} threads. One loss step (forward and "
           "backward), A B B A per round, medians.", "",
           "| loss | N | plan | blocks (s) | dense (s) | dense / blocks |",
           "|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        out.append(
            f"| {r['loss']} | {r['nodes']:,} | {r['plan']} | {r['default_s']:.3f} "
            f"| {r['dense_s']:.3f} | {r['dense_s'] / r['default_s']:.2f}x |"
        )
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2708, 7650, 18333])
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--losses", nargs="+", default=list(LOSSES), choices=list(LOSSES))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = []
    for n in args.nodes:
        for name in args.losses:
            rows.append(measure(name, n, args.dim, args.rounds))
            print(rows[-1], flush=True)
    text = markdown(rows, args)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
