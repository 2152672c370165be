"""The library on an accelerator: every loss path against the CPU float64 reference,
the mixture fit, the model and the trainer (resume included), and on CUDA that ProGCL's
hardness and an EM step run without a host synchronisation.

On CUDA where there is one, else on the CPU (the same checks, and the only float32
comparisons of every loss with the float64 reference); ``PYG_PROGCL_TEST_DEVICE`` names
another torch device.
"""

from __future__ import annotations

import copy
import os
import warnings

import pytest
import reference as ref
import torch
import torch_geometric.transforms as T
from helpers import (
    assert_matches,
    fitted_mixture,
    params,
    sample_mixture,
    small_config,
    small_graph,
    views,
)

from pyg_progcl import EdgeDrop, FeatureMask, GCNEncoder, GRACEModel
from pyg_progcl.cli import train_seed
from pyg_progcl.cli.datasets import synthetic_graph
from pyg_progcl.losses import DebiasedInfoNCELoss, HardInfoNCELoss, InfoNCELoss, ProGCLLoss
from pyg_progcl.mixture import BetaMixture

DEVICE = torch.device(
    os.environ.get("PYG_PROGCL_TEST_DEVICE", "cuda" if torch.cuda.is_available() else "cpu")
)
pytestmark = pytest.mark.skipif(
    DEVICE.type == "cuda" and not torch.cuda.is_available(), reason="no CUDA device"
)


def on_device(*tensors):
    return [t.detach().to(DEVICE).requires_grad_(t.requires_grad) for t in tensors]


def assert_device_matches(loss_fn, ref_fn, dtype=torch.float64):
    """The loss on DEVICE (``dtype``) equals the CPU float64 reference, values and
    gradients (float32: to float32 accuracy)."""
    h1, h2 = views()
    d1, d2 = on_device(h1.to(dtype), h2.to(dtype))
    if dtype == torch.float64:
        assert_matches(loss_fn.to(DEVICE), lambda a, b: ref_fn(a.cpu(), b.cpu()).to(DEVICE), d1, d2)
        return
    out, expected = loss_fn.to(DEVICE)(d1, d2), ref_fn(h1, h2)
    torch.testing.assert_close(out.double().cpu(), expected, rtol=2e-5, atol=2e-5)
    for a, b in zip(torch.autograd.grad(out, (d1, d2)), torch.autograd.grad(expected, (h1, h2))):
        torch.testing.assert_close(a.double().cpu(), b, rtol=1e-3, atol=2e-5)


LOSSES = {
    "grace": (lambda **kw: InfoNCELoss(0.5, **kw), lambda a, b: ref.grace(a, b, 0.5)),
    "dcl": (
        lambda **kw: DebiasedInfoNCELoss(0.5, 0.1, **kw),
        lambda a, b: ref.dcl(a, b, 0.5, 0.1),
    ),
    "hcl": (
        lambda **kw: HardInfoNCELoss(0.5, 0.1, 1.0, **kw),
        lambda a, b: ref.hcl(a, b, 0.5, 0.1, 1.0),
    ),
    "progcl-weight": (
        lambda **kw: ProGCLLoss(0.4, mixture=fitted_mixture(), **kw),
        lambda a, b: ref.progcl_weight(a, b, 0.4, params(fitted_mixture())),
    ),
    "progcl-mix-1": (
        lambda **kw: ProGCLLoss(0.4, mode="mix", num_mix=1, mixture=fitted_mixture(), **kw),
        lambda a, b: ref.progcl_mix_one(a, b, 0.4, params(fitted_mixture())),
    ),
}
#: The engine's three paths: dense, row blocks, sampled (all N - 1 negatives: exact).
DEVICE_PATHS = [{}, {"block_size": 7}, {"num_negatives": 22, "block_size": 5}]


