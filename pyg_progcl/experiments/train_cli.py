"""The ``train`` subcommand: ``python -m pyg_progcl train --dataset Cora ...``; every
preset field is a flag."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .checkpoint import TrainingInterruptedError
from .datasets import DATASETS, canonical_name
from .loop import train
from .parallel import ONE, join, leave
from .presets import METHODS, TrainConfig, get_preset

_FIELD_HELP = {
    "lr": "Adam learning rate",
    "weight_decay": "Adam weight decay",
    "warmup_epochs": "ProGCL: GRACE epochs before the mixture is first fitted",
    "hidden": "encoder output width",
    "proj": "projection head width",
    "num_layers": "message-passing layers",
    "activation": "encoder activation (relu, prelu, rrelu, elu, ...)",
    "encoder": "gcn or mlp",
    "augmentation": "uniform, degree, pagerank or evc",
    "pe1": "edge drop probability, view 1",
    "pe2": "edge drop probability, view 2",
    "pf1": "feature mask probability, view 1",
    "pf2": "feature mask probability, view 2",
    "aug_threshold": "cap of adaptive drop probabilities",
    "tau": "temperature",
    "tau_plus": "DCL/HCL class prior",
    "beta": "HCL concentration",
    "num_samples": "ProGCL: similarities sampled per mixture fit",
    "schedule": "ProGCL: floored (default: refit every epoch; once a refit degenerates, "
    "p(true negative | s') floored at 0.5), online (refit every epoch, no floor), guarded "
    "(online, degenerate refits rejected), fit-once, or frozen (the papers' code)",
    "posterior_floor": "ProGCL: lower bound of p(true negative | s') in the hardness (0: none)",
    "min_beta_high": "ProGCL: floor of the high-similarity component's beta (reference code: "
    "1.01; default none)",
    "shared_weights": "ProGCL with --schedule frozen: weight the second direction by the first's "
    "matrix, as the papers' code does (true / false; default false)",
    "frozen_cache_mib": "ProGCL with --schedule frozen: MiB of frozen weights held between "
    "steps (default 512; 4*N^2 bytes hold all); trades memory for time, same results",
    "mixture_weight_init": "ProGCL: initial weight of the high-similarity component (default 0.05)",
    "num_mix": "ProGCL-mix: negatives mixed per anchor",
    "block_size": "row block of the loss (none: automatic)",
    "num_negatives": "k sampled negatives per anchor and view (none: all)",
    "batch_size": "seed nodes per mini-batch on sampled subgraphs (none: full graph)",
    "num_neighbors": "neighbours sampled per hop with --batch-size (-1: all; default 10 each)",
    "protocol": "evaluation protocol: gca or grace",
    "split": "random or public",
    "probe_epochs": "epochs of the logistic-regression probe (gca protocol)",
    "eval_every": "evaluate every N epochs (0: only at the end)",
}


def _optional(kind: type, what: str):
    """An argparse type: ``kind(text)``, or ``None`` for ``'none'``."""

    def parse(text: str):
        if text.lower() == "none":
            return None
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} or 'none' (got {text!r})") from None

    return parse


def _boolean(text: str) -> bool:
    """An argparse type: ``true`` / ``false`` (also ``yes`` / ``no``, ``1`` / ``0``)."""
    value = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
    if text.lower() not in value:
        raise argparse.ArgumentTypeError(f"expected true or false (got {text!r})")
    return value[text.lower()]


#: argparse types of the config fields, by annotation
FIELD_TYPES = {
    "float": float, "int": int, "str": str, "bool": _boolean,
    "Optional[int]": _optional(int, "an integer"),
    "Optional[float]": _optional(float, "a number"),
}  # fmt: skip


def _dataset_name(text: str) -> str:
    try:
        return canonical_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer (got {text!r})") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum} (got {value})")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the ``train`` subcommand's arguments to ``parser``."""
    parser.add_argument(
        "--dataset", type=_dataset_name,
        help=f"dataset name (default: synthetic, needs no files); one of {', '.join(DATASETS)}",
    )  # fmt: skip
    parser.add_argument(
        "--root",
        help="data root, plain (<root>/Cora) or grouped (<root>/planetoid/Cora); default: "
        "$PYG_PROGCL_DATA, else ~/.cache/pyg_progcl",
    )
    parser.add_argument("--method", choices=METHODS, help="loss (default: progcl-weight)")
    parser.add_argument("--epochs", type=int_at_least(1), help="training epochs (preset)")
    parser.add_argument("--seeds", type=int_at_least(1), default=1, help="number of seeds")
    parser.add_argument("--seed", type=int_at_least(0), default=0, help="first seed")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 or auto")
    parser.add_argument(
        "--distributed", action="store_true",
        help="data parallel training on torch.distributed, one process per rank, started by "
        "torchrun (or another launcher); needs --batch-size; cuda: one GPU per rank",
    )  # fmt: skip
    parser.add_argument(
        "--threads",
        type=int_at_least(1),
        help="torch CPU threads (default: 1 for the small synthetic graph, where OpenMP "
        "overhead dominates; else torch's choice; 1 is also faster on a busy machine)",
    )
    parser.add_argument("--output", help="write the result as JSON to this file")
    parser.add_argument("--checkpoint", help="checkpoint folder (one file per seed)")
    parser.add_argument("--checkpoint-every", type=int_at_least(1), default=50, metavar="N")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    parser.add_argument("--config", help="JSON file of config fields (before the flags below)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")
    group = parser.add_argument_group("preset overrides (default: the preset's value)")
    add_preset_overrides(group, skip=("dataset", "method", "epochs"))


