"""Your graph in, embeddings out, in Python: graph files (``read_graph``), model files
(``save_model`` / ``load_model``) and ``embed``; every bad input is one clear error and
writes nothing."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from pyg_progcl import GCNEncoder, GRACEModel
from pyg_progcl.io import load_model, read_graph, save_model
from pyg_progcl.io.files import payload_checksum

TINY = ["--epochs", "3", "--hidden", "16", "--proj", "16", "--probe-epochs", "20"]
TINY += ["--quiet", "--threads", "1"]


def random_graph(n=120, f=10, classes=3, seed=0, labels=True) -> Data:
    """A random graph whose features carry the class (so that a probe can beat chance)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, f, generator=g)
    x[torch.arange(n), y] += 2.0
    edge_index = torch.randint(0, n, (2, 4 * n), generator=g)
    data = Data(x=x, edge_index=edge_index)
    if labels:
        data.y = y
        data.train_mask = torch.rand(n, generator=g) < 0.5
    return data


def write_npz(path, data: Data, **override):
    arrays = {k: v.numpy() for k, v in data.items() if isinstance(v, torch.Tensor)}
    arrays.update(override)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    np.savez(path, **arrays)
    return path


def listing(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ----------------------------------------------------------------------------- graph files


@pytest.mark.parametrize("suffix", [".pt", ".npz"])
@pytest.mark.parametrize("labels", [True, False])
def test_read_graph_reads_both_formats(tmp_path, suffix, labels):
    data = random_graph(labels=labels)
    path = tmp_path / f"g{suffix}"
    if suffix == ".pt":
        torch.save(data, path)
    else:
        write_npz(path, data, x=data.x.double().numpy())  # float64 arrays become float32
    got = read_graph(path)
    assert got.x.dtype == torch.float32 and torch.equal(got.x, data.x)
    assert got.edge_index.dtype == torch.long and torch.equal(got.edge_index, data.edge_index)
    assert ("y" in got) == labels
    if labels:
        assert torch.equal(got.y, data.y) and torch.equal(got.train_mask, data.train_mask)


def _bad_graph_files(tmp_path):
    """``(name, path, message)`` of broken graph files."""
    tmp_path.mkdir(exist_ok=True)
    data = random_graph(n=20)
    n = 20
    cases = {
        "missing": (tmp_path / "nope.npz", "does not exist"),
        "suffix": (_bytes(tmp_path / "g.csv", b"0,1\n"), "unknown suffix '.csv'"),
        "no-edge-index": (write_npz(tmp_path / "a.npz", data, edge_index=None), "'edge_index'"),
        "no-x": (write_npz(tmp_path / "b.npz", data, x=None), "'x'"),
        "extra-array": (write_npz(tmp_path / "c.npz", data, w=np.ones(3)), "unknown arrays"),
        "out-of-range": (
            write_npz(tmp_path / "d.npz", data, edge_index=np.array([[0, 1], [2, n]])),
            f"node indices >= num_nodes = {n}",
        ),
        "negative": (
            write_npz(tmp_path / "e.npz", data, edge_index=np.array([[0, -1], [2, 3]])),
            "negative node indices",
        ),
        "float-ids": (
            write_npz(tmp_path / "f.npz", data, edge_index=np.array([[0.0, 1], [2, 3]])),
            "must be an integer tensor",
        ),
        "shape": (
            write_npz(tmp_path / "g.npz", data, edge_index=np.zeros((3, 4), dtype=np.int64)),
            "shape [2, num_edges]",
        ),
        "nan": (_with_x(tmp_path / "h.npz", data, np.nan), "NaN or infinite"),
        "inf": (_with_x(tmp_path / "i.npz", data, np.inf), "NaN or infinite"),
        "empty": (
            write_npz(
                tmp_path / "j.npz",
                data,
                x=np.zeros((0, 4), np.float32),
                edge_index=np.zeros((2, 0), np.int64),
                y=None,
                train_mask=None,
            ),
            "empty",
        ),  # fmt: skip
        "labels-length": (write_npz(tmp_path / "k.npz", data, y=np.zeros(n - 1, int)), "`y`"),
        "labels-float": (write_npz(tmp_path / "l.npz", data, y=np.zeros(n)), "integer class"),
        "mask-length": (
            write_npz(tmp_path / "m.npz", data, train_mask=np.ones(n + 1, bool)),
            "`train_mask` must have shape",
        ),
        "mask-dtype": (
            write_npz(tmp_path / "o.npz", data, train_mask=np.ones(n, np.int64)),
            "`train_mask` must be a boolean mask",
        ),
        "corrupt-pt": (_bytes(tmp_path / "p.pt", b"not a torch file"), "not a readable"),
        "truncated-npz": (_truncated(write_npz(tmp_path / "q.npz", data)), "not a readable"),
        "pt-not-data": (_saved(tmp_path / "r.pt", {"x": data.x}), "holds a dict"),
        "folder": ((tmp_path / "dir.npz"), "is a folder"),
    }
    (tmp_path / "dir.npz").mkdir()
    return cases


def _with_x(path, data, value):
    x = data.x.numpy().copy()
    x[3, 1] = value
    return write_npz(path, data, x=x)


def _bytes(path, content: bytes):
    path.write_bytes(content)
    return path


def _truncated(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def _saved(path, obj):
    torch.save(obj, path)
    return path


def test_bad_graph_files_are_clear_errors(tmp_path):
    for name, (path, message) in _bad_graph_files(tmp_path).items():
        kind = FileNotFoundError if name == "missing" else ValueError
        with pytest.raises(kind, match=None) as info:
            read_graph(path)
        assert message in str(info.value), (name, str(info.value))
        assert str(path.name) in str(info.value), name  # names the file


def test_a_pt_file_that_would_run_code_is_refused(tmp_path):
    """``weights_only``: a pickled object of another class is not unpickled."""
    path = tmp_path / "evil.pt"
    torch.save(Data(x=torch.randn(3, 2), edge_index=torch.zeros(2, 0, dtype=torch.long),
                    note=warnings.WarningMessage), path)  # fmt: skip
    with pytest.raises(ValueError, match="not a readable torch file"):
        read_graph(path)


# ----------------------------------------------------------------------------- model files


def test_save_model_says_what_it_supports(tmp_path):
    from torch_geometric.nn import GraphSAGE, SAGEConv
    from torch_geometric.nn.aggr import SumAggregation

    with pytest.raises(ValueError, match="GCNEncoder or an MLPEncoder"):
        save_model(GRACEModel(GraphSAGE(10, 8, 2, 8), 8, 8), tmp_path / "a.pt")
    with pytest.raises(ValueError, match="supports a GRACEModel"):
        save_model(GCNEncoder(10, 8), tmp_path / "b.pt")
    odd = GCNEncoder(10, 8, conv=SAGEConv, conv_kwargs={"aggr": SumAggregation()})
    with pytest.raises(ValueError, match="plain JSON"):
        save_model(GRACEModel(odd, 8, 8), tmp_path / "c.pt")
    with pytest.raises(ValueError, match="activations named by a string"):
        save_model(GRACEModel(GCNEncoder(10, 8, activation=torch.nn.Softplus()), 8, 8),
                   tmp_path / "d.pt")  # fmt: skip
    assert listing(tmp_path) == []
    custom = GRACEModel(GCNEncoder(10, 8), 8, 8, augment1=lambda x, e, w: (x, e, w))
    with pytest.warns(UserWarning, match="not saved"):
        save_model(custom, tmp_path / "e.pt")
    assert load_model(tmp_path / "e.pt").augment1 is None
    headed = GRACEModel(GCNEncoder(10, 8), 8, projector=torch.nn.Linear(8, 4))
    with pytest.raises(ValueError, match="the default projection head or none"):
        save_model(headed, tmp_path / "f.pt")
    assert not (tmp_path / "f.pt").exists()


def test_a_model_file_keeps_the_default_heads_keys(tmp_path):
    # Files written before the `projector` argument describe the default head by
    # `proj_channels` alone and hold its weights under `projector.0` / `projector.2`.
    path = save_model(GRACEModel(GCNEncoder(10, 8), 8, 4), tmp_path / "m.pt")
    payload = torch.load(path, weights_only=True)
    assert "projector" not in payload["config"] and payload["config"]["proj_channels"] == 4
    heads = sorted(k for k in payload["state_dict"] if k.startswith("projector."))
    assert heads == [
        "projector.0.bias",
        "projector.0.weight",
        "projector.2.bias",
        "projector.2.weight",
    ]
    assert isinstance(load_model(path).projector[1], torch.nn.ELU)


def _bad_model_files(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    good = save_model(GRACEModel(GCNEncoder(10, 8), 8, 8), tmp_path / "good.pt")
    newer = torch.load(good, weights_only=True)
    newer["version"] = 99
    broken = torch.load(good, weights_only=True)
    broken["state_dict"].popitem()
    edited = dict(broken)  # (not sealed again: its checksum no longer fits)
    broken["checksum"] = payload_checksum(broken)
    unsealed = torch.load(good, weights_only=True)
    del unsealed["checksum"]
    return {
        "missing": (tmp_path / "nope.pt", "does not exist"),
        "corrupt": (_bytes(tmp_path / "c.pt", b"\x00garbage" * 10), "not a readable"),
        "truncated": (_bytes(tmp_path / "t.pt", good.read_bytes()[:-200]), "not a readable"),
        "graph": (write_npz(tmp_path / "g.npz", random_graph()), "not a readable"),
        "other-dict": (_saved(tmp_path / "o.pt", {"weights": torch.ones(2)}), "no 'format'"),
        "checkpoint": (_saved(tmp_path / "k.pt", {"model": {}, "config": {}}), "checkpoint"),
        "newer": (_saved(tmp_path / "n.pt", newer), "version 99"),
        "weights": (_saved(tmp_path / "w.pt", broken), "do not make a model"),
        "edited": (_saved(tmp_path / "e.pt", edited), "does not match its checksum"),
        "unsealed": (_saved(tmp_path / "u.pt", unsealed), "has no checksum"),
    }


def test_bad_model_files_are_clear_errors(tmp_path):
    for name, (path, message) in _bad_model_files(tmp_path).items():
        kind = FileNotFoundError if name == "missing" else ValueError
        with pytest.raises(kind) as info:
            load_model(path)
        assert message in str(info.value), (name, str(info.value))


# ----------------------------------------------------------------------------- Python API


def test_a_failed_embeddings_write_keeps_the_old_file(tmp_path, monkeypatch):
    from pyg_progcl.io import save_embeddings

    out = tmp_path / "z.npy"
    save_embeddings(torch.ones(4, 2), out)
    good = out.read_bytes()

    def broken_save(fh, array, **kwargs):
        fh.write(b"\x93NUMPY half")
        raise OSError("disk full")

    monkeypatch.setattr(np, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_embeddings(torch.zeros(4, 2), out)
    assert out.read_bytes() == good and listing(tmp_path) == ["z.npy"]


# ----------------------------------------------------------------------------- command line


@pytest.mark.slow  # the benchmark script end to end, on a small graph (two processes)
def test_the_embed_benchmark_reports_time_and_memory(tmp_path, monkeypatch, capsys):
    from helpers import load_script

    script = load_script("embed_scale")
    argv = ["embed_scale.py", "--nodes", "3000", "--batch-size", "1000", "--full-graph",
            "--threads", "1", "--epochs", "2", "--work", str(tmp_path)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    script.main()
    out = capsys.readouterr().out
    rows = [r for r in out.splitlines() if r.startswith("| 3,000 |")]
    assert [r.split(" | ")[2] for r in rows] == ["1,000", "whole graph"]
    for row in rows:
        peak_gb = float(row.strip(" |").split(" | ")[-1])
        assert 0.05 < peak_gb < 20  # a process's peak resident memory, in GB
    assert "embeddings: 3,000 x 64 float32" in out
