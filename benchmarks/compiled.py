"""A loss step compiled with ``torch.compile`` beside the same step in eager mode.

The losses trace without a graph break on their dense path, so ``torch.compile(loss_fn)``
may fuse their elementwise passes. This script times one loss step (forward and backward
on random views, ProGCL fitted once beforehand) eager and compiled, alternating
(A B B A per round) in one process, after the compiled step's first calls (which compile:
their time is reported apart), and checks that both give the same loss::

    python benchmarks/compiled.py --nodes 2708 7650 --rounds 3 --out benchmarks/results/compiled.md
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from pyg_progcl import InfoNCELoss, ProGCLLoss

LOSSES = {
    "InfoNCE": lambda: InfoNCELoss(0.4),
    "ProGCL-weight": lambda: ProGCLLoss(0.4, mode="weight"),
    "ProGCL-mix": lambda: ProGCLLoss(0.4, mode="mix"),
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(step, device) -> float:
    sync(device)
    tic = time.perf_counter()
    step()
    sync(device)
    return time.perf_counter() - tic


def measure(name: str, n: int, d: int, rounds: int, device: torch.device) -> dict:
    gen = torch.Generator().manual_seed(0)
    h1 = torch.randn(n, d, generator=gen).to(device).requires_grad_()
    h2 = (h1.detach() + 0.5 * torch.randn(n, d, generator=gen).to(device)).requires_grad_()
    loss_fn = LOSSES[name]()
    if isinstance(loss_fn, ProGCLLoss):
        loss_fn.fit(h1.detach(), h2.detach())
    torch._dynamo.reset()
    compiled = torch.compile(loss_fn)
    values = {}

    def step(fn, key):
        def run():
            torch.manual_seed(0)  # (ProGCL-mix's pairing)
            loss = fn(h1, h2)
            loss.backward()
            values[key] = float(loss)

        return run

    eager, fused = step(loss_fn, "eager"), step(compiled, "compiled")
    first = timed(fused, device)  # (compiles)
    first += timed(fused, device)  # (compiles the step of a grad-accumulating call, if any)
    eager()
    times = {"eager": [], "compiled": []}
    for _ in range(rounds):
        for key, fn in (
            ("eager", eager),
            ("compiled", fused),
            ("compiled", fused),
            ("eager", eager),
        ):
            times[key].append(timed(fn, device))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "loss": name, "N": n, "eager_ms": 1e3 * med["eager"], "compiled_ms": 1e3 * med["compiled"],
        "speedup": med["eager"] / med["compiled"], "compile_s": first,
        "difference": abs(values["eager"] - values["compiled"]) / abs(values["eager"]),
    }  # fmt: skip


def markdown(rows: list[dict], args, device: torch.device) -> str:
    threads = torch.get_num_threads()
    lines = [
        "# A loss step, eager and compiled",
        "",
        f"`python benchmarks/compiled.py --nodes {' '.join(map(str, args.nodes))} --rounds "
        f"{args.rounds}`: torch {torch.__version__}, {device.type}, {threads} threads, "
        f"{platform.machine()}. One step: forward and backward on random views (`d = "
        f"{args.dim}`), the dense path; medians of {2 * args.rounds} steps each, alternating "
        "A B B A; `compile` is the compiled step's first two calls (tracing and code "
        "generation); `difference` the relative difference of the two losses.",
        "",
        "| loss | N | eager ms | compiled ms | eager / compiled | compile s | difference |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['loss']} | {r['N']} | {r['eager_ms']:.0f} | {r['compiled_ms']:.0f} | "
            f"{r['speedup']:.2f}x | {r['compile_s']:.0f} | {r['difference']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2708, 7650])
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--losses", nargs="+", default=list(LOSSES), choices=list(LOSSES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="markdown table to write")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows = []
    for n in args.nodes:
        for name in args.losses:
            rows.append(measure(name, n, args.dim, args.rounds, device))
            print(rows[-1], flush=True)
    table = markdown(rows, args, device)
    if args.out:
        args.out.write_text(table)
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
