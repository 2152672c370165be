"""Trainer and command line: end to end, resume = uninterrupted, clear CLI errors."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

import pytest
import reference as ref
import torch
from helpers import (
    REPO,
    TINY,
    InterruptError,
    assert_matches,
    fitted_mixture,
    one_line_error,
    params,
    run_main,
    small_config,
    small_graph,
    stop_at,
    views,
)

from pyg_progcl.cli import build_loss, train, train_seed
from pyg_progcl.cli.build import CACHE_FRACTION, cache_size, cpu_block_size
from pyg_progcl.cli.checkpoint import CHECKPOINT_FORMAT, save_checkpoint
from pyg_progcl.cli.loop import machine_info as pyg_machine
from pyg_progcl.cli.presets import METHODS, get_preset
from pyg_progcl.evaluation import evaluate


@pytest.fixture(scope="module", name="small_graph")
def small_graph_fixture():
    return small_graph()


def with_mixture(loss, mixture=None):
    """``loss`` in float64 with a fitted mixture's parameters (``fitted_mixture()``)."""
    loss = loss.double()
    loss.mixture.load_state_dict((mixture or fitted_mixture()).state_dict())
    return loss


def probe_again(model, graph, config, seed):
    """The probe accuracy of ``model``'s encoder output, evaluated here."""
    model.eval()
    with torch.no_grad():
        z = model(graph.x, graph.edge_index)
    result = evaluate(
        z, graph, config.protocol, split=config.split, seed=seed, probe_epochs=config.probe_epochs
    )
    return result["accuracy"]


def test_train_writes_its_result_with_config_machine_and_history(small_graph, tmp_path):
    out = tmp_path / "res" / "result.json"
    config = small_config(epochs=6, warmup_epochs=2, eval_every=3, probe_epochs=20)
    result = train(config, small_graph, seeds=2, progress=False, output=out)
    loaded = json.loads(out.read_text())
    assert loaded == json.loads(json.dumps(result))  # the file is the returned result
    assert loaded["dataset"] == "synthetic" and loaded["method"] == "progcl-weight"
    assert loaded["config"] == config.to_dict() and loaded["seeds"] == [0, 1]
    assert loaded["versions"]["torch"] == torch.__version__
    machine = loaded["machine"]  # where the numbers come from
    assert machine["cores"] == os.cpu_count() and machine["device"] == "cpu"
    assert machine["cpu"] and machine["torch_threads"] == torch.get_num_threads()
    assert pyg_machine("auto")["device"] == "auto"  # as benchmarks name it (not resolved)
    assert loaded["epoch_time_s"] > 0
    accs = loaded["accuracies"]
    for seed, acc in zip((0, 1), accs):  # evaluated at epochs 3 and 6; the result is the last
        history = loaded["history"][str(seed)]
        assert [h["epoch"] for h in history] == [3, 6] and history[-1]["accuracy"] == acc
        assert history[-1]["loss"] == loaded["final_loss"][seed]
        mixture = loaded["mixture"][seed]  # fitted after the warm-up
        assert len(mixture["alpha"]) == 2 and mixture["true_negative"] in (0, 1)
    assert loaded["accuracy_mean"] == pytest.approx(sum(accs) / 2)
    assert loaded["accuracy_std"] == pytest.approx(abs(accs[0] - accs[1]) / 2)  # population
    assert (loaded["num_nodes"], loaded["num_edges"]) == (300, small_graph.num_edges)


@pytest.mark.slow  # end-to-end training: 2 seeds x 30 epochs, 200-epoch probes
def test_end_to_end_beats_chance(small_graph):
    result = train(small_config(), small_graph, seeds=2, progress=False)
    accs = result["accuracies"]
    assert len(accs) == 2 and min(accs) > 0.6, f"chance is 1/3, got {accs}"
    assert result["mixture"][0] is not None  # the mixture was fitted after warm-up
    assert len(result["mixture"][0]["alpha"]) == 2


@pytest.mark.parametrize("method", ["grace", "dcl", "hcl", "progcl-mix"])
def test_every_method_trains_and_reports_its_probe(method, small_graph):
    config = small_config(method, epochs=4, warmup_epochs=2, eval_every=0, probe_epochs=20)
    model, loss_fn, record = train_seed(config, small_graph, seed=1, progress=False)
    losses = torch.tensor(record["losses"])
    assert losses.shape == (4,) and torch.isfinite(losses).all()
    # the reported accuracy is the probe's on the returned encoder
    assert record["accuracy"] == probe_again(model, small_graph, config, seed=1)
    if method.startswith("progcl"):  # refitted at each epoch after the warm-up
        assert loss_fn.mixture.num_fits == 2
        assert record["mixture"]["alpha"] == loss_fn.mixture.alpha.tolist()
    else:
        assert record["mixture"] is None


