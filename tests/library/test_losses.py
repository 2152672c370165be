"""The losses against the dense reference (``reference.py``): values and gradients on
each of the engine's three paths (dense, row blocks, sampled negatives), identities
between the losses, which path runs, numerics at the edges of float32, bad input."""

import math

import pytest
import reference as ref
import torch
from helpers import (
    PATHS,
    SAMPLED,
    assert_matches,
    engine_weights,
    fitted_mixture,
    params,
    path_id,
    record_paths,
    views,
)
from torch._dynamo.utils import counters

from pyg_progcl.losses import DebiasedInfoNCELoss, HardInfoNCELoss, InfoNCELoss, ProGCLLoss
from pyg_progcl.losses._sampling import sample_negative_similarities
from pyg_progcl.mixture import BetaMixture

N = 23  # the nodes of views()


def seeded(loss_fn, h1, h2, seed=0):
    """``loss_fn(h1, h2)`` after seeding torch (the same sampled negatives every call)."""
    torch.manual_seed(seed)
    return loss_fn(h1, h2)


def nodes_in_order(monkeypatch, n, k=None):
    """``torch.randperm(n)`` (the sampled path's nodes) returns ``0 .. n-1``, so that its
    columns are in node order; with ``k``, ``randperm(k)`` (ProGCL-mix's pairing π) is the
    identity too. Other lengths draw as usual."""
    randperm = torch.randperm

    def perm(m, *args, **kwargs):
        if m in (n, k):
            return torch.arange(m, device=kwargs.get("device"))
        return randperm(m, *args, **kwargs)

    monkeypatch.setattr(torch, "randperm", perm)


@pytest.mark.parametrize("options", PATHS, ids=path_id)
@pytest.mark.parametrize("tau", [0.2, 0.5, 1.0])
def test_infonce_matches_reference(options, tau):
    h1, h2 = views()
    assert_matches(InfoNCELoss(tau, **options), lambda a, b: ref.grace(a, b, tau), h1, h2)


@pytest.mark.parametrize("options", PATHS, ids=path_id)
@pytest.mark.parametrize("tau_plus", [0.05, 0.2, 0.6])
def test_dcl_matches_reference(options, tau_plus):
    h1, h2 = views()
    loss = DebiasedInfoNCELoss(0.5, tau_plus, **options)
    assert_matches(loss, lambda a, b: ref.dcl(a, b, 0.5, tau_plus), h1, h2)


@pytest.mark.parametrize("options", PATHS, ids=path_id)
def test_dcl_floor_is_reached_and_finite(options):
    # A large prior makes (neg - τ⁺ M pos) negative for aligned views: the floor must win.
    h1, _ = views()
    h2 = h1.detach().clone().requires_grad_(True)
    loss = DebiasedInfoNCELoss(0.5, 0.95, **options)
    assert_matches(loss, lambda a, b: ref.dcl(a, b, 0.5, 0.95), h1, h2)


@pytest.mark.parametrize("options", PATHS, ids=path_id)
@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0])
def test_hcl_matches_reference(options, beta):
    h1, h2 = views()
    loss = HardInfoNCELoss(0.5, 0.1, beta, **options)
    assert_matches(loss, lambda a, b: ref.hcl(a, b, 0.5, 0.1, beta), h1, h2)


@pytest.mark.parametrize("options", PATHS, ids=path_id)
@pytest.mark.parametrize(
    "mixture_args", [{}, {"alpha": (6.0, 2.0), "beta": (2.0, 5.0), "weight": (0.3, 0.7)}]
)
def test_progcl_weight_matches_reference(options, mixture_args):
    h1, h2 = views()
    m = fitted_mixture(**mixture_args)
    loss = ProGCLLoss(0.4, mode="weight", mixture=m, **options)
    assert_matches(loss, lambda a, b: ref.progcl_weight(a, b, 0.4, params(m)), h1, h2)


@pytest.mark.parametrize("options", PATHS, ids=path_id)
def test_progcl_mix_one_matches_reference(options):
    h1, h2 = views()
    m = fitted_mixture()
    loss = ProGCLLoss(0.4, mode="mix", num_mix=1, mixture=m, **options)
    assert_matches(loss, lambda a, b: ref.progcl_mix_one(a, b, 0.4, params(m)), h1, h2)


@pytest.mark.parametrize("options", PATHS, ids=path_id)
@pytest.mark.parametrize(("k", "pairing"), [(2, "swap"), (2, "self"), (9, "self"), (22, "self")])
def test_progcl_mix_matches_reference(monkeypatch, options, k, pairing):
    # The random pairing π, fixed to one the reference can follow whatever order the k
    # hardest negatives come in (the sampled path's columns are in random order): the
    # identity (any k) or the exchange of the two (k = 2).
    randperm = torch.randperm

    def pairing_perm(n, *args, **kwargs):
        if n != k:  # (the sampled path's nodes: N = 23 > k)
            return randperm(n, *args, **kwargs)
        device = kwargs.get("device")
        return torch.arange(n, device=device) if pairing == "self" else torch.tensor([1, 0])

    monkeypatch.setattr(torch, "randperm", pairing_perm)
    h1, h2 = views()
    m = fitted_mixture()
    loss = ProGCLLoss(0.4, mode="mix", num_mix=k, mixture=m, **options)
    assert_matches(loss, lambda a, b: ref.progcl_mix(a, b, 0.4, params(m), k, pairing), h1, h2)


