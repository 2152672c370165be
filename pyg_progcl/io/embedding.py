"""Every node's embedding (:func:`~pyg_progcl.io.embed`), written as ``.npy`` or ``.pt``
(:func:`~pyg_progcl.io.save_embeddings`)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from .._graphs import stored_values
from ..encoders import parameter_dtype
from ._common import nonfinite
from .files import PathLike, atomic_write, check_writable, torch_save
from .graphs import check_width, graph_for_model

__all__ = ["embed", "save_embeddings"]

#: Suffixes :func:`save_embeddings` writes.
EMBEDDING_SUFFIXES = (".npy", ".pt")


def embed(
    model: torch.nn.Module,
    data: Data,
    batch_size: Optional[int] = None,
    num_neighbors: Optional[Sequence[int]] = None,
    device: Optional[Union[str, torch.device]] = None,
    progress: Optional[Callable[[int, Optional[int]], None]] = None,
) -> Tensor:
    """Every node's embedding ``model(data.x, data.edge_index, data.edge_weight)``,
    ``[num_nodes, hidden_channels]`` in node order, without gradients.

    On the whole graph at once by default; with ``batch_size``, layer by layer over
    batches of that many nodes (:func:`~pyg_progcl.minibatch.embed_minibatch`: exact for
    the package's encoders, in the memory of a batch's neighbourhood).

    A field the model does not use (:func:`~pyg_progcl.io.graph_for_model`) is dropped
    with a :class:`~pyg_progcl.io.GraphFieldWarning`. Features, edge weights and the result
    take the dtype of the model's parameters (``data`` is left as it is).

    Args:
        model: A :class:`~pyg_progcl.GRACEModel` (e.g. from :func:`load_model`) or an encoder.
        data: The graph; its features must have the model's input width.
        batch_size: Nodes per batch; ``None``: the whole graph at once.
        num_neighbors: With ``batch_size``: neighbours sampled per layer (approximate);
            ``None`` or all ``-1``: every neighbour (exact, layer by layer).
        device: Where to compute (default: the model's device); the result is on the CPU.
        progress: With ``batch_size``: ``progress(done, total)``, as
            :func:`~pyg_progcl.minibatch.embed_minibatch` calls it.

    Raises:
        ValueError: features of another width than the model's, or not finite (in the
            model's dtype), a malformed ``num_neighbors`` or one without ``batch_size``.
    """
    if not isinstance(data, Data) or not isinstance(data.get("x"), Tensor):
        raise ValueError("`data` must be a torch_geometric Data with node features `x`")
    width = getattr(getattr(model, "encoder", model), "in_channels", None)
    check_width(data.x.shape, width if isinstance(width, int) and width > 0 else None)
    data = graph_for_model(model, data)  # (its edge weights, where the model takes them)
    data = _in_model_dtype(model, data)
    device = torch.device(next(model.parameters()).device if device is None else device)
    if batch_size is not None:
        return _embed_batches(model, data, batch_size, num_neighbors, device, progress).cpu()
    if num_neighbors is not None:
        raise ValueError("`num_neighbors` needs `batch_size` (mini-batch inference)")
    was_training = model.training
    model.eval()
    try:
        inputs = (data.x, data.edge_index, data.get("edge_weight"))
        with torch.no_grad():
            return model(*(t.to(device) for t in inputs if t is not None)).cpu()
    finally:
        model.train(was_training)


def _in_model_dtype(model: torch.nn.Module, data: Data) -> Data:
    """``data`` (a shallow copy where anything changes) with ``x`` and ``edge_weight`` in
    the dtype of the model's parameters (default ``float32``), ``x`` checked finite there."""
    dtype = parameter_dtype(model) or torch.float32
    x = data.x
    if x.is_complex():
        raise ValueError(f"the graph's features `x` must be real numbers (got {x.dtype})")
    changed = {}
    if x.dtype != dtype:
        changed["x"] = x.to(dtype)
    weight = data.get("edge_weight")
    if isinstance(weight, Tensor) and not weight.is_complex() and weight.dtype != dtype:
        changed["edge_weight"] = weight.to(dtype)
    bad = nonfinite(stored_values(changed.get("x", x)))
    if bad:
        if "x" in changed and not nonfinite(stored_values(x)):
            raise ValueError(
                f"the graph's features `x` ({x.dtype}) hold {bad} values beyond the range of "
                f"the model's {dtype} (|x| > {torch.finfo(dtype).max:.3g}): scale them"
            )
        raise ValueError(
            f"the graph's features `x` hold {bad} NaN or infinite values; replace them "
            "(e.g. torch.nan_to_num) before embedding"
        )
    if changed:
        data = copy.copy(data)
        for key, value in changed.items():
            data[key] = value
    return data


def _embed_batches(model, data, batch_size, num_neighbors, device, progress) -> Tensor:
    from ..minibatch import embed_minibatch
    from ..minibatch.sampling import check_num_neighbors

    progress = None if progress is False else progress
    if progress is not None and not callable(progress):
        raise ValueError(f"`progress` must be a callable progress(done, total) (got {progress!r})")
    if num_neighbors is not None:
        num_neighbors = check_num_neighbors(num_neighbors)
        layers = getattr(getattr(model, "encoder", model), "num_layers", None)
        if layers is not None and len(num_neighbors) != layers:
            raise ValueError(
                f"`num_neighbors` must have one entry per layer ({layers}), got {num_neighbors}"
            )
        if all(k == -1 for k in num_neighbors):
            num_neighbors = None  # every neighbour: exact, layer by layer
    return embed_minibatch(model, data, batch_size, num_neighbors, device=device, progress=progress)


def save_embeddings(z: Tensor, path: PathLike) -> Path:
    """Writes embeddings ``[N, d]`` as ``float32`` to ``path``, atomically: ``.npy`` or
    ``.pt`` (a tensor, ``torch.load(path, weights_only=True)``)."""
    target = check_embedding_path(path)
    z = z.detach().cpu().float().contiguous()

    def write(tmp: Path) -> None:
        if target.suffix.lower() == ".npy":
            with open(tmp, "wb") as fh:  # (np.save on a name would append .npy)
                np.save(fh, z.numpy(), allow_pickle=False)
        else:
            torch_save(z.clone(), tmp)

    return atomic_write(target, write)


def check_embedding_path(
    path: PathLike, what: str = "embeddings file", create: bool = False
) -> Path:
    """Checks that embeddings can be written to ``path`` (suffix ``.npy`` / ``.pt``, a
    writable folder: an existing one, or with ``create`` a new one) before work starts."""
    target = Path(path).expanduser()
    if target.suffix.lower() not in EMBEDDING_SUFFIXES:
        raise ValueError(f"{what} {str(path)!r}: unknown suffix {target.suffix!r}; use .npy or .pt")
    return check_writable(target, what, create=create)
