"""One accelerator session in a fixed time: correctness, mixed precision, step times, scale.

Parts, each in its own process with its own time budget under a global deadline (a slow or
hanging part is killed and recorded as ``timeout``; the others still run):

- ``losses``: every loss (InfoNCE, DCL, HCL, ProGCL-weight, ProGCL-mix with a fitted
  mixture) on the device against the same loss on the CPU in float64, on one block of all
  anchors and in several row blocks, values and gradients, in float64 and float32;
- ``amp``: one training step per method under ``torch.autocast`` (bfloat16): a finite loss
  and finite gradients;
- ``speed``: GRACE / ProGCL-weight / ProGCL-mix full-graph step time (median after a
  warm-up) and peak memory on Amazon-Photo, Coauthor-CS and Coauthor-Physics;
- ``loss_step``: every loss's step alone (ProGCL's refit, forward, backward) on random
  views of an Amazon-Photo-sized batch, as ``benchmarks/loss_step.py`` times it on the CPU,
  with its ratio to GRACE's step and peak memory;
- ``arxiv``: one exact full-graph ProGCL-weight epoch and one mini-batch epoch on a
  generated graph of ogbn-arxiv's size (169,343 nodes, 128 features, 1.17M edges);
- ``pytest``: ``tests/library/test_cuda.py`` (slow tests included) on the device.

Everything goes to ``OUT/gpu_checks.json`` (rewritten after every part, so a killed session
still leaves what finished) and ``OUT/gpu_checks.md``, each part's log to ``OUT/logs/``::

    python benchmarks/gpu_checks.py --data DATA --out OUT             # on a GPU, ~9 minutes
    python benchmarks/gpu_checks.py --device cpu --quick --out /tmp/x  # a dry run in ~1 minute

``--quick`` shrinks every part (tiny graphs, generated instead of loaded, few steps);
``--no-budget`` runs every part to its end, whatever the time (a dry run on a busy
machine, as the test suite's: it checks what the parts do, not how fast).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import traceback
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

import torch  # noqa: E402
from calls import count  # noqa: E402 (benchmarks/)
from loss_step import METHODS, loss_step, make_loss, noisy_views  # noqa: E402

from pyg_progcl.cli import get_preset, load_dataset  # noqa: E402
from pyg_progcl.cli.run import start_seed  # noqa: E402
from pyg_progcl.datasets import synthetic_graph  # noqa: E402
from pyg_progcl.losses import (  # noqa: E402
    DebiasedInfoNCELoss,
    HardInfoNCELoss,
    InfoNCELoss,
    ProGCLLoss,
)

#: Seconds per part on a GPU (their sum fits a 9-minute session with the start-up).
BUDGETS = {"losses": 70, "amp": 45, "speed": 170, "loss_step": 30, "arxiv": 150, "pytest": 75}
SPEED_DATASETS = ("Amazon-Photo", "Coauthor-CS", "Coauthor-Physics")
SPEED_METHODS = ("grace", "progcl-weight", "progcl-mix")
AMP_METHODS = ("grace", "dcl", "hcl", "progcl-weight", "progcl-mix")
#: ogbn-arxiv's size: nodes, features, classes, undirected edges (2.33M directed).
ARXIV = {"num_nodes": 169_343, "num_features": 128, "num_classes": 40, "edges": 1_166_243}
#: Tolerances against the CPU float64 loss: (value rtol, atol), (gradient rtol, atol).
TOLERANCES = {
    torch.float64: ((1e-9, 1e-10), (1e-7, 1e-10)),
    torch.float32: ((2e-5, 2e-5), (1e-3, 2e-5)),
}


# ----------------------------------------------------------------------------- recording


class Record:
    """A part's results, written to ``path`` after every entry (a killed part keeps them)."""

    def __init__(self, path: Path, part: str):
        self.path, self.data = path, {"part": part, "results": []}

    def add(self, **entry: Any) -> dict:
        self.data["results"].append(entry)
        self.path.write_text(json.dumps(self.data, indent=1, default=str))
        return entry

    def attempt(self, fn: Callable[[], dict], **keys: Any) -> dict:
        """Runs ``fn`` and records its dict, or the error it raised, under ``keys``."""
        tic = time.perf_counter()
        try:
            entry = {**keys, "ok": True, **fn()}
        except Exception as exc:  # recorded, never fatal: the next check still runs
            entry = {**keys, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
            entry["traceback"] = traceback.format_exc(limit=-4)
        entry["seconds"] = round(time.perf_counter() - tic, 3)
        return self.add(**entry)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_mib(device: torch.device) -> Optional[float]:
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)