def test_loss_factory_replaces_the_preset_loss(small_graph):
    from pyg_progcl import BetaMixture, ProGCLLoss

    built = []

    def factory(config):
        loss = ProGCLLoss(tau=config.tau, mixture=BetaMixture(min_beta_high=1.5))
        built.append(loss)
        return loss

    config = small_config(epochs=6, warmup_epochs=2, eval_every=0, probe_epochs=20)
    _, loss_fn, record = train_seed(config, small_graph, progress=False, loss_factory=factory)
    assert built == [loss_fn] and loss_fn.mixture.num_fits == 4  # refitted after warm-up
    assert loss_fn.mixture.beta[1 - loss_fn.mixture.true_negative_index] >= 1.5
    result = train(config, small_graph, seeds=2, progress=False, loss_factory=factory)
    assert len(built) == 3 and result["mixture"][1]["beta"] == built[-1].mixture.beta.tolist()


@pytest.mark.parametrize("schedule,fits_by_6", [("online", 2), ("floored", 2), ("frozen", 1)])
def test_resume_equals_uninterrupted(small_graph, tmp_path, schedule, fits_by_6):
    config = small_config(
        epochs=12, warmup_epochs=4, eval_every=5, probe_epochs=30, schedule=schedule
    )
    model_a, loss_a, rec_a = train_seed(config, small_graph, seed=3, progress=False)

    ckpt = tmp_path / "ckpt"
    with pytest.raises(InterruptError):
        train_seed(
            config, small_graph, seed=3, checkpoint_dir=ckpt, checkpoint_every=3,
            progress=False, callback=stop_at(8),
        )  # fmt: skip
    saved = torch.load(ckpt / "seed3.pt", weights_only=True)
    assert saved["epoch"] == 6 and saved["loss"]["mixture.num_fits"] == fits_by_6  # epochs 5, 6
    assert ("schedule.frozen_u" in saved["loss"]) == (schedule == "frozen")  # the fit epoch's views
    model_b, loss_b, rec_b = train_seed(
        config, small_graph, seed=3, checkpoint_dir=ckpt, checkpoint_every=3,
        resume=True, progress=False,
    )  # fmt: skip
    assert rec_b["accuracy"] == rec_a["accuracy"]
    assert rec_b["losses"] == rec_a["losses"]
    assert rec_b["history"] == rec_a["history"]
    for (name, p), q in zip(model_a.state_dict().items(), model_b.state_dict().values()):
        assert torch.equal(p, q), name
    for p, q in zip(loss_a.state_dict().values(), loss_b.state_dict().values()):
        assert torch.equal(p, q)
    # A finished run resumes to the same result without training again.
    _, _, rec_c = train_seed(
        config, small_graph, seed=3, checkpoint_dir=ckpt, resume=True, progress=False,
        callback=lambda *a: pytest.fail("trained again"),
    )  # fmt: skip
    assert rec_c["accuracy"] == rec_a["accuracy"]


@pytest.mark.slow  # a signal sent to the test process itself
def test_sigterm_checkpoints_the_current_epoch_and_resume_equals_uninterrupted(
    small_graph, tmp_path
):
    import signal

    from pyg_progcl.cli import TrainingInterruptedError

    config = small_config(epochs=10, warmup_epochs=4, eval_every=5, probe_epochs=30)
    original = signal.getsignal(signal.SIGTERM)
    handlers = []  # without a checkpoint folder SIGTERM keeps its handler
    _, _, rec_a = train_seed(
        config, small_graph, seed=1, progress=False,
        callback=lambda *a: handlers.append(signal.getsignal(signal.SIGTERM)),
    )  # fmt: skip
    assert handlers == [original] * 10

    def term_at_7(epoch, info):
        if epoch == 7:
            os.kill(os.getpid(), signal.SIGTERM)

    ckpt = tmp_path / "ckpt"
    with pytest.raises(TrainingInterruptedError, match="after epoch 7") as stopped:
        train_seed(
            config, small_graph, seed=1, checkpoint_dir=ckpt, checkpoint_every=5,
            progress=False, callback=term_at_7,
        )  # fmt: skip
    assert stopped.value.epoch == 7 and stopped.value.path == ckpt / "seed1.pt"
    assert torch.load(ckpt / "seed1.pt", weights_only=True)["epoch"] == 7  # not 5
    assert signal.getsignal(signal.SIGTERM) is original  # restored
    _, _, rec_b = train_seed(
        config, small_graph, seed=1, checkpoint_dir=ckpt, resume=True, progress=False
    )
    assert (rec_b["accuracy"], rec_b["losses"]) == (rec_a["accuracy"], rec_a["losses"])


