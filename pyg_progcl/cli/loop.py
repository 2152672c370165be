"""The training loops: :func:`train_seed` (one seed, with progress bar, periodic
evaluation, checkpoints and resume) and :func:`train` (several seeds, one JSON result)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
from torch_geometric.data import Data

from pyg_progcl.evaluation import EdgeSplit, split_edges
from pyg_progcl.io import GraphFieldWarning
from pyg_progcl.io.files import check_writable
from pyg_progcl.losses import ProGCLLoss
from pyg_progcl.losses.schedules import DEFAULT_SCHEDULE, schedule_name
from pyg_progcl.model import GRACEModel

from .checkpoint import (
    TrainingInterruptedError,
    check_fresh,
    checkpoint_files,
    checkpoint_folder,
    stop_requests,
)
from .checks import check_int
from .datasets import load_dataset
from .evaluation import check_probes, mean_std
from .files import atomic_write_text, check_distinct
from .parallel import ONE, Ranks
from .presets import TrainConfig, get_preset, is_graph_file
from .progress import BatchBar
from .run import NO_LABELS, NOT_ASKED, has_labels, mixture_state, start_seed

__all__ = ["train"]

#: The link prediction scores a result holds per seed.
LINK_KEYS = ("auc", "ap", "hits@20", "hits@50", "hits@100")
#: The clustering scores a result holds per seed.
CLUSTER_KEYS = ("nmi", "ari", "acc")
#: What a result's ``cluster`` object says on a graph without labels.
NO_CLUSTERS = "skipped: the graph has no labels to score clusters against"


def resolve_device(device: Union[str, torch.device]) -> torch.device:
    """``device`` as a ``torch.device``: ``cpu``, ``cuda`` / ``cuda:i`` (where CUDA has that
    device) or ``auto`` (CUDA if available); anything else a ``ValueError`` that says what
    is supported here."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cuda = ", cuda, cuda:0" + (f" .. cuda:{count - 1}" if count > 1 else "")
    here = "cpu, auto" + (cuda if count else " (CUDA is not available here)")
    if str(device) == "auto":
        return torch.device("cuda" if count else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        resolved = None
    if resolved is None or resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"device {str(device)!r} is not supported; use {here}")
    if resolved.type == "cuda" and (not count or (resolved.index or 0) >= count):
        raise ValueError(f"device {str(device)!r} requested but not available; use {here}")
    return resolved


def progress_postfix(loss_value: float, loss_fn: torch.nn.Module, degenerate: int = 0) -> str:
    """The progress bar's text: the loss and, for ProGCL, the mixture's fitted state, and
    the number of ``degenerate`` fits so far with the floor the schedule now puts on
    ``p(TN | s')``."""
    text = f"loss={loss_value:.4f}"
    if isinstance(loss_fn, ProGCLLoss):
        state = mixture_state(loss_fn)
        if state is None:
            return text + " bmm=warm-up"
        t = state["true_negative"]
        means = [a / (a + b) for a, b in zip(state["alpha"], state["beta"])]
        fn = 1 - t  # beta_FN < 1 with a large w_FN: a spike at cosine 1 (see ProGCLLoss)
        name = schedule_name(loss_fn.schedule)
        kept = "" if name == DEFAULT_SCHEDULE else f" ({name})"
        text += (
            f" bmm{kept}: mean TN={means[t]:.2f} FN={means[fn]:.2f} w_FN={state['weight'][fn]:.3f}"
            f" beta_FN={state['beta'][fn]:.2f}"
        )
        if degenerate:
            floor = loss_fn.schedule.posterior_floor
            text += f" degenerate={degenerate}" + (f" floor={floor:g}" if floor else "")
    return text


@contextlib.contextmanager
def first_warning_only(category: type[Warning]) -> Iterator[None]:
    """Within the block, shows the first warning of ``category`` and drops later ones."""
    with warnings.catch_warnings():
        show, shown = warnings.showwarning, []

        def show_first(message, kind, *args, **kwargs):
            if issubclass(kind, category):
                if shown:
                    return
                shown.append(message)
            show(message, kind, *args, **kwargs)

        warnings.showwarning = show_first
        yield


