"""``python -m pyg_progcl diagnose`` on your graph: ``--data FILE`` as for ``train``, a
checkpoint of ``train --data`` read with its checksum checked, every bad input one line."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import TINY, one_line_error, run_main
from torch_geometric.data import Data

from pyg_progcl.cli import main

DIAGNOSE = ["--num-pairs", "500", "--num-anchors", "50", "--no-plot", "-q"]


def labelled_graph(n=80, f=8, classes=3, seed=0) -> Data:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, f, generator=g)
    x[torch.arange(n), y] += 2.0
    return Data(x=x, edge_index=torch.randint(0, n, (2, 4 * n), generator=g), y=y)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A graph file and the checkpoint folder of ``train --data`` on it."""
    folder = tmp_path_factory.mktemp("own")
    graph = folder / "mine.pt"
    torch.save(labelled_graph(), graph)
    argv = ["train", "--data", str(graph), *TINY, "--checkpoint", str(folder / "ck")]
    assert main(argv) == 0
    return graph, folder / "ck"


def test_diagnose_a_checkpoint_of_a_graph_file(capsys, tmp_path, trained):
    graph, checkpoint = trained
    out = tmp_path / "out"
    argv = ["diagnose", "--checkpoint", str(checkpoint), "--data", str(graph), *DIAGNOSE]
    status, _, err = run_main(capsys, *argv, "--out", str(out))
    assert status == 0, err
    result = json.loads((out / "diagnostics.json").read_text())
    assert result["dataset"] == "file:mine" and list(result["runs"]) == ["GCN, epoch 3"]
    assert 0.0 <= result["runs"]["GCN, epoch 3"]["auc_similarity"] <= 1.0


def test_a_checkpoint_of_a_graph_file_needs_data(capsys, tmp_path, trained):
    _, checkpoint = trained
    argv = ["diagnose", "--checkpoint", str(checkpoint), *DIAGNOSE, "--out", str(tmp_path)]
    message = "trained on a graph file (file:mine): pass it with --data FILE"
    one_line_error(*run_main(capsys, *argv)[::2], message)
    assert not (tmp_path / "diagnostics.json").exists()


def test_a_corrupt_checkpoint_is_one_line(capsys, tmp_path, trained):
    graph, checkpoint = trained
    broken = tmp_path / "seed0.pt"
    payload = torch.load(checkpoint / "seed0.pt", weights_only=True)
    payload["epoch"] = 99  # edited: the checksum no longer matches
    torch.save(payload, broken)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes((checkpoint / "seed0.pt").read_bytes()[:200])
    for path, message in [(broken, "does not match its checksum"), (truncated, "not a readable")]:
        argv = ["diagnose", "--checkpoint", str(path), "--data", str(graph), *DIAGNOSE]
        status, _, err = run_main(capsys, *argv, "--out", str(tmp_path / "out"))
        one_line_error(status, err, message)
        assert "--resume" not in err  # (advice for `train`, not for diagnose)
    assert not (tmp_path / "out").exists()


def test_diagnose_fresh_models_on_a_graph_file(capsys, tmp_path, trained):
    graph, _ = trained
    out = tmp_path / "out"
    argv = ["diagnose", "--data", str(graph), "--hidden", "16", "--proj", "16", *DIAGNOSE]
    status, _, err = run_main(capsys, *argv, "--out", str(out))
    assert status == 0, err
    result = json.loads((out / "diagnostics.json").read_text())
    assert result["dataset"] == "file:mine"
    assert set(result["runs"]) == {"GCN, initial", "MLP, initial"}


def test_bad_data_is_one_line(capsys, tmp_path, trained):
    graph, _ = trained
    unlabelled = labelled_graph()
    del unlabelled.y
    torch.save(unlabelled, tmp_path / "plain.pt")
    argv = ["diagnose", "--data", str(tmp_path / "plain.pt"), *DIAGNOSE, "--out", str(tmp_path)]
    one_line_error(*run_main(capsys, *argv)[::2], "plain.pt has no labels `y`")
    argv = ["diagnose", "--data", str(graph), *DIAGNOSE, "--out", str(tmp_path)]
    one_line_error(*run_main(capsys, *argv, "--root", str(tmp_path))[::2], "--root locates")
    status, _, err = run_main(capsys, *argv, "--dataset", "Cora")
    assert status == 2 and "not allowed with argument" in err
