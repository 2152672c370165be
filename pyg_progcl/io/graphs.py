"""Graph files (:func:`~pyg_progcl.io.read_graph`), read without running code from them,
and :func:`~pyg_progcl.io.graph_for_model`, the fields of a graph that a model uses."""

from __future__ import annotations

import copy
import inspect
import math
import warnings
import zipfile
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from .._compat import stacklevel_outside_package
from .._graphs import check_graph
from ..encoders import GCNEncoder, MLPEncoder
from ..evaluation import check_labels
from ._common import NPY_MAGIC, first_line, load_failure, uncompiled
from .files import PathLike, check_input_file

__all__ = ["GraphFieldWarning", "read_graph"]

#: Suffixes :func:`read_graph` reads.
GRAPH_SUFFIXES = (".pt", ".npz")
_NPZ_KEYS = ("edge_index", "x", "edge_weight", "y", "train_mask", "val_mask", "test_mask")
_MASKS = ("train_mask", "val_mask", "test_mask")


def read_graph(path: PathLike, *, num_features: Optional[int] = None) -> Data:
    """Reads a graph file: ``.pt`` (a :class:`~torch_geometric.data.Data` written by
    ``torch.save``) or ``.npz`` (arrays ``edge_index`` ``[2, E]`` integer, ``x`` ``[N, F]``
    numeric, optionally ``edge_weight`` ``[E]`` numeric, ``y`` ``[N]`` integer labels
    ``>= 0`` and boolean ``[N]`` or ``[N, S]`` masks ``train_mask``, ``val_mask``,
    ``test_mask``).

    Nothing in the file is executed (``weights_only=True``, ``allow_pickle=False``).
    Features and edge weights become ``float32``, ``edge_index`` and ``y`` ``int64``;
    edges are kept as given (directed: store both directions of an undirected edge, e.g.
    with :func:`torch_geometric.utils.to_undirected`).

    Args:
        path: The graph file.
        num_features: The width of ``x`` the model that will read it expects, if any: a
            file whose ``x`` has another is refused (a ``.npz`` from its member's
            header, before any array is read).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: naming the file and the problem (the checks: docs/own_graph.md).
    """
    path = check_input_file(path, "graph file")
    suffix = path.suffix.lower()
    if suffix not in GRAPH_SUFFIXES:
        raise ValueError(
            f"graph file {str(path)!r}: unknown suffix {path.suffix!r}; expected .pt (a "
            "torch_geometric Data saved with torch.save) or .npz (arrays edge_index, x, ...)"
        )
    fields = _read_npz(path, num_features) if suffix == ".npz" else _read_pt(path)
    try:
        return _graph(fields, num_features)
    except ValueError as exc:
        raise ValueError(f"graph file {str(path)!r}: {exc}") from None


def check_width(shape, num_features: Optional[int]) -> None:
    """Checks features of ``shape`` have ``num_features`` columns, where both are known
    (features of no nodes are refused later, as an empty graph)."""
    if num_features is None or (len(shape) == 2 and shape[0] == 0):
        return
    if len(shape) != 2:
        raise ValueError(f"`x` must have shape [num_nodes, num_features] (got {list(shape)})")
    if shape[1] != num_features:
        raise ValueError(
            f"the graph's features have width {shape[1]}, the model expects {num_features} "
            "(its in_channels): embed graphs with the features it was trained on"
        )


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
            f"torch_geometric Data: {load_failure(path, exc)}"
        ) from None
    if not isinstance(data, Data):
        raise ValueError(
            f"graph file {str(path)!r} holds a {type(data).__name__}, not a homogeneous "
            "torch_geometric Data"
        )
    return {key: value for key, value in data}


def _read_npz(path: Path, num_features: Optional[int] = None) -> dict[str, Any]:
    """The arrays of ``path``, their names and ``.npy`` headers checked before any array
    is read."""
    label = f"graph file {str(path)!r}"
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{label} is not a readable .npz file: {_not_a_zip(path)}")
    try:
        with zipfile.ZipFile(path) as archive:
            members = _npz_members(archive, label)
            for key, info in members.items():
                shape = _check_npy_header(
                    archive, info, f"{label}: array {key!r}", path.stat().st_size
                )
                if key == "x":
                    try:
                        check_width(shape, num_features)
                    except ValueError as exc:
                        raise _NpzError(f"{label}: {exc}") from None
            fields = {}
            for key, info in members.items():
                with archive.open(info) as fh:
                    fields[key] = np.lib.format.read_array(fh, allow_pickle=False)
    except _NpzError as exc:
        raise ValueError(str(exc)) from None
    except Exception as exc:  # a corrupt zip or member: zlib, CRC, EOF, encryption errors
        raise ValueError(
            f"{label} is not a readable .npz file ({type(exc).__name__}: {first_line(exc)})"
        ) from None
    for key, value in fields.items():
        if not value.dtype.isnative:  # (torch takes arrays in this machine's byte order)
            value = value.astype(value.dtype.newbyteorder("="))
        fields[key] = torch.from_numpy(value)
    return fields