@contextlib.contextmanager
def command_line_warnings(show: bool = True) -> Iterator[None]:
    """Within the block, each warning is shown as one line ``warning: <message>`` on
    stderr, written through tqdm so that it never breaks a progress bar, and a line
    already shown in the block is not shown again (a command's seeds and its embedding
    meet the same graph); with ``show`` false (a command's ``--quiet``, a rank other than
    0) none is shown."""
    from tqdm.auto import tqdm

    shown: set[str] = set()
    with warnings.catch_warnings():
        if not show:
            warnings.simplefilter("ignore")

        def write(message, category, filename, lineno, file=None, line=None):
            text = "warning: " + " ".join(str(message).split())
            if text not in shown:
                shown.add(text)
                tqdm.write(text, file=sys.stderr)

        warnings.showwarning = write
        yield


def versions() -> dict[str, str]:
    """Versions of the library and its main dependencies, for result files (the trainer's
    and, through ``benchmarks/_stamp.py``, the benchmarks')."""
    import sklearn
    import torch_geometric

    from pyg_progcl import __version__

    return {
        "pyg_progcl": __version__,
        "torch": torch.__version__,
        "torch_geometric": torch_geometric.__version__,
        "numpy": np.__version__,
        "scikit-learn": sklearn.__version__,
        "python": platform.python_version(),
    }


