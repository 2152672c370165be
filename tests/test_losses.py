"""The losses against the dense reference (``reference.py``): values and gradients on
every path (dense, row blocks, one pass, sampled negatives), identities between the
losses, numerics at the edges of float32, bad input."""

import math

import pytest
import reference as ref
import torch
from helpers import BLOCKS, assert_matches, fitted_mixture, params, views

from pyg_progcl.losses import (
    DebiasedInfoNCELoss,
    HardInfoNCELoss,
    InfoNCELoss,
    ProGCLLoss,
    sample_negative_similarities,
)
from pyg_progcl.losses._engine import (
    BlockPool,
    NegativeTerm,
    Path,
    choose_path,
    contrastive_losses,
)
from pyg_progcl.losses._mixing import MixedNegatives, MixedSums
from pyg_progcl.losses._weights import HardnessWeights
from pyg_progcl.losses.schedules import as_schedule
from pyg_progcl.mixture import BetaMixture


@pytest.mark.parametrize("block_size", BLOCKS)
@pytest.mark.parametrize("tau", [0.2, 0.5, 1.0])
def test_infonce_matches_reference(block_size, tau):
    h1, h2 = views()
    assert_matches(
        InfoNCELoss(tau, block_size=block_size), lambda a, b: ref.grace(a, b, tau), h1, h2
    )


@pytest.mark.parametrize("block_size", BLOCKS)
@pytest.mark.parametrize("tau_plus", [0.05, 0.2, 0.6])
def test_dcl_matches_reference(block_size, tau_plus):
    h1, h2 = views()
    loss = DebiasedInfoNCELoss(0.5, tau_plus, block_size=block_size)
    assert_matches(loss, lambda a, b: ref.dcl(a, b, 0.5, tau_plus), h1, h2)


def test_dcl_floor_is_reached_and_finite():
    # A large prior makes (neg - τ⁺ M pos) negative for aligned views: the floor must win.
    h1, _ = views()
    h2 = h1.detach().clone().requires_grad_(True)
    loss = DebiasedInfoNCELoss(0.5, 0.95)
    assert_matches(loss, lambda a, b: ref.dcl(a, b, 0.5, 0.95), h1, h2)


@pytest.mark.parametrize("block_size", BLOCKS)
@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0])
def test_hcl_matches_reference(block_size, beta):
    h1, h2 = views()
    loss = HardInfoNCELoss(0.5, 0.1, beta, block_size=block_size)
    assert_matches(loss, lambda a, b: ref.hcl(a, b, 0.5, 0.1, beta), h1, h2)


@pytest.mark.parametrize("block_size", BLOCKS)
@pytest.mark.parametrize(
    "mixture_args", [{}, {"alpha": (6.0, 2.0), "beta": (2.0, 5.0), "weight": (0.3, 0.7)}]
)
def test_progcl_weight_matches_reference(block_size, mixture_args):
    h1, h2 = views()
    m = fitted_mixture(**mixture_args)
    loss = ProGCLLoss(0.4, mode="weight", mixture=m, block_size=block_size)
    assert_matches(loss, lambda a, b: ref.progcl_weight(a, b, 0.4, params(m)), h1, h2)


@pytest.mark.parametrize("block_size", BLOCKS)
def test_progcl_mix_one_matches_reference(block_size):
    h1, h2 = views()
    m = fitted_mixture()
    loss = ProGCLLoss(0.4, mode="mix", num_mix=1, mixture=m, block_size=block_size)
    assert_matches(loss, lambda a, b: ref.progcl_mix_one(a, b, 0.4, params(m)), h1, h2)


@pytest.mark.parametrize("block_size", BLOCKS)
@pytest.mark.parametrize(("k", "pairing"), [(2, "swap"), (2, "self"), (9, "self"), (22, "self")])
def test_progcl_mix_matches_reference(monkeypatch, block_size, k, pairing):
    # The random pairing π, fixed to one the reference can follow whatever order the k
    # hardest negatives come in: the identity (any k) or the exchange of the two (k = 2).
    def pairing_perm(n, device=None):
        return torch.arange(n, device=device) if pairing == "self" else torch.tensor([1, 0])

    monkeypatch.setattr(torch, "randperm", pairing_perm)
    h1, h2 = views()
    m = fitted_mixture()
    loss = ProGCLLoss(0.4, mode="mix", num_mix=k, mixture=m, block_size=block_size)
    assert_matches(loss, lambda a, b: ref.progcl_mix(a, b, 0.4, params(m), k, pairing), h1, h2)


@pytest.mark.parametrize("block_size", BLOCKS)
def test_progcl_mix_random_pairing_matches_reference(block_size):
    # π drawn by the loss: one randperm(k) per direction and row block, in that order,
    # over each anchor's k hardest negatives in ascending node order.
    h1, h2 = views()
    n, k = h1.size(0), 6
    size = n if block_size is None else block_size
    torch.manual_seed(3)
    perms = []
    for _ in range(2):
        blocks = [torch.randperm(k).expand(min(size, n - s), k) for s in range(0, n, size)]
        perms.append(torch.cat(blocks))
    m = fitted_mixture()
    loss = ProGCLLoss(0.4, mode="mix", num_mix=k, mixture=m, block_size=block_size)
    torch.manual_seed(3)
    out = loss(h1, h2)
    expected = ref.progcl_mix(h1, h2, 0.4, params(m), k, tuple(perms))
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    g, g_ref = (torch.autograd.grad(x, (h1, h2)) for x in (out, expected))
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def test_progcl_mix_backward_reuses_the_selection(monkeypatch):
    # Row blocks are recomputed in backward; their hardest negatives are not selected again.
    calls = []
    select = MixedNegatives.select
    monkeypatch.setattr(
        MixedNegatives, "select", lambda self, b: calls.append(1) or select(self, b)
    )
    h1, h2 = views()
    loss = ProGCLLoss(0.4, mode="mix", num_mix=6, mixture=fitted_mixture(), block_size=7)
    loss(h1, h2).backward()
    assert len(calls) == 2 * 4  # two directions of 4 blocks, forward only


