"""Training: GRACE-style contrastive pre-training with any loss, then a linear probe.

The schedule of ProGCL (Xia et al., "ProGCL: Rethinking Hard Negative Mining in
Graph Contrastive Learning", ICML 2022), refitted online as in spec §5.1:
``warmup_epochs`` epochs with GRACE's loss, then the chosen loss, with
:meth:`ProGCLLoss.fit` called at every later epoch on that epoch's (detached)
views before the loss is computed. One :class:`ProGCLLoss` object serves both
phases (before its first fit it equals :class:`InfoNCELoss`).

Python::

    from pyg_progcl.presets import get_preset
    from pyg_progcl.train import train

    result = train(get_preset("Cora", "progcl-weight", epochs=50), seeds=2, root="data")
    print(result["accuracy_mean"], result["accuracy_std"])

Command line: ``python -m pyg_progcl train --dataset Cora --method progcl-weight``
(see :func:`add_arguments`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import random
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from ._checks import check_int
from .augment import (
    AdaptiveEdgeDrop,
    AdaptiveFeatureMask,
    Compose,
    EdgeDrop,
    FeatureMask,
)
from .datasets import DATASETS, canonical_name, load_dataset
from .encoders import GCNEncoder, MLPEncoder
from .evaluation import evaluate, mean_std
from .losses import DebiasedInfoNCELoss, HardInfoNCELoss, InfoNCELoss, ProGCLLoss
from .minibatch import embed_minibatch, minibatch_epoch, neighbor_loader
from .mixture import BetaMixture
from .model import GRACEModel
from .presets import METHODS, TrainConfig, get_preset

__all__ = [
    "add_arguments",
    "build_augmentations",
    "build_loss",
    "build_model",
    "main",
    "run_cli",
    "seed_everything",
    "train",
    "train_seed",
    "TrainingInterruptedError",
]

CHECKPOINT_FORMAT = 1
#: Config fields that may differ between a checkpoint and the resumed run
#: (they change what is logged, not what is trained).
_RESUME_FREE = {"eval_every", "diagnose_every"}
#: Config fields that act only after the warm-up (ProGCL's fit schedule and mixture): a
#: checkpoint written within the warm-up resumes under other values of them, so that
#: variants branch from one shared warm-up (each from a copy of ``seed{s}_warmup.pt``).
_AFTER_WARMUP = {"schedule", "min_beta_high", "mixture_weight_init", "num_samples"}


# ----------------------------------------------------------------------------- building blocks


def build_augmentations(config: TrainConfig) -> tuple[Compose, Compose]:
    """The two views' augmenters: GRACE's uniform edge drop + feature mask, or
    GCA's centrality-adaptive versions (``config.augmentation``)."""

    def view(pe: float, pf: float) -> Compose:
        if config.augmentation == "uniform":
            return Compose(EdgeDrop(pe), FeatureMask(pf))
        kind, cap = config.augmentation, config.aug_threshold
        return Compose(AdaptiveEdgeDrop(pe, kind, cap), AdaptiveFeatureMask(pf, kind, cap))

    return view(config.pe1, config.pf1), view(config.pe2, config.pf2)


#: Views whose feature matrix holds at least this many entries (256 MB of float32) are not
#: kept: the model recomputes them in backward (``GRACEModel(recompute_views=True)``).
RECOMPUTE_FEATURES = 1 << 26


def build_model(
    config: TrainConfig, in_channels: int, num_nodes: int = 0, x: Optional[Tensor] = None
) -> GRACEModel:
    """A :class:`GRACEModel` (encoder, projection head, augmenters) for ``config``.

    Views are recomputed in backward when each view's feature matrix would hold
    :data:`RECOMPUTE_FEATURES` entries: ``num_nodes × in_channels``, or with the features
    ``x`` the entries the model actually masks (the non-zeros where it feeds them sparse:
    Coauthor-Physics 1.1M, not 290M).
    """
    encoder_cls = GCNEncoder if config.encoder == "gcn" else MLPEncoder
    encoder = encoder_cls(
        in_channels, config.hidden, num_layers=config.num_layers, activation=config.activation
    )
    aug1, aug2 = build_augmentations(config)
    model = GRACEModel(encoder, config.hidden, config.proj, aug1, aug2)
    entries = num_nodes * in_channels
    if x is not None:
        x = model.input_features(x)  # (converted once here, cached for the first step)
        entries = x.values().numel() if x.layout == torch.sparse_csr else x.numel()
    model.recompute_views = entries >= RECOMPUTE_FEATURES
    return model


