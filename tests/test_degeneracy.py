"""MixtureDegeneracyWarning: a fit that no longer describes two groups of negatives warns,
a healthy one never does, and the trainer reports it once and records every epoch."""

import warnings

import pytest
import torch
from helpers import class_views, sample_mixture

from pyg_progcl import MixtureDegeneracyWarning, ProGCLLoss
from pyg_progcl.mixture import BetaMixture


def refits(loss, views, epochs=20):
    for _ in range(epochs):
        loss.fit(*views, generator=torch.Generator().manual_seed(1))
    return loss


def test_near_duplicate_classes_warn_of_a_spike_at_cosine_one():
    views = class_views(spread=1e-3)  # every classmate is a near-duplicate: cos ~ 1
    with pytest.warns(MixtureDegeneracyWarning, match="spike at cosine 1") as caught:
        loss = refits(ProGCLLoss(0.5, num_samples=20_000), views)
    fn = 1 - loss.mixture.true_negative_index
    assert float(loss.mixture.beta[fn]) < 1 and "beta < 1" in str(caught[0].message)
    assert caught[0].filename == __file__  # points at the caller's line


def test_well_separated_classes_do_not_warn():
    views = class_views(spread=0.6)  # classmates similar (cos ~ 0.7), not collapsed
    with warnings.catch_warnings():
        warnings.simplefilter("error", MixtureDegeneracyWarning)
        loss = refits(ProGCLLoss(0.5, num_samples=20_000), views)
    assert loss.mixture.degeneracy() == [] and loss.mixture.problems_ == []
    assert bool((loss.mixture.alpha > 1).all() and (loss.mixture.beta > 1).all())


def test_a_healthy_converged_fit_never_warns():
    x = sample_mixture(50_000, [(2, 8), (9, 3)], [0.8, 0.2])
    with warnings.catch_warnings():
        warnings.simplefilter("error", MixtureDegeneracyWarning)
        m = BetaMixture().fit(x)
        m.fit(sample_mixture(50_000, [(2.2, 8), (9, 2.8)], [0.78, 0.22], seed=2), max_iter=10)


def test_em_that_does_not_converge_within_its_own_budget_warns():
    x = sample_mixture(50_000, [(2, 8), (9, 3)], [0.8, 0.2])
    with pytest.warns(MixtureDegeneracyWarning, match="did not converge within 3 iterations"):
        BetaMixture(max_iter=3).fit(x)
    with warnings.catch_warnings():  # a budget the caller chose (a warm-started refit): no
        warnings.simplefilter("error", MixtureDegeneracyWarning)
        BetaMixture().fit(x).fit(x, max_iter=3)


def test_swapped_and_merged_components_are_degenerate():
    m = BetaMixture()
    m.alpha.copy_(torch.tensor([2.0, 9.0]))
    m.beta.copy_(torch.tensor([8.0, 3.0]))
    m.weight.copy_(torch.tensor([0.8, 0.2]))
    assert m.degeneracy() == [] and m.degeneracy(swapped_from=0) == []
    assert any("swapped" in p for p in m.degeneracy(swapped_from=1))
    m.weight.copy_(torch.tensor([1 - m.min_weight, m.min_weight]))
    assert any("merged" in p for p in m.degeneracy())
    m.weight.copy_(torch.tensor([0.5, 0.5]))
    m.alpha.copy_(torch.tensor([3.0, 3.0]))
    m.beta.copy_(torch.tensor([3.0, 3.0]))
    assert any("merged" in p for p in m.degeneracy())


@pytest.mark.parametrize("schedule", ["floored", "online"])
def test_the_trainer_warns_once_and_records_every_degenerate_epoch(monkeypatch, schedule):
    from pyg_progcl.experiments import get_preset, synthetic_graph, train_seed

    monkeypatch.setattr(BetaMixture, "_findings", lambda self, swapped_from=None: [("x", "test")])
    config = get_preset(
        "synthetic", "progcl-weight", epochs=6, warmup_epochs=2, probe_epochs=20, schedule=schedule
    )
    data = synthetic_graph(num_nodes=120)
    with pytest.warns(MixtureDegeneracyWarning, match="epoch 3: .*test.*once per run") as caught:
        _, _, record = train_seed(config, data, seed=0, progress=False)
    (warning,) = [w for w in caught if w.category is MixtureDegeneracyWarning]
    warned = str(warning.message)
    assert warning.filename == __file__  # the caller's line, not the package's
    floors = "from this epoch on the schedule floors p(true neg. | s') in the weights at 0.5"
    assert (floors in warned) == (schedule == "floored")  # the default says what it does
    assert [e["epoch"] for e in record["degenerate_fits"]] == [3, 4, 5, 6]
    assert record["degenerate_fits"][0]["problems"] == ["test"]


