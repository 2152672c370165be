"""A default GRACE loss step against the matrix products it cannot avoid, in one process.

A whole-matrix step of GRACE's loss on ``N`` nodes needs 9 products: the three ``N×N``
Gram matrices ``u vᵀ``, ``u uᵀ``, ``v vᵀ`` (``[N, d] × [d, N]``) and two gradient products
per matrix (``[N, N] × [N, d]``). Everything else (exponentials, sums, the normalisation)
is the engine's overhead; this script times the loss step (forward and backward,
``InfoNCELoss()`` with its default path; on a CPU whose last-level cache is smaller than
``N×N``, also in the command line's row blocks, ``cpu_block_size(N)``) and those 9 products
alone, alternating (A B B A per round), and reports the ratios of the medians::

    python benchmarks/dense_step.py --nodes 18333 --rounds 3   # Coauthor-CS's size
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from pyg_progcl import InfoNCELoss
from pyg_progcl.cli.build import cpu_block_size


def products(u: torch.Tensor, v: torch.Tensor) -> None:
    """The 9 products of a whole-matrix step (three forward, six backward)."""
    for a, b in ((u, v), (u, u), (v, v)):
        g = a @ b.T
        g @ b
        g.T @ a
        del g


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=18333)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    h1 = torch.randn(args.nodes, args.dim, generator=g).requires_grad_()
    h2 = (h1.detach() + 0.5 * torch.randn(args.nodes, args.dim, generator=g)).requires_grad_()
    u, v = (torch.nn.functional.normalize(h.detach(), dim=1) for h in (h1, h2))
    loss, block_size = InfoNCELoss(0.5), cpu_block_size(args.nodes)
    plan = loss.plan(h1)
    fns = {"step": lambda: loss(h1, h2).backward(), "products": lambda: products(u, v)}
    if block_size is not None:
        blocks = InfoNCELoss(0.5, block_size=block_size)
        fns["blocks"] = lambda: blocks(h1, h2).backward()
    timed = {name: [] for name in fns}
    for fn in fns.values():  # (warm-up)
        fn()
    for _ in range(args.rounds):
        for name in [*fns, *reversed(fns)]:
            tic = time.perf_counter()
            fns[name]()
            timed[name].append(time.perf_counter() - tic)
    med = {k: statistics.median(t) for k, t in timed.items()}
    row = {
        "nodes": args.nodes, "dim": args.dim, "path": plan.path, "block_size": plan.block_size,
        "threads": torch.get_num_threads(), "step_s": round(med["step"], 3),
        "products_s": round(med["products"], 3), "ratio": round(med["step"] / med["products"], 3),
        **({"blocks": block_size, "blocks_s": round(med["blocks"], 3),
            "blocks_ratio": round(med["blocks"] / med["products"], 3)} if "blocks" in med else {}),
        "runs": {k: [round(x, 3) for x in t] for k, t in timed.items()},
    }  # fmt: skip
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
