"""ProGCLLoss's fit schedules: 'online', 'floored' and 'frozen' (the reference code's);
their names; the posterior floor, the schedule's one setting."""

from __future__ import annotations

import copy
import warnings

import pytest
import reference as ref
import torch
from helpers import (
    PATHS,
    SAMPLED,
    assert_matches,
    class_views,
    engine_weights,
    fitted_mixture,
    params,
    path_id,
    views,
)

from pyg_progcl.losses import FlooredFit, FrozenFit, InfoNCELoss, OnlineFit, ProGCLLoss


def fit_views(seed=5, n=23, d=5):
    """The views the frozen loss is fitted on: other embeddings of the same nodes."""
    return tuple(h.detach() for h in views(n=n, d=d, seed=seed))


def frozen_loss(f1, f2, mixture=None, shared_weights=False, **kwargs):
    schedule = FrozenFit(shared_weights=shared_weights)
    loss = ProGCLLoss(0.4, mixture=mixture or fitted_mixture(), schedule=schedule, **kwargs)
    return loss.fit(f1, f2)


@pytest.mark.parametrize("options", PATHS, ids=path_id)
def test_frozen_weights_match_reference_on_later_views(options):
    f1, f2 = fit_views()
    loss = frozen_loss(f1, f2, **options)
    h1, h2 = views()  # the views of a later step: b still comes from f1, f2
    m = loss.mixture
    assert_matches(
        loss, lambda a, b: ref.progcl_weight(a, b, 0.4, params(m), fit_views=(f1, f2)), h1, h2
    )
    current = ref.progcl_weight(h1, h2, 0.4, params(m))
    assert (
        abs(float(loss(h1, h2).detach() - current.detach())) > 1e-3
    )  # and that differs from online weights


@pytest.mark.parametrize("options", PATHS, ids=path_id)
def test_frozen_weights_match_reference_at_a_tiny_temperature(options):
    f1, f2 = fit_views()
    h1, h2 = views()
    tiny = 0.02  # exponentials underflow float32: the engine's log-sum-exp
    m = fitted_mixture()
    loss = ProGCLLoss(tiny, mixture=m, schedule="frozen", **options).fit(f1, f2)
    assert_matches(
        loss, lambda a, b: ref.progcl_weight(a, b, tiny, params(m), fit_views=(f1, f2)), h1, h2
    )


@pytest.mark.parametrize("options", [{}, {"block_size": 4}, *SAMPLED], ids=path_id)
def test_frozen_mix_takes_the_hardest_negatives_of_the_fit(options):
    f1, f2 = fit_views()
    loss = frozen_loss(f1, f2, mode="mix", num_mix=1, **options)
    h1, h2 = views()
    m = loss.mixture
    assert_matches(
        loss, lambda a, b: ref.progcl_mix_one(a, b, 0.4, params(m), fit_views=(f1, f2)), h1, h2
    )


def _shared_reference(m, fit, tau=0.4, mix=False):
    fn = ref.progcl_mix_one if mix else ref.progcl_weight
    return lambda a, b: fn(a, b, tau, params(m), fit_views=fit, shared=True)


@pytest.mark.parametrize("options", PATHS, ids=path_id)
def test_shared_weights_match_reference(options):
    """The reference code weights anchor v_i's negatives by row i of the first direction's
    matrix, b(θ(u_i, v_k)), not by b(θ(v_i, u_k)); both modes, on every path."""
    f1, f2 = fit_views()
    h1, h2 = views()
    loss = frozen_loss(f1, f2, shared_weights=True, **options)
    m = loss.mixture
    assert_matches(loss, _shared_reference(m, (f1, f2)), h1, h2)
    own = ref.progcl_weight(h1, h2, 0.4, params(m), fit_views=(f1, f2))
    assert abs(float(loss(h1, h2).detach() - own.detach())) > 1e-4  # it is another loss
    mix = frozen_loss(f1, f2, mode="mix", num_mix=1, shared_weights=True, **options)
    assert_matches(mix, _shared_reference(m, (f1, f2), mix=True), h1, h2)


