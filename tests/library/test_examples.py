"""The scripts in examples/ run end to end on tiny graphs and show what they promise.

Each example runs in this process (``runpy``, with its command line in ``sys.argv``), so
the tests share one import of torch and PyG and run on the single torch thread that
conftest.py sets; one test also runs a script as a real command (``python
examples/...``, ``PYTHONPATH`` = the repository). Every check is about the example's
claim, not only its exit: the loss goes down, ProGCL switches on after the warm-up, the
probe beats chance, batched inference equals the full-graph pass, the PNG is a PNG.
"""

from __future__ import annotations

import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SCRIPTS = ["progcl_cora.py", "any_encoder.py", "minibatch_large_graph.py", "diagnostics.py"]
SCRIPTS += ["own_graph.py"]


def run_example(monkeypatch, capsys, script: str, *args) -> str:
    """Runs ``examples/<script> args...`` as ``__main__`` here; returns its stdout."""
    path = EXAMPLES / script
    monkeypatch.setattr(sys, "argv", [str(path), *map(str, args)])
    capsys.readouterr()  # drop anything printed before
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    print(out)  # shown when the test fails
    return out


def epoch_lines(out: str) -> list[tuple[int, float, str]]:
    """``(epoch, loss, rest of the line)`` of every ``epoch N  loss L ...`` line."""
    rows = re.findall(r"^epoch\s+(\d+)\s+loss ([-\d.]+)(.*)$", out, flags=re.M)
    assert rows, f"no epoch lines in:\n{out}"
    return [(int(e), float(loss), rest) for e, loss, rest in rows]


def probe_accuracy(out: str) -> float:
    match = re.search(r"^linear probe test accuracy: ([\d.]+)$", out, flags=re.M)
    assert match, f"no probe accuracy in:\n{out}"
    return float(match.group(1))


def test_every_example_says_what_it_shows_and_how_to_run_it():
    found = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert found == sorted(SCRIPTS)
    for script in SCRIPTS:
        text = (EXAMPLES / script).read_text()
        doc = text.split('"""')[1] if text.startswith('"""') else ""
        assert len(doc.splitlines()) >= 3, f"{script}: no module docstring"
        assert f"python examples/{script}" in doc, f"{script}: the docstring says how to run it"
        assert len(text.splitlines()) <= 70, f"{script}: examples stay short"


def test_progcl_cora_on_the_synthetic_graph(monkeypatch, capsys):
    out = run_example(
        monkeypatch, capsys, "progcl_cora.py",
        "--dataset", "synthetic", "--epochs", 40, "--warmup", 20, "--probe-epochs", 500,
    )  # fmt: skip
    assert "x=[800, 200]" in out
    rows = epoch_lines(out)
    assert [e for e, _, _ in rows] == [1, 10, 20, 30, 40]
    # GRACE's loss during the warm-up, ProGCL's (a fitted mixture) after it.
    assert all(("fitted: False" in rest) == (e <= 20) for e, _, rest in rows)
    assert "fitted=True" in out  # the mixture's repr
    losses = {e: loss for e, loss, _ in rows}
    assert losses[20] < losses[1] - 0.01  # the warm-up learns (7.377 -> 7.331 measured)
    assert losses[40] < losses[30] < losses[1]  # and so does ProGCL (6.943 -> 6.899)
    # 5 balanced classes: chance is 0.2 (0.84 measured).
    assert probe_accuracy(out) > 0.5


@pytest.mark.slow  # Planetoid's processing and 2708-node epochs: about 20-25 s on one thread
def test_progcl_cora_on_cora(monkeypatch, capsys, shared_data, tmp_path):
    """The Planetoid path itself, on a copy of the shared Cora files (no download).

    Ten epochs only check the wiring: Cora's embeddings need about a hundred epochs to
    leave the near-collapsed start (a probe of 0.39 after 20 epochs, 0.73 after 50)."""
    shutil.copytree(shared_data / "planetoid" / "Cora" / "raw", tmp_path / "Cora" / "raw")
    out = run_example(
        monkeypatch, capsys, "progcl_cora.py",
        "--root", tmp_path, "--epochs", 10, "--warmup", 5, "--probe-epochs", 100,
    )  # fmt: skip
    assert "x=[2708, 1433]" in out and "y=[2708]" in out  # Cora, row-normalised by Planetoid
    rows = epoch_lines(out)
    assert [e for e, _, _ in rows] == [1, 10]
    assert "fitted: False" in rows[0][2] and "fitted: True" in rows[-1][2]
    assert rows[-1][1] < rows[0][1]
    assert 0.0 <= probe_accuracy(out) <= 1.0


