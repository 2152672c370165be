"""Checkpoints: everything a run needs to continue bit-identically (model, optimiser,
loss with its mixture, RNG states, history) and which graph it trained on, sealed with a
checksum, checked entry by entry when read, and written atomically into a folder that one
run at a time holds; SIGTERM as a request to stop after the running epoch."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import random
import signal
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from pyg_progcl.io.files import atomic_write, check_folder, payload_checksum, torch_save

from .files import LOCK_NAME, lock_folder, remove_temporaries
from .presets import TrainConfig

__all__ = ["TrainingInterruptedError"]

#: Version of the checkpoint layout; 2: sealed with a checksum (:func:`payload_checksum`);
#: 3: also records its graph (:func:`graph_fingerprint`).
CHECKPOINT_FORMAT = 3
#: What a checkpoint holds (``format`` and ``checksum`` besides).
_ENTRIES = ("config", "epoch", "model", "optimizer", "loss", "rng_ranks", "record", "graph")
#: What resuming advises when a checkpoint cannot be used (a run without ``--resume`` is
#: refused where a checkpoint of its seeds is: :func:`check_fresh`).
_START_AGAIN = "start again in another checkpoint folder"
#: Config fields that may differ between a checkpoint and the resumed run
#: (they change what is logged or how fast, not what is trained).
_RESUME_FREE = {"eval_every", "diagnose_every"}
#: Config fields that act only after the warm-up (ProGCL's fit schedule and mixture): a
#: checkpoint written within the warm-up resumes under other values of them, so that
#: variants branch from one shared warm-up (each from a copy of ``seed{s}_warmup.pt``).
_AFTER_WARMUP = {
    "schedule", "min_beta_high", "mixture_weight_init", "num_samples", "shared_weights", "floor",
}  # fmt: skip
#: Methods that train alike through the warm-up (the GRACE loss; GCA is GRACE on adaptive
#: augmentation, a config field of its own): a checkpoint of one written within the warm-up
#: also branches into another, e.g. GCA from ProGCL's warm-up, one trajectory for both.
_WARMUP_METHODS = {"grace", "gca", "progcl-weight", "progcl-mix"}
#: Methods trained with GRACE's loss at every epoch (their ``warmup_epochs`` acts on nothing).
_GRACE_METHODS = {"grace", "gca"}


def _grace_through(config: dict[str, Any], epoch: int) -> bool:
    """Whether ``config`` trains epochs ``1..epoch`` with GRACE's loss (GRACE, GCA; a
    ProGCL method within its warm-up)."""
    if config["method"] in _GRACE_METHODS:
        return True
    return config["method"] in _WARMUP_METHODS and epoch <= config["warmup_epochs"]


def resumable_fields(saved: dict[str, Any], current: dict[str, Any], epoch: int) -> set[str]:
    """The config fields besides :data:`_RESUME_FREE` in which ``current`` may differ from
    ``saved`` and still resume its checkpoint written at ``epoch``: ``epochs`` if not below
    ``epoch`` (a run is extended or shortened to no fewer epochs than done; nothing else
    depends on it); and while both train with GRACE's loss up to ``epoch``, also
    ``warmup_epochs``, the method (among :data:`_WARMUP_METHODS`) and the fields of
    :data:`_AFTER_WARMUP`."""
    free = {"epochs"} if epoch <= current["epochs"] else set()
    if _grace_through(saved, epoch) and _grace_through(current, epoch):
        free |= _AFTER_WARMUP | {"method", "warmup_epochs"}
    return free


def rng_state() -> dict[str, Any]:
    """The states of torch's (CPU, CUDA), NumPy's and Python's generators, as tensors and
    lists (loadable with ``weights_only=True``)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restores the generators from :func:`rng_state`'s dict."""
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_path(directory: Path, seed: int) -> Path:
    """A seed's checkpoint file in ``directory``."""
    return Path(directory) / f"seed{seed}.pt"


def warmup_checkpoint_path(path: Path) -> Path:
    """Where a ProGCL run keeps its checkpoint of the warm-up's last epoch, next to its
    checkpoint ``path``; variants branch from a copy of it (see ``resume``)."""
    return path.with_name(path.stem + "_warmup" + path.suffix)


def check_fresh(directory: Path, seeds: Sequence[int]) -> None:
    """Refuses to start a run of ``seeds`` afresh in ``directory`` where it holds a
    checkpoint of one of them (main or warm-up): the run would replace an earlier run's
    checkpoints; ``resume`` continues them.

    Raises:
        ValueError: one line naming the files found.
    """
    found = []
    for seed in seeds:
        path = checkpoint_path(directory, seed)
        found += [p.name for p in (path, warmup_checkpoint_path(path)) if p.exists()]
    if found:
        raise ValueError(
            f"checkpoint folder {str(directory)!r} already holds {', '.join(found)} of an "
            "earlier run: pass --resume (resume=True) to continue it, or use another folder "
            "(or delete those files) to start again"
        )