def add_preset_overrides(group, skip: Sequence[str]) -> None:
    """One flag per :class:`TrainConfig` field not in ``skip`` (``--num-samples`` for
    ``num_samples``), absent from the parsed namespace unless given; ``none`` gives
    ``None`` where a field allows it. A field named like an option the command already
    has is left to that option."""
    for field in dataclasses.fields(TrainConfig):
        if field.name in skip:
            continue
        if field.name == "num_neighbors":
            options: dict[str, Any] = {"type": int, "nargs": "+", "metavar": "K"}
        else:
            options = {"type": FIELD_TYPES[str(field.type)]}
        try:
            group.add_argument(
                "--" + field.name.replace("_", "-"), dest=field.name,
                default=argparse.SUPPRESS, help=_FIELD_HELP.get(field.name), **options,
            )  # fmt: skip
        except argparse.ArgumentError:
            continue


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The preset of ``--dataset`` / ``--method`` with ``--config``'s fields and the flags applied.

    Dataset and method come from the flags, else from the ``--config`` file, else
    ``synthetic`` / ``progcl-weight``.
    """
    fields: dict[str, Any] = {}
    if getattr(args, "config", None):
        path = Path(args.config)
        if not path.is_file():
            raise FileNotFoundError(f"config file {args.config!r} does not exist")
        try:
            loaded = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"config file {args.config!r} is not valid JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"config file {args.config!r} must hold a JSON object")
        # A result file of `--output` works too: its "config" entry is the config.
        fields.update(loaded["config"] if isinstance(loaded.get("config"), dict) else loaded)
    dataset = args.dataset or fields.get("dataset") or "synthetic"
    method = args.method or fields.get("method") or "progcl-weight"
    fields.pop("dataset", None)
    fields.pop("method", None)
    # Flags left at their default are absent (argparse.SUPPRESS), except `--epochs`, whose
    # default None means "the preset's"; an explicit `none` is a value.
    names = {f.name for f in dataclasses.fields(TrainConfig)} - {"dataset", "method"}
    flags = {k: v for k, v in vars(args).items() if k in names}
    if flags.get("epochs", 0) is None:
        del flags["epochs"]
    return get_preset(dataset, method, config=fields, **flags)


def _setup(args: argparse.Namespace) -> tuple[TrainConfig, list[int]]:
    """The run's config and seeds from the command line (and torch's thread count)."""
    if args.resume and not args.checkpoint:
        raise ValueError("--resume needs --checkpoint DIR")
    if args.root is not None and not Path(args.root).expanduser().is_dir():
        raise FileNotFoundError(f"data root {args.root!r} does not exist or is not a folder")
    config = config_from_args(args)
    threads = args.threads
    if threads is None and config.dataset == "synthetic":
        # Measured on a shared 2-core machine: 43 ms/epoch with 1 thread, 2 s/epoch
        # with 2 threads while other processes kept the cores busy (OpenMP barriers).
        threads = 1
    if threads is not None:
        torch.set_num_threads(threads)
    return config, list(range(args.seed, args.seed + args.seeds))


def run_cli(args: argparse.Namespace) -> int:
    """Runs the ``train`` subcommand; returns the exit status."""
    # Ranks join before anything can fail, so that a bad setup fails on all of them alike
    # (else the launcher may stop the others before they report it).
    ranks, device = join(args.device) if args.distributed else (ONE, args.device)
    try:
        config, seeds = _setup(args)
        result = train(
            config,
            seeds=seeds,
            root=args.root,
            device=device,
            checkpoint_dir=args.checkpoint,
            checkpoint_every=args.checkpoint_every,
            resume=args.resume,
            progress=not args.quiet,
            output=args.output,
            ranks=ranks,
        )
    except TrainingInterruptedError as exc:
        if ranks.main:
            print(f"{exc} (rerun with --resume to continue)", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        leave()
    if not args.quiet and ranks.main:
        accs = ", ".join(f"{a:.4f}" for a in result["accuracies"])
        print(
            f"{result['dataset']} / {result['method']}: accuracy "
            f"{result['accuracy_mean']:.4f} ± {result['accuracy_std']:.4f} "
            f"over {len(seeds)} seed(s) [{accs}]; {config.epochs} epochs, "
            f"{result['epoch_time_s'] * 1000:.1f} ms/epoch, {result['wall_time_s']:.1f} s"
        )
        if args.output:
            print(f"wrote {args.output}")
    return 0