def test_mixture_options_reach_the_mixture_from_config_and_command_line(
    capsys, small_graph, tmp_path
):
    from pyg_progcl.cli import build_loss

    config = small_config(epochs=8, warmup_epochs=2, eval_every=0, probe_epochs=20)
    assert build_loss(config).mixture.min_beta_high is None  # the default: no floor
    assert build_loss(config).mixture.weight_init == 0.05
    initial = small_config(mixture_weight_init=0.15)
    assert build_loss(initial).mixture.weight.tolist() == pytest.approx([0.85, 0.15])
    bounded = small_config(
        epochs=8, warmup_epochs=2, eval_every=0, probe_epochs=20, min_beta_high=50.0
    )
    _, loss_fn, _ = train_seed(bounded, small_graph, progress=False)
    mixture = loss_fn.mixture
    assert mixture.min_beta_high == 50.0 and mixture.fitted
    assert float(mixture.beta[1 - mixture.true_negative_index]) >= 50.0  # acted in the fits
    out = tmp_path / "bounded.json"
    argv = ["--min-beta-high", "1.01", "--mixture-weight-init", "0.15", "--output", str(out)]
    status, _, err = run_main(capsys, "train", *TINY, *argv)
    assert status == 0, err
    saved = json.loads(out.read_text())["config"]
    assert (saved["min_beta_high"], saved["mixture_weight_init"]) == (1.01, 0.15)
    status, _, err = run_main(capsys, "train", *TINY, "--min-beta-high", "high")
    assert status == 2 and "--min-beta-high" in err and len(err.strip().splitlines()) == 1


def test_shared_weights_reach_the_loss_from_the_command_line(capsys, tmp_path):
    from pyg_progcl.cli.train_cli import config_from_args

    out = tmp_path / "shared.json"
    argv = ["--schedule", "frozen", "--shared-weights", "true", "--output", str(out)]
    status, _, err = run_main(capsys, "train", *TINY, *argv)
    assert status == 0, err
    saved = json.loads(out.read_text())["config"]
    assert saved["shared_weights"] is True
    args = argparse.Namespace(dataset=None, method=None, config=str(out))
    config = config_from_args(args)
    # The loss of the saved config is the reference code's: frozen at the fit's views
    # (f1, f2), both directions weighted by the first direction's matrix.
    loss = with_mixture(build_loss(config))
    f1, f2 = (h.detach() for h in views(seed=5))
    loss.fit(f1, f2)
    m = fitted_mixture()
    assert_matches(
        loss,
        lambda a, b: ref.progcl_weight(
            a, b, config.tau, params(m), fit_views=(f1, f2), shared=True
        ),
        *views(),
    )
    for bad, words in ((["--shared-weights", "maybe"], "--shared-weights"),
                       (["--shared-weights", "true"], "shared_weights")):  # fmt: skip
        status, _, err = run_main(capsys, "train", *TINY, *bad)
        assert status == 2 and words in err and len(err.strip().splitlines()) == 1, err


def _stopped_at_epoch_5(config, graph, tmp_path):
    """A run interrupted at epoch 5 with checkpoints every 4 epochs: its folder and the
    payload of its checkpoint (epoch 4)."""
    ckpt = tmp_path / "ckpt"
    with pytest.raises(InterruptError):
        train_seed(
            config, graph, checkpoint_dir=ckpt, checkpoint_every=4, progress=False,
            callback=stop_at(5),
        )  # fmt: skip
    return ckpt, torch.load(ckpt / "seed0.pt", weights_only=True)


def test_checkpoints_of_another_version_are_refused_in_one_line(capsys, tmp_path):
    """A checkpoint whose config lacks a field of this version, or has one this version
    lacks (e.g. a former ``posterior_floor``), is refused: one line, no resume."""
    ckpt = tmp_path / "ckpt"
    status, _, err = run_main(capsys, "train", *TINY, "--checkpoint", str(ckpt))
    assert status == 0, err
    payload = torch.load(ckpt / "seed0.pt", weights_only=True)
    lacking = {**payload, "config": dict(payload["config"])}
    del lacking["config"]["shared_weights"]
    former = {**payload, "config": {**payload["config"], "posterior_floor": 0.5}}
    for changed, words in ((lacking, "no 'shared_weights'"), (former, "unknown 'posterior_floor'")):
        save_checkpoint(ckpt / "seed0.pt", changed)  # (sealed with a new checksum)
        argv = [*TINY, "--checkpoint", str(ckpt), "--resume"]
        status, _, err = run_main(capsys, "train", *argv)
        (line,) = err.strip().splitlines()
        assert status == 2 and "written by another version of pyg_progcl" in line, err
        assert words in line and "another checkpoint folder" in line


