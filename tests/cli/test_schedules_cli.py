"""benchmarks/schedules.py: the reference-schedule controls of ProGCL-weight."""

from __future__ import annotations

import pytest
import torch
from helpers import load_script, views

from pyg_progcl import InfoNCELoss


@pytest.fixture(scope="module")
def schedules():
    return load_script("schedules")


def test_only_the_beta_guard_needs_a_loss_factory(schedules):
    from pyg_progcl.cli.presets import get_preset

    config = get_preset("synthetic", "progcl-weight", tau=0.3)
    for variant in ("online", "floored", "frozen", "floor-0.5", "grace"):
        assert schedules.loss_factory(variant) is None  # the config's loss
    guard = schedules.loss_factory("beta-guard")(config)
    assert guard.tau == 0.3 and guard.mixture.min_beta_high == 1.01
    h1, h2 = views(n=60)
    torch.testing.assert_close(guard(h1, h2), InfoNCELoss(0.3)(h1, h2), rtol=0, atol=0)  # GRACE's
    guard.fit(h1, h2).fit(h1, h2)  # until fitted; then refitted at every call (online)
    assert guard.mixture.num_fits == 2 and guard.fitted
    assert float(guard.mixture.beta[1 - guard.mixture.true_negative_index]) >= 1.01


def test_frozen_clean_refits_on_the_unaugmented_graph(schedules):
    from pyg_progcl.cli import build_loss, build_model
    from pyg_progcl.cli.presets import get_preset
    from pyg_progcl.datasets import synthetic_graph

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


def test_the_floor_variant_is_labelled_by_its_config(schedules):
    """``floor-0.5`` writes no ``variant``: compare.py names it from its schedule and floor."""
    from pyg_progcl.cli.presets import get_preset

    compare = load_script("compare")
    config = get_preset("Cora", "progcl-weight", schedule="online", floor=0.5).to_dict()
    run = {"method": "progcl-weight", "config": config}
    assert schedules.LABELS["floor-0.5"] is None
    assert compare._label(run) == "progcl-weight (schedule 'online', p(TN) ≥ 0.5)"
