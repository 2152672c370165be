"""The loss step alone (forward and backward, ProGCL's refit included) of every loss on
random views, for one checkout of the package or two side by side.

Each (checkout, method) runs in its own process (its package first on ``PYTHONPATH``), in
the order A B B A per round, so that a drift of the machine hits both alike. Reported: the
median step, its ratio to GRACE's in the same checkout, and the peak resident memory above
the process's before the first step::

    git worktree add /tmp/before <commit>
    python benchmarks/loss_step.py . --before /tmp/before --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
METHODS = ["grace", "dcl", "hcl", "progcl-weight", "progcl-mix"]


def rss_mb(field: str) -> float:
    """``VmRSS`` (resident now) or ``VmHWM`` (its peak) of this process, in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return float("nan")


def noisy_views(nodes: int, dim: int):
    """Two random noisy views ``[N, d]`` of the same nodes, requiring gradients."""
    import torch

    g = torch.Generator().manual_seed(0)
    z = torch.randn(nodes, dim, generator=g)
    h1 = (z + 0.8 * torch.randn(nodes, dim, generator=g)).requires_grad_()
    h2 = (z + 0.8 * torch.randn(nodes, dim, generator=g)).requires_grad_()
    return h1, h2


def emit(text: str, output) -> None:
    """Prints a result table and writes it to ``output`` (a path, or ``None``)."""
    print(text)
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)


def make_loss(method: str, tau: float):
    """The loss ``method`` (one of ``METHODS``) with the package's defaults."""
    from pyg_progcl import InfoNCELoss, ProGCLLoss
    from pyg_progcl.losses import DebiasedInfoNCELoss, HardInfoNCELoss

    make = {
        "grace": lambda: InfoNCELoss(tau),
        "dcl": lambda: DebiasedInfoNCELoss(tau),
        "hcl": lambda: HardInfoNCELoss(tau),
        "progcl-weight": lambda: ProGCLLoss(tau, mode="weight"),
        "progcl-mix": lambda: ProGCLLoss(tau, mode="mix"),
    }
    return make[method]()


def loss_step(loss_fn, h1, h2, fit) -> float:
    """One step of ``loss_fn`` on views that require gradients: ProGCL's refit (sampled
    with the generator ``fit``), forward, backward. Returns the loss."""
    if hasattr(loss_fn, "fit"):
        loss_fn.fit(h1.detach(), h2.detach(), generator=fit)
    loss = loss_fn(h1, h2)
    loss.backward()
    h1.grad = h2.grad = None
    return float(loss.detach())


def run_worker(args) -> dict:
    """Times ``args.steps`` loss steps after one warm-up step, in this process."""
    sys.modules.setdefault("outdated", None)
    import torch

    torch.set_num_threads(args.threads)
    h1, h2 = noisy_views(args.nodes, args.dim)
    loss_fn, fit = make_loss(args.method, args.tau), torch.Generator().manual_seed(1)

    base = rss_mb("VmRSS")
    steps = []
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        value = loss_step(loss_fn, h1, h2, fit)
        steps.append(time.perf_counter() - start)
    peak = rss_mb("VmHWM") - base
    return {"method": args.method, "step_s": statistics.median(steps[1:]), "peak_mb": peak,
            "loss": value}  # fmt: skip


def worker(tree: Path, args, method: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--method", method]
    for name in ("nodes", "dim", "tau", "threads", "steps"):
        cmd += [f"--{name}", str(getattr(args, name))]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(args) -> dict[str, dict[str, list[dict]]]:
    """``{method: {"a": runs, "b": runs}}``, A B B A per round (A alone without ``--before``)."""
    trees = {"a": args.before, "b": args.tree} if args.before else {"b": args.tree}
    order = "abba" if args.before else "bb"
    runs = {m: {side: [] for side in trees} for m in args.methods}
    for _ in range(args.rounds):
        for method in args.methods:
            for side in order:
                runs[method][side].append(worker(trees[side], args, method))
                print(method, side, runs[method][side][-1], flush=True)
    return runs


def table(args, runs) -> str:
    sides = ["a", "b"] if args.before else ["b"]
    step = {s: {m: statistics.median(r["step_s"] for r in runs[m][s]) for m in runs} for s in sides}
    peak = {s: {m: max(r["peak_mb"] for r in runs[m][s]) for m in runs} for s in sides}
    head = "| method |"
    for s in sides:
        label = "before" if s == "a" else "this checkout"
        head += f" {label}: step (ms) | vs GRACE | peak (MB) | vs GRACE |"
    lines = [head + (" after / before |" if args.before else ""), ""]
    lines[1] = "|" + "---|" * (lines[0].count("|") - 1)
    for m in runs:
        line = f"| {m} |"
        for s in sides:
            grace_step, grace_peak = step[s].get("grace"), peak[s].get("grace")
            line += f" {1e3 * step[s][m]:.0f} | " + (
                f"{step[s][m] / grace_step:.2f}x |" if grace_step else "– |"
            )
            line += f" {peak[s][m]:.0f} | " + (
                f"{peak[s][m] / grace_peak:.2f}x |" if grace_peak else "– |"
            )
        if args.before:
            line += f" {step['b'][m] / step['a'][m]:.2f}x |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def header(args) -> str:
    import torch
    from _stamp import machine

    m = machine()
    sides = "the previous checkout (before) and this one, A B B A" if args.before else "B B"
    return (
        "# The loss step alone (forward, backward, ProGCL's refit)\n\n"
        f"`python benchmarks/loss_step.py {' '.join(sys.argv[1:])}`\n\n"
        f"Machine: {m['cpu']}, {m['cores']} cores, torch {torch.__version__}, "
        f"{args.threads} torch threads. Random views, N = {args.nodes:,}, "
        f"d = {args.dim}, τ = {args.tau:g}; {args.steps} timed steps after one warm-up "
        f"(median), each configuration in its own process, {sides}, {args.rounds} "
        "round(s). Peak: resident memory above the process's before the first step.\n\n"
    )


def add_step_options(p: argparse.ArgumentParser, tau: float) -> None:
    """The options of a loss-step benchmark's batch, timing and output."""
    p.add_argument("--nodes", type=int, default=7650, help="N (default: Amazon-Photo's)")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--tau", type=float, default=tau)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=3, help="timed steps per process")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--output", type=Path, help="a Markdown file for the table")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tree", type=Path, nargs="?", default=HERE.parent, help="the checkout")
    p.add_argument("--before", type=Path, help="a second checkout, run side by side (A)")
    p.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    add_step_options(p, tau=0.5)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args)))
        return 0
    args.tree = args.tree.resolve()
    args.before = args.before.resolve() if args.before else None
    emit(header(args) + table(args, measure(args)), args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
