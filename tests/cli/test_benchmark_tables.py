"""The benchmark scripts' table logic: which runs are compared with which."""

from __future__ import annotations

import pytest
import torch
from helpers import load_script as _script
from helpers import small_graph


def _cell(method, epochs, accuracy, seeds=3):
    return {
        "dataset": "Cora", "method": method, "epochs": epochs, "preset_epochs": 200,
        "protocol": "grace", "split": "random", "probe_epochs": 3000, "seeds": seeds,
        "accuracy_mean": accuracy,
    }  # fmt: skip


def test_reproduce_compares_progcl_with_grace_at_the_same_budget():
    reproduce = _script("reproduce")
    cells = [_cell("grace", 200, 0.826), _cell("progcl-weight", 200, 0.829)]
    cells.append(_cell("grace", 400, 0.840))  # a longer GRACE run must not be the reference
    (line,) = reproduce.versus_grace(cells)
    assert line.startswith("- Cora: progcl-weight +0.30 vs grace (better")
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--cap", "--epoch-fraction", "0.5"])  # --cap needs --epochs


def test_speed_table_without_grace_says_so():
    speed = _script("speed")
    row = {
        "dataset": "Cora", "method": "progcl-weight", "path": "dense", "step_s": 0.2,
        "refit_s": 0.01, "matmul_bound_s": 0.1, "peak_mb": 500.0,
    }  # fmt: skip
    assert "| – |" in speed._format_row(row, [row])
    grace = dict(row, method="grace", step_s=0.1, ratio_range=(1.0, 1.0))
    row["ratio_range"] = (1.9, 2.1)
    assert "| 2.00x (1.90–2.10) |" in speed._format_row(row, [grace, row])


def test_speed_pretrains_once_per_run_and_every_method_starts_there(tmp_path, monkeypatch):
    speed = _script("speed")
    data, cpu = small_graph(), torch.device("cpu")
    args = speed.parse_args(["--pretrain", "2", "--hidden", "8"])
    args.cache, args.dataset = tmp_path, "small"
    state = speed.pretrained(data, args, cpu)
    initial = speed.Stepper("progcl-mix", data, args, cpu).model.state_dict()
    assert any(not torch.equal(state[k], initial[k]) for k in state)  # trained
    monkeypatch.setattr(speed.Stepper, "step", lambda self: pytest.fail("trained again"))
    again = speed.pretrained(data, args, cpu)  # the run's next process
    assert all(torch.equal(state[k], again[k]) for k in state)


def test_fit_sampling_compares_both_samples_on_a_frozen_checkpoint(tmp_path):
    fit_sampling = _script("fit_sampling")
    g = torch.Generator().manual_seed(0)
    u = torch.nn.functional.normalize(torch.randn(150, 8, generator=g), dim=1)
    v = torch.nn.functional.normalize(u + 0.3 * torch.randn(150, 8, generator=g), dim=1)
    theta = fit_sampling.reference_sample(u, v, g)
    assert theta.numel() == 150 * 100  # every row × 100 columns, positives included
    config = {"dataset": "Cora", "method": "progcl-weight", "warmup_epochs": 100, "tau": 0.4,
              "num_samples": 5000, "min_beta_high": 1.01, "mixture_weight_init": None}  # fmt: skip
    mixture = fit_sampling.fit(theta, config, tol=0.0)
    assert mixture.n_iter_ == 10 and mixture.beta[1 - mixture.true_negative_index] >= 1.01
    anchors = torch.arange(7)
    w = fit_sampling.weights(mixture, u, v, anchors, 0.4)
    assert torch.all(w[anchors, anchors] == 0)
    torch.testing.assert_close(w.sum(1) / 149, torch.ones(7))  # w = b / mean b
    torch.save(
        {"config": config, "loss": {"schedule.frozen_u": u, "schedule.frozen_v": v}},
        tmp_path / "s.pt",
    )
    rows = fit_sampling.run(tmp_path / "s.pt", draws=2, num_anchors=20)
    assert len(rows) == 5 and rows[0].startswith("| Cora, fit at epoch 101 | ours 0 |")
    assert "| – | – |" in rows[0] and "Δw median: ours" in rows[-1]


def _link_run(method, seeds, auc, split_seed=0):
    values = {k: [auc] * len(seeds) for k in ("auc", "ap", "hits@20", "hits@50", "hits@100")}
    cluster = {k: [0.5] * len(seeds) for k in ("nmi", "ari", "acc")}
    return {
        "dataset": "Cora", "method": method, "seeds": seeds, "accuracies": [0.8] * len(seeds),
        "link": {**values, "split": {"seed": split_seed}}, "cluster": cluster,
    }  # fmt: skip


def test_link_cluster_pairs_each_method_with_grace_on_common_seeds():
    script = _script("link_cluster")
    runs = [
        _link_run("grace", [0, 1], 0.90),
        _link_run("grace", [2], 0.80),
        _link_run("progcl-weight", [1, 2, 3], 0.87),
    ]
    lines = script.table(script.merge(runs)).splitlines()
    (delta,) = [line for line in lines if "Δ" in line]
    # Seeds 1 and 2 are common: AUC -3 and +7 points, ahead on one; accuracy equal.
    assert delta.split(" | ")[2:5] == ["2", "+0.00 (0 / 2)", "+2.00 (1 / 2)"], delta
    with pytest.raises(ValueError, match="seed 0 twice"):
        script.merge([_link_run("grace", [0], 0.9), _link_run("grace", [0], 0.9)])
    unpaired = [_link_run("grace", [0], 0.9), _link_run("dcl", [0], 0.9, split_seed=1)]
    assert "Δ" not in script.table(script.merge(unpaired))  # another split: not paired