@pytest.mark.parametrize("block_size", [None, 5])
def test_progcl_mix_follows_the_formula_at_any_scale_of_b(monkeypatch, block_size):
    # θ_mix = (b_a θ_a + b_π θ_π) / (b_a + b_π + ε) with ε absolute, as the paper writes it,
    # whatever the scale of b: no rescaling switches on below a threshold.
    h1, h2 = views(n=12)
    m = fitted_mixture()
    hardness, ref_hardness = HardnessWeights.of_logits, ref.hardness
    for scale in [1.0, 1e-6, 1e-8, 1e-12, 1e-19, 1e-21, 1e-30]:

        def scaled(self, logits, out=None, s=scale):
            return hardness(self, logits, out) * s

        monkeypatch.setattr(HardnessWeights, "of_logits", scaled)
        monkeypatch.setattr(ref, "hardness", lambda *a, s=scale: ref_hardness(*a) * s)
        loss = ProGCLLoss(0.4, mode="mix", num_mix=1, mixture=m, block_size=block_size)
        assert_matches(loss, lambda a, b: ref.progcl_mix_one(a, b, 0.4, params(m)), h1, h2)


@pytest.mark.parametrize(
    "make",
    [
        lambda bs: InfoNCELoss(0.5, block_size=bs),
        lambda bs: DebiasedInfoNCELoss(0.5, 0.1, block_size=bs),
        lambda bs: HardInfoNCELoss(0.5, 0.1, 1.0, block_size=bs),
    ],
)
@pytest.mark.parametrize("block_size", [None, 3])
def test_gradcheck(make, block_size):
    h1, h2 = views(n=7, d=3)
    assert torch.autograd.gradcheck(make(block_size), (h1, h2))


def test_gradcheck_sampled_negatives():
    h1, h2 = views(n=9, d=3)
    loss = HardInfoNCELoss(0.5, 0.1, 1.0, num_negatives=4, block_size=4)

    def fn(a, b):
        torch.manual_seed(3)  # the same sampled negatives at every evaluation
        return loss(a, b)

    assert torch.autograd.gradcheck(fn, (h1, h2))


# --- identities -----------------------------------------------------------------


@pytest.mark.parametrize("block_size", [None, 5])
def test_dcl_with_zero_prior_is_grace(block_size):
    h1, h2 = views()
    torch.testing.assert_close(
        DebiasedInfoNCELoss(0.3, 0.0, block_size=block_size)(h1, h2),
        InfoNCELoss(0.3, block_size=block_size)(h1, h2),
        rtol=0,
        atol=0,
    )


@pytest.mark.parametrize("block_size", [None, 5])
def test_hcl_with_zero_beta_is_dcl(block_size):
    h1, h2 = views()
    torch.testing.assert_close(
        HardInfoNCELoss(0.3, 0.2, 0.0, block_size=block_size)(h1, h2),
        DebiasedInfoNCELoss(0.3, 0.2, block_size=block_size)(h1, h2),
        rtol=0,
        atol=0,
    )


@pytest.mark.parametrize("mode", ["weight", "mix"])
def test_progcl_before_fit_is_grace(mode):
    h1, h2 = views()
    loss = ProGCLLoss(0.3, mode=mode)
    assert not loss.fitted
    torch.testing.assert_close(loss(h1, h2), InfoNCELoss(0.3)(h1, h2), rtol=0, atol=0)


