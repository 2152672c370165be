"""Per-step time and peak memory of every loss on real graphs.

One training step = both augmented views through GRACEModel, the loss, backward and an
Adam step; for ProGCL also ``ProGCLLoss.fit`` (the online refit), timed separately too.
Every (dataset, method) row runs in its own subprocess so that its peak memory is its own
(peak RSS on the CPU, ``torch.cuda.max_memory_allocated`` on a GPU). The matmul throughput
of this machine is measured in the same run, and the time the GRACE step's matrix
products need at that throughput is printed beside the measurement. Each row runs
``--repeats`` times (default 3), the methods in alternating order (ABBA), and reports the
medians; the ratio to GRACE comes with its range over the repeats. ``--pretrain N`` times
the steps of a model first trained by ``N`` GRACE steps (the same model for every method)
instead of an untrained one, whose cosines nearly all lie at 1: ProGCL's loss runs only
after a warm-up, on embeddings that tell nodes apart. (On a shared 2-core machine one
configuration's step time varied by up to 46 % between processes; interleaving the
methods' steps inside one process was tried and rejected: with multi-GB matrices each
method's page faults depend on what the other freed, and the ratio swung 0.86–1.45.)

    python benchmarks/speed.py                         # Cora and Amazon-Photo, CPU
    python benchmarks/speed.py --device cuda --steps 50
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from pyg_progcl import (  # noqa: E402
    DebiasedInfoNCELoss,
    EdgeDrop,
    FeatureMask,
    GCNEncoder,
    GRACEModel,
    HardInfoNCELoss,
    InfoNCELoss,
    ProGCLLoss,
)
from pyg_progcl.cli.build import cpu_block_size  # noqa: E402
from pyg_progcl.cli.datasets import load_dataset  # noqa: E402
from pyg_progcl.encoders import sparse_features  # noqa: E402
from pyg_progcl.losses import FrozenFit  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402  (the benchmarks' shared machine description)

REPO = Path(__file__).resolve().parents[1]
METHODS = {
    "grace": lambda tau, bs: InfoNCELoss(tau, block_size=bs),
    "dcl": lambda tau, bs: DebiasedInfoNCELoss(tau, 0.1, block_size=bs),
    "hcl": lambda tau, bs: HardInfoNCELoss(tau, 0.1, 1.0, block_size=bs),
    "progcl-weight": lambda tau, bs: ProGCLLoss(tau, "weight", block_size=bs),
    "progcl-mix": lambda tau, bs: ProGCLLoss(tau, "mix", block_size=bs),
    # the reference code's schedule: weights from the first fit's views (fitted at step 1)
    "progcl-frozen": lambda tau, bs: ProGCLLoss(tau, "weight", block_size=bs, schedule="frozen"),
    # ... with the second direction weighted by the first's matrix (shared_weights)
    "progcl-shared": lambda tau, bs: ProGCLLoss(
        tau, "weight", block_size=bs, schedule=FrozenFit(shared_weights=True)
    ),
}

#: Rows run only when ``--methods`` names them (the reference code's variants).
ON_REQUEST = ("progcl-frozen", "progcl-shared")


def machine(device: str = "cpu") -> str:
    info = scale.machine(device)
    return f"{info.get('gpu', info['cpu'])}, {info['torch_threads']} threads, torch {info['torch']}"


def matmul_gflops(n: int, d: int, device: torch.device, reps: int = 5) -> float:
    """Measured GFLOP/s of the loss's Gram product ``[n, d] @ [d, n]`` in float32."""
    a, b = torch.randn(n, d, device=device), torch.randn(n, d, device=device)
    _sync(device)
    times = []
    for _ in range(reps + 1):
        start = time.perf_counter()
        a @ b.T
        _sync(device)
        times.append(time.perf_counter() - start)
    return 2 * n * n * d / statistics.median(times[1:]) / 1e9


