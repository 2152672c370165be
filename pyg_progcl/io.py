"""Graphs and models in and out: read a graph file, save and load a trained model, embed
any graph with it (docs/own_graph.md).

* :func:`read_graph` reads a ``.pt`` file holding a :class:`torch_geometric.data.Data`
  (``torch.save(data, path)``) or a ``.npz`` file of plain arrays (``edge_index``, ``x``,
  optionally ``y`` and boolean ``train_mask`` / ``val_mask`` / ``test_mask``), both
  without running code from the file (``weights_only=True``, ``allow_pickle=False``).
* :func:`save_model` writes a :class:`~pyg_progcl.GRACEModel` as one self-describing file,
  a dict ``{"format": "pyg_progcl.model", "version": 1, "config": ..., "state_dict": ...,
  "metadata": ...}`` of plain Python values and tensors: :func:`load_model` (or
  ``torch.load(path, weights_only=True)``) reads it back without the code that built it.
* :func:`embed` computes every node's embedding, on the whole graph or layer by layer
  over batches of nodes (:func:`~pyg_progcl.minibatch.embed_minibatch`).

Not PyG's :class:`~torch_geometric.nn.model_hub.PyGModelHubMixin`: its
``save_pretrained`` needs ``huggingface_hub`` and writes a folder (``config.json`` and
the weights), and ``from_pretrained`` rebuilds a model class that was mixed in, not one
assembled from an encoder, a projection head and augmenters. One file that ``torch.load``
reads safely travels more easily; it can be uploaded to a model hub as it is.
"""

from __future__ import annotations

import json
import os
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from ._checks import check_graph, check_int
from ._files import atomic_write, check_writable
from .augment import AdaptiveEdgeDrop, AdaptiveFeatureMask, Compose, EdgeDrop, FeatureMask
from .encoders import ACTIVATIONS, GCNEncoder, MLPEncoder
from .model import GRACEModel

__all__ = [
    "MODEL_FORMAT",
    "embed",
    "load_model",
    "model_config",
    "read_graph",
    "save_embeddings",
    "save_model",
]

PathLike = Union[str, os.PathLike]

#: The ``format`` entry of a model file, and the newest ``version`` this code reads.
MODEL_FORMAT = "pyg_progcl.model"
MODEL_VERSION = 1

#: Suffixes :func:`read_graph` reads; :func:`save_embeddings` writes.
GRAPH_SUFFIXES = (".pt", ".npz")
EMBEDDING_SUFFIXES = (".npy", ".pt")
_NPZ_KEYS = ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask")
_MASKS = ("train_mask", "val_mask", "test_mask")


# ----------------------------------------------------------------------------- graphs


