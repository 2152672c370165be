"""Contrastive pre-training on ogbn-arxiv (or another ``ogbn-*`` node dataset), scored on
the official split with the official evaluator (docs/algorithms.md §6, §8, §9).

The graph comes from the real ``ogb.nodeproppred.PygNodePropPredDataset`` (through
:func:`pyg_progcl.cli.datasets.load_dataset`, which handles the loader's offline quirks:
the ``outdated`` version check, ``torch.load`` on torch >= 2.6, a folder without
``RELEASE_v1.txt``); the edges are symmetrised. Training uses the trainer's preset of
``(dataset, method)`` with the flags below applied, and its progress bar; the frozen
encoder is probed by the GCA-protocol linear probe (logistic regression, Adam) on the
official train / valid / test split, with the test accuracy at the best validation
accuracy computed by ``ogb.nodeproppred.Evaluator``. The result JSON is the trainer's
(``pyg_progcl.cli.train``) with an ``ogb`` entry added.

GRACE's published ogbn-arxiv number (71.51 ± 0.11) uses 2048 sampled negatives, because
the full-graph loss ran out of memory; here both the exact row-blocked loss and the
sampled one run. Examples::

    # GRACE with 2048 sampled negatives per anchor (the published setting)
    python benchmarks/ogbn_arxiv.py --root data --method grace --num-negatives 2048
    # exact full-graph ProGCL-weight (row blocks), on a GPU
    python benchmarks/ogbn_arxiv.py --root data --method progcl-weight --device cuda
    # mini-batch training on sampled subgraphs (activations of 1024 seeds at a time)
    python benchmarks/ogbn_arxiv.py --root data --batch-size 1024 --num-neighbors 10 10
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from _stamp import write_json  # noqa: E402

from pyg_progcl.cli import train  # noqa: E402
from pyg_progcl.cli.datasets import DATASETS, canonical_name, load_dataset  # noqa: E402
from pyg_progcl.cli.presets import METHODS, get_preset  # noqa: E402

#: Published linear-probe accuracies (%, mean, std) by dataset and method (docs/algorithms.md §8).
PUBLISHED = {"ogbn-arxiv": {"grace": (71.51, 0.11)}}


def ogb_datasets() -> list[str]:
    """The ``ogbn-*`` datasets :func:`~pyg_progcl.cli.datasets.load_dataset` knows."""
    return [name for name, info in DATASETS.items() if info.kind == "ogb"]


def _ogb_name(text: str) -> str:
    try:
        name = canonical_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if name not in ogb_datasets():
        raise argparse.ArgumentTypeError(
            f"{name} is not an OGB dataset ({', '.join(ogb_datasets())})"
        )
    return name


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 (got {value})")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", type=_ogb_name, default="ogbn-arxiv")
    parser.add_argument("--root", help="data root holding ogbn_arxiv/ (or ogb/ogbn_arxiv/)")
    parser.add_argument("--method", choices=METHODS, default="grace")
    parser.add_argument("--epochs", type=_positive, help="training epochs (default: preset)")
    parser.add_argument(
        "--warmup-epochs", type=int, help="ProGCL warm-up (default: preset's fraction)"
    )
    parser.add_argument(
        "--num-negatives", type=_positive, help="k sampled negatives per anchor and view"
    )
    parser.add_argument("--block-size", type=_positive, help="anchors per row block of the loss")
    parser.add_argument("--batch-size", type=_positive, help="seed nodes per mini-batch")
    parser.add_argument(
        "--num-neighbors", type=int, nargs="+", help="neighbours per hop with --batch-size"
    )
    parser.add_argument("--probe-epochs", type=_positive, help="linear-probe epochs (preset)")
    parser.add_argument("--eval-every", type=int, help="intermediate evaluations (epochs)")
    parser.add_argument("--seeds", type=_positive, default=1)
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 or auto")
    parser.add_argument(
        "--output", default=str(HERE / "results" / "ogbn_arxiv.json"), help="result JSON"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def build_config(args: argparse.Namespace):
    """The trainer's preset of ``(dataset, method)`` with the flags applied."""
    overrides: dict[str, Any] = {}
    for key in ("epochs", "warmup_epochs", "num_negatives", "block_size", "batch_size"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    if args.num_neighbors is not None:
        overrides["num_neighbors"] = list(args.num_neighbors)
    if args.probe_epochs is not None:
        overrides["probe_epochs"] = args.probe_epochs
    if args.eval_every is not None:
        overrides["eval_every"] = args.eval_every
    return get_preset(args.dataset, args.method, **overrides)


def ogb_summary(data, dataset: str, method: str) -> dict[str, Any]:
    """What the result adds for OGB: the evaluator, the official split's sizes, the paper."""
    published: Optional[tuple[float, float]] = PUBLISHED.get(dataset, {}).get(method)
    return {
        "evaluator": f"ogb.nodeproppred.Evaluator({dataset!r})",
        "split": "official",
        "split_sizes": {
            "train": int(data.train_mask.sum()),
            "valid": int(data.val_mask.sum()),
            "test": int(data.test_mask.sum()),
        },
        "published_accuracy": None if published is None else list(published),
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    config = build_config(args)
    data = load_dataset(args.dataset, args.root)
    seeds = list(range(args.seed, args.seed + args.seeds))
    result = train(config, data, seeds=seeds, device=args.device, progress=not args.quiet)
    result["ogb"] = ogb_summary(data, args.dataset, args.method)
    write_json(result, args.output)
    accs = ", ".join(f"{100 * a:.2f}" for a in result["accuracies"])
    published = result["ogb"]["published_accuracy"]
    print(
        f"{args.dataset} / {args.method}: test accuracy {100 * result['accuracy_mean']:.2f} ± "
        f"{100 * result['accuracy_std']:.2f} % over {len(seeds)} seed(s) [{accs}]"
        + (f" (published {published[0]:.2f} ± {published[1]:.2f})" if published else "")
        + f"; {config.epochs} epochs, {result['epoch_time_s']:.2f} s/epoch; wrote {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