@pytest.mark.parametrize("options", PATHS, ids=path_id)
@pytest.mark.parametrize("mode", ["weight", "mix"])
def test_progcl_with_nine_mixed_negatives_matches_reference(monkeypatch, options, mode):
    # ProGCL-mix over 9 of the 22 negatives, each mixed with itself (π the identity).
    randperm = torch.randperm
    monkeypatch.setattr(
        torch, "randperm", lambda n, *a, **kw: torch.arange(n) if n == 9 else randperm(n, *a, **kw)
    )
    h1, h2 = views()
    m = fitted_mixture()
    if mode == "weight":
        expected = lambda a, b: ref.progcl_weight(a, b, 0.4, params(m))  # noqa: E731
    else:
        expected = lambda a, b: ref.progcl_mix(a, b, 0.4, params(m), 9, "self")  # noqa: E731
    assert_matches(ProGCLLoss(0.4, mode=mode, num_mix=9, mixture=m, **options), expected, h1, h2)


@pytest.mark.parametrize("options", PATHS, ids=path_id)
@pytest.mark.parametrize("k", [1, 6, 22])
def test_progcl_mix_random_pairing_matches_reference(monkeypatch, options, k):
    # π drawn by the loss: one randperm(k) per view and block (u's blocks, then v's), over
    # each anchor's k hardest negatives in ascending column order. (The sampled path's
    # columns are drawn in node order here, so that they are ascending nodes too.)
    nodes_in_order(monkeypatch, N)
    h1, h2 = views()
    size = options.get("block_size") or N
    torch.manual_seed(3)
    perms = []
    for _ in range(2):
        blocks = [torch.randperm(k).expand(min(size, N - s), k) for s in range(0, N, size)]
        perms.append(torch.cat(blocks))
    m = fitted_mixture()
    loss = ProGCLLoss(0.4, mode="mix", num_mix=k, mixture=m, **options)
    torch.manual_seed(3)
    out = loss(h1, h2)
    expected = ref.progcl_mix(h1, h2, 0.4, params(m), k, tuple(perms))
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    g, g_ref = (torch.autograd.grad(x, (h1, h2)) for x in (out, expected))
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("options", [{}, {"block_size": 5}, {"num_negatives": 11}], ids=path_id)
def test_progcl_mix_follows_the_formula_at_any_scale_of_b(monkeypatch, options):
    # θ_mix = (b_a θ_a + b_π θ_π) / (b_a + b_π + ε) with ε absolute, as the paper writes it,
    # whatever the scale of b: no rescaling switches on below a threshold.
    h1, h2 = views(n=12)
    m = fitted_mixture()
    log_hardness, ref_hardness = BetaMixture.log_hardness_, ref.hardness
    for scale in [1.0, 1e-6, 1e-8, 1e-12, 1e-19, 1e-21, 1e-30]:

        def scaled(self, s, floor=0.0, c=scale):
            return log_hardness(self, s, floor) + math.log(c)

        monkeypatch.setattr(BetaMixture, "log_hardness_", scaled)
        monkeypatch.setattr(ref, "hardness", lambda *a, c=scale, **kw: ref_hardness(*a, **kw) * c)
        loss = ProGCLLoss(0.4, mode="mix", num_mix=1, mixture=m, **options)
        assert_matches(loss, lambda a, b: ref.progcl_mix_one(a, b, 0.4, params(m)), h1, h2)


#: Temperatures whose exponentials leave float32's normal range (``2·scale/τ > 80``): the
#: engine's log-sum-exp in place of its plain sums. HCL at τ = 0.04 has one scale (1)
#: inside and one (1 + β = 2) outside.
SMALL_TAU = {
    "grace": (lambda **kw: InfoNCELoss(0.01, **kw), lambda a, b: ref.grace(a, b, 0.01)),
    "dcl": (
        lambda **kw: DebiasedInfoNCELoss(0.02, 0.1, **kw),
        lambda a, b: ref.dcl(a, b, 0.02, 0.1),
    ),
    "hcl-0.04": (
        lambda **kw: HardInfoNCELoss(0.04, 0.1, 1.0, **kw),
        lambda a, b: ref.hcl(a, b, 0.04, 0.1, 1.0),
    ),
    "hcl-0.02": (
        lambda **kw: HardInfoNCELoss(0.02, 0.1, 1.0, **kw),
        lambda a, b: ref.hcl(a, b, 0.02, 0.1, 1.0),
    ),
    "progcl-weight": (
        lambda **kw: ProGCLLoss(0.02, mixture=fitted_mixture(), **kw),
        lambda a, b: ref.progcl_weight(a, b, 0.02, params(fitted_mixture())),
    ),
    "progcl-mix-1": (
        lambda **kw: ProGCLLoss(0.02, mode="mix", num_mix=1, mixture=fitted_mixture(), **kw),
        lambda a, b: ref.progcl_mix_one(a, b, 0.02, params(fitted_mixture())),
    ),
}


@pytest.mark.parametrize("options", PATHS, ids=path_id)
@pytest.mark.parametrize("name", list(SMALL_TAU))
def test_small_temperatures_match_reference(options, name):
    make, ref_fn = SMALL_TAU[name]
    h1, h2 = views()
    assert_matches(make(**options), ref_fn, h1, h2)


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


