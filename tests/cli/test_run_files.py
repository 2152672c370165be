"""A run's files: devices and outputs checked before training, checkpoints refused with one
line when incomplete, corrupted or foreign, one run per checkpoint folder, and runs killed
at any moment (SIGKILL, also inside a checkpoint's write) resume to the uninterrupted result."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO, TINY, one_line_error, run_main, small_config, small_graph

from pyg_progcl.cli import train, train_seed
from pyg_progcl.cli.checkpoint import CHECKPOINT_FORMAT, save_checkpoint
from pyg_progcl.cli.files import LOCK_NAME
from pyg_progcl.cli.loop import resolve_device
from pyg_progcl.io.files import TEMP_PREFIX

TESTS = Path(__file__).resolve().parent
#: A run of 8 epochs that checkpoints at epochs 2, 3 (the warm-up's end: two files), 4, 6, 8.
SMALL = [
    "--epochs", "8", "--warmup-epochs", "3", "--checkpoint-every", "2", "--eval-every", "4",
    "--hidden", "16", "--proj", "16", "--probe-epochs", "20", "--quiet", "--threads", "1",
]  # fmt: skip


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ----------------------------------------------------------------------------- devices


@pytest.mark.parametrize("device", ["mps", "meta", "xla", "gpu", "cpu:x", "cuda:99"])
def test_unsupported_devices_are_one_line_before_anything_runs(capsys, device):
    status, _, err = run_main(capsys, "train", *TINY, "--device", device)
    one_line_error(status, err, repr(device), "use cpu, auto")
    with pytest.raises(ValueError, match="use cpu, auto"):
        resolve_device(device)
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


# ----------------------------------------------------------------------------- outputs


def _no_training(monkeypatch):
    """Makes any training (or data loading) fail the test."""
    import pyg_progcl.cli.loop as loop

    def trained(*args, **kwargs):
        pytest.fail("trained before the outputs were checked")

    monkeypatch.setattr(loop, "train_seed", trained)
    monkeypatch.setattr(loop, "load_dataset", trained)


def test_unwritable_outputs_fail_before_training(capsys, tmp_path, monkeypatch):
    _no_training(monkeypatch)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    (tmp_path / "a_folder").mkdir()
    cases = [
        (["--output", str(blocker / "r.json")], "is a file, not a folder"),
        (["--output", str(blocker / "deeper" / "r.json")], "is a file, not a folder"),
        (["--output", str(tmp_path / "a_folder")], "is a folder, not a file"),
        (["--checkpoint", str(blocker)], "is a file, not a folder"),
        (["--checkpoint", str(blocker / "ckpt")], "is a file, not a folder"),
        (["--checkpoint", str(blocker / "ckpt"), "--resume"], "is a file, not a folder"),
    ]
    from pyg_progcl.cli.entry import build_parser

    flags = build_parser("train")[1]["train"]._option_string_actions
    for flag in ("--save-embeddings", "--save-model"):  # (where the command has them)
        if flag in flags:
            cases.append(([flag, str(blocker / "x.pt")], "is a file, not a folder"))
    for argv, words in cases:
        status, _, err = run_main(capsys, "train", *TINY, *argv)
        one_line_error(status, err, argv[0], words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "a_folder"]
    with pytest.raises(ValueError, match="output .* is a file, not a folder"):
        train(small_config(), output=blocker / "r.json", progress=False)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_output_folders_fail_before_training(capsys, tmp_path, monkeypatch):
    _no_training(monkeypatch)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        for argv in (["--output", str(locked / "r.json")], ["--checkpoint", str(locked / "c")]):
            status, _, err = run_main(capsys, "train", *TINY, *argv)
            one_line_error(status, err, argv[0])
    finally:
        locked.chmod(0o700)


# ----------------------------------------------------------------------------- checkpoints


@pytest.fixture(scope="module", name="checkpoint")
def checkpoint_fixture(tmp_path_factory):
    """A finished 3-epoch run's checkpoint folder (``TINY``) and its bytes."""
    folder = tmp_path_factory.mktemp("ckpt")
    from pyg_progcl.cli import main

    assert main(["train", *TINY, "--checkpoint", str(folder)]) == 0
    return folder / "seed0.pt", (folder / "seed0.pt").read_bytes()


