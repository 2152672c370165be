"""Presets: the docs/algorithms.md §7 values, method deltas, overrides, round trips."""

from __future__ import annotations

import json

import pytest

from pyg_progcl.experiments.datasets import DATASETS
from pyg_progcl.experiments.presets import METHODS, TrainConfig, get_preset


@pytest.mark.parametrize("dataset", list(DATASETS))
@pytest.mark.parametrize("method", METHODS)
def test_every_preset_builds_and_round_trips(dataset, method):
    config = get_preset(dataset, method)
    assert config.dataset == dataset and config.method == method
    assert TrainConfig.from_dict(config.to_dict()) == config
    assert TrainConfig.from_json(config.to_json()) == config
    assert json.loads(config.to_json())["method"] == method


# (dataset, lr, hidden, proj, activation, pe1, pe2, pf1, pf2, tau, epochs) of docs/algorithms.md §7.
PROGCL_TABLE = [
    ("Amazon-Computers", 0.01, 128, 128, "rrelu", 0.6, 0.3, 0.2, 0.3, 0.2, 2000),
    ("Amazon-Photo", 0.01, 128, 128, "rrelu", 0.6, 0.3, 0.2, 0.3, 0.2, 2500),
    ("Coauthor-CS", 1e-4, 256, 256, "rrelu", 0.3, 0.2, 0.3, 0.4, 0.2, 1000),
    ("WikiCS", 0.01, 256, 256, "prelu", 0.2, 0.3, 0.1, 0.1, 0.4, 3000),
    ("Coauthor-Physics", 0.01, 128, 64, "rrelu", 0.4, 0.1, 0.1, 0.4, 0.5, 1500),
]
GRACE_TABLE = [
    ("Cora", 5e-4, 128, 128, "relu", 0.2, 0.4, 0.3, 0.4, 0.4, 200),
    ("CiteSeer", 1e-3, 256, 256, "prelu", 0.2, 0.0, 0.3, 0.2, 0.9, 200),
    ("PubMed", 1e-3, 256, 256, "relu", 0.4, 0.1, 0.0, 0.2, 0.7, 1500),
]
KEYS = ("lr", "hidden", "proj", "activation", "pe1", "pe2", "pf1", "pf2", "tau", "epochs")


@pytest.mark.parametrize("row", PROGCL_TABLE, ids=[r[0] for r in PROGCL_TABLE])
def test_progcl_presets_match_the_published_configs(row):
    config = get_preset(row[0], "progcl-weight")
    assert tuple(getattr(config, k) for k in KEYS) == row[1:]
    assert config.augmentation == "evc" and config.protocol == "gca"
    assert config.weight_decay == 1e-5 and config.num_layers == 2
    assert config.warmup_epochs == 400


@pytest.mark.parametrize("row", GRACE_TABLE, ids=[r[0] for r in GRACE_TABLE])
def test_grace_presets_match_the_published_configs(row):
    config = get_preset(row[0], "grace")
    assert tuple(getattr(config, k) for k in KEYS) == row[1:]
    assert config.augmentation == "uniform" and config.protocol == "grace"


def test_method_deltas():
    assert get_preset("Amazon-Photo", "grace").augmentation == "uniform"
    assert get_preset("Cora", "gca").augmentation == "evc"
    assert get_preset("Cora", "progcl-mix").augmentation == "uniform"  # GRACE's backbone
    assert get_preset("Amazon-Photo", "progcl-mix").augmentation == "evc"  # GCA's
    assert get_preset("Cora", "progcl-weight").warmup_epochs == 100  # half of 200
    hcl = get_preset("Cora", "hcl")
    assert (hcl.tau_plus, hcl.beta, hcl.augmentation) == (0.1, 1.0, "uniform")
    assert get_preset("WikiCS", "grace").split == "public"
    # Method deltas change nothing else: grace and progcl share the optimiser setup.
    a, b = get_preset("Amazon-Photo", "grace"), get_preset("Amazon-Photo", "progcl-weight")
    assert a.replace(augmentation="evc", method="progcl-weight") == b


def test_overrides_and_warmup_scaling():
    config = get_preset("Photo", "progcl-weight", tau=0.3, epochs=500)
    assert config.dataset == "Amazon-Photo" and config.tau == 0.3
    assert config.warmup_epochs == 80  # 400/2500 of the epochs
    assert get_preset("Photo", "progcl-weight", epochs=500, warmup_epochs=7).warmup_epochs == 7
    base = get_preset("Cora", "grace")
    assert get_preset("Cora", "grace", config=base.replace(lr=0.1)).lr == 0.1
    assert get_preset("Cora", "grace", config={"hidden": 64}).hidden == 64
    # A whole config (e.g. a 2500-epoch run's) with fewer epochs keeps *its* warm-up fraction.
    full = get_preset("Photo", "progcl-weight", warmup_epochs=500)
    assert get_preset("Photo", "progcl-weight", config=full, epochs=250).warmup_epochs == 50
    assert get_preset("Photo", "progcl-weight", config={"epochs": 500}).warmup_epochs == 80
    both = {"epochs": 500, "warmup_epochs": 9}
    assert get_preset("Photo", "progcl-weight", config=both).warmup_epochs == 9
    explicit = get_preset("Photo", "progcl-weight", config={"epochs": 500}, warmup_epochs=7)
    assert explicit.warmup_epochs == 7  # an override above the config's epochs wins


def test_progcl_needs_epochs_after_its_warmup():
    with pytest.raises(ValueError, match="`warmup_epochs` must be less than `epochs`"):
        get_preset("Cora", "progcl-mix", epochs=50, warmup_epochs=50)
    assert get_preset("Cora", "grace", epochs=50, warmup_epochs=50).epochs == 50  # no mixture


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(method="simclr"), "method"),
        (dict(dataset="Kora"), "unknown dataset"),
        (dict(tau=0.0), "tau"),
        (dict(epochs=-5), "epochs"),
        (dict(pe1=1.5), "pe1"),
        (dict(augmentation="random"), "augmentation"),
        (dict(protocol="svm"), "protocol"),
        (dict(activation="swish"), "activation"),
        (dict(method="progcl-weight", min_beta_high=0.0), "min_beta_high"),
        (dict(method="progcl-weight", mixture_weight_init=1.0), "mixture_weight_init"),
        (dict(method="progcl-weight", mixture_weight_init=0.0), "mixture_weight_init"),
        (dict(method="progcl-weight", shared_weights=True), "shared_weights.*frozen"),
        (dict(method="progcl-weight", schedule="frozen", shared_weights=1), "shared_weights"),
        (dict(learning_rate=0.1), "unknown config keys"),
    ],
)
def test_bad_values_are_clear_errors(kwargs, match):
    args = {"dataset": kwargs.pop("dataset", "Cora"), "method": kwargs.pop("method", "grace")}
    with pytest.raises(ValueError, match=match):
        get_preset(**args, **kwargs)


def test_from_dict_rejects_unknown_keys_and_validates():
    values = get_preset().to_dict()
    with pytest.raises(ValueError, match="unknown config keys"):
        TrainConfig.from_dict({**values, "lrr": 1})
    with pytest.raises(ValueError, match="tau_plus"):
        TrainConfig.from_dict({**values, "tau_plus": 1.0})


def test_num_neighbors_has_one_entry_per_layer():
    with pytest.raises(ValueError, match="one entry per layer"):
        get_preset("synthetic", "grace", batch_size=64, num_neighbors=[10, 10], num_layers=3)
    # ogbn-products samples 10 neighbours per layer, however many layers.
    assert get_preset("ogbn-products", "grace", num_layers=3).num_neighbors is None