def test_shared_weights_match_reference_on_the_log_space_and_sampled_paths():
    f1, f2 = fit_views()
    h1, h2 = views()
    m = fitted_mixture()
    tiny = ProGCLLoss.reference_code(0.02, mixture=m, block_size=7)
    assert_matches(tiny.fit(f1, f2), _shared_reference(m, (f1, f2), tau=0.02), h1, h2)
    dense_tiny = ProGCLLoss.reference_code(0.02, mixture=m)
    assert_matches(dense_tiny.fit(f1, f2), _shared_reference(m, (f1, f2), tau=0.02), h1, h2)
    sampled = frozen_loss(f1, f2, mixture=m, num_negatives=22, block_size=5, shared_weights=True)
    assert_matches(sampled, _shared_reference(m, (f1, f2)), h1, h2)


@pytest.mark.parametrize("options", PATHS + [{"num_negatives": 9}], ids=path_id)
def test_shared_weights_equal_own_weights_when_the_fit_matrix_is_symmetric(options):
    f1, _ = fit_views()  # fitted on one view twice: θ(u_i, v_k) = θ(v_i, u_k)
    h1, h2 = views()
    own = frozen_loss(f1, f1, **options)
    shared = frozen_loss(f1, f1, shared_weights=True, **options)
    torch.manual_seed(0)  # (the same sampled negatives)
    expected = own(h1, h2)
    torch.manual_seed(0)
    torch.testing.assert_close(shared(h1, h2), expected, rtol=1e-12, atol=1e-12)


def test_reference_code_options_live_in_one_place():
    with pytest.raises(TypeError, match="shared_weights"):
        ProGCLLoss(shared_weights=True)  # not an everyday option
    with pytest.raises(ValueError, match="`shared_weights` must be True or False"):
        FrozenFit(shared_weights="yes")
    with pytest.raises(TypeError, match="cache_mib"):  # nothing is held between steps
        FrozenFit(cache_mib=512)
    loss = ProGCLLoss.reference_code(0.4)
    assert loss.mixture.min_beta_high == 1.01
    assert "shared_weights=True" in repr(loss) and not loss.fitted
    h1, h2 = views()
    torch.testing.assert_close(loss(h1, h2), InfoNCELoss(0.4)(h1, h2), rtol=0, atol=0)  # GRACE's
    # until the fit; then frozen at the fit's views, both directions by the first's matrix
    (f1, f2), (g1, g2) = fit_views(), fit_views(seed=6)
    loss.double().mixture.load_state_dict(fitted_mixture().state_dict())
    loss.fit(f1, f2).fit(g1, g2)  # a later fit changes nothing
    assert_matches(loss, _shared_reference(fitted_mixture(), (f1, f2)), h1, h2)


@pytest.mark.parametrize("options", PATHS, ids=path_id)
def test_frozen_weights_stay_those_of_the_fit_at_every_step(options):
    f1, f2 = fit_views()
    loss = frozen_loss(f1, f2, **options)
    m = loss.mixture

    def expected(fit):
        return lambda a, b: ref.progcl_weight(a, b, 0.4, params(m), fit_views=fit)

    for seed in range(3):  # every step: the weights of the fit's views
        assert_matches(loss, expected((f1, f2)), *views(seed=seed))
    g1, g2 = fit_views(seed=7)
    loss.reset_parameters()
    h1, h2 = views()
    torch.testing.assert_close(loss(h1, h2), InfoNCELoss(0.4)(h1, h2), rtol=0, atol=0)
    loss.fit(g1, g2)  # a new fit: new weights, none of the old ones
    assert_matches(loss, expected((g1, g2)), *views())
    loss.load_state_dict(frozen_loss(f1, f2, mixture=m).state_dict())
    assert_matches(loss, expected((f1, f2)), *views())


def test_frozen_weights_follow_the_views_to_another_dtype():
    f1, f2 = fit_views()
    loss = frozen_loss(f1, f2, block_size=7)
    m = params(fitted_mixture())
    h1, h2 = views()
    loss(h1, h2)
    loss.float()  # the frozen views and the mixture in float32: float32 weights
    assert loss.schedule.frozen_u.dtype == torch.float32
    value = loss(h1.detach().float(), h2.detach().float())
    expected = ref.progcl_weight(h1, h2, 0.4, m, fit_views=(f1, f2))
    assert value.dtype == torch.float32
    torch.testing.assert_close(value.double(), expected.detach(), rtol=1e-5, atol=0)