def test_progcl_weight_with_uniform_weights_is_grace():
    # Two identical components: the posterior is constant, so b ∝ s'; with all
    # cosines equal (one direction everywhere) the weights are uniform.
    h1 = torch.ones(6, 4, dtype=torch.float64, requires_grad=True)
    h2 = torch.ones(6, 4, dtype=torch.float64, requires_grad=True)
    m = fitted_mixture(alpha=(2.0, 2.0), beta=(3.0, 3.0), weight=(0.5, 0.5))
    w = ProGCLLoss(0.5, mixture=m).negative_weights(h1, h2)
    off_diagonal = ~torch.eye(6, dtype=torch.bool)
    torch.testing.assert_close(w[off_diagonal], torch.ones(30, dtype=w.dtype))
    torch.testing.assert_close(
        ref.progcl_weights(h1, h2, params(m)), torch.ones(6, 5, dtype=w.dtype)
    )
    torch.testing.assert_close(
        ProGCLLoss(0.5, mixture=m)(h1, h2), InfoNCELoss(0.5)(h1, h2), rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize("block_size", [None, 4])
def test_progcl_weight_with_uniform_weights_is_grace_on_any_views(monkeypatch, block_size):
    # A constant hardness b gives w = b / mean b = 1 however the cosines vary: the weighted
    # negative sum is then GRACE's, values and gradients, dense and in row blocks.
    monkeypatch.setattr(BetaMixture, "hardness_", lambda self, s, *args, **kwargs: s.fill_(0.7))
    h1, h2 = views()
    loss = ProGCLLoss(0.5, mixture=fitted_mixture(), block_size=block_size)
    w = loss.negative_weights(h1, h2)
    torch.testing.assert_close(w, 1.0 - torch.eye(23, dtype=w.dtype))
    assert_matches(loss, InfoNCELoss(0.5), h1, h2)


def test_progcl_weights_before_the_first_fit_are_graces():
    h1, h2 = views(n=8)
    loss = ProGCLLoss(0.5)  # not fitted: the loss is GRACE's, and so are its weights
    assert not loss.fitted
    w = loss.negative_weights(h1, h2)
    torch.testing.assert_close(w, 1.0 - torch.eye(8, dtype=w.dtype))
    torch.testing.assert_close(loss(h1, h2), InfoNCELoss(0.5)(h1, h2), rtol=1e-12, atol=0)


def test_progcl_weight_rows_average_to_one():
    h1, h2 = views(n=30)
    m = fitted_mixture()
    w = ProGCLLoss(0.5, mixture=m).negative_weights(h1, h2)
    assert torch.all(w.diagonal() == 0)
    off = w[~torch.eye(30, dtype=torch.bool)].view(30, 29)
    torch.testing.assert_close(off.mean(1), torch.ones(30, dtype=w.dtype))
    torch.testing.assert_close(off, ref.progcl_weights(h1, h2, params(m)))


def test_progcl_uses_current_similarities_and_mixture():
    h1, h2 = views()
    loss = ProGCLLoss(0.5)
    loss.fit(h1, h2)
    first = loss(h1, h2)
    # Same mixture, different embeddings: the weights follow the embeddings.
    h3 = (h2 * 2 + 1).detach()
    expected = ref.progcl_weight(h1, h3, 0.5, params(loss.mixture))
    torch.testing.assert_close(loss(h1, h3), expected)
    # Mixture changed in place: the loss sees the new parameters.
    loss.mixture.alpha.mul_(2)
    assert not torch.isclose(loss(h1, h2), first)


def test_progcl_fit_warm_starts_and_is_no_grad():
    import copy

    h1, h2 = views(n=60)
    loss = ProGCLLoss(0.5, num_samples=5000)
    loss.fit(h1, h2, torch.Generator().manual_seed(0))
    assert loss.fitted and loss.mixture.num_fits == 1
    assert loss.mixture.n_iter_ <= 10
    first = copy.deepcopy(loss.mixture)
    loss.fit(h1, h2, torch.Generator().manual_seed(1))
    assert loss.mixture.num_fits == 2
    # The second fit is EM from the first fit's parameters, not from the initial ones.
    theta = sample_negative_similarities(h1, h2, 5000, torch.Generator().manual_seed(1))
    warm = first.fit((theta + 1) / 2, max_iter=10)
    cold = BetaMixture().fit((theta + 1) / 2, max_iter=10)
    fitted, warm, cold = (torch.cat(params(m)) for m in (loss.mixture, warm, cold))
    torch.testing.assert_close(fitted, warm)
    assert not torch.allclose(fitted, cold, rtol=1e-3)  # ten EM steps end elsewhere
    # Fitting on views that carry gradients records no graph in the mixture's state.
    assert not any(t.requires_grad for t in (loss.mixture.alpha, loss.mixture.weight))


@pytest.mark.parametrize("n, num_samples", [(300, 5000), (300, 100_000), (20, 500)])
def test_sampled_similarities_are_negatives_of_the_inter_view_matrix(n, num_samples):
    # Grid sample (300 nodes, 5000 pairs) and the independent pairs of small graphs or
    # large M: exactly M values, all off-diagonal entries of u·vᵀ, never a positive.
    from pyg_progcl.losses import sample_negative_similarities

    h1, h2 = views(n=n, d=8, grad=False)
    theta = sample_negative_similarities(h1, h2, num_samples, torch.Generator().manual_seed(0))
    assert theta.shape == (num_samples,)
    u, v = torch.nn.functional.normalize(h1, dim=1), torch.nn.functional.normalize(h2, dim=1)
    full = u @ v.T
    off = full[~torch.eye(n, dtype=torch.bool)]
    # every sample is an off-diagonal entry: its nearest one in sorted order is within 1e-12
    ranked = off.sort().values
    right = torch.searchsorted(ranked, theta).clamp(max=ranked.numel() - 1)
    left = (right - 1).clamp(min=0)
    hits = torch.minimum((ranked[right] - theta).abs(), (ranked[left] - theta).abs())
    assert float(hits.max()) < 1e-12
    assert not torch.isin(theta, full.diagonal()).any()
    # and their distribution is that of all negatives (mean within 5 standard errors)
    assert abs(float(theta.mean() - off.mean())) < 5 * float(off.std()) / min(n, 63) ** 0.5


def test_progcl_state_dict_round_trip():
    h1, h2 = views(n=40)
    loss = ProGCLLoss(0.5, num_samples=4000)
    loss.fit(h1, h2)
    fresh = ProGCLLoss(0.5, num_samples=4000)
    assert not fresh.fitted
    fresh.load_state_dict(loss.state_dict())
    assert fresh.fitted
    assert set(loss.state_dict()) == {
        "mixture.alpha",
        "mixture.beta",
        "mixture.weight",
        "mixture.num_fits",
        "schedule.degenerated",  # whether a refit has degenerated (schedule='floored' acts on it)
    }
    torch.testing.assert_close(fresh(h1, h2), loss(h1, h2), rtol=0, atol=0)


def test_progcl_reset_returns_to_grace():
    h1, h2 = views()
    loss = ProGCLLoss(0.5)
    loss.fit(h1, h2)
    loss.reset_parameters()
    assert not loss.fitted
    torch.testing.assert_close(loss(h1, h2), InfoNCELoss(0.5)(h1, h2), rtol=0, atol=0)


# --- sampled negatives ------------------------------------------------------------


def test_sampled_negatives_with_all_nodes_is_exact_for_grace():
    # k = N - 1: every anchor sees every other node, whatever the sample.
    h1, h2 = views(n=15)
    exact = InfoNCELoss(0.5)(h1, h2)
    torch.testing.assert_close(InfoNCELoss(0.5, num_negatives=14)(h1, h2), exact)
    torch.testing.assert_close(InfoNCELoss(0.5, num_negatives=14, block_size=4)(h1, h2), exact)


def test_sampled_negatives_count_k_per_anchor():
    # DCL's floor uses M = 2k: with identical views and a huge prior the loss is log(1 + M e^{-2/τ}).
    n, k, tau = 20, 6, 0.5
    h = torch.randn(n, 4, dtype=torch.float64)
    loss = DebiasedInfoNCELoss(tau, 0.99, num_negatives=k)(h, h.clone())
    torch.testing.assert_close(
        loss, torch.tensor(math.log1p(2 * k * math.exp(-2 / tau)), dtype=loss.dtype)
    )


# --- degenerate and bad input --------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: InfoNCELoss(0.5),
        lambda: DebiasedInfoNCELoss(0.5, 0.1),
        lambda: HardInfoNCELoss(0.5, 0.1, 1.0),
        lambda: ProGCLLoss(0.5, mode="weight"),
        lambda: ProGCLLoss(0.5, mode="mix", num_mix=4),
        lambda: InfoNCELoss(0.5, block_size=3),
    ],
)
def test_all_equal_embeddings_stay_finite(make):
    h1 = torch.ones(10, 4, requires_grad=True)
    h2 = torch.ones(10, 4, requires_grad=True)
    loss = make()
    if isinstance(loss, ProGCLLoss):
        loss.fit(h1, h2)
        assert all(torch.isfinite(t).all() for t in loss.mixture.buffers())
    out = loss(h1, h2)
    out.backward()
    assert torch.isfinite(out)
    assert torch.isfinite(h1.grad).all() and torch.isfinite(h2.grad).all()


