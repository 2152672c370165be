"""Degenerate mixture fits: every one is recorded (the mixture, the loss, the trainer's
results and progress bar); only a schedule without a floor warns, in one line at the
caller's line, once per loss; the default ('floored') never does, from Python or from the
command line."""

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from helpers import REPO, class_views, fits_that_find, sample_mixture

from pyg_progcl import MixtureDegeneracyWarning, ProGCLLoss
from pyg_progcl.mixture import BetaMixture


def refits(loss, views, epochs=20):
    for _ in range(epochs):
        loss.fit(*views, generator=torch.Generator().manual_seed(1))
    return loss


def test_online_warns_once_in_one_line_at_the_callers_line_naming_the_fix():
    views = class_views(spread=1e-3)  # every classmate is a near-duplicate: cos ~ 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = refits(ProGCLLoss(0.5, num_samples=20_000, schedule="online"), views)
    (warning,) = caught
    message = str(warning.message)
    assert warning.category is MixtureDegeneracyWarning and "\n" not in message
    assert warning.filename == __file__  # the line that called loss.fit
    assert "spike at cosine 1" in message and "schedule 'online' has no floor" in message
    assert "schedule='floored'" in message and "--schedule floored" in message
    fn = 1 - loss.mixture.true_negative_index
    assert float(loss.mixture.beta[fn]) < 1 and loss.degenerate_fits == {"spike": 20}
    assert any("beta < 1" in p for p in loss.mixture.problems_)