def read_graph(path: PathLike) -> Data:
    """Reads a graph file: ``.pt`` (a :class:`~torch_geometric.data.Data` written by
    ``torch.save``) or ``.npz`` (arrays ``edge_index`` ``[2, E]`` integer, ``x`` ``[N, F]``
    numeric, optionally ``y`` ``[N]`` integer labels ``>= 0`` and boolean ``[N]`` masks
    ``train_mask``, ``val_mask``, ``test_mask``).

    Nothing in the file is executed. Features become ``float32``, ``edge_index`` and
    ``y`` ``int64``; edges are kept as given (directed: store both directions of an
    undirected edge, e.g. with :func:`torch_geometric.utils.to_undirected`).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: naming the file and the problem: an unknown suffix, an unreadable
            file, a missing or malformed array (out-of-range or negative node ids, NaN
            or infinite features, no nodes, labels or masks of the wrong length or type).
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"graph file {str(path)!r} does not exist")
    if path.is_dir():
        raise ValueError(f"graph file {str(path)!r} is a folder, not a file")
    suffix = path.suffix.lower()
    if suffix not in GRAPH_SUFFIXES:
        raise ValueError(
            f"graph file {str(path)!r}: unknown suffix {path.suffix!r}; expected .pt (a "
            "torch_geometric Data saved with torch.save) or .npz (arrays edge_index, x, ...)"
        )
    fields = _read_npz(path) if suffix == ".npz" else _read_pt(path)
    try:
        return _graph(fields)
    except ValueError as exc:
        raise ValueError(f"graph file {str(path)!r}: {exc}") from None


def _read_pt(path: Path) -> dict[str, Any]:
    """The attributes of the ``Data`` saved in ``path``."""
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    try:
        with torch.serialization.safe_globals([DataEdgeAttr, DataTensorAttr, GlobalStorage]):
            data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a pickle with code, a truncated or corrupt zip, not torch
        raise ValueError(
            f"graph file {str(path)!r} is not a readable torch file holding a "
            f"torch_geometric Data ({type(exc).__name__}: {_first_line(exc)})"
        ) from None
    if not isinstance(data, Data):
        raise ValueError(
            f"graph file {str(path)!r} holds a {type(data).__name__}, not a homogeneous "
            "torch_geometric Data"
        )
    return {key: value for key, value in data}


def _read_npz(path: Path) -> dict[str, Any]:
    """The arrays of ``path``, checked for names (``edge_index`` and ``x`` required)."""
    try:
        with np.load(path, allow_pickle=False) as arrays:
            fields = {key: arrays[key] for key in arrays.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(
            f"graph file {str(path)!r} is not a readable .npz file ({type(exc).__name__}: "
            f"{_first_line(exc)})"
        ) from None
    missing = [key for key in ("edge_index", "x") if key not in fields]
    if missing:
        raise ValueError(
            f"graph file {str(path)!r} has no array {' or '.join(map(repr, missing))} "
            f"(it has {sorted(fields) or 'none'}); a .npz graph needs edge_index [2, E] and x [N, F]"
        )
    unknown = sorted(set(fields) - set(_NPZ_KEYS))
    if unknown:
        raise ValueError(
            f"graph file {str(path)!r}: unknown arrays {unknown}; a .npz graph holds "
            f"{', '.join(_NPZ_KEYS)}"
        )
    for key, value in fields.items():
        if value.dtype.kind not in "biuf":
            raise ValueError(
                f"graph file {str(path)!r}: array {key!r} must be numeric (got {value.dtype})"
            )
        fields[key] = torch.from_numpy(value)
    return fields


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else "no message"


def _graph(fields: dict[str, Any]) -> Data:
    """A checked ``Data`` from a file's attributes (``x`` float32, ids int64)."""
    x, edge_index = fields.get("x"), fields.get("edge_index")
    if not isinstance(x, Tensor):
        raise ValueError("the graph has no node features `x` (a [num_nodes, num_features] tensor)")
    if not isinstance(edge_index, Tensor):
        raise ValueError("the graph has no `edge_index` (a [2, num_edges] integer tensor)")
    if x.is_sparse or x.layout != torch.strided:
        x = x.to_dense()
    if x.dim() != 2 or x.is_complex():
        raise ValueError(f"`x` must have shape [num_nodes, num_features] (got {list(x.shape)})")
    if x.size(0) == 0:
        raise ValueError("the graph is empty: `x` has 0 rows (nodes)")
    if x.size(1) == 0:
        raise ValueError("`x` has 0 columns: every node needs at least one feature")
    x = x.float()  # (numeric features of any type)
    if not (
        edge_index.is_floating_point() or edge_index.is_complex() or edge_index.dtype == torch.bool
    ):
        edge_index = edge_index.long()  # (ids of any integer type; check_graph refuses others)
    check_graph(x, edge_index)  # shape, integer ids in [0, N), finite features
    n = x.size(0)
    fields = dict(fields, x=x, edge_index=edge_index)
    if fields.get("y") is not None:
        fields["y"] = _labels(fields["y"], n)
    for key in _MASKS:
        if fields.get(key) is not None:
            fields[key] = _mask(key, fields[key], n)
    return Data(**fields)


def _labels(y: Tensor, n: int) -> Tensor:
    if not isinstance(y, Tensor):
        raise ValueError(f"`y` must be a tensor of class labels (got {type(y).__name__})")
    if y.dim() == 2 and y.size(1) == 1:
        y = y.view(-1)
    if y.dim() != 1 or y.size(0) != n:
        raise ValueError(f"`y` must have one label per node, shape [{n}] (got {list(y.shape)})")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ValueError(f"`y` must hold integer class labels (got {y.dtype})")
    y = y.long()
    if int(y.min()) < 0:
        raise ValueError(f"`y` must hold class labels >= 0 (got {int(y.min())})")
    return y


def _mask(key: str, mask: Tensor, n: int) -> Tensor:
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        kind = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"`{key}` must be a boolean mask (got {kind})")
    if mask.shape != (n,):
        raise ValueError(
            f"`{key}` must have shape [{n}], one entry per node (got {list(mask.shape)})"
        )
    return mask


# ----------------------------------------------------------------------------- models

_AUGMENTERS = {
    cls.__name__: cls for cls in (EdgeDrop, FeatureMask, AdaptiveEdgeDrop, AdaptiveFeatureMask)
}


