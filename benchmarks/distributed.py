"""Data parallel training on torch.distributed: time and memory per rank, communication.

One process trains on global batches of ``G`` seed nodes; ``W`` processes (gloo, one
thread each) train on the same global batches, ``G / W`` seeds each, with
``DistributedDataParallel`` over the seeds' views and :class:`DistributedLoss` (every
rank's anchors against all ``G`` seeds). Both run the same steps of mini-batch training
(neighbour-sampled subgraphs, both augmented views, ProGCL-weight's loss with a fitted
mixture, backward, Adam) on a synthetic graph of ``--nodes`` nodes. Reported per
configuration: the median step time (sampling included; the slowest rank's), the peak resident memory per
rank, and the bytes each rank sends into collectives per step: the library's own
(counted at the torch.distributed calls) plus DDP's gradient all-reduce (the parameters'
bytes). Runs alternate ``1, W, W, 1`` over ``--repeats`` rounds (ABBA)::

    python benchmarks/distributed.py --nodes 100000 --batch 2048 --world 2
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from pyg_progcl import EdgeDrop, FeatureMask, GCNEncoder, GRACEModel, ProGCLLoss  # noqa: E402
from pyg_progcl.cli.datasets import synthetic_graph  # noqa: E402
from pyg_progcl.distributed import DistributedLoss  # noqa: E402
from pyg_progcl.minibatch import SeedViews, epoch_seeds, neighbor_loader  # noqa: E402
from pyg_progcl.mixture import BetaMixture  # noqa: E402

#: The mixture the loss weights with (fitted, so that every step weights its negatives).
MIXTURE = {"alpha": [2.0, 6.0], "beta": [5.0, 2.0], "weight": [0.8, 0.2]}


def count_collectives() -> list[int]:
    """Wraps the torch.distributed calls the library makes; returns the byte counter."""
    sent = [0]
    for name in ("all_gather", "all_reduce"):
        original = getattr(dist, name)

        def counted(*args, _original=original, **kwargs):
            tensor = args[1] if _original.__name__ == "all_gather" else args[0]
            sent[0] += tensor.numel() * tensor.element_size()
            return _original(*args, **kwargs)

        counted.__name__ = name
        setattr(dist, name, counted)
    return sent


def build(args, rank: int, world: int):
    torch.manual_seed(rank)
    data = synthetic_graph(num_nodes=args.nodes, num_features=args.features, seed=0)
    model = GRACEModel(
        GCNEncoder(args.features, args.hidden), args.hidden, args.hidden,
        [EdgeDrop(0.2), FeatureMask(0.3)], [EdgeDrop(0.4), FeatureMask(0.4)],
    )  # fmt: skip
    mixture = BetaMixture()
    for key, value in MIXTURE.items():
        getattr(mixture, key).copy_(torch.tensor(value))
    mixture.num_fits.fill_(1)
    loss = ProGCLLoss(args.tau, mixture=mixture)
    views = SeedViews(model, data)
    if world > 1:
        views = torch.nn.parallel.DistributedDataParallel(views)
        loss = DistributedLoss(loss)
    return data, model, views, loss


def run(rank: int, world: int, args, init: str, out: str) -> None:
    """One configuration on one rank: warm-up and timed steps; writes its numbers."""
    torch.set_num_threads(1)
    sent = [0]
    if world > 1:
        dist.init_process_group(
            "gloo", init_method=f"file://{init}", rank=rank, world_size=world,
            timeout=datetime.timedelta(seconds=600),
        )  # fmt: skip
        sent = count_collectives()
    data, model, views, loss = build(args, rank, world)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    seeds = epoch_seeds(data.num_nodes, args.batch // world, 1, 0, rank, world)
    loader = iter(
        neighbor_loader(data, [10, 10], args.batch // world, shuffle=False, input_nodes=seeds)
    )
    times, counted = [], []
    for step in range(args.warmup + args.steps):
        if world > 1:
            dist.barrier()
        before = sent[0]
        tic = time.perf_counter()
        batch = next(loader)  # the step samples its subgraph too
        optimizer.zero_grad()
        h1, h2 = views(batch)
        loss(h1, h2).backward()
        optimizer.step()
        if world > 1:
            dist.barrier()
        if step >= args.warmup:
            times.append(time.perf_counter() - tic)
            counted.append(sent[0] - before)
    ddp_bytes = sum(p.numel() * p.element_size() for p in model.parameters()) if world > 1 else 0
    result = {
        "rank": rank, "world": world, "step_s": statistics.median(times),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "sent_bytes": statistics.median(counted) + ddp_bytes if world > 1 else 0,
    }  # fmt: skip
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    if world > 1:
        dist.destroy_process_group()


def configuration(args, world: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(
            run, args=(world, args, os.path.join(tmp, "init"), tmp), nprocs=world,
            start_method="spawn",
        )  # fmt: skip
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]
    return {
        "world": world,
        "step_s": max(r["step_s"] for r in ranks),
        "peak_mb": max(r["peak_mb"] for r in ranks),
        "sent_mb": max(r["sent_bytes"] for r in ranks) / 2**20,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2048, help="global batch G (seeds)")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--tau", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="ABBA rounds")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "distributed.md")
    args = parser.parse_args(argv)
    runs: dict[int, list[dict]] = {1: [], args.world: []}
    for _ in range(args.repeats):
        for world in (1, args.world, args.world, 1):
            runs[world].append(configuration(args, world))
            print(json.dumps(runs[world][-1]), flush=True)
    one = statistics.median(r["step_s"] for r in runs[1])
    lines = [
        f"Synthetic graph of {args.nodes} nodes, {args.features} features, GCN {args.hidden}, "
        f"global batch {args.batch} seeds, fanout [10, 10], ProGCL-weight (fitted mixture), "
        f"one torch thread per process, gloo; medians over {2 * args.repeats} runs of "
        f"{args.steps} steps (ABBA).",
        "",
        "| processes | seeds per rank | step (s, slowest rank) | vs 1 process | peak memory per rank (MB) | sent per rank and step (MB) |",
        "|---|---|---|---|---|---|",
    ]
    for world, rows in runs.items():
        step = statistics.median(r["step_s"] for r in rows)
        peak = statistics.median(r["peak_mb"] for r in rows)
        sent = statistics.median(r["sent_mb"] for r in rows)
        lines.append(
            f"| {world} | {args.batch // world} | {step:.2f} | {step / one:.2f}x | "
            f"{peak:.0f} | {sent:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    args.output.with_suffix(".json").write_text(json.dumps({k: v for k, v in runs.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
