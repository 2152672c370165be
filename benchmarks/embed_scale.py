"""Time and peak memory of ``python -m pyg_progcl embed`` on a generated graph of a
million nodes, in mini-batches (docs/benchmarks.md, *Embedding a large graph*).

Writes a random graph as ``.npz`` (``--nodes`` nodes, ``--degree`` random in-edges per
node, ``--features`` uniform features), trains a model for a few epochs on a small graph
of the same feature width (training is not what is measured), saves it, and runs the
``embed`` command on the large graph in its own process: wall time of the process and
its peak resident memory (``ru_maxrss`` of the child, as ``/usr/bin/time -v`` reports
it), once per ``--batch-size`` given and, with ``--full-graph``, once on the whole graph
at once. Prints one Markdown row per run.

    python benchmarks/embed_scale.py --nodes 1000000 --batch-size 65536 --threads 2
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]


def write_graph(path: Path, nodes: int, degree: int, features: int, seed: int = 0) -> int:
    """A random graph: ``degree`` uniformly drawn in-edges per node; returns its edges."""
    rng = np.random.default_rng(seed)
    dst = np.repeat(np.arange(nodes, dtype=np.int64), degree)
    src = rng.integers(0, nodes, dst.size)
    x = rng.random((nodes, features), dtype=np.float32)
    np.savez(path, edge_index=np.stack([src, dst]), x=x)
    return int(dst.size)


def small_model(path: Path, features: int, hidden: int, epochs: int) -> None:
    """A model trained for a few epochs on a 2,000-node graph of the same feature width."""
    from torch_geometric.data import Data

    from pyg_progcl.cli import get_preset, train
    from pyg_progcl.io import save_model

    g = torch.Generator().manual_seed(0)
    data = Data(
        x=torch.rand(2000, features, generator=g),
        edge_index=torch.randint(0, 2000, (2, 20_000), generator=g),
    )
    config = get_preset("file:small", "grace", epochs=epochs, hidden=hidden, proj=hidden)
    _, model = train(config, data, progress=False, return_model=True)
    save_model(model, path)


def run_embed(model: Path, graph: Path, out: Path, threads: int, batch_size) -> dict:
    """Runs the ``embed`` command in a child process; its wall time and peak memory."""
    cmd = [sys.executable, "-m", "pyg_progcl", "embed", "--model", str(model), "--data",
           str(graph), "--output", str(out), "--threads", str(threads)]  # fmt: skip
    if batch_size is not None:
        cmd += ["--batch-size", str(batch_size)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(threads)}
    tic = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - tic
    stdout = proc.stdout.read().decode()
    if status != 0:
        raise SystemExit(f"embed failed ({status}): {stdout}")
    inner = re.search(r"\(.*?([\d.]+) s\)\s*$", stdout.strip())
    return {
        "batch_size": batch_size,
        "wall_s": wall,
        "command_s": float(inner.group(1)) if inner else None,  # after imports
        "peak_rss_gb": usage.ru_maxrss * 1024 / 1e9,  # Linux: kilobytes
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--degree", type=int, default=10)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=5, help="training epochs of the model")
    parser.add_argument("--batch-size", type=int, nargs="+", default=[65536])
    parser.add_argument("--full-graph", action="store_true", help="also embed all at once")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, help="folder for the files (default: a temp one)")
    args = parser.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="embed_scale-"))
    work.mkdir(parents=True, exist_ok=True)
    graph, model = work / "graph.npz", work / "model.pt"
    edges = write_graph(graph, args.nodes, args.degree, args.features)
    size = graph.stat().st_size / 1e9
    print(f"graph: {args.nodes:,} nodes, {edges:,} edges, {args.features} features ({size:.2f} GB)")
    small_model(model, args.features, args.hidden, args.epochs)
    runs = [*args.batch_size] + ([None] if args.full_graph else [])
    print(
        "| nodes | edges | batch size | threads | wall (s) | command after imports (s) | peak RSS (GB) |"
    )
    print("|---|---|---|---|---|---|---|")
    for batch_size in runs:
        r = run_embed(model, graph, work / "z.npy", args.threads, batch_size)
        shown = "whole graph" if batch_size is None else f"{batch_size:,}"
        print(
            f"| {args.nodes:,} | {edges:,} | {shown} | {args.threads} | {r['wall_s']:.1f} | "
            f"{r['command_s']} | {r['peak_rss_gb']:.2f} |",
            flush=True,
        )
    z = np.load(work / "z.npy", mmap_mode="r")
    print(f"embeddings: {z.shape[0]:,} x {z.shape[1]} {z.dtype} ({work / 'z.npy'})")


if __name__ == "__main__":
    main()