@pytest.mark.parametrize(
    "options", [{}, {"block_size": 3}, {"num_negatives": 4, "block_size": 3}], ids=path_id
)
def test_frozen_gradcheck(options):
    f1, f2 = fit_views(n=7, d=3)
    loss = frozen_loss(f1, f2, **options)

    def fn(a, b):
        torch.manual_seed(3)  # (the same sampled negatives at every evaluation)
        return loss(a, b)

    assert torch.autograd.gradcheck(fn, views(n=7, d=3, seed=2))


def test_frozen_equals_online_at_the_fit():
    h1, h2 = views()
    frozen = frozen_loss(h1.detach(), h2.detach())
    online = ProGCLLoss(0.4, mixture=fitted_mixture())
    assert_matches(frozen, online, h1, h2)


def test_schedules_decide_what_fit_changes():
    (f1, f2), (g1, g2) = fit_views(n=60), fit_views(seed=6, n=60)
    online, floored, frozen = (ProGCLLoss(0.5, schedule=s) for s in ("online", "floored", "frozen"))
    for loss in (online, floored, frozen):
        gen = torch.Generator().manual_seed(0)  # the same samples for each
        loss.fit(f1, f2, gen).fit(g1, g2, gen).fit(g1, g2, gen)
    assert [int(x.mixture.num_fits) for x in (online, floored, frozen)] == [3, 3, 1]
    torch.testing.assert_close(floored.mixture.alpha, online.mixture.alpha, rtol=0, atol=0)
    torch.testing.assert_close(frozen.schedule.frozen_u, torch.nn.functional.normalize(f1, dim=1))
    torch.testing.assert_close(frozen.schedule.frozen_v, torch.nn.functional.normalize(f2, dim=1))
    assert "FrozenFit()" in repr(frozen) and "OnlineFit()" in repr(online)


def test_frozen_keeps_a_mixture_passed_in_fitted():
    f1, f2 = fit_views()
    m = fitted_mixture()
    loss = ProGCLLoss(0.4, mixture=m, schedule="frozen")
    h1, h2 = views()
    assert not loss.fitted  # GRACE's loss until fit() stores the views
    torch.testing.assert_close(loss(h1, h2), InfoNCELoss(0.4)(h1, h2), rtol=0, atol=0)
    loss.fit(f1, f2)
    assert loss.fitted and int(m.num_fits) == 1 and float(m.alpha[0]) == 2.0


def test_frozen_state_dict_round_trip_and_reset():
    f1, f2 = fit_views(n=40)
    h1, h2 = views(n=40)
    loss = ProGCLLoss(0.5, schedule="frozen", num_samples=3000).fit(f1, f2)
    state = loss.state_dict()
    assert state["schedule.frozen_u"].shape == (40, 5)
    assert state["schedule.frozen_v"].shape == (40, 5)
    fresh = ProGCLLoss(0.5, schedule="frozen", num_samples=3000)
    fresh.load_state_dict(state)
    assert fresh.fitted
    torch.testing.assert_close(fresh(h1, h2), loss(h1, h2), rtol=0, atol=0)
    fresh.load_state_dict(ProGCLLoss(0.5).state_dict())  # an unfitted state: no views
    assert not fresh.fitted and fresh.schedule.frozen_u is None
    with pytest.raises(ValueError, match="this loss.s schedule is .floored."):  # not into another
        ProGCLLoss(0.5).load_state_dict(state)
    loss.reset_parameters()
    assert not loss.fitted and "schedule.frozen_u" not in loss.state_dict()
    torch.testing.assert_close(loss(h1, h2), InfoNCELoss(0.5)(h1, h2), rtol=0, atol=0)


def test_frozen_weights_need_the_same_nodes():
    f1, f2 = fit_views()
    loss = frozen_loss(f1, f2)
    h1, h2 = views(n=30)
    with pytest.raises(ValueError, match=r"`h1` has 30 nodes .* fitted on 23"):
        loss(h1, h2)
    with pytest.raises(ValueError, match=r"`h1` has 30 nodes"):
        loss(h1, h2)
    off_diagonal = ~torch.eye(23, dtype=torch.bool)
    for block_size in (None, 7):  # the fit's weights, whatever the views
        w = engine_weights(loss, *views(), block_size=block_size)
        for view, (a, b) in enumerate(((f1, f2), (f2, f1))):
            off = w[view][off_diagonal].view(23, 22)
            torch.testing.assert_close(off, ref.progcl_weights(a, b, params(loss.mixture)))


