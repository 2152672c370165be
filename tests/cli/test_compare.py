"""benchmarks/compare.py: merging result files and pairing seeds against the baseline."""

from __future__ import annotations

import json

import pytest
from helpers import load_script


@pytest.fixture(scope="module")
def compare():
    return load_script("compare")


def _run(method, seeds, accuracies, epochs=200, warmup=100):
    config = {"epochs": epochs, "warmup_epochs": warmup, "schedule": "floored"}  # the default
    return {
        "dataset": "Cora",
        "method": method,
        "config": config,
        "seeds": seeds,
        "accuracies": accuracies,
    }


def _write(tmp_path, **runs):
    """Writes each run to ``tmp_path/<name>.json``; returns the paths, as strings."""
    for name, run in runs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(run))
    return [str(tmp_path / f"{name}.json") for name in runs]


def _row(text, method, epochs="200"):
    rows = [r for r in text.splitlines() if f"| {method} | {epochs} |" in r]
    assert len(rows) == 1, text
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def test_pairs_seeds_across_files_and_formats(compare, tmp_path, capsys):
    # GRACE seeds 0-2 from a reproduce.py file, seeds 5-6 from a trainer file.
    cell = dict(_run("grace", 3, [0.80, 0.81, 0.82]), accuracy_mean=0.81)
    (tmp_path / "reproduce.json").write_text(json.dumps({"machine": {}, "cells": [cell]}))
    (tmp_path / "grace.json").write_text(json.dumps(_run("grace", [5, 6], [0.83, 0.84])))
    (tmp_path / "progcl.json").write_text(
        json.dumps(_run("progcl-weight", [0, 1, 2, 5, 6], [0.81, 0.80, 0.83, 0.84, 0.85]))
    )
    assert compare.main([str(p) for p in sorted(tmp_path.glob("*.json"))]) == 0
    text = capsys.readouterr().out
    grace = _row(text, "grace")
    assert grace[4] == "0–2, 5, 6" and grace[5] == "82.00 ± 1.41"
    progcl = _row(text, "progcl-weight")
    assert progcl[3] == "100" and progcl[4] == "0–2, 5, 6"
    # deltas +1, -1, +1, +1, +1 points: mean +0.60, better on 4 of 5
    assert progcl[6] == "+0.60 (4 / 5)"
    assert progcl[7] == "+1.00, -1.00, +1.00, +1.00, +1.00"


def test_other_epochs_are_not_paired_and_repeats_must_agree(compare, capsys):
    runs = [
        {"key": ("Cora", "grace", 200, None), "acc": {0: 0.8}},
        {"key": ("Cora", "progcl-weight", 400, 200), "acc": {0: 0.9}},
        {"key": ("Cora", "progcl-weight", 400, 200), "acc": {0: 0.7}},
    ]
    merged = compare.merge(runs)
    assert merged[("Cora", "progcl-weight", 400, 200)] == {0: 0.9}
    assert "keeping the first" in capsys.readouterr().out
    row = _row(compare.table(merged, "grace"), "progcl-weight", "400")
    assert row[6] == "" and row[7] == ""  # no GRACE run at 400 epochs to pair with


def test_a_variant_is_a_setting_of_its_own(compare, tmp_path):
    path = tmp_path / "guard.json"
    path.write_text(json.dumps({"variant": "β guard", **_run("progcl-weight", [0], [0.7])}))
    (run,) = compare.load_runs(path)
    assert run["key"] == ("Cora", "progcl-weight (β guard)", 200, 100)


def test_a_fit_schedule_is_a_setting_of_its_own(compare, tmp_path):
    # Trainer files of the same method: the default, online, frozen; GRACE's schedule field
    # names nothing it uses.
    runs = {name: _run("progcl-weight", [0], [0.7]) for name in ("floored", "online", "frozen")}
    for name, run in runs.items():
        run["config"]["schedule"] = name
    runs["grace"] = _run("grace", [0], [0.7])
    runs["grace"]["config"]["schedule"] = "online"
    keys = []
    for name, run in runs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(run))
        keys += [r["key"][1] for r in compare.load_runs(tmp_path / f"{name}.json")]
    online = "progcl-weight (schedule 'online')"
    frozen = "progcl-weight (reference schedule: frozen per-pair weights)"
    assert keys == ["progcl-weight", online, frozen, "grace"]