def _describe_augmenter(name: str, augment) -> Union[None, dict, list[dict[str, Any]]]:
    """A built-in augmenter as a dict of plain values, a :class:`Compose` of them as a list
    of such dicts; ``None`` for none or a custom one (which is not saved: embedding does
    not use augmenters)."""
    if augment is None:
        return None
    composed = type(augment) is Compose
    members = list(augment.augmenters) if composed else [augment]
    described = []
    for aug in members:
        if (
            type(aug).__name__ not in _AUGMENTERS
            or type(aug) is not _AUGMENTERS[type(aug).__name__]
        ):
            warnings.warn(
                f"`{name}` ({augment!r}) is not made of built-in augmenters and is not saved; "
                "the loaded model has no augmentation there (embedding uses none)",
                stacklevel=3,
            )
            return None
        entry = {"type": type(aug).__name__, "p": float(aug.p)}
        if isinstance(aug, (AdaptiveEdgeDrop, AdaptiveFeatureMask)):
            entry.update(centrality=aug.centrality, threshold=float(aug.threshold))
        if isinstance(aug, AdaptiveFeatureMask):
            entry["dense"] = aug.dense
        described.append(entry)
    return described if composed else described[0]


def _build_augmenter(spec: Union[None, dict, list[dict[str, Any]]]):
    if spec is None:
        return None
    members = []
    for entry in spec if isinstance(spec, list) else [spec]:
        entry = dict(entry)
        members.append(_AUGMENTERS[entry.pop("type")](**entry))
    return Compose(*members) if isinstance(spec, list) else members[0]


def _describe_encoder(encoder) -> dict[str, Any]:
    """The constructor arguments of a :class:`GCNEncoder` / :class:`MLPEncoder`."""
    if type(encoder) not in (GCNEncoder, MLPEncoder):
        raise ValueError(
            f"save_model supports GRACEModel with a GCNEncoder or an MLPEncoder (got an encoder "
            f"of type {type(encoder).__name__}); save another encoder's state_dict yourself"
        )
    activation = getattr(encoder, "activation_name", None)
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"save_model supports activations named by a string, one of {list(ACTIVATIONS)} "
            f"(got {activation!r})"
        )
    config = {
        "type": type(encoder).__name__,
        "in_channels": int(encoder.in_channels),
        "hidden_channels": int(encoder.hidden_channels),
        "num_layers": int(encoder.num_layers),
        "activation": activation,
        "sparse_features": bool(encoder.sparse_features),
    }
    if isinstance(encoder, GCNEncoder):
        config.update(_describe_conv(encoder))
    return config


def _describe_conv(encoder: GCNEncoder) -> dict[str, Any]:
    import torch_geometric.nn as pyg_nn

    name = encoder.conv.__name__
    if getattr(pyg_nn, name, None) is not encoder.conv:
        raise ValueError(
            f"save_model supports convolutions of torch_geometric.nn, saved by name (got "
            f"{encoder.conv.__module__}.{name})"
        )
    try:
        kwargs = json.loads(json.dumps(encoder.conv_kwargs))
    except (TypeError, ValueError):
        raise ValueError(
            f"save_model needs `conv_kwargs` of plain JSON values (got {encoder.conv_kwargs!r})"
        ) from None
    if kwargs != encoder.conv_kwargs:
        raise ValueError(
            f"save_model needs `conv_kwargs` of plain JSON values (got {encoder.conv_kwargs!r})"
        )
    return {"conv": name, "conv_kwargs": kwargs, "sparse": getattr(encoder, "_sparse_arg", None)}


def model_config(model: GRACEModel) -> dict[str, Any]:
    """The plain-value description of ``model`` that :func:`save_model` stores.

    Raises:
        ValueError: for a model this format cannot describe (not a :class:`GRACEModel`, an
            encoder other than :class:`~pyg_progcl.GCNEncoder` / :class:`~pyg_progcl.MLPEncoder`,
            a convolution outside ``torch_geometric.nn``, non-JSON ``conv_kwargs``, an
            activation not given by name).
    """
    if type(model) is not GRACEModel:
        raise ValueError(
            f"save_model supports a GRACEModel (got {type(model).__name__}); save another "
            "module's state_dict yourself"
        )
    return {
        "model": "GRACEModel",
        "hidden_channels": int(model.hidden_channels),
        "proj_channels": int(model.proj_channels),
        "recompute_views": bool(model.recompute_views),
        "encoder": _describe_encoder(model.encoder),
        "augment1": _describe_augmenter("augment1", model.augment1),
        "augment2": _describe_augmenter("augment2", model.augment2),
    }