def build_loss(config: TrainConfig) -> torch.nn.Module:
    """The method's loss: InfoNCE (grace, gca), DCL, HCL or ProGCL (weight / mix)."""
    common = {
        "tau": config.tau,
        "block_size": config.block_size,
        "num_negatives": config.num_negatives,
    }
    if config.method in ("grace", "gca"):
        return InfoNCELoss(**common)
    if config.method == "dcl":
        return DebiasedInfoNCELoss(tau_plus=config.tau_plus, **common)
    if config.method == "hcl":
        return HardInfoNCELoss(tau_plus=config.tau_plus, beta=config.beta, **common)
    extra = {} if config.num_samples is None else {"num_samples": config.num_samples}
    mixture = {"min_beta_high": config.min_beta_high, "weight_init": config.mixture_weight_init}
    mixture = {k: v for k, v in mixture.items() if v is not None}
    if mixture:
        extra["mixture"] = BetaMixture(**mixture)
    mode = config.method.split("-", 1)[1]
    return ProGCLLoss(
        mode=mode, num_mix=config.num_mix, schedule=config.schedule, **extra, **common
    )


def seed_everything(seed: int) -> None:
    """Seeds Python's, NumPy's and torch's (CPU and CUDA) random generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _rng_state() -> dict[str, Any]:
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _resolve_device(device: Union[str, torch.device]) -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"invalid device {str(device)!r}: {exc}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} requested but CUDA is not available")
    return device


def _mixture_state(loss: torch.nn.Module) -> Optional[dict[str, Any]]:
    if not isinstance(loss, ProGCLLoss) or not loss.fitted:
        return None
    mix = loss.mixture
    return {
        "alpha": mix.alpha.tolist(),
        "beta": mix.beta.tolist(),
        "weight": mix.weight.tolist(),
        "true_negative": mix.true_negative_index,
    }


def _progress_postfix(loss_value: float, loss_fn: torch.nn.Module) -> str:
    text = f"loss={loss_value:.4f}"
    if isinstance(loss_fn, ProGCLLoss):
        state = _mixture_state(loss_fn)
        if state is None:
            return text + " bmm=warm-up"
        t = state["true_negative"]
        means = [a / (a + b) for a, b in zip(state["alpha"], state["beta"])]
        fn = 1 - t  # beta_FN < 1 with a large w_FN: a spike at cosine 1 (see ProGCLLoss)
        kept = "" if loss_fn.schedule == "online" else f" ({loss_fn.schedule})"
        text += (
            f" bmm{kept}: mean TN={means[t]:.2f} FN={means[fn]:.2f} w_FN={state['weight'][fn]:.3f}"
            f" beta_FN={state['beta'][fn]:.2f}"
        )
    return text


def versions() -> dict[str, str]:
    """Versions of the library and its main dependencies (for result files)."""
    import sklearn
    import torch_geometric

    from . import __version__

    return {
        "pyg_progcl": __version__,
        "torch": torch.__version__,
        "torch_geometric": torch_geometric.__version__,
        "numpy": np.__version__,
        "scikit-learn": sklearn.__version__,
        "python": platform.python_version(),
    }


# ----------------------------------------------------------------------------- checkpoints


def _checkpoint_path(directory: Path, seed: int) -> Path:
    return Path(directory) / f"seed{seed}.pt"


def warmup_checkpoint_path(path: Path) -> Path:
    """Where a ProGCL run keeps its checkpoint of the warm-up's last epoch, next to its
    checkpoint ``path``; variants branch from a copy of it (see ``resume``)."""
    return path.with_name(path.stem + "_warmup" + path.suffix)


def _save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)  # never a half-written checkpoint


class TrainingInterruptedError(Exception):
    """Raised by :func:`train_seed` when a SIGTERM asked it to stop: the epoch that was
    running finished and was checkpointed; ``resume=True`` continues from there."""

    def __init__(self, epoch: int, path: Path):
        super().__init__(f"stopped by SIGTERM after epoch {epoch}; checkpoint {path}")
        self.epoch, self.path = epoch, path


@contextlib.contextmanager
def _stop_requests(enabled: bool):
    """Turns SIGTERM (a scheduler's preemption, ``kill``) into a request, recorded in the
    yielded list, to stop at the end of the current epoch. A second SIGTERM acts at once.
    Only in the main thread (where Python runs signal handlers) and when ``enabled``."""
    requests: list[int] = []
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield requests
        return

    def request(signum, frame):
        requests.append(signum)
        signal.signal(signal.SIGTERM, previous)

    previous = signal.signal(signal.SIGTERM, request)
    previous = signal.SIG_DFL if previous is None else previous  # (set outside Python)
    try:
        yield requests
    finally:
        signal.signal(signal.SIGTERM, previous)


def _load_checkpoint(path: Path, config: TrainConfig) -> dict[str, Any]:
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if payload.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a pyg_progcl checkpoint (format {payload.get('format')})")
    saved, current = payload["config"], config.to_dict()
    diff = [k for k in current if k not in _RESUME_FREE and saved.get(k) != current[k]]
    in_warmup = payload["epoch"] <= saved.get("warmup_epochs", 0)
    if diff and not (in_warmup and set(diff) <= _AFTER_WARMUP):
        detail = ", ".join(f"{k}: {saved.get(k)!r} -> {current[k]!r}" for k in diff)
        raise ValueError(
            f"cannot resume from {path}: it was written with another config ({detail}); "
            "use another checkpoint folder or drop --resume (within the warm-up, only "
            f"{', '.join(sorted(_AFTER_WARMUP))} may differ)"
        )
    payload["branched_from"] = {k: saved.get(k) for k in diff}
    return payload


# ----------------------------------------------------------------------------- training


def _evaluate(model, data, config, seed) -> dict[str, Any]:
    """Linear-probe evaluation of the encoder output (OGB graphs: the official evaluator)."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        if config.batch_size is None:
            z = model(data.x, data.edge_index)
        else:  # exact, layer by layer over batches of nodes
            z = embed_minibatch(model, data, config.batch_size)
    model.train(was_training)
    return evaluate(
        z,
        data,
        config.protocol,
        split=config.split,
        seed=seed,
        probe_epochs=config.probe_epochs,
        ogb_name=config.dataset if config.dataset.startswith("ogbn-") else None,
    )


def _payload(epoch, config, model, optimizer, loss_fn, record) -> dict[str, Any]:
    """Everything a resumed run needs to continue bit-identically."""
    return {
        "format": CHECKPOINT_FORMAT,
        "config": config.to_dict(),
        "epoch": epoch,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "loss": loss_fn.state_dict(),
        "rng": _rng_state(),
        "record": record,
    }


def _restore(path, config, model, optimizer, loss_fn) -> tuple[int, dict[str, Any]]:
    """Loads a checkpoint into the objects; returns ``(epoch, record)``. A branch from a
    warm-up checkpoint (other after-warm-up fields) keeps its own, not yet fitted loss and
    notes the branch in ``record["branched"]``."""
    payload = _load_checkpoint(path, config)
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    record, branched_from = payload["record"], payload["branched_from"]
    if branched_from:
        record.setdefault("branched", []).append({"epoch": payload["epoch"], "from": branched_from})
    else:
        loss_fn.load_state_dict(payload["loss"])
    _set_rng_state(payload["rng"])
    return payload["epoch"], record


def _full_graph_epoch(model, loss_fn, optimizer, data: Data, refit: bool) -> float:
    """One optimisation step on the whole graph; ProGCL refits first when ``refit``."""
    optimizer.zero_grad()
    h1, h2 = model.views(data.x, data.edge_index)
    if refit:
        loss_fn.fit(h1.detach(), h2.detach())  # online refit, warm-started
    loss = loss_fn(h1, h2)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


@dataclasses.dataclass
class _SeedRun:
    """One seed's training state: what an epoch advances and a checkpoint saves."""

    config: TrainConfig
    data: Data
    seed: int
    device: torch.device
    model: GRACEModel
    loss_fn: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loader: Optional[Any]  # neighbour loader of mini-batch training, else None
    path: Optional[Path]  # checkpoint file, if any
    record: dict[str, Any]

    def step(self, epoch: int) -> float:
        """Trains one epoch (ProGCL refits first after the warm-up); returns its loss."""
        refit = isinstance(self.loss_fn, ProGCLLoss) and epoch > self.config.warmup_epochs
        tic = time.perf_counter()
        if self.loader is not None:
            value = minibatch_epoch(
                self.model, self.loss_fn, self.loader, self.optimizer, device=self.device, fit=refit
            )
        else:
            value = _full_graph_epoch(self.model, self.loss_fn, self.optimizer, self.data, refit)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.record["epoch_times"].append(time.perf_counter() - tic)
        self.record["losses"].append(value)
        return value

    def evaluate(self, epoch: int, value: float) -> float:
        """Probes the current embeddings; at the last epoch also stores the final result."""
        result = _evaluate(self.model, self.data, self.config, self.seed)
        self.record["history"].append(
            {"epoch": epoch, "accuracy": result["accuracy"], "loss": value}
        )
        if epoch == self.config.epochs:
            self.record["accuracy"] = result["accuracy"]
            self.record["evaluation"] = {k: v for k, v in result.items() if k != "accuracy"}
            self.record["mixture"] = _mixture_state(self.loss_fn)
        return result["accuracy"]

    def diagnose(self, epoch: int) -> None:
        """Appends the false-negative summary of this epoch to the record."""
        from .diagnostics import summarize  # lazy: diagnostics imports this module

        loss = self.loss_fn if isinstance(self.loss_fn, ProGCLLoss) else None
        summary = summarize(self.model, self.data, loss=loss, seed=self.seed)
        self.record.setdefault("diagnostics", []).append({"epoch": epoch, **summary})

    def ends_warmup(self, epoch: int) -> bool:
        """Whether ``epoch`` is the last one before ProGCL's first mixture fit."""
        return epoch == self.config.warmup_epochs and isinstance(self.loss_fn, ProGCLLoss)

    def checkpoint(self, epoch: int) -> None:
        """Saves the run; the warm-up's last epoch also to :func:`warmup_checkpoint_path`."""
        if self.path is not None:
            payload = _payload(
                epoch, self.config, self.model, self.optimizer, self.loss_fn, self.record
            )
            _save_checkpoint(self.path, payload)
            if self.ends_warmup(epoch):
                _save_checkpoint(warmup_checkpoint_path(self.path), payload)


def _start_seed(
    config, data, seed, device, checkpoint_dir, resume, loss_factory
) -> tuple[_SeedRun, int]:
    """Builds a seed's model, loss and optimiser (restored from its checkpoint when
    resuming); returns the run and the number of epochs already done."""
    loader = None
    if config.batch_size is None:
        data = data.to(device)
    else:  # the graph stays where it is; sampled batches go to the device
        fanout = config.num_neighbors or [10] * config.num_layers
        loader = neighbor_loader(data, fanout, config.batch_size, shuffle=True)
    path = None if checkpoint_dir is None else _checkpoint_path(Path(checkpoint_dir), seed)

    seed_everything(seed)
    model = build_model(config, data.num_features, data.num_nodes, data.x).to(device)
    loss_fn = (loss_factory or build_loss)(config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    record: dict[str, Any] = {"seed": seed, "history": [], "losses": [], "epoch_times": []}
    start = 0
    if resume and path is not None and path.exists():
        start, record = _restore(path, config, model, optimizer, loss_fn)
    run = _SeedRun(config, data, seed, device, model, loss_fn, optimizer, loader, path, record)
    return run, start


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
            with its mixture, epoch, RNG states, history); a ProGCL run also keeps
            ``seed{seed}_warmup.pt``, its state at the end of the warm-up, to branch
            variants from (``resume``). With a folder, a SIGTERM
            (in the main thread) stops training after the current epoch, which is
            checkpointed, and raises :class:`TrainingInterruptedError`.
        checkpoint_every: Checkpoint interval in epochs.
        resume: Continue from ``checkpoint_dir``'s checkpoint of this seed if
            there is one (it must have the same config, except that one written within
            the warm-up may differ in the fields that act only after it: schedule,
            mixture options, ``num_samples``; to branch, copy ``seed{seed}_warmup.pt``
            into a new folder as ``seed{seed}.pt``). The result equals an uninterrupted
            run's.
        progress: Show a tqdm progress bar and evaluation lines.
        callback: Called as ``callback(epoch, info)`` after every epoch (and its
            checkpoint); ``info`` holds ``loss``, ``model``, ``loss_fn``.
        loss_factory: Builds the loss from the config instead of :func:`build_loss`
            (e.g. a :class:`ProGCLLoss` with its own :class:`BetaMixture`). A
            :class:`ProGCLLoss`, subclasses included, is refitted every epoch after the
            warm-up.

    Returns:
        ``(model, loss_fn, record)``; ``record`` holds ``seed``, ``accuracy``,
        ``history`` (evaluations), ``losses``, ``epoch_times``, ``mixture``.
    """
    from tqdm.auto import tqdm

    device = _resolve_device(device)
    checkpoint_every = check_int("checkpoint_every", checkpoint_every)
    if resume and checkpoint_dir is None:
        raise ValueError("resume=True needs a checkpoint folder (--checkpoint DIR)")
    run, start = _start_seed(config, data, seed, device, checkpoint_dir, resume, loss_factory)
    if start >= config.epochs and "accuracy" in run.record:
        return run.model, run.loss_fn, run.record

    bar = tqdm(
        total=config.epochs,
        initial=start,
        desc=f"{config.dataset}/{config.method} seed {seed}",
        disable=not progress,
        dynamic_ncols=True,
        leave=False,
    )
    run.model.train()
    with _stop_requests(run.path is not None) as stop, contextlib.closing(bar):
        for epoch in range(start + 1, config.epochs + 1):
            value = run.step(epoch)
            bar.update(1)
            bar.set_postfix_str(_progress_postfix(value, run.loss_fn), refresh=False)
            last = epoch == config.epochs
            if last or (config.eval_every and epoch % config.eval_every == 0):
                accuracy = run.evaluate(epoch, value)
                if progress and not last:
                    bar.write(f"  epoch {epoch:5d}  loss {value:.4f}  accuracy {accuracy:.4f}")
            if config.diagnose_every and (last or epoch % config.diagnose_every == 0):
                run.diagnose(epoch)
            saved = last or epoch % checkpoint_every == 0 or run.ends_warmup(epoch)
            if saved:
                run.checkpoint(epoch)
            if callback is not None:
                callback(epoch, {"loss": value, "model": run.model, "loss_fn": run.loss_fn})
            if stop and not last:
                if not saved:
                    run.checkpoint(epoch)
                raise TrainingInterruptedError(epoch, run.path)
    return run.model, run.loss_fn, run.record


def _summarize(config, data, device, records, wall_time: float) -> dict[str, Any]:
    """The JSON-serialisable result of :func:`train` from its per-seed records."""
    accs = [r["accuracy"] for r in records]
    mean, std = mean_std(accs)
    times = [t for r in records for t in r["epoch_times"]]
    return {
        "dataset": config.dataset,
        "method": config.method,
        "config": config.to_dict(),
        "seeds": [r["seed"] for r in records],
        "accuracies": accs,
        "accuracy_mean": mean,
        "accuracy_std": std,
        "epoch_time_s": float(np.mean(times)) if times else 0.0,
        "epoch_time_s_per_seed": [float(np.mean(r["epoch_times"])) for r in records],
        "wall_time_s": wall_time,
        "history": {str(r["seed"]): r["history"] for r in records},
        "final_loss": [r["losses"][-1] for r in records],
        "mixture": [r.get("mixture") for r in records],
        "diagnostics": {str(r["seed"]): r.get("diagnostics", []) for r in records},
        "branched": {str(r["seed"]): r["branched"] for r in records if r.get("branched")},
        "num_nodes": int(data.num_nodes),
        "num_edges": int(data.num_edges),
        "device": str(device),
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
) -> dict[str, Any]:
    """Trains ``config`` with several seeds and reports the probe accuracy.

    Args:
        config: A :class:`TrainConfig`, a dict of overrides of the synthetic /
            GRACE preset (may name ``dataset`` and ``method``), or ``None``
            (ProGCL-weight on the built-in synthetic graph).
        data: The graph; default: ``load_dataset(config.dataset, root)``.
        seeds: A number of seeds (``0 .. seeds-1``) or the seeds themselves.
        root: Data root for :func:`~pyg_progcl.datasets.load_dataset`.
        device: Torch device.
        checkpoint_dir, checkpoint_every, resume, progress, callback, loss_factory:
            See :func:`train_seed` (one checkpoint file per seed).
        output: Also write the result as JSON to this file.

    Returns:
        A JSON-serialisable dict: ``dataset``, ``method``, ``config``,
        ``seeds``, ``accuracies`` (fractions), ``accuracy_mean``,
        ``accuracy_std``, ``epoch_time_s`` (mean seconds per training epoch),
        ``wall_time_s``, ``history``, ``final_loss``, ``mixture``, ``device``,
        ``versions``.
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
    device = _resolve_device(device)
    if data is None:
        data = load_dataset(config.dataset, root)

    tic = time.perf_counter()
    records = []
    for seed in seed_list:
        _, _, record = train_seed(
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
        )
        records.append(record)
    result = _summarize(config, data, device, records, time.perf_counter() - tic)
    if output is not None:
        write_json(result, output)
    return result


def write_json(result: dict[str, Any], path: Union[str, os.PathLike]) -> None:
    """Writes a result dict as JSON (creating the folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


# ----------------------------------------------------------------------------- command line

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
    "schedule": "ProGCL: online (refit every epoch), fit-once, or frozen (the papers' code)",
    "min_beta_high": "ProGCL: floor of the high-similarity component's beta (reference code: "
    "1.01; default none)",
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


#: argparse types of the config fields, by annotation
FIELD_TYPES = {
    "float": float, "int": int, "str": str,
    "Optional[int]": _optional(int, "an integer"),
    "Optional[float]": _optional(float, "a number"),
}  # fmt: skip


def _dataset_name(text: str) -> str:
    try:
        return canonical_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int_at_least(minimum: int):
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
    parser.add_argument("--epochs", type=_int_at_least(1), help="training epochs (preset)")
    parser.add_argument("--seeds", type=_int_at_least(1), default=1, help="number of seeds")
    parser.add_argument("--seed", type=_int_at_least(0), default=0, help="first seed")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 or auto")
    parser.add_argument(
        "--threads",
        type=_int_at_least(1),
        help="torch CPU threads (default: 1 for the small synthetic graph, where OpenMP "
        "overhead dominates; else torch's choice; 1 is also faster on a busy machine)",
    )
    parser.add_argument("--output", help="write the result as JSON to this file")
    parser.add_argument("--checkpoint", help="checkpoint folder (one file per seed)")
    parser.add_argument("--checkpoint-every", type=_int_at_least(1), default=50, metavar="N")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    parser.add_argument("--config", help="JSON file of config fields (before the flags below)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")
    group = parser.add_argument_group("preset overrides (default: the preset's value)")
    for field in dataclasses.fields(TrainConfig):
        if field.name in ("dataset", "method", "epochs"):
            continue
        if field.name == "num_neighbors":
            group.add_argument(
                "--num-neighbors", dest="num_neighbors", type=int, nargs="+",
                default=argparse.SUPPRESS, metavar="K", help=_FIELD_HELP["num_neighbors"],
            )  # fmt: skip
            continue
        group.add_argument(
            "--" + field.name.replace("_", "-"),
            dest=field.name,
            type=FIELD_TYPES[str(field.type)],
            default=argparse.SUPPRESS,
            help=_FIELD_HELP.get(field.name),
        )


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The preset of ``--dataset`` / ``--method`` with ``--config``'s fields and the flags applied.

    Dataset and method come from the flags, else from the ``--config`` file, else
    ``synthetic`` / ``progcl-weight``.
    """
    overrides: dict[str, Any] = {}
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
        overrides.update(loaded["config"] if isinstance(loaded.get("config"), dict) else loaded)
    dataset = args.dataset or overrides.pop("dataset", None) or "synthetic"
    method = args.method or overrides.pop("method", None) or "progcl-weight"
    overrides.pop("dataset", None)
    overrides.pop("method", None)
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    overrides.update({k: v for k, v in vars(args).items() if k in names and v is not None})
    overrides.pop("dataset", None)
    overrides.pop("method", None)
    return get_preset(dataset, method, **overrides)


def run_cli(args: argparse.Namespace) -> int:
    """Runs the ``train`` subcommand; returns the exit status."""
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
    seeds = list(range(args.seed, args.seed + args.seeds))
    try:
        result = train(
            config,
            seeds=seeds,
            root=args.root,
            device=args.device,
            checkpoint_dir=args.checkpoint,
            checkpoint_every=args.checkpoint_every,
            resume=args.resume,
            progress=not args.quiet,
            output=args.output,
        )
    except TrainingInterruptedError as exc:
        print(f"{exc} (rerun with --resume to continue)", file=sys.stderr)
        return 128 + signal.SIGTERM
    if not args.quiet:
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m pyg_progcl.train``: the ``train`` subcommand alone."""
    from .__main__ import main as package_main

    return package_main(["train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