def machine_info(device: Union[str, torch.device] = "cpu") -> dict[str, Any]:
    """The machine a result comes from: CPU model, cores, torch's CPU threads, the device
    (and its GPU's name), for result files (the trainer's and, through
    ``benchmarks/_stamp.py``, the benchmarks')."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as fh:
        cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    info = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
    }
    if str(device).startswith("cuda") and torch.cuda.is_available():  # ("auto" stays as named)
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def train_seed(
    config: TrainConfig,
    data: Data,
    seed: int = 0,
    *,
    device: Union[str, torch.device] = "cpu",
    checkpoint_dir: Optional[Union[str, os.PathLike]] = None,
    checkpoint_every: int = 50,
    resume: bool = False,
    progress: bool = True,
    callback: Optional[Callable[[int, dict[str, Any]], None]] = None,
    loss_factory: Optional[Callable[[TrainConfig], torch.nn.Module]] = None,
    ranks: Ranks = ONE,
    probes: Sequence[str] = ("linear",),
    edges: Optional[EdgeSplit] = None,
) -> tuple[GRACEModel, torch.nn.Module, dict[str, Any]]:
    """Trains and evaluates one model with one seed.

    Args:
        config: The hyperparameters.
        data: The graph (on any device; moved to ``device``).
        seed: Seeds the initialisation, the augmentations, the mixture's
            sampling, and the evaluation split.
        device: Torch device (``"auto"``: CUDA if available).
        checkpoint_dir: Folder for ``seed{seed}.pt``, written every
            ``checkpoint_every`` epochs and at the end (model, optimiser, loss
            with its mixture, epoch, RNG states, history, a record of the graph); a
            ProGCL run also keeps ``seed{seed}_warmup.pt``, its state at the end of the
            warm-up, to branch variants from (``resume``). The folder is created if
            missing and held by this run (a second run on it fails at once, naming this
            one's process id); without ``resume``, a folder that already holds this
            seed's checkpoint is refused (the run would replace it). Checkpoints are
            sealed with a checksum and written atomically, so that a run killed at any
            moment resumes. With a folder, a SIGTERM (in the main thread) stops training
            after the current epoch, which is checkpointed, and raises
            :class:`TrainingInterruptedError`.
        checkpoint_every: Checkpoint interval in epochs.
        resume: Continue from ``checkpoint_dir``'s checkpoint of this seed if
            there is one (it must be of the same graph, and have the same config, except
            ``epochs``, not below the checkpoint's epoch, so that a run is extended; and
            while both configs train with GRACE's loss up to it (GRACE, GCA, ProGCL in
            its warm-up), the method among those, ``warmup_epochs`` and the fields that
            act only after the warm-up: schedule, mixture options, ``num_samples``,
            ``shared_weights``; to branch, copy ``seed{seed}_warmup.pt`` or a GCA
            checkpoint into a new folder as ``seed{seed}.pt``). The result equals an
            uninterrupted run's.
        progress: Show a tqdm progress bar and evaluation lines.
        callback: Called as ``callback(epoch, info)`` after every epoch (and its
            checkpoint); ``info`` holds ``loss``, ``model``, ``loss_fn``.
        loss_factory: Builds the loss from the config instead of
            :func:`~pyg_progcl.cli.build_loss` (e.g. a :class:`ProGCLLoss` with its
            own :class:`~pyg_progcl.BetaMixture`). A
            :class:`ProGCLLoss`, subclasses included, is refitted every epoch after the
            warm-up.
        ranks: This process's place among several training processes
            (:func:`~pyg_progcl.cli.parallel.join`): data parallel mini-batch
            training; rank 0 alone writes checkpoints and shows progress, and a SIGTERM
            on any rank stops every rank after the same epoch.
        probes: The evaluations, one or more of ``"linear"`` (the linear probe),
            ``"link"`` (link prediction on held-out edges), ``"cluster"`` (k-means against
            the labels). With ``"link"`` the model trains, augments and is evaluated on
            ``edges.train_data`` only.
        edges: Link prediction's split (:func:`~pyg_progcl.evaluation.split_edges`);
            default, with ``"link"``: ``split_edges(data, seed=seed)``.

    Returns:
        ``(model, loss_fn, record)``; ``record`` holds ``seed``, ``accuracy``,
        ``history`` (evaluations), ``losses``, ``epoch_times``, ``wall_time_s`` (over
        every part of a resumed run), ``mixture``, and ``link`` (``{"val", "test"}``
        scores) and ``cluster`` as ``probes`` asks.
    """
    device = resolve_device(device)
    probes = check_probes(probes)
    if "link" in probes and edges is None:
        edges = split_edges(data, seed=seed)
    edges = edges if "link" in probes else None
    checkpoint_every = check_int("checkpoint_every", checkpoint_every)
    if resume and checkpoint_dir is None:
        raise ValueError("resume=True needs a checkpoint folder (--checkpoint DIR)")
    if config.diagnose_every and not has_labels(data):
        raise ValueError("`diagnose_every` counts false negatives by label; the graph has none")
    fresh = None if resume else (lambda folder: check_fresh(folder, [seed]))
    with owned_folder(checkpoint_dir, ranks, check=fresh):
        run, start = start_seed(
            config, data, seed, device, checkpoint_dir, resume, loss_factory, ranks, probes,
            edges,
        )  # fmt: skip
        if start >= config.epochs and "accuracy" in run.record:
            if any(p not in run.record for p in probes if p != "linear"):
                run.evaluate(start, run.record["losses"][-1])  # (a probe the run lacked)
            return run.model, run.loss_fn, run.record
        return _train_epochs(run, start, checkpoint_every, progress, callback)


@contextlib.contextmanager
def owned_folder(
    checkpoint_dir: Optional[Union[str, os.PathLike]],
    ranks: Ranks = ONE,
    check: Optional[Callable[[Path], None]] = None,
):
    """Rank 0 holds ``checkpoint_dir`` while the ``with`` block runs
    (:func:`~pyg_progcl.cli.checkpoint.checkpoint_folder`: created if missing,
    locked, stale temporary files removed) and then calls ``check(folder)``, which may
    refuse it with a ``ValueError`` (e.g.
    :func:`~pyg_progcl.cli.checkpoint.check_fresh`); if it cannot take it, or
    ``check`` refuses, every rank fails alike."""
    with contextlib.ExitStack() as stack:
        error = None
        if checkpoint_dir is not None and ranks.main:
            try:
                folder = stack.enter_context(checkpoint_folder(Path(checkpoint_dir)))
                if check is not None:
                    check(folder)
            except ValueError as exc:
                error = exc
        if ranks.any(error is not None):
            raise error or ValueError(f"rank 0 could not take checkpoint folder {checkpoint_dir}")
        yield


def _train_epochs(run, start: int, checkpoint_every: int, progress: bool, callback) -> tuple:
    """:func:`train_seed`'s epochs from ``start + 1`` on."""
    from tqdm.auto import tqdm

    config, seed, ranks = run.config, run.seed, run.ranks
    bar = tqdm(
        total=config.epochs,
        initial=start,
        desc=f"{config.dataset}/{config.method}{_encoder_tag(config)} seed {seed}",
        disable=not (progress and ranks.main),
        dynamic_ncols=True,
        leave=False,
    )
    run.model.train()
    # A mini-batch epoch's batches, on a line below the epochs'.
    shown = progress and ranks.main and run.loader is not None
    batches = BatchBar(disable=not shown, position=1)
    run.batch_progress = batches if run.loader is not None else None
    closing = contextlib.closing
    with stop_requests(run.path is not None) as stop, closing(bar), closing(batches):
        for epoch in range(start + 1, config.epochs + 1):
            value = run.step(epoch)
            bar.update(1)
            degenerate = len(run.record.get("degenerate_fits", ()))
            bar.set_postfix_str(progress_postfix(value, run.loss_fn, degenerate), refresh=False)
            last = epoch == config.epochs
            if last or (config.eval_every and epoch % config.eval_every == 0):
                scores = run.evaluate(epoch, value)
                if progress and ranks.main and not last and scores:
                    bar.write(f"  epoch {epoch:5d}  loss {value:.4f}  {score_text(scores)}")
            if config.diagnose_every and (last or epoch % config.diagnose_every == 0):
                run.diagnose(epoch)
            saved = last or epoch % checkpoint_every == 0 or run.ends_warmup(epoch)
            if saved:
                run.checkpoint(epoch)
            if callback is not None:
                callback(epoch, {"loss": value, "model": run.model, "loss_fn": run.loss_fn})
            if ranks.any(bool(stop)) and not last:  # every rank stops after the same epoch
                if not saved:
                    run.checkpoint(epoch)
                raise TrainingInterruptedError(epoch, run.path)
    run.tick()
    if run.unsaved is not None:
        run.record["unsaved_checkpoint"] = run.unsaved
    return run.model, run.loss_fn, run.record