def test_the_floor_flags_set_the_schedule_s_one_floor():
    from pyg_progcl.cli.train_cli import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)

    def config(*argv):
        return config_from_args(parser.parse_args(list(argv)))

    online = config("--schedule", "online", "--floor", "0.5")
    assert (online.schedule, online.floor) == ("online", 0.5)
    assert config("--floor", "0.7").floor == 0.7 and config().floor is None


def test_unreadable_checkpoints_are_one_line_errors(capsys, tmp_path):
    cases = {
        "garbage": (lambda p: p.write_bytes(b"\x00not a checkpoint" * 10), "not a readable"),
        "tensor": (lambda p: torch.save(torch.ones(2), p), "a Tensor"),
        "format_1": (lambda p: torch.save({"format": 1}, p), "format 1, written by an older"),
        "no_config": (lambda p: torch.save({"format": CHECKPOINT_FORMAT}, p), "incomplete"),
    }
    for name, (write, words) in cases.items():
        (tmp_path / name).mkdir()
        write(tmp_path / name / "seed0.pt")
        argv = ["--checkpoint", str(tmp_path / name), "--resume"]
        status, _, err = run_main(capsys, "train", *TINY, *argv)
        assert status == 2 and words in err and len(err.strip().splitlines()) == 1, err


def test_resume_refuses_another_config(small_graph, tmp_path):
    config = small_config(epochs=2, warmup_epochs=1, eval_every=0, probe_epochs=10)
    train_seed(config, small_graph, checkpoint_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="another config.*tau"):
        train_seed(
            config.replace(tau=0.3), small_graph, checkpoint_dir=tmp_path, resume=True,
            progress=False,
        )  # fmt: skip


def test_variants_branch_from_a_warmup_checkpoint_as_if_run_whole(small_graph, tmp_path):
    import shutil

    config = small_config(epochs=10, warmup_epochs=6, eval_every=5, probe_epochs=30)
    variant = config.replace(
        schedule="frozen", min_beta_high=1.01, mixture_weight_init=0.15, num_samples=1500,
        shared_weights=True,
    )  # fmt: skip
    _, loss_whole, whole = train_seed(variant, small_graph, seed=4, progress=False)

    shared = tmp_path / "shared"
    with pytest.raises(InterruptError):  # the default variant, past its warm-up
        train_seed(
            config, small_graph, seed=4, checkpoint_dir=shared, checkpoint_every=4,
            progress=False, callback=stop_at(9),
        )  # fmt: skip
    assert torch.load(shared / "seed4.pt", weights_only=True)["epoch"] == 8
    with pytest.raises(ValueError, match="within the warm-up, only"):  # fitted at epoch 7
        train_seed(variant, small_graph, seed=4, checkpoint_dir=shared, resume=True)
    warmup = torch.load(shared / "seed4_warmup.pt", weights_only=True)
    assert warmup["epoch"] == 6  # kept although 6 is no multiple of checkpoint_every
    for name in ("branch", "branch_cli"):
        (tmp_path / name).mkdir()
        shutil.copy(shared / "seed4_warmup.pt", tmp_path / name / "seed4.pt")
    branch = tmp_path / "branch"
    with pytest.raises(ValueError, match="another config.*tau"):  # tau acts in the warm-up
        train_seed(
            variant.replace(tau=0.3), small_graph, seed=4, checkpoint_dir=branch,
            resume=True, progress=False,
        )  # fmt: skip
    _, loss_branch, branched = train_seed(
        variant, small_graph, seed=4, checkpoint_dir=branch, resume=True, progress=False
    )
    assert branched["losses"] == whole["losses"]
    assert branched["accuracy"] == whole["accuracy"]
    for p, q in zip(loss_whole.state_dict().values(), loss_branch.state_dict().values()):
        assert torch.equal(p, q)
    changed = ("schedule", "min_beta_high", "mixture_weight_init", "num_samples", "shared_weights")
    note = {"epoch": 6, "from": dict(zip(changed, ("floored", None, None, 2000, False)))}
    assert branched["branched"] == [note]
    result = train(
        variant, small_graph, seeds=[4], checkpoint_dir=tmp_path / "branch_cli", resume=True,
        progress=False,
    )  # fmt: skip
    assert result["branched"] == {"4": [note]} and result["accuracies"] == [whole["accuracy"]]
    grace = tmp_path / "grace"  # no mixture, no warm-up copy
    train_seed(config.replace(method="grace"), small_graph, checkpoint_dir=grace, progress=False)
    assert sorted(p.name for p in grace.iterdir()) == ["seed0.pt"]


