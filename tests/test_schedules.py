"""benchmarks/schedules.py: the reference-schedule controls of ProGCL-weight."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from pyg_progcl import ProGCLLoss

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


def _views(n=40, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    h1 = torch.randn(n, d, generator=g, dtype=torch.float64)
    h2 = h1 + 0.5 * torch.randn(n, d, generator=g, dtype=torch.float64)
    return h1.requires_grad_(), h2.requires_grad_()


def test_frozen_weights_equal_progcl_at_the_fit_and_stay_frozen(schedules):
    h1, h2 = _views()
    frozen, online = schedules.FrozenWeightProGCLLoss(tau=0.5), ProGCLLoss(tau=0.5)
    for loss in (frozen, online):
        loss.fit(h1.detach(), h2.detach(), torch.Generator().manual_seed(1))
    values = [loss(h1, h2) for loss in (frozen, online)]
    grads = [torch.autograd.grad(v, (h1, h2)) for v in values]
    torch.testing.assert_close(values[0], values[1])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)

    w_before = [w.clone() for w in frozen.log_w]
    g1, g2 = _views(seed=3)
    frozen.fit(g1.detach(), g2.detach())  # no refit: the weights of the first fit stay
    assert int(frozen.mixture.num_fits) == 1
    for a, b in zip(w_before, frozen.log_w):
        torch.testing.assert_close(a, b)
    online.fit(g1.detach(), g2.detach())
    assert not torch.allclose(frozen(g1, g2), online(g1, g2))
    frozen.reset_parameters()  # back to GRACE's loss until the next fit
    assert frozen.log_w is None and not frozen.fitted


def test_fit_once_fits_once_and_factories_follow_the_config(schedules):
    h1, h2 = _views()
    loss = schedules.FitOnceProGCLLoss(tau=0.5)
    for _ in range(3):
        loss.fit(h1.detach(), h2.detach())
    assert int(loss.mixture.num_fits) == 1
    from pyg_progcl.presets import get_preset

    config = get_preset("synthetic", "progcl-weight", tau=0.3)
    assert schedules.loss_factory("online") is None
    guard = schedules.loss_factory("beta-guard")(config)
    assert guard.tau == 0.3 and guard.mixture.min_beta_high == 1.01
    assert isinstance(schedules.loss_factory("frozen")(config), schedules.FrozenWeightProGCLLoss)
