"""Evaluation protocols (pyg_progcl.evaluation): splits, the Adam probe, the GRACE
cross-validated probe."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

import pyg_progcl.evaluation as evaluation
from pyg_progcl.evaluation import (
    evaluate,
    gca_protocol,
    grace_protocol,
    logistic_regression_probe,
    public_splits,
    random_split,
)


def clusters(n=600, num_classes=4, dim=16, spread=0.5, seed=0):
    """Gaussian clusters around well-separated centres."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % num_classes
    centres = torch.randn(num_classes, dim, generator=gen) * 3
    return centres[y] + spread * torch.randn(n, dim, generator=gen), y


def test_random_split_is_a_seeded_partition():
    tr, va, te = random_split(1000, 0.1, 0.1, seed=3)
    assert (len(tr), len(va), len(te)) == (100, 100, 800)
    assert torch.cat([tr, va, te]).sort().values.tolist() == list(range(1000))
    tr2, _, _ = random_split(1000, 0.1, 0.1, seed=3)
    tr3, _, _ = random_split(1000, 0.1, 0.1, seed=4)
    assert torch.equal(tr, tr2) and not torch.equal(tr, tr3)
    with pytest.raises(ValueError, match="train_ratio"):
        random_split(100, 0.6, 0.5)


def test_random_split_of_a_seed_never_changes():
    # Stored results and paired comparisons use these splits (why not T.RandomNodeSplit,
    # which takes validation and test nodes first, from the global RNG).
    parts = [t.tolist() for t in random_split(10, 0.2, 0.2, seed=0)]
    assert parts == [[4, 1], [7, 5], [3, 9, 0, 8, 6, 2]]
    parts = [t.tolist() for t in random_split(10, 0.2, 0.2, seed=1)]
    assert parts == [[5, 6], [1, 2], [0, 8, 9, 3, 7, 4]]


def test_random_split_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    random_split(100, 0.1, 0.1, seed=3)
    assert torch.equal(torch.get_rng_state(), state)


def test_public_splits_from_one_or_many_mask_columns():
    n = 50
    data = Data(y=torch.zeros(n, dtype=torch.long), num_nodes=n)
    data.train_mask = torch.zeros(n, 20, dtype=torch.bool)
    data.train_mask[torch.arange(20), torch.arange(20)] = True
    data.val_mask = torch.zeros(n, 20, dtype=torch.bool)
    data.test_mask = torch.arange(n) >= 30
    splits = public_splits(data)
    assert len(splits) == 20
    assert [s[0].tolist() for s in splits[:3]] == [[0], [1], [2]]
    assert all(s[2].tolist() == list(range(30, 50)) for s in splits)
    data1 = Data(y=data.y, train_mask=data.test_mask, test_mask=~data.test_mask)
    assert len(public_splits(data1)) == 1 and public_splits(data1)[0][1].numel() == 0
    with pytest.raises(ValueError, match="train_mask"):
        public_splits(Data(y=data.y))


def test_probe_separates_clusters_and_is_at_chance_on_noise():
    z, y = clusters()
    split = random_split(len(y), 0.1, 0.1, seed=0)
    good = logistic_regression_probe(z, y, *split, epochs=200, eval_every=20)
    assert good["accuracy"] > 0.97
    assert good["best_epoch"] % 20 == 0 or good["best_epoch"] == 200
    noise = torch.randn_like(z)
    bad = logistic_regression_probe(noise, y, *split, epochs=200, eval_every=20)
    assert bad["accuracy"] < 0.45  # chance is 0.25


def test_probe_leaves_the_global_rng_alone_and_is_deterministic():
    z, y = clusters(n=200)
    split = random_split(200, 0.1, 0.1, seed=0)
    state = torch.get_rng_state()
    a = logistic_regression_probe(z, y, *split, epochs=50, seed=1)
    assert torch.equal(torch.get_rng_state(), state)
    b = logistic_regression_probe(z, y, *split, epochs=50, seed=1)
    assert a == b


def test_probe_picks_test_accuracy_at_best_validation():
    # Each checkpoint's validation and test accuracies are what a probe without validation
    # reports after that many epochs (same seed, same trajectory). The probe must report
    # the test accuracy of the first checkpoint of best *validation* accuracy: here neither
    # the best test accuracy (which would leak the test labels) nor the last one.
    z, y = clusters(n=300, num_classes=3, dim=64, spread=12.0)  # noisy: accuracy moves
    tr, va, te = random_split(300, 0.05, 0.2, seed=0)
    none = torch.empty(0, dtype=torch.long)
    epochs = range(10, 101, 10)
    val, test = (
        [
            logistic_regression_probe(z, y, tr, none, idx, epochs=k, lr=0.05)["accuracy"]
            for k in epochs
        ]
        for idx in (va, te)
    )
    i = val.index(max(val))
    assert test[i] < max(test) and test[i] != test[-1], "the split must tell the rules apart"
    best = logistic_regression_probe(z, y, tr, va, te, epochs=100, lr=0.05, eval_every=10)
    assert best["accuracy"] == pytest.approx(test[i]) and best["best_epoch"] == epochs[i]
    assert best["val_accuracy"] == pytest.approx(val[i])