def test_a_fit_every_epoch_warns_once_and_counts_every_degenerate_fit():
    # A plain training loop refits every epoch: one warning, not one per fit.
    views = class_views(spread=1e-3)
    loss = ProGCLLoss(0.5, num_samples=5_000)
    spikes = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(50):
            loss.fit(*views, generator=torch.Generator().manual_seed(1))
            spikes += any("spike at cosine 1" in p for p in loss.mixture.problems_)
    (warning,) = [w for w in caught if w.category is MixtureDegeneracyWarning]
    assert warning.filename == __file__ and "'spike'" in str(warning.message)
    assert spikes == 50 and loss.degenerate_fits == {"spike": 50}
    assert loss.mixture.degenerate_fits is loss.degenerate_fits


def test_each_kind_of_degeneration_warns_when_it_first_appears(monkeypatch):
    kinds = iter([["spike"]] * 3 + [["spike", "merged"]] * 4 + [[]] * 2 + [["merged"]])
    found = lambda self, swapped_from=None: [(k, f"problem {k}") for k in next(kinds)]  # noqa: E731
    monkeypatch.setattr(BetaMixture, "_findings", found)
    x = sample_mixture(2_000, [(2, 8), (9, 3)], [0.8, 0.2])
    m = BetaMixture()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(10):
            m.fit(x, max_iter=5)
    messages = [str(w.message) for w in caught if w.category is MixtureDegeneracyWarning]
    assert len(messages) == 2 and all(w.filename == __file__ for w in caught)
    assert "problem spike" in messages[0] and "merged" not in messages[0]
    assert "problem merged" in messages[1] and "spike" not in messages[1]
    assert m.degenerate_fits == {"spike": 7, "merged": 5} and m.problems_ == ["problem merged"]


def test_em_that_does_not_converge_is_not_called_degenerate():
    x = sample_mixture(50_000, [(2, 8), (9, 3)], [0.8, 0.2])
    m = BetaMixture(max_iter=3)
    m.load_state_dict(BetaMixture().fit(x).state_dict())  # healthy, and stays so
    with pytest.warns(MixtureDegeneracyWarning) as caught:
        m.fit(sample_mixture(50_000, [(3, 8), (9, 2)], [0.7, 0.3], seed=1))
        m.fit(sample_mixture(50_000, [(2, 8), (9, 3)], [0.8, 0.2], seed=2))
    (message,) = [str(w.message) for w in caught]
    assert "did not converge within 3" in message and "degenerated" not in message
    assert m.degenerate_fits == {"not-converged": 2}


@pytest.mark.slow
def test_the_diagnose_command_warns_at_most_once(tmp_path, monkeypatch):
    # Initial models' similarities are all near 1: every cold fit (one per encoder) and
    # every run's refits degenerate.
    from pyg_progcl.__main__ import main
    from pyg_progcl.diagnostics import core

    monkeypatch.setattr(core, "_WARNED_KINDS", set())  # as in a fresh process
    argv = ["diagnose", "--out", str(tmp_path), "--no-plot", "--quiet", "--epochs", "3"]
    argv += ["--num-pairs", "5000", "--num-anchors", "256", "--probe-epochs", "20"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(argv) == 0
    warned = [w for w in caught if w.category is MixtureDegeneracyWarning]
    assert len(warned) == 1 and "degenerate" in str(warned[0].message)


def test_diagnostics_cold_fits_warn_once_per_kind_and_not_for_slow_em(monkeypatch):
    from pyg_progcl.diagnostics import core, fit_mixture

    monkeypatch.setattr(core, "_WARNED_KINDS", set())
    collapsed = 0.999 + 1e-4 * torch.rand(5_000, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fits = [fit_mixture(collapsed) for _ in range(3)]
        slow = fit_mixture(2 * sample_mixture(5_000, [(2, 8), (9, 3)], [0.8, 0.2]) - 1, 20)
    (warning,) = [w for w in caught if w.category is MixtureDegeneracyWarning]
    assert warning.filename == __file__ and all(f.problems_ for f in fits)
    assert slow.problems_ == ["EM did not converge within 20 iterations"]
