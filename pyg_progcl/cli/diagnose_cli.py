"""``python -m pyg_progcl diagnose``: the diagnostics from the command line.

Three ways to get a model:

* ``--checkpoint DIR_OR_FILE``: a checkpoint written by ``train --checkpoint DIR``
  (``DIR/seed{--seed}.pt``); its config, weights and ProGCL mixture are used (preset
  overrides, ``--config``, ``--epochs`` and another ``--dataset`` / ``--method`` are
  refused, not ignored). A checkpoint of ``train --data FILE`` needs ``--data FILE``.
* ``--epochs N``: train the preset ``N`` epochs, for each ``--encoder`` (GCN and/or the
  MLP control), and diagnose before and after training (``--every K`` tracks the
  summaries every ``K`` epochs).
* neither: the freshly initialised GCN and MLP of the preset.

The graph is ``--dataset``'s, or ``--data FILE``'s (a graph file with labels ``y``, read
as ``train --data`` reads it: :func:`pyg_progcl.io.read_graph`).

Writes ``<out>/diagnostics.json`` (summaries, plain floats), ``<out>/similarity.png``
(true/false-negative histograms with the mixture) and, when tracking,
``<out>/tracking.png``.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from pyg_progcl.diagnostics import diagnose
from pyg_progcl.io import read_graph
from pyg_progcl.io.files import check_input_file
from pyg_progcl.mixture import MixtureDegeneracyWarning

from .files import check_distinct
from .loop import resolve_device
from .planning import RunEstimate
from .threads import set_threads
from .train_cli import THREADS_HELP, add_preset_overrides, int_at_least, note

__all__: list[str] = []

_TABLE = [
    ("fn_share_topk", "FN@top-k"),
    ("fn_rate", "chance"),
    ("fn_share_topk_lift", "lift"),
    ("fn_share_topk_hardness", "FN@top-k(b)"),
    ("auc_similarity", "AUC sim"),
    ("auc_posterior", "AUC post"),
    ("mean_cos_tn", "cos TN"),
    ("mean_cos_fn", "cos FN"),
    ("loss_degenerate", "degenerate"),
]


#: Shown under ``diagnose --help``: what the printed columns mean.
COLUMNS_HELP = """\
columns of the printed table (one row per model; negatives are the inter-view pairs the
loss sees, a false negative (FN) a negative of the anchor's own class):
  FN@top-k     share of FNs among each anchor's top-k most similar negatives
  chance       share of FNs among all negatives (the level without any ranking)
  lift         FN@top-k / chance
  FN@top-k(b)  share of FNs among the top-k negatives of largest ProGCL hardness b
               (ProGCL's weighting works when it is below FN@top-k)
  AUC sim      ROC-AUC of the similarity at telling true from false negatives
               (1: perfect, 0.5: chance)
  AUC post     the same for p(true negative | s') of a Beta mixture fitted to them
  cos TN/FN    mean cosine of true / false negatives
  degenerate   1 when the training loss's own mixture is degenerate (a false-negative
               spike at cosine 1, see BetaMixture.degeneracy), 0 when healthy; nan
               when the model has no fitted ProGCL loss (initial models, other losses)"""

#: Preset fields that only the `train` command uses (its evaluation and logging schedule).
TRAIN_ONLY = ("eval_every", "diagnose_every")


def _optional_int(text: str):
    return None if text.lower() == "none" else int_at_least(1)(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the ``diagnose`` subcommand's arguments to ``parser``."""
    from .presets import METHODS

    parser.epilog = COLUMNS_HELP
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--dataset", help="dataset name (default: synthetic, needs no files)")
    source.add_argument(
        "--data", metavar="FILE",
        help="your graph, as for `train --data`: a .pt or .npz file with labels y (needed for "
        "a checkpoint of `train --data`)",
    )  # fmt: skip
    parser.add_argument("--root", help="data root (as for `train`)")
    parser.add_argument("--method", choices=METHODS, help="loss (default: progcl-weight)")
    parser.add_argument(
        "--encoder", dest="encoders", choices=("gcn", "mlp", "both"), default=None,
        help="message passing, the MLP control, or both (default)",
    )  # fmt: skip
    parser.add_argument(
        "--epochs", dest="train_epochs", type=int_at_least(0), default=0, metavar="N",
        help="train this many epochs and diagnose before/after (0: initial models only)",
    )  # fmt: skip
    parser.add_argument(
        "--every", type=int_at_least(0), default=0, metavar="N", help="track every N epochs"
    )
    parser.add_argument("--checkpoint", help="a `train --checkpoint` folder or .pt file")
    parser.add_argument("--seed", type=int_at_least(0), default=0, help="seed (default 0)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1")
    parser.add_argument("--threads", type=int_at_least(1), help=THREADS_HELP)
    parser.add_argument("--config", help="JSON file of config fields")
    parser.add_argument("--out", default="diagnostics", help="output folder")
    parser.add_argument("--no-plot", action="store_true", help="write no PNG files")
    parser.add_argument("--quiet", "-q", action="store_true", help="print nothing")
    group = parser.add_argument_group("diagnostics")
    group.add_argument(
        "--num-pairs", type=int_at_least(1), default=50_000, help="negative pairs sampled"
    )
    group.add_argument(
        "--top-k", type=int_at_least(1), default=10, metavar="K",
        help="most similar negatives inspected per anchor (default 10)",
    )  # fmt: skip
    group.add_argument(
        "--num-anchors", type=_optional_int, default=4096,
        help="anchors of the top-k ranking (default 4096; 'none': all nodes)",
    )  # fmt: skip
    group.add_argument(
        "--embeddings", choices=("views", "encoder"), default="views",
        help="views: the projected, augmented views the loss sees (default); encoder: the "
        "encoder's output compared with itself",
    )  # fmt: skip
    group.add_argument("--no-augment", action="store_true", help="un-augmented views")
    overrides = parser.add_argument_group("preset overrides (default: the preset's value)")
    add_preset_overrides(overrides, skip=("dataset", "method", "epochs", "encoder", *TRAIN_ONLY))


def _diagnose_kwargs(args) -> dict:
    return {
        "num_samples": args.num_pairs,
        "top_k": args.top_k,
        "num_anchors": args.num_anchors,
        "embeddings": args.embeddings,
        "augment": not args.no_augment,
        "seed": args.seed,
    }


def _check_no_overrides(args, config) -> None:
    """A checkpoint is diagnosed with its own config: refuse flags that would be ignored."""
    from .datasets import canonical_name

    fields = set(config.to_dict()) - {"dataset", "method", "epochs"}
    ignored = ["--" + k.replace("_", "-") for k in vars(args) if k in fields]
    ignored += ["--config"] if args.config else []
    ignored += ["--epochs"] if args.train_epochs else []
    ignored += [f"--encoder (the checkpoint's is {config.encoder})"] if args.encoders else []
    if args.dataset and canonical_name(args.dataset) != config.dataset:
        ignored.append(f"--dataset (the checkpoint's is {config.dataset})")
    if args.method and args.method != config.method:
        ignored.append(f"--method (the checkpoint's is {config.method})")
    if ignored:
        raise ValueError(
            f"--checkpoint diagnoses the checkpoint's own config; drop {', '.join(ignored)}"
        )


def _load_graph(args, config):
    """``--data``'s graph, else the config's dataset; a config of a graph file (a
    checkpoint of ``train --data``) needs ``--data``."""
    from .datasets import load_dataset
    from .presets import is_graph_file

    if args.data is not None:
        data = read_graph(args.data)
        if data.y is None:
            raise ValueError(
                f"{args.data} has no labels `y`: the diagnostics tell false negatives (pairs "
                "of one class) from true ones by them"
            )
        return data
    if is_graph_file(config.dataset):
        raise ValueError(
            f"the model was trained on a graph file ({config.dataset}): pass it with --data FILE"
        )
    return load_dataset(config.dataset, args.root, quiet=args.quiet)


def _from_checkpoint(args, kwargs):
    from .build import build_loss, build_model
    from .checkpoint import check_same_graph, graph_fingerprint, load_state, read_checkpoint
    from .presets import TrainConfig

    path = check_input_file(_checkpoint_file(args), "checkpoint")
    payload = read_checkpoint(path, resuming=False)
    config = TrainConfig.from_dict(payload["config"])
    _check_no_overrides(args, config)
    data = _load_graph(args, config)
    whose = f"--data {args.data}'s" if args.data is not None else f"the {config.dataset} here"
    advice = "diagnose it with the graph it was trained on"
    check_same_graph(path, payload["graph"], graph_fingerprint(data), whose, advice)
    model = build_model(config, data.num_features, data.num_nodes, data.x)
    load_state(path, "model", model, payload["model"])
    loss = build_loss(config)
    load_state(path, "loss", loss, payload["loss"])
    model, data = model.to(args.device), data.to(args.device)
    name = f"{config.encoder.upper()}, epoch {payload.get('epoch')}"
    return config, {name: diagnose(model, data, loss=loss, **kwargs)}, {}, {}


def _checkpoint_file(args) -> Path:
    """The checkpoint file ``--checkpoint`` names: the file, or a folder's ``--seed``'s."""
    path = Path(args.checkpoint)
    return path / f"seed{args.seed}.pt" if path.is_dir() else path


#: The files ``diagnose`` writes into ``--out``.
OUTPUT_FILES = ("diagnostics.json", "similarity.png", "tracking.png")


def _check_inputs_kept(args) -> None:
    """Refuses (one line) a file that ``--out`` would receive which is also an input: the
    ``--data`` graph, the ``--config`` file or the checkpoint."""
    outputs = [(f"--out's {name}", Path(args.out) / name) for name in OUTPUT_FILES]
    inputs = [("the --data graph file", args.data), ("the --config file", args.config)]
    inputs += [("the --checkpoint file", _checkpoint_file(args))] if args.checkpoint else []
    check_distinct(outputs, inputs)


def _from_preset(args, kwargs):
    from .control import compare_encoders
    from .train_cli import config_from_args

    args.epochs = args.train_epochs or None
    config = config_from_args(args)
    data = _load_graph(args, config)
    encoders = ("gcn", "mlp") if args.encoders in (None, "both") else (args.encoders,)
    trained = args.train_epochs > 0
    estimate = None
    if trained and not args.quiet:  # each encoder trains the preset's epochs
        device = resolve_device(args.device)
        estimate = RunEstimate(
            config, len(encoders), device, note, data=data, unit="encoder", one="--encoder gcn",
            notes=[args.threads_line],
        )  # fmt: skip
    reports = compare_encoders(
        data, config, encoders=encoders, train=trained, every=args.every if trained else 0,
        device=args.device, progress=not args.quiet, callback=estimate, **kwargs,
    )  # fmt: skip
    diags, history, accuracy = {}, {}, {}
    for enc, rep in reports.items():
        diags[f"{enc.upper()}, initial"] = rep.before
        if rep.after is not None:
            diags[f"{enc.upper()}, {config.epochs} epochs {config.method}"] = rep.after
            accuracy[enc] = rep.accuracy
        if rep.history:
            history[enc.upper()] = rep.history
    return config, diags, history, accuracy


def run_cli(args: argparse.Namespace) -> int:
    """Runs the ``diagnose`` subcommand; returns the exit status."""
    from .loop import command_line_warnings, first_warning_only, write_json

    if args.root is not None and not Path(args.root).expanduser().is_dir():
        raise FileNotFoundError(f"data root {args.root!r} does not exist or is not a folder")
    if args.data is not None and args.root is not None:
        raise ValueError("--root locates --dataset's files; --data names the graph file itself")
    _check_inputs_kept(args)
    if not args.no_plot and importlib.util.find_spec("matplotlib") is None:
        raise ValueError(
            "the plots need matplotlib: pip install matplotlib, or pass --no-plot "
            "(diagnostics.json and the table only)"
        )
    kwargs = _diagnose_kwargs(args)
    small = args.data is None and args.dataset in (None, "synthetic") and not args.checkpoint
    args.threads_line = set_threads(args.threads, small)  # (said once a run is under way)
    make = _from_checkpoint if args.checkpoint else _from_preset
    # One line per warning, through the progress bars; one about the mixture in all (the
    # cold fits' and the runs'); none with --quiet.
    with command_line_warnings(show=not args.quiet), first_warning_only(MixtureDegeneracyWarning):
        config, diags, history, accuracy = make(args, kwargs)
    out = Path(args.out)
    result = {
        "dataset": config.dataset,
        "method": config.method,
        "config": config.to_dict(),
        "diagnose": kwargs,
        "runs": {name: d.summary for name, d in diags.items()},
        "history": history,
        "probe_accuracy": accuracy,
    }
    write_json(result, out / "diagnostics.json")
    written = [out / "diagnostics.json"]
    if not args.no_plot:
        from pyg_progcl.diagnostics.plots import plot_comparison, plot_tracking

        plot_comparison(diags, out / "similarity.png", suptitle=config.dataset)
        written.append(out / "similarity.png")
        if history:
            title = f"{config.dataset}, {config.method}: false negatives over training"
            plot_tracking(history, out / "tracking.png", title=title)
            written.append(out / "tracking.png")
    if not args.quiet:
        if args.threads_line and not args.train_epochs:  # (else said at the first epoch)
            note(args.threads_line)
        print(format_table(result["runs"], accuracy))
        print("wrote " + ", ".join(map(str, written)))
    return 0


def format_table(runs: dict, accuracy: dict | None = None) -> str:
    """A plain-text table of the key numbers of ``{name: summary}``."""
    width = max(len(name) for name in runs) + 2
    head = "".join(f"{label:>12}" for _, label in _TABLE)
    lines = [f"{'':{width}}{head}"]
    for name, summary in runs.items():
        cells = "".join(f"{summary.get(key, float('nan')):12.3f}" for key, _ in _TABLE)
        lines.append(f"{name:{width}}{cells}")
    for enc, acc in (accuracy or {}).items():
        lines.append(f"linear-probe accuracy, {enc.upper()}: {acc:.4f}")
    return "\n".join(lines)