def checkpoint_files(directory: Path, seeds: Sequence[int]) -> list[tuple[str, Path]]:
    """The files of checkpoint folder ``directory`` that a run of ``seeds`` reads or
    writes, as ``(what, path)`` pairs for :func:`~pyg_progcl.cli.files.check_distinct`: each
    seed's checkpoint and warm-up checkpoint, the lock file, every checkpoint there."""
    directory = Path(directory).expanduser()
    paths = [directory / LOCK_NAME]
    for seed in seeds:
        path = checkpoint_path(directory, seed)
        paths += [path, warmup_checkpoint_path(path)]
    if directory.is_dir():
        paths += sorted(directory.glob("seed*.pt"))
    return [(f"{p.name} of the checkpoint folder", p) for p in dict.fromkeys(paths)]


#: Bytes of each of a graph's tensors that :func:`graph_fingerprint` hashes: a tensor up to
#: this size whole, a larger one in evenly spaced chunks of :data:`_HASH_CHUNK` bytes.
_HASH_BYTES = 32 * 2**20
_HASH_CHUNK = 2**16
#: The sizes a graph's record holds besides its hash.
_GRAPH_SIZES = ("num_nodes", "num_edges", "num_features")


def graph_fingerprint(data) -> dict[str, Any]:
    """What a checkpoint records of its graph, so that it resumes on that graph only:
    ``num_nodes``, ``num_edges``, ``num_features`` and ``hash``, a SHA-256 of the dtype,
    shape and bytes of ``x``, ``edge_index``, ``edge_weight`` and ``y`` (or their absence).
    A tensor of up to 32 MiB is hashed whole; a larger one by 512 evenly spaced chunks of
    64 KiB (its first and last bytes among them), so that a graph of any size costs at
    most about 128 MiB of hashing: 0.1-0.2 s on one core."""
    digest = hashlib.sha256()
    for key in ("x", "edge_index", "edge_weight", "y"):
        value = data.get(key)
        digest.update(f"{key}:".encode())
        if isinstance(value, torch.Tensor):
            _feed_sampled(digest, value.detach())
        else:
            digest.update(f"{type(value).__name__};".encode())
    x = data.get("x")
    features = int(x.size(-1)) if isinstance(x, torch.Tensor) and x.dim() > 1 else 0
    return {
        "num_nodes": int(data.num_nodes),
        "num_edges": int(data.num_edges),
        "num_features": features,
        "hash": digest.hexdigest(),
    }


def _feed_sampled(digest, tensor: torch.Tensor) -> None:
    """Feeds ``tensor``'s dtype, shape and bytes (sampled beyond :data:`_HASH_BYTES`) to
    ``digest``; a sparse tensor by its indices and values."""
    if tensor.layout != torch.strided:
        coo = tensor.to_sparse_coo().coalesce()
        digest.update(f"S{tensor.dtype}{tuple(tensor.shape)};".encode())
        _feed_sampled(digest, coo.indices())
        _feed_sampled(digest, coo.values())
        return
    digest.update(f"T{tensor.dtype}{tuple(tensor.shape)};".encode())
    flat = tensor.contiguous().reshape(-1).view(torch.uint8)
    size = flat.numel()
    if size > _HASH_BYTES:  # (gathered on the tensor's device: only the chunks move)
        count = _HASH_BYTES // _HASH_CHUNK
        step = (size - _HASH_CHUNK) // (count - 1)
        flat = flat.as_strided((count, _HASH_CHUNK), (step, 1))
    digest.update(flat.cpu().contiguous().numpy())


def describe_graph(graph: dict[str, Any]) -> str:
    """A graph's record (:func:`graph_fingerprint`) in words: ``40 nodes, 120 edges, 5
    features``."""
    return ", ".join(f"{graph[k]} {k.split('_')[1]}" for k in _GRAPH_SIZES)


