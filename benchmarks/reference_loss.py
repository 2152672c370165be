"""The loss step of the authors' ProGCL code beside this package's, on the same views.

The authors' code (https://github.com/junxia97/ProGCL, a clone given with
``--reference``) is imported from that folder, not copied: its ``GRACE.semi_loss`` (GRACE)
and ``GRACE.semi_loss_bmm`` (ProGCL, after its one fit) on two random noisy projected
views of ``N`` nodes, both directions as its ``GRACE.loss`` runs them, against
:class:`~pyg_progcl.InfoNCELoss` and ``ProGCLLoss.reference_code(mode=...)`` (the same
schedule: one fit, that fit's weights kept). A step is forward and backward; each
(code, method) runs in its own process, in the order A B B A per round. The fits happen
before the timed steps; the peak is the resident memory of the timed steps above the
process's before them (``VmHWM`` reset through ``/proc/self/clear_refs``)::

    git clone https://github.com/junxia97/ProGCL /tmp/ProGCL
    python benchmarks/reference_loss.py --reference /tmp/ProGCL --rounds 2

The authors' code needs SciPy (its mixture's density) besides torch and PyG.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from loss_step import add_step_options, emit, noisy_views, rss_mb

HERE = Path(__file__).resolve().parent
METHODS = ["grace", "progcl-weight", "progcl-mix"]


def reference_step(args, h1, h2):
    """The authors' loss of both directions, as their ``GRACE.loss`` combines them."""
    import torch

    sys.path.insert(0, str(args.reference))
    from pGRACE.model import GRACE, BetaMixture1D

    model = GRACE(torch.nn.Identity(), args.dim, args.dim, tau=args.tau)
    if args.method == "grace":
        return lambda: 0.5 * (model.semi_loss(h1, h2, 0) + model.semi_loss(h2, h1, 0)).mean()
    opts = SimpleNamespace(epoch_start=0, mode=args.method.split("-")[1], sel_num=args.num_mix)
    f64 = {"dtype": torch.float64}  # (the initialisation of their train.py, Photo's weight)
    bmm = BetaMixture1D(
        10, torch.tensor([1.0, 2.0], **f64), torch.tensor([2.0, 1.0], **f64),
        torch.tensor([0.85, 0.15], **f64),
    )  # fmt: skip

    def step(epoch=1):  # epoch 0 (= epoch_start) fits and stores the weights
        l1 = model.semi_loss_bmm(h1, h2, epoch, opts, bmm, fit=True)
        l2 = model.semi_loss_bmm(h2, h1, epoch, opts, bmm)
        return 0.5 * (l1 + l2).mean()

    with torch.no_grad():
        step(0)
    return step


def package_step(args, h1, h2):
    """This package's loss, fitted once before the timed steps for ProGCL."""
    from pyg_progcl import InfoNCELoss, ProGCLLoss

    if args.method == "grace":
        loss_fn = InfoNCELoss(args.tau)
    else:
        mode = args.method.split("-")[1]
        loss_fn = ProGCLLoss.reference_code(args.tau, mode, num_mix=args.num_mix)
        loss_fn.fit(h1.detach(), h2.detach())
    return lambda: loss_fn(h1, h2)


def run_worker(args) -> dict:
    sys.modules.setdefault("outdated", None)
    import torch

    torch.set_num_threads(args.threads)
    h1, h2 = noisy_views(args.nodes, args.dim)
    step = (reference_step if args.code == "reference" else package_step)(args, h1, h2)
    loss = step()
    loss.backward()  # (warm-up)
    h1.grad = h2.grad = None
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # (the peak from here on)
    base, times = rss_mb("VmRSS"), []
    for _ in range(args.steps):
        start = time.perf_counter()
        loss = step()
        loss.backward()
        times.append(time.perf_counter() - start)
        h1.grad = h2.grad = None
    return {"step_s": statistics.median(times), "peak_mb": rss_mb("VmHWM") - base,
            "loss": float(loss.detach())}  # fmt: skip


def worker(args, code: str, method: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--code", code, "--method", method]
    cmd += ["--reference", str(args.reference)]
    for name in ("nodes", "dim", "tau", "num_mix", "threads", "steps"):
        cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def header(args) -> str:
    import subprocess as sp

    import torch
    from _stamp import machine

    m = machine()
    ref = sp.run(["git", "-C", str(args.reference), "rev-parse", "--short", "HEAD"],
                 capture_output=True, text=True).stdout.strip() or "unknown"  # fmt: skip
    return (
        "# The authors' loss step beside this package's\n\n"
        f"`python benchmarks/reference_loss.py {' '.join(sys.argv[1:])}`\n\n"
        f"Machine: {m['cpu']}, {m['cores']} cores, torch {torch.__version__}, "
        f"{args.threads} torch threads. The reference code: junxia97/ProGCL at {ref}, "
        "imported from the clone. Random views, "
        f"N = {args.nodes:,}, d = {args.dim}, τ = {args.tau:g}, K = {args.num_mix} mixed "
        f"negatives; {args.steps} timed steps after one warm-up (median; the fits before "
        f"them), each configuration in its own process, A B B A, {args.rounds} round(s). "
        "Peak: resident memory of the timed steps above the process's before them. The "
        "ProGCL losses differ because each code fits its mixture on its own sample.\n\n"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", type=Path, required=True, help="a clone of junxia97/ProGCL")
    p.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    add_step_options(p, tau=0.2)  # (Amazon-Photo's preset)
    p.add_argument("--num-mix", type=int, default=1000)
    p.add_argument("--code", choices=["reference", "package"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.reference = args.reference.resolve()
    if args.worker:
        print(json.dumps(run_worker(args)))
        return 0
    lines = [
        "| method | reference code: step (ms) | pyg_progcl: step (ms) | speed-up "
        "| reference code: peak (MB) | pyg_progcl: peak (MB) | memory ratio | losses |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method in args.methods:
        runs = {"reference": [], "package": []}
        for _ in range(args.rounds):
            for code in ("reference", "package", "package", "reference"):
                runs[code].append(worker(args, code, method))
                print(method, code, runs[code][-1], flush=True)
        step = {c: statistics.median(r["step_s"] for r in runs[c]) for c in runs}
        peak = {c: max(r["peak_mb"] for r in runs[c]) for c in runs}
        loss = {c: runs[c][-1]["loss"] for c in runs}
        lines.append(
            f"| {method} | {1e3 * step['reference']:.0f} | {1e3 * step['package']:.0f} "
            f"| {step['reference'] / step['package']:.2f}x | {peak['reference']:.0f} "
            f"| {peak['package']:.0f} | {peak['reference'] / peak['package']:.2f}x "
            f"| {loss['reference']:.4f} / {loss['package']:.4f} |"
        )
    emit(header(args) + "\n".join(lines) + "\n", args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