def _encoder_tag(config: TrainConfig) -> str:
    """`` MLP`` for the MLP encoder (``diagnose`` trains both), else nothing."""
    return "" if config.encoder == "gcn" else f" {config.encoder.upper()}"


def score_text(scores: dict[str, Any]) -> str:
    """An evaluation's scores in one line: the linear probe's accuracy, the link
    prediction's test AUC and AP, the clustering's NMI, ARI and accuracy."""
    parts = []
    if "linear" in scores:
        parts.append(f"accuracy {scores['linear']['accuracy']:.4f}")
    if "link" in scores:
        test = scores["link"]["test"]
        parts.append(f"link auc {test['auc']:.4f} ap {test['ap']:.4f}")
    if "cluster" in scores:
        c = scores["cluster"]
        parts.append(f"cluster nmi {c['nmi']:.4f} ari {c['ari']:.4f} acc {c['acc']:.4f}")
    return "  ".join(parts)


def _per_seed(records, probe: str, keys: Sequence[str]) -> dict[str, Any]:
    """The result's ``link`` / ``cluster`` object: per-seed lists of ``keys`` (link
    prediction: the test scores, and the validation ones under ``val``), their means and
    standard deviations."""
    scores = [r[probe]["test"] if probe == "link" else r[probe] for r in records]
    out: dict[str, Any] = {k: [s[k] for s in scores] for k in keys}
    stats = {k: mean_std(out[k]) for k in keys}
    out["mean"] = {k: m for k, (m, _) in stats.items()}
    out["std"] = {k: sd for k, (_, sd) in stats.items()}
    if probe == "link":
        vals = [r["link"]["val"] for r in records]
        out["val"] = None if None in vals else {k: [v[k] for v in vals] for k in keys}
    return out


def _probe_results(probes, data, records, edges) -> dict[str, Any]:
    """The result's ``link`` and ``cluster`` objects (absent where not asked for; a
    graph without labels: ``cluster`` says why there is none)."""
    out: dict[str, Any] = {}
    if "link" in probes:
        out["link"] = {
            **_per_seed(records, "link", LINK_KEYS),
            "score": "cosine",
            "split": edges.sizes(),
        }
    if "cluster" in probes:
        if has_labels(data):
            out["cluster"] = {
                **_per_seed(records, "cluster", CLUSTER_KEYS),
                "n_clusters": records[0]["cluster"]["n_clusters"],
            }
        else:
            out["cluster"] = {"skipped": NO_CLUSTERS}
    return out