def test_methods_of_one_warmup_branch_into_each_other_as_if_run_whole(small_graph, tmp_path):
    import shutil

    progcl = small_config(epochs=10, warmup_epochs=6, eval_every=5, probe_epochs=30)
    gca, mix = progcl.replace(method="gca"), progcl.replace(method="progcl-mix")
    _, _, gca_whole = train_seed(gca, small_graph, seed=4, progress=False)
    _, _, mix_whole = train_seed(mix, small_graph, seed=4, progress=False)
    runs = {name: tmp_path / name for name in ("progcl", "gca", "mix", "dcl", "late")}
    train_seed(progcl, small_graph, seed=4, checkpoint_dir=runs["progcl"], progress=False)
    for name in ("gca", "dcl"):
        runs[name].mkdir()
        shutil.copy(runs["progcl"] / "seed4_warmup.pt", runs[name] / "seed4.pt")
    _, _, branched = train_seed(
        gca, small_graph, seed=4, checkpoint_dir=runs["gca"], resume=True, progress=False
    )
    assert branched["losses"] == gca_whole["losses"]
    assert branched["accuracy"] == gca_whole["accuracy"]
    assert branched["branched"] == [{"epoch": 6, "from": {"method": "progcl-weight"}}]
    with pytest.raises(ValueError, match="another config.*method"):  # DCL: another loss
        train_seed(
            progcl.replace(method="dcl"), small_graph, seed=4, checkpoint_dir=runs["dcl"],
            resume=True, progress=False,
        )  # fmt: skip
    with pytest.raises(InterruptError):  # GCA's own checkpoint at epoch 4, then ProGCL-mix
        train_seed(
            gca, small_graph, seed=4, checkpoint_dir=runs["mix"], checkpoint_every=4,
            progress=False, callback=stop_at(5),
        )  # fmt: skip
    _, _, branched = train_seed(
        mix, small_graph, seed=4, checkpoint_dir=runs["mix"], resume=True, progress=False
    )
    assert branched["losses"] == mix_whole["losses"]
    assert branched["accuracy"] == mix_whole["accuracy"]
    with pytest.raises(InterruptError):  # past the warm-up the methods differ
        train_seed(
            gca, small_graph, seed=4, checkpoint_dir=runs["late"], checkpoint_every=8,
            progress=False, callback=stop_at(9),
        )  # fmt: skip
    with pytest.raises(ValueError, match="another config.*method"):
        train_seed(progcl, small_graph, seed=4, checkpoint_dir=runs["late"], resume=True)


def test_runs_extend_and_grace_trained_checkpoints_branch_into_a_longer_warmup(
    small_graph, tmp_path
):
    """A finished run continues to more epochs as if run whole; a GCA checkpoint at epoch 8
    starts a ProGCL run whose warm-up lasts 8 epochs (GCA trains as that warm-up does)."""
    progcl = small_config(epochs=10, warmup_epochs=4, eval_every=5, probe_epochs=30)
    _, loss_whole, whole = train_seed(progcl, small_graph, seed=2, progress=False)
    short = tmp_path / "short"
    train_seed(progcl.replace(epochs=6), small_graph, seed=2, checkpoint_dir=short)
    _, loss_long, extended = train_seed(
        progcl, small_graph, seed=2, checkpoint_dir=short, resume=True, progress=False
    )
    assert extended["losses"] == whole["losses"] and extended["accuracy"] == whole["accuracy"]
    for p, q in zip(loss_whole.state_dict().values(), loss_long.state_dict().values()):
        assert torch.equal(p, q)  # the mixture fitted at epochs 5, 6 was restored
    assert extended["branched"] == [{"epoch": 6, "from": {"epochs": 6}}]
    with pytest.raises(ValueError, match=r"epoch 10\).*another config.*epochs: 10 -> 8"):
        train_seed(progcl.replace(epochs=8), small_graph, seed=2, checkpoint_dir=short, resume=True)

    late = progcl.replace(warmup_epochs=8)
    _, _, late_whole = train_seed(late, small_graph, seed=2, progress=False)
    gca = tmp_path / "gca"
    gca_config = progcl.replace(method="gca", epochs=8)  # its warmup_epochs, 4, acts on nothing
    train_seed(gca_config, small_graph, seed=2, checkpoint_dir=gca, progress=False)
    with pytest.raises(ValueError, match="another config.*warmup_epochs: 4 -> 6"):
        train_seed(progcl.replace(warmup_epochs=6), small_graph, seed=2, checkpoint_dir=gca,
                   resume=True)  # fmt: skip
    _, _, branched = train_seed(
        late, small_graph, seed=2, checkpoint_dir=gca, resume=True, progress=False
    )
    assert branched["losses"] == late_whole["losses"]
    assert branched["accuracy"] == late_whole["accuracy"]
    note = {"method": "gca", "epochs": 8, "warmup_epochs": 4}
    assert branched["branched"] == [{"epoch": 8, "from": note}]