@pytest.mark.parametrize("tau", [0.01, 0.005])
def test_small_temperature_is_finite(tau):
    h1, h2 = views(dtype=torch.float32)
    for loss in (InfoNCELoss(tau), HardInfoNCELoss(tau, 0.1, 2.0)):
        out = loss(h1, h2)
        out.backward()
        assert torch.isfinite(out) and torch.isfinite(h1.grad).all()


def test_half_precision_inputs_are_upcast():
    h1, h2 = views(dtype=torch.float32, grad=False)
    out = InfoNCELoss(0.2)(h1.bfloat16(), h2.bfloat16())
    assert out.dtype == torch.float32 and torch.isfinite(out)


@pytest.mark.parametrize(
    "h1, h2, match",
    [
        (torch.randn(5, 3), torch.randn(5, 4), "same shape"),
        (torch.randn(5), torch.randn(5), r"shape \[N, d\]"),
        (torch.randn(1, 3), torch.randn(1, 3), "at least 2"),
        (torch.tensor([[float("nan"), 1.0], [1.0, 2.0]]), torch.randn(2, 2), "NaN or inf"),
        (torch.randn(4, 2), torch.tensor([[float("inf")] * 2] * 4), "NaN or inf"),
        ([[1.0, 2.0]], torch.randn(1, 2), "torch.Tensor"),
    ],
)
@pytest.mark.parametrize(
    "loss",
    [InfoNCELoss(), DebiasedInfoNCELoss(), HardInfoNCELoss(), ProGCLLoss()],
)
def test_bad_views_raise(h1, h2, match, loss):
    with pytest.raises(ValueError, match=match):
        loss(h1, h2)


def test_bad_views_raise_in_fit():
    with pytest.raises(ValueError, match="h2"):
        ProGCLLoss().fit(torch.randn(4, 3), torch.randn(3, 3))


