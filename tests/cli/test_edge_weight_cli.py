"""A graph file's ``edge_weight`` through the command line: ``train --data`` (full graph and
mini-batch), the probe and ``embed``; what an encoder cannot use is said once."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import REPO, run_main
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

from pyg_progcl import GCNEncoder, GRACEModel
from pyg_progcl.cli import get_preset, train
from pyg_progcl.io import (
    GraphFieldWarning,
    embed,
    save_model,
)

TINY = ["--epochs", "3", "--hidden", "16", "--proj", "16", "--probe-epochs", "20"]
TINY += ["--threads", "1"]


def weighted_graph(n=120, f=10, classes=3, seed=0, self_loops=False) -> Data:
    """An undirected graph (both directions of each edge carry one weight) whose features
    carry the class; ``self_loops`` adds repeated edges and self-loops (the encoders'
    edge-list path instead of the sparse adjacency)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, f, generator=g)
    x[torch.arange(n), y] += 2.0
    edges = torch.randint(0, n, (2, 3 * n), generator=g)
    if self_loops:
        edge_index = torch.cat([edges, edges[:, :20], torch.arange(10).repeat(2, 1)], dim=1)
        weight = 0.2 + 3 * torch.rand(edge_index.size(1), generator=g)
    else:
        edges, _ = remove_self_loops(coalesce(edges, num_nodes=n))
        weight = 0.2 + 3 * torch.rand(edges.size(1), generator=g)
        edge_index, weight = to_undirected(edges, weight, num_nodes=n, reduce="max")
    return Data(x=x, edge_index=edge_index, edge_weight=weight, y=y)


def without_weights(data: Data) -> Data:
    data = copy.copy(data)
    del data.edge_weight
    return data


def with_weights(data: Data, weight: torch.Tensor) -> Data:
    data = copy.copy(data)
    data.edge_weight = weight
    return data


def write_npz(path, data: Data, **override):
    arrays = {k: v.numpy() for k, v in data.items() if isinstance(v, torch.Tensor)}
    arrays.update(override)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def trained(data: Data, batch_size=None, encoder="gcn", seeds=1):
    """The result and model of a short, seeded run on ``data``."""
    config = get_preset("file:g", "grace", epochs=3, hidden=8, proj=8, probe_epochs=20,
                        batch_size=batch_size, encoder=encoder)  # fmt: skip
    return train(config, data, seeds=list(range(seeds)), progress=False, return_model=True)


def test_a_nan_weight_stops_train_and_embed_in_one_line(capsys, tmp_path):
    data = weighted_graph(n=30)
    weight = data.edge_weight.numpy().copy()
    weight[5] = np.nan
    graph = write_npz(tmp_path / "g.npz", data, edge_weight=weight)
    model = save_model(GRACEModel(GCNEncoder(10, 8), 8, 8), tmp_path / "m.pt")
    train_argv = ["train", "--data", graph, *TINY, "--output", tmp_path / "r.json"]
    embed_argv = ["embed", "--model", model, "--data", graph, "--output", tmp_path / "z.npy"]
    for argv in (train_argv, embed_argv):
        status, _, err = run_main(capsys, *map(str, argv))
        assert status == 2, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert "`edge_weight` has 1 NaN or infinite value" in err and "g.npz" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.npz", "m.pt"]


@pytest.mark.parametrize("batch_size", [None, 32], ids=["full-graph", "mini-batch"])
def test_training_uses_the_weights(batch_size):
    data = weighted_graph()
    plain, _ = trained(without_weights(data), batch_size)
    ones, _ = trained(with_weights(data, torch.ones(data.num_edges)), batch_size)
    weighted, _ = trained(data, batch_size)
    scaled, _ = trained(with_weights(data, 100 * data.edge_weight), batch_size)
    # Unit weights are the unweighted graph, exactly.
    assert ones["final_loss"] == plain["final_loss"]
    assert ones["accuracies"] == plain["accuracies"]
    # Other weights change the training; so does scaling them (against the added
    # self-loops' unit weights in GCN's normalisation).
    assert weighted["final_loss"] != plain["final_loss"]
    assert scaled["final_loss"] != weighted["final_loss"]


def test_training_on_the_stripped_graph_is_the_unweighted_run():
    data = weighted_graph()
    plain, plain_model = trained(without_weights(data))
    weighted, weighted_model = trained(data)
    again, again_model = trained(without_weights(data))
    assert again["final_loss"] == plain["final_loss"] != weighted["final_loss"]
    with torch.no_grad():
        z = [m(data.x, data.edge_index) for m in (plain_model, again_model, weighted_model)]
    assert torch.equal(z[0], z[1]) and not torch.equal(z[0], z[2])