# ----------------------------------------------------------------------------- command line


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--dataset", "Kora"], "unknown dataset 'Kora'"),
        (["train", "--method", "simclr"], "invalid choice: 'simclr'"),
        (["--epochs", "-5"], "must be an integer >= 1 (got -5)"),
        (["--dataset", "Cora", "--root", "/no/such/folder"], "data root '/no/such/folder'"),
        (["--tau", "0"], "`tau` must be a finite number > 0"),
        (["--epochs", "5", "--warmup-epochs", "5"], "`warmup_epochs` must be less than"),
        (["--resume"], "--resume needs --checkpoint"),
        (["--schedule", "guarded"], "`schedule` must be one of ['floored', 'frozen', 'online']"),
        (
            ["--device", "cuda:7"] if not torch.cuda.is_available() else ["--device", "bogus"],
            "device",
        ),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_input_is_one_clear_line(capsys, argv, message):
    status, out, err = run_main(capsys, *argv)
    assert status == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and message in lines[0], err


def test_cli_overrides_none_num_neighbors_and_config_epochs(tmp_path):
    from pyg_progcl.cli.entry import build_parser
    from pyg_progcl.cli.train_cli import config_from_args

    def config(*argv):
        parser, _ = build_parser(argv[0])
        args = parser.parse_args(list(argv))
        return config_from_args(args)

    # `none` is a value, not "the preset's" (ogbn-products' preset samples 4096 seeds).
    assert config("train", "--dataset", "ogbn-products").batch_size == 4096
    assert config("train", "--dataset", "ogbn-products", "--batch-size", "none").batch_size is None
    assert config("train", "--num-samples", "none").num_samples is None
    assert config("train", "--num-neighbors", "5", "3").num_neighbors == [5, 3]
    assert config("diagnose", "--num-neighbors", "5", "3").num_neighbors == [5, 3]
    # A result file as --config with fewer --epochs keeps its warm-up fraction.
    saved = tmp_path / "photo.json"
    saved.write_text(json.dumps({"config": get_preset("Photo", "progcl-weight").to_dict()}))
    assert config("train", "--config", str(saved), "--epochs", "300").warmup_epochs == 48
    flags = ("--config", str(saved), "--epochs", "300", "--warmup-epochs", "20")
    assert config("train", *flags).warmup_epochs == 20


def test_cli_output_config_round_trip_and_resume(capsys, tmp_path):
    out1, out2, ckpt = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "ckpt"
    status, _, err = run_main(
        capsys, "train", *TINY, "--tau", "0.3", "--output", str(out1), "--checkpoint", str(ckpt)
    )
    assert status == 0, err
    first = json.loads(out1.read_text())
    assert first["config"]["tau"] == 0.3 and first["method"] == "progcl-weight"
    assert (ckpt / "seed0.pt").exists()
    # --config accepts a result file; --resume finds the finished run and reports it again.
    status, _, err = run_main(
        capsys, "--config", str(out1), "--quiet", "--output", str(out2),
        "--checkpoint", str(ckpt), "--resume",
    )  # fmt: skip
    assert status == 0, err
    second = json.loads(out2.read_text())
    assert second["config"] == first["config"]
    assert second["accuracies"] == first["accuracies"]


