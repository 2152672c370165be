"""Your graph through the command line: ``train --data --save-embeddings --save-model``,
the ``embed`` command, and interrupted or bad runs that write nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from helpers import REPO, run_main
from torch_geometric.data import Data

from pyg_progcl import GCNEncoder, GRACEModel
from pyg_progcl.cli import get_preset, train
from pyg_progcl.cli.build import build_model
from pyg_progcl.io import embed, load_model, read_graph, save_model
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


def _models():
    from torch_geometric.nn import GATConv

    from pyg_progcl import EdgeDrop, FeatureMask, MLPEncoder

    yield build_model(get_preset("synthetic", "gca", hidden=8, proj=8, activation="prelu"), 10)
    yield build_model(get_preset("synthetic", "grace", hidden=8, proj=8, encoder="mlp"), 10)
    gat = GCNEncoder(10, 8, conv=GATConv, conv_kwargs={"heads": 2, "concat": False})
    yield GRACEModel(gat, 8, 4, [EdgeDrop(0.1), FeatureMask(0.2)], FeatureMask(0.3))
    yield GRACEModel(MLPEncoder(10, 8, num_layers=3, activation="rrelu"), 8, 8)
    yield GRACEModel(GCNEncoder(10, 8), 8, projector=None)


@pytest.mark.parametrize("index", range(5))
def test_a_saved_model_loads_back_equal(tmp_path, index):
    model = list(_models())[index]
    data = random_graph()
    with torch.no_grad():  # train the weights a little away from their initialisation
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    path = save_model(model, tmp_path / "m.pt", metadata={"note": "test"})
    payload = torch.load(path, weights_only=True)  # plain values and tensors only
    assert payload["format"] == "pyg_progcl.model" and payload["version"] == 1
    assert payload["metadata"] == {"note": "test"}
    loaded = load_model(path)
    assert not loaded.training
    assert repr(loaded) == repr(model.eval())
    torch.testing.assert_close(loaded(data.x, data.edge_index), model(data.x, data.edge_index))


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


def test_train_on_a_graph_without_labels_returns_the_model():
    """Before: training ran, then the probe failed on ``data.y = None``, model lost."""
    data = random_graph(labels=False)
    config = get_preset("file:mine", "progcl-weight", epochs=4, hidden=8, proj=8)
    result, model = train(config, data, progress=False, return_model=True)
    assert result["dataset"] == "file:mine"
    assert result["accuracies"] is None and result["accuracy_mean"] is None
    assert result["probe"] == "skipped: the graph has no labels"
    assert len(result["final_loss"]) == 1 and not model.training
    assert model(data.x, data.edge_index).shape == (120, 8)
    with pytest.raises(ValueError, match="has none"):
        train(config.replace(diagnose_every=2), data, progress=False)
    with pytest.raises(ValueError, match="read_graph"):
        train(config, progress=False)  # a file's config, but no graph


def test_a_file_preset_is_the_generic_one():
    generic = get_preset("synthetic", "grace").to_dict()
    mine = get_preset("file:mine", "grace").to_dict()
    assert mine.pop("dataset") == "file:mine" and generic.pop("dataset") == "synthetic"
    assert mine == generic
    with pytest.raises(ValueError, match="names no graph file"):
        get_preset("file:", "grace")


@pytest.mark.parametrize("encoder", ["gcn", "mlp"])
def test_embed_in_batches_equals_the_full_graph(encoder):
    model = build_model(get_preset("synthetic", "grace", hidden=8, proj=8, encoder=encoder), 10)
    data = random_graph()
    full = embed(model, data)
    torch.testing.assert_close(full, model.eval()(data.x, data.edge_index))
    for batches in (embed(model, data, batch_size=17), embed(model, data, 17, [-1, -1])):
        torch.testing.assert_close(batches, full, atol=1e-5, rtol=1e-5)
    assert embed(model, data, 17, [2, 2]).shape == full.shape  # sampled: approximate
    with pytest.raises(ValueError, match="width 7, the model expects 10"):
        embed(model, Data(x=torch.randn(5, 7), edge_index=torch.zeros(2, 0, dtype=torch.long)))
    with pytest.raises(ValueError, match="needs `batch_size`"):
        embed(model, data, num_neighbors=[-1, -1])
    with pytest.raises(ValueError, match="one entry per layer"):
        embed(model, data, 17, [-1])


@pytest.mark.parametrize("suffix", [".pt", ".npz"])
@pytest.mark.parametrize("labels", [True, False])
def test_train_on_a_file_then_embed(capsys, tmp_path, suffix, labels):
    data = random_graph(labels=labels)
    graph = tmp_path / f"mine{suffix}"
    torch.save(data, graph) if suffix == ".pt" else write_npz(graph, data)
    out = tmp_path / "out"
    out.mkdir()
    argv = ["train", "--data", graph, *TINY, "--save-embeddings", out / "z.npy",
            "--save-model", out / "m.pt", "--output", out / "r.json"]  # fmt: skip
    status, _, err = run_main(capsys, *map(str, argv))
    assert status == 0, err
    result = __import__("json").loads((out / "r.json").read_text())
    assert result["dataset"] == result["config"]["dataset"] == "file:mine"
    if labels:
        assert 0.0 <= result["accuracy_mean"] <= 1.0 and result["probe"].startswith("linear")
    else:
        assert result["accuracies"] is None and "no labels" in result["probe"]
    z = np.load(out / "z.npy")
    assert z.shape == (120, 16) and z.dtype == np.float32
    model = load_model(out / "m.pt")
    np.testing.assert_allclose(z, model(data.x, data.edge_index).detach().numpy(), atol=1e-5)
    # The embed command writes the same embeddings, full-graph and in batches.
    for extra, name in [
        ([], "e.npy"),
        (["--batch-size", "25", "--num-neighbors", "-1", "-1"], "b.pt"),
    ]:
        status, _, err = run_main(capsys, "embed", "--model", str(out / "m.pt"), "--data",
                                  str(graph), "--output", str(out / name), "--quiet", *extra)  # fmt: skip
        assert status == 0, err
    np.testing.assert_allclose(np.load(out / "e.npy"), z, atol=1e-5)
    batched = torch.load(out / "b.pt", weights_only=True)
    np.testing.assert_allclose(batched.numpy(), z, atol=1e-5)


def test_a_graph_with_several_splits_per_mask_trains(capsys, tmp_path):
    data = random_graph()  # masks [N, S], as PyG's WebKB and WikiCS store their splits
    g = torch.Generator().manual_seed(1)
    data.train_mask, data.val_mask, data.test_mask = (torch.rand(120, 3, generator=g) < 0.4
                                                      for _ in range(3))  # fmt: skip
    assert read_graph(write_npz(tmp_path / "g.npz", data)).train_mask.shape == (120, 3)
    torch.save(data, tmp_path / "g.pt")
    status, _, err = run_main(capsys, "train", "--data", str(tmp_path / "g.pt"), *TINY)
    assert status == 0, err
    bad = write_npz(tmp_path / "b.npz", data, train_mask=np.ones((121, 3), bool))
    with pytest.raises(ValueError, match=r"\[120\] \(one entry per node\) or \[120, S\]"):
        read_graph(bad)


def test_the_summary_line_says_there_was_no_probe(capsys, tmp_path):
    graph = write_npz(tmp_path / "plain.npz", random_graph(labels=False))
    argv = ["train", "--data", str(graph), *[a for a in TINY if a != "--quiet"]]
    status, out, err = run_main(capsys, *argv)
    assert status == 0, err
    line = out.strip().splitlines()[-1]
    assert line.startswith("file:plain / progcl-weight: trained 1 seed(s); no accuracy:")
    assert "probe skipped: the graph has no labels" in line


def test_embed_a_new_graph_with_a_saved_model(capsys, tmp_path):
    """New nodes, another snapshot: any graph with the same feature width."""
    first, second = random_graph(n=80), random_graph(n=150, seed=1, labels=False)
    torch.save(first, tmp_path / "first.pt")
    write_npz(tmp_path / "second.npz", second)
    argv = ["train", "--data", str(tmp_path / "first.pt"), *TINY, "--save-model",
            str(tmp_path / "m.pt")]  # fmt: skip
    assert run_main(capsys, *argv)[0] == 0
    status, _, err = run_main(capsys, "embed", "--model", str(tmp_path / "m.pt"), "--data",
                              str(tmp_path / "second.npz"), "--output", str(tmp_path / "z.pt"))  # fmt: skip
    assert status == 0, err
    z = torch.load(tmp_path / "z.pt", weights_only=True)
    expected = load_model(tmp_path / "m.pt")(second.x, second.edge_index).detach()
    torch.testing.assert_close(z, expected, atol=1e-5, rtol=1e-5)


def test_resume_with_a_graph_file(capsys, tmp_path):
    graph = write_npz(tmp_path / "g.npz", random_graph())
    base = ["train", "--data", str(graph), *TINY, "--checkpoint", str(tmp_path / "ck")]
    assert run_main(capsys, *base)[0] == 0
    status, _, err = run_main(capsys, *base, "--resume", "--epochs", "5")
    assert status == 0, err
    ckpt = torch.load(tmp_path / "ck" / "seed0.pt", weights_only=True)
    assert ckpt["epoch"] == 5 and ckpt["config"]["dataset"] == "file:g"


def _one_line_error(status, err, message):
    assert status == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert message in err, err


def test_train_bad_graph_files_are_one_line_and_write_nothing(capsys, tmp_path, monkeypatch):
    import pyg_progcl.cli.train_cli as train_cli

    def no_training(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(train_cli, "train", no_training)
    out = tmp_path / "out"
    out.mkdir()
    saves = ["--save-embeddings", str(out / "z.npy"), "--save-model", str(out / "m.pt")]
    for name, (path, message) in _bad_graph_files(tmp_path / "graphs").items():
        status, _, err = run_main(capsys, "train", "--data", str(path), *TINY, *saves)
        _one_line_error(status, err, message)
        assert listing(out) == [], name
    graph = write_npz(tmp_path / "ok.npz", random_graph())
    blocker = out / "file"
    blocker.write_text("x")
    for flag in ("--save-embeddings", "--save-model"):
        target = str(blocker / "z.npy")
        status, _, err = run_main(capsys, "train", "--data", str(graph), *TINY, flag, target)
        _one_line_error(status, err, "not a folder")
    status, _, err = run_main(capsys, "train", "--data", str(graph), *TINY,
                              "--save-embeddings", str(out / "z.csv"))  # fmt: skip
    _one_line_error(status, err, "use .npy or .pt")
    status, _, err = run_main(capsys, "train", "--data", str(graph), "--dataset", "Cora")
    assert status == 2 and "not allowed with argument" in err
    status, _, err = run_main(capsys, "train", "--data", str(graph), "--root", str(tmp_path))
    _one_line_error(status, err, "--root locates --dataset's files")
    config = tmp_path / "config.json"
    config.write_text('{"dataset": "file:ok", "method": "grace"}')
    status, _, err = run_main(capsys, "train", "--config", str(config), *TINY)
    _one_line_error(status, err, "pass --data FILE")
    assert listing(out) == ["file"]


def test_train_does_not_create_the_folders_of_its_outputs(capsys, tmp_path):
    """docs/own_graph.md: an output into a missing folder stops at once (exit 2); only the
    --checkpoint folder is created."""
    graph = write_npz(tmp_path / "g.npz", random_graph())
    for flag, name in [("--output", "r.json"), ("--save-model", "m.pt"),
                       ("--save-embeddings", "z.npy")]:  # fmt: skip
        target = tmp_path / "missing" / name
        status, _, err = run_main(capsys, "train", "--data", str(graph), *TINY, flag, str(target))
        _one_line_error(status, err, "folder")
        assert "does not exist" in err and flag in err
    assert listing(tmp_path) == ["g.npz"]


def test_embed_bad_inputs_are_one_line_and_write_nothing(capsys, tmp_path):
    graph = write_npz(tmp_path / "g.npz", random_graph())
    models = _bad_model_files(tmp_path / "models")
    out = tmp_path / "out"
    out.mkdir()
    existing = out / "z.npy"
    np.save(existing, np.ones((3, 3), np.float32))
    good = existing.read_bytes()

    def embed_cli(model, data, output=existing, *extra):
        argv = ["embed", "--model", model, "--data", data, "--output", output, *extra]
        status, _, err = run_main(capsys, *map(str, argv))
        return status, err

    for path, message in models.values():
        _one_line_error(*embed_cli(path, graph), message)
    model = models["newer"][0].parent / "good.pt"
    for path, message in _bad_graph_files(tmp_path / "graphs").values():
        _one_line_error(*embed_cli(model, path), message)
    narrow = write_npz(tmp_path / "narrow.npz", random_graph(f=7))
    _one_line_error(*embed_cli(model, narrow), "width 7, the model expects 10")
    _one_line_error(*embed_cli(model, graph, out / "z.csv"), "use .npy or .pt")
    _one_line_error(*embed_cli(model, graph, out / "no" / "z.npy"), "does not exist")
    _one_line_error(*embed_cli(model, graph, existing / "z.npy"), "not a folder")
    _one_line_error(*embed_cli(model, graph, existing, "--num-neighbors", "-1"), "--batch-size")
    assert listing(out) == ["z.npy"] and existing.read_bytes() == good


@pytest.mark.slow  # the real entry point, in a subprocess
def test_the_embed_command_runs_as_a_process(tmp_path):
    model = save_model(GRACEModel(GCNEncoder(10, 8), 8, 8), tmp_path / "m.pt")
    graph = write_npz(tmp_path / "g.npz", random_graph())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "pyg_progcl", "embed", "--model", str(model), "--data"]
    ok = subprocess.run([*cmd, str(graph), "--output", str(tmp_path / "z.npy")],
                        env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "wrote" in ok.stdout and np.load(tmp_path / "z.npy").shape == (120, 8)
    bad = subprocess.run([*cmd, str(tmp_path / "nope.npz"), "--output", str(tmp_path / "y.npy")],
                         env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    _one_line_error(bad.returncode, bad.stderr, "does not exist")
    assert not (tmp_path / "y.npy").exists()


@pytest.fixture(scope="module")
def big_graph(tmp_path_factory):
    """A graph whose batched embedding takes seconds, and a model for it."""
    folder = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(0)
    n = 400_000
    np.savez(folder / "big.npz", x=rng.random((n, 12), dtype=np.float32),
             edge_index=rng.integers(0, n, (2, 8 * n)))  # fmt: skip
    save_model(GRACEModel(GCNEncoder(12, 16), 16, 16), folder / "m.pt")
    return folder


@pytest.mark.slow  # a subprocess stopped by a signal mid-run
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_an_interrupted_embed_leaves_no_partial_output(tmp_path, big_graph, sig, existing):
    out = tmp_path / "z.npy"
    if existing:
        np.save(out, np.arange(6, dtype=np.float32))
    before = out.read_bytes() if existing else None
    err_file = tmp_path / "stderr.txt"
    argv = ["embed", "--model", str(big_graph / "m.pt"), "--data", str(big_graph / "big.npz"),
            "--output", str(out), "--batch-size", "20000", "--threads", "1"]  # fmt: skip
    with open(err_file, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pyg_progcl", *argv], stdout=subprocess.DEVNULL, stderr=err,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while "embedding: batch" not in err_file.read_text():  # the embedding has started
            assert proc.poll() is None, err_file.read_text()
            assert time.monotonic() < deadline, "embedding did not start within 120 s"
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(sig)
        proc.wait(timeout=120)
    text = err_file.read_text()
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM, text
        assert "terminated; nothing written" in text and "Traceback" not in text
    else:
        assert proc.returncode == -signal.SIGKILL
    assert listing(tmp_path) == (["stderr.txt", "z.npy"] if existing else ["stderr.txt"])
    if existing:
        assert out.read_bytes() == before


@pytest.mark.slow  # two processes under torchrun
def test_distributed_training_on_an_unlabelled_weighted_graph_file(tmp_path):
    data = random_graph(n=300, labels=False)
    data.edge_weight = 0.1 + 2 * torch.rand(
        data.num_edges, generator=torch.Generator().manual_seed(1)
    )
    write_npz(tmp_path / "g.npz", data)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd += ["-m", "pyg_progcl", "train", "--distributed", "--data", "g.npz", *TINY]
    cmd += ["--batch-size", "64", "--warmup-epochs", "1", "--checkpoint", "ckpt"]
    cmd += ["--save-embeddings", "z.npy", "--save-model", "m.pt", "--output", "r.json"]
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert listing(tmp_path) == ["ckpt", "g.npz", "m.pt", "r.json", "z.npy"]  # rank 0 alone
    z = np.load(tmp_path / "z.npy")
    model = load_model(tmp_path / "m.pt")
    expected = model(data.x, data.edge_index, data.edge_weight).detach().numpy()
    np.testing.assert_allclose(z, expected, rtol=1e-5, atol=1e-5)  # with the file's weights
    assert not np.allclose(z, model(data.x, data.edge_index).detach().numpy(), atol=1e-4)
    assert '"accuracy_mean": null' in (tmp_path / "r.json").read_text()