# --- the posterior floor and schedule='floored' ---------------------------------------


@pytest.mark.parametrize(
    "tau,options",
    [(0.4, o) for o in PATHS] + [(0.02, {}), (0.02, {"block_size": 7}), (0.02, SAMPLED[1])],
    ids=lambda x: path_id(x) if isinstance(x, dict) else str(x),
)
def test_posterior_floor_matches_reference(tau, options):
    h1, h2 = views()  # tau 0.02: exponentials underflow, the engine's log-sum-exp
    m = fitted_mixture()
    loss = ProGCLLoss(tau, mixture=m, schedule=OnlineFit(floor=0.5), **options)
    assert_matches(loss, lambda a, b: ref.progcl_weight(a, b, tau, params(m), floor=0.5), h1, h2)
    unfloored = ref.progcl_weight(h1, h2, tau, params(m))
    assert abs(float((loss(h1, h2) - unfloored).detach())) > 1e-4  # the floor binds here


def _fits(loss, views, epochs):
    for _ in range(epochs):
        loss.fit(*views, generator=torch.Generator().manual_seed(1))
    return loss


def _values_and_grads(loss, seed=1):
    h1, h2 = (h.requires_grad_() for h in class_views(spread=0.6, seed=seed))
    out = loss(h1, h2)
    return (out, *torch.autograd.grad(out, (h1, h2)))