def test_files_of_another_version_are_refused_in_one_line(compare, tmp_path, capsys):
    """A ProGCL run without a schedule field, or a config field this version lacks."""
    unnamed = _run("progcl-weight", [0], [0.7])
    del unnamed["config"]["schedule"]
    former = _run("progcl-weight", [0], [0.7])
    former["config"]["posterior_floor"] = 0.5
    for name, run, message in [
        ("unnamed", unnamed, "a ProGCL run without a `schedule` field"),
        ("former", former, "unknown config fields ['posterior_floor']"),
    ]:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(run))
        with pytest.raises(SystemExit) as info:
            compare.main([str(path)])
        assert info.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
        assert f"{path}: {message}" in line and "another version" in line


def test_mixture_options_are_settings_of_their_own(compare, tmp_path):
    run = _run("progcl-weight", [0], [0.7])
    run["config"].update(schedule="frozen", min_beta_high=1.01, mixture_weight_init=None)
    (tmp_path / "guard.json").write_text(json.dumps(run))
    (loaded,) = compare.load_runs(tmp_path / "guard.json")
    frozen = "reference schedule: frozen per-pair weights"
    assert loaded["key"][1] == f"progcl-weight ({frozen}, β ≥ 1.01)"
    run["config"].update(schedule="floored", min_beta_high=None, mixture_weight_init=0.15)
    (tmp_path / "init.json").write_text(json.dumps(run))
    (loaded,) = compare.load_runs(tmp_path / "init.json")
    assert loaded["key"][1] == "progcl-weight (initial w = 0.15)"
    run["config"].update(
        schedule="frozen", min_beta_high=1.01, mixture_weight_init=None, shared_weights=True
    )
    (tmp_path / "shared.json").write_text(json.dumps(run))
    (loaded,) = compare.load_runs(tmp_path / "shared.json")
    assert loaded["key"][1] == f"progcl-weight ({compare.SHARED_LABEL}, β ≥ 1.01)"


def test_a_progcl_baseline_is_refused(compare, tmp_path, capsys):
    with pytest.raises(SystemExit):
        compare.main([str(tmp_path / "x.json"), "--baseline", "progcl-weight"])
    assert "--baseline must be a method without a warm-up" in capsys.readouterr().err


def test_runs_of_one_row_must_share_their_setting(compare, tmp_path, capsys):
    a, b = _run("progcl-weight", [0], [0.7]), _run("progcl-weight", [1], [0.8])
    a["config"]["eval_every"], b["config"]["eval_every"] = 0, 50  # not a setting: merged
    files = _write(tmp_path, a=a, b=b)
    assert compare.main(files) == 0
    assert _row(capsys.readouterr().out, "progcl-weight")[4] == "0, 1"
    b["config"]["tau"] = 0.9
    (tmp_path / "b.json").write_text(json.dumps(b))
    with pytest.raises(SystemExit):
        compare.main(files)
    assert "differ in tau 0.5 vs 0.9" in capsys.readouterr().err


def test_grace_runs_merge_whatever_their_unused_schedule_field(compare, tmp_path, capsys):
    old, new = _run("grace", [0], [0.7]), _run("grace", [1], [0.8])
    old["config"]["schedule"], new["config"]["schedule"] = "online", "floored"
    assert compare.main(_write(tmp_path, old=old, new=new)) == 0
    assert _row(capsys.readouterr().out, "grace")[4] == "0, 1"


def test_only_runs_evaluated_alike_are_paired(compare, tmp_path, capsys):
    grace, progcl = _run("grace", [0], [0.8]), _run("progcl-weight", [0], [0.9])
    grace["config"]["protocol"], progcl["config"]["protocol"] = "grace", "gca"
    assert compare.main(_write(tmp_path, g=grace, p=progcl)) == 0
    text = capsys.readouterr().out
    assert "not paired" in text and _row(text, "progcl-weight")[6] == ""