def test_bad_views_raise_after_a_frozen_fit():
    loss = ProGCLLoss(schedule="frozen").fit(*views(grad=False))
    for bad in ([[1.0, 2.0]], None):
        with pytest.raises(ValueError, match="torch.Tensor"):
            loss(bad, bad)


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: InfoNCELoss(tau=0), "tau"),
        (lambda: InfoNCELoss(tau=-1), "tau"),
        (lambda: InfoNCELoss(tau=float("nan")), "tau"),
        (lambda: DebiasedInfoNCELoss(tau_plus=1.0), "tau_plus"),
        (lambda: DebiasedInfoNCELoss(tau_plus=-0.1), "tau_plus"),
        (lambda: HardInfoNCELoss(beta=-1), "beta"),
        (lambda: ProGCLLoss(num_samples=0), "num_samples"),
        (lambda: ProGCLLoss(num_samples=1), "num_samples"),  # a mixture needs two values
        (lambda: ProGCLLoss(num_mix=float("nan")), "num_mix"),
        (lambda: ProGCLLoss(num_mix="3"), "num_mix"),
        (lambda: InfoNCELoss(tau=None), "tau"),
        (lambda: InfoNCELoss(block_size=float("inf")), "block_size"),
        (lambda: ProGCLLoss(num_mix=0), "num_mix"),
        (lambda: ProGCLLoss(mode="both"), "mode"),
        (lambda: ProGCLLoss(fit_iters=0), "fit_iters"),
        (lambda: InfoNCELoss(block_size=0), "block_size"),
        (lambda: InfoNCELoss(num_negatives=0), "num_negatives"),
    ],
)
def test_bad_hyperparameters_raise(make, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        make()


def test_too_many_sampled_negatives_raise():
    with pytest.raises(ValueError, match="num_negatives"):
        InfoNCELoss(num_negatives=5)(torch.randn(5, 3), torch.randn(5, 3))


def test_repr():
    assert repr(InfoNCELoss(0.2)) == "InfoNCELoss(tau=0.2)"
    assert repr(HardInfoNCELoss(0.5, 0.1, 1.0, block_size=8)) == (
        "HardInfoNCELoss(tau=0.5, tau_plus=0.1, beta=1.0, block_size=8)"
    )
    assert "mode='mix'" in repr(ProGCLLoss(mode="mix")) and "BetaMixture" in repr(ProGCLLoss())
    assert "mix_eps" not in repr(ProGCLLoss(mode="mix"))  # the default is not spelled out
    assert "num_mix=1000, mix_eps=1e-06" in repr(ProGCLLoss(mode="mix", mix_eps=1e-6))


@pytest.mark.parametrize("block_size", [None, 5])
def test_progcl_weight_with_underflowing_posterior_falls_back_to_uniform(block_size):
    # The true-negative component has no mass near s' = 0.5: every b underflows to 0 in
    # float32, so each row falls back to uniform weights, i.e. GRACE's denominator.
    h1, h2 = views(n=12, dtype=torch.float32)
    h1, h2 = h1.detach() * 1e-3 + 1, h2.detach() * 1e-3 + 1  # cosines ~1: s' ~ 1
    m = fitted_mixture(alpha=(2.0, 200.0), beta=(400.0, 2.0), weight=(1e-6, 1 - 1e-6)).float()
    loss = ProGCLLoss(0.5, mixture=m, block_size=block_size)
    assert float(loss.hardness(torch.tensor([0.99])).max()) == 0.0
    torch.testing.assert_close(loss(h1, h2), InfoNCELoss(0.5)(h1, h2))


@pytest.mark.parametrize("block_size", [None, 7])
def test_progcl_weight_with_underflowing_weighted_terms_stays_finite(monkeypatch, block_size):
    # Orthogonal views at τ = 0.03: every negative has e^{logit} = e^{-33}; with b = 1e-31
    # (whose sums are still normal floats) each b·e^{logit} underflows to 0 in float32.
    # The weights are uniform, so the loss is GRACE's; log-sum-exp must recover it.
    h = torch.eye(20).requires_grad_()
    loss = ProGCLLoss(0.03, mixture=fitted_mixture().float(), block_size=block_size)
    monkeypatch.setattr(
        HardnessWeights, "of_logits", lambda self, logits, out=None: torch.full_like(logits, 1e-31)
    )
    out = loss(h, h)
    torch.testing.assert_close(out, InfoNCELoss(0.03)(h, h))
    (grad,) = torch.autograd.grad(out, h)
    assert torch.isfinite(grad).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("floor", [0.0, 0.5])
@pytest.mark.parametrize("order", [(2.0, 6.0), (6.0, 2.0)])  # which component is the true one
def test_hardness_matches_reference(dtype, floor, order):
    # b = s'·max(p(TN | s'), floor), linear and in log space, for s' across [eps, 1 - eps],
    # its ends included; beyond them s' is clamped to the ends.
    m = fitted_mixture(alpha=order, beta=order[::-1]).to(dtype)
    g = torch.Generator().manual_seed(0)
    ends = torch.tensor([0.0, 1e-9, 1e-4, 0.5, 0.9999, 1.0 - 1e-9, 1.0], dtype=dtype)
    outside = m.hardness_(ends.clone(), floor)
    bounds = torch.tensor([1e-4, 1e-4, 1e-4, 0.5, 1 - 1e-4, 1 - 1e-4, 1 - 1e-4], dtype=dtype)
    assert torch.equal(outside, m.hardness_(bounds.clone(), floor))
    s = torch.cat([torch.rand(200, generator=g, dtype=torch.float64).to(dtype), bounds])
    s = s.clamp(1e-4, 1 - 1e-4)  # (in dtype: the ends as the code rounds them)
    # The reference's cosines give back this s' exactly: its error is the code's alone.
    expected = ref.hardness(2 * s.double() - 1, *params(m), floor=floor)
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    b = m.hardness_(s.clone(), floor)
    assert b.dtype == dtype
    torch.testing.assert_close(b.double(), expected, rtol=tol, atol=0)
    log_b = m.log_hardness(s, floor)
    torch.testing.assert_close(log_b.double(), expected.log(), rtol=tol, atol=tol)
    if floor == 0.0:
        b = ProGCLLoss(0.5, mixture=m).hardness(2 * s.double() - 1).double()
        torch.testing.assert_close(b, ref.hardness(2 * s.double() - 1, *params(m)))


@pytest.mark.parametrize("block_size", [None, 5])
def test_progcl_weight_with_tiny_hardness_stays_exact(block_size):
    # Cosines ~0.98 under a mixture that calls them false negatives: b ~ 1e-24 .. 1e-28,
    # normal float32 numbers far below any linear-space rescaling threshold. The weights
    # are scale-free, so the float32 loss must still match the float64 reference.
    h1, h2 = views(n=12, dtype=torch.float64, grad=False)
    h1, h2 = h1 * 0.1 + 1, h2 * 0.1 + 1
    m = fitted_mixture(alpha=(2.0, 14.0), beta=(14.0, 2.0), weight=(0.5, 0.5))
    b = ProGCLLoss(0.5, mixture=m.float()).hardness(torch.tensor([0.97, 0.99]))
    assert float(b.min()) > 0 and float(b.max()) < 1e-20
    loss = ProGCLLoss(0.5, mixture=m.float(), block_size=block_size)
    w = loss.negative_weights(h1.float(), h2.float())
    off = w[~torch.eye(12, dtype=torch.bool)].view(12, 11)
    expected = ref.progcl_weights(h1, h2, params(m))
    torch.testing.assert_close(off.double(), expected, rtol=2e-3, atol=1e-9)
    value = loss(h1.float(), h2.float())
    torch.testing.assert_close(
        value.double(), ref.progcl_weight(h1, h2, 0.5, params(m)), rtol=1e-5, atol=0
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda bs: InfoNCELoss(0.3, block_size=bs),
        lambda bs: DebiasedInfoNCELoss(0.3, 0.1, block_size=bs),
        lambda bs: HardInfoNCELoss(0.3, 0.1, 1.0, block_size=bs),
        lambda bs: ProGCLLoss(0.3, mode="weight", mixture=fitted_mixture(), block_size=bs),
        lambda bs: ProGCLLoss(0.3, mode="mix", num_mix=1, mixture=fitted_mixture(), block_size=bs),
    ],
)
def test_row_blocks_equal_dense_at_500_nodes(make):
    h1, h2 = views(n=500, d=16)
    dense = make(None)(h1, h2)
    g_dense = torch.autograd.grad(dense, (h1, h2))
    for bs in (37, 128, 499):
        blocked = make(bs)(h1, h2)
        torch.testing.assert_close(blocked, dense, rtol=1e-12, atol=1e-12)
        for a, b in zip(torch.autograd.grad(blocked, (h1, h2)), g_dense):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def record_blocks(monkeypatch) -> list:
    """The ``(start, stop)`` of every block the one-pass engine builds, in order."""
    import pyg_progcl.losses._engine.onepass as blockwise

    calls = []
    original = blockwise._Blocks.__init__

    def record(self, u, v, start, stop, *args, **kwargs):
        calls.append((start, stop))
        original(self, u, v, start, stop, *args, **kwargs)

    monkeypatch.setattr(blockwise._Blocks, "__init__", record)
    return calls


