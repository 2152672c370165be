"""The command line over pyg_progcl.diagnostics: tracking a training run and the
``diagnose`` subcommand's outputs."""

from __future__ import annotations

import json

import pytest

from pyg_progcl.diagnostics import (
    DiagnosticsTracker,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_tracker_records_without_changing_training():
    from pyg_progcl.cli import train_seed
    from pyg_progcl.cli.presets import get_preset
    from pyg_progcl.datasets import synthetic_graph

    data = synthetic_graph(num_nodes=200, num_features=50, topic_size=10, seed=0)
    config = get_preset(
        "synthetic", "progcl-weight", epochs=4, warmup_epochs=1, hidden=16, proj=16,
        probe_epochs=20, eval_every=0, num_samples=1000,
    )  # fmt: skip
    tracker = DiagnosticsTracker(data, every=2, num_samples=1000)
    _, loss, tracked = train_seed(config, data, 0, progress=False, callback=tracker)
    _, _, plain = train_seed(config, data, 0, progress=False)
    assert tracked["losses"] == plain["losses"]
    assert [rec["epoch"] for rec in tracker.history] == [2.0, 4.0]
    assert "loss_auc_posterior" in tracker.history[-1] and loss.fitted


SMALL = ["--dataset", "synthetic", "--hidden", "16", "--proj", "16", "--probe-epochs", "20"]


DIAGNOSE_TRAINING = ["diagnose", *SMALL, "--epochs", "2", "--every", "1", "--warmup-epochs", "1"]


RUNS = {
    "GCN, initial",
    "GCN, 2 epochs progcl-weight",
    "MLP, initial",
    "MLP, 2 epochs progcl-weight",
}


def test_cli_without_matplotlib_stops_before_any_work(tmp_path, monkeypatch, capsys):
    import sys

    from pyg_progcl.cli import control, main

    def no_training(*args, **kwargs):
        raise AssertionError("trained before checking for matplotlib")

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(control, "compare_encoders", no_training)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main([*DIAGNOSE_TRAINING, "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--no-plot" in err and "matplotlib" in err
    assert not out.exists()
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # --no-plot runs without it
    assert main(["diagnose", *SMALL, "--out", str(out), "--no-plot", "-q"]) == 0


def test_cli_trains_tracks_and_reads_a_checkpoint(tmp_path, capsys):
    from pyg_progcl.cli import main

    out = tmp_path / "out"
    argv = [*DIAGNOSE_TRAINING, "--num-pairs", "2000", "--out", str(out), "--no-plot", "-q"]
    assert main(argv) == 0
    result = json.loads((out / "diagnostics.json").read_text())
    assert set(result["runs"]) == RUNS
    assert [r["epoch"] for r in result["history"]["GCN"]] == [0.0, 1.0, 2.0]
    assert set(result["probe_accuracy"]) == {"gcn", "mlp"}
    assert not list(out.glob("*.png"))

    ckpt = tmp_path / "ckpt"
    assert main(["train", *SMALL, "--epochs", "2", "--checkpoint", str(ckpt), "-q"]) == 0
    out2 = tmp_path / "out2"
    argv = ["diagnose", "--checkpoint", str(ckpt), "--out", str(out2), "--no-plot", "-q"]
    assert main([*argv, "--num-pairs", "1000"]) == 0
    result = json.loads((out2 / "diagnostics.json").read_text())
    assert list(result["runs"]) == ["GCN, epoch 2"]
    assert not (out2 / "similarity.png").exists()
    # The checkpoint's config is used: naming its dataset is fine, an override is refused.
    assert main([*argv, "--num-pairs", "1000", "--dataset", "synthetic"]) == 0
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--tau", "0.3", "--method", "grace"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "drop --tau, --method (the checkpoint's is progcl-weight)" in err
    with pytest.raises(SystemExit):
        main([*argv, "--encoder", "mlp"])  # one encoder was trained: the checkpoint's
    assert "drop --encoder (the checkpoint's is gcn)" in capsys.readouterr().err


@pytest.mark.slow  # matplotlib: renders the comparison and the tracking figures
def test_cli_writes_its_plots(tmp_path):
    pytest.importorskip("matplotlib")
    from pyg_progcl.cli import main

    out = tmp_path / "out"
    assert main([*DIAGNOSE_TRAINING, "--num-pairs", "2000", "--out", str(out), "-q"]) == 0
    assert set(json.loads((out / "diagnostics.json").read_text())["runs"]) == RUNS
    for name in ("similarity.png", "tracking.png"):
        assert (out / name).read_bytes().startswith(PNG_MAGIC)


def test_cli_errors_are_one_line(tmp_path, capsys):
    from pyg_progcl.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "--checkpoint", str(tmp_path / "missing.pt"), "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "does not exist" in capsys.readouterr().err