def check_same_graph(
    path: Path, saved: dict[str, Any], current: dict[str, Any], whose: str, advice: str
) -> None:
    """A one-line ``ValueError`` unless the checkpoint at ``path``, whose graph record is
    ``saved``, was trained on the graph of record ``current`` (:func:`graph_fingerprint`);
    ``whose`` names that graph (``"this run's"``), ``advice`` what to do instead."""
    if saved == current:
        return
    if all(saved[k] == current[k] for k in _GRAPH_SIZES):
        detail = f" than {whose}: the same size ({describe_graph(saved)}) but other contents"
    else:
        detail = f": {describe_graph(saved)}, not {whose} ({describe_graph(current)})"
    raise ValueError(f"{path} was trained on another graph{detail}; {advice}")


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Seals ``payload`` with its checksum and writes it to ``path`` atomically (never a
    half-written checkpoint, even when the process is killed while writing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {**payload, "format": CHECKPOINT_FORMAT}
    payload["checksum"] = payload_checksum(payload)
    atomic_write(path, lambda tmp: torch_save(payload, tmp))


@contextlib.contextmanager
def checkpoint_folder(directory: Path) -> Iterator[Path]:
    """Creates ``directory`` if missing, holds its lock while the ``with`` block runs (a
    second run on it fails at once, naming this one's process id) and removes the
    temporary files that a killed run left there."""
    directory = check_folder(directory, "checkpoint folder")
    with lock_folder(directory, "checkpoint folder"):
        remove_temporaries(directory, also=("seed*.pt.tmp",))  # (older versions' name)
        yield directory


class TrainingInterruptedError(Exception):
    """Raised by :func:`train_seed` when a SIGTERM asked it to stop: the epoch that was
    running finished and was checkpointed; ``resume=True`` continues from there."""

    def __init__(self, epoch: int, path: Path):
        super().__init__(f"stopped by SIGTERM after epoch {epoch}; checkpoint {path}")
        self.epoch, self.path = epoch, path


@contextlib.contextmanager
def stop_requests(enabled: bool):
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


def read_checkpoint(path: Path, resuming: bool = True) -> dict[str, Any]:
    """The checkpoint at ``path``, checked: complete, of this version's format and config
    fields, unchanged since it was written (its checksum), and each entry of the types
    and values this version writes (:func:`_check_entries`: a file edited and sealed
    anew, or written by another program); else a one-line ``ValueError``, with advice on
    resuming where ``resuming``."""

    def advice(text: str) -> str:
        return f"; {text}" if resuming else ""

    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except OSError:
        raise
    except Exception as exc:  # truncated, foreign or not a torch file
        kind = type(exc).__name__  # (torch's messages run over several lines)
        raise ValueError(
            f"{path} is not a readable pyg_progcl checkpoint ({kind}: truncated, corrupted or "
            "not a checkpoint)" + advice(f"resume from an intact copy, or {_START_AGAIN}")
        ) from None
    if not isinstance(payload, dict):
        raise ValueError(f"{path} is not a pyg_progcl checkpoint (a {type(payload).__name__})")
    found = payload.get("format")
    if found != CHECKPOINT_FORMAT:
        age = "an older" if isinstance(found, int) and found < CHECKPOINT_FORMAT else "another"
        raise ValueError(
            f"{path} is not a checkpoint this version can {'resume' if resuming else 'read'} "
            f"(format {found!r}, written by {age} version of pyg_progcl; this one reads format "
            f"{CHECKPOINT_FORMAT})" + advice(_START_AGAIN)
        )
    missing = [k for k in (*_ENTRIES, "checksum") if k not in payload]
    if missing:
        raise ValueError(
            f"{path} is an incomplete checkpoint (no {', '.join(map(repr, missing))} entry): "
            "edited or written by another program" + advice(_START_AGAIN)
        )
    if not isinstance(payload["config"], dict):
        raise ValueError(f"{path} is not a pyg_progcl checkpoint (no config)")
    if payload_checksum(payload) != payload["checksum"]:
        raise ValueError(
            f"{path} is corrupted or was edited: its content does not match its checksum"
            + advice(f"resume from an intact copy, or {_START_AGAIN}")
        )
    _check_config_fields(path, payload["config"], advice)
    _check_entries(path, payload, advice)
    return payload


def _check_entries(path: Path, payload: dict[str, Any], advice) -> None:
    """A one-line ``ValueError`` unless every entry of a checkpoint (checksum and config
    fields already checked) has the types and values this version writes: a valid
    config, an epoch from 0 to its epochs, state dicts, generator states that the
    generators accept, a record of one loss and time per epoch, a graph record."""

    def refuse(entry: str, problem: str):
        return ValueError(
            f"{path}: its {entry} {problem} (edited, or written by another program)"
            + advice(f"resume from an intact copy, or {_START_AGAIN}")
        )

    try:
        config = TrainConfig.from_dict(payload["config"])
    except (ValueError, TypeError) as exc:
        raise refuse("config", f"is invalid ({str(exc).splitlines()[0][:200]})") from None
    epoch = payload["epoch"]
    if not _is_int(epoch) or not 0 <= epoch <= config.epochs:
        raise refuse("epoch", f"{epoch!r} is not a whole number from 0 to {config.epochs}")
    for entry in ("model", "loss"):
        state = payload[entry]
        if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
        ):
            raise refuse(entry, "is not a state dict (names of tensors)")
    optimizer = payload["optimizer"]
    if not (
        isinstance(optimizer, dict)
        and isinstance(optimizer.get("state"), dict)
        and isinstance(optimizer.get("param_groups"), list)
        and all(isinstance(g, dict) for g in optimizer["param_groups"])
    ):
        raise refuse("optimizer", "is not an optimizer's state dict")
    _check_rng(payload["rng_ranks"], refuse)
    _check_record(payload["record"], epoch, refuse)
    graph = payload["graph"]
    if not (
        isinstance(graph, dict)
        and all(_is_int(graph.get(k)) and graph[k] >= 0 for k in _GRAPH_SIZES)
        and isinstance(graph.get("hash"), str)
    ):
        raise refuse("graph", f"is not a graph's record ({', '.join(_GRAPH_SIZES)}, hash)")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_rng(states: Any, refuse) -> None:
    """Every rank's generator states must be accepted by the generators (tried here, and
    this process's own states put back)."""
    if not isinstance(states, list) or not states:
        raise refuse("rng_ranks", "is not a list of generator states")
    own = rng_state()
    try:
        for state in states:
            set_rng_state(state)
    except Exception as exc:  # (each generator's own check: a type, size or value)
        kind = type(exc).__name__
        raise refuse("rng_ranks", f"holds an invalid generator state ({kind})") from None
    finally:
        set_rng_state(own)