# ----------------------------------------------------------------------------- part: losses


@contextlib.contextmanager
def identity_randperm():
    """``torch.randperm`` as the identity, so that ProGCL-mix's pairing of synthesised
    negatives is the same on both devices (their generators differ)."""
    original = torch.randperm

    def fixed(n, *args, device=None, **kwargs):
        return torch.arange(n, device=device)

    torch.randperm = fixed
    try:
        yield
    finally:
        torch.randperm = original


def paired_views(n: int, d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two correlated float64 ``[n, d]`` views on the CPU."""
    g = torch.Generator().manual_seed(seed)
    h1 = torch.randn(n, d, generator=g, dtype=torch.float64)
    return h1, h1 + 0.7 * torch.randn(n, d, generator=g, dtype=torch.float64)


def loss_factories(mixture) -> dict[str, Callable[[Optional[int]], torch.nn.Module]]:
    """Every loss by name, as a function of ``block_size``; ProGCL with ``mixture``."""

    def progcl(tau=0.4, **kw):
        return lambda bs: ProGCLLoss(tau, mixture=copy.deepcopy(mixture), block_size=bs, **kw)

    return {
        "grace": lambda bs: InfoNCELoss(0.5, block_size=bs),
        # τ < 0.025: the per-direction paths (dense, row blocks) instead of the one-pass engine
        "grace-tau0.02": lambda bs: InfoNCELoss(0.02, block_size=bs),
        "progcl-weight-tau0.02": progcl(0.02),
        "dcl": lambda bs: DebiasedInfoNCELoss(0.5, 0.1, block_size=bs),
        "hcl": lambda bs: HardInfoNCELoss(0.5, 0.1, 1.0, block_size=bs),
        "progcl-weight": progcl(),
        "progcl-mix-1": progcl(mode="mix", num_mix=1),
        "progcl-mix-8": progcl(mode="mix", num_mix=8),
    }


def value_and_grads(loss: torch.nn.Module, h1: torch.Tensor, h2: torch.Tensor):
    h1, h2 = (h.detach().requires_grad_(True) for h in (h1, h2))
    with identity_randperm():
        value = loss(h1, h2)
        grads = torch.autograd.grad(value, (h1, h2))
    return value.detach().double().cpu(), [g.double().cpu() for g in grads]


def max_errors(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    """The largest absolute error and the largest error relative to ``|want|`` + 1e-12."""
    diff = (got - want).abs()
    return float(diff.max()), float((diff / (want.abs() + 1e-12)).max())


def compare_loss(make, h1, h2, device, dtype, block_size, reference) -> dict:
    """One loss on ``device`` in ``dtype`` against its CPU float64 ``reference``."""
    loss = make(block_size).to(device)
    path = loss_path(loss, h1.size(0), block_size)
    value, grads = value_and_grads(loss, h1.to(device, dtype), h2.to(device, dtype))
    ref_value, ref_grads = reference
    (vr, va), (gr, ga) = TOLERANCES[dtype]
    value_ok = torch.allclose(value, ref_value, rtol=vr, atol=va)
    grad_ok = all(torch.allclose(a, b, rtol=gr, atol=ga) for a, b in zip(grads, ref_grads))
    errors = [max_errors(a, b) for a, b in zip(grads, ref_grads)]
    return {
        "path": path,
        "value": float(value),
        "reference": float(ref_value),
        "value_abs_error": abs(float(value - ref_value)),
        "grad_abs_error": max(e[0] for e in errors),
        "grad_rel_error": max(e[1] for e in errors),
        "value_ok": value_ok,
        "grad_ok": grad_ok,
        "passed": bool(value_ok and grad_ok),
    }


def loss_path(loss: torch.nn.Module, num_nodes: int, block_size: Optional[int]) -> str:
    """The engine's path for ``loss`` on ``num_nodes`` nodes (``'?'`` if unknown)."""
    try:
        how = loss.plan(torch.empty(num_nodes, 1))
        return how.path if how.path == "dense" else f"row blocks (blocks of {how.block_size})"
    except Exception as exc:  # the record is still useful without it
        return f"? ({type(exc).__name__}: {exc})"


def fitted_mixture(h1: torch.Tensor, h2: torch.Tensor):
    """A float64 Beta mixture fitted on the CPU to the views' cosines."""
    loss = ProGCLLoss(0.4).double()
    loss.fit(h1, h2, generator=torch.Generator().manual_seed(0))
    return loss.mixture


def part_losses(rec: Record, device: torch.device, args) -> None:
    n, d, block = (60, 8, 16) if args.quick else (3000, 64, 700)
    h1, h2 = paired_views(n, d)
    mixture = fitted_mixture(h1, h2)
    rec.add(check="mixture", ok=True, **{k: getattr(mixture, k).tolist() for k in PARAMS})
    dtypes = [torch.float64, torch.float32]
    if device.type == "mps":
        dtypes = [torch.float32]
    for name, make in loss_factories(mixture).items():
        for block_size in (None, block):
            reference = value_and_grads(make(block_size), h1, h2)
            for dtype in dtypes:
                rec.attempt(
                    partial(compare_loss, make, h1, h2, device, dtype, block_size, reference),
                    loss=name, block_size=block_size, dtype=str(dtype).split(".")[1],
                    nodes=n, dim=d,
                )  # fmt: skip


PARAMS = ("alpha", "beta", "weight")


# ----------------------------------------------------------------------------- training steps


def small_graph(args):
    """The graph of the mixed-precision steps: generated, so it needs no data."""
    n = 100 if args.quick else 4000
    return synthetic_graph(num_nodes=n, num_classes=5, num_features=200 if args.quick else 500)


def new_run(dataset: str, method: str, data, device: torch.device, **overrides):
    """A seeded training run whose every step is a full (ProGCL: refitted) step."""
    config = get_preset(dataset, method, warmup_epochs=0, **overrides)
    run, _ = start_seed(config, data, 0, device, None, False, None)
    return run


def finite_step(method: str, data, device: torch.device) -> dict:
    """One training step under bfloat16 autocast: its loss and gradients are finite."""
    run = new_run("synthetic", method, data, device)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        value = run.step(1)
    grads = [p.grad for p in run.model.parameters() if p.requires_grad]
    missing = sum(g is None for g in grads)
    bad = sum(1 for g in grads if g is not None and not bool(torch.isfinite(g).all()))
    return {
        "loss": value,
        "finite_loss": math.isfinite(value),
        "params_without_grad": missing,
        "params_with_nonfinite_grad": bad,
        "passed": math.isfinite(value) and missing == 0 and bad == 0,
    }


def part_amp(rec: Record, device: torch.device, args) -> None:
    data = small_graph(args)
    for method in AMP_METHODS:
        rec.attempt(partial(finite_step, method, data, device), method=method, nodes=data.num_nodes)


def timed_steps(run, device: torch.device, warmup: int, steps: int, deadline: float) -> dict:
    """Median step time after ``warmup`` steps; fewer steps where ``deadline`` is near."""
    times = []
    for epoch in range(1, warmup + steps + 1):
        sync(device)
        tic = time.perf_counter()
        run.step(epoch)
        sync(device)
        times.append(time.perf_counter() - tic)
        if epoch == warmup:
            reset_peak(device)
        if epoch >= warmup + 1 and time.time() + times[-1] > deadline:
            break
    timed = times[warmup:] or times
    return {
        "first_step_s": round(times[0], 4),
        "steps": len(timed),
        "median_step_s": round(statistics.median(timed), 5),
        "min_step_s": round(min(timed), 5),
        "max_step_s": round(max(timed), 5),
        "peak_mib": peak_mib(device),
        "loss": run.record["losses"][-1],
    }


def speed_row(dataset: str, method: str, data, device, args, deadline: float) -> dict:
    run = new_run(dataset, method, data, device)
    out = timed_steps(run, device, args.warmup, args.steps, deadline)
    out["path"] = loss_path(run.loss_fn, data.num_nodes, run.config.block_size)
    del run
    reset_peak(device)
    return out


def part_speed(rec: Record, device: torch.device, args) -> None:
    datasets = ("synthetic",) if args.quick else SPEED_DATASETS
    for dataset in datasets:
        left = args.deadline - time.time()
        share = left / (len(datasets) - datasets.index(dataset))
        try:
            data = load_speed_graph(dataset, args)
        except Exception as exc:
            rec.add(dataset=dataset, ok=False, error=f"{type(exc).__name__}: {exc}")
            continue
        stop = time.time() + share
        for i, method in enumerate(SPEED_METHODS):
            row_deadline = time.time() + (stop - time.time()) / (len(SPEED_METHODS) - i)
            rec.attempt(
                partial(speed_row, dataset, method, data, device, args, row_deadline),
                dataset=dataset, method=method, nodes=data.num_nodes,
                edges=data.edge_index.size(1), features=data.num_features,
            )  # fmt: skip


# ----------------------------------------------------------------------------- part: loss_step


def part_loss_step(rec: Record, device: torch.device, args) -> None:
    n, steps = (300, 2) if args.quick else (7650, 10)
    h1, h2 = (h.detach().to(device).requires_grad_() for h in noisy_views(n, 128))
    grace = None
    for method in METHODS:
        run = partial(loss_step_row, method, h1, h2, device, steps, grace)
        row = rec.attempt(run, method=method)
        grace = row if method == "grace" and row["ok"] else grace


def loss_step_row(method: str, h1, h2, device: torch.device, steps: int, grace) -> dict:
    """The median of ``steps`` loss steps after a warm-up, its peak memory, both against
    GRACE's row ``grace`` (itself when ``None``)."""
    loss_fn, fit = make_loss(method, 0.5), torch.Generator().manual_seed(1)
    loss_step(loss_fn, h1, h2, fit)  # warm-up
    reset_peak(device)
    times = []
    for _ in range(steps):
        sync(device)
        tic = time.perf_counter()
        value = loss_step(loss_fn, h1, h2, fit)
        sync(device)
        times.append(time.perf_counter() - tic)
    row = {"nodes": h1.size(0), "median_step_s": statistics.median(times)}
    row["peak_mib"], grace = peak_mib(device), grace or row
    row["vs_grace"] = round(row["median_step_s"] / grace["median_step_s"], 2)
    row["peak_vs_grace"] = row["peak_mib"] and round(row["peak_mib"] / grace["peak_mib"], 2)
    # (the operator calls and host reads of one step, refit included, as the device ran it)
    row["calls"], row["host_reads"], row["products"] = count(
        lambda: loss_step(loss_fn, h1, h2, fit)
    )
    return {**row, "median_step_s": round(row["median_step_s"], 5), "loss": round(value, 4)}


def load_speed_graph(dataset: str, args):
    if args.quick:
        return synthetic_graph(num_nodes=300, num_classes=5)
    if args.data is None:
        raise ValueError("--data is needed for the datasets (or use --quick)")
    return load_dataset(dataset, args.data)


def arxiv_graph(quick: bool):
    """A generated graph of ogbn-arxiv's size (``quick``: 1,000 nodes)."""
    n = 1000 if quick else ARXIV["num_nodes"]
    degree = 2 * ARXIV["edges"] / ARXIV["num_nodes"]
    return synthetic_graph(
        num_nodes=n, num_classes=ARXIV["num_classes"], num_features=ARXIV["num_features"],
        avg_degree=degree, topic_size=8, topic_prob=0.3, noise_prob=0.05,
    )  # fmt: skip


def one_epoch(data, device, **overrides) -> dict:
    run = new_run("ogbn-arxiv", "progcl-weight", data, device, **overrides)
    reset_peak(device)
    sync(device)
    tic = time.perf_counter()
    value = run.step(1)
    sync(device)
    out = {"epoch_s": round(time.perf_counter() - tic, 3), "peak_mib": peak_mib(device)}
    out.update(loss=value, finite_loss=math.isfinite(value), passed=math.isfinite(value))
    if run.loader is None:
        out["path"] = loss_path(run.loss_fn, data.num_nodes, run.config.block_size)
    return out


def part_arxiv(rec: Record, device: torch.device, args) -> None:
    tic = time.perf_counter()
    data = arxiv_graph(args.quick)
    size = {"nodes": data.num_nodes, "edges": data.edge_index.size(1)}
    size["features"] = data.num_features
    rec.add(check="graph", ok=True, seconds=round(time.perf_counter() - tic, 2), **size)
    rec.attempt(lambda: one_epoch(data, device), epoch="full-graph", method="progcl-weight")
    batch = min(args.batch_size, data.num_nodes // 4)
    rec.attempt(
        lambda: one_epoch(data, device, batch_size=batch, num_neighbors=[10, 10]),
        epoch="mini-batch", method="progcl-weight", batch_size=batch,
    )  # fmt: skip


def part_pytest(rec: Record, device: torch.device, args) -> None:
    env = {**os.environ, "PYG_PROGCL_TEST_DEVICE": str(device)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--slow"]
    cmd.append(str(REPO / "tests" / "library" / "test_cuda.py"))
    timeout = max(5.0, args.deadline - time.time() - 3)
    try:
        proc = subprocess.run(
            cmd, cwd=REPO, env=env, capture_output=True, text=True,
            timeout=None if math.isinf(timeout) else timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        rec.add(
            check="tests/library/test_cuda.py", ok=False, error=f"timed out after {timeout:.0f} s"
        )
        return
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [""]
    rec.add(check="tests/library/test_cuda.py", ok=proc.returncode == 0, exit_code=proc.returncode,
            summary=tail[0], output_tail=(proc.stdout + proc.stderr)[-4000:])  # fmt: skip


PARTS: dict[str, Callable[[Record, torch.device, Any], None]] = {
    "losses": part_losses,
    "amp": part_amp,
    "speed": part_speed,
    "loss_step": part_loss_step,
    "arxiv": part_arxiv,
    "pytest": part_pytest,
}


# ----------------------------------------------------------------------------- the session


def machine(device: torch.device) -> dict:
    """What ran: the device and the versions."""
    import torch_geometric

    info = {
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "torch_geometric": torch_geometric.__version__,
        "python": platform.python_version(),
        "cpu_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu_memory_mib"] = props.total_memory // 2**20
        info["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
    with contextlib.suppress(Exception):
        info["commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    return info


def describe(device: torch.device) -> dict:
    """:func:`machine`, or what failed there (the parts still run and say more)."""
    try:
        return machine(device)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        return {"device": str(device), "gpu": None, "torch": torch.__version__, "error": error}


def run_part(name: str, out: Path, args, timeout: float) -> dict:
    """Runs one part in a child process killed after ``timeout`` seconds (``inf``: never)."""
    result, log = out / "parts" / f"{name}.json", out / "logs" / f"{name}.log"
    cmd = [sys.executable, __file__, "--worker", name, "--result", str(result)]
    cmd += ["--device", args.device, "--deadline", str(time.time() + timeout)]
    cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    cmd += ["--batch-size", str(args.batch_size)] + (["--quick"] if args.quick else [])
    cmd += ["--data", str(args.data)] if args.data else []
    tic = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code, status = proc.wait(timeout=None if math.isinf(timeout) else timeout), None
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code, status = proc.wait(), "timeout"
    budget = None if math.isinf(timeout) else round(timeout, 1)
    entry = {"budget_s": budget, "elapsed_s": round(time.perf_counter() - tic, 1)}
    entry["exit_code"] = code
    entry["results"] = json.loads(result.read_text())["results"] if result.exists() else []
    failed = [r for r in entry["results"] if not r.get("ok") or r.get("passed") is False]
    entry["status"] = status or ("failed" if code or failed else "ok")
    entry["log_tail"] = log.read_text(errors="replace")[-3000:] if code else ""
    return entry


def session(args) -> dict:
    out = Path(args.out)
    for sub in ("parts", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    start = time.time()
    budget = math.inf if args.no_budget else args.budget
    report = {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "budget_s": None if args.no_budget else args.budget,
        "machine": describe(torch.device(args.device)),
        "parts": {},
    }
    names = args.parts.split(",") if args.parts else list(PARTS)
    if args.quick and not args.parts:
        names.remove("pytest")  # the test suite covers the CPU; a dry run skips it
    for name in names:
        left = start + budget - time.time()
        if left < 10:
            report["parts"][name] = {"status": "skipped", "error": "the session's budget is spent"}
        else:
            part_budget = math.inf if args.no_budget else min(BUDGETS[name], left)
            report["parts"][name] = run_part(name, out, args, part_budget)
        write_report(report, out)
    report["elapsed_s"] = round(time.time() - start, 1)
    write_report(report, out)
    return report


def write_report(report: dict, out: Path) -> None:
    (out / "gpu_checks.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "gpu_checks.md").write_text(markdown(report))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return "" if value is None else str(value).replace("|", "/").replace("\n", " ")[:80]


def markdown(report: dict) -> str:
    """The report as a short markdown summary: the machine, then one table per part."""
    m = report["machine"]
    lines = [
        "# Accelerator checks",
        "",
        f"{m['gpu'] or m['device']}, torch {m['torch']} (CUDA {m.get('cuda')}), "
        f"PyG {m.get('torch_geometric')}, commit {m.get('commit', '?')}; "
        f"started {report['started']}"
        + (", quick dry run" if report["quick"] else "")
        + (f"; machine description failed: {m['error']}" if "error" in m else ""),
    ]
    skip = {"traceback", "output_tail", "ok"}
    for name, part in report["parts"].items():
        lines += ["", f"## {name}: {part['status']}", ""]
        if "elapsed_s" in part:
            budget = f"of {part['budget_s']} s" if part["budget_s"] is not None else "(no budget)"
            lines.append(f"{part['elapsed_s']} s {budget}, exit {part['exit_code']}")
        rows = part.get("results", [])
        if part.get("error"):
            lines.append(part["error"])
        lines += table(rows, skip)
    return "\n".join(lines) + "\n"


def table(rows: list[dict], skip: set) -> list[str]:
    """Markdown tables of ``rows``, one per set of keys (a failed row joins the previous)."""
    lines, keys = [], None
    for r in rows:
        row_keys = [k for k in r if k not in skip | {"error", "seconds"}]
        if r.get("ok") is not False and row_keys != keys:
            keys = row_keys
            head = ["ok", *keys, "seconds", "error"]
            lines += ["", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
        ok = "yes" if r.get("ok") and r.get("passed", True) else "**no**"
        cells = [_cell(r.get(k)) for k in (keys or []) + ["seconds", "error"]]
        lines.append(f"| {ok} | " + " | ".join(cells) + " |")
    return lines


def worker(args) -> int:
    """Runs one part in this process (the child of :func:`run_part`)."""
    device = torch.device(args.device)
    torch.manual_seed(0)
    rec = Record(Path(args.result), args.worker)
    rec.add(check="start", ok=True, device=str(device))
    PARTS[args.worker](rec, device, args)
    return 0


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="folder for gpu_checks.json / .md and logs")
    parser.add_argument("--data", help="data root holding the datasets (grouped layout)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for all parts")
    parser.add_argument(
        "--no-budget", action="store_true",
        help="no time budget: every part runs to its end (a dry run on a busy machine)",
    )  # fmt: skip
    parser.add_argument("--parts", help=f"comma-separated subset of {','.join(PARTS)}")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a CPU dry run)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per speed row")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    parser.add_argument("--batch-size", type=int, default=1024, help="mini-batch seeds")
    parser.add_argument("--worker", choices=list(PARTS), help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:  # a dry run: two timed steps per row
        args.steps, args.warmup = min(args.steps, 2), min(args.warmup, 1)
    if args.parts and set(args.parts.split(",")) - set(PARTS):
        parser.error(f"--parts: unknown part in {args.parts!r} (known: {', '.join(PARTS)})")
    if args.worker is None and args.out is None:
        parser.error("--out is required")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    report = session(args)
    bad = [n for n, p in report["parts"].items() if p["status"] != "ok"]
    print(f"wrote {args.out}/gpu_checks.json and .md; not ok: {', '.join(bad) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
