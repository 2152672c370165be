"""Datasets by name and read-only data roots for the harness and the command line.

``load_dataset(name, root)`` returns one :class:`torch_geometric.data.Data`
graph through the real PyG / OGB loaders. The data root may be

* a plain root where PyG downloads (``<root>/Cora``, ``<root>/Photo``,
  ``<root>/CS``, ``<root>/WikiCS``, ``<root>/ogbn_arxiv``), or
* a grouped layout like the project's shared data (``<root>/planetoid/Cora``,
  ``<root>/amazon/Photo``, ``<root>/coauthor/CS``, ``<root>/wikics/WikiCS``,
  ``<root>/ogb/ogbn_arxiv``).

PyG writes ``processed/`` next to ``raw/``; when the dataset folder is not
writable (no write bit, or a read-only mount) it is first copied to a writable
cache (``$PYG_PROGCL_CACHE``, else ``~/.cache/pyg_progcl/copies``).
Loaders of one dataset folder take turns (a file lock in that cache), so runs
started side by side never read a ``processed/`` file another one is writing.

Features are row-normalised (``T.NormalizeFeatures``) as in the GRACE / GCA /
ProGCL code, except for WikiCS (normalisation destroys its signal, see the GCA
code) and ogbn-arxiv (dense real-valued word2vec features).

The name ``"synthetic"`` loads the library's
:func:`~pyg_progcl.datasets.synthetic_graph`, which this module re-exports.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import torch
import torch_geometric.transforms as T
from filelock import FileLock
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from pyg_progcl.datasets import synthetic_graph

__all__ = ["load_dataset"]

PathLike = Union[str, os.PathLike]

DATA_ENV = "PYG_PROGCL_DATA"
CACHE_ENV = "PYG_PROGCL_CACHE"


@dataclass(frozen=True)
class DatasetInfo:
    """How one dataset is found and loaded.

    Attributes:
        name: Canonical name (``"Amazon-Photo"``).
        kind: Loader family: ``planetoid``, ``amazon``, ``coauthor``,
            ``wikics``, ``ogb`` or ``synthetic``.
        pyg_name: The ``name`` argument of the PyG / OGB class.
        folder: Dataset folder under a plain root.
        group: Group folder of the grouped (shared-data) layout.
        normalize: Whether features are row-normalised.
        public_split: Whether the dataset ships the split the papers evaluate
            on (WikiCS's 20 splits, OGB's official split).
    """

    name: str
    kind: str
    pyg_name: str
    folder: str
    group: str
    normalize: bool = True
    public_split: bool = False


DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in [
        DatasetInfo("synthetic", "synthetic", "synthetic", "", ""),
        DatasetInfo("Cora", "planetoid", "Cora", "Cora", "planetoid"),
        DatasetInfo("CiteSeer", "planetoid", "CiteSeer", "CiteSeer", "planetoid"),
        DatasetInfo("PubMed", "planetoid", "PubMed", "PubMed", "planetoid"),
        DatasetInfo("Amazon-Photo", "amazon", "Photo", "Photo", "amazon"),
        DatasetInfo("Amazon-Computers", "amazon", "Computers", "Computers", "amazon"),
        DatasetInfo("Coauthor-CS", "coauthor", "CS", "CS", "coauthor"),
        DatasetInfo("Coauthor-Physics", "coauthor", "Physics", "Physics", "coauthor"),
        DatasetInfo("WikiCS", "wikics", "WikiCS", "WikiCS", "wikics", False, True),
        DatasetInfo("ogbn-arxiv", "ogb", "ogbn-arxiv", "ogbn_arxiv", "ogb", False, True),
        DatasetInfo("ogbn-products", "ogb", "ogbn-products", "ogbn_products", "ogb", False, True),
    ]
}

_ALIASES = {"photo": "Amazon-Photo", "computers": "Amazon-Computers"}
_ALIASES.update({"cs": "Coauthor-CS", "physics": "Coauthor-Physics", "arxiv": "ogbn-arxiv"})
_ALIASES.update({"products": "ogbn-products"})


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


_LOOKUP = {_key(n): n for n in DATASETS}
_LOOKUP.update({_key(a): n for a, n in _ALIASES.items()})


def canonical_name(name: str) -> str:
    """Returns the canonical dataset name for ``name`` (case, ``-``/``_`` ignored).

    Accepts e.g. ``"cora"``, ``"Photo"``, ``"amazon_photo"``, ``"coauthor-cs"``,
    ``"ogbn_arxiv"``.

    Raises:
        ValueError: if the name is unknown.
    """
    found = _LOOKUP.get(_key(str(name)))
    if found is None:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    return found


def default_root() -> Path:
    """The data root used when none is given: ``$PYG_PROGCL_DATA``, else
    ``~/.cache/pyg_progcl``."""
    env = os.environ.get(DATA_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pyg_progcl"


def _cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pyg_progcl" / "copies"


# ----------------------------------------------------------------------------- read-only roots


def _is_writable(path: Path) -> bool:
    """True if PyG may write under ``path``.

    Mode bits are checked as well as ``os.access``: as root, ``os.access``
    ignores missing write bits, yet a folder handed out read-only must not be
    written to.
    """
    for p in [path, path / "processed"]:
        if not p.exists():
            continue
        if not os.access(p, os.W_OK) or not (p.stat().st_mode & 0o222):
            return False
    return True


def _digest(path: Path) -> str:
    """A short name for ``path`` in the cache (a hash of its resolved form)."""
    return hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]


def _source_files(src: Path) -> list[tuple[str, int, int]]:
    """``(relative path, size, modification second)`` of the raw files under ``src``."""
    files = [p for p in src.rglob("*") if p.is_file()]
    stats = [(p, p.stat()) for p in files if "processed" not in p.relative_to(src).parts]
    return sorted((str(p.relative_to(src)), st.st_size, int(st.st_mtime)) for p, st in stats)


def _copy_file(src: str, dst: str) -> None:
    """Contents and modification time, not mode bits (the copy must be writable)."""
    shutil.copyfile(src, dst)
    info = os.stat(src)
    os.utime(dst, ns=(info.st_atime_ns, info.st_mtime_ns))


def _writable_copy(src: Path) -> Path:
    """Copies the dataset folder ``src`` (without ``processed/``) to the cache.

    The copy is made in a temporary folder and renamed into place, so that an
    interrupted copy is never used; an existing copy with the same files (names,
    sizes and modification times to the second) is reused, keeping its
    ``processed/``; otherwise it is replaced, ``processed/`` included.
    """
    parent = _cache_dir() / _digest(src)
    dst = parent / src.name
    wanted = _source_files(src)
    if dst.exists():
        have = set(_source_files(dst))
        if all(item in have for item in wanted):
            return dst
        shutil.rmtree(dst)
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".copy-", dir=parent))
    try:
        shutil.copytree(
            src,
            tmp / src.name,
            copy_function=_copy_file,
            ignore=shutil.ignore_patterns("processed"),
        )
        for dirpath, _, _ in os.walk(tmp):
            mode = os.stat(dirpath).st_mode
            os.chmod(dirpath, mode | stat.S_IWUSR | stat.S_IRUSR | stat.S_IXUSR)
        os.rename(tmp / src.name, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dst


def _lock(info: DatasetInfo, root: Path) -> Union[FileLock, contextlib.nullcontext]:
    """A lock, held while one process locates (copies) and loads (processes) a dataset.

    Without it, two processes that load a dataset for the first time both let
    PyG write ``processed/``, and one may read the other's half-written file.
    The lock file lives in the cache, not in the data root (which may be
    read-only); the operating system releases it when a process dies. Where the
    cache cannot be written, loading goes on unlocked (a writable root needs no cache).
    """
    path = _cache_dir() / "locks" / f"{info.folder}-{_digest(root)}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return contextlib.nullcontext()
    return FileLock(str(path)) if _is_writable(path.parent) else contextlib.nullcontext()


def _locate(info: DatasetInfo, root: Path) -> Path:
    """The dataset folder under ``root`` (grouped or plain layout).

    If the dataset is absent, the plain-layout folder is returned (PyG
    downloads there); when ``root`` itself is read-only, a folder in the cache.
    """
    for candidate in [root / info.group / info.folder, root / info.folder]:
        if candidate.is_dir():
            return _writable_copy(candidate) if not _is_writable(candidate) else candidate
    if not _is_writable(root):
        return _cache_dir() / _digest(root) / info.folder
    return root / info.folder


# ----------------------------------------------------------------------------- loaders


def _load_planetoid(info: DatasetInfo, folder: Path) -> Data:
    from torch_geometric.datasets import Planetoid

    return Planetoid(root=str(folder.parent), name=info.pyg_name)[0]


def _load_amazon(info: DatasetInfo, folder: Path) -> Data:
    from torch_geometric.datasets import Amazon

    return Amazon(root=str(folder.parent), name=info.pyg_name)[0]


def _load_coauthor(info: DatasetInfo, folder: Path) -> Data:
    from torch_geometric.datasets import Coauthor

    return Coauthor(root=str(folder.parent), name=info.pyg_name)[0]


def _load_wikics(info: DatasetInfo, folder: Path) -> Data:
    from torch_geometric.datasets import WikiCS

    # train_mask / val_mask: [N, 20] (the 20 public splits), test_mask: [N].
    return WikiCS(root=str(folder), is_undirected=True)[0]


def _load_ogb(info: DatasetInfo, folder: Path) -> Data:
    """ogbn-* through ``PygNodePropPredDataset``, with the official split as masks."""
    sys.modules.setdefault("outdated", None)  # ogb's version check may do network I/O
    from ogb.nodeproppred import PygNodePropPredDataset
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    if folder.is_dir() and not list(folder.glob("RELEASE_v*.txt")):
        # ogb would otherwise ask on stdin whether to delete the folder.
        raise FileNotFoundError(
            f"{folder} exists but has no RELEASE_v*.txt; it is not a complete OGB dataset "
            f"folder (an interrupted download?): delete it (rm -r '{folder}') and run again "
            "to download it anew, or pass --root with a complete copy"
        )
    with torch.serialization.safe_globals([DataEdgeAttr, DataTensorAttr, GlobalStorage]):
        dataset = PygNodePropPredDataset(name=info.pyg_name, root=str(folder.parent))
        split = dataset.get_idx_split()
        data = dataset[0]
    data.y = data.y.view(-1)
    n = data.num_nodes
    for key, ogb_key in [("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")]:
        mask = torch.zeros(n, dtype=torch.bool)
        mask[split[ogb_key]] = True
        data[key] = mask
    data.edge_index = to_undirected(data.edge_index, num_nodes=n)
    if "node_year" in data:
        del data.node_year
    return data


def _leftovers(info: DatasetInfo, folder: Path) -> list[Path]:
    """What a download of ``info`` into ``folder`` writes: the folder; for OGB also the
    archive and its unpacked folder beside it (``arxiv.zip``, ``arxiv/``)."""
    paths = [folder]
    if info.kind == "ogb":
        short = info.pyg_name.split("-", 1)[1]
        paths += [folder.parent / short, folder.parent / f"{short}.zip"]
    return paths


def _load_or_clean_up(info: DatasetInfo, folder: Path) -> Data:
    """Loads ``info`` from ``folder``. If that fails (or is interrupted) while downloading
    into a folder that did not exist before, what the download left is removed, so that
    the next run downloads again instead of failing on a partial folder."""
    new = [p for p in _leftovers(info, folder) if not p.exists()]
    try:
        return _LOADERS[info.kind](info, folder)
    except BaseException:
        for path in new:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists():
                with contextlib.suppress(OSError):
                    path.unlink()
        raise


def _damaged(info: DatasetInfo, root: Path, folder: Path, exc: Exception) -> ValueError:
    """The one-line error of a dataset that PyG / OGB could not load from ``folder``
    (truncated or garbage files): the file it was reading (:func:`_file_being_read`) and
    what to delete, or, where ``folder`` is a writable copy of a read-only root's folder,
    which file of that root to replace."""
    text = str(exc).strip().splitlines()
    first = text[0].split(". ")[0][:120] if text else ""
    reason = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    if not folder.exists():  # (a first download, removed again by _load_or_clean_up)
        return ValueError(
            f"could not load {info.name} into {str(folder)!r} ({reason}); what the download "
            "left was removed: run again to download it anew, or pass --root with an intact copy"
        )
    folder = folder.resolve()
    file = _file_being_read(exc, folder)
    if file is not None and "processed" in file.relative_to(folder).parts:
        processed = folder / "processed"
        return ValueError(
            f"dataset file {str(file)!r} is damaged ({reason}): delete {str(processed)!r} "
            f"(rm -r '{processed}') and run again; it is rebuilt from the raw files"
        )
    source = next(
        (c for c in (root / info.group / info.folder, root / info.folder) if c.is_dir()), None
    )
    if source is not None and source.resolve() != folder:  # (a copy of a read-only folder)
        shown = source / file.relative_to(folder) if file is not None else source
        what = "file" if file is not None else "folder (a file in it?)"
        return ValueError(
            f"dataset {what} {str(shown)!r} is damaged ({reason}); it is read-only here: "
            f"replace it with an intact copy, or pass --root with an intact copy of {info.name}"
        )
    what = f"file {str(file)!r}" if file is not None else f"folder {str(folder)!r} (a file in it?)"
    return ValueError(
        f"dataset {what} is damaged ({reason}): delete {str(folder)!r} (rm -r '{folder}') and "
        "run again to download it anew, or pass --root with an intact copy"
    )


def _file_being_read(exc: BaseException, folder: Path) -> Optional[Path]:
    """The file under ``folder`` that a loader was reading when it raised ``exc``: named by
    the innermost frame of the traceback that holds one (a local variable of its path, or
    an open file of it; PyG's readers and ``torch.load`` hold theirs), else ``None``."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in list(frame.f_locals.values()):
            try:
                name = value if isinstance(value, (str, os.PathLike)) else value.name
                path = Path(name).resolve()
            except Exception:  # (not a path, nor a file object)
                continue
            if folder in path.parents and path.is_file():
                return path
    return None


_LOADERS = {
    "planetoid": _load_planetoid,
    "amazon": _load_amazon,
    "coauthor": _load_coauthor,
    "wikics": _load_wikics,
    "ogb": _load_ogb,
}


def load_dataset(
    name: str,
    root: Optional[PathLike] = None,
    *,
    normalize: Optional[bool] = None,
    seed: int = 0,
    quiet: bool = False,
) -> Data:
    """Loads one graph by name.

    Args:
        name: A dataset name (see :data:`DATASETS`; case-insensitive, aliases
            such as ``"Photo"`` or ``"CS"`` accepted), or ``"synthetic"`` for
            the built-in graph (:func:`pyg_progcl.datasets.synthetic_graph`, needs no
            files).
        root: The data root (plain or grouped layout, see the module
            docstring). Defaults to :func:`default_root`. It must exist, unless
            it is the default cache root ``~/.cache/pyg_progcl``, which is
            created.
        normalize: Row-normalise features; default per dataset (all but
            WikiCS and ogbn-arxiv).
        seed: Seed of the synthetic graph (ignored for real datasets).
        quiet: Silence what PyG's dataset classes print to stderr while they process or
            download files ("Processing...", "Done!").

    Returns:
        A ``Data`` with ``x``, ``edge_index``, ``y`` (``[N]``) and, for
        datasets with public splits, ``train_mask`` / ``val_mask`` /
        ``test_mask``.

    Raises:
        ValueError: unknown name; a damaged dataset file (truncated, garbage), naming it
            and what to delete.
        FileNotFoundError: the root does not exist.
    """
    info = DATASETS[canonical_name(name)]
    if info.kind == "synthetic":
        data = synthetic_graph(seed=seed)
    else:
        if root is None:
            root = default_root()
            if DATA_ENV not in os.environ:  # the cache root is ours to create
                root.mkdir(parents=True, exist_ok=True)
        root = Path(root).expanduser()
        if not root.is_dir():
            raise FileNotFoundError(f"data root {str(root)!r} does not exist or is not a folder")
        silenced = contextlib.redirect_stderr(io.StringIO()) if quiet else contextlib.nullcontext()
        with _lock(info, root), silenced:
            folder = _locate(info, root)
            try:
                data = _load_or_clean_up(info, folder)
            except OSError:  # (a download's, the file system's: one line as they are)
                raise
            except Exception as exc:  # what PyG / OGB raise on damaged files
                raise _damaged(info, root, folder, exc) from None
    if info.normalize if normalize is None else normalize:
        data = T.NormalizeFeatures()(data)
    return data