def build_from_config(config: dict[str, Any]) -> GRACEModel:
    """A freshly initialised :class:`GRACEModel` from :func:`model_config`'s description."""
    import torch_geometric.nn as pyg_nn

    enc = dict(config["encoder"])
    kind = enc.pop("type")
    if kind == "GCNEncoder":
        conv = getattr(pyg_nn, enc.pop("conv"), None)
        if conv is None:
            raise ValueError(
                f"unknown convolution {config['encoder']['conv']!r} in torch_geometric.nn"
            )
        encoder = GCNEncoder(conv=conv, **enc)
    elif kind == "MLPEncoder":
        encoder = MLPEncoder(**enc)
    else:
        raise ValueError(f"unknown encoder type {kind!r}")
    return GRACEModel(
        encoder,
        config["hidden_channels"],
        config["proj_channels"],
        _build_augmenter(config.get("augment1")),
        _build_augmenter(config.get("augment2")),
        recompute_views=config.get("recompute_views", False),
    )


def save_model(
    model: GRACEModel, path: PathLike, *, metadata: Optional[dict[str, Any]] = None
) -> Path:
    """Writes ``model`` (its configuration and weights) to one file, atomically.

    The file is ``torch.save`` of ``{"format": "pyg_progcl.model", "version": 1,
    "config": model_config(model), "state_dict": {name: CPU tensor}, "metadata": metadata}``,
    readable with ``torch.load(path, weights_only=True)``; :func:`load_model` rebuilds
    the model. Augmenters are saved if they are built-in ones (:class:`~pyg_progcl.EdgeDrop`,
    :class:`~pyg_progcl.FeatureMask`, the adaptive ones, a :class:`~pyg_progcl.Compose` of
    them), else left out with a warning.

    Args:
        model: A :class:`GRACEModel` with a :class:`~pyg_progcl.GCNEncoder` (any
            convolution of ``torch_geometric.nn``, JSON ``conv_kwargs``, an activation
            by name) or an :class:`~pyg_progcl.MLPEncoder`.
        path: Where to write (its folder must exist).
        metadata: Plain JSON values stored alongside (e.g. the training config).

    Returns:
        ``path``.

    Raises:
        ValueError: for a model :func:`model_config` cannot describe, metadata that is not
            plain JSON, or a path that cannot be written.
    """
    target = check_writable(path, "model file")
    config = model_config(model)
    if metadata is not None:
        try:
            metadata = json.loads(json.dumps(metadata))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"`metadata` must hold plain JSON values ({exc})") from None
    payload = {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        "config": config,
        "state_dict": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "metadata": metadata,
    }
    return atomic_write(target, lambda tmp: torch.save(payload, tmp))


