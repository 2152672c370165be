"""Link prediction and clustering through the command line: ``--probe link cluster``, its
summary and result keys, and the trainer's held-out edges."""

import json

import numpy as np
import pytest
import torch
from helpers import (
    TINY,
    InterruptError,
    one_line_error,
    run_main,
    small_config,
    small_graph,
    stop_at,
)
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from pyg_progcl.cli import train
from pyg_progcl.cli.loop import train_seed
from pyg_progcl.evaluation import split_edges


def pair_set(edge_index):
    """The unordered pairs of ``edge_index``."""
    return {(min(u, v), max(u, v)) for u, v in edge_index.t().tolist()}


def directed_set(edge_index):
    return {(u, v) for u, v in edge_index.t().tolist()}


def test_split_holds_out_whole_undirected_edges_with_negatives_from_non_edges():
    data = small_graph()
    data.edge_weight = torch.rand(data.num_edges)
    split = split_edges(data, seed=3)
    edges = pair_set(data.edge_index)
    train = directed_set(split.train_data.edge_index)
    held = pair_set(split.val_edges) | pair_set(split.test_edges)
    sizes = split.sizes()
    num_pairs = len({p for p in edges if p[0] != p[1]})
    assert sizes["test_edges"] == num_pairs // 10 and sizes["val_edges"] == num_pairs // 20
    assert sizes["train_edges"] == num_pairs - sizes["test_edges"] - sizes["val_edges"]
    assert sizes["seed"] == 3
    assert held <= edges and not pair_set(split.val_edges) & pair_set(split.test_edges)
    # No held-out pair is in the training graph, in either direction.
    assert not any((u, v) in train or (v, u) in train for u, v in held)
    # Every other edge is, with its weight.
    kept = [
        i
        for i, (u, v) in enumerate(data.edge_index.t().tolist())
        if (min(u, v), max(u, v)) not in held
    ]
    assert split.train_data.edge_index.tolist() == data.edge_index[:, kept].tolist()
    assert torch.equal(split.train_data.edge_weight, data.edge_weight[kept])
    assert torch.equal(split.train_data.x, data.x) and torch.equal(split.train_data.y, data.y)
    # One negative per positive: distinct non-edges, u < v.
    for pos, neg in (
        (split.val_edges, split.val_negatives),
        (split.test_edges, split.test_negatives),
    ):
        assert neg.shape == pos.shape and bool((neg[0] < neg[1]).all())
        assert not pair_set(neg) & edges
    negatives = pair_set(split.val_negatives) | pair_set(split.test_negatives)
    assert len(negatives) == split.val_negatives.size(1) + split.test_negatives.size(1)


def test_no_held_out_edge_reaches_training_its_views_or_the_embeddings():
    """Every edge_index any module sees in a run with the link probe (the augmenters' input,
    each augmented view, the probe's embedding) holds no held-out pair, in either
    direction; the pairs are edges of the full graph that a model would otherwise see."""
    data = small_graph()
    split = split_edges(data, seed=0)
    held = pair_set(split.val_edges) | pair_set(split.test_edges)
    seen = []

    def record(module, args):
        seen.extend(a for a in args if torch.is_tensor(a) and a.dim() == 2 and a.size(0) == 2
                    and not a.is_floating_point())  # fmt: skip

    hook = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        config = small_config("gca", epochs=6, warmup_epochs=3, eval_every=3)  # adaptive views
        _, _, record_ = train_seed(config, data, 0, progress=False, probes=("link",), edges=split)
    finally:
        hook.remove()
    assert len(seen) >= 6 * 2  # (each epoch's two views at least)
    for edge_index in seen:
        assert not pair_set(edge_index) & held
    assert set(record_["link"]) == {"val", "test"}
    # Without the split, the same run sees them.
    seen.clear()
    hook = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        train_seed(config.replace(epochs=1), data, 0, progress=False, probes=("linear",))
    finally:
        hook.remove()
    assert any(pair_set(e) & held for e in seen)


def test_a_resumed_link_run_equals_an_uninterrupted_one(tmp_path):
    """The split depends on the seed alone, so a resumed run trains on the same graph
    (its checkpoint's graph record matches) and ends with the same scores."""
    data, probes = small_graph(), ("linear", "link", "cluster")
    config = small_config("grace", epochs=8, eval_every=4, probe_epochs=30)
    _, _, whole = train_seed(config, data, 2, progress=False, probes=probes)
    with pytest.raises(InterruptError):
        train_seed(config, data, 2, checkpoint_dir=tmp_path, checkpoint_every=2,
                   progress=False, probes=probes, callback=stop_at(5))  # fmt: skip
    _, _, resumed = train_seed(
        config, data, 2, checkpoint_dir=tmp_path, resume=True, progress=False, probes=probes
    )
    assert resumed["link"] == whole["link"] and resumed["cluster"] == whole["cluster"]
    assert resumed["history"] == whole["history"]
    with pytest.raises(ValueError, match="graph"):  # the full graph is another graph
        train_seed(config.replace(epochs=10), data, 2, checkpoint_dir=tmp_path, resume=True,
                   progress=False)  # fmt: skip