def test_floored_equals_online_while_the_refits_are_healthy():
    healthy = class_views(spread=0.6)  # classmates similar, not collapsed: healthy fits
    online, floored = (
        ProGCLLoss(0.5, num_samples=20_000, schedule=s) for s in ("online", "floored")
    )
    _fits(online, healthy, 5), _fits(floored, healthy, 5)
    assert floored.mixture.problems_ == [] and not bool(floored.schedule.degenerated)
    assert floored.schedule.posterior_floor == 0.0
    for a, b in zip(_values_and_grads(online), _values_and_grads(floored)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_floored_floors_the_posterior_from_the_first_degenerate_refit_on():
    loss = ProGCLLoss(0.5, num_samples=20_000, schedule="floored")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # handled by the floor: recorded, not warned
        _fits(loss, class_views(spread=1e-3), 3)  # near-duplicate classmates: β < 1
    assert loss.degenerate_fits == {"spike": 3}
    assert bool(loss.schedule.degenerated) and loss.schedule.posterior_floor == 0.5
    floor = ProGCLLoss(0.5, mixture=copy.deepcopy(loss.mixture), schedule=OnlineFit(floor=0.5))
    online = ProGCLLoss(0.5, mixture=copy.deepcopy(loss.mixture))
    got, floored_, unfloored = (_values_and_grads(x) for x in (loss, floor, online))
    for a, b in zip(got, floored_):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert float(got[0].detach()) != float(unfloored[0].detach())
    _fits(loss, class_views(spread=0.6), 10)  # healthy again: the floor stays (sticky)
    assert loss.mixture.problems_ == [] and loss.schedule.posterior_floor == 0.5
    state = loss.state_dict()
    assert bool(state["schedule.degenerated"])
    resumed = ProGCLLoss(0.5, schedule="floored")
    resumed.load_state_dict(state)
    assert resumed.schedule.posterior_floor == 0.5
    del state["schedule.degenerated"]  # a state without the schedule's buffer is refused
    with pytest.raises(RuntimeError, match=r"Missing key.*schedule\.degenerated"):
        ProGCLLoss(0.5, schedule="floored").load_state_dict(state)
    loss.reset_parameters()
    assert not loss.fitted and loss.schedule.posterior_floor == 0.0


#: Loss, ``Σ ∂/∂h1``, ``Σ |∂/∂h2|`` and ``∂/∂h1[3, 1]`` of :func:`_float64_case` under
#: schedules with and without a floor in effect (``degenerated``: as after a degenerate
#: refit, which engages 'floored''s), pinned to float64 precision.
FLOOR_VALUES = [
    ("weight", OnlineFit(floor=0.5), False,
     [2.42475317518999, 0.10460700732708712, 0.9582557498760673, -0.0038804365681591193]),
    ("weight", FlooredFit(), True,
     [2.42475317518999, 0.10460700732708712, 0.9582557498760673, -0.0038804365681591193]),
    ("weight", FlooredFit(floor=0.7), True,
     [2.5299203807605353, 0.10344856960186075, 0.9614177364062558, -0.005158234067219084]),
    ("weight", OnlineFit(floor=0.3), False,
     [2.2694596146022716, 0.10683898553042595, 0.9522084254655604, -0.0011707296003284511]),
    ("mix", FlooredFit(), True,
     [2.447606673281429, 0.0937187769525691, 0.9683388892341084, -0.003107370209901932]),
    ("mix", OnlineFit(floor=0.7), False,
     [2.5494913195111497, 0.09287921737964105, 0.9846865857692184, -0.005411436811285359]),
    ("mix", FrozenFit(floor=0.5), False,
     [2.4039501992346475, 0.10570286563098294, 0.9598355188077845, -0.0038486564862606877]),
]  # fmt: skip


def _float64_case(mode, schedule, degenerated):
    """The loss of :data:`FLOOR_VALUES` on ``views()`` (a fitted float64 mixture; 'frozen'
    fitted on other views; ``degenerated``: as after a degenerate refit)."""
    loss = ProGCLLoss(0.4, mode=mode, num_mix=5, mixture=fitted_mixture(), schedule=schedule)
    if schedule.name == "frozen":
        loss.fit(*fit_views())
    loss.schedule.degenerated.fill_(degenerated)
    h1, h2 = views()
    torch.manual_seed(0)  # (ProGCL-mix's pairing)
    out = loss(h1, h2)
    return (out, *torch.autograd.grad(out, (h1, h2)))


@pytest.mark.parametrize("mode,schedule,degenerated,expected", FLOOR_VALUES)
def test_floored_values_are_pinned(mode, schedule, degenerated, expected):
    out, g1, g2 = _float64_case(mode, copy.deepcopy(schedule), degenerated)
    got = [float(out.detach()), float(g1.sum()), float(g2.abs().sum()), float(g1[3, 1])]
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_a_frozen_state_with_edited_views_is_refused_on_loading():
    """Before: views of another shape gave an IndexError from inside the loss, NaN views a
    NaN loss, and a frozen state loaded into another schedule torch's multi-line list of
    unexpected keys."""
    f1, f2 = fit_views()
    state = frozen_loss(f1, f2).state_dict()
    u, v = "schedule.frozen_u", "schedule.frozen_v"
    edits = {
        "shape": ({v: state[v][:-1]}, r"two \[N, d\] tensors of one shape .*\[23, 5\].*\[22, 5\]"),
        "1-D": ({u: state[u][0], v: state[v][0]}, r"two \[N, d\] tensors of one shape"),
        "nan": ({u: state[u].clone().fill_(float("nan"))}, "'frozen_u' must hold finite"),
        "integer": ({v: state[v].long()}, "'frozen_v' must hold finite floating-point"),
    }
    for edit, message in edits.values():
        loss = ProGCLLoss(0.4, mixture=fitted_mixture(), schedule="frozen")
        with pytest.raises(ValueError, match=message):
            loss.load_state_dict({**state, **edit})
    missing = {k: t for k, t in state.items() if k != v}
    with pytest.raises(ValueError, match="lacks its view 'frozen_v'"):
        ProGCLLoss(0.4, schedule="frozen").load_state_dict(missing)
    for other in ("online", "floored"):
        with pytest.raises(ValueError) as info:
            ProGCLLoss(0.4, schedule=other).load_state_dict(state)
        message = str(info.value)
        assert "\n" not in message and f"this loss's schedule is {other!r}" in message, message
    loss = ProGCLLoss(0.4, schedule="frozen")  # the state as saved loads
    loss.load_state_dict(state)
    assert torch.equal(loss.schedule.frozen_u, state[u])
