"""Checkpoints: everything a run needs to continue bit-identically (model, optimiser,
loss with its mixture, RNG states, history), sealed with a checksum and written
atomically into a folder that one run at a time holds; SIGTERM as a request to stop
after the running epoch."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import random
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from .._files import atomic_write, check_folder, lock_folder, remove_temporaries
from .presets import TrainConfig

#: Version of the checkpoint layout; 2: sealed with a checksum (:func:`payload_checksum`).
CHECKPOINT_FORMAT = 2
#: What a checkpoint holds (``format`` and ``checksum`` besides).
_ENTRIES = ("config", "epoch", "model", "optimizer", "loss", "rng_ranks", "record")
#: Config fields that may differ between a checkpoint and the resumed run
#: (they change what is logged or how fast, not what is trained).
_RESUME_FREE = {"eval_every", "diagnose_every", "frozen_cache_mib"}
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


def payload_checksum(payload: dict[str, Any]) -> str:
    """SHA-256 of everything in ``payload`` but its ``checksum`` entry: every tensor's
    dtype, shape and bytes, every other value's type and value, every key, in order."""
    digest = hashlib.sha256()
    _feed(digest, {k: v for k, v in payload.items() if k != "checksum"})
    return digest.hexdigest()


def _feed(digest, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        t = (t.to_dense() if t.layout != torch.strided else t).contiguous().reshape(-1)
        digest.update(f"T{t.dtype}{tuple(value.shape)};".encode())
        digest.update(t.view(torch.uint8).numpy())
    elif isinstance(value, dict):
        digest.update(f"D{len(value)};".encode())
        for key, item in value.items():
            _feed(digest, key)
            _feed(digest, item)
    elif isinstance(value, (list, tuple)):
        digest.update(f"L{len(value)};".encode())
        for item in value:
            _feed(digest, item)
    elif isinstance(value, float):
        digest.update(f"F{value.hex()};".encode())
    elif isinstance(value, bytes):
        digest.update(f"Y{len(value)};".encode() + value)
    else:  # str, int, bool, None, ...
        text = repr(value)
        digest.update(f"{type(value).__name__}{len(text)};{text}".encode())


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Seals ``payload`` with its checksum and writes it to ``path`` atomically (never a
    half-written checkpoint, even when the process is killed while writing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {**payload, "format": CHECKPOINT_FORMAT}
    payload["checksum"] = payload_checksum(payload)
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


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
    fields, and unchanged since it was written (its checksum); else a one-line
    ``ValueError``, with advice on resuming where ``resuming``."""

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
            "not a checkpoint)"
            + advice("resume from an intact copy, or drop --resume to start again")
        ) from None
    if not isinstance(payload, dict):
        raise ValueError(f"{path} is not a pyg_progcl checkpoint (a {type(payload).__name__})")
    found = payload.get("format")
    if found != CHECKPOINT_FORMAT:
        age = "an older" if isinstance(found, int) and found < CHECKPOINT_FORMAT else "another"
        raise ValueError(
            f"{path} is not a checkpoint this version can {'resume' if resuming else 'read'} "
            f"(format {found!r}, written by {age} version of pyg_progcl; this one reads format "
            f"{CHECKPOINT_FORMAT})"
            + advice("drop --resume to start again, or use another checkpoint folder")
        )
    missing = [k for k in (*_ENTRIES, "checksum") if k not in payload]
    if missing:
        raise ValueError(
            f"{path} is an incomplete checkpoint (no {', '.join(map(repr, missing))} entry): "
            "edited or written by another program" + advice("drop --resume to start again")
        )
    if not isinstance(payload["config"], dict):
        raise ValueError(f"{path} is not a pyg_progcl checkpoint (no config)")
    if payload_checksum(payload) != payload["checksum"]:
        raise ValueError(
            f"{path} is corrupted or was edited: its content does not match its checksum"
            + advice("resume from an intact copy, or drop --resume to start again")
        )
    _check_config_fields(path, payload["config"], advice)
    return payload


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
            f"{'; '.join(differ)})"
            + advice("drop --resume to start again, or use another checkpoint folder")
        )


def load_checkpoint(path: Path, config: TrainConfig) -> dict[str, Any]:
    """The checkpoint at ``path`` (:func:`read_checkpoint`) if ``config`` may resume from
    it, else a ``ValueError`` that names the config fields that differ."""
    payload = read_checkpoint(path)
    saved = payload["config"]
    current = config.to_dict()
    diff = [k for k in current if k not in _RESUME_FREE and saved.get(k) != current[k]]
    refused = set(diff) - resumable_fields(saved, current, payload["epoch"])
    if refused:
        detail = ", ".join(f"{k}: {saved.get(k)!r} -> {current[k]!r}" for k in diff if k in refused)
        raise ValueError(
            f"cannot resume from {path} (epoch {payload['epoch']}): it was written with "
            f"another config ({detail}); use another checkpoint folder or drop --resume "
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
    return warmup if warmup < config.epochs else None


def checkpoint_payload(
    epoch, config, model, optimizer, loss_fn, record, rng: Optional[list] = None
) -> dict[str, Any]:
    """Everything a resumed run needs to continue bit-identically; ``rng``: every rank's
    generator states (default: this process's)."""
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
    }


def restore_checkpoint(
    path, config, model, optimizer, loss_fn, ranks=None
) -> tuple[int, dict[str, Any]]:
    """Loads a checkpoint into the objects; returns ``(epoch, record)``. A branch from a
    warm-up checkpoint (other after-warm-up fields, another warm-up method) keeps its own,
    not yet fitted loss; every resumed config difference (a branch, other ``epochs``) is
    noted in ``record["branched"]``."""
    payload = load_checkpoint(path, config)
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
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = "; ".join(lines[:3])[:300]
        raise ValueError(f"{path}: its {entry} does not fit this run's ({detail})") from None
