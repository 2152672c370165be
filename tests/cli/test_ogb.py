"""benchmarks/ogbn_arxiv.py end to end on a tiny graph in the real ogbn-arxiv layout."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import load_script

NUM_NODES, NUM_CLASSES, NUM_FEATURES = 60, 40, 128


def write_arxiv_layout(root: Path, seed: int = 0, name: str = "ogbn-arxiv") -> Path:
    """A tiny graph on disk exactly as ``PygNodePropPredDataset(name)`` reads it: gzip
    CSVs without header under ``<name>/raw`` and ``split/<split>``, and the release note
    that keeps the loader from asking to re-download. ``ogbn-products`` has no node
    years and its split is ``sales_ranking``."""
    rng = np.random.default_rng(seed)
    folder = root / name.replace("-", "_")
    split = "time" if name == "ogbn-arxiv" else "sales_ranking"
    (folder / "raw").mkdir(parents=True)
    (folder / "split" / split).mkdir(parents=True)
    (folder / "RELEASE_v1.txt").write_text(f"# Release note for {name}\n\n### v1: initial\n")

    def write(name: str, rows) -> None:
        with gzip.open(folder / name, "wt") as fh:
            for row in rows:
                fh.write(",".join(str(v) for v in np.atleast_1d(row)) + "\n")

    src = rng.integers(0, NUM_NODES, 5 * NUM_NODES)
    dst = (src + rng.integers(1, NUM_NODES, src.size)) % NUM_NODES  # no self-loops
    write("raw/edge.csv.gz", np.stack([src, dst], 1))
    write("raw/node-feat.csv.gz", rng.normal(size=(NUM_NODES, NUM_FEATURES)).round(5))
    write("raw/num-node-list.csv.gz", [NUM_NODES])
    write("raw/num-edge-list.csv.gz", [src.size])
    if name == "ogbn-arxiv":
        write("raw/node_year.csv.gz", rng.integers(2000, 2021, NUM_NODES))
    write("raw/node-label.csv.gz", rng.integers(0, NUM_CLASSES, NUM_NODES))
    perm = rng.permutation(NUM_NODES)
    for part, idx in zip(("train", "valid", "test"), np.split(perm, [30, 45])):
        write(f"split/{split}/{part}.csv.gz", np.sort(idx))
    return root


@pytest.fixture(scope="module")
def script():
    return load_script("ogbn_arxiv")


@pytest.fixture()
def evaluator_calls(monkeypatch):
    """``(dataset, nodes scored, accuracy)`` of every call of OGB's official evaluator."""
    from ogb.nodeproppred import Evaluator  # (conftest: without ogb's network version check)

    calls = []
    original = Evaluator.eval

    def spy(self, input_dict):
        out = original(self, input_dict)
        calls.append((self.name, int(input_dict["y_true"].shape[0]), out["acc"]))
        return out

    monkeypatch.setattr(Evaluator, "eval", spy)
    return calls


def run(script, tmp_path, *flags, name="ogbn-arxiv"):
    root = write_arxiv_layout(tmp_path / "data", name=name)
    out = tmp_path / "result.json"
    argv = ["--root", str(root), "--epochs", "3", "--probe-epochs", "40", "--quiet"]
    assert script.main([*argv, "--output", str(out), *flags]) == 0
    return json.loads(out.read_text())


def test_ogbn_arxiv_script_end_to_end(script, tmp_path, evaluator_calls, capsys):
    result = run(script, tmp_path, "--method", "progcl-weight", "--warmup-epochs", "1")
    assert result["dataset"] == "ogbn-arxiv" and result["method"] == "progcl-weight"
    assert result["num_nodes"] == NUM_NODES
    assert result["config"]["epochs"] == 3 and result["config"]["split"] == "public"
    assert len(result["accuracies"]) == 1
    assert result["mixture"][0] is not None  # refitted after the warm-up
    assert result["ogb"]["split_sizes"] == {"train": 30, "valid": 15, "test": 15}
    assert result["ogb"]["evaluator"] == "ogb.nodeproppred.Evaluator('ogbn-arxiv')"
    # The official evaluator scored the validation (15) and test (15) nodes, and the
    # reported accuracy is one of its scores.
    assert {name for name, _, _ in evaluator_calls} == {"ogbn-arxiv"}
    assert {size for _, size, _ in evaluator_calls} == {15}
    assert result["accuracy_mean"] in {acc for _, _, acc in evaluator_calls}
    assert "ogbn-arxiv / progcl-weight: test accuracy" in capsys.readouterr().out


def test_ogbn_arxiv_script_sampled_negatives_and_minibatch(script, tmp_path, evaluator_calls):
    flags = ["--num-negatives", "8", "--batch-size", "32", "--num-neighbors", "5", "5"]
    result = run(script, tmp_path, *flags)
    config = result["config"]
    assert (config["num_negatives"], config["batch_size"]) == (8, 32)
    assert config["num_neighbors"] == [5, 5]
    assert result["method"] == "grace"
    assert result["ogb"]["published_accuracy"] == [71.51, 0.11]
    assert result["accuracy_mean"] in {acc for _, _, acc in evaluator_calls}


def test_ogbn_arxiv_script_rejects_non_ogb_datasets(script):
    with pytest.raises(SystemExit):
        script.parse_args(["--dataset", "Cora"])


def test_ogbn_products_through_the_same_script(script, tmp_path, evaluator_calls):
    flags = ["--dataset", "ogbn-products", "--batch-size", "32", "--num-neighbors", "5", "5"]
    result = run(script, tmp_path, *flags, name="ogbn-products")
    assert result["dataset"] == "ogbn-products" and result["num_nodes"] == NUM_NODES
    assert result["config"]["batch_size"] == 32
    assert {name for name, _, _ in evaluator_calls} == {"ogbn-products"}
    assert result["accuracy_mean"] in {acc for _, _, acc in evaluator_calls}