@pytest.mark.parametrize("schedule", ["floored", "online-floor", "frozen-floor"], ids=lambda s: s)
def test_a_schedule_with_a_floor_records_and_does_not_warn(schedule):
    from pyg_progcl.losses import FrozenFit, OnlineFit

    made = {"floored": "floored", "online-floor": OnlineFit(floor=0.5)}
    made["frozen-floor"] = FrozenFit(floor=0.5)
    views = class_views(spread=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = refits(ProGCLLoss(0.5, num_samples=20_000, schedule=made[schedule]), views)
    assert loss.degenerate_fits == {"spike": 1 if schedule == "frozen-floor" else 20}
    assert bool(loss.schedule.degenerated) and loss.schedule.posterior_floor == 0.5


def test_frozen_without_a_floor_warns_on_a_degenerate_fit():
    with pytest.warns(MixtureDegeneracyWarning, match="schedule 'frozen' has no floor") as caught:
        refits(ProGCLLoss(0.5, num_samples=20_000, schedule="frozen"), class_views(spread=1e-3))
    assert len(caught) == 1 and caught[0].filename == __file__
    assert "FrozenFit(floor=0.5)" in str(caught[0].message)


def test_well_separated_classes_do_not_warn():
    views = class_views(spread=0.6)  # classmates similar (cos ~ 0.7), not collapsed
    with warnings.catch_warnings():
        warnings.simplefilter("error", MixtureDegeneracyWarning)
        loss = refits(ProGCLLoss(0.5, num_samples=20_000), views)
    assert loss.mixture.degeneracy() == [] and loss.mixture.problems_ == []
    assert bool((loss.mixture.alpha > 1).all() and (loss.mixture.beta > 1).all())


def test_a_healthy_converged_fit_records_nothing():
    x = sample_mixture(50_000, [(2, 8), (9, 3)], [0.8, 0.2])
    m = BetaMixture().fit(x)
    m.fit(sample_mixture(50_000, [(2.2, 8), (9, 2.8)], [0.78, 0.22], seed=2), max_iter=10)
    assert m.problems_ == [] and m.degenerate_fits == {}


def test_the_mixture_records_its_problems_and_never_warns():
    x = sample_mixture(50_000, [(2, 8), (9, 3)], [0.8, 0.2])
    collapsed = 0.999 + 1e-4 * torch.rand(5_000, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        slow = BetaMixture(max_iter=3)
        slow.load_state_dict(BetaMixture().fit(x).state_dict())  # healthy, and stays so
        slow.fit(sample_mixture(50_000, [(3, 8), (9, 2)], [0.7, 0.3], seed=1))
        chosen = BetaMixture().fit(x).fit(x, max_iter=3)  # a budget the caller chose
        spike = BetaMixture().fit(collapsed)
    assert slow.problems_ == ["EM did not converge within 3 iterations"]
    assert slow.degenerate_fits == {"not-converged": 1} and chosen.problems_ == []
    assert spike.problems_ and set(spike.degenerate_fits) - {"not-converged"}


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


def test_a_fit_every_epoch_warns_once_and_counts_every_degenerate_fit():
    # A plain training loop refits every epoch: one warning, not one per fit.
    views = class_views(spread=1e-3)
    loss = ProGCLLoss(0.5, num_samples=5_000, schedule="online")
    spikes = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(50):
            loss.fit(*views, generator=torch.Generator().manual_seed(1))
            spikes += any("spike at cosine 1" in p for p in loss.mixture.problems_)
    (warning,) = [w for w in caught if w.category is MixtureDegeneracyWarning]
    assert warning.filename == __file__ and "spike at cosine 1" in str(warning.message)
    assert spikes == 50 and loss.degenerate_fits == {"spike": 50}
    assert loss.mixture.degenerate_fits is loss.degenerate_fits


def test_later_kinds_of_degeneration_are_counted_not_warned(monkeypatch):
    kinds = iter([[]] * 2 + [["spike"]] * 3 + [["spike", "merged"]] * 4 + [["merged"]])
    monkeypatch.setattr(BetaMixture, "fit", fits_that_find(lambda: next(kinds)))
    loss = ProGCLLoss(0.5, num_samples=500, schedule="online")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        refits(loss, class_views(spread=0.6), epochs=10)
        loss.reset_parameters()  # the same loss: warned already
        monkeypatch.setattr(BetaMixture, "fit", fits_that_find(lambda: ["swapped"]))
        refits(loss, class_views(spread=0.6), epochs=1)
    (warning,) = caught  # at the first degenerate fit (the third): the fix is the same
    assert warning.filename == __file__ and "spike at cosine 1" in str(warning.message)
    assert "merged" not in str(warning.message)
    assert loss.degenerate_fits == {"spike": 7, "merged": 5, "swapped": 1}


@pytest.mark.slow
def test_the_diagnose_command_warns_at_most_once_in_one_line(tmp_path, capsys):
    # Initial models' similarities are all near 1: every cold fit (one per encoder)
    # degenerates; --quiet shows nothing at all.
    from helpers import run_main

    argv = ["diagnose", "--out", str(tmp_path), "--no-plot", "--epochs", "3"]
    argv += ["--num-pairs", "5000", "--num-anchors", "256", "--probe-epochs", "20"]
    for quiet in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            status, out, err = run_main(capsys, *argv, *(["--quiet"] if quiet else []))
        assert status == 0
        if quiet:
            assert (out, err) == ("", "")
        else:
            warned = [c for c in re.split(r"[\r\n]", err) if c.startswith("warning:")]
            assert len(warned) == 1 and "is degenerate" in warned[0], err


def test_diagnostics_cold_fits_warn_by_the_filters_and_not_for_slow_em():
    from pyg_progcl.diagnostics import fit_mixture

    collapsed = 0.999 + 1e-4 * torch.rand(5_000, generator=torch.Generator().manual_seed(0))
    slow_sample = 2 * sample_mixture(5_000, [(2, 8), (9, 3)], [0.8, 0.2]) - 1
    for action, expected in (("always", 3), ("default", 1)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter(action)  # "default": once per calling line, as in a script
            fits = [fit_mixture(collapsed) for _ in range(3)]
            slow = fit_mixture(slow_sample, 20)
        warned = [w for w in caught if w.category is MixtureDegeneracyWarning]
        assert len(warned) == expected and all(w.filename == __file__ for w in warned)
        assert "spike at cosine 1" in str(warned[0].message) and all(f.problems_ for f in fits)
        assert slow.problems_ == ["EM did not converge within 20 iterations"]


# ----------------------------------------------------------------------------- own graphs


def karate_file(folder: Path) -> Path:
    """Zachary's karate club (networkx) as a graph file: 34 nodes, one-hot features, the
    two clubs as labels."""
    import networkx as nx
    import numpy as np

    graph = nx.karate_club_graph()
    edges = np.array(graph.edges()).T
    y = [0 if graph.nodes[n]["club"] == "Mr. Hi" else 1 for n in graph.nodes]
    path = folder / "karate.npz"
    np.savez(
        path, edge_index=np.concatenate([edges, edges[::-1]], axis=1),
        x=np.eye(34, dtype=np.float32), y=np.array(y),
    )  # fmt: skip
    return path


#: A short ProGCL run whose refits degenerate from the first one on (karate, Cora).
SHORT = dict(epochs=12, warmup_epochs=4, probe_epochs=50)


def test_the_default_progcl_on_the_karate_club_gives_no_warning(tmp_path):
    from pyg_progcl.cli import get_preset, train
    from pyg_progcl.io import read_graph

    data = read_graph(karate_file(tmp_path))
    config = get_preset("file:karate", "progcl-weight", hidden=16, proj=16, **SHORT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = train(config, data, progress=False)
    degenerate = result["degenerate_fits"]["0"]
    assert degenerate and all(e["floor"] == 0.5 for e in degenerate)  # recorded, handled


@pytest.mark.slow  # 2708 nodes, 12 epochs
def test_the_default_progcl_on_cora_gives_no_warning(shared_data, tmp_path):
    import shutil

    from pyg_progcl.cli import get_preset, train

    shutil.copytree(shared_data / "planetoid" / "Cora" / "raw", tmp_path / "Cora" / "raw")
    config = get_preset("Cora", "progcl-weight", eval_every=0, **SHORT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = train(config, root=tmp_path, progress=False)
    assert result["degenerate_fits"]["0"]  # recorded, handled by the floor


def _train_karate(tmp_path, *flags):
    """``python -m pyg_progcl train --data karate.npz`` in a process of its own: ``(stdout,
    stderr)``."""
    argv = ["train", "--data", str(karate_file(tmp_path)), "--hidden", "16", "--proj", "16"]
    argv += ["--threads", "1", "--output", str(tmp_path / "result.json")]
    argv += [f"--{k.replace('_', '-')}={v}" for k, v in SHORT.items()]
    done = subprocess.run(
        [sys.executable, "-m", "pyg_progcl", *argv, *flags],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def _not_the_progress_bar(stderr: str) -> list[str]:
    """What ``stderr`` holds besides the progress bar's redraws (which tqdm separates by
    carriage returns)."""
    bar = "file:karate/progcl-weight seed 0"
    return [c for c in re.split(r"[\r\n]", stderr) if c.strip() and not c.startswith(bar)]


@pytest.mark.slow  # three processes
def test_the_command_line_warns_only_without_a_floor_and_never_when_quiet(tmp_path):
    out, err = _train_karate(tmp_path)  # the default: nothing but the progress bar
    assert _not_the_progress_bar(err) == [] and "accuracy" in out
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["degenerate_fits"]["0"]  # recorded in the result
    assert _train_karate(tmp_path, "--quiet") == ("", "")
    _, err = _train_karate(tmp_path, "--schedule", "online")
    (line,) = _not_the_progress_bar(err)  # one line, through the progress bar
    assert line.startswith("warning: ProGCL schedule 'online' has no floor")
    assert "--schedule floored" in line and "runpy" not in line
    assert _train_karate(tmp_path, "--quiet", "--schedule", "online") == ("", "")


@pytest.mark.slow  # a process of its own that processes Cora's raw files
def test_quiet_prints_nothing_while_pyg_processes_a_dataset(tmp_path, shared_data):
    root = tmp_path / "data"
    shutil.copytree(shared_data / "planetoid" / "Cora" / "raw", root / "Cora" / "raw")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}  # PyG's mute
    argv = ["train", "--dataset", "Cora", "--root", str(root), "--epochs", "1"]
    argv += ["--hidden", "8", "--proj", "8", "--probe-epochs", "5", "--threads", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "pyg_progcl", *argv, "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert (root / "Cora" / "processed").is_dir()  # PyG did process the raw files
