"""BetaMixture: EM recovers known mixtures, warm starts, densities, degenerate data."""

import pytest
import torch
from helpers import sample_mixture

from pyg_progcl.mixture import BetaMixture


def test_recovers_known_mixture_from_default_start():
    x = sample_mixture(100_000, [(2, 8), (9, 3)], [0.8, 0.2])
    m = BetaMixture().fit(x)
    t, f = m.true_negative_index, 1 - m.true_negative_index
    for got, want in [(m.alpha[t], 2), (m.beta[t], 8), (m.alpha[f], 9), (m.beta[f], 3)]:
        assert abs(float(got) / want - 1) < 0.10, (got, want)
    assert abs(float(m.weight[t]) - 0.8) < 0.03
    assert m.n_iter_ < m.max_iter  # converged, not cut off


def test_ten_cold_iterations_are_not_enough():
    # The reason fit() iterates to convergence: I = 10 is a warm-start budget.
    x = sample_mixture(100_000, [(2, 8), (9, 3)], [0.8, 0.2])
    m = BetaMixture().fit(x, max_iter=10)
    assert abs(float(m.alpha[m.true_negative_index]) / 2 - 1) > 0.15


def test_warm_started_refits_move_smoothly():
    m = BetaMixture().fit(sample_mixture(50_000, [(2, 8), (9, 3)], [0.8, 0.2], seed=1))
    before = torch.cat([m.alpha, m.beta, m.weight]).clone()
    shifted = sample_mixture(50_000, [(2.2, 8), (9, 2.8)], [0.78, 0.22], seed=2)
    m.fit(shifted, max_iter=10)
    after = torch.cat([m.alpha, m.beta, m.weight])
    rel = ((after - before).abs() / before).max()
    assert 0 < rel < 0.2
    assert m.true_negative_index == 0  # components keep their roles
    assert float(m.weight[1]) > float(before[5])  # moved toward the new weight 0.22


def test_posterior_and_log_prob():
    m = BetaMixture().fit(sample_mixture(20_000, [(2, 8), (9, 3)], [0.8, 0.2]))
    x = torch.linspace(0.001, 0.999, 2001, dtype=torch.float64)
    post = m.posterior(x)
    torch.testing.assert_close(post.sum(1), torch.ones_like(x))
    torch.testing.assert_close(m.true_negative_posterior(x), post[:, m.true_negative_index])
    assert post[0, m.true_negative_index] > 0.99 and post[-1, m.true_negative_index] < 0.01
    density = torch.exp(m.log_prob(x))
    assert abs(float(torch.trapezoid(density, x)) - 1) < 0.01


def test_log_prob_matches_torch_distributions():
    m = BetaMixture()
    x = torch.rand(100, dtype=torch.float64).clamp(0.01, 0.99)
    expected = torch.logsumexp(
        torch.stack(
            [
                torch.log(m.weight[c].double())
                + torch.distributions.Beta(m.alpha[c].double(), m.beta[c].double()).log_prob(x)
                for c in range(2)
            ]
        ),
        dim=0,
    )
    torch.testing.assert_close(m.log_prob(x), expected)


def test_state_dict_round_trip_and_buffers():
    m = BetaMixture().fit(sample_mixture(5000, [(2, 8), (9, 3)], [0.8, 0.2]))
    fresh = BetaMixture()
    fresh.load_state_dict(m.state_dict())
    for name in ("alpha", "beta", "weight"):
        assert getattr(fresh, name).shape == (2,)
        assert torch.equal(getattr(fresh, name), getattr(m, name))
    assert fresh.fitted
    fresh.reset_parameters()
    assert not fresh.fitted
    initial = BetaMixture()
    for name in ("alpha", "beta", "weight"):  # every fitted parameter, not only alpha
        assert torch.equal(getattr(fresh, name), getattr(initial, name)), name


def test_all_equal_values_stay_finite():
    m = BetaMixture().fit(torch.full((1000,), 0.5))
    assert all(torch.isfinite(t).all() for t in (m.alpha, m.beta, m.weight))
    assert torch.isfinite(m.posterior(torch.rand(10))).all()


def test_vanishing_component_keeps_parameters_finite():
    # Every value far below the high component: it receives no mass.
    m = BetaMixture().fit(torch.full((1000,), 1e-6))
    assert all(torch.isfinite(t).all() for t in (m.alpha, m.beta, m.weight))
    assert float(m.weight.min()) > 0
    assert torch.isfinite(m.log_odds_false_negative(torch.rand(10))).all()


def test_component_without_responsibility_keeps_its_parameters():
    # Beta(200, 1) gives values in [0.05, 0.3] a density below e^-230: its responsibilities
    # underflow, so the M-step has nothing to match and keeps the component as it was.
    x = torch.linspace(0.05, 0.3, 1000)
    m = BetaMixture(alpha_init=(1.0, 200.0), beta_init=(2.0, 1.0)).fit(x, max_iter=3)
    assert (float(m.alpha[1]), float(m.beta[1])) == (200.0, 1.0)
    assert float(m.weight[1]) == pytest.approx(1e-6, rel=1e-3)  # floored at min_weight
    assert float(m.alpha[0]) != 1.0 and torch.isfinite(m.alpha).all()  # the other one moves


@pytest.mark.parametrize(
    "x, match",
    [
        (torch.tensor([0.2, 1.5]), r"\[0, 1\]"),
        (torch.tensor([-0.1, 0.5]), r"\[0, 1\]"),
        (torch.tensor([float("nan"), 0.5]), r"\[0, 1\]"),
        (torch.rand(3, 2), "1-D"),
        (torch.rand(1), "at least 2"),
    ],
)
def test_bad_values_raise(x, match):
    with pytest.raises(ValueError, match=match):
        BetaMixture().fit(x)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"alpha_init": (1.0, -2.0)}, "alpha_init"),
        ({"beta_init": (1.0,)}, "beta_init"),
        ({"weight_init": 1.5}, "weight_init"),
        ({"max_iter": 0}, "max_iter"),
        ({"eps": 0.6}, "eps"),
        ({"tol": float("nan")}, "tol"),
        ({"min_beta_high": float("nan")}, "min_beta_high"),
        ({"min_beta_high": 0.0}, "min_beta_high"),
    ],
)
def test_bad_arguments_raise(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        BetaMixture(**kwargs)


def test_repr():
    assert repr(BetaMixture()) == (
        "BetaMixture(alpha=[1, 2], beta=[2, 1], weight=[0.95, 0.05], fitted=False)"
    )
    assert repr(BetaMixture(min_beta_high=1.01, max_iter=20)).endswith(
        "fitted=False, max_iter=20, min_beta_high=1.01)"
    )  # the reference code's guard is visible in logs


@pytest.mark.parametrize("iters", [1, 4, 10])
def test_em_iterations_equal_the_reference(iters):
    import reference as ref

    x = sample_mixture(5000, [(2, 8), (9, 3)], [0.8, 0.2], seed=3).double()
    m = BetaMixture(tol=0.0).double()  # (never converged: exactly `iters` iterations)
    expected = ref.beta_mixture_em(x, m.alpha, m.beta, m.weight, iters)
    m.fit(x, max_iter=iters)
    assert m.n_iter_ == iters
    for got, want in zip((m.alpha, m.beta, m.weight), expected):
        torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-10, atol=0)