class _NpzError(ValueError):
    """A ``.npz`` file's content that :func:`_read_npz` refuses (its message names why)."""


def _not_a_zip(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(NPY_MAGIC))
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or type(exc).__name__})"
    if head == NPY_MAGIC:
        return (
            "it is a NumPy .npy file (one array), not a .npz archive of named arrays; write "
            "the graph with np.savez(path, edge_index=..., x=...)"
        )
    return "it is not a zip archive (corrupt, truncated or another kind of file)"


def _npz_members(archive: zipfile.ZipFile, label: str) -> dict[str, zipfile.ZipInfo]:
    """The archive's members by array name (``x.npy`` is ``x``): ``edge_index`` and ``x``
    present, no other names than a graph's, no name twice."""
    members: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        key = info.filename.removesuffix(".npy")
        if key in members:
            raise _NpzError(f"{label} holds two members named {key!r}")
        members[key] = info
    missing = [key for key in ("edge_index", "x") if key not in members]
    if missing:
        raise _NpzError(
            f"{label} has no array {' or '.join(map(repr, missing))} "
            f"(it has {_some(members) or 'none'}); a .npz graph needs edge_index [2, E] and x [N, F]"
        )
    unknown = sorted(set(members) - set(_NPZ_KEYS))
    if unknown:
        raise _NpzError(
            f"{label}: unknown arrays {_some(unknown)}; a .npz graph holds {', '.join(_NPZ_KEYS)}"
        )
    return members


def _some(names, shown: int = 10) -> str:
    """The first ``shown`` of ``names``, sorted, and how many more (one short line)."""
    names = sorted(names)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"{names[:shown]}{more}" if names else ""


_DEFLATE_MAX_RATIO = 1032  # the most deflate expands: 258 bytes from 2 bits


def _check_npy_header(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, what: str, archive_size: int
) -> tuple[int, ...]:
    """Checks member ``info``'s ``.npy`` header without reading its data: a numeric dtype
    and no more data declared than the member holds (within what its compressed size can
    expand to), so that a forged header cannot make the reader allocate terabytes.
    Returns the shape the header declares."""
    if info.compress_size > archive_size:
        raise _NpzError(
            f"{what}: its member claims {info.compress_size} compressed bytes, more than the "
            f"whole file's {archive_size} (a corrupt or forged file)"
        )
    if info.compress_type == zipfile.ZIP_STORED:
        bound = info.compress_size
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        bound = _DEFLATE_MAX_RATIO * info.compress_size + 1024
    else:
        raise _NpzError(
            f"{what} is compressed with zip method {info.compress_type}; np.savez and "
            "np.savez_compressed write stored or deflated members"
        )
    if info.file_size > bound:
        raise _NpzError(
            f"{what}: its member claims {info.file_size} bytes from {info.compress_size} "
            "compressed ones, more than its compression can produce (a corrupt or forged file)"
        )
    with archive.open(info) as fh:
        if fh.read(len(NPY_MAGIC)) != NPY_MAGIC:
            raise _NpzError(
                f"{what}: member {info.filename!r} is not a NumPy array (np.savez writes "
                "each array as a .npy member)"
            )
        fh.seek(0)
        try:
            version = np.lib.format.read_magic(fh)
            if version not in ((1, 0), (2, 0)):  # (3.0: only structured arrays need it)
                raise _NpzError(f"{what} has .npy format {version}; numeric arrays use 1.0 or 2.0")
            shape, _, dtype = getattr(np.lib.format, f"read_array_header_{version[0]}_0")(fh)
        except _NpzError:
            raise
        except ValueError as exc:
            raise _NpzError(f"{what} has a malformed .npy header ({first_line(exc)})") from None
        available = info.file_size - fh.tell()
    if dtype.hasobject:
        raise _NpzError(
            f"{what} holds Python objects ({dtype}), which only pickle can read (not done: "
            "no code from a file is run); a graph's arrays are numeric"
        )
    if dtype.kind not in "biuf":
        raise _NpzError(f"{what} must be numeric (got {dtype})")
    size = math.prod(shape) * dtype.itemsize
    if min(shape, default=0) < 0 or size > available:
        raise _NpzError(
            f"{what} declares shape {list(shape)} of {dtype} ({size} bytes), but its member "
            f"holds {max(available, 0)} bytes (a truncated or forged file)"
        )
    return tuple(shape)