def read_model_file(path: PathLike) -> dict[str, Any]:
    """The checked contents of a model file written by :func:`save_model` (CPU tensors)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"model file {str(path)!r} does not exist")
    if path.is_dir():
        raise ValueError(f"model file {str(path)!r} is a folder, not a file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(
            f"model file {str(path)!r} is not a readable pyg_progcl model (corrupt, truncated "
            f"or another kind of file: {type(exc).__name__}: {_first_line(exc)})"
        ) from None
    if not (isinstance(payload, dict) and payload.get("format") == MODEL_FORMAT):
        hint = ""
        if isinstance(payload, dict) and "model" in payload and "config" in payload:
            hint = " (a training checkpoint? save a model with --save-model)"
        raise ValueError(
            f"model file {str(path)!r} is not a pyg_progcl model: no 'format': "
            f"{MODEL_FORMAT!r} entry{hint}"
        )
    version = payload.get("version")
    if not isinstance(version, int) or version > MODEL_VERSION:
        raise ValueError(
            f"model file {str(path)!r} has format version {version!r}; this pyg_progcl reads "
            f"versions up to {MODEL_VERSION} (a newer pyg_progcl wrote it?)"
        )
    if not isinstance(payload.get("config"), dict) or not isinstance(
        payload.get("state_dict"), dict
    ):
        raise ValueError(f"model file {str(path)!r} lacks its 'config' or 'state_dict' entry")
    return payload


def load_model(
    path: PathLike, map_location: Optional[Union[str, torch.device]] = None
) -> GRACEModel:
    """Reads a model written by :func:`save_model` (or ``--save-model``).

    Args:
        path: The model file.
        map_location: Device of the returned model (default: the CPU).

    Returns:
        The :class:`GRACEModel` in eval mode, ready for ``model(x, edge_index)``.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if it is not a pyg_progcl model file (another file, corrupt or
            truncated, a newer format, weights that do not fit the configuration).
    """
    payload = read_model_file(path)
    try:
        model = build_from_config(payload["config"])
        model.load_state_dict(payload["state_dict"], strict=True)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(
            f"model file {str(path)!r}: its configuration and weights do not make a model "
            f"({type(exc).__name__}: {_first_line(exc)})"
        ) from None
    model.eval()
    return model if map_location is None else model.to(map_location)


# ----------------------------------------------------------------------------- embeddings


def embed(
    model: torch.nn.Module,
    data: Data,
    batch_size: Optional[int] = None,
    num_neighbors: Optional[Sequence[int]] = None,
    device: Optional[Union[str, torch.device]] = None,
    progress: bool = False,
) -> Tensor:
    """Every node's embedding ``model(data.x, data.edge_index)``, without gradients.

    On the whole graph at once by default; with ``batch_size``, layer by layer over
    batches of that many nodes (:func:`~pyg_progcl.minibatch.embed_minibatch`: exact for
    :class:`~pyg_progcl.GCNEncoder` and :class:`~pyg_progcl.MLPEncoder`, memory
    ``O(batch neighbourhood)`` per layer instead of the whole graph's activations).

    Args:
        model: A :class:`GRACEModel` (e.g. from :func:`load_model`) or an encoder.
        data: The graph; its features must have the model's input width.
        batch_size: Nodes per batch; ``None``: the whole graph at once.
        num_neighbors: With ``batch_size``: neighbours sampled per layer (approximate);
            ``None`` or all ``-1``: every neighbour (exact, layer by layer).
        device: Where to compute (default: the model's device); the result is on the CPU.
        progress: Show a progress bar over the layers (with ``batch_size``).

    Returns:
        ``[num_nodes, hidden_channels]`` float embeddings in node order.

    Raises:
        ValueError: features of another width than the model's, ``num_neighbors``
            without ``batch_size``, a malformed ``num_neighbors``.
    """
    if not isinstance(data, Data) or not isinstance(data.get("x"), Tensor):
        raise ValueError("`data` must be a torch_geometric Data with node features `x`")
    encoder = getattr(model, "encoder", model)
    width = getattr(encoder, "in_channels", None)
    if isinstance(width, int) and width > 0 and (data.x.dim() != 2 or data.x.size(1) != width):
        raise ValueError(
            f"the graph's features have width {data.x.size(-1)}, the model expects "
            f"{width} (its in_channels): embed graphs with the features it was trained on"
        )
    if device is None:
        device = next(model.parameters()).device
    device = torch.device(device)
    was_training = model.training
    model.eval()
    try:
        if batch_size is None:
            if num_neighbors is not None:
                raise ValueError("`num_neighbors` needs `batch_size` (mini-batch inference)")
            with torch.no_grad():
                z = model(data.x.to(device), data.edge_index.to(device))
            return z.cpu()
        return _embed_batches(model, data, batch_size, num_neighbors, device, progress).cpu()
    finally:
        model.train(was_training)


def _embed_batches(model, data, batch_size, num_neighbors, device, progress) -> Tensor:
    from tqdm.auto import tqdm

    from .minibatch import embed_minibatch
    from .minibatch.sampling import check_num_neighbors

    batch_size = check_int("batch_size", batch_size)
    if num_neighbors is not None:
        num_neighbors = check_num_neighbors(num_neighbors)
        layers = getattr(getattr(model, "encoder", model), "num_layers", None)
        if layers is not None and len(num_neighbors) != layers:
            raise ValueError(
                f"`num_neighbors` must have one entry per layer ({layers}), got {num_neighbors}"
            )
        if all(k == -1 for k in num_neighbors):
            num_neighbors = None  # every neighbour: exact, layer by layer
    steps = (
        getattr(getattr(model, "encoder", model), "num_layers", 1) if num_neighbors is None else 1
    )
    bar = tqdm(total=steps, desc="embedding (layers)", disable=not progress, dynamic_ncols=True)

    def step(out: Tensor) -> Tensor:  # called once per layer (once when sampling)
        bar.update(1)
        return out

    try:
        return embed_minibatch(model, data, batch_size, num_neighbors, device=device, gather=step)
    finally:
        bar.close()


def save_embeddings(z: Tensor, path: PathLike) -> Path:
    """Writes embeddings ``[N, d]`` as ``float32`` to ``path``, atomically: ``.npy``
    (``numpy.load``) or ``.pt`` (a tensor, ``torch.load(path, weights_only=True)``)."""
    target = check_embedding_path(path)
    z = z.detach().cpu().float().contiguous()
    if target.suffix.lower() == ".npy":

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:  # (np.save on a name would append .npy)
                np.save(fh, z.numpy(), allow_pickle=False)

    else:

        def write(tmp: Path) -> None:
            torch.save(z.clone(), tmp)

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