@pytest.mark.parametrize(
    "make",
    [
        lambda bs: InfoNCELoss(0.5, block_size=bs),
        lambda bs: HardInfoNCELoss(0.5, 0.1, 1.0, block_size=bs),
        lambda bs: ProGCLLoss(0.5, mixture=fitted_mixture(), block_size=bs),
        lambda bs: ProGCLLoss(0.5, mode="mix", num_mix=3, mixture=fitted_mixture(), block_size=bs),
    ],
    ids=["infonce", "hcl", "progcl-weight", "progcl-mix"],
)
@pytest.mark.parametrize("block_size", [None, 4])
def test_a_second_backward_through_the_graph_gives_the_same_gradients(make, block_size):
    # A backward that keeps the graph (retain_graph) leaves the kept matrices as they
    # were; the last one turns them into gradients in place.
    h1, h2 = views(n=10, d=4)
    loss = make(block_size)(h1, h2)
    first = torch.autograd.grad(loss, (h1, h2), retain_graph=True)
    second = torch.autograd.grad(loss, (h1, h2))
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("block_size", [None, 4])
def test_gradcheck_sampled_negatives(block_size):
    h1, h2 = views(n=9, d=3)
    loss = HardInfoNCELoss(0.5, 0.1, 1.0, num_negatives=4, block_size=block_size)
    assert torch.autograd.gradcheck(lambda a, b: seeded(loss, a, b, 3), (h1, h2))


# --- identities -----------------------------------------------------------------


@pytest.mark.parametrize("options", PATHS, ids=path_id)
def test_dcl_with_zero_prior_is_grace(options):
    h1, h2 = views()
    torch.testing.assert_close(
        seeded(DebiasedInfoNCELoss(0.3, 0.0, **options), h1, h2),
        seeded(InfoNCELoss(0.3, **options), h1, h2),
        rtol=0,
        atol=0,
    )


@pytest.mark.parametrize("options", PATHS, ids=path_id)
def test_hcl_with_zero_beta_is_dcl(options):
    h1, h2 = views()
    torch.testing.assert_close(
        seeded(HardInfoNCELoss(0.3, 0.2, 0.0, **options), h1, h2),
        seeded(DebiasedInfoNCELoss(0.3, 0.2, **options), h1, h2),
        rtol=0,
        atol=0,
    )


@pytest.mark.parametrize("options", PATHS + [{"num_negatives": 9}], ids=path_id)
@pytest.mark.parametrize("mode", ["weight", "mix"])
def test_progcl_before_fit_is_grace(mode, options):
    # Not fitted: the loss is GRACE's, its weights uniform (values and gradients).
    h1, h2 = views()
    loss = ProGCLLoss(0.3, mode=mode, **options)
    assert not loss.fitted
    got, expected = seeded(loss, h1, h2), seeded(InfoNCELoss(0.3, **options), h1, h2)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    for a, b in zip(*(torch.autograd.grad(x, (h1, h2)) for x in (got, expected))):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("options", PATHS[:3] + SAMPLED[1:], ids=path_id)
def test_progcl_weight_with_uniform_weights_is_grace(options):
    # Two identical components: the posterior is constant, so b ∝ s'; with all
    # cosines equal (one direction everywhere) the weights are uniform.
    h1 = torch.ones(6, 4, dtype=torch.float64, requires_grad=True)
    h2 = torch.ones(6, 4, dtype=torch.float64, requires_grad=True)
    m = fitted_mixture(alpha=(2.0, 2.0), beta=(3.0, 3.0), weight=(0.5, 0.5))
    off_diagonal = ~torch.eye(6, dtype=torch.bool)
    for block_size in (None, 4):
        w = engine_weights(ProGCLLoss(0.5, mixture=m), h1, h2, block_size)
        torch.testing.assert_close(w[:, off_diagonal], torch.ones(2, 30, dtype=w.dtype))
    torch.testing.assert_close(
        ref.progcl_weights(h1, h2, params(m)), torch.ones(6, 5, dtype=torch.float64)
    )
    options = {**options, "num_negatives": 5} if "num_negatives" in options else options
    torch.testing.assert_close(
        seeded(ProGCLLoss(0.5, mixture=m, **options), h1, h2),
        seeded(InfoNCELoss(0.5, **options), h1, h2),
        rtol=1e-12,
        atol=1e-12,
    )


@pytest.mark.parametrize("options", PATHS, ids=path_id)
def test_progcl_weight_with_uniform_weights_is_grace_on_any_views(monkeypatch, options):
    # A constant hardness b gives w = b / mean b = 1 however the cosines vary: the weighted
    # negative sum is then GRACE's, values and gradients, on every path.
    monkeypatch.setattr(BetaMixture, "log_hardness_", lambda self, s, *a: torch.full_like(s, -0.3))
    h1, h2 = views()
    loss = ProGCLLoss(0.5, mixture=fitted_mixture(), **options)
    for block_size in (None, 4):
        w = engine_weights(loss, h1, h2, block_size)
        torch.testing.assert_close(w, (1.0 - torch.eye(N, dtype=w.dtype)).expand(2, N, N))
    assert_matches(loss, InfoNCELoss(0.5), h1, h2)


