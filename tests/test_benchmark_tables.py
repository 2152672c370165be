"""The benchmark scripts' table logic: which runs are compared with which."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _script(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cell(method, epochs, accuracy, seeds=3):
    return {
        "dataset": "Cora", "method": method, "epochs": epochs, "preset_epochs": 200,
        "protocol": "grace", "split": "random", "probe_epochs": 3000, "seeds": seeds,
        "accuracy_mean": accuracy,
    }  # fmt: skip


def test_reproduce_compares_progcl_with_grace_at_the_same_budget():
    reproduce = _script("reproduce")
    cells = [_cell("grace", 200, 0.826), _cell("progcl-weight", 200, 0.829)]
    cells.append(_cell("grace", 400, 0.840))  # a longer GRACE run must not be the reference
    (line,) = reproduce.versus_grace(cells)
    assert line.startswith("- Cora: progcl-weight +0.30 vs grace (better")
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--cap", "--epoch-fraction", "0.5"])  # --cap needs --epochs


def test_speed_table_without_grace_says_so():
    speed = _script("speed")
    row = {
        "dataset": "Cora", "method": "progcl-weight", "path": "dense", "step_s": 0.2,
        "refit_s": 0.01, "matmul_bound_s": 0.1, "peak_mb": 500.0,
    }  # fmt: skip
    assert "| – |" in speed._format_row(row, [row])
    grace = dict(row, method="grace", step_s=0.1, ratio_range=(1.0, 1.0))
    row["ratio_range"] = (1.9, 2.1)
    assert "| 2.00x (1.90–2.10) |" in speed._format_row(row, [grace, row])