def grace_step_flops(n: int, first_layer_inputs: int, hidden: int) -> float:
    """FLOPs of the matrix products of one GRACE step (both views, forward + backward).

    Loss: the textbook count of 3 Gram products ``2N²d`` forward and 6 backward. (The
    library executes 7 on the dense path, where a view against itself needs one product in
    backward, ``(G + Gᵀ)·u``, and 16 in row blocks: 4 forward, 4 recomputed, 8 backward;
    a step faster than the bound is one that makes fewer products than the textbook.)
    Model: the dense layers (encoder in → 2h → h, projection h → h → h), forward + 2x
    backward, per view; ``first_layer_inputs`` is ``N · in`` for dense features and the
    number of non-zeros for sparse ones (what the encoder actually multiplies).
    """
    grams = 9 * 2 * n * n * hidden
    dense = 2 * (first_layer_inputs * 2 * hidden + n * (2 * hidden * hidden + 2 * hidden * hidden))
    return grams + 2 * 3 * dense


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Stepper:
    """One method's model, loss and optimiser; :meth:`step` times one training step."""

    def __init__(self, method: str, data, args, device: torch.device):
        torch.manual_seed(0)
        f = data.num_features
        self.data, self.device = data, device
        cpu = device.type == "cpu"  # (the CSR paths on the CPU, as the command line builds)
        self.model = GRACEModel(
            GCNEncoder(f, args.hidden, sparse=cpu, sparse_features=cpu),
            args.hidden,
            args.hidden,
            [EdgeDrop(0.2), FeatureMask(0.3)],
            [EdgeDrop(0.4), FeatureMask(0.4)],
        ).to(device)
        block_size = args.block_size  # (none: as the command line picks, by the CPU's cache)
        if block_size is None and cpu:
            block_size = cpu_block_size(data.num_nodes)
        self.loss_fn = METHODS[method](0.5, block_size).to(device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.refit = isinstance(self.loss_fn, ProGCLLoss)

    def step(self) -> tuple[float, float, float]:
        """``(step seconds incl. refit, refit seconds, loss)``."""
        _sync(self.device)
        start = time.perf_counter()
        h1, h2 = self.model.views(self.data.x, self.data.edge_index)
        loss = self.loss_fn(h1, h2)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        _sync(self.device)
        fit_start = time.perf_counter()
        if self.refit:
            self.loss_fn.fit(h1.detach(), h2.detach())
            _sync(self.device)
        end = time.perf_counter()
        return end - start, end - fit_start, loss.item()


def pretrained(data, args, device: torch.device) -> dict:
    """The model's state after ``args.pretrain`` GRACE steps from the common initialisation:
    trained by the dataset's first process of a run, read from ``args.cache`` by the rest."""
    path = args.cache / f"{args.dataset}_{args.pretrain}.pt"
    if path.exists():
        return torch.load(path, map_location=device)
    grace = Stepper("grace", data, args, device)
    for _ in range(args.pretrain):
        grace.step()
    torch.save(grace.model.state_dict(), path)
    return grace.model.state_dict()


def run_one(args) -> dict:
    """One (dataset, method) row; runs inside its own process."""
    device = torch.device(args.device)
    data = load_dataset(args.dataset, args.root).to(device)
    n = data.num_nodes
    base_mb = _peak_memory_mb(device)
    stepper = Stepper(args.method, data, args, device)
    if args.pretrain:
        stepper.model.load_state_dict(pretrained(data, args, device))
    steps, fits = [], []
    for i in range(args.warmup + args.steps):
        step_s, fit_s, loss = stepper.step()
        if i >= args.warmup:
            steps.append(step_s)
            fits.append(fit_s)
    peak_mb = _peak_memory_mb(device)  # the steps' peak, before the matmul probe below
    blocked = stepper.loss_fn.plan(torch.empty(n, 1)).path != "dense"
    path = (
        ("auto blocks" if args.block_size is None else f"blocks of {args.block_size}")
        if blocked
        else "dense"
    )
    x = data.x.cpu()
    sparse = sparse_features(x)
    inputs = sparse.values().numel() if sparse is not x else x.numel()
    bound_s = grace_step_flops(n, inputs, args.hidden) / (
        matmul_gflops(n, args.hidden, device) * 1e9
    )
    return {
        "dataset": args.dataset,
        "method": args.method,
        "nodes": n,
        "path": path,
        "step_s": statistics.median(steps),
        "refit_s": statistics.median(fits) if stepper.refit else 0.0,
        "peak_mb": peak_mb,
        "base_mb": base_mb,
        "matmul_bound_s": bound_s,
        "loss": loss,
    }


def _worker(args, dataset: str, block_size: str, *extra: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--dataset", dataset, *extra]
    cmd += ["--device", args.device] + ([] if args.root is None else ["--root", str(args.root)])
    cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    cmd += ["--hidden", str(args.hidden), "--threads", str(args.threads)]
    cmd += ["--pretrain", str(args.pretrain), "--cache", str(args.cache)]
    if block_size != "auto":
        cmd += ["--block-size", block_size]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_all(args) -> list[dict]:
    """Every (dataset, method) row ``--repeats`` times, each in its own process, the methods
    in alternating order (ABBA); a row reports the medians over its processes."""
    rows = []
    for dataset in args.datasets:
        for block_size in args.block_sizes:
            runs: dict[str, list[dict]] = {m: [] for m in args.methods}
            for rep in range(args.repeats):
                for m in args.methods if rep % 2 == 0 else args.methods[::-1]:
                    runs[m].append(_worker(args, dataset, block_size, "--method", m))
            for m in args.methods:
                rows.append(_combine(runs[m], runs.get("grace")))
                print(_format_row(rows[-1], rows), flush=True)
    return rows


def _combine(runs: list[dict], grace: list[dict] | None) -> dict:
    """One row from repeated processes: medians, the peak's maximum, and (with GRACE among
    the methods) the range of the step-time ratio to GRACE over the repeats (repeat ``i``
    against GRACE's repeat ``i``)."""
    row = dict(runs[0])
    for key in ("step_s", "refit_s", "matmul_bound_s", "loss"):
        row[key] = statistics.median(r[key] for r in runs)
    row["peak_mb"] = max(r["peak_mb"] for r in runs)
    row["step_s_runs"] = [r["step_s"] for r in runs]
    if grace is not None:
        ratios = [r["step_s"] / g["step_s"] for r, g in zip(runs, grace)]
        row["ratio_range"] = (min(ratios), max(ratios))
    return row


def _format_row(row: dict, rows: list[dict]) -> str:
    same = ("dataset", "path")
    grace = [r for r in rows if r["method"] == "grace" and all(r[k] == row[k] for k in same)]
    versus = "–"  # no GRACE row to compare with
    if grace:
        versus = f"{row['step_s'] / grace[0]['step_s']:.2f}x"
    if grace and "ratio_range" in row:  # (rows of single runs have none)
        versus += " ({:.2f}–{:.2f})".format(*row["ratio_range"])
    return (
        f"| {row['dataset']} | {row['method']} | {row['path']} | {row['step_s'] * 1e3:.0f} "
        f"| {versus} | {row['refit_s'] * 1e3:.1f} "
        f"({100 * row['refit_s'] / row['step_s']:.1f}%) | {row['matmul_bound_s'] * 1e3:.0f} "
        f"({row['step_s'] / row['matmul_bound_s']:.2f}x) | {row['peak_mb']:.0f} |"
    )


HEADER = (
    "| dataset | method | loss path | step (ms) | vs GRACE (range over repeats) "
    "| refit (ms, % of step) | GRACE matmul bound (ms, step / bound) | peak memory (MB) |\n"
    "|---|---|---|---|---|---|---|---|"
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--datasets", nargs="+", default=["Cora", "Amazon-Photo"])
    p.add_argument(
        "--methods", nargs="+", default=[m for m in METHODS if m not in ON_REQUEST],
        choices=list(METHODS),
    )  # fmt: skip
    p.add_argument("--block-sizes", nargs="+", default=["auto"], help="'auto' and/or integers")
    p.add_argument(
        "--root",
        type=Path,
        default=os.environ.get("PYG_PROGCL_DATA"),
        help="the data root (default: $PYG_PROGCL_DATA)",
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--pretrain", type=int, default=0, help="GRACE steps before the timed ones (0: untrained)"
    )
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    p.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "speed.md")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="processes per row, the methods in alternating order; rows report medians",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cache", type=Path, help=argparse.SUPPRESS)  # the pretrained models
    p.add_argument("--dataset", help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    p.add_argument("--block-size", type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(run_one(args)))
        return
    pretrain = f", model pretrained by {args.pretrain} GRACE steps" if args.pretrain else ""
    head = f"Machine: {machine(args.device)}; device {args.device}; {args.steps} timed steps after {args.warmup} warm-up (median){pretrain}; hidden = proj = {args.hidden}."
    print(head)
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory() as cache:
        args.cache = Path(cache)
        rows = run_all(args)
    table = "\n".join(_format_row(r, rows) for r in rows)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(f"{head}\n\n{HEADER}\n{table}\n")
    args.output.with_suffix(".json").write_text(
        json.dumps({"machine": machine(args.device), "rows": rows}, indent=1)
    )
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