@pytest.mark.parametrize("block_size", [None, 7])
def test_progcl_weight_rows_average_to_one(block_size):
    # w = b / mean b of each anchor's negatives, anchors u (b(θ(u_i, v_k))) and v
    # (b(θ(v_i, u_k))): 0 for the anchor itself, the reference's elsewhere.
    h1, h2 = views(n=30)
    m = fitted_mixture()
    w = engine_weights(ProGCLLoss(0.5, mixture=m), h1, h2, block_size)
    off_diagonal = ~torch.eye(30, dtype=torch.bool)
    for view, (a, b) in enumerate(((h1, h2), (h2, h1))):
        assert torch.all(w[view].diagonal() == 0)
        off = w[view][off_diagonal].view(30, 29)
        torch.testing.assert_close(off.mean(1), torch.ones(30, dtype=w.dtype))
        torch.testing.assert_close(off, ref.progcl_weights(a, b, params(m)))


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


@pytest.mark.parametrize("block_size", [None, 7])
def test_sampled_negatives_count_k_per_anchor(block_size):
    # DCL's floor uses M = 2k: with identical views and a huge prior the loss is log(1 + M e^{-2/τ}).
    n, k, tau = 20, 6, 0.5
    h = torch.randn(n, 4, dtype=torch.float64)
    loss = DebiasedInfoNCELoss(tau, 0.99, num_negatives=k, block_size=block_size)(h, h.clone())
    torch.testing.assert_close(
        loss, torch.tensor(math.log1p(2 * k * math.exp(-2 / tau)), dtype=loss.dtype)
    )


def test_sampled_negatives_are_k_uniform_other_nodes(monkeypatch):
    # Each block draws k + 1 nodes; an anchor drops itself if drawn, else the last: its k
    # negatives are uniform among the other N - 1 nodes, the same for both views' terms.
    seen = []

    def record(block):
        cols = block.cols.expand(block.inter.size(0), -1)
        keep = block.inter.isfinite()
        assert bool((keep == block.intra.isfinite()).all())
        assert bool((keep.sum(1) == block.count).all())
        anchors = torch.arange(block.rows.start, block.rows.stop)
        negatives = cols[keep].view(-1, block.count)
        assert not bool((negatives == anchors.unsqueeze(1)).any())
        seen.append(negatives)
        return block.log_sum_exp_both()

    loss = InfoNCELoss(0.5, num_negatives=4, block_size=3)
    monkeypatch.setattr(loss, "negative_term", record)
    h1, h2 = views(n=10, grad=False)
    for _ in range(400):
        loss(h1, h2)
    counts = torch.bincount(torch.cat(seen).flatten(), minlength=10).double()
    assert counts.sum() == 400 * 2 * 10 * 4
    torch.testing.assert_close(
        counts / counts.mean(), torch.ones(10, dtype=counts.dtype), rtol=0.1, atol=0
    )


# --- which path runs ---------------------------------------------------------------


def recomputed(calls, forward) -> bool:
    """Whether ``calls`` are the ``forward`` blocks, then each of them once more (in
    backward, in any order)."""
    done = len(forward)
    return calls[:done] == forward and sorted(calls[done:]) == sorted(forward)


def blocks_of(kind, *bounds):
    """``(kind, view, start, stop)`` of both views' blocks ``bounds``, u's first."""
    return [(kind, view, *b) for view in (0, 1) for b in bounds]


PATH_LOSSES = [
    lambda **kw: InfoNCELoss(0.5, **kw),
    lambda **kw: ProGCLLoss(0.5, mode="mix", num_mix=1, mixture=fitted_mixture(), **kw),
]
PATH_REFERENCES = [
    lambda a, b: ref.grace(a, b, 0.5),
    lambda a, b: ref.progcl_mix_one(a, b, 0.5, params(fitted_mixture())),
]


def dense_bytes(loss, n=N, itemsize=8):
    """The memory budget at which ``loss`` just takes the dense path on ``n`` nodes."""
    return loss.peak_matrices * n * n * itemsize


@pytest.mark.parametrize("which", [0, 1], ids=["infonce", "progcl-mix"])
def test_the_dense_path_serves_what_fits_the_memory_budget(monkeypatch, which):
    make, ref_fn = PATH_LOSSES[which], PATH_REFERENCES[which]
    h1, h2 = views()
    budget = dense_bytes(make())
    loss = make(memory_budget=budget)
    assert loss.plan(h1) == ("dense", N)
    calls = record_paths(monkeypatch)
    assert_matches(loss, ref_fn, h1, h2)  # (forward and backward)
    assert calls == ["dense"]  # once for both views, kept for backward (not recomputed)
    assert make().plan(h1) == ("dense", N)  # (half the free memory: far more than needed)
    assert "memory_budget=" in repr(loss)


