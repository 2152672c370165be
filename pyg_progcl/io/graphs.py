"""Graph files: :func:`~pyg_progcl.io.read_graph` reads a ``.pt`` file holding a
:class:`torch_geometric.data.Data` (``torch.save(data, path)``) or a ``.npz`` file of plain
arrays (``edge_index``, ``x``, optionally ``y`` and boolean ``train_mask`` / ``val_mask`` /
``test_mask``), both without running code from the file (``weights_only=True``,
``allow_pickle=False``)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from .._checks import check_graph
from ._common import PathLike, first_line

#: Suffixes :func:`read_graph` reads.
GRAPH_SUFFIXES = (".pt", ".npz")
_NPZ_KEYS = ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask")
_MASKS = ("train_mask", "val_mask", "test_mask")


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
            f"torch_geometric Data ({type(exc).__name__}: {first_line(exc)})"
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
            f"{first_line(exc)})"
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