def test_row_blocks_chosen_automatically_above_dense_limit(monkeypatch):
    import pyg_progcl.losses._engine.dispatch as dispatch

    monkeypatch.setattr(dispatch, "DENSE_MAX_NODES", 50)
    monkeypatch.setattr(dispatch, "BLOCK_ELEMENTS", 60 * 20)
    assert choose_path(60, 0.5, InfoNCELoss().negative_term()) == Path("one-pass", 20)
    calls = record_blocks(monkeypatch)
    h1, h2 = views(n=60)
    out = InfoNCELoss(0.5)(h1, h2)
    torch.testing.assert_close(out, ref.grace(h1, h2, 0.5))
    assert calls == [(0, 20), (20, 40), (40, 60)]  # one pass serves both directions
    out.backward()  # recomputes each block once
    assert calls == [(0, 20), (20, 40), (40, 60)] * 2


def test_losses_without_exp_sums_use_per_direction_row_blocks(monkeypatch):
    import pyg_progcl.losses._engine.per_direction as per_direction

    calls = []
    original = per_direction.row_block

    def record(a, o, rows, *args):
        calls.append((rows.start, rows.stop))
        return original(a, o, rows, *args)

    monkeypatch.setattr(per_direction, "row_block", record)
    h1, h2 = views(n=60)
    loss = ProGCLLoss(0.3, mode="mix", num_mix=1, mixture=fitted_mixture(), block_size=20)
    assert choose_path(60, 0.3, loss.negative_term(), 20) == Path("row-blocks", 20)
    assert choose_path(60, 0.01, InfoNCELoss().negative_term(), 20) == Path("row-blocks", 20)
    torch.testing.assert_close(loss(h1, h2), ref.progcl_mix_one(h1, h2, 0.3, params(loss.mixture)))
    assert calls == [(0, 20), (20, 40), (40, 60)] * 2
    calls.clear()  # tiny τ: exponentials would underflow, so log-sum-exp per direction
    torch.testing.assert_close(
        InfoNCELoss(0.01, block_size=20)(h1, h2), ref.grace(h1, h2, 0.01), rtol=1e-9, atol=1e-9
    )
    assert len(calls) == 6


def test_progcl_mix_takes_the_one_pass_path_as_one_block(monkeypatch):
    # GRACE's sums on the one-pass engine plus the mixed term read from the whole matrix:
    # all anchors in one block up to WHOLE_MATRIX_MAX_NODES, per direction above it, with
    # a block size below N, for a part of the anchors, and with the reference code's
    # shared weights.
    import pyg_progcl.losses._engine.dispatch as dispatch

    monkeypatch.setattr(dispatch, "DENSE_MAX_NODES", 30)
    monkeypatch.setattr(dispatch, "WHOLE_MATRIX_MAX_NODES", 50)
    monkeypatch.setattr(dispatch, "BLOCK_ELEMENTS", 60 * 20)
    term = ProGCLLoss(0.4, "mix", mixture=fitted_mixture()).negative_term()
    assert choose_path(40, 0.4, term) == Path("one-pass")
    assert choose_path(40, 0.4, InfoNCELoss().negative_term()) == Path("one-pass", 30)
    assert choose_path(60, 0.4, term) == Path("row-blocks", 20)
    assert choose_path(40, 0.4, term, 20) == Path("row-blocks", 20)
    assert choose_path(40, 0.4, term, num_anchors=20) == Path("row-blocks", 20)
    assert choose_path(40, 0.01, term) == Path("row-blocks", 30)  # exponentials underflow
    shared = ProGCLLoss.reference_code(0.4, "mix", mixture=fitted_mixture())
    shared.schedule.frozen_u = torch.zeros(40, 2)  # (fitted: the weighted term)
    assert choose_path(40, 0.4, shared.negative_term()) == Path("row-blocks", 30)
    assert choose_path(30, 0.4, shared.negative_term()) == Path("dense")


@pytest.mark.parametrize("chunk_rows", [1, 4, 23])
@pytest.mark.parametrize("k", [1, 6, 22])
def test_progcl_mix_one_pass_in_row_chunks_matches_reference(monkeypatch, chunk_rows, k):
    # The one-pass mixed term works in row chunks of the matrix and of its transpose; any
    # chunking gives the reference's values and gradients with π drawn as randperm(k) for
    # the u anchors, then for the v anchors.
    import pyg_progcl.losses._mixing as mixing

    h1, h2 = views()
    n = h1.size(0)
    monkeypatch.setattr(mixing, "MIX_CHUNK_ELEMENTS", chunk_rows * n)
    torch.manual_seed(5)
    perms = tuple(torch.randperm(k).expand(n, k) for _ in range(2))
    loss = ProGCLLoss(0.4, "mix", num_mix=k, mixture=fitted_mixture())
    torch.manual_seed(5)
    assert_matches(
        loss, lambda a, b: ref.progcl_mix(a, b, 0.4, params(loss.mixture), k, perms), h1, h2
    )


def test_progcl_mix_one_pass_rows_of_underflowed_b_are_uniform(monkeypatch):
    # An anchor whose b all underflowed mixes its first k negatives with b = 1 (GRACE's
    # row), on the one-pass path as on the per-direction path.
    h1, h2 = views(n=12)
    hardness = HardnessWeights.of_logits

    def underflow_first_rows(self, logits, out=None):
        b = hardness(self, logits, out)
        b[:3] = 1e-320 if b.dtype == torch.float64 else 0.0
        return b

    monkeypatch.setattr(HardnessWeights, "of_logits", underflow_first_rows)
    results = []
    for block_size in (None, 12):  # one pass / per direction, dense (one π per direction)
        loss = ProGCLLoss(0.4, "mix", num_mix=4, mixture=fitted_mixture(), block_size=block_size)
        term = loss.negative_term()
        term = term if block_size is None else NegativeTerm(term.log_negatives)
        torch.manual_seed(0)
        out = contrastive_losses(h1, h2, 0.4, term, block_size).mean()
        results.append((out, *torch.autograd.grad(out, (h1, h2))))
    for a, b in zip(*results):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_block_size_of_all_nodes_is_the_dense_path(monkeypatch):
    import pyg_progcl.losses._engine.per_direction as per_direction

    def fail(*args):
        raise AssertionError("row blocks used")

    monkeypatch.setattr(per_direction, "row_block", fail)
    assert choose_path(20, 0.5, InfoNCELoss().negative_term(), 20) == Path("one-pass")
    calls = record_blocks(monkeypatch)
    h1, h2 = views(n=20)
    for block_size in (20, 10**6):
        out = InfoNCELoss(0.5, block_size=block_size)(h1, h2)
        torch.testing.assert_close(out, ref.grace(h1, h2, 0.5))
        out.backward()  # the single block is kept for backward, not recomputed
    assert calls == [(0, 20), (0, 20)]