@pytest.mark.parametrize("which", [0, 1], ids=["infonce", "progcl-mix"])
def test_row_blocks_as_large_as_the_budget_allows(monkeypatch, which):
    make, ref_fn = PATH_LOSSES[which], PATH_REFERENCES[which]
    h1, h2 = views()
    budget = dense_bytes(make())
    calls = record_paths(monkeypatch)
    loss = make(memory_budget=budget - 1)  # one byte short: blocks of N - 1 rows
    assert loss.plan(h1) == ("rows", N - 1)
    out = loss(h1, h2)
    forward = blocks_of("rows", (0, N - 1), (N - 1, N))
    assert calls == forward
    torch.testing.assert_close(out, ref_fn(h1, h2), rtol=1e-10, atol=1e-10)
    out.backward()
    assert calls == forward  # (each block's gradient taken in forward: none recomputed)
    calls.clear()
    loss = make(memory_budget=budget * 11 // N)  # blocks of 11 rows
    assert loss.plan(h1) == ("rows", 11)
    assert_matches(loss, ref_fn, h1, h2)
    assert calls == blocks_of("rows", (0, 11), (11, 22), (22, N))
    calls.clear()
    weights = torch.rand(2, N, dtype=h1.dtype)  # per-anchor losses: blocks under checkpoint
    loss.reduction = "none"
    torch.manual_seed(0)
    got = torch.autograd.grad((loss(h1, h2) * weights).sum(), (h1, h2))
    assert recomputed(calls, blocks_of("rows", (0, 11), (11, 22), (22, N)))
    torch.manual_seed(0)
    dense = make(memory_budget=budget, reduction="none")
    for a, b in zip(got, torch.autograd.grad((dense(h1, h2) * weights).sum(), (h1, h2))):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    calls.clear()
    with torch.no_grad():  # nothing to recompute: no checkpoint
        loss(h1, h2)
    assert calls == blocks_of("rows", (0, 11), (11, 22), (22, N))
    assert make(memory_budget=1).plan(h1) == ("rows", 1)  # (at least one row per block)


@pytest.mark.parametrize("which", [0, 1], ids=["infonce", "progcl-mix"])
def test_a_block_size_below_n_takes_row_blocks_and_above_the_dense_path(monkeypatch, which):
    make, ref_fn = PATH_LOSSES[which], PATH_REFERENCES[which]
    calls = record_paths(monkeypatch)
    h1, h2 = views()
    out = make(block_size=7)(h1, h2)  # (the dense path fits: an explicit size wins)
    forward = blocks_of("rows", (0, 7), (7, 14), (14, 21), (21, N))
    assert calls == forward
    torch.testing.assert_close(out, ref_fn(h1, h2), rtol=1e-10, atol=1e-10)
    out.backward()
    assert calls == forward
    calls.clear()
    for block_size in (N, 10**6):  # block_size >= N: dense, whatever the budget
        assert_matches(make(block_size=block_size, memory_budget=1), ref_fn, h1, h2)
    assert calls == ["dense", "dense"]


def test_the_budget_is_checked():
    for bad in (0, -1.0, float("nan"), "1GB"):
        with pytest.raises(ValueError, match="memory_budget"):
            InfoNCELoss(0.5, memory_budget=bad)


def test_anchors_take_row_blocks_of_those_rows(monkeypatch):
    calls = record_paths(monkeypatch)
    h1, h2 = views()
    loss = InfoNCELoss(0.5, reduction="none")
    full = loss(h1, h2)
    assert calls == ["dense"]
    calls.clear()
    part = loss.compute_loss(h1, h2, anchors=slice(5, 15))
    assert calls == blocks_of("rows", (5, 15))
    torch.testing.assert_close(part, full[:, 5:15], rtol=1e-12, atol=1e-12)
    calls.clear()
    loss.block_size = 4
    part = loss.compute_loss(h1, h2, anchors=slice(5, 15))
    assert calls == blocks_of("rows", (5, 9), (9, 13), (13, 15))
    torch.testing.assert_close(part, full[:, 5:15], rtol=1e-12, atol=1e-12)
    calls.clear()
    loss.block_size = None
    for every in (slice(0, N), slice(None)):  # all anchors: the dense path
        torch.testing.assert_close(loss.compute_loss(h1, h2, anchors=every), full)
    assert calls == ["dense", "dense"]


def test_sampled_negatives_take_sampled_blocks(monkeypatch):
    calls = record_paths(monkeypatch)
    h1, h2 = views()
    out = InfoNCELoss(0.5, num_negatives=9)(h1, h2)
    assert calls == blocks_of("sampled", (0, N))  # one block per view
    out.backward()
    assert calls == blocks_of("sampled", (0, N))  # (its gradient taken in forward)
    calls.clear()
    InfoNCELoss(0.5, num_negatives=9).compute_loss(h1, h2).sum().backward()
    assert recomputed(calls, blocks_of("sampled", (0, N)))  # (under checkpoint)
    calls.clear()
    InfoNCELoss(0.5, num_negatives=9, block_size=10)(h1, h2)
    InfoNCELoss(0.5, num_negatives=22, block_size=N)(h1, h2)  # (never dense: sampled)
    expected = blocks_of("sampled", (0, 10), (10, 20), (20, N)) + blocks_of("sampled", (0, N))
    assert calls == expected
    calls.clear()
    part = InfoNCELoss(0.5, num_negatives=9).compute_loss(h1, h2, anchors=slice(3, 8))
    assert part.shape == (2, 5) and calls == blocks_of("sampled", (3, 8))


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


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: ProGCLLoss(0.4, mixture=fitted_mixture(), **kw),
        lambda **kw: ProGCLLoss(0.4, mode="mix", num_mix=5, mixture=fitted_mixture(), **kw),
        lambda **kw: InfoNCELoss(0.4, **kw),
        lambda **kw: HardInfoNCELoss(0.4, 0.1, 1.0, **kw),  # two scales
    ],
)
@pytest.mark.parametrize(
    "options", [{}, {"block_size": 16}, {"num_negatives": 20, "block_size": 16}], ids=path_id
)
def test_graphs_alive_at_once_and_a_second_backward_equal_separate_computations(make, options):
    # Two graphs of one loss alive at once, and a second backward of a retained graph
    # (recomputing the row blocks again, ProGCL-mix's random pairing included): the
    # gradients of separate computations with the same random draws.
    loss = make(**options)
    a, b = views(n=60, seed=1), views(n=60, seed=2)
    torch.manual_seed(0)
    total = loss(*a) + 2 * loss(*b)
    grads = torch.autograd.grad(total, (*a, *b), retain_graph=True)
    again = torch.autograd.grad(total, (*a, *b))
    fresh = make(**options)
    torch.manual_seed(0)
    first = fresh(*a)
    expected = torch.autograd.grad(first, a) + torch.autograd.grad(2 * fresh(*b), b)
    for x, y, z in zip(grads, again, expected):
        torch.testing.assert_close(x, z, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(y, z, rtol=1e-12, atol=1e-12)


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
        lambda: ProGCLLoss(0.5, mode="weight", block_size=3),
        lambda: ProGCLLoss(0.5, mode="mix", num_mix=4, block_size=3),
        lambda: HardInfoNCELoss(0.5, 0.1, 1.0, num_negatives=5, block_size=3),
        lambda: ProGCLLoss(0.5, mode="mix", num_mix=4, num_negatives=5),
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


@pytest.mark.parametrize("options", [{}, {"block_size": 7}, {"num_negatives": 9}], ids=path_id)
@pytest.mark.parametrize("tau", [0.01, 0.005])
def test_small_temperature_is_finite(tau, options):
    h1, h2 = views(dtype=torch.float32)
    for loss in (InfoNCELoss(tau, **options), HardInfoNCELoss(tau, 0.1, 2.0, **options)):
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


@pytest.mark.slow
@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: InfoNCELoss(0.5, **kw),
        lambda **kw: InfoNCELoss(0.5, num_negatives=7, **kw),
        lambda **kw: InfoNCELoss(0.5, reduction="none", **kw),
        lambda **kw: ProGCLLoss(0.5, mixture=fitted_mixture(), **kw),
        lambda **kw: ProGCLLoss(0.5, mode="mix", num_mix=3, mixture=fitted_mixture(), **kw),
    ],
    ids=["infonce", "sampled", "per-anchor", "progcl-weight", "progcl-mix"],
)
def test_compiled_blocks_equal_the_eager_ones(make):
    # (inductor on the CPU: each block's passes fused, the same values and gradients)
    h1, h2 = views(n=30, d=4)
    got = {}
    for compiled in (False, True):
        torch._dynamo.reset()
        counters.clear()
        loss = make(block_size=8, compile_blocks=compiled)
        out = seeded(loss, h1, h2, 3).sum()
        got[compiled] = (out, *torch.autograd.grad(out, (h1, h2)))
        assert (counters["stats"]["unique_graphs"] > 0) == compiled  # (the blocks compiled)
    torch._dynamo.reset()
    for a, b in zip(got[True], got[False]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_compile_blocks_is_a_bool_shown_in_the_repr():
    assert "compile_blocks=True" in repr(InfoNCELoss(compile_blocks=True))
    assert "compile_blocks" not in repr(InfoNCELoss())
    for bad in (1, "yes", None):
        with pytest.raises(ValueError, match="compile_blocks"):
            InfoNCELoss(compile_blocks=bad)


def test_repr():
    assert repr(InfoNCELoss(0.2)) == "InfoNCELoss(tau=0.2)"
    assert repr(HardInfoNCELoss(0.5, 0.1, 1.0, block_size=8)) == (
        "HardInfoNCELoss(tau=0.5, tau_plus=0.1, beta=1.0, block_size=8)"
    )
    assert "mode='mix'" in repr(ProGCLLoss(mode="mix")) and "BetaMixture" in repr(ProGCLLoss())
    assert "mix_eps" not in repr(ProGCLLoss(mode="mix"))  # the default is not spelled out
    assert "num_mix=1000, mix_eps=1e-06" in repr(ProGCLLoss(mode="mix", mix_eps=1e-6))


# --- numerics at the edges of float32 ---------------------------------------------------


@pytest.mark.parametrize("options", [{}, {"block_size": 5}, {"num_negatives": 11}], ids=path_id)
def test_progcl_weight_where_the_posterior_underflows_keeps_its_exact_weights(options):
    # The true-negative component has no mass near s' = 1: every b underflows to 0 in
    # float32's (and float64's) linear range. In log space the weights b / mean b stay
    # exact: float32 views give float64's loss and gradients.
    h1, h2 = views(n=12, dtype=torch.float64)
    h1, h2 = h1.detach() * 1e-3 + 1, h2.detach() * 1e-3 + 1  # cosines ~1: s' ~ 1
    m = fitted_mixture(alpha=(2.0, 200.0), beta=(400.0, 2.0), weight=(1e-6, 1 - 1e-6))
    assert float(m.hardness_(torch.tensor([(0.99 + 1) / 2], dtype=torch.float64))) == 0.0
    loss = ProGCLLoss(0.5, mixture=m, **options)
    out = {}
    for dtype in (torch.float32, torch.float64):
        a, b = (h.to(dtype).requires_grad_() for h in (h1, h2))
        value = seeded(loss, a, b)
        out[dtype] = (value, *torch.autograd.grad(value, (a, b)))
    for got, want in zip(out[torch.float32], out[torch.float64]):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "options", [{}, {"block_size": 7}, {"num_negatives": 19, "block_size": 7}], ids=path_id
)
def test_progcl_weight_with_underflowing_weighted_terms_stays_finite(monkeypatch, options):
    # Orthogonal views at τ = 0.03: every negative has e^{logit} = e^{-33}; with b = 1e-31
    # (whose sums are still normal floats) each b·e^{logit} underflows to 0 in float32.
    # The weights are uniform, so the loss is GRACE's; log-sum-exp must recover it.
    h = torch.eye(20).requires_grad_()
    loss = ProGCLLoss(0.03, mixture=fitted_mixture().float(), **options)
    monkeypatch.setattr(BetaMixture, "log_hardness_", lambda self, s, *a: torch.full_like(s, -71.4))
    out = seeded(loss, h, h)
    torch.testing.assert_close(out, seeded(InfoNCELoss(0.03, **options), h, h))
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
    # in place: the similarities given are overwritten with their hardness
    given = s.clone()
    assert m.hardness_(given, floor) is given and torch.equal(given, b)


