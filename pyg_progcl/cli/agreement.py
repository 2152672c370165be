"""What the ranks of a distributed run agree on before they train: the options that shape
training and the graph, compared with rank 0's; and a failure of one rank's setup, shared
so that every rank stops at once.

Each rank's part of a data parallel run must take the same steps on the same graph: ranks
given another learning rate, seed or method, or a graph file with one value changed,
would otherwise train apart (and a method that runs other collectives aborts the job).
:func:`agree` gathers a small record from every rank with one collective that cannot
mismatch (``all_gather_object``), before any collective of training, and raises the same
one-line error on every rank where the records differ.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Optional, TypeVar

import torch

from .parallel import Ranks
from .presets import TrainConfig, is_graph_file

__all__: list[str] = []

T = TypeVar("T")

#: The graph's tensors whose bytes every rank must share (what training reads).
GRAPH_TENSORS = ("x", "edge_index", "edge_weight", "y")
#: Bytes hashed at a time (a view of the tensor's memory, no copy of the whole).
_CHUNK = 2**24


def _flag_value(value: Any) -> str:
    """A value as the command line spells it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return " ".join(_flag_value(v) for v in value)
    return str(value)


def training_options(
    config: TrainConfig,
    seeds: list[int],
    checkpoint: Optional[str],
    checkpoint_every: int,
    resume: bool,
) -> dict[str, str]:
    """The options that shape training (every config field, the seeds, the checkpoint
    schedule), by flag, as the command line spells their values: ``{"--lr": "0.001"}``.
    Paths are not compared (a node may keep its files elsewhere): a graph file by its
    name, here, and its content by :func:`graph_digests`; a checkpoint folder by whether
    there is one."""
    options = {}
    for name, value in config.to_dict().items():
        flag = "--" + name.replace("_", "-")
        if name == "dataset" and is_graph_file(value):
            flag = "--data"
        options[flag] = _flag_value(value)
    options["--seed"] = str(seeds[0])
    options["--seeds"] = str(len(seeds))
    options["--checkpoint"] = "given" if checkpoint else "none"
    options["--checkpoint-every"] = str(checkpoint_every)
    options["--resume"] = "given" if resume else "none"
    return options


def tensor_digest(value: Any) -> str:
    """SHA-256 of a tensor's dtype, shape and every byte (sparse: its coalesced indices
    and values), or of the type of a value that is not a tensor (``NoneType``)."""
    digest = hashlib.sha256()
    if not isinstance(value, torch.Tensor):
        digest.update(f"{type(value).__name__};".encode())
        return digest.hexdigest()
    tensor = value.detach()
    if tensor.layout != torch.strided:
        coo = tensor.to_sparse_coo().coalesce()
        digest.update(f"S{tensor.dtype}{tuple(tensor.shape)};".encode())
        digest.update(tensor_digest(coo.indices()).encode())
        digest.update(tensor_digest(coo.values()).encode())
        return digest.hexdigest()
    digest.update(f"T{tensor.dtype}{tuple(tensor.shape)};".encode())
    flat = tensor.cpu().contiguous().reshape(-1).view(torch.uint8)
    for start in range(0, flat.numel(), _CHUNK):
        digest.update(flat[start : start + _CHUNK].numpy())
    return digest.hexdigest()


def graph_digests(data) -> dict[str, str]:
    """The start of :func:`tensor_digest` of each of the graph's :data:`GRAPH_TENSORS`, by
    name: ``{"the graph's x": "3f2a9c01d4e7", ...}``."""
    return {f"the graph's {key}": tensor_digest(data.get(key))[:16] for key in GRAPH_TENSORS}


def agree(
    ranks: Ranks, work: Callable[[], T], record: Callable[[T], dict[str, str]], what: str
) -> T:
    """Runs ``work()`` on every rank and checks that ``record(result)`` is rank 0's on
    every rank; returns the result.

    The ranks exchange their records, or the error ``work`` raised, in one collective:
    where one rank's ``work`` failed, that rank raises its own error and every other rank
    a ``ValueError`` naming it (``rank 1 failed: ...``); where the records differ, every
    rank raises the same ``ValueError`` naming the first entries that differ (``rank 1:
    --lr 0.1, rank 0: 0.001``). One process: ``work()``, nothing compared.

    Args:
        ranks: This process's place among the training processes.
        work: What may fail on one rank (reading options, loading a graph).
        record: The entries of the result every rank must share, as strings by name.
        what: What the records describe, for the message ("options", "graph").
    """
    if not ranks.distributed:
        return work()
    result, error = None, None
    try:
        result = work()
        shared: dict[str, Any] = {"record": record(result)}
    except Exception as exc:  # (shared first: a rank that raised alone leaves the others waiting)
        error = exc
        shared = {"error": " ".join(str(exc).split()) or type(exc).__name__}
    everyone = ranks.gather(shared)
    if error is not None:
        raise error
    failed = [(r, s["error"]) for r, s in enumerate(everyone) if "error" in s]
    if failed:
        raise ValueError("; ".join(f"rank {r} failed: {message}" for r, message in failed))
    differences = _differences([s["record"] for s in everyone])
    if differences:
        raise ValueError(
            f"the ranks were given different {what}: {'; '.join(differences)} (every rank "
            "must train with the same options on the same graph)"
        )
    return result


def _differences(records: list[dict[str, str]], limit: int = 3) -> list[str]:
    """The first ``limit`` entries in which a rank's record differs from rank 0's:
    ``rank 1: --lr 0.1, rank 0: 0.001``."""
    found = []
    reference = records[0]
    for rank, entries in enumerate(records[1:], start=1):
        for key in list(reference) + [k for k in entries if k not in reference]:
            mine, theirs = entries.get(key, "(none)"), reference.get(key, "(none)")
            if mine != theirs:
                found.append(f"rank {rank}: {key} {mine}, rank 0: {theirs}")
    return found[:limit]