def test_an_encoder_without_edge_weights_says_so_once_and_trains_unweighted():
    data = weighted_graph()
    plain, _ = trained(without_weights(data), encoder="mlp", seeds=2)
    with pytest.warns(GraphFieldWarning) as caught:
        weighted, model = trained(data, encoder="mlp", seeds=2)  # said once for the run
    notes = [w for w in caught if issubclass(w.category, GraphFieldWarning)]
    assert len(notes) == 1, [str(w.message) for w in notes]
    with pytest.warns(GraphFieldWarning):
        embed(model, data)
    text = str(notes[0].message)
    assert "`edge_weight` is not used: MLPEncoder takes no edge weights" in text
    assert "\n" not in text
    assert weighted["final_loss"] == plain["final_loss"]
    assert "edge_weight" in data  # the caller's graph is left as it is


def test_the_embed_command_uses_the_weights(capsys, tmp_path):
    data = weighted_graph()
    model = GRACEModel(GCNEncoder(10, 8), 8, 8)
    save_model(model, tmp_path / "m.pt")
    graphs = {
        "w": write_npz(tmp_path / "w.npz", data),
        "w100": write_npz(tmp_path / "w100.npz", data, edge_weight=100 * data.edge_weight.numpy()),
        "ones": write_npz(tmp_path / "ones.npz", data, edge_weight=np.ones(data.num_edges)),
        "none": write_npz(tmp_path / "none.npz", data, edge_weight=None),
    }
    z = {}
    for name, graph in graphs.items():
        for how, extra in (("full", []), ("batched", ["--batch-size", "17"])):
            out = tmp_path / f"{name}-{how}.npy"
            argv = ["embed", "--model", tmp_path / "m.pt", "--data", graph, "--output", out]
            status, _, err = run_main(capsys, *map(str, argv), "--quiet", *extra)
            assert status == 0, err
            z[name, how] = np.load(out)
        np.testing.assert_allclose(z[name, "batched"], z[name, "full"], atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        expected = model.eval()(data.x, data.edge_index, data.edge_weight).numpy()
    np.testing.assert_allclose(z["w", "full"], expected, atol=1e-6, rtol=1e-6)
    assert np.array_equal(z["ones", "full"], z["none", "full"])
    assert not np.allclose(z["w", "full"], z["none", "full"], atol=1e-3)
    assert not np.allclose(z["w100", "full"], z["w", "full"], atol=1e-3)


def _train_cli(capsys, tmp_path, graph, name, *extra):
    out = tmp_path / name
    out.mkdir()
    argv = ["train", "--data", graph, *TINY, "--quiet", "--output", out / "r.json",
            "--save-embeddings", out / "z.npy", *extra]  # fmt: skip
    status, _, err = run_main(capsys, *map(str, argv))
    assert status == 0, err
    return json.loads((out / "r.json").read_text()), np.load(out / "z.npy")


@pytest.mark.parametrize("batch_size", [[], ["--batch-size", "32"]], ids=["full-graph", "mini"])
def test_train_command_uses_the_file_weights(capsys, tmp_path, batch_size):
    data = weighted_graph()
    graphs = {
        "w": write_npz(tmp_path / "w.npz", data),
        "w100": write_npz(tmp_path / "w100.npz", data, edge_weight=100 * data.edge_weight.numpy()),
        "ones": write_npz(tmp_path / "ones.npz", data, edge_weight=np.ones(data.num_edges)),
        "none": write_npz(tmp_path / "none.npz", data, edge_weight=None),
    }
    runs = {name: _train_cli(capsys, tmp_path, g, name, *batch_size) for name, g in graphs.items()}
    loss = {name: result["final_loss"] for name, (result, _) in runs.items()}
    assert loss["ones"] == loss["none"] and np.array_equal(runs["ones"][1], runs["none"][1])
    assert loss["w"] != loss["none"] and loss["w100"] != loss["w"]
    assert not np.allclose(runs["w"][1], runs["none"][1], atol=1e-4)
    # The saved embeddings are the trained model's on the weighted graph.
    torch.save(data, tmp_path / "w.pt")
    result, z = _train_cli(capsys, tmp_path, tmp_path / "w.pt", "pt", *batch_size)
    assert result["final_loss"] == loss["w"] and np.array_equal(z, runs["w"][1])


@pytest.mark.slow  # the real entry point, in a subprocess: what a user sees on stderr
def test_the_command_line_says_once_in_one_line_what_it_does_not_use(tmp_path):
    data = weighted_graph()
    data.edge_attr = torch.rand(data.num_edges, 2)
    torch.save(data, tmp_path / "g.pt")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pyg_progcl", "train", "--data", "g.pt", *TINY]
    cmd += ["--encoder", "mlp", "--seeds", "2", "--save-embeddings", "z.npy"]
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    notes = [line for line in run.stderr.splitlines() if "is not used" in line]
    assert len(notes) == 1, run.stderr[-3000:]
    assert "`edge_attr` is not used" in notes[0] and "MLPEncoder takes no edge weights" in notes[0]
    assert "Traceback" not in run.stderr


def test_an_unknown_dataset_names_the_graph_file_preset():
    with pytest.raises(ValueError, match=r"unknown dataset 'karate'.*file:<name>.*'file:karate'"):
        get_preset("karate")
    assert get_preset("file:karate").dataset == "file:karate"