def _tree(root):
    """``(relative path, mode, size, mtime)`` of everything under ``root``."""
    return sorted(
        (str(p.relative_to(root)), p.stat().st_mode, p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
    )


@pytest.mark.slow  # copies, locks and processes the real Cora, then trains on it
def test_cli_loads_a_read_only_dataset_copy(capsys, readonly_root, _isolated_cache, tmp_path):
    before = _tree(readonly_root)
    out = tmp_path / "cora.json"
    argv = ["--dataset", "cora", "--root", str(readonly_root), "--method", "grace", *TINY]
    status, _, err = run_main(capsys, *argv, "--protocol", "gca", "--output", str(out))
    assert status == 0, err
    result = json.loads(out.read_text())
    assert result["dataset"] == "Cora"
    assert (result["num_nodes"], result["num_edges"]) == (2708, 10556)  # PyG's Cora
    assert _tree(readonly_root) == before  # nothing written there: PyG processed a copy
    assert list(_isolated_cache.rglob("Cora/processed/*.pt"))


@pytest.mark.slow  # two interpreters importing torch
def test_python_dash_m_subprocess(tmp_path):
    """The real entry point: a short run writes JSON; a bad flag gives one line, exit 2."""
    out = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ok = subprocess.run(
        [sys.executable, "-m", "pyg_progcl", *TINY, "--output", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert json.loads(out.read_text())["dataset"] == "synthetic"
    bad = subprocess.run(
        [sys.executable, "-m", "pyg_progcl", "--method", "nope"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # a subprocess stopped by a signal
def test_cli_sigterm_stops_after_a_checkpoint_with_one_line(tmp_path):
    import signal
    import time

    ckpt = tmp_path / "ckpt"
    argv = [*TINY, "--epochs", "2000", "--eval-every", "0", "--checkpoint", str(ckpt)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyg_progcl", *argv, "--checkpoint-every", "1"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (ckpt / "seed0.pt").exists() and proc.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    epoch = torch.load(ckpt / "seed0.pt", weights_only=True)["epoch"]
    assert 1 <= epoch < 2000 and f"after epoch {epoch};" in err and "--resume" in err


def test_diagnostics_are_tracked_into_the_results(tmp_path):
    from pyg_progcl.cli.datasets import synthetic_graph
    from pyg_progcl.diagnostics import DiagnosticsTracker, false_negative_rate

    config = get_preset(
        "synthetic", "progcl-weight", epochs=6, warmup_epochs=2, diagnose_every=3, probe_epochs=20
    )
    graph = synthetic_graph(num_nodes=120, seed=1)
    tracker = DiagnosticsTracker(graph, every=3, seed=0)  # what the trainer records, by hand
    result = train(config, graph, progress=False, output=tmp_path / "r.json", callback=tracker)
    tracked = result["diagnostics"]["0"]
    assert [entry["epoch"] for entry in tracked] == [3, 6]
    assert [{**entry, "epoch": float(entry["epoch"])} for entry in tracked] == tracker.history
    assert tracked[-1]["fn_rate"] == pytest.approx(false_negative_rate(graph.y))
    assert "loss_auc_posterior" in tracked[-1]  # the loss's mixture, fitted after epoch 2
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["diagnostics"] == json.loads(json.dumps(result["diagnostics"]))


def test_progress_bar_shows_the_false_negative_component():
    from pyg_progcl.cli.loop import progress_postfix
    from pyg_progcl.losses import ProGCLLoss

    loss = ProGCLLoss(tau=0.5)
    assert progress_postfix(7.0, loss) == "loss=7.0000 bmm=warm-up"
    torch.manual_seed(0)
    h = torch.randn(40, 8)
    loss.fit(h, h + 0.1 * torch.randn(40, 8))
    text = progress_postfix(7.0, loss)
    fn = 1 - loss.mixture.true_negative_index
    assert f"w_FN={loss.mixture.weight[fn].item():.3f}" in text
    assert f"beta_FN={loss.mixture.beta[fn].item():.2f}" in text
    assert "degenerate" not in text
    loss.schedule.degenerated.fill_(True)  # as after a degenerate refit: floored at 0.5
    assert progress_postfix(7.0, loss, degenerate=3).endswith(" degenerate=3 floor=0.5")
    online = ProGCLLoss(tau=0.5, schedule="online", mixture=loss.mixture)
    assert progress_postfix(7.0, online, degenerate=3).endswith(" degenerate=3")


@pytest.mark.parametrize("method", METHODS)
def test_each_method_builds_the_loss_of_its_formula(method):
    """The built loss equals the dense reference of the method's formula (τ, τ⁺, β and
    K from the config), values and gradients; ProGCL is GRACE's loss until fitted."""
    config = get_preset("Amazon-Photo", method, num_mix=1)  # K = 1: the reference's mix
    loss = build_loss(config).double()
    h1, h2 = views()
    tau, m = config.tau, fitted_mixture()
    if method.startswith("progcl"):
        torch.testing.assert_close(loss(h1, h2), ref.grace(h1, h2, tau), rtol=1e-10, atol=1e-10)
        loss = with_mixture(loss, m)
    formulas = {
        "grace": lambda a, b: ref.grace(a, b, tau),
        "gca": lambda a, b: ref.grace(a, b, tau),
        "dcl": lambda a, b: ref.dcl(a, b, tau, config.tau_plus),
        "hcl": lambda a, b: ref.hcl(a, b, tau, config.tau_plus, config.beta),
        "progcl-weight": lambda a, b: ref.progcl_weight(a, b, tau, params(m)),
        "progcl-mix": lambda a, b: ref.progcl_mix_one(a, b, tau, params(m)),
    }
    assert_matches(loss, formulas[method], h1, h2)


def test_progcl_options_reach_the_built_loss():
    config = get_preset("Amazon-Photo", "progcl-weight", schedule="frozen", min_beta_high=1.01)
    loss = with_mixture(build_loss(config))
    assert loss.mixture.min_beta_high == 1.01
    f1, f2 = (h.detach() for h in views(seed=5))
    loss.fit(f1, f2)  # frozen: the weights of these views, for every later step
    m = fitted_mixture()
    assert_matches(
        loss, lambda a, b: ref.progcl_weight(a, b, config.tau, params(m), fit_views=(f1, f2)),
        *views(),
    )  # fmt: skip


@pytest.mark.parametrize("method", METHODS)
def test_each_method_builds_its_augmenters_from_the_config(method):
    from pyg_progcl.augment import AdaptiveEdgeDrop, AdaptiveFeatureMask, EdgeDrop, FeatureMask
    from pyg_progcl.cli import build_augmentations

    config = get_preset("Amazon-Photo", method)
    assert config.pe1 != config.pf1 and (config.pe1, config.pf1) != (config.pe2, config.pf2)
    adaptive = config.augmentation != "uniform"  # GCA's, with the config's centrality
    kinds = (AdaptiveEdgeDrop, AdaptiveFeatureMask) if adaptive else (EdgeDrop, FeatureMask)
    expected = [(config.pe1, config.pf1), (config.pe2, config.pf2)]
    augmentations = build_augmentations(config)
    assert len(augmentations) == 2
    for aug, (pe, pf) in zip(augmentations, expected):
        edge, feature = aug.augmenters
        assert type(edge) is kinds[0] and type(feature) is kinds[1]
        assert (edge.p, feature.p) == (pe, pf)
        if adaptive:
            assert edge.centrality == feature.centrality == config.augmentation
            assert edge.threshold == feature.threshold == config.aug_threshold


def test_on_the_cpu_the_loss_s_row_blocks_fit_the_last_level_cache():
    cache = cache_size()
    if cache is None:
        pytest.skip("the CPU's last-level cache is not reported here")
    side = math.isqrt(cache // 4)  # (the largest float32 N×N within the cache)
    assert cpu_block_size(side) is None  # (the loss's own plan: the dense path)
    for n in (side + 1, 4 * side):
        block = cpu_block_size(n)
        assert block * n * 4 <= CACHE_FRACTION * cache < (block + 1) * n * 4
        assert cpu_block_size(n, itemsize=8) == block // 2
    config, n = get_preset("synthetic", "progcl-weight"), 4 * side
    assert config.block_size is None
    assert build_loss(config, n, "cpu").block_size == cpu_block_size(n)
    assert build_loss(config, n, "meta").block_size is None  # (not a CPU)
    assert build_loss(config).block_size is None  # (no graph given)
    assert build_loss(config.replace(block_size=7), n, "cpu").block_size == 7
    for other in ({"num_negatives": 5}, {"batch_size": 64}):
        assert build_loss(config.replace(**other), n, "cpu").block_size is None


def test_build_loss_passes_compile_blocks_to_the_loss():
    config = get_preset("synthetic", "progcl-mix")
    assert build_loss(config, 50_000, "cpu", compile_blocks=True).compile_blocks is True
    assert build_loss(config, 50_000, "cpu").compile_blocks is False


def test_compile_blocks_without_a_compiler_is_one_line(capsys):
    import torch._inductor.config as inductor

    with inductor.patch({"cpp.cxx": ("/nonexistent/c++",)}):
        status, out, err = run_main(capsys, "--compile-blocks", "--block-size", "8", *TINY)
    one_line_error(status, err, "--compile-blocks needs a C++ compiler")
    assert not out


@pytest.mark.slow
def test_compile_blocks_trains_in_compiled_row_blocks(capsys, tmp_path):
    from torch._dynamo.utils import counters

    results = {}
    for flags in ([], ["--compile-blocks"]):
        counters.clear()
        output = tmp_path / f"{len(flags)}.json"
        argv = ["--block-size", "64", "--warmup-epochs", "1", "--output", str(output), *TINY]
        status, _, err = run_main(capsys, *flags, *argv)
        assert status == 0, err
        results[bool(flags)] = json.loads(output.read_text())
        assert (counters["stats"]["unique_graphs"] > 0) == bool(flags)  # (compiled or not)
    plain, compiled = (results[key]["final_loss"] for key in (False, True))
    assert compiled == pytest.approx(plain, rel=1e-4)