def _summarize(
    config, data, device, records, wall_time: float, probes=("linear",), edges=None
) -> dict[str, Any]:
    """The JSON-serialisable result of :func:`train` from its per-seed records."""
    accs = [r["accuracy"] for r in records]
    labelled = all(a is not None for a in accs)  # (unlabelled graphs train without a probe)
    mean, std = mean_std(accs) if labelled else (None, None)
    times = [t for r in records for t in r["epoch_times"]]
    if labelled:
        probe = f"linear probe, {config.protocol} protocol"
    else:
        probe = NO_LABELS if "linear" in probes else NOT_ASKED
    return {
        "dataset": config.dataset,
        "method": config.method,
        "config": config.to_dict(),
        "seeds": [r["seed"] for r in records],
        "accuracies": accs if labelled else None,
        "accuracy_mean": mean,
        "accuracy_std": std,
        "probe": probe,
        "probes": list(probes),
        **_probe_results(probes, data, records, edges),
        "epoch_time_s": float(np.mean(times)) if times else 0.0,
        "epoch_time_s_per_seed": [float(np.mean(r["epoch_times"])) for r in records],
        "wall_time_s": wall_time,
        "history": {str(r["seed"]): r["history"] for r in records},
        "final_loss": [r["losses"][-1] for r in records],
        "mixture": [r.get("mixture") for r in records],
        "diagnostics": {str(r["seed"]): r.get("diagnostics", []) for r in records},
        "degenerate_fits": {str(r["seed"]): r.get("degenerate_fits", []) for r in records},
        "branched": {str(r["seed"]): r["branched"] for r in records if r.get("branched")},
        "num_nodes": int(data.num_nodes),
        "num_edges": int(data.num_edges),
        "device": str(device),
        "machine": machine_info(device),
        "versions": versions(),
    }