@pytest.mark.parametrize("block_size", [None, 5])
def test_progcl_weight_with_tiny_hardness_stays_exact(block_size):
    # Cosines ~0.98 under a mixture that calls them false negatives: b ~ 1e-24 .. 1e-28,
    # normal float32 numbers far below any linear-space rescaling threshold. The weights
    # are scale-free, so the float32 loss must still match the float64 reference.
    h1, h2 = views(n=12, dtype=torch.float64, grad=False)
    h1, h2 = h1 * 0.1 + 1, h2 * 0.1 + 1
    m = fitted_mixture(alpha=(2.0, 14.0), beta=(14.0, 2.0), weight=(0.5, 0.5))
    b = m.float().hardness_((torch.tensor([0.97, 0.99]) + 1) / 2)
    assert float(b.min()) > 0 and float(b.max()) < 1e-20
    loss = ProGCLLoss(0.5, mixture=m.float(), block_size=block_size)
    w = engine_weights(loss, h1.float(), h2.float(), block_size)
    off_diagonal = ~torch.eye(12, dtype=torch.bool)
    for view, (a, c) in enumerate(((h1, h2), (h2, h1))):
        expected = ref.progcl_weights(a, c, params(m))
        off = w[view][off_diagonal].view(12, 11)
        torch.testing.assert_close(off.double(), expected, rtol=2e-3, atol=1e-9)
    expected = ref.progcl_weight(h1, h2, 0.5, params(m))
    for options in ({"block_size": block_size}, {"num_negatives": 11, "block_size": block_size}):
        value = ProGCLLoss(0.5, mixture=m.float(), **options)(h1.float(), h2.float())
        torch.testing.assert_close(value.double(), expected, rtol=1e-5, atol=0)