SUM_LOSSES = [
    lambda: InfoNCELoss(0.4),
    lambda: DebiasedInfoNCELoss(0.4, 0.1),
    lambda: HardInfoNCELoss(0.4, 0.1, 1.0),
    lambda: ProGCLLoss(0.4, mixture=fitted_mixture()),
]


@pytest.mark.parametrize("make", SUM_LOSSES)
@pytest.mark.parametrize("block_size", [None, 6, 23])
def test_one_pass_equals_per_direction_blocks(make, block_size):
    # The same loss through both machineries: the one-pass ExpSums engine (the default)
    # and the per-direction NegativeBlock path (small τ, sampled negatives, fallbacks).
    loss = make()
    h1, h2 = views(n=23)
    term = loss.negative_term()

    def run(sums):
        one_term = NegativeTerm(term.log_negatives, sums)
        out = contrastive_losses(h1, h2, loss.tau, one_term, block_size).mean()
        return (out, *torch.autograd.grad(out, (h1, h2)))

    for a, b in zip(run(term.sums), run(None)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ProGCLLoss(0.4, mixture=fitted_mixture(), block_size=16),  # keeps w and w·e^{uv}
        lambda: DebiasedInfoNCELoss(0.4, 0.1, block_size=16),  # keeps u·vᵀ exponentials
        lambda: HardInfoNCELoss(0.4, 0.1, 1.0, block_size=16),  # two scales: keeps nothing
    ],
)
def test_blocks_keep_or_recompute_alike(monkeypatch, make):
    import pyg_progcl.losses._engine.onepass as blockwise

    h1, h2 = views(n=60)
    loss = make()
    kept = loss(h1, h2)
    g_kept = torch.autograd.grad(kept, (h1, h2))
    for budget in (60 * 60, 0):  # ProGCL: its weights only; then recompute everything
        monkeypatch.setattr(blockwise, "KEEP_ELEMENTS", budget)
        again = loss(h1, h2)
        torch.testing.assert_close(again, kept, rtol=0, atol=0)
        for a, b in zip(torch.autograd.grad(again, (h1, h2)), g_kept):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    dense = make()
    dense.block_size = None
    torch.testing.assert_close(kept, dense(h1, h2), rtol=1e-12, atol=1e-12)


POOLED = [
    lambda bs: ProGCLLoss(0.4, mixture=fitted_mixture(), block_size=bs),
    lambda bs: InfoNCELoss(0.4, block_size=bs),
    lambda bs: HardInfoNCELoss(0.4, 0.1, 1.0, block_size=bs),  # two scales
]


@pytest.mark.parametrize("block_size", [16, None])  # row blocks, one dense block
@pytest.mark.parametrize("make", POOLED)
def test_block_pool_reuses_the_same_matrices_every_step(make, block_size):
    def pooled() -> set:
        return {m.data_ptr() for mats in loss.pool.free.values() for m in mats}

    loss = make(block_size)
    h1, h2 = views(n=60)
    loss(h1, h2).backward()
    first = pooled()
    assert first and loss.pool.bytes == sum(m.nbytes for k in loss.pool.free.values() for m in k)
    taken = []
    take = loss.pool.take
    loss.pool.take = lambda *args: taken.append(take(*args)) or taken[-1]
    loss(h1, h2).backward()
    assert taken and {m.data_ptr() for m in taken} <= first  # no new matrix in step 2
    assert pooled() == first


