"""benchmarks/schedules.py: the reference-schedule controls of ProGCL-weight."""

from __future__ import annotations

import json

import pytest
from helpers import load_script


@pytest.fixture(scope="module")
def schedules():
    return load_script("schedules")


@pytest.mark.slow  # four training runs of the synthetic preset (800 nodes)
def test_variants_run_the_library_schedules(schedules, tmp_path):
    argv = ["--dataset", "synthetic", "--epochs", "3", "--warmup-epochs", "1", "--seeds", "0"]
    argv += ["--variants", "frozen", "frozen-clean", "floor-0.5", "grace"]
    argv += ["--output-dir", str(tmp_path)]
    assert schedules.main(argv) == 0
    results = {p.name.split("_")[2]: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert set(results) == {"frozen", "frozen-clean", "floor-0.5", "grace"}
    assert results["frozen"]["variant"] == schedules.LABELS["frozen"]
    assert results["frozen"]["config"]["schedule"] == "frozen"
    assert results["floor-0.5"]["config"]["schedule"] == "online"
    assert results["floor-0.5"]["config"]["floor"] == 0.5
    assert results["frozen-clean"]["config"]["schedule"] == "frozen"
    assert results["grace"]["method"] == "grace" and "variant" not in results["grace"]