@pytest.mark.parametrize(
    "options", [{}, {"block_size": 5}, {"num_negatives": 15, "block_size": 6}], ids=path_id
)
def test_an_anchor_whose_hardness_underflows_gets_uniform_weights(options):
    # Anchor u_0 is (almost) every v_k, whose cosines ~1 the mixture calls false negatives:
    # all its b underflow in float32 (weights uniform, GRACE's row), while every other
    # anchor's weights are normal. The loss, its gradients included, still equals the
    # float64 reference (whose weights for u_0, b of equal cosines, are uniform too).
    g = torch.Generator().manual_seed(0)
    n, d = 16, 6
    e1 = torch.zeros(d, dtype=torch.float64)
    e1[0] = 1.0
    h2 = e1 + 1e-3 * torch.randn(n, d, generator=g, dtype=torch.float64)
    h1 = torch.nn.functional.normalize(torch.randn(n, d, generator=g, dtype=torch.float64), dim=1)
    h1[0] = e1
    m = fitted_mixture(alpha=(5.0, 400.0), beta=(30.0, 1.01), weight=(0.9, 0.1))
    loss = ProGCLLoss(0.5, mixture=m.float(), **options)
    for block_size in (None, 5):  # the rows that fell back: u_0's, exactly
        w = engine_weights(loss, h1.float(), h2.float(), block_size)
        off = w[~torch.eye(n, dtype=torch.bool).expand(2, n, n)].view(2, n, n - 1)
        uniform = (off == 1).all(dim=2)
        assert uniform.nonzero().tolist() == [[0, 0]]
    a, b = h1.float().requires_grad_(), h2.float().requires_grad_()
    value = loss(a, b)
    grads = torch.autograd.grad(value, (a, b))
    a64, b64 = h1.clone().requires_grad_(), h2.clone().requires_grad_()
    expected = ref.progcl_weight(a64, b64, 0.5, params(m))
    torch.testing.assert_close(value.double(), expected, rtol=1e-5, atol=0)
    for x, y in zip(grads, torch.autograd.grad(expected, (a64, b64))):
        torch.testing.assert_close(x.double(), y, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize(
    "options", [{}, {"block_size": 5}, {"num_negatives": 15, "block_size": 6}], ids=path_id
)
def test_progcl_mix_rows_of_vanished_b_mix_to_zero(monkeypatch, options):
    # Anchors u_0, u_1 are (almost) e_1, as is every v_k: their b are made 0 at cosines ~1,
    # and their mixed negatives are θ_mix = 0 / ε = 0 whichever they select, as in the
    # formula (no fallback). Every other row keeps its b (v_i's only lose u_0, u_1); π is
    # the identity, and the sampled path's columns are in node order.
    n, d, k = 16, 6, 4
    nodes_in_order(monkeypatch, n, k)
    g = torch.Generator().manual_seed(0)
    e1 = torch.zeros(d, dtype=torch.float64)
    e1[0] = 1.0
    h2 = e1 + 1e-3 * torch.randn(n, d, generator=g, dtype=torch.float64)
    h1 = torch.randn(n, d, generator=g, dtype=torch.float64)
    h1[:2] = e1 + 1e-3 * torch.randn(2, d, generator=g, dtype=torch.float64)
    log_hardness, ref_hardness = BetaMixture.log_hardness_, ref.hardness

    def cut(self, s, floor=0.0):
        vanished = s > 0.999  # (log_hardness_ overwrites s)
        return log_hardness(self, s, floor).masked_fill_(vanished, float("-inf"))

    def ref_cut(theta, *args, **kwargs):
        b = ref_hardness(theta, *args, **kwargs).clone()
        b[(theta + 1) / 2 > 0.999] = 0.0
        return b

    monkeypatch.setattr(BetaMixture, "log_hardness_", cut)
    monkeypatch.setattr(ref, "hardness", ref_cut)
    u, v = (torch.nn.functional.normalize(h, dim=1) for h in (h1, h2))
    assert bool(((u @ v.T)[:2] > 0.998).all()) and bool(((u @ v.T)[2:] < 0.99).all())
    m = fitted_mixture()
    loss = ProGCLLoss(0.4, "mix", num_mix=k, mixture=m, **options)
    h1, h2 = h1.requires_grad_(), h2.requires_grad_()
    assert_matches(loss, lambda a, b: ref.progcl_mix(a, b, 0.4, params(m), k, "self"), h1, h2)


# --- reductions and anchors ---------------------------------------------------------------


REDUCED = [
    lambda **kw: InfoNCELoss(0.4, **kw),
    lambda **kw: DebiasedInfoNCELoss(0.4, 0.1, **kw),
    lambda **kw: HardInfoNCELoss(0.4, 0.1, 1.0, **kw),
    lambda **kw: ProGCLLoss(0.4, mixture=fitted_mixture(), **kw),
    lambda **kw: ProGCLLoss(0.4, mode="mix", num_mix=3, mixture=fitted_mixture(), **kw),
]


@pytest.mark.parametrize("make", REDUCED)
@pytest.mark.parametrize("options", [{}, {"block_size": 6}, {"num_negatives": 9}], ids=path_id)
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


@pytest.mark.parametrize("make", REDUCED)
@pytest.mark.parametrize("options", [{"block_size": 6}, {"num_negatives": 9}], ids=path_id)
@pytest.mark.parametrize("which", [0, 1])
def test_reduced_blocks_give_the_gradient_of_the_one_view_that_wants_it(make, options, which):
    # A reduced loss's blocks take their gradients with respect to their parts (anchors and
    # their view's candidates, positives and the other view's candidates) and add them
    # where they lie: a view without a gradient gets none, the other the gradient of the
    # per-anchor losses (recomputed under checkpoint, the same random draws).
    h = views()
    torch.manual_seed(5)
    both = torch.autograd.grad(make(reduction="none", **options)(*h).mean(), h)
    one = [t.detach().requires_grad_(i == which) for i, t in enumerate(h)]
    torch.manual_seed(5)
    (grad,) = torch.autograd.grad(make(**options)(*one), one[which])
    torch.testing.assert_close(grad, both[which], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("options", PATHS, ids=path_id)
def test_per_anchor_losses_match_the_reference_anchor_by_anchor(options):
    h1, h2 = views()
    per_anchor = InfoNCELoss(0.5, reduction="none", **options)(h1, h2)
    for view, (a, b) in enumerate(((h1, h2), (h2, h1))):  # anchor i of view `view` alone
        for i in (0, 7, 22):
            expected = ref.grace_anchor(a, b, 0.5, i)
            torch.testing.assert_close(per_anchor[view, i], expected, rtol=1e-12, atol=1e-12)


ANCHORED = REDUCED[:4] + [
    lambda **kw: ProGCLLoss(0.4, mode="mix", num_mix=1, mixture=fitted_mixture(), **kw),
]


@pytest.mark.parametrize("make", ANCHORED)
@pytest.mark.parametrize("options", PATHS, ids=path_id)
@pytest.mark.parametrize("anchors", [slice(4, 17), slice(0, 1), slice(22, 23), slice(0, 23)])
def test_anchors_give_their_columns_of_the_per_anchor_losses(make, options, anchors):
    # compute_loss(anchors=rows): those rows' losses against all N nodes, values and
    # gradients, on every path (the sampled path: all N - 1 negatives, so exact).
    h1, h2 = views()
    loss = make(reduction="none", **options)
    full = loss.compute_loss(h1, h2)
    part = loss.compute_loss(h1, h2, anchors=anchors)
    torch.testing.assert_close(part, full[:, anchors], rtol=1e-12, atol=1e-12)
    weights = torch.rand(part.shape, generator=torch.Generator().manual_seed(1), dtype=part.dtype)
    got = torch.autograd.grad(part, (h1, h2), weights)
    want = torch.autograd.grad(full[:, anchors], (h1, h2), weights)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_bad_reduction_raises():
    with pytest.raises(ValueError, match="`reduction` must be one of"):
        InfoNCELoss(reduction="avg")
