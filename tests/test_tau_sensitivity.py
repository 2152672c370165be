"""benchmarks/tau_sensitivity.py: ProGCL-weight's departure from GRACE at fixed views."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import reference as ref
import torch
from test_losses import fitted_mixture, params, views

from pyg_progcl import InfoNCELoss, ProGCLLoss

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    path = REPO / "benchmarks" / "tau_sensitivity.py"
    spec = importlib.util.spec_from_file_location("tau_sensitivity", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_denominator_shift_matches_the_formula(bench):
    h1, h2 = (h.detach() for h in views(grad=False))
    loss = ProGCLLoss(0.7, mixture=fitted_mixture())
    w = ref.progcl_weights(h1, h2, params(loss.mixture))  # [N, N-1], diagonal left out
    e = torch.exp(ref._off_diag(ref._cos(h1, h2)) / 0.7)
    expected = (((w * e).sum(1) - e.sum(1)).abs() / e.sum(1)).mean().item()
    assert bench.denominator_shift(loss, h1, h2) == pytest.approx(expected, rel=1e-10)
    assert expected > 1e-3  # the weights do move the sum


def test_view_gradient_and_unfitted_progcl_is_grace(bench):
    h1, h2 = views()
    direct = torch.cat([g.flatten() for g in torch.autograd.grad(ref.grace(h1, h2, 0.5), (h1, h2))])
    g = bench.view_gradient(InfoNCELoss(0.5), h1, h2)
    assert torch.allclose(g, direct, rtol=1e-10, atol=1e-12)
    unfitted = ProGCLLoss(0.5)  # GRACE's weights until fitted
    assert torch.allclose(bench.view_gradient(unfitted, h1, h2), g, rtol=1e-10, atol=1e-12)
    assert bench.denominator_shift(unfitted, h1.detach(), h2.detach()) == 0.0


def test_compare_is_finite_and_nonzero(bench):
    h1, h2 = (h.detach().float() for h in views(n=60, d=8, grad=False))
    rel, cos, shift = bench.compare(h1, h2, 0.5, seed=0)
    assert 0 < rel < 1 and 0.5 < cos <= 1 + 1e-6 and 0 < shift < 1


def test_main_prints_a_table_on_the_synthetic_graph(bench, capsys):
    assert bench.main(["--epochs", "2", "--draws", "1", "--taus", "0.5", "1.0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Machine: ")
    rows = [
        line for line in out.splitlines() if line.startswith("| 0.5 ") or line.startswith("| 1.0 ")
    ]
    assert len(rows) == 2
    assert all(math.isfinite(float(x)) for row in rows for x in row.strip("|").split("|"))