def _check_record(record: Any, epoch: int, refuse) -> None:
    """The record of a run at ``epoch``: its seed, history, and one loss and one time for
    each epoch done."""
    lists = ("history", "losses", "epoch_times")
    if not isinstance(record, dict) or not _is_int(record.get("seed")):
        raise refuse("record", "has no seed")
    for key in lists:
        if not isinstance(record.get(key), list):
            raise refuse("record", f"has no list of {key}")
    for key in ("losses", "epoch_times"):
        values = record[key]
        if len(values) != epoch or not all(_is_number(v) for v in values):
            raise refuse("record", f"does not hold one number of {key} per epoch ({epoch})")
    if not all(isinstance(h, dict) for h in record["history"]):
        raise refuse("record", "has a history that is not a list of evaluations")
    if not _is_number(record.get("wall_time_s", 0.0)):
        raise refuse("record", "has a wall time that is not a number")
    if record.get("accuracy") is not None and not _is_number(record["accuracy"]):
        raise refuse("record", "has an accuracy that is not a number")


def _check_config_fields(path: Path, config: dict[str, Any], advice) -> None:
    """A one-line ``ValueError`` unless the checkpoint's ``config`` has exactly the fields of
    this version's :class:`TrainConfig` (a checkpoint of an older or newer layout)."""
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    unknown = sorted(set(config) - set(names))
    missing = [name for name in names if name not in config]
    if unknown or missing:
        differ = [f"unknown {', '.join(map(repr, unknown))}"] if unknown else []
        differ += [f"no {', '.join(map(repr, missing))}"] if missing else []
        raise ValueError(
            f"{path} was written by another version of pyg_progcl (config fields: "
            f"{'; '.join(differ)})" + advice(_START_AGAIN)
        )


def load_checkpoint(
    path: Path, config: TrainConfig, graph: Optional[dict[str, Any]] = None
) -> dict[str, Any]:
    """The checkpoint at ``path`` (:func:`read_checkpoint`) if ``config`` may resume from
    it on the graph of record ``graph`` (:func:`graph_fingerprint`; ``None``: not
    checked), else a ``ValueError`` that names the graph or the config fields that
    differ."""
    payload = read_checkpoint(path)
    if graph is not None:
        advice = "use another checkpoint folder, or resume on the graph it was trained on"
        check_same_graph(path, payload["graph"], graph, "this run's", advice)
    saved = payload["config"]
    current = config.to_dict()
    diff = [k for k in current if k not in _RESUME_FREE and saved.get(k) != current[k]]
    refused = set(diff) - resumable_fields(saved, current, payload["epoch"])
    if refused:
        detail = ", ".join(f"{k}: {saved.get(k)!r} -> {current[k]!r}" for k in diff if k in refused)
        raise ValueError(
            f"cannot resume from {path} (epoch {payload['epoch']}): it was written with "
            f"another config ({detail}); {_START_AGAIN} "
            "(`epochs` may differ if not below the checkpoint's epoch; within the warm-up, "
            f"only warmup_epochs, {', '.join(sorted(_AFTER_WARMUP))} and a method among "
            f"{', '.join(sorted(_WARMUP_METHODS))} may differ besides)"
        )
    payload["branched_from"] = {k: saved.get(k) for k in diff}
    return payload


