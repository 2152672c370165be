"""benchmarks/tau_sensitivity.py: ProGCL-weight's departure from GRACE at fixed views."""

from __future__ import annotations

import math

import pytest
import reference as ref
import torch
from helpers import fitted_mixture, load_script, params, views

from pyg_progcl import InfoNCELoss, ProGCLLoss


@pytest.fixture(scope="module")
def bench():
    return load_script("tau_sensitivity")


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


def test_compare_measures_progcl_against_grace(bench):
    """(relative gradient change, gradient cosine, denominator shift) of ProGCL-weight fitted
    with the seed's generator, against GRACE, by the dense reference's gradients."""
    h1, h2 = (h.detach() for h in views(n=60, d=8, grad=False))
    rel, cos, shift = bench.compare(h1, h2, 0.5, seed=0)
    progcl = ProGCLLoss(0.5).fit(h1, h2, torch.Generator().manual_seed(0))
    a, b = h1.clone().requires_grad_(), h2.clone().requires_grad_()
    g = torch.cat([x.flatten() for x in torch.autograd.grad(ref.grace(a, b, 0.5), (a, b))])
    weighted = ref.progcl_weight(a, b, 0.5, params(progcl.mixture))
    p = torch.cat([x.flatten() for x in torch.autograd.grad(weighted, (a, b))])
    assert rel == pytest.approx(float((p - g).norm() / g.norm()), rel=1e-5)
    assert cos == pytest.approx(float(torch.nn.functional.cosine_similarity(p, g, dim=0)), rel=1e-6)
    assert shift == pytest.approx(bench.denominator_shift(progcl, h1, h2), rel=1e-12)
    assert rel > 1e-3 and shift > 1e-3  # the fitted weights do act


def test_main_prints_a_table_on_the_synthetic_graph(bench, capsys):
    assert bench.main(["--epochs", "2", "--draws", "1", "--taus", "0.5", "1.0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Machine: ")
    rows = [
        line for line in out.splitlines() if line.startswith("| 0.5 ") or line.startswith("| 1.0 ")
    ]
    assert len(rows) == 2
    assert all(math.isfinite(float(x)) for row in rows for x in row.strip("|").split("|"))