def _edited(key):
    def edit(path, raw):
        payload = torch.load(path, weights_only=True)
        del payload[key]
        torch.save(payload, path)

    return edit


def _edited_config(path, raw):
    payload = torch.load(path, weights_only=True)
    payload["config"]["hidden"] = 32
    torch.save(payload, path)


def _resealed_config(path, raw):
    payload = torch.load(path, weights_only=True)
    payload["config"]["hidden"] = 32  # (a program that writes valid checkpoints)
    save_checkpoint(path, payload)


def _truncated(path, raw):
    path.write_bytes(raw[: len(raw) * 2 // 3])


def _bit_flipped(path, raw):
    """One bit of the model's largest weight flipped, where it lies in the file."""
    weights = torch.load(path, weights_only=True)["model"].values()
    weight = max(weights, key=lambda t: t.numel())
    where = raw.find(weight.numpy().tobytes())
    assert where > 0 and weight.numel() > 100
    data = bytearray(raw)
    data[where + weight.numel() * 2] ^= 0x10
    path.write_bytes(bytes(data))


def _old_format(path, raw):
    payload = torch.load(path, weights_only=True)
    payload["format"] = 1  # (format 1 had no checksum)
    del payload["checksum"]
    torch.save(payload, path)


@pytest.mark.parametrize(
    "damage,words",
    [
        (_edited("optimizer"), "incomplete checkpoint (no 'optimizer' entry)"),
        (_edited("checksum"), "incomplete checkpoint (no 'checksum' entry)"),
        (_edited_config, "corrupted or was edited"),
        (_resealed_config, "its model does not fit this run's"),
        (_truncated, "truncated, corrupted or not a checkpoint); resume from an intact copy"),
        (_bit_flipped, "corrupted or was edited"),
        (_old_format, "format 1, written by an older version"),
    ],
)
def test_damaged_checkpoints_are_refused_with_one_line(capsys, tmp_path, checkpoint, damage, words):
    path, raw = checkpoint
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "seed0.pt").write_bytes(raw)
    damage(folder / "seed0.pt", raw)
    flags = ["--hidden", "32"] if damage is _resealed_config else []
    status, _, err = run_main(
        capsys, "train", *TINY, *flags, "--checkpoint", str(folder), "--resume"
    )
    one_line_error(status, err, str(folder / "seed0.pt"), words)
    if damage is _resealed_config:
        assert "size mismatch" in err


def test_checkpoints_carry_their_format_and_checksum(checkpoint):
    from pyg_progcl.cli.checkpoint import payload_checksum, read_checkpoint

    path, _ = checkpoint
    payload = read_checkpoint(path)
    assert payload["format"] == CHECKPOINT_FORMAT == 3
    assert payload["checksum"] == payload_checksum(payload) and len(payload["checksum"]) == 64
    assert payload["record"]["wall_time_s"] > 0


def test_resume_without_a_checkpoint_says_so_unless_quiet(capsys, tmp_path):
    loud = [a for a in TINY if a != "--quiet"]
    for folder in (tmp_path / "missing", tmp_path / "empty"):
        if folder.name == "empty":
            folder.mkdir()
        argv = [*loud, "--checkpoint", str(folder), "--resume"]
        status, _, err = run_main(capsys, "train", *argv)
        note = f"pyg_progcl train: note: no checkpoint in {folder}; starting from epoch 0"
        assert status == 0 and err.splitlines()[0] == note, err
        assert (folder / "seed0.pt").exists()
    argv = [*TINY, "--checkpoint", str(tmp_path / "quiet"), "--resume"]
    assert run_main(capsys, "train", *argv) == (0, "", "")


def test_resume_to_more_epochs_keeps_the_derived_warmup(capsys, tmp_path):
    """The synthetic preset's warm-up is half its epochs: 3 of 6, then 4 of 8; extending a
    6-epoch run to 8 keeps its warm-up of 3, as if run whole with --warmup-epochs 3."""
    common = ["--hidden", "16", "--proj", "16", "--probe-epochs", "20", "--quiet"]
    whole, part = tmp_path / "whole.json", tmp_path / "part.json"
    ckpt = str(tmp_path / "ckpt")
    status, _, err = run_main(
        capsys, *common, "--epochs", "8", "--warmup-epochs", "3", "--output", str(whole)
    )
    assert status == 0, err
    assert run_main(capsys, *common, "--epochs", "6", "--checkpoint", ckpt)[0] == 0
    status, _, err = run_main(
        capsys, *common, "--epochs", "8", "--checkpoint", ckpt, "--resume", "--output", str(part)
    )
    assert status == 0 and "another config" not in err, err
    a, b = json.loads(whole.read_text()), json.loads(part.read_text())
    assert b["config"]["warmup_epochs"] == 3
    assert (b["final_loss"], b["accuracies"]) == (a["final_loss"], a["accuracies"])
    assert b["branched"] == {"0": [{"epoch": 6, "from": {"epochs": 6}}]}


def test_a_resumed_run_reports_the_time_of_every_part(tmp_path):
    config = small_config(epochs=8, warmup_epochs=3, eval_every=0, probe_epochs=10)
    graph = small_graph()

    def slow_start(epoch, info):
        if epoch <= 3:
            time.sleep(0.25)  # within the part that the checkpoint of epoch 4 covers
        if epoch == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_seed(config, graph, checkpoint_dir=tmp_path, checkpoint_every=4, callback=slow_start)
    first = torch.load(tmp_path / "seed0.pt", weights_only=True)["record"]["wall_time_s"]
    assert first >= 0.75
    result = train(config, graph, seeds=1, checkpoint_dir=tmp_path, resume=True, progress=False)
    assert result["wall_time_s"] > first


# ----------------------------------------------------------------------------- one run per folder


def _hold_lock(folder: Path, seconds: float) -> subprocess.Popen:
    """Another process holding ``folder``'s lock."""
    code = (
        "import importlib.util, sys, time\n"
        f"spec = importlib.util.spec_from_file_location('f', {str(REPO / 'pyg_progcl/cli/files.py')!r})\n"
        "files = importlib.util.module_from_spec(spec); spec.loader.exec_module(files)\n"
        f"with files.lock_folder({str(folder)!r}):\n"
        "    print('locked', flush=True)\n"
        f"    time.sleep({seconds})\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


@pytest.mark.slow  # another process holds the lock
def test_a_second_run_on_a_checkpoint_folder_ends_at_once_naming_the_first(capsys, tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / f"{TEMP_PREFIX}stale.tmp").write_text("x")  # a killed run's: the holder's to remove
    holder = _hold_lock(folder, 60)
    try:
        tic = time.monotonic()
        status, _, err = run_main(capsys, "train", *TINY, "--checkpoint", str(folder))
        one_line_error(status, err, "in use by another run", f"(process {holder.pid})")
        assert time.monotonic() - tic < 10 and not (folder / "seed0.pt").exists()
        assert temporaries(folder) == [f"{TEMP_PREFIX}stale.tmp"]
    finally:
        holder.kill()
        holder.wait()
    status, _, err = run_main(capsys, "train", *TINY, "--checkpoint", str(folder))
    assert status == 0, err  # the lock died with its holder; its temporary file is removed
    assert sorted(p.name for p in folder.iterdir()) == ["seed0.pt", "seed0_warmup.pt"]


@pytest.mark.slow  # two command lines started side by side
def test_two_runs_started_on_one_folder_one_runs_the_other_names_it(tmp_path):
    argv = [*TINY, "--epochs", "2000", "--eval-every", "0", "--checkpoint", str(tmp_path / "c")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "pyg_progcl", *argv, "--output", str(tmp_path / "r.json")],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 120
        while all(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, "neither run ended within 120 s"
            time.sleep(0.05)
        loser = next(p for p in procs if p.poll() is not None)
        winner = next(p for p in procs if p is not loser)
        one_line_error(loser.returncode, loser.stderr.read(), f"(process {winner.pid})")
        while not (tmp_path / "c" / "seed0.pt").exists():  # still training, checkpointing
            assert winner.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        winner.send_signal(signal.SIGTERM)
        assert winner.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        for p in procs:
            p.kill()
            p.wait()


# ----------------------------------------------------------------------------- killed runs


def _drive(spec_file: str) -> None:
    """Runs in a subprocess (torch imported once): the command lines of ``spec_file`` in
    forked children, some SIGKILLed (inside their ``kill_at_save``-th ``torch.save``, within
    their ``kill_at_write``-th text file write, or ``kill_after`` seconds after they start);
    writes each one's exit code (``-9``: killed) and seconds to the file's ``report``."""
    torch.set_num_threads(1)
    from pyg_progcl.cli.entry import build_parser, main

    build_parser("train")  # (imports the command's modules before forking)
    main(["train", "--epochs", "2", "--hidden", "8", "--proj", "8", "--probe-epochs", "5", "-q"])
    spec = json.loads(Path(spec_file).read_text())
    if spec.get("chaos"):
        report = _chaos(**spec["chaos"])
    else:
        report = [_fork_main(**run) for run in spec["runs"]]
    Path(spec["report"]).write_text(json.dumps(report))


def _fork_main(argv, kill_at_save=None, kill_at_write=None, kill_after=None, log=None):
    tic = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: the command line, dying where asked
        status = 1
        try:
            _die_inside(kill_at_save, kill_at_write, log)
            from pyg_progcl.cli import main

            status = main(argv)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(status)
    done, status = os.waitpid(pid, 0 if kill_after is None else os.WNOHANG)
    while not done:
        if time.monotonic() - tic >= kill_after:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)
        done, status = os.waitpid(pid, os.WNOHANG)
    return [os.waitstatus_to_exitcode(status), time.monotonic() - tic]


def _die_inside(kill_at_save, kill_at_write, log) -> None:
    """Patches ``torch.save`` and ``Path.write_text`` to write two thirds of their file,
    then SIGKILL the process, at their n-th call; ``log``: a file listing what was saved."""
    real_save, real_write = torch.save, Path.write_text
    calls = {"save": 0, "write": 0}

    def save(obj, f, *args, **kwargs):
        calls["save"] += 1
        path = getattr(f, "name", f)  # (a path, or a file object)
        if log:
            with open(log, "a") as fh:
                print(Path(path).name, obj.get("epoch") if isinstance(obj, dict) else None, file=fh)
        real_save(obj, f, *args, **kwargs)
        if hasattr(f, "flush"):
            f.flush()
        if calls["save"] == kill_at_save:
            _cut_and_die(path)

    def write_text(self, text, *args, **kwargs):
        calls["write"] += 1
        result = real_write(self, text, *args, **kwargs)
        if calls["write"] == kill_at_write:
            _cut_and_die(self)
        return result

    torch.save, Path.write_text = save, write_text


def _cut_and_die(path) -> None:
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:
        fh.truncate(size * 2 // 3)
    os.kill(os.getpid(), signal.SIGKILL)


def _run_driver(tmp_path: Path, spec: dict, timeout: float = 300) -> list:
    spec = {**spec, "report": str(tmp_path / "report.json")}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    code = f"import sys; sys.path[:0] = [{str(TESTS)!r}, {str(TESTS.parent)!r}, {str(REPO)!r}]; import test_run_files"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code + "; test_run_files._drive(sys.argv[1])", str(tmp_path / "spec.json")],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return json.loads((tmp_path / "report.json").read_text()), done.stderr


def _same_runs(ref: Path, other: Path) -> None:
    """Two runs' results and checkpoints (main and warm-up) are equal."""
    a, b = (json.loads((f / "r.json").read_text()) for f in (ref, other))
    for key in ("accuracies", "final_loss", "history", "mixture", "config"):
        assert a[key] == b[key], key
    for name in ("seed0.pt", "seed0_warmup.pt"):
        x, y = (torch.load(f / "ckpt" / name, weights_only=True) for f in (ref, other))
        assert x["epoch"] == y["epoch"]
        for key in ("model", "optimizer", "loss"):
            assert _equal_states(x[key], y[key]), (name, key)
    assert temporaries(other / "ckpt") == [] and temporaries(other) == []
    assert not (other / "ckpt" / LOCK_NAME).exists()


def _equal_states(x, y) -> bool:
    if isinstance(x, torch.Tensor):
        return torch.equal(x, y)
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_equal_states(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(_equal_states(a, b) for a, b in zip(x, y))
    return x == y


def _argv(folder: Path, *extra) -> list:
    folder.mkdir(parents=True, exist_ok=True)  # (an output's folder must exist)
    return [
        "train",
        *SMALL,
        "--checkpoint",
        str(folder / "ckpt"),
        "--output",
        str(folder / "r.json"),
        *extra,
    ]


@pytest.mark.slow  # processes killed inside their writes
def test_a_kill_inside_any_write_resumes_to_the_uninterrupted_result(tmp_path):
    ref = tmp_path / "ref"
    runs = [{"argv": _argv(ref), "log": str(tmp_path / "saves.log")}]
    saves = 6  # epoch 2, the warm-up's copy of epoch 3, epoch 3, 4, 6, 8
    for k in range(1, saves + 1):
        folder = tmp_path / f"k{k}"
        runs.append({"argv": _argv(folder), "kill_at_save": k})
        runs.append({"argv": _argv(folder, "--resume")})
    # the result file: a run killed while writing it (resuming the finished run, which
    # writes nothing else) leaves the previous one
    runs.append({"argv": _argv(tmp_path / "json", "--seed", "1")})
    runs.append({"argv": _argv(tmp_path / "json", "--seed", "1", "--resume"), "kill_at_write": 1})
    report, _ = _run_driver(tmp_path, {"runs": runs})
    log = (tmp_path / "saves.log").read_text().split()
    assert log[1::2] == ["2", "3", "3", "4", "6", "8"]
    assert [n.startswith(TEMP_PREFIX) for n in log[::2]] == [True] * saves  # unique names
    codes = [code for code, _ in report]
    assert codes == [0, *[-9, 0] * saves, 0, -9], report
    for k in range(1, saves + 1):
        _same_runs(ref, tmp_path / f"k{k}")
    result = json.loads((tmp_path / "json" / "r.json").read_text())  # whole
    assert result["seeds"] == [1]


def _chaos(argv, kills, seed, reference_argv):
    """An uninterrupted run; then ``argv`` (with ``--resume``) ``kills`` times, each
    SIGKILLed at a random moment, and once more to its end."""
    rng = random.Random(seed)
    reference = _fork_main(reference_argv)
    checkpoint = Path(argv[argv.index("--checkpoint") + 1]) / "seed0.pt"
    attempts = []
    while sum(code == -9 for code, *_ in attempts) < kills:
        code, seconds = _fork_main(argv, kill_after=rng.uniform(0, reference[1] / 6))
        epoch = torch.load(checkpoint, weights_only=True)["epoch"] if checkpoint.exists() else 0
        attempts.append([code, seconds, epoch])
        assert len(attempts) < 10 * kills, attempts
    return {"reference": reference, "attempts": attempts, "final": _fork_main(argv)}


@pytest.mark.slow  # a checkpointing run SIGKILLed at 20+ random moments
def test_a_run_killed_at_random_moments_resumes_to_the_uninterrupted_result(tmp_path):
    common = [
        "train", "--epochs", "40", "--warmup-epochs", "20", "--checkpoint-every", "1",
        "--eval-every", "10", "--hidden", "16", "--proj", "16", "--probe-epochs", "20",
        "--quiet", "--threads", "1",
    ]  # fmt: skip

    def argv(folder):
        folder.mkdir(parents=True, exist_ok=True)  # (an output's folder must exist)
        return [*common, "--checkpoint", str(folder / "ckpt"), "--output", str(folder / "r.json")]

    chaos = {"argv": argv(tmp_path / "chaos") + ["--resume"], "kills": 20, "seed": 0}
    chaos["reference_argv"] = argv(tmp_path / "ref")
    report, err = _run_driver(tmp_path, {"chaos": chaos}, timeout=600)
    codes = [code for code, *_ in report["attempts"]]
    assert report["reference"][0] == 0 and report["final"][0] == 0, report
    assert set(codes) <= {0, -9} and codes.count(-9) == 20, report
    assert len({epoch for *_, epoch in report["attempts"]}) >= 5, report  # killed all along
    _same_runs(tmp_path / "ref", tmp_path / "chaos")
    ref, chaos = (json.loads((tmp_path / f / "r.json").read_text()) for f in ("ref", "chaos"))
    # the time of every part counted, not only the last's
    assert chaos["wall_time_s"] > max(0.5 * ref["wall_time_s"], report["final"][1])
    assert len(chaos["epoch_time_s_per_seed"]) == 1