@pytest.mark.parametrize("block_size", [16, None])
@pytest.mark.parametrize("make", POOLED)
def test_block_pool_never_shares_a_matrix_in_use(make, block_size):
    # Two graphs alive at once, a second backward of a retained graph, and a pool that
    # holds stale matrices of other inputs: all equal a pool-less computation.
    loss = make(block_size)
    a, b = views(n=60, seed=1), views(n=60, seed=2)
    loss(*a).backward()  # fill the pool
    total = loss(*a) + 2 * loss(*b)
    grads = torch.autograd.grad(total, (*a, *b), retain_graph=True)
    again = torch.autograd.grad(total, (*a, *b))
    fresh = make(block_size)
    fresh.pool.max_bytes = 0  # allocates every matrix anew
    expected = torch.autograd.grad(fresh(*a) + 2 * fresh(*b), (*a, *b))
    for x, y, z in zip(grads, again, expected):
        torch.testing.assert_close(x, z, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(y, z, rtol=1e-12, atol=1e-12)


def test_block_pool_is_bounded_and_not_copied():
    import copy
    import io

    loss = InfoNCELoss(0.4, block_size=16)
    h1, h2 = views(n=60)
    loss(h1, h2).backward()
    assert loss.pool.bytes > 0
    assert copy.deepcopy(loss).pool.bytes == 0
    buffer = io.BytesIO()
    torch.save(loss, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=False).pool.free == {}
    loss.pool.max_bytes = 5_000  # a 16 x 60 float64 block matrix has 7,680 bytes
    loss.pool.free, loss.pool.bytes = {}, 0
    loss(h1, h2).backward()
    assert loss.pool.bytes == 0


def test_dense_pass_gives_its_weights_back_before_backward():
    loss = ProGCLLoss(0.4, mixture=fitted_mixture())  # one dense block
    h1, h2 = views(n=60)
    out = loss(h1, h2)
    assert loss.pool.bytes == 60 * 60 * 8  # the weights; the exponentials stay for backward
    out.backward()
    assert loss.pool.bytes == 4 * 60 * 60 * 8


@pytest.mark.parametrize("n,tile", [(1, 512), (23, 5), (40, 8), (1100, 512)])
def test_transpose_in_place_in_tiles(monkeypatch, n, tile):
    from pyg_progcl.losses._engine import ops

    monkeypatch.setattr(ops, "TRANSPOSE_TILE", tile)
    x = torch.randn(n, n, dtype=torch.float64)
    expected = x.T.clone()
    assert ops.transpose_(x) is x and torch.equal(x, expected)


# --- reductions and the one-pass engine's underflowed anchors --------------------------


REDUCED = [
    lambda **kw: InfoNCELoss(0.4, **kw),
    lambda **kw: DebiasedInfoNCELoss(0.4, 0.1, **kw),
    lambda **kw: HardInfoNCELoss(0.4, 0.1, 1.0, **kw),
    lambda **kw: ProGCLLoss(0.4, mixture=fitted_mixture(), **kw),
    lambda **kw: ProGCLLoss(0.4, mode="mix", num_mix=3, mixture=fitted_mixture(), **kw),
]


@pytest.mark.parametrize("make", REDUCED)
@pytest.mark.parametrize("options", [{}, {"block_size": 6}, {"num_negatives": 9}])
def test_reductions_are_the_per_anchor_losses(make, options):
    # 'none' gives the [2, N] losses l(u_i), l(v_i); 'mean' and 'sum' reduce them, values
    # and gradients, on every path (the same random draws for each reduction).
    h1, h2 = views()
    out = {}
    for reduction in ("none", "mean", "sum"):
        torch.manual_seed(5)
        value = make(reduction=reduction, **options)(h1, h2)
        out[reduction] = (value, torch.autograd.grad(value.sum(), (h1, h2)))
    per_anchor, g_none = out["none"]
    assert per_anchor.shape == (2, 23) and bool((per_anchor > 0).all())
    torch.testing.assert_close(out["mean"][0], per_anchor.mean(), rtol=1e-12, atol=0)
    torch.testing.assert_close(out["sum"][0], per_anchor.sum(), rtol=1e-12, atol=0)
    for a, b, c in zip(g_none, out["sum"][1], out["mean"][1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(a, c * 46, rtol=1e-10, atol=1e-12)


def test_per_anchor_losses_match_the_reference_anchor_by_anchor():
    h1, h2 = views()
    per_anchor = InfoNCELoss(0.5, reduction="none")(h1, h2)
    for view, (a, b) in enumerate(((h1, h2), (h2, h1))):  # anchor i of view `view` alone
        for i in (0, 7, 22):
            expected = ref.grace_anchor(a, b, 0.5, i)
            torch.testing.assert_close(per_anchor[view, i], expected, rtol=1e-12, atol=1e-12)


def test_bad_reduction_raises():
    with pytest.raises(ValueError, match="`reduction` must be one of"):
        InfoNCELoss(reduction="avg")


def test_one_pass_recomputes_only_underflowed_anchors_in_log_space(monkeypatch):
    # Anchor u_0 is (almost) every v_k, whose cosines ~1 the mixture calls false negatives:
    # all its b underflow in float32 (weights uniform, GRACE's row), while every other
    # anchor's weights are normal. The one-pass engine reports exactly u_0; the loss, its
    # gradients included, still equals the float64 reference.
    from pyg_progcl.losses._engine.onepass import one_pass_losses

    g = torch.Generator().manual_seed(0)
    n, d = 16, 6
    e1 = torch.zeros(d, dtype=torch.float64)
    e1[0] = 1.0
    h2 = e1 + 1e-3 * torch.randn(n, d, generator=g, dtype=torch.float64)
    h1 = torch.nn.functional.normalize(torch.randn(n, d, generator=g, dtype=torch.float64), dim=1)
    h1[0] = e1
    m = fitted_mixture(alpha=(5.0, 400.0), beta=(30.0, 1.01), weight=(0.9, 0.1))
    loss = ProGCLLoss(0.5, mixture=m.float())
    u, v = (torch.nn.functional.normalize(h, dim=1) for h in (h1.float(), h2.float()))
    _, underflow = one_pass_losses(u, v, 0.5, loss.negative_term().sums, n)
    assert underflow.nonzero().tolist() == [[0, 0]]
    a, b = h1.float().requires_grad_(), h2.float().requires_grad_()
    value = loss(a, b)
    grads = torch.autograd.grad(value, (a, b))
    a64, b64 = h1.clone().requires_grad_(), h2.clone().requires_grad_()
    expected = ref.progcl_weight(a64, b64, 0.5, params(m))
    torch.testing.assert_close(value.double(), expected, rtol=1e-5, atol=0)
    for x, y in zip(grads, torch.autograd.grad(expected, (a64, b64))):
        torch.testing.assert_close(x.double(), y, rtol=1e-3, atol=1e-5)


def test_the_one_pass_mixed_term_refuses_a_temperature_it_cannot_leave_unshifted():
    """Its log-sum-exp skips the shift by the row maximum only while e^{-2/τ} is a normal
    float: a smaller τ is an error (also under ``python -O``), not a silent underflow."""
    tau = 0.02  # 2 / tau = 100 > EXP_SPAN
    weights = HardnessWeights(fitted_mixture(), tau, as_schedule("online"))
    u, v = (torch.nn.functional.normalize(h.detach(), dim=1) for h in views(n=8))
    logits = (u @ v.T - 1) / tau
    with pytest.raises(RuntimeError, match=r"needs 2 / tau <= 80 \(got tau=0.02\)"):
        MixedSums(weights, 3).forward(logits, BlockPool(0))
    ok = HardnessWeights(fitted_mixture(), 0.4, as_schedule("online"))
    assert MixedSums(ok, 3).forward(logits * tau / 0.4, BlockPool(0)).isfinite().all()
