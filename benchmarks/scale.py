"""Peak memory and time per epoch of full-graph ProGCL-weight on large graphs (docs/algorithms.md §9).

The ProGCL reference code holds several ``N×N`` float32 matrices and a float64
``N×(N−1)`` weight matrix, and runs out of memory on Coauthor-Physics and ogbn-arxiv
(Xia et al., "ProGCL", ICML 2022). pyg_progcl computes the same loss exactly in row
blocks of ``B`` anchors against all ``N`` nodes, each block recomputed in backward, so
only ``B×N`` intermediates are alive. This script measures one training epoch of
ProGCL-weight *with its mixture refit* (views, ``ProGCLLoss.fit``, loss, backward, Adam
step) with each dataset's preset, on:

* Amazon-Photo, Coauthor-CS, Coauthor-Physics (real data, ``--root``);
* a random graph of ogbn-arxiv's size (169,343 nodes, ~1.17 M undirected edges, 128
  features, the ogbn-arxiv preset): the exact epoch, and beside it the epoch with
  ``k`` sampled negatives per anchor (the "GRACE with 2048 negatives" setting);
* Amazon-Photo on the *dense* path (all ``N×N`` matrices at once), to count how many
  ``N×N`` float32 matrices the dense path holds at its peak; that count gives the
  dense path's need on the larger graphs.

Every configuration runs in its own subprocess. Memory on the CPU is the process's
resident set: ``baseline`` after loading the data and building the model (an idle
python + torch + data + model process), ``training peak`` the high-water mark over the
timed epochs only (``VmHWM`` reset through ``/proc/self/clear_refs`` after setup), and
``process peak`` the ``ru_maxrss`` of the whole child (setup included, e.g. the
eigenvector centralities of the adaptive augmentation). On CUDA: ``max_memory_allocated``.

An exact arxiv-size epoch is ``~16·N²·d`` FLOPs of matrix products alone (about
10^14); on a small CPU it runs for an hour or more. ``--arxiv-blocks`` measures
partial epochs that compute the loss over a given number of evenly spaced anchor
blocks per direction (everything else of the epoch in full) at two block counts, and
extrapolates the time linearly to all blocks; the table labels that figure as an
extrapolation. ``--arxiv-blocks 0`` measures the whole epoch.

    python benchmarks/scale.py --root DATA
    python benchmarks/scale.py --configs arxiv-exact arxiv-sampled --device cuda --arxiv-blocks 0
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from _stamp import machine as train_machine  # noqa: E402

from pyg_progcl.cli import build_loss, build_model, seed_everything  # noqa: E402
from pyg_progcl.cli.build import cpu_block_size  # noqa: E402
from pyg_progcl.cli.datasets import load_dataset  # noqa: E402
from pyg_progcl.cli.presets import get_preset  # noqa: E402
from pyg_progcl.losses import ProGCLLoss  # noqa: E402

ARXIV_NODES, ARXIV_EDGES, ARXIV_FEATURES, ARXIV_CLASSES = 169_343, 1_166_243, 128, 40
GIB = 2**30

#: name -> (dataset or "arxiv-size", preset dataset, loss path, epochs run)
CONFIGS: dict[str, dict[str, Any]] = {
    "photo-dense": dict(data="Amazon-Photo", path="dense", epochs=1),
    "photo": dict(data="Amazon-Photo", path="blocks", epochs=2),
    # the loss's own choice from its memory budget (dense where it fits)
    "cs": dict(data="Coauthor-CS", path="auto", epochs=1),
    "physics": dict(data="Coauthor-Physics", path="auto", epochs=1),
    # the reference code's schedule: weights from the views of the fit (here: this epoch's)
    "physics-frozen": dict(data="Coauthor-Physics", path="blocks", epochs=1, schedule="frozen"),
    "arxiv-exact": dict(data="arxiv-size", path="blocks", epochs=1),
    "arxiv-sampled": dict(data="arxiv-size", path="sampled", epochs=2),
}
TARGETS_GB = {"photo": 1.0, "physics": 3.0, "arxiv-exact": 8.0}


# ----------------------------------------------------------------------------- measurement


def machine(device: str) -> dict[str, Any]:
    return {**train_machine(device), "torch": torch.__version__}


def _status_kib(field: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return float(line.split()[1])
    return float("nan")


class Memory:
    """Resident-set (CPU) or allocator (CUDA) readings of this process, in bytes."""

    def __init__(self, device: torch.device):
        self.device = device

    def current(self) -> float:
        if self.device.type == "cuda":
            return float(torch.cuda.memory_allocated(self.device))
        return _status_kib("VmRSS") * 1024

    def reset_peak(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        except OSError:
            pass

    def peak(self) -> float:
        if self.device.type == "cuda":
            return float(torch.cuda.max_memory_allocated(self.device))
        return _status_kib("VmHWM") * 1024

    @staticmethod
    def process_peak() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def arxiv_size_graph(seed: int = 0):
    """A random graph of ogbn-arxiv's size: uniform random edges, symmetrised."""
    from torch_geometric.data import Data
    from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(ARXIV_NODES, (2, ARXIV_EDGES), generator=gen)
    edge_index, _ = remove_self_loops(edge_index)
    edge_index = coalesce(to_undirected(edge_index, num_nodes=ARXIV_NODES), num_nodes=ARXIV_NODES)
    x = torch.randn(ARXIV_NODES, ARXIV_FEATURES, generator=gen)
    y = torch.randint(ARXIV_CLASSES, (ARXIV_NODES,), generator=gen)
    return Data(x=x, edge_index=edge_index, y=y)