def test_protocols_use_the_papers_split_sizes(monkeypatch):
    sizes = []
    split = evaluation.random_split

    def recording_split(*args):
        out = split(*args)
        sizes.append(tuple(len(part) for part in out))
        return out

    monkeypatch.setattr(evaluation, "random_split", recording_split)
    z, y = clusters(n=600, spread=2.0)
    gca_protocol(z, y, seed=0, epochs=20)
    assert sizes == [(60, 60, 480)]  # GCA / ProGCL: 10 / 10 / 80
    sizes.clear()
    grace_protocol(z, y, seed=0, c_grid=[1.0])
    assert sizes == [(60, 0, 540)] * 3  # GRACE: 10 / 90, three repeats


def test_gca_protocol_reports_fractions():
    z, y = clusters(spread=2.0)
    out = gca_protocol(z, y, seed=0, epochs=100)
    assert 0.4 < out["accuracy"] <= 1.0 and len(out["accuracies"]) == 1


def test_grace_protocol_normalises_embeddings_and_cross_validates():
    z, y = clusters(spread=2.0)
    out = grace_protocol(z, y, seed=0, c_grid=[0.01, 1.0, 100.0])
    assert 0.5 < out["accuracy"] <= 1.0 and out["C"][0] in (0.01, 1.0, 100.0)
    # GRACE's @repeat(3): three random splits, their mean reported.
    assert len(out["accuracies"]) == 3 and out["accuracy"] == pytest.approx(
        sum(out["accuracies"]) / 3
    )
    one = grace_protocol(z, y, seed=0, repeats=1, c_grid=[0.01, 1.0, 100.0])
    assert one["accuracies"] == out["accuracies"][:1]
    # L2 normalisation: rescaling each row changes nothing.
    scale = torch.rand(len(y), 1, generator=torch.Generator().manual_seed(0)) * 100 + 0.01
    again = grace_protocol(z * scale, y, seed=0, c_grid=[0.01, 1.0, 100.0])
    assert again["accuracy"] == pytest.approx(out["accuracy"])
    # 4 training nodes: 4 folds; 1 training node: too few to cross-validate, C = 1.
    assert len(grace_protocol(z[:40], y[:40], seed=0)["C"]) == 3
    tiny = grace_protocol(z[:15], y[:15], seed=0)
    assert tiny["C"] == [1.0] * 3
    # One training node: every test node gets its class.
    for r, acc in enumerate(tiny["accuracies"]):
        tr, _, te = random_split(15, 0.1, 0.0, r)
        assert acc == pytest.approx(float((y[te] == y[tr]).float().mean()))


def test_evaluate_dispatches_protocols_and_public_splits():
    z, y = clusters(n=200, spread=1.0)
    data = Data(y=y, num_nodes=200)
    data.train_mask = torch.rand(200, 3, generator=torch.Generator().manual_seed(0)) < 0.2
    data.val_mask = ~data.train_mask
    data.test_mask = torch.arange(200) >= 100
    pub = evaluate(z, data, "gca", split="public", probe_epochs=50)
    assert len(pub["accuracies"]) == 3
    assert pub["accuracy"] == pytest.approx(sum(pub["accuracies"]) / 3)
    rnd = evaluate(z, data, "grace", split="random", seed=2)
    assert rnd == grace_protocol(z, y, seed=2)  # the masks are not used
    with pytest.raises(ValueError, match="protocol"):
        evaluate(z, data, "svm")
    with pytest.raises(ValueError, match="one label per node"):
        evaluate(z[:10], data)


def test_ogb_evaluator_scores_like_plain_accuracy():
    pytest.importorskip("ogb")
    z, y = clusters(n=200, spread=3.0)
    split = random_split(200, 0.1, 0.1, seed=0)
    plain = logistic_regression_probe(z, y, *split, epochs=60)
    ogb = logistic_regression_probe(z, y, *split, epochs=60, ogb_name="ogbn-arxiv")
    assert ogb["accuracy"] == pytest.approx(plain["accuracy"])
