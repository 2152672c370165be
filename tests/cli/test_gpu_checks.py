"""``benchmarks/gpu_checks.py``, the accelerator session, as a quick dry run on the CPU: every
part runs in its own process and the result file records each, with the machine's
description."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import REPO

SCRIPT = REPO / "benchmarks" / "gpu_checks.py"


@pytest.mark.slow  # four child processes, each a few small training steps
def test_the_quick_dry_run_writes_every_part(tmp_path):
    # Without a time budget: the parts' budgets are the accelerator session's, and a busy
    # machine may take longer than they allow (a part was killed at its 30 s, exit -9).
    out = tmp_path / "out"
    cmd = [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--no-budget"]
    proc = subprocess.run([*cmd, "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "gpu_checks.json").read_text())
    assert report["quick"] is True and report["budget_s"] is None
    machine = report["machine"]
    assert machine["device"] == "cpu" and machine["torch"]
    parts = report["parts"]
    assert list(parts) == ["losses", "amp", "speed", "loss_step", "arxiv"]
    for name, part in parts.items():
        assert part["status"] == "ok", (name, part)
        assert part["exit_code"] == 0 and part["budget_s"] is None
        assert all(r["ok"] for r in part["results"]), name
    losses = [r for r in parts["losses"]["results"] if "loss" in r]
    assert {r["loss"] for r in losses} >= {"grace", "dcl", "hcl", "progcl-weight", "progcl-mix-1"}
    assert {r["dtype"] for r in losses} == {"float64", "float32"}
    assert {r["block_size"] for r in losses} == {None, 16}  # one block, and several
    assert all(r["passed"] for r in losses)
    for r in losses:  # the engine's path: several blocks where asked, else one
        assert ("(blocks of 16)" in r["path"]) == (r["block_size"] == 16), r
    amp = [r for r in parts["amp"]["results"] if "method" in r]
    assert [r["method"] for r in amp] == ["grace", "dcl", "hcl", "progcl-weight", "progcl-mix"]
    assert all(r["passed"] for r in amp)
    speed = [r for r in parts["speed"]["results"] if "method" in r]
    assert all(r["median_step_s"] > 0 and r["steps"] == 2 for r in speed)
    steps = [r for r in parts["loss_step"]["results"] if "method" in r]
    assert [r["method"] for r in steps] == ["grace", "dcl", "hcl", "progcl-weight", "progcl-mix"]
    assert steps[0]["vs_grace"] == 1.0 and all(r["median_step_s"] > 0 for r in steps)
    epochs = {r["epoch"]: r for r in parts["arxiv"]["results"] if "epoch" in r}
    assert set(epochs) == {"full-graph", "mini-batch"}
    summary = (out / "gpu_checks.md").read_text()
    for name in parts:
        assert f"## {name}: ok" in summary
    assert "(no budget)" in summary
    assert (out / "logs" / "losses.log").exists()


def test_an_unknown_part_is_refused(tmp_path):
    cmd = [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--parts", "losses,nope"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--parts: unknown part" in proc.stderr
    assert not (tmp_path / "gpu_checks.json").exists()