def test_link_prediction_scores_of_a_trained_model_beat_chance():
    data = small_graph()
    result = train(
        small_config("grace", epochs=40), data, progress=False, probes=["link", "cluster"]
    )
    assert result["accuracies"] is None and "not among" in result["probe"]
    assert result["link"]["mean"]["auc"] > 0.6 and result["cluster"]["mean"]["nmi"] > 0.1


def test_library_scores_match_the_runs():
    data = small_graph()
    split = split_edges(data, seed=0)
    model = train(small_config("grace", epochs=5), data, progress=False, probes=["link"],
                  return_model=True)  # fmt: skip
    result, model = model
    z = model(split.train_data.x, split.train_data.edge_index).detach()
    assert split.scores(z)["test"]["auc"] == pytest.approx(result["link"]["auc"][0])


def test_cli_probes_write_the_link_and_cluster_objects(tmp_path, capsys):
    out = tmp_path / "r.json"
    status, stdout, err = run_main(
        capsys, "train", *[a for a in TINY if a != "--quiet"], "--seeds", "2", "--probe",
        "linear", "link", "cluster", "--output", str(out),
    )  # fmt: skip
    assert status == 0, err
    result = json.loads(out.read_text())
    link, cluster = result["link"], result["cluster"]
    for key in ("auc", "ap", "hits@20", "hits@50", "hits@100"):
        assert len(link[key]) == 2 and link["mean"][key] == pytest.approx(np.mean(link[key]))
    assert set(link["split"]) == {"train_edges", "val_edges", "test_edges", "seed"}
    for key in ("nmi", "ari", "acc"):
        assert len(cluster[key]) == 2 and cluster["mean"][key] == pytest.approx(
            np.mean(cluster[key])
        )
    assert len(result["accuracies"]) == 2 and result["probes"] == ["linear", "link", "cluster"]
    assert "link prediction" in stdout and "AUC" in stdout and "Hits@50" in stdout
    assert "clustering (k-means" in stdout and "NMI" in stdout


def test_cli_default_probe_is_linear_only(tmp_path, capsys):
    out = tmp_path / "r.json"
    status, stdout, err = run_main(capsys, "train", *TINY, "--output", str(out))
    assert status == 0, err
    result = json.loads(out.read_text())
    assert result["probes"] == ["linear"] and "link" not in result and "cluster" not in result


def test_cli_link_and_cluster_on_an_unlabelled_graph_file(tmp_path, capsys):
    data = small_graph()
    path = tmp_path / "g.pt"
    torch.save(Data(x=data.x, edge_index=data.edge_index), path)
    out = tmp_path / "r.json"
    argv = ["train", "--data", str(path), *[a for a in TINY if a != "--quiet"]]
    status, stdout, err = run_main(
        capsys, *argv, "--probe", "link", "cluster", "--output", str(out)
    )
    assert status == 0, err
    result = json.loads(out.read_text())
    assert len(result["link"]["auc"]) == 1 and "labels" in result["cluster"]["skipped"]
    assert "clustering skipped: the graph has no labels" in stdout


def test_cli_impossible_split_is_one_line_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "g.pt"
    torch.save(
        Data(x=torch.randn(30, 4), edge_index=to_undirected(torch.tensor([[0, 1], [1, 2]]))), path
    )
    out = tmp_path / "r.json"
    status, _, err = run_main(
        capsys, "train", "--data", str(path), *TINY, "--probe", "link", "--output", str(out)
    )
    one_line_error(status, err, "link prediction needs", "has 2 edges")
    assert not out.exists()
    status, _, err = run_main(capsys, "train", *TINY, "--probe", "links")
    assert status == 2 and "invalid choice" in err


def test_cli_saved_embeddings_of_a_link_run_are_of_the_training_graph(tmp_path, capsys):
    from pyg_progcl.io import load_model

    data = small_graph()
    path = tmp_path / "g.pt"
    torch.save(data, path)
    z_path, m_path = tmp_path / "z.pt", tmp_path / "m.pt"
    status, _, err = run_main(
        capsys, "train", "--data", str(path), *TINY, "--probe", "link", "--seed", "4",
        "--save-embeddings", str(z_path), "--save-model", str(m_path),
    )  # fmt: skip
    assert status == 0, err
    model = load_model(m_path).eval()
    train_graph = split_edges(data, seed=4).train_data
    with torch.no_grad():
        expected = model(train_graph.x, train_graph.edge_index)
        full = model(data.x, data.edge_index)
    saved = torch.load(z_path, weights_only=True)
    assert torch.allclose(saved, expected, atol=1e-5) and not torch.allclose(saved, full, atol=1e-5)
