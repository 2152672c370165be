"""benchmarks/schedules.py: the reference-schedule controls of ProGCL-weight."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from pyg_progcl import ProGCLLoss
from pyg_progcl.losses import OnlineFit

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def schedules():
    sys.path.insert(0, str(REPO / "benchmarks"))  # schedules.py imports compare.py
    try:
        spec = importlib.util.spec_from_file_location(
            "schedules", REPO / "benchmarks" / "schedules.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return module


def test_only_the_beta_guard_needs_a_loss_factory(schedules):
    from pyg_progcl.experiments.presets import get_preset

    config = get_preset("synthetic", "progcl-weight", tau=0.3)
    for variant in ("online", "fit-once", "frozen", "grace"):
        assert schedules.loss_factory(variant) is None  # the config's loss
    guard = schedules.loss_factory("beta-guard")(config)
    assert isinstance(guard, ProGCLLoss) and isinstance(guard.schedule, OnlineFit)
    assert guard.tau == 0.3 and guard.mixture.min_beta_high == 1.01


def test_variants_run_the_library_schedules(schedules, tmp_path):
    argv = ["--dataset", "synthetic", "--epochs", "3", "--warmup-epochs", "1", "--seeds", "0"]
    argv += ["--variants", "frozen", "frozen-clean", "fit-once", "grace"]
    argv += ["--output-dir", str(tmp_path)]
    assert schedules.main(argv) == 0
    results = {p.name.split("_")[2]: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert set(results) == {"frozen", "frozen-clean", "fit-once", "grace"}
    assert results["frozen"]["variant"] == schedules.LABELS["frozen"]
    assert results["frozen"]["config"]["schedule"] == "frozen"
    assert results["fit-once"]["config"]["schedule"] == "fit-once"
    assert results["frozen-clean"]["config"]["schedule"] == "frozen"
    assert results["grace"]["method"] == "grace" and "variant" not in results["grace"]


def test_frozen_clean_refits_on_the_unaugmented_graph(schedules):
    from pyg_progcl.experiments import build_loss, build_model
    from pyg_progcl.experiments.datasets import synthetic_graph
    from pyg_progcl.experiments.presets import get_preset

    data = synthetic_graph(num_nodes=120, num_classes=3)
    config = get_preset("synthetic", "progcl-weight", warmup_epochs=4, schedule="frozen")
    model, loss = build_model(config, data.num_features, data.num_nodes), build_loss(config)
    h1, h2 = model.views(data.x, data.edge_index)
    loss.fit(h1.detach(), h2.detach())  # the trainer's fit at epoch 5 (augmented views)
    callback = schedules.clean_refit(config, data)
    callback(4, {"model": model, "loss_fn": loss})
    assert not torch.equal(
        loss.schedule.frozen_u, loss.schedule.frozen_v
    )  # not its epoch: untouched
    callback(5, {"model": model, "loss_fn": loss})
    z = torch.nn.functional.normalize(model.project(model(data.x, data.edge_index)), dim=1)
    torch.testing.assert_close(loss.schedule.frozen_u, z.detach())
    torch.testing.assert_close(loss.schedule.frozen_v, z.detach())
    assert int(loss.mixture.num_fits) == 1  # refitted cold on the clean similarities