def _graph(fields: dict[str, Any], num_features: Optional[int]) -> Data:
    """A checked ``Data`` from a file's attributes (``x`` float32, ids int64)."""
    x, edge_index = fields.get("x"), fields.get("edge_index")
    if not isinstance(x, Tensor):
        raise ValueError("the graph has no node features `x` (a [num_nodes, num_features] tensor)")
    check_width(x.shape, num_features)
    if not isinstance(edge_index, Tensor):
        raise ValueError("the graph has no `edge_index` (a [2, num_edges] integer tensor)")
    if x.layout != torch.strided:
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
    n, num_edges = x.size(0), edge_index.size(1)
    fields = dict(fields, x=x, edge_index=edge_index)
    weight, y = fields.get("edge_weight"), fields.get("y")
    if weight is not None:
        if not isinstance(weight, Tensor):
            raise ValueError(
                "`edge_weight` must be a tensor of one weight per edge (got "
                f"{type(weight).__name__})"
            )
        weight = weight.to_dense() if weight.layout != torch.strided else weight
        if weight.dim() != 1 or weight.size(0) != num_edges:
            raise ValueError(
                f"`edge_weight` must be 1-D, one weight per edge, shape [{num_edges}] (got "
                f"{list(weight.shape)})"
            )
        if weight.is_complex() or weight.dtype == torch.bool:
            raise ValueError(f"`edge_weight` must hold real numbers (got {weight.dtype})")
        fields["edge_weight"] = weight.float()
        check_graph(x, edge_index, fields["edge_weight"])  # finite and >= 0
    if y is not None:  # (of an integer type, then as the probe takes labels)
        if isinstance(y, Tensor) and (
            y.is_floating_point() or y.is_complex() or y.dtype == torch.bool
        ):
            raise ValueError(f"`y` must hold integer class labels (got {y.dtype})")
        fields["y"] = check_labels(y, n)
    for key in _MASKS:
        mask = fields.get(key)
        if mask is None:
            continue
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            kind = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
            raise ValueError(f"`{key}` must be a boolean mask (got {kind})")
        if mask.dim() not in (1, 2) or mask.size(0) != n or mask.numel() == 0:
            raise ValueError(
                f"`{key}` must have shape [{n}] (one entry per node) or [{n}, S] (S splits, "
                f"as PyG's WebKB and WikiCS store them) (got {list(mask.shape)})"
            )
    return Data(**fields)


class GraphFieldWarning(UserWarning):
    """A field of a graph that the model does not use: ``edge_weight`` for an encoder
    that takes none, ``edge_attr`` always."""


def takes_edge_weight(model: torch.nn.Module) -> bool:
    """Whether ``model`` (a model or an encoder) uses edge weights: a
    :class:`~pyg_progcl.GCNEncoder` whose convolution takes them, or another encoder
    (not an MLP) whose ``forward`` has an ``edge_weight`` argument."""
    encoder = _encoder_of(model)
    if isinstance(encoder, MLPEncoder):
        return False
    if isinstance(encoder, GCNEncoder):
        return encoder._edge_weight_arg is not None
    try:
        return "edge_weight" in inspect.signature(encoder.forward).parameters
    except (TypeError, ValueError):  # (no signature to inspect)
        return False


def graph_for_model(model: torch.nn.Module, data: Data) -> Data:
    """``data`` with the fields ``model`` uses: without ``edge_weight`` (a shallow copy)
    where the model takes none (:func:`takes_edge_weight`).

    What the model does not use (that ``edge_weight``, an ``edge_attr``) is said in one
    :class:`GraphFieldWarning` (Python's warning filters decide how often).
    """
    unused = []
    if data.get("edge_attr") is not None:
        unused.append(
            "the graph's `edge_attr` is not used: the encoders take no edge features (store "
            "one weight per edge as `edge_weight`)"
        )
    if data.get("edge_weight") is not None and not takes_edge_weight(model):
        encoder = _encoder_of(model)
        conv = getattr(encoder, "conv", None)
        name = type(encoder).__name__ + (f" with {conv.__name__}" if isinstance(conv, type) else "")
        unused.append(f"the graph's `edge_weight` is not used: {name} takes no edge weights")
        data = copy.copy(data)
        del data.edge_weight
    if unused:
        warnings.warn(GraphFieldWarning("; ".join(unused)), stacklevel=stacklevel_outside_package())
    return data


def _encoder_of(model: torch.nn.Module) -> torch.nn.Module:
    """A model's encoder (the model itself if it has none), unwrapped from ``torch.compile``."""
    model = uncompiled(model)
    return uncompiled(getattr(model, "encoder", model))
