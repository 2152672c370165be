"""Presets: every (dataset, method) builds and round-trips; a preset is the dataset's base
row, then the method's delta, then the overrides (docs/algorithms.md §7)."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from pyg_progcl.cli.datasets import DATASETS
from pyg_progcl.cli.presets import (
    DATASET_PRESETS,
    METHOD_PRESETS,
    METHODS,
    TrainConfig,
    get_preset,
)

# docs/algorithms.md §7, base rows: whose configuration each dataset takes.
PROGCL_ROWS = ("Amazon-Photo", "Amazon-Computers", "Coauthor-CS", "WikiCS")  # ProGCL's own
GCA_ROWS = ("Coauthor-Physics",)  # GCA's: ProGCL ran out of memory there
GRACE_ROWS = ("Cora", "CiteSeer", "PubMed")


def differences(a: TrainConfig, b: TrainConfig) -> set[str]:
    """The fields in which two configs differ."""
    return {f.name for f in fields(TrainConfig) if getattr(a, f.name) != getattr(b, f.name)}


@pytest.mark.parametrize("dataset", list(DATASETS))
@pytest.mark.parametrize("method", METHODS)
def test_every_preset_builds_and_round_trips(dataset, method):
    config = get_preset(dataset, method)
    assert config.dataset == dataset and config.method == method
    assert TrainConfig.from_dict(config.to_dict()) == config
    assert TrainConfig.from_json(config.to_json()) == config
    assert json.loads(config.to_json())["method"] == method


def test_round_trips_keep_lists_and_unset_values():
    config = get_preset("synthetic", "progcl-weight", batch_size=64, num_neighbors=[5, 3])
    assert config.num_samples is not None and config.min_beta_high is None
    again = TrainConfig.from_json(config.to_json())
    assert again == config and again.num_neighbors == [5, 3] and again.min_beta_high is None
    assert get_preset("synthetic", "progcl-weight", config=again.to_dict()) == config


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_a_preset_is_the_dataset_row_with_the_method_delta(dataset):
    """Every field is the method delta's, else the dataset row's, else the default."""
    for method in METHODS:
        config = get_preset(dataset, method)
        for key, default in TrainConfig.defaults().items():
            if key in ("dataset", "method"):
                continue
            row = DATASET_PRESETS[dataset].get(key, default)
            assert getattr(config, key) == METHOD_PRESETS[method].get(key, row), (method, key)


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_methods_differ_by_their_deltas_only(dataset):
    """GRACE, GCA, DCL and HCL differ in the augmentation and the loss's own parameters;
    ProGCL keeps the dataset's backbone (and so equals GRACE or GCA but for the loss)."""
    grace, gca = get_preset(dataset, "grace"), get_preset(dataset, "gca")
    assert (grace.augmentation, gca.augmentation) == ("uniform", "evc")
    assert differences(grace, gca) == {"method", "augmentation"}
    dcl, hcl = get_preset(dataset, "dcl"), get_preset(dataset, "hcl")
    assert differences(grace, dcl) <= {"method", "tau_plus"} and dcl.tau_plus == 0.1
    assert differences(grace, hcl) <= {"method", "tau_plus", "beta"}
    assert (hcl.tau_plus, hcl.beta) == (0.1, 1.0)  # the HCL paper's defaults for graphs
    progcl = get_preset(dataset, "progcl-weight")
    backbone = gca if progcl.augmentation == "evc" else grace
    assert differences(backbone, progcl) == {"method"}
    assert progcl.augmentation == DATASET_PRESETS[dataset]["augmentation"]
    mix = get_preset(dataset, "progcl-mix")
    assert differences(progcl, mix) <= {"method", "num_mix"} and mix.num_mix == 1000


def test_base_rows_take_their_papers_backbones():
    """§7: ProGCL's (and GCA's) rows train GCA's backbone, GRACE's rows GRACE's; where
    ProGCL published no row (Cora, CiteSeer) it warms up for half the epochs."""
    for dataset in PROGCL_ROWS + GCA_ROWS:
        config = get_preset(dataset, "progcl-weight")
        assert (config.augmentation, config.protocol, config.num_layers) == ("evc", "gca", 2)
        assert config.weight_decay == 1e-5
        assert dataset in GCA_ROWS or config.warmup_epochs == 400  # ProGCL's warm-up
    for dataset in GRACE_ROWS:
        config = get_preset(dataset, "progcl-weight")
        assert (config.augmentation, config.protocol) == ("uniform", "grace")
    for dataset in ("Cora", "CiteSeer"):
        config = get_preset(dataset, "progcl-weight")
        assert 2 * config.warmup_epochs == config.epochs
    public = {d for d in DATASETS if get_preset(d).split == "public"}
    assert public == {"WikiCS", "ogbn-arxiv", "ogbn-products"}  # their own splits


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_warmup_keeps_its_share_of_fewer_or_more_epochs(dataset):
    preset = get_preset(dataset, "progcl-weight")
    for epochs in (1, 2, 3, 7, 50, preset.epochs - 1, 10_000):
        config = get_preset(dataset, "progcl-weight", epochs=epochs)
        assert config.warmup_epochs == round(preset.warmup_epochs * epochs / preset.epochs)
        assert config.warmup_epochs < epochs  # a shortened run still fits its mixture
        assert differences(preset, config) <= {"epochs", "warmup_epochs"}


def test_overrides_win_over_config_over_method_over_dataset():
    # Cora's row: uniform augmentation, tau 0.4; HCL's delta: beta 1.0
    assert get_preset("Cora", "gca").augmentation == "evc"  # the method over the dataset
    assert get_preset("Cora", "hcl", config={"beta": 2.0}).beta == 2.0  # config over method
    assert get_preset("Cora", "hcl", config={"beta": 2.0}, beta=3.0).beta == 3.0  # kwargs last
    config = get_preset("Cora", "hcl", tau=0.33, hidden=17, augmentation="degree")
    assert (config.tau, config.hidden, config.augmentation) == (0.33, 17, "degree")
    assert differences(get_preset("Cora", "hcl"), config) == {"tau", "hidden", "augmentation"}


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


def test_configs_with_a_former_field_are_refused():
    old = {**get_preset("synthetic", "progcl-weight").to_dict(), "posterior_floor": 0.5}
    with pytest.raises(ValueError, match=r"unknown config keys: \['posterior_floor'\]"):
        TrainConfig.from_dict(old)
    with pytest.raises(ValueError, match=r"unknown config keys: \['posterior_floor'\]"):
        get_preset("synthetic", "progcl-weight", posterior_floor=0.5)


def test_the_floor_is_the_schedule_s_one_setting():
    from pyg_progcl.cli.build import build_loss

    assert get_preset("synthetic", "progcl-weight").floor is None
    floored = build_loss(get_preset("synthetic", "progcl-weight")).schedule
    assert (floored.name, floored.floor, floored.posterior_floor) == ("floored", 0.5, 0.0)
    higher = build_loss(get_preset("synthetic", "progcl-weight", floor=0.7)).schedule
    assert (higher.name, higher.floor, higher.posterior_floor) == ("floored", 0.7, 0.0)
    for schedule in ("online", "frozen"):
        config = get_preset("synthetic", "progcl-weight", schedule=schedule, floor=0.4)
        made = build_loss(config).schedule
        assert (made.name, made.floor, made.posterior_floor) == (schedule, 0.4, 0.4)
        assert TrainConfig.from_json(config.to_json()) == config
    with pytest.raises(ValueError, match="`floor` must be"):
        get_preset("synthetic", "progcl-weight", floor=1.5)