def _partial_loss(loss_fn, h1, h2, blocks: int) -> torch.Tensor:
    """The exact loss's terms over ``blocks`` evenly spaced anchor blocks (both views' anchors
    in each; the row-block path's block size), scaled by ``1 / 2N``. Taken through
    ``compute_loss(anchors=...)``, whose blocks are recomputed in backward: an upper bound
    of the epoch's loss time, whose blocks take their gradient as they go."""
    n = h1.size(0)
    size = loss_fn.plan(h1).block_size
    starts = list(range(0, n, size))
    chosen = starts[:: max(1, len(starts) // blocks)][:blocks]
    total = sum(
        loss_fn.compute_loss(h1, h2, anchors=slice(s, min(s + size, n))).sum() for s in chosen
    )
    return total / (2 * n)


def _epoch(model, loss_fn, data, optimizer, device, blocks: int | None) -> dict[str, float]:
    """One epoch after warm-up: views, refit, loss, backward, step (timed in parts)."""
    _sync(device)
    tic = time.perf_counter()
    optimizer.zero_grad()
    h1, h2 = model.views(data.x, data.edge_index)
    _sync(device)
    t_views = time.perf_counter()
    loss_fn.fit(h1.detach(), h2.detach())
    _sync(device)
    t_fit = time.perf_counter()
    loss = loss_fn(h1, h2) if blocks is None else _partial_loss(loss_fn, h1, h2, blocks)
    loss.backward()
    optimizer.step()
    _sync(device)
    toc = time.perf_counter()
    return {
        "epoch_s": toc - tic,
        "views_s": t_views - tic,
        "refit_s": t_fit - t_views,
        "loss_backward_step_s": toc - t_fit,
        "loss": float(loss.detach()),
    }


def _encoder_step(model, data, optimizer, device) -> float:
    """A step without the contrastive loss (views, a trivial loss, backward, step), run
    before the timed epochs: the encoder's share of time and memory."""
    _sync(device)
    tic = time.perf_counter()
    optimizer.zero_grad()
    h1, h2 = model.views(data.x, data.edge_index)
    (h1.sum() + h2.sum()).mul(0.0).backward()
    optimizer.step()
    _sync(device)
    return time.perf_counter() - tic


def _setup(spec: dict[str, Any], args: argparse.Namespace, device: torch.device):
    """Loads the graph and builds the preset's model, loss and optimiser for ``spec``."""
    seed_everything(0)
    if spec["data"] == "arxiv-size":
        data, preset = arxiv_size_graph(), "ogbn-arxiv"
    else:
        data, preset = load_dataset(spec["data"], args.root), spec["data"]
    config = get_preset(preset, "progcl-weight", schedule=spec.get("schedule", "online"))
    data = data.to(device)
    model = build_model(config, data.num_features, data.num_nodes, data.x, device).to(device)
    loss_fn = build_loss(config, compile_blocks=args.compile_blocks).to(device)
    assert isinstance(loss_fn, ProGCLLoss)
    loss_fn.block_size = auto_block_size(spec, data.num_nodes, device)  # (presets may pin one)
    if spec["path"] == "sampled":
        loss_fn.num_negatives = args.num_negatives
    if spec["path"] == "dense":
        loss_fn.block_size = data.num_nodes  # force the dense path (all N×N matrices at once)
    if spec["path"] == "blocks":  # (the budget's size, or smaller: the automatic choice may
        h = torch.empty(data.num_nodes, 1)  # be the dense path)
        loss_fn.block_size = min(loss_fn.plan(h).block_size, data.num_nodes - 1)
    if args.block_size is not None and spec["path"] in ("auto", "blocks"):
        loss_fn.block_size = args.block_size
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    model.train()
    with torch.no_grad():  # fit the adaptive augmentation's probabilities (setup, not timed)
        model.views(data.x, data.edge_index)
    return data, preset, config, model, loss_fn, optimizer


def _extrapolate(row: dict[str, Any], epochs: list[dict[str, Any]], n: int, block: int) -> None:
    """Adds the full-epoch time extrapolated linearly from two partial epochs."""
    total_blocks = len(range(0, n, block))
    (b1, e1), (b2, e2) = ((e["blocks_per_direction"], e["epoch_s"]) for e in epochs)
    per_block = (e2 - e1) / (b2 - b1)  # seconds per anchor block, both directions
    fixed = e1 - per_block * b1
    row["blocks_per_direction_total"] = total_blocks
    row["measured_fraction"] = b2 / total_blocks
    row["per_block_pair_s"] = per_block
    row["fixed_s"] = fixed
    row["extrapolated_epoch_s"] = fixed + per_block * total_blocks


def _timed_epochs(spec, args, model, loss_fn, data, optimizer, device) -> list[dict]:
    """The configuration's timed epochs; on the arxiv-size graph's exact path two partial
    epochs (``k`` and ``3k`` row blocks per direction), extrapolated later."""
    if spec["data"] == "arxiv-size" and spec["path"] == "blocks" and args.arxiv_blocks > 0:
        return [
            {"blocks_per_direction": k, **_epoch(model, loss_fn, data, optimizer, device, k)}
            for k in (args.arxiv_blocks, 3 * args.arxiv_blocks)
        ]
    count = args.epochs or spec["epochs"]
    return [_epoch(model, loss_fn, data, optimizer, device, None) for _ in range(count)]


def auto_block_size(spec: dict, num_nodes: int, device: torch.device):
    """The automatic choice, as the command line makes it (cache-sized row blocks on a CPU)."""
    return cpu_block_size(num_nodes) if spec["path"] == "auto" and device.type == "cpu" else None


def _describe(name: str, spec: dict, args: argparse.Namespace, data, preset, config) -> dict:
    """What was measured: graph, preset and loss path (block size as the loss picks it)."""
    n = data.num_nodes
    sampled = spec["path"] == "sampled"
    loss = build_loss(config)
    loss.block_size = auto_block_size(spec, n, torch.device(args.device))
    if args.block_size is not None and spec["path"] in ("auto", "blocks"):
        loss.block_size = args.block_size
    plan = loss.plan(torch.empty(n, 1))
    block = plan.block_size if not sampled else min(plan.block_size, n)
    return {
        "config": name,
        "dataset": spec["data"],
        "preset": preset,
        "path": spec["path"] if spec["path"] != "auto" else f"auto-{plan.path}",
        "schedule": config.schedule,
        "compile_blocks": args.compile_blocks,
        "nodes": n,
        "edges": int(data.edge_index.size(1)),
        "features": int(data.num_features),
        "hidden": config.hidden,
        "tau": config.tau,
        "block_size": None if spec["path"] == "dense" else (block or n),
        "num_negatives": args.num_negatives if sampled else None,
    }


def run_child(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Measures one configuration inside this (fresh) process."""
    spec = CONFIGS[name]
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    mem = Memory(device)
    imports = mem.current()  # an idle python + torch + PyG + pyg_progcl process
    load_start = os.getloadavg()[0]
    tic = time.perf_counter()
    data, preset, config, model, loss_fn, optimizer = _setup(spec, args, device)
    setup_s = time.perf_counter() - tic
    gc.collect()
    baseline = mem.current()
    mem.reset_peak()
    encoder_only = _encoder_step(model, data, optimizer, device)
    encoder_peak = mem.peak()
    gc.collect()
    mem.reset_peak()
    epochs = _timed_epochs(spec, args, model, loss_fn, data, optimizer, device)
    peak = max(mem.peak(), encoder_peak)
    row = _describe(name, spec, args, data, preset, config)
    row.update(
        setup_s=setup_s,
        epochs=epochs,
        import_bytes=imports,
        baseline_bytes=baseline,
        training_peak_bytes=peak,
        encoder_step_s=encoder_only,
        encoder_peak_bytes=encoder_peak,
        process_peak_bytes=mem.process_peak() if device.type == "cpu" else peak,
        load_before=load_start,
        load_after=os.getloadavg()[0],
        threads=torch.get_num_threads(),
    )
    if "blocks_per_direction" in epochs[0]:
        _extrapolate(row, epochs, row["nodes"], row["block_size"])
    else:
        row["epoch_s"] = statistics.median(e["epoch_s"] for e in epochs)
    return row


# ----------------------------------------------------------------------------- report


def dense_bytes(n: int, matrices: float) -> float:
    return matrices * 4.0 * n * n


def reference_bytes(n: int) -> float:
    """Lower bound for the ProGCL reference code: four float32 ``N×N`` matrices (the
    exponentiated intra- and inter-view similarities of both directions, kept for
    backward) plus its float64 ``N×(N−1)`` weight matrix."""
    return 4 * 4.0 * n * n + 8.0 * n * (n - 1)


def _gb(value: float) -> str:
    return f"{value / GIB:.2f}" if value < 100 * GIB else f"{value / GIB:.0f}"


def _time(row: dict[str, Any]) -> str:
    if "extrapolated_epoch_s" in row:
        measured = row["epochs"][-1]
        return (
            f"**extrapolated {row['extrapolated_epoch_s'] / 60:.0f} min** (measured "
            f"{measured['epoch_s']:.0f} s for {measured['blocks_per_direction']} of "
            f"{row['blocks_per_direction_total']} blocks per direction, "
            f"{100 * row['measured_fraction']:.1f}%)"
        )
    return f"{row['epoch_s']:.1f} s"


def _encoder(row: dict[str, Any]) -> str:
    if "encoder_step_s" not in row:
        return "not measured"
    return f"{row['encoder_step_s']:.1f} s, {_gb(row['encoder_peak_bytes'] - row['import_bytes'])}"


HEADER = [
    "| graph | N | loss path | epoch time (views + refit + loss + backward + step) "
    "| imports / + data & model (GB) | training peak (GB) | peak − imports (GB) "
    "| encoder-only step: s, peak − imports (GB) "
    "| dense path need (GB) | reference code need (GB, lower bound) | target "
    "| load (1-min, before → after) |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
]

NOTES = [
    "- ProGCL-weight with each dataset's preset (the ogbn-arxiv preset for the random "
    "arxiv-size graph), mixture refitted every epoch (50,000 sampled pairs, 10 EM "
    "iterations); epoch time = median over the timed epochs. schedule='frozen' (the "
    "reference code's): the epoch fits once, keeps its two views and computes the "
    "weights from them (one more Gram product per row block, forward and backward).",
    "- Resident memory (RSS) of each configuration's own process: imports = after "
    "importing torch, PyG and pyg_progcl (nothing allocated); + data & model = the idle "
    "process after loading the data and building the model; training peak = the "
    "high-water mark during the timed epochs (reset after setup). peak − imports is "
    "what training holds beyond the interpreter and libraries (data, model, "
    "activations, loss blocks), the CPU counterpart of CUDA's `max_memory_allocated`; "
    "the targets are checked against it. The encoder-only step (views, a zero loss, "
    "backward, step; its own high-water mark) separates the encoder's share (data, "
    "augmented feature copies, activations) from the loss's.",
]


def dense_matrix_count(rows: list[dict[str, Any]]) -> float | None:
    """How many float32 ``N×N`` matrices the dense path holds beyond the row-blocked one,
    measured on Amazon-Photo (``None`` unless both Photo paths ran)."""
    dense = next((r for r in rows if r["config"] == "photo-dense"), None)
    blocked = next((r for r in rows if r["config"] == "photo"), None)
    if not (dense and blocked):
        return None
    extra = dense["training_peak_bytes"] - blocked["training_peak_bytes"]
    return extra / (4.0 * dense["nodes"] ** 2)


def _path_and_need(r: dict[str, Any], count: float | None) -> tuple[str, str]:
    used = r["training_peak_bytes"] - r["import_bytes"]
    if r["path"] == "dense":
        return "dense (forced)", f"{_gb(used)} (measured)"
    if r["path"] == "auto-dense":
        return "dense (the memory budget's choice)", f"{_gb(used)} (measured)"
    if r["path"] == "sampled":
        path = f"{r['num_negatives']} sampled negatives"
    else:
        path = f"exact, blocks of {r['block_size']}"
    if r.get("schedule", "online") != "online":
        path += f", schedule='{r['schedule']}'"
    if r.get("compile_blocks"):
        path += ", compiled (torch.compile)"
    return path, "–" if count is None else _gb(dense_bytes(r["nodes"], count) + used)


def table_row(r: dict[str, Any], count: float | None) -> str:
    """One configuration's row of the table (``count``: :func:`dense_matrix_count`)."""
    used = r["training_peak_bytes"] - r["import_bytes"]
    path, need = _path_and_need(r, count)
    target = TARGETS_GB.get(r["config"])
    ok = "" if target is None else f"≤ {target:g} GB: {'met' if used <= target * GIB else 'missed'}"
    return (
        f"| {r['dataset']} | {r['nodes']:,} | {path} | {_time(r)} "
        f"| {_gb(r['import_bytes'])} / {_gb(r['baseline_bytes'])} "
        f"| {_gb(r['training_peak_bytes'])} | {_gb(used)} "
        f"| {_encoder(r)} "
        f"| {need} "
        f"| {_gb(reference_bytes(r['nodes']))} | {ok} "
        f"| {r['load_before']:.1f} → {r['load_after']:.1f} |"
    )


def _machine_line(info: dict[str, Any]) -> str:
    gpu = f" ({info['gpu']})" if "gpu" in info else ""
    return (
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['threads']} torch threads, "
        f"torch {info['torch']}, device {info['device']}{gpu}."
    )


LOAD_NOTE = (
    "Load: the 1-minute load average before and after each configuration (the machine is "
    "shared; timings only mean something at a load below the core count)."
)


def markdown(rows: list[dict[str, Any]], info: dict[str, Any] | None) -> str:
    """The table and its notes; ``info``: the machine of every row, or ``None`` when the
    rows were measured on different machines (then each row's is named)."""
    count = dense_matrix_count(rows)
    if info is not None:
        machines = [_machine_line(info)]
    else:
        machines = [f"{r['config']}: {_machine_line(r['machine'])}" for r in rows]
    notes = ["", *machines, LOAD_NOTE, "", *NOTES]
    if count is not None:
        notes.append(
            f"- dense path need: the dense path's training peak on Amazon-Photo exceeds the "
            f"row-blocked one by {count:.1f} float32 N×N matrices (measured); the column "
            "adds that many N×N matrices to each graph's measured row-blocked peak."
        )
    notes.append(
        "- reference code need: a lower bound for the ProGCL reference code, 4 float32 N×N "
        "(exponentiated similarities of both directions) + its float64 N×(N−1) weights = "
        "24·N² bytes, before any temporaries."
    )
    return "\n".join(HEADER + [table_row(r, count) for r in rows] + notes) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--root", default=os.environ.get("PYG_PROGCL_DATA"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument(
        "--block-size", type=int, default=None, help="the loss's block_size (default: its own)"
    )
    parser.add_argument("--num-negatives", type=int, default=2048)
    parser.add_argument(
        "--compile-blocks", action="store_true", help="the loss's compile_blocks=True"
    )
    parser.add_argument("--epochs", type=int, default=0, help="timed epochs (0: the config's)")
    parser.add_argument(
        "--arxiv-blocks",
        type=int,
        default=24,
        help="anchor blocks per direction of the first partial arxiv-size epoch (the second "
        "has 3x); 0 measures the whole exact epoch",
    )
    parser.add_argument("--output", default=str(HERE / "results" / "scale.md"))
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the markdown from the JSON, run nothing"
    )
    parser.add_argument("--child", choices=list(CONFIGS), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child, args)))
        return 0
    out_md = Path(args.output)
    out_json = out_md.with_suffix(".json")
    rows = []
    if out_json.exists():  # keep rows measured earlier that are not re-run now, and their machine
        rerun = [] if args.report_only else args.configs
        stored = json.loads(out_json.read_text())
        rows = [r for r in stored["rows"] if r["config"] not in rerun]
        for r in rows:
            r.setdefault("machine", {**stored["machine"], "threads": r["threads"]})
    for name in [] if args.report_only else args.configs:
        cmd = [sys.executable, __file__, "--child", name, "--root", args.root]
        cmd += ["--device", args.device, "--threads", str(args.threads)]
        cmd += [] if args.block_size is None else ["--block-size", str(args.block_size)]
        cmd += ["--compile-blocks"] if args.compile_blocks else []
        cmd += ["--epochs", str(args.epochs)]
        cmd += [
            "--num-negatives",
            str(args.num_negatives),
            "--arxiv-blocks",
            str(args.arxiv_blocks),
        ]
        print(f"running {name} ...", flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"configuration {name} failed (exit {proc.returncode})")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["machine"] = {**machine(args.device), "threads": row["threads"]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    order = list(CONFIGS)
    rows.sort(key=lambda r: order.index(r["config"]))
    machines = [r["machine"] for r in rows]
    info = machines[0] if machines and all(m == machines[0] for m in machines) else None
    text = markdown(rows, info)
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.write_text(text)
    out_json.write_text(json.dumps({"machine": info, "rows": rows}, indent=1) + "\n")
    print(text)
    print(f"wrote {out_md} and {out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
