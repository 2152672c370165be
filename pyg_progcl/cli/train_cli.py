"""The ``train`` subcommand: ``python -m pyg_progcl train --dataset Cora ...``; every
preset field is a flag."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import functools
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from pyg_progcl.evaluation import split_edges
from pyg_progcl.io import check_embedding_path, embed, read_graph, save_embeddings, save_model
from pyg_progcl.io.files import check_folder, check_input_file, check_writable

from .agreement import agree, graph_digests, training_options
from .build import build_loss, compiler_missing
from .checkpoint import (
    TrainingInterruptedError,
    check_fresh,
    checkpoint_files,
    checkpoint_path,
    read_checkpoint,
    stored_warmup,
)
from .datasets import DATASETS, canonical_name, load_dataset
from .evaluation import PROBES
from .files import check_distinct
from .loop import command_line_warnings, owned_folder, resolve_device, train
from .parallel import ONE, join, leave
from .planning import RunEstimate, compile_offer, path_note
from .presets import METHODS, TrainConfig, get_preset, graph_file_name, is_graph_file
from .progress import batch_bar
from .threads import set_threads

__all__: list[str] = []

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
    "p(true negative | s') floored at --floor, 0.5), online (refit every epoch, no floor: the "
    "paper's), or frozen (one fit, its epoch's weights kept: the papers' code)",
    "floor": "ProGCL: the schedule's floor of p(true negative | s') in the hardness: with "
    "floored from the first degenerate refit (default 0.5), with the others from the first fit "
    "(default 0: none)",
    "min_beta_high": "ProGCL: floor of the high-similarity component's beta (reference code: "
    "1.01; default none)",
    "shared_weights": "ProGCL with --schedule frozen: weight the second direction by the first's "
    "matrix, as the papers' code does (true / false; default false)",
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
    "diagnose_every": "record the false-negative diagnostics (as `diagnose` prints them) every "
    "N epochs and at the end into the result (0: never)",
}


#: ``--threads``' help, of every command.
THREADS_HELP = (
    "torch CPU threads (default: torch's, one per core, unless other processes keep the "
    "cores busy (the load average), then fewer, as OpenMP threads wait for each other on "
    "a busy machine; 1 for the small synthetic graph; a line says which when not torch's)"
)


def note(text: str) -> None:
    """Writes one line of the command's planning (threads, estimate, path) on stderr,
    through any progress bar."""
    from tqdm.auto import tqdm

    tqdm.write(text, file=sys.stderr)


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
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--dataset", type=_dataset_name,
        help=f"dataset name (default: synthetic, needs no files); one of {', '.join(DATASETS)}",
    )  # fmt: skip
    source.add_argument(
        "--data", metavar="FILE",
        help="train on your graph: a .pt file of a torch_geometric Data (torch.save) or a .npz "
        "of arrays edge_index, x [, y, train_mask, val_mask, test_mask]; without y no probe "
        "runs (docs/own_graph.md)",
    )  # fmt: skip
    parser.add_argument(
        "--root",
        help="data root, plain (<root>/Cora) or grouped (<root>/planetoid/Cora); default: "
        "$PYG_PROGCL_DATA, else ~/.cache/pyg_progcl",
    )
    parser.add_argument("--method", choices=METHODS, help="loss (default: progcl-weight)")
    parser.add_argument(
        "--epochs", type=int_at_least(1), metavar="N",
        help="training epochs (default: the preset's, e.g. Cora 200, Amazon-Photo 2500); "
        "ProGCL's warm-up keeps its share of the epochs unless --warmup-epochs is given "
        "(Amazon-Photo: 400 of 2500, so --epochs 500 warms up 80)",
    )  # fmt: skip
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
        help=THREADS_HELP,
    )
    parser.add_argument(
        "--compile-blocks", action="store_true",
        help="run the loss's row or sampled blocks through torch.compile (a C++ compiler on "
        "a CPU, triton on CUDA): the same loss to rounding; on a CPU, Coauthor epochs in row "
        "blocks ran 1.00-1.11x faster after a first epoch that compiles (seconds to a minute or more); "
        "no effect where the loss takes the dense path",
    )  # fmt: skip
    parser.add_argument(
        "--output", help="write the result as JSON to this file (in an existing folder; every "
        "output is checked before training starts: each its own file, none an input)",
    )  # fmt: skip
    parser.add_argument(
        "--save-embeddings", metavar="FILE",
        help="write every node's final embedding (N x hidden, float32, node order) to FILE.npy "
        "or FILE.pt (the first seed's model; with --probe link, of the graph without the "
        "held-out edges, as the run embedded it)",
    )  # fmt: skip
    parser.add_argument(
        "--save-model", metavar="FILE",
        help="write the trained model (configuration and weights, the first seed's) to FILE, "
        "for pyg_progcl.io.load_model and the embed command",
    )  # fmt: skip
    parser.add_argument(
        "--checkpoint", metavar="DIR",
        help="checkpoint folder (one file per seed; created if missing), held by the run from "
        "its start to its exit: a second run on it ends at once; without --resume, a folder "
        "that holds a checkpoint of one of the run's seeds is refused (--resume continues it; "
        "another folder starts again)",
    )  # fmt: skip
    parser.add_argument(
        "--checkpoint-every", type=int_at_least(1), default=50, metavar="N",
        help="with --checkpoint: also save every N epochs (default 50; always at the end "
        "of the warm-up and of training)",
    )  # fmt: skip
    parser.add_argument(
        "--resume", action="store_true",
        help="continue from --checkpoint (a seed without a checkpoint there starts from epoch "
        "0; a note says so when no seed has one); keeps the checkpoint's warm-up unless "
        "--warmup-epochs is given; refuses a checkpoint of another graph or config",
    )  # fmt: skip
    parser.add_argument(
        "--probe", nargs="+", choices=PROBES, default=["linear"], metavar="PROBE",
        help="how the embeddings are evaluated, one or more of: linear (the linear probe's "
        "node classification accuracy; default), link (link prediction: 5%% / 10%% of the "
        "edges held out before training, for validation / test, scored by AUC, AP and "
        "Hits@20/50/100; the model trains only on the rest), cluster (k-means with as many "
        "clusters as classes: NMI, ARI, accuracy); linear and cluster need labels",
    )  # fmt: skip
    parser.add_argument("--config", help="JSON file of config fields (before the flags below)")
    parser.add_argument(
        "--quiet", "-q", action="store_true",
        help="print nothing but errors (no progress bar, summary, notes or warnings)",
    )  # fmt: skip
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
        path = check_input_file(args.config, "config file")
        try:
            loaded = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"config file {args.config!r} is not valid JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"config file {args.config!r} must hold a JSON object")
        # A result file of `--output` works too: its "config" entry is the config.
        fields.update(loaded["config"] if isinstance(loaded.get("config"), dict) else loaded)
    graph_file = getattr(args, "data", None)
    dataset = args.dataset or (graph_file and graph_file_name(graph_file))
    dataset = dataset or fields.get("dataset") or "synthetic"
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


def _setup(args: argparse.Namespace) -> tuple[TrainConfig, list[int], Optional[str]]:
    """The run's config and seeds from the command line, once every output is checked,
    and torch's thread count set (with the line that says so where it is not torch's
    default)."""
    if args.resume and not args.checkpoint:
        raise ValueError("--resume needs --checkpoint DIR")
    if args.root is not None and not Path(args.root).expanduser().is_dir():
        raise FileNotFoundError(f"data root {args.root!r} does not exist or is not a folder")
    device = resolve_device(args.device.split(":")[0] if args.distributed else args.device)
    missing = compiler_missing(device) if args.compile_blocks else None
    if missing:
        raise ValueError(f"--compile-blocks needs {missing} for torch.compile; none was found")
    _check_graph_args(args)
    seeds = list(range(args.seed, args.seed + args.seeds))
    _check_outputs(args, seeds)
    config = config_from_args(args)
    if is_graph_file(config.dataset) and not getattr(args, "data", None):
        raise ValueError(f"the config names a graph file ({config.dataset}): pass --data FILE")
    return config, seeds, set_threads(args.threads, config.dataset == "synthetic")


def _check_graph_args(args: argparse.Namespace) -> None:
    """``--data`` and the ``--save-*`` flags: a graph file takes no ``--root``; embeddings
    are ``.npy`` or ``.pt``."""
    if getattr(args, "data", None) is not None and args.root is not None:
        raise ValueError("--root locates --dataset's files; --data names the graph file itself")
    if getattr(args, "save_embeddings", None) is not None:
        check_embedding_path(args.save_embeddings, "--save-embeddings")


def _save_outputs(args, config: TrainConfig, model, data) -> None:
    """Writes ``--save-embeddings`` (every node, exact) and ``--save-model``, atomically.
    With ``--probe link`` the embeddings are of the graph the model trained on, without the
    held-out edges (the run's split, made again: it depends on the first seed alone)."""
    if data is None:
        data = load_dataset(config.dataset, args.root, quiet=args.quiet)
    if "link" in args.probe:
        data = split_edges(data, seed=args.seed).train_data
    if args.save_embeddings:
        shown, batched = not args.quiet, config.batch_size is not None
        with batch_bar("embedding: batch", shown, batched) as bar:
            z = embed(model, data, batch_size=config.batch_size, progress=bar)
        save_embeddings(z, args.save_embeddings)
        if not args.quiet:
            print(f"wrote {args.save_embeddings} ({z.size(0)} x {z.size(1)} embeddings)")
    if args.save_model:
        graph = str(args.data) if args.data else config.dataset
        save_model(model, args.save_model, metadata={"config": config.to_dict(), "graph": graph})
        if not args.quiet:
            print(f"wrote {args.save_model} (the model; pyg_progcl.io.load_model reads it)")


def _check_outputs(args: argparse.Namespace, seeds: list[int]) -> None:
    """Checks, before anything is loaded or trained, that every output the command line
    names can be written (in an existing folder; the checkpoint folder is created), that
    each is a file of its own, and that none is a file the run reads (the ``--data``
    graph, the ``--config`` file, a file of the checkpoint folder), so that a bad path
    fails at once and no result or input is lost to another output."""
    outputs = []
    for flag in ("output", "save_embeddings", "save_model"):
        path = getattr(args, flag, None)
        if path is not None:
            check_writable(path, "--" + flag.replace("_", "-"))
            outputs.append(("--" + flag.replace("_", "-"), path))
    inputs = [
        ("the --data graph file", getattr(args, "data", None)),
        ("the --config file", getattr(args, "config", None)),
    ]
    if getattr(args, "checkpoint", None):
        folder = check_folder(args.checkpoint, "--checkpoint")
        inputs += checkpoint_files(folder, seeds)
    check_distinct(outputs, inputs)


def _resume_config(args: argparse.Namespace, config: TrainConfig, seeds: list[int]) -> TrainConfig:
    """With ``--resume``: the checkpoint's warm-up unless ``--warmup-epochs`` is given (a
    preset's warm-up follows ``--epochs``, which a resumed run may raise), and a note on
    stderr when no seed has a checkpoint yet."""
    if not args.resume:
        return config
    found = [p for p in (checkpoint_path(Path(args.checkpoint), s) for s in seeds) if p.exists()]
    speaks = not args.distributed or os.environ.get("RANK", "0") == "0"
    if not found:
        if speaks and not args.quiet:
            print(
                f"pyg_progcl train: note: no checkpoint in {args.checkpoint}; starting from "
                "epoch 0", file=sys.stderr,
            )  # fmt: skip
        return config
    warmup = None if "warmup_epochs" in vars(args) else stored_warmup(found[0], config)
    if warmup is None:
        return config
    read_checkpoint(found[0])  # (a damaged checkpoint: its one line, not a note before it)
    if speaks and not args.quiet:
        print(
            f"pyg_progcl train: note: keeping the checkpoint's warm-up of {warmup} epochs "
            f"(not {config.warmup_epochs}; --warmup-epochs N sets it)", file=sys.stderr,
        )  # fmt: skip
    return config.replace(warmup_epochs=warmup)


def run_cli(args: argparse.Namespace) -> int:
    """Runs the ``train`` subcommand; returns the exit status. Warnings are one line each
    on stderr, through the progress bar (rank 0 only); ``--quiet`` silences them too."""
    speaks = not args.distributed or os.environ.get("RANK", "0") == "0"
    with command_line_warnings(show=speaks and not args.quiet):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """The ``train`` subcommand within :func:`run_cli`'s handling of warnings."""
    # Ranks join before anything can fail, so that a bad setup fails on all of them alike
    # (else the launcher may stop the others before they report it).
    ranks, device = join(args.device) if args.distributed else (ONE, args.device)
    try:
        # (outputs checked before the graph is read; every rank given rank 0's options)
        config, seeds, threads = agree(
            ranks, lambda: _setup(args), lambda run: _options(args, *run[:2]), "options"
        )
        fresh = None if args.resume else (lambda folder: check_fresh(folder, seeds))
        # The run holds its checkpoint folder from before the graph loads until its last
        # output is written: no second run on it starts meanwhile.
        with owned_folder(args.checkpoint, ranks, check=fresh):
            config = _resume_config(args, config, seeds)
            result, model, data = _train(args, config, seeds, ranks, device, threads)
            if not args.quiet and ranks.main:
                print(_summary_line(result, config, seeds))
                for line in _probe_lines(result):
                    print(line)
                if args.output:
                    print(f"wrote {args.output}")
            if model is not None and ranks.main:
                _save_outputs(args, config, model, data)
            if result.get("unsaved_checkpoints"):  # (the results are written first)
                raise OSError(errno.ENOSPC, result["unsaved_checkpoints"][0])
    except TrainingInterruptedError as exc:
        if ranks.main:
            print(f"{exc} (rerun with --resume to continue)", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        leave()
    return 0


def _train(args, config: TrainConfig, seeds: list[int], ranks, device, threads=None):
    """Loads the graph and trains; returns ``(result, model, graph)`` (the model of the
    first seed where ``--save-*`` asks for it, else ``None``). The ranks leave their group
    when training ends: what follows is rank 0's. The planning lines (``threads``, the
    path's note, the estimate) come once training is under way."""
    try:
        data = agree(ranks, lambda: _read_graph(args, config), graph_digests, "graphs")
        saving = bool(getattr(args, "save_embeddings", None) or getattr(args, "save_model", None))
        estimate, on = None, resolve_device(device)
        if not args.quiet and ranks.main:
            single = ranks.world_size == 1  # (several ranks need mini-batches)
            planned = path_note(data, config, on) if single else None
            offer = None if args.compile_blocks else compile_offer(data, config, on)
            estimate = RunEstimate(
                config, len(seeds), on, note, data=data, notes=[threads, planned], offers=[offer]
            )
        factory = None
        if args.compile_blocks:
            factory = functools.partial(
                build_loss, num_nodes=data.num_nodes, device=on, compile_blocks=True
            )
        result = train(
            config,
            data,
            seeds=seeds,
            root=args.root,
            device=device,
            checkpoint_dir=args.checkpoint,
            checkpoint_every=args.checkpoint_every,
            resume=args.resume,
            progress=not args.quiet,
            output=args.output,
            ranks=ranks,
            return_model=saving,
            probes=args.probe,
            callback=estimate,
            loss_factory=factory,
        )
    finally:
        leave()
    return (*result, data) if saving else (result, None, data)


def _mean_std(scores: dict[str, Any], key: str, name: str) -> str:
    """``name mean ± std`` of one score of a result's ``link`` / ``cluster`` object."""
    return f"{name} {scores['mean'][key]:.4f} ± {scores['std'][key]:.4f}"


def _probe_lines(result: dict[str, Any]) -> list[str]:
    """The summary's lines of link prediction and clustering (where the run asked for
    them): the test scores' means ± standard deviations over the seeds, or why there are
    none."""
    lines = []
    link = result.get("link")
    if link is not None:
        split = link["split"]
        scores = ", ".join(
            _mean_std(link, key, name)
            for key, name in [("auc", "AUC"), ("ap", "AP")]
            + [(f"hits@{k}", f"Hits@{k}") for k in (20, 50, 100)]
        )
        lines.append(
            f"  link prediction ({split['test_edges']} held-out test edges and as many "
            f"non-edges, {link['score']} scores; split seed {split['seed']}): {scores}"
        )
    cluster = result.get("cluster")
    if cluster is not None and "skipped" in cluster:
        lines.append(f"  clustering {cluster['skipped']}")
    elif cluster is not None:
        scores = ", ".join(
            _mean_std(cluster, key, name) for key, name in [("nmi", "NMI"), ("ari", "ARI"),
                                                             ("acc", "accuracy")]
        )  # fmt: skip
        lines.append(f"  clustering (k-means, {cluster['n_clusters']} clusters): {scores}")
    return lines


def _read_graph(args: argparse.Namespace, config: TrainConfig):
    """The ``--data`` graph file, else the config's dataset."""
    if getattr(args, "data", None):
        return read_graph(args.data)
    return load_dataset(config.dataset, args.root, quiet=args.quiet)


def _options(args: argparse.Namespace, config: TrainConfig, seeds: list[int]) -> dict[str, str]:
    """The options of the run that every rank must share (:func:`training_options`)."""
    return training_options(config, seeds, args.checkpoint, args.checkpoint_every, args.resume)


def _summary_line(result: dict[str, Any], config: TrainConfig, seeds: list[int]) -> str:
    """One line: the probe accuracy over the seeds (or why there is none), and the time."""
    times = (
        f"{config.epochs} epochs, {result['epoch_time_s'] * 1000:.1f} ms/epoch, "
        f"{result['wall_time_s']:.1f} s"
    )
    if result["accuracies"] is None:
        return (
            f"{result['dataset']} / {result['method']}: trained {len(seeds)} seed(s); "
            f"no accuracy: probe {result['probe']}; {times}"
        )
    accs = ", ".join(f"{a:.4f}" for a in result["accuracies"])
    return (
        f"{result['dataset']} / {result['method']}: accuracy "
        f"{result['accuracy_mean']:.4f} ± {result['accuracy_std']:.4f} "
        f"over {len(seeds)} seed(s) [{accs}]; {times}"
    )
