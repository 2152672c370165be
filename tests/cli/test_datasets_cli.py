"""The command line's datasets (pyg_progcl.cli.datasets): the harness's names, read-only
roots, and the real loaders on small files."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.utils import is_undirected

from pyg_progcl.cli.datasets import DATASETS, canonical_name, load_dataset
from pyg_progcl.datasets import synthetic_graph


@pytest.mark.parametrize(
    "alias,name",
    [
        ("cora", "Cora"),
        ("CITESEER", "CiteSeer"),
        ("Photo", "Amazon-Photo"),
        ("amazon_computers", "Amazon-Computers"),
        ("coauthor-cs", "Coauthor-CS"),
        ("Physics", "Coauthor-Physics"),
        ("wiki-cs", "WikiCS"),
        ("ogbn_arxiv", "ogbn-arxiv"),
        ("Synthetic", "synthetic"),
    ],
)
def test_canonical_name_aliases(alias, name):
    assert canonical_name(alias) == name
    assert name in DATASETS


def test_unknown_dataset_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown dataset 'Kora'"):
        canonical_name("Kora")
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("Kora")


def test_the_harness_loads_the_library_graph():
    loaded, built = (
        load_dataset("synthetic", seed=3),
        T.NormalizeFeatures()(synthetic_graph(seed=3)),
    )
    assert torch.equal(loaded.x, built.x) and torch.equal(loaded.edge_index, built.edge_index)


def test_load_synthetic_normalises_features():
    data = load_dataset("synthetic")
    sums = data.x.sum(1)
    nonzero = sums > 0
    assert torch.allclose(sums[nonzero], torch.ones(int(nonzero.sum())), atol=1e-5)
    raw = load_dataset("synthetic", normalize=False)
    assert set(raw.x.unique().tolist()) <= {0.0, 1.0}


def test_missing_root_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="data root"):
        load_dataset("Cora", tmp_path / "nope")
    # A root named by the environment variable is not created either.
    monkeypatch.setenv("PYG_PROGCL_DATA", str(tmp_path / "env-root"))
    with pytest.raises(FileNotFoundError, match="env-root"):
        load_dataset("Cora")
    assert not (tmp_path / "env-root").exists()


def _tree(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_read_only_grouped_root_is_copied_to_the_cache(readonly_root, _isolated_cache):
    before = _tree(readonly_root)
    data = load_dataset("Cora", readonly_root)
    assert data.num_nodes == 2708 and data.num_edges == 10556
    assert int(data.y.max()) + 1 == 7
    assert torch.allclose(data.x.sum(1), torch.ones(2708), atol=1e-5)  # NormalizeFeatures
    assert _tree(readonly_root) == before  # nothing written next to the read-only raw files
    processed = [p for p in _isolated_cache.rglob("processed") if p.parent.name == "Cora"]
    assert processed, "the copy in the cache holds PyG's processed files"
    # A second load reuses the processed copy and gives the same graph.
    again = load_dataset("cora", readonly_root)
    assert torch.equal(again.edge_index, data.edge_index)


def test_read_only_amazon_photo(readonly_root):
    if not (readonly_root / "amazon" / "Photo").is_dir():
        pytest.skip("Amazon-Photo not in the shared data")
    data = load_dataset("Amazon-Photo", readonly_root)
    assert (data.num_nodes, data.num_edges, data.num_features) == (7650, 238162, 745)


def test_plain_writable_root_is_used_in_place(shared_data, tmp_path):
    import shutil

    from conftest import make_writable

    shutil.copytree(shared_data / "planetoid" / "CiteSeer", tmp_path / "CiteSeer")
    make_writable(tmp_path / "CiteSeer")  # copytree keeps the shared folder's mode bits
    data = load_dataset("CiteSeer", tmp_path)
    assert data.num_nodes == 3327
    assert (tmp_path / "CiteSeer" / "processed").is_dir()


def _write_wikics(root, n=30, f=6, splits=20):
    rng = np.random.RandomState(0)
    raw = root / "WikiCS" / "raw"
    raw.mkdir(parents=True)
    links = [[(i + 1) % n, (i + 2) % n] for i in range(n)]
    masks = (rng.rand(splits, n) < 0.3).tolist()
    payload = {
        "features": (rng.rand(n, f) * 2 - 1).tolist(),
        "labels": (np.arange(n) % 3).tolist(),
        "links": links,
        "train_masks": masks,
        "val_masks": masks,
        "stopping_masks": masks,
        "test_mask": (rng.rand(n) < 0.5).tolist(),
    }
    (raw / "data.json").write_text(json.dumps(payload))
    return payload


def test_wikics_loader_keeps_20_splits_and_raw_features(tmp_path):
    payload = _write_wikics(tmp_path)
    data = load_dataset("WikiCS", tmp_path)
    assert data.train_mask.shape == (30, 20) and data.test_mask.shape == (30,)
    # No NormalizeFeatures for WikiCS (negative values survive, rows do not sum to 1).
    assert torch.allclose(data.x, torch.tensor(payload["features"], dtype=torch.float))
    assert is_undirected(data.edge_index)


def _write_csv_gz(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        for row in rows:
            fh.write(",".join(str(v) for v in np.atleast_1d(row)) + "\n")


def write_tiny_arxiv(root, n=40, f=5, num_classes=4):
    """A tiny graph in the on-disk layout of ogbn-arxiv (see docs/environment.md)."""
    rng = np.random.RandomState(0)
    base = root / "ogbn_arxiv"
    src = np.arange(n)
    edges = np.stack([src, (src * 7 + 3) % n], 1)
    edges = edges[edges[:, 0] != edges[:, 1]]
    (base).mkdir(parents=True)
    (base / "RELEASE_v1.txt").write_text("tiny test copy\n")
    _write_csv_gz(base / "raw" / "edge.csv.gz", edges)
    _write_csv_gz(base / "raw" / "node-feat.csv.gz", rng.randn(n, f).round(4))
    _write_csv_gz(base / "raw" / "num-node-list.csv.gz", [n])
    _write_csv_gz(base / "raw" / "num-edge-list.csv.gz", [len(edges)])
    _write_csv_gz(base / "raw" / "node_year.csv.gz", 2010 + np.arange(n) % 10)
    _write_csv_gz(base / "raw" / "node-label.csv.gz", np.arange(n) % num_classes)
    perm = rng.permutation(n)
    for name, idx in [("train", perm[:20]), ("valid", perm[20:30]), ("test", perm[30:])]:
        _write_csv_gz(base / "split" / "time" / f"{name}.csv.gz", idx)
    return edges


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_ogbn_arxiv_loader_on_a_tiny_copy(tmp_path):
    pytest.importorskip("ogb")
    edges = write_tiny_arxiv(tmp_path)
    data = load_dataset("ogbn-arxiv", tmp_path)
    assert data.num_nodes == 40 and data.y.shape == (40,)
    assert data.y.tolist() == [i % 4 for i in range(40)]
    pairs = {tuple(sorted(e)) for e in edges.tolist()}
    assert is_undirected(data.edge_index) and data.num_edges == 2 * len(pairs)
    assert (data.train_mask.sum(), data.val_mask.sum(), data.test_mask.sum()) == (20, 10, 10)
    assert not (data.train_mask & data.test_mask).any()


def test_ogb_folder_without_release_file_is_an_error_not_a_prompt(tmp_path):
    pytest.importorskip("ogb")
    os.makedirs(tmp_path / "ogbn_arxiv" / "raw")
    with pytest.raises(FileNotFoundError, match="RELEASE.*delete it .rm -r .*ogbn_arxiv"):
        load_dataset("ogbn-arxiv", tmp_path)


@pytest.mark.parametrize(
    "name,folders,archives",
    [("Cora", ["Cora"], []), ("arxiv", ["ogbn_arxiv", "arxiv"], ["arxiv.zip"])],
)
def test_a_failed_download_leaves_nothing_that_breaks_the_next_run(
    tmp_path, monkeypatch, name, folders, archives
):
    """A download that fails halfway (here: a loader that writes part of its files, then
    loses the network) leaves no partial folder or archive: the next run downloads anew.
    What was there before stays."""
    import pyg_progcl.cli.datasets as datasets

    (tmp_path / "keep.txt").write_text("mine")
    info = datasets.DATASETS[canonical_name(name)]

    def broken(info, folder):
        for name in folders:
            (folder.parent / name / "raw").mkdir(parents=True, exist_ok=True)
            (folder.parent / name / "raw" / "part").write_bytes(b"half a file")
        for name in archives:
            (folder.parent / name).write_bytes(b"PK\x03\x04 half an archive")
        raise OSError("Network is unreachable")

    monkeypatch.setitem(datasets._LOADERS, info.kind, broken)
    with pytest.raises(OSError, match="unreachable"):
        load_dataset(name, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
    (tmp_path / info.folder).mkdir()  # there before: not removed
    with pytest.raises(OSError, match="unreachable"):
        load_dataset(name, tmp_path)
    assert (tmp_path / info.folder).is_dir()


def test_cache_copy_is_refreshed_when_a_source_file_changes(tmp_path, _isolated_cache):
    from pyg_progcl.cli.datasets import _writable_copy

    src = tmp_path / "Toy"
    (src / "raw").mkdir(parents=True)
    raw = src / "raw" / "labels.txt"
    raw.write_text("0 1 2")
    dst = _writable_copy(src)
    (dst / "processed").mkdir()
    (dst / "processed" / "data.pt").write_text("from the old labels")
    assert _writable_copy(src) == dst and (dst / "processed" / "data.pt").exists()  # reused
    raw.write_text("2 1 0")  # same size, new content and time
    later = raw.stat().st_mtime + 5
    os.utime(raw, (later, later))
    dst = _writable_copy(src)
    assert (dst / "raw" / "labels.txt").read_text() == "2 1 0"
    assert not (dst / "processed").exists()  # PyG reprocesses the new files


def test_loaders_of_one_dataset_take_turns(tmp_path, _isolated_cache):
    """A second process waits while another holds the dataset's lock (without the lock,
    runs started side by side read each other's half-written ``processed/`` files)."""
    import subprocess
    import sys
    import time

    from pyg_progcl.cli.datasets import DATASETS, _lock

    _write_wikics(tmp_path / "warm")
    _write_wikics(tmp_path / "root")
    script = (  # the first load imports and processes, so the second alone can wait
        "import sys\nfrom pyg_progcl.cli.datasets import load_dataset\n"
        "load_dataset('WikiCS', sys.argv[1] + '/warm')\nprint('loading', flush=True)\n"
        "print(load_dataset('WikiCS', sys.argv[1] + '/root').num_nodes, flush=True)\n"
    )
    with _lock(DATASETS["WikiCS"], tmp_path / "root"):
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout.readline().strip() == "loading"
        time.sleep(3.0)
        assert proc.poll() is None, "the second loader did not wait for the lock"
        assert not (tmp_path / "root" / "WikiCS" / "processed").exists()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.strip() == "30"


def test_a_writable_root_loads_when_the_cache_cannot_be_written(tmp_path, monkeypatch):
    # The lock lives in the cache; a writable root needs no cache, so it loads unlocked.
    _write_wikics(tmp_path / "root")
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("PYG_PROGCL_CACHE", str(tmp_path / "not-a-folder"))
    assert load_dataset("WikiCS", tmp_path / "root").num_nodes == 30