def stored_warmup(path: Path, config: TrainConfig) -> Optional[int]:
    """The warm-up of the ProGCL run whose checkpoint is at ``path``, where it differs from
    ``config``'s and would be valid in it; else ``None`` (also when ``path`` is no
    readable checkpoint: resuming it reports why)."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)["config"]
        warmup, method = int(saved["warmup_epochs"]), str(saved["method"])
    except Exception:
        return None
    if method not in _WARMUP_METHODS - _GRACE_METHODS or warmup == config.warmup_epochs:
        return None
    return warmup if 0 <= warmup < config.epochs else None


def checkpoint_payload(
    epoch, config, model, optimizer, loss_fn, record, rng: Optional[list] = None, graph=None
) -> dict[str, Any]:
    """Everything a resumed run needs to continue bit-identically; ``rng``: every rank's
    generator states (default: this process's); ``graph``: the record of the graph it
    trains on (:func:`graph_fingerprint`)."""
    rng = [rng_state()] if rng is None else rng
    return {
        "format": CHECKPOINT_FORMAT,
        "config": config.to_dict(),
        "epoch": epoch,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "loss": loss_fn.state_dict(),
        "rng_ranks": rng,
        "record": record,
        "graph": graph,
    }


def restore_checkpoint(
    path, config, model, optimizer, loss_fn, ranks=None, graph=None
) -> tuple[int, dict[str, Any]]:
    """Loads a checkpoint into the objects; returns ``(epoch, record)``. ``graph``: the
    record of the run's graph (:func:`graph_fingerprint`), which must be the
    checkpoint's. A branch from a warm-up checkpoint (other after-warm-up fields, another
    warm-up method) keeps its own, not yet fitted loss; every resumed config difference
    (a branch, other ``epochs``) is noted in ``record["branched"]``."""
    payload = load_checkpoint(path, config, graph)
    rank, world_size = (0, 1) if ranks is None else (ranks.rank, ranks.world_size)
    states = payload["rng_ranks"]
    if len(states) != world_size:
        raise ValueError(
            f"{path} was written by {len(states)} process(es); resume it with as many "
            f"(got {world_size})"
        )
    record, branched_from = payload["record"], payload["branched_from"]
    load_state(path, "model", model, payload["model"])
    load_state(path, "optimizer", optimizer, payload["optimizer"])
    _check_optimizer(path, optimizer)
    if not set(branched_from) & (_AFTER_WARMUP | {"method"}):
        load_state(path, "loss", loss_fn, payload["loss"])
    if branched_from:
        record.setdefault("branched", []).append({"epoch": payload["epoch"], "from": branched_from})
    set_rng_state(states[rank])
    return payload["epoch"], record


def load_state(path: Path, entry: str, module: Any, state: dict[str, Any]) -> None:
    """``module.load_state_dict(state)``; a mismatch as one line naming ``entry`` of the
    checkpoint at ``path``."""
    try:
        module.load_state_dict(state)
    except Exception as exc:  # (whatever the module's own check raises)
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = "; ".join(lines[:3])[:300]
        raise ValueError(f"{path}: its {entry} does not fit this run's ({detail})") from None


def _check_optimizer(path: Path, optimizer: torch.optim.Optimizer) -> None:
    """After loading a checkpoint's optimiser state: each per-parameter state tensor
    (Adam's moments) has its parameter's shape, and each numeric hyperparameter is a
    number, so that a checkpoint that does not fit fails here, not at the first step."""

    def refuse(detail: str):
        return ValueError(f"{path}: its optimizer does not fit this run's ({detail})")

    for i, group in enumerate(optimizer.param_groups):
        for key in ("lr", "eps", "weight_decay"):
            if key in group and not _is_number(group[key]):
                raise refuse(f"param group {i}: {key} {group[key]!r}")
        betas = group.get("betas", (0.0, 0.0))
        if not (isinstance(betas, (tuple, list)) and all(_is_number(b) for b in betas)):
            raise refuse(f"param group {i}: betas {betas!r}")
        for param in group["params"]:
            for name, value in optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != param.shape:
                    shape = list(value.shape)
                    raise refuse(f"{name} of shape {shape} for a parameter of {list(param.shape)}")