@pytest.mark.parametrize("options", DEVICE_PATHS, ids=["dense", "rows7", "sampled22-5"])
@pytest.mark.parametrize("name", list(LOSSES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_every_loss_matches_the_cpu_reference(name, options, dtype):
    make, ref_fn = LOSSES[name]
    assert_device_matches(make(**options), ref_fn, dtype)


@pytest.mark.parametrize("block_size", [None, 7])
def test_progcl_mix_top_k_matches_the_reference(monkeypatch, block_size):
    # (the k hardest from torch.topk on the device; π the identity)
    monkeypatch.setattr(
        torch, "randperm", lambda n, device=None, **_: torch.arange(n, device=device)
    )
    loss = ProGCLLoss(0.4, mode="mix", num_mix=9, mixture=fitted_mixture(), block_size=block_size)
    assert_device_matches(
        loss, lambda a, b: ref.progcl_mix(a, b, 0.4, params(loss.mixture), 9, "self")
    )


@pytest.mark.parametrize("options", DEVICE_PATHS, ids=["dense", "rows7", "sampled22-5"])
def test_frozen_schedule_matches_the_reference(options):
    f1, f2 = (h.detach() for h in views(seed=5))
    loss = ProGCLLoss(0.4, mixture=fitted_mixture(), schedule="frozen", **options)
    loss.to(DEVICE).fit(*on_device(f1, f2))
    assert loss.schedule.frozen_u.device.type == DEVICE.type
    m = params(fitted_mixture())
    assert_device_matches(loss, lambda a, b: ref.progcl_weight(a, b, 0.4, m, fit_views=(f1, f2)))


def test_sampled_negatives_with_every_node_equal_the_exact_loss():
    h1, h2 = on_device(*views())
    exact = InfoNCELoss(0.5)(h1, h2)
    torch.testing.assert_close(InfoNCELoss(0.5, num_negatives=22, block_size=4)(h1, h2), exact)


def test_mixture_fit_on_device_recovers_known_parameters():
    x = sample_mixture(100_000, [(2, 8), (9, 3)], [0.8, 0.2]).to(DEVICE)
    m = BetaMixture().double().to(DEVICE).fit(x)
    t, f = m.true_negative_index, 1 - m.true_negative_index
    for got, want in [(m.alpha[t], 2), (m.beta[t], 8), (m.alpha[f], 9), (m.beta[f], 3)]:
        assert abs(float(got) / want - 1) < 0.10, (got, want)
    assert abs(float(m.weight[t]) - 0.8) < 0.03
    cpu = BetaMixture().double().fit(x.cpu())
    torch.testing.assert_close(m.alpha.cpu(), cpu.alpha, rtol=1e-6, atol=1e-8)


def test_fit_samples_on_the_views_device():
    h1, h2 = on_device(*views(n=200, d=8))
    loss = ProGCLLoss(0.4, num_samples=5000).to(DEVICE).fit(h1, h2)
    assert loss.fitted and loss.mixture.alpha.device.type == DEVICE.type
    value = loss(h1, h2)
    assert value.device.type == DEVICE.type
    # the device's fit, used on the CPU: the same loss
    on_cpu = ProGCLLoss(0.4, mixture=copy.deepcopy(loss.mixture).cpu())
    torch.testing.assert_close(value.cpu(), on_cpu(h1.cpu(), h2.cpu()), rtol=1e-6, atol=1e-8)


def test_model_views_and_backward_on_device():
    data = T.NormalizeFeatures()(synthetic_graph(num_nodes=200, num_classes=3)).to(DEVICE)
    augment = [EdgeDrop(0.3), FeatureMask(0.3)]
    model = GRACEModel(GCNEncoder(data.num_features, 16), 16, 16, augment, augment).to(DEVICE)
    h1, h2 = model.views(data.x, data.edge_index)
    loss = ProGCLLoss(0.5).to(DEVICE)
    loss.fit(h1.detach(), h2.detach())
    value = loss(h1, h2)
    value.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(
        g is not None and g.device.type == DEVICE.type and torch.isfinite(g).all() for g in grads
    )
    # the same views and mixture on the CPU: the same loss (to float32 accuracy)
    on_cpu = ProGCLLoss(0.5, mixture=copy.deepcopy(loss.mixture).cpu())
    expected = on_cpu(h1.detach().cpu(), h2.detach().cpu())
    torch.testing.assert_close(value.detach().cpu(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # end-to-end training (run with --slow on the accelerator)
def test_trainer_on_device_learns_and_resumes(tmp_path):
    graph = small_graph()
    config = small_config(epochs=12, warmup_epochs=4, eval_every=6)
    _, _, whole = train_seed(config, graph, seed=2, device=DEVICE, progress=False)
    assert whole["accuracy"] > 0.6, whole["accuracy"]  # chance: 1/3

    def stop_at_8(epoch, info):
        if epoch == 8:
            raise KeyboardInterrupt

    ckpt = tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt):
        train_seed(
            config, graph, seed=2, device=DEVICE, checkpoint_dir=ckpt, checkpoint_every=5,
            progress=False, callback=stop_at_8,
        )  # fmt: skip
    _, _, resumed = train_seed(
        config, graph, seed=2, device=DEVICE, checkpoint_dir=ckpt, resume=True, progress=False
    )
    # GPU scatter sums are not bit-reproducible: equal to float32 accuracy, not bitwise
    torch.testing.assert_close(
        torch.tensor(resumed["losses"]), torch.tensor(whole["losses"]), rtol=1e-4, atol=1e-5
    )
    assert abs(resumed["accuracy"] - whole["accuracy"]) <= 0.02


def spiked_sample():
    """Values whose first EM iteration from the default start gives the high-mean
    component ``β < 1`` (0.13)."""
    return sample_mixture(2000, [(2, 6), (6, 0.5)], [0.7, 0.3]).double().to(DEVICE)


def test_the_em_step_floors_the_high_components_beta():
    m = BetaMixture(min_beta_high=1.01).double().to(DEVICE).fit(spiked_sample(), max_iter=1)
    free = BetaMixture().double().to(DEVICE).fit(spiked_sample(), max_iter=1)
    high = 1 - m.true_negative_index
    assert float(free.beta[high]) < 1 and float(m.beta[high]) == 1.01
    torch.testing.assert_close(m.beta[1 - high], free.beta[1 - high])
    torch.testing.assert_close(m.alpha, free.alpha)


@pytest.mark.skipif(DEVICE.type != "cuda", reason="host synchronisations are a CUDA matter")
def test_a_refit_waits_for_the_device_at_most_three_times():
    m, x = BetaMixture(min_beta_high=1.01).double().to(DEVICE), spiked_sample()
    torch.cuda.synchronize(DEVICE)
    torch.cuda.set_sync_debug_mode("warn")  # (a host synchronisation warns)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m.fit(x, max_iter=10)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert sum("synchroniz" in str(w.message) for w in caught) <= 3
    assert float(m.beta.max()) >= 1.01


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("order", [(2.0, 6.0), (6.0, 2.0)])  # which component is the true one
def test_the_log_odds_equal_the_host_formula(order, dtype):
    # D(x) = a log x + b log(1 - x) + c with the coefficients as host floats.
    m = fitted_mixture(alpha=order, beta=order[::-1]).to(DEVICE)
    s = torch.rand(4, 300, generator=torch.Generator().manual_seed(0), dtype=dtype)
    s = m._clamp(s.to(DEVICE))
    for sign in (1.0, -1.0):
        a, b, c = m.log_odds_coefficients()
        host = (torch.log(s) * (sign * a) + torch.log(1 - s) * (sign * b)) + sign * c
        got = m.log_odds_false_negative(s, sign)
        assert got.dtype == dtype and got.device == s.device
        torch.testing.assert_close(got, host)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_log_odds_are_rounded_once(dtype):
    # Half-precision inputs are computed in float32 with float32 coefficients: the result
    # is the exact D of the (rounded) input, rounded once to the input's dtype.
    m = fitted_mixture().to(DEVICE)
    s = torch.rand(4, 300, generator=torch.Generator().manual_seed(0)).clamp(0.01, 0.99)
    s = s.to(dtype).to(DEVICE)
    a, b, c = m.log_odds_coefficients()
    exact = torch.log(s.double()) * a + torch.log1p(-s.double()) * b + c
    got = m.log_odds_false_negative(s)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), exact, rtol=torch.finfo(dtype).eps, atol=1e-4)


@pytest.mark.skipif(DEVICE.type != "cuda", reason="host synchronisations are a CUDA matter")
def test_the_hardness_does_not_wait_for_the_device():
    m = fitted_mixture().float().to(DEVICE)
    s = torch.rand(64, 512, device=DEVICE)
    torch.cuda.synchronize(DEVICE)
    torch.cuda.set_sync_debug_mode("error")  # a host synchronisation raises
    try:
        b = m.hardness_(s.clone())
        log_b = m.log_hardness(s)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(b).all() and torch.isfinite(log_b).all()
