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

    monkeypatch.setattr(BetaMixture, "degeneracy", lambda self, swapped_from=None: ["test"])
    config = get_preset(
        "synthetic", "progcl-weight", epochs=6, warmup_epochs=2, probe_epochs=20, schedule=schedule
    )
    data = synthetic_graph(num_nodes=120)
    with pytest.warns(MixtureDegeneracyWarning, match="epoch 3: .*test.*once per run") as caught:
        _, _, record = train_seed(config, data, seed=0, progress=False)
    (warned,) = [str(w.message) for w in caught if w.category is MixtureDegeneracyWarning]
    floors = "from this epoch on the schedule floors p(true neg. | s') in the weights at 0.5"
    assert (floors in warned) == (schedule == "floored")  # the default says what it does
    assert [e["epoch"] for e in record["degenerate_fits"]] == [3, 4, 5, 6]
    assert record["degenerate_fits"][0]["problems"] == ["test"]