def train(
    config: Optional[Union[TrainConfig, dict[str, Any]]] = None,
    data: Optional[Data] = None,
    *,
    seeds: Union[int, Sequence[int]] = 1,
    root: Optional[Union[str, os.PathLike]] = None,
    device: Union[str, torch.device] = "cpu",
    checkpoint_dir: Optional[Union[str, os.PathLike]] = None,
    checkpoint_every: int = 50,
    resume: bool = False,
    progress: bool = True,
    output: Optional[Union[str, os.PathLike]] = None,
    callback: Optional[Callable[[int, dict[str, Any]], None]] = None,
    loss_factory: Optional[Callable[[TrainConfig], torch.nn.Module]] = None,
    ranks: Ranks = ONE,
    return_model: bool = False,
    probes: Sequence[str] = ("linear",),
) -> Union[dict[str, Any], tuple[dict[str, Any], GRACEModel]]:
    """Trains ``config`` with several seeds and reports the probe accuracy.

    A graph without labels (no ``data.y``) trains the same, without a probe: the result's
    ``accuracies``, ``accuracy_mean`` and ``accuracy_std`` are ``None`` and its ``probe``
    says ``"skipped: the graph has no labels"``; ``return_model=True`` gives the model.

    Args:
        config: A :class:`TrainConfig`, a dict of overrides of the synthetic /
            GRACE preset (may name ``dataset`` and ``method``), or ``None``
            (ProGCL-weight on the built-in synthetic graph).
        data: The graph; default: ``load_dataset(config.dataset, root)``.
        seeds: A number of seeds (``0 .. seeds-1``) or the seeds themselves.
        root: Data root for :func:`~pyg_progcl.cli.datasets.load_dataset`.
        device: Torch device.
        checkpoint_dir, checkpoint_every, resume, progress, callback, loss_factory:
            See :func:`train_seed` (one checkpoint file per seed). The run holds the
            folder from before the graph loads until the JSON is written; without
            ``resume``, a folder that holds a checkpoint of one of ``seeds`` is refused
            before anything loads.
        output: Also write the result as JSON to this file (rank 0 only; not a file of
            the checkpoint folder).
        ranks: See :func:`train_seed`; every rank returns rank 0's result.
        return_model: Return ``(result, model)``: also the trained
            :class:`~pyg_progcl.GRACEModel` of the first seed, in eval mode, for
            ``model(x, edge_index)``, :func:`~pyg_progcl.io.embed` or
            :func:`~pyg_progcl.io.save_model`.
        probes: The evaluations (see :func:`train_seed`). With ``"link"`` one edge split,
            ``split_edges(data, seed=<the first seed>)``, is made before any training and
            every seed trains on its training graph.

    Returns:
        A JSON-serialisable dict: ``dataset``, ``method``, ``config``,
        ``seeds``, ``accuracies`` (fractions), ``accuracy_mean``,
        ``accuracy_std`` (``None`` without labels), ``probe`` (what evaluated the
        embeddings), ``epoch_time_s`` (mean seconds per training epoch),
        ``wall_time_s`` (seconds of training and evaluation, summed over the seeds; a
        resumed run's includes the time before the interruption), ``history``, ``final_loss``, ``mixture``, ``device``,
        ``versions``; ``probes``, and the ``link`` object (per-seed lists ``auc``,
        ``ap``, ``hits@20``, ``hits@50``, ``hits@100`` of the test pairs, their ``mean``
        and ``std``, the validation scores under ``val``, the pair ``score`` and the
        ``split``'s sizes and seed) and the ``cluster`` object (per-seed lists ``nmi``,
        ``ari``, ``acc``, their ``mean`` and ``std``, ``n_clusters``) where ``probes``
        names them;
        where a disk filled up, ``unsaved_checkpoints``: why the last
        checkpoints were not written (training went on without them).
    """
    if config is None:
        config = get_preset("synthetic", "progcl-weight")
    elif isinstance(config, dict):
        overrides = dict(config)
        config = get_preset(
            overrides.pop("dataset", "synthetic"), overrides.pop("method", "progcl-weight"),
            **overrides,
        )  # fmt: skip
    seed_list = list(range(check_int("seeds", seeds))) if isinstance(seeds, int) else list(seeds)
    if not seed_list:
        raise ValueError("`seeds` must name at least one seed")
    probes = check_probes(probes)
    repeated = sorted({s for s in seed_list if seed_list.count(s) > 1})
    if repeated:
        raise ValueError(f"`seeds` names seed {repeated[0]} more than once")
    device = resolve_device(device)
    if output is not None and ranks.main:
        check_writable(output, "output", create=True)  # before hours of training, not after
        if checkpoint_dir is not None:
            check_distinct([("output", output)], checkpoint_files(checkpoint_dir, seed_list))
    if data is None and is_graph_file(config.dataset):
        raise ValueError(
            f"dataset {config.dataset!r} is a graph file: pass its graph, "
            "data=pyg_progcl.io.read_graph(path)"
        )
    records = []
    # What the model cannot use of the graph (pyg_progcl.io.graph_for_model) is said once
    # per run, not once per seed.
    fresh = None if resume else (lambda folder: check_fresh(folder, seed_list))
    # The folder is held from before the graph loads until the result file is written.
    with owned_folder(checkpoint_dir, ranks, check=fresh), warnings.catch_warnings():
        warnings.simplefilter("default", GraphFieldWarning)
        if data is None:
            data = load_dataset(config.dataset, root, quiet=not progress)
        # Link prediction's edges are held out once, before any seed trains.
        edges = split_edges(data, seed=seed_list[0]) if "link" in probes else None
        for seed in seed_list:
            model, _, record = train_seed(
                config,
                data,
                seed,
                device=device,
                checkpoint_dir=checkpoint_dir,
                checkpoint_every=checkpoint_every,
                resume=resume,
                progress=progress,
                callback=callback,
                loss_factory=loss_factory,
                ranks=ranks,
                probes=probes,
                edges=edges,
            )
            records.append(record)
            if return_model and len(records) == 1:
                first_model = model.eval()
        wall_time = sum(r.get("wall_time_s", 0.0) for r in records)  # earlier parts included
        result = _summarize(config, data, device, records, wall_time, probes, edges)
        result["world_size"] = ranks.world_size
        unsaved = [r.pop("unsaved_checkpoint") for r in records if "unsaved_checkpoint" in r]
        if unsaved:
            result["unsaved_checkpoints"] = unsaved
        if output is not None and ranks.main:
            write_json(result, output)
    return (result, first_model) if return_model else result


def write_json(result: dict[str, Any], path: Union[str, os.PathLike]) -> None:
    """Writes a result dict as JSON (creating the folder), atomically: a reader never
    sees a half-written file, and a failed write leaves the old one."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(result, indent=2) + "\n")