@pytest.mark.parametrize(
    "encoder, loss, shown",
    [
        ("gat", "hcl", ["conv=GATConv", "'heads': 4", "HardInfoNCELoss"]),
        ("graphsage", "dcl", ["GraphSAGE(", "DebiasedInfoNCELoss"]),
    ],
)
def test_any_encoder(monkeypatch, capsys, encoder, loss, shown):
    out = run_example(
        monkeypatch, capsys, "any_encoder.py", "--encoder", encoder, "--loss", loss,
        "--epochs", 30,
    )  # fmt: skip
    for text in shown:  # the model that was actually trained
        assert text in out
    rows = epoch_lines(out)
    assert rows[-1][1] < rows[0][1] - 0.05  # measured: GAT 7.377 -> 7.271, SAGE -> 5.87
    assert probe_accuracy(out) > 0.4  # chance 0.2; measured 0.78 (GAT), 0.58 (GraphSAGE)


def test_minibatch_large_graph(monkeypatch, capsys):
    out = run_example(
        monkeypatch, capsys, "minibatch_large_graph.py",
        "--num-nodes", 1000, "--epochs", 4, "--warmup", 2, "--batch-size", 500,
    )  # fmt: skip
    assert re.search(r"^1000 nodes, 2 batches per epoch", out, flags=re.M)
    rows = epoch_lines(out)
    assert [e for e, _, _ in rows] == [1, 2, 3, 4]
    assert all(("fitted: True" in rest) == (e > 2) for e, _, rest in rows)
    assert rows[-1][1] < rows[0][1]
    # Layer-wise batched inference is exact for GCNEncoder.
    diff = re.search(r"max abs difference ([\d.e+-]+)", out)
    assert diff and float(diff.group(1)) < 1e-4
    assert probe_accuracy(out) > 0.5


def test_diagnostics(monkeypatch, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "plots" / "similarity.png"
    out = run_example(monkeypatch, capsys, "diagnostics.py", "--epochs", 20, "--out", png)
    summary = dict(
        (key, float(value)) for key, value in re.findall(r"^(\w+)\s+(-?\d+\.\d+)$", out, flags=re.M)
    )
    assert {"fn_rate", "fn_share_topk", "auc_similarity", "auc_posterior"} <= set(summary)
    # 5 balanced classes: a fifth of the negatives are false negatives ...
    assert summary["fn_rate"] == pytest.approx(0.2, abs=0.01)
    # ... and far more of the most similar ones: ProGCL's observation (0.53 measured).
    assert summary["fn_share_topk"] > 1.5 * summary["fn_rate"]
    assert summary["auc_similarity"] > 0.55
    assert f"histogram written to {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000  # a drawn figure, not an empty canvas


def test_own_graph(monkeypatch, capsys, tmp_path):
    out = run_example(
        monkeypatch, capsys, "own_graph.py", "--nodes", 600, "--epochs", 20, "--out", tmp_path
    )
    assert "graph: 600 nodes" in out
    assert "trained 20 epochs" in out and "fitted: True" in out  # ProGCL after the warm-up
    assert sorted(p.name for p in tmp_path.iterdir()) == ["embeddings.npy", "model.pt"]
    # The saved model reproduces the saved embeddings (in batches, after reloading).
    diff = re.search(r"max abs difference ([\d.e+-]+)", out)
    assert diff and float(diff.group(1)) < 1e-5
    accuracy = re.search(r"^logistic regression test accuracy: ([\d.]+)$", out, flags=re.M)
    assert accuracy and float(accuracy.group(1)) > 0.5  # 4 groups: chance 0.25; 0.92 measured


def test_an_example_runs_as_a_command(tmp_path):
    """``python examples/progcl_cora.py ...`` from another folder, the repository on
    ``PYTHONPATH``: the script needs nothing else."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "progcl_cora.py"), "--dataset", "synthetic",
         "--epochs", "4", "--warmup", "2", "--probe-epochs", "50"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "fitted: True" in proc.stdout
    assert "linear probe test accuracy:" in proc.stdout
    assert list(tmp_path.iterdir()) == []  # wrote nothing where it ran
