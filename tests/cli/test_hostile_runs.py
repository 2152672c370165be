"""A hostile tester's holes in the ``train`` command's files and runs: outputs that collide
with each other or with an input, a second run on a checkpoint folder while the first is
still writing its results or after it finished, a checkpoint resumed on another graph,
checkpoints edited and sealed anew, and damaged dataset files."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_read_only, make_writable
from helpers import REPO, TINY, one_line_error, run_main

from pyg_progcl.cli import train_seed
from pyg_progcl.cli.checkpoint import payload_checksum
from pyg_progcl.cli.files import LOCK_NAME

#: TINY without a probe before the last epoch (the phases of a run's end are its own).
RUN = [*TINY, "--eval-every", "0"]


def _no_training(monkeypatch):
    """Makes loading a graph or training fail the test."""
    import pyg_progcl.cli.loop as loop
    import pyg_progcl.cli.train_cli as train_cli

    def trained(*args, **kwargs):
        pytest.fail("loaded or trained before the outputs were checked")

    for module, name in [(loop, "train_seed"), (loop, "load_dataset"), (train_cli, "read_graph")]:
        monkeypatch.setattr(module, name, trained)
    monkeypatch.setattr(train_cli, "load_dataset", trained, raising=False)


def _write_graph(path: Path, num_nodes: int, seed: int = 0, shift: float = 0.0) -> Path:
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(
        path,
        edge_index=rng.integers(0, num_nodes, size=(2, 4 * num_nodes)),
        x=(rng.random((num_nodes, 5)) + shift).astype(np.float32),
        y=rng.integers(0, 3, num_nodes),
    )
    return path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# ----------------------------------------------------------------------------- 1. outputs


def test_colliding_outputs_are_refused_before_anything_runs(capsys, tmp_path, monkeypatch):
    _no_training(monkeypatch)
    monkeypatch.chdir(tmp_path)
    Path("kept.json").write_text("{}")
    Path("alias.json").symlink_to("kept.json")
    os.link("kept.json", "hard.json")
    cases = [
        (["--save-embeddings", "c.pt", "--save-model", "c.pt"], "--save-model 'c.pt' is also --save-embeddings"),
        (["--output", "c.pt", "--save-model", "./c.pt"], "--save-model './c.pt' is also --output"),
        (["--output", "e.npy", "--save-embeddings", "sub/../e.npy"], "is also --output"),
        (["--output", "alias.json", "--save-model", "kept.json"], "is also --output"),  # symlink
        (["--output", "hard.json", "--save-model", "kept.json"], "is also --output"),  # hard link
    ]  # fmt: skip
    Path("sub").mkdir()
    for argv, words in cases:
        status, _, err = run_main(capsys, "train", *TINY, *argv)
        one_line_error(status, err, words, "give each output its own file")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "alias.json",
        "hard.json",
        "kept.json",
        "sub",
    ]


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(capsys, tmp_path, monkeypatch):
    graph = _write_graph(tmp_path / "g.npz", 40)
    graph_pt = tmp_path / "g.pt"  # (not read: the outputs are checked first)
    graph_pt.write_bytes(b"a graph")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"tau": 0.4}))
    ckpt = tmp_path / "ck"
    status, _, err = run_main(capsys, "train", *RUN, "--checkpoint", str(ckpt))
    assert status == 0, err
    before = {**_snapshot(tmp_path), **_snapshot(ckpt)}
    _no_training(monkeypatch)
    cases = [
        (["--data", str(graph), "--output", str(graph)], "--output", "is the --data graph file"),
        (["--data", str(graph_pt), "--save-embeddings", str(tmp_path / "." / "g.pt")],
         "--save-embeddings", "is the --data graph file"),
        (["--data", str(graph_pt), "--save-model", str(graph_pt)], "is the --data graph file"),
        (["--config", str(config), "--output", str(config)], "--output", "is the --config file"),
        (["--checkpoint", str(ckpt), "--resume", "--save-model", str(ckpt / "seed0.pt")],
         "--save-model", "is seed0.pt of the checkpoint folder"),
        (["--checkpoint", str(ckpt), "--resume", "--output", str(ckpt / "seed0_warmup.pt")],
         "--output", "is seed0_warmup.pt of the checkpoint folder"),
        (["--checkpoint", str(ckpt), "--seed", "1", "--output", str(ckpt / "seed1.pt")],
         "--output", "is seed1.pt of the checkpoint folder"),  # (one this run would write)
        (["--checkpoint", str(ckpt), "--seed", "1", "--output", str(ckpt / "seed0.pt")],
         "--output", "is seed0.pt of the checkpoint folder"),  # (another run's)
    ]  # fmt: skip
    for argv, *words in cases:
        status, _, err = run_main(capsys, "train", *TINY, *argv)
        one_line_error(status, err, *words)
    assert {**_snapshot(tmp_path), **_snapshot(ckpt)} == before


def test_embed_and_diagnose_refuse_an_output_that_is_an_input(capsys, tmp_path):
    model, graph = tmp_path / "m.pt", tmp_path / "g.pt"
    model.write_bytes(b"a model")
    graph.write_bytes(b"a graph")
    for output, words in [(model, "is the --model file"), (graph, "is the --data graph file")]:
        argv = ["embed", "--model", str(model), "--data", str(graph), "--output", str(output)]
        status, _, err = run_main(capsys, *argv)
        one_line_error(status, err, words)
    out = tmp_path / "diag"
    out.mkdir()
    (out / "diagnostics.json").write_text(json.dumps({"config": {"tau": 0.4}}))
    argv = ["diagnose", "--config", str(out / "diagnostics.json"), "--out", str(out), "--no-plot"]
    status, _, err = run_main(capsys, *argv)
    one_line_error(status, err, "diagnostics.json", "is the --config file")
    assert model.read_bytes() == b"a model" and graph.read_bytes() == b"a graph"
    assert json.loads((out / "diagnostics.json").read_text()) == {"config": {"tau": 0.4}}


# ----------------------------------------------------------------------------- 2. one run


def test_a_run_holds_its_folder_from_before_the_graph_loads_to_its_last_output(
    capsys, tmp_path, monkeypatch
):
    """Every step from the graph's load to the model file runs while the lock file names
    this process."""
    import pyg_progcl.cli.loop as loop
    import pyg_progcl.cli.train_cli as train_cli

    ckpt = tmp_path / "ck"
    held = []

    def holding(module, name):
        real = getattr(module, name)

        def step(*args, **kwargs):
            lock = ckpt / LOCK_NAME
            held.append((name, lock.exists() and lock.read_text().strip() == str(os.getpid())))
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, step)

    for module, name in [(loop, "load_dataset"), (train_cli, "load_dataset"), (loop, "write_json"),
                         (train_cli, "save_embeddings"), (train_cli, "save_model")]:  # fmt: skip
        holding(module, name)
    argv = [*RUN, "--checkpoint", str(ckpt), "--output", str(tmp_path / "r.json")]
    argv += ["--save-embeddings", str(tmp_path / "z.npy"), "--save-model", str(tmp_path / "m.pt")]
    status, _, err = run_main(capsys, "train", *argv)
    assert status == 0, err
    assert held and all(locked for _, locked in held), held
    names = [name for name, _ in held]
    assert "load_dataset" in names
    assert names[-3:] == ["write_json", "save_embeddings", "save_model"]
    assert not (ckpt / LOCK_NAME).exists()  # (released at exit)


#: Runs the command line with one step (``module.name``) held until the file ``argv[1]``
#: exists, after printing "held" (a real process, in its probe, JSON or output phase).
_HOLD = """
import importlib, pathlib, sys, time
module = importlib.import_module("pyg_progcl.cli." + {module!r})
real = getattr(module, {name!r})
def held(*args, **kwargs):
    print("held", flush=True)
    deadline = time.monotonic() + 120
    while not pathlib.Path(sys.argv[1]).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return real(*args, **kwargs)
setattr(module, {name!r}, held)
from pyg_progcl.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow  # two processes
@pytest.mark.parametrize(
    "module,name",
    [("run", "evaluate_embeddings"), ("loop", "write_json"), ("train_cli", "save_model")],
)
def test_a_second_run_ends_at_once_while_the_first_writes_its_results(tmp_path, module, name):
    ckpt, go = tmp_path / "ck", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = [*RUN, "--checkpoint", str(ckpt), "--output", str(tmp_path / "r1.json")]
    first += ["--save-model", str(tmp_path / "m.pt")]
    code = _HOLD.format(module=module, name=name)
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(go), "train", *first],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        checkpoints = _snapshot(ckpt)
        second = [*RUN, "--checkpoint", str(ckpt), "--output", str(tmp_path / "r2.json")]
        tic = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pyg_progcl", "train", *second],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        one_line_error(done.returncode, done.stderr, "in use by another run", str(holder.pid))
        assert time.monotonic() - tic < 60 and not (tmp_path / "r2.json").exists()
        assert _snapshot(ckpt) == checkpoints
        go.touch()
        assert holder.wait(timeout=120) == 0, holder.stderr.read()
    finally:
        holder.kill()
        holder.wait()
    result = json.loads((tmp_path / "r1.json").read_text())
    assert result["seeds"] == [0] and (tmp_path / "m.pt").exists()
    assert torch.load(ckpt / "seed0.pt", weights_only=True)["epoch"] == 3


def test_a_fresh_run_on_a_finished_run_s_folder_is_refused(capsys, tmp_path, small_graph_tiny):
    ckpt, out = tmp_path / "ck", tmp_path / "r.json"
    status, _, err = run_main(
        capsys, "train", *RUN, "--checkpoint", str(ckpt), "--output", str(out)
    )
    assert status == 0, err
    before, result = _snapshot(ckpt), out.read_bytes()
    status, _, err = run_main(
        capsys, "train", *RUN, "--checkpoint", str(ckpt), "--output", str(out)
    )
    one_line_error(
        status, err, "already holds seed0.pt, seed0_warmup.pt", "--resume", "another folder"
    )
    assert _snapshot(ckpt) == before and out.read_bytes() == result
    # another seed starts in the folder; --resume continues the finished run (no training)
    status, _, err = run_main(capsys, "train", *RUN, "--checkpoint", str(ckpt), "--seed", "1")
    assert status == 0, err
    status, _, err = run_main(capsys, "train", *RUN, "--checkpoint", str(ckpt), "--resume")
    assert status == 0, err
    assert (ckpt / "seed0.pt").read_bytes() == before["seed0.pt"]
    # the library too
    from pyg_progcl.cli.presets import get_preset

    config = get_preset("synthetic", "grace", epochs=2, hidden=8, proj=8, probe_epochs=5)
    train_seed(config, small_graph_tiny, checkpoint_dir=tmp_path / "lib", progress=False)
    with pytest.raises(ValueError, match="already holds seed0.pt of an earlier run"):
        train_seed(config, small_graph_tiny, checkpoint_dir=tmp_path / "lib", progress=False)


@pytest.fixture(name="small_graph_tiny")
def small_graph_tiny_fixture():
    from pyg_progcl.cli.datasets import synthetic_graph

    return synthetic_graph(num_nodes=60, num_classes=3)


# ----------------------------------------------------------------------------- 3. the graph


def test_a_checkpoint_resumes_and_diagnoses_only_on_its_own_graph(capsys, tmp_path):
    d1 = _write_graph(tmp_path / "d1" / "g.npz", 40)
    d2 = _write_graph(tmp_path / "d2" / "g.npz", 90)
    d3 = _write_graph(tmp_path / "d3" / "g.npz", 40, shift=0.01)  # same size, other features
    ckpt = tmp_path / "ck"
    status, _, err = run_main(capsys, "train", *RUN, "--data", str(d1), "--checkpoint", str(ckpt))
    assert status == 0, err
    before = _snapshot(ckpt)
    for other, words in [
        (d2, "trained on another graph: 40 nodes, 160 edges, 5 features, not this run's (90 nodes"),
        (d3, "the same size (40 nodes, 160 edges, 5 features) but other contents"),
    ]:
        argv = [*RUN, "--epochs", "5", "--data", str(other), "--checkpoint", str(ckpt), "--resume"]
        status, _, err = run_main(capsys, "train", *argv)
        one_line_error(status, err, str(ckpt / "seed0.pt"), words, "another checkpoint folder")
        argv = ["diagnose", "--checkpoint", str(ckpt), "--data", str(other), "--no-plot", "-q"]
        status, _, err = run_main(capsys, *argv, "--out", str(tmp_path / "diag"))
        one_line_error(status, err, "trained on another graph", f"--data {other}'s")
    assert _snapshot(ckpt) == before and not (tmp_path / "diag").exists()
    argv = [*RUN, "--epochs", "5", "--data", str(d1), "--checkpoint", str(ckpt), "--resume"]
    assert run_main(capsys, "train", *argv)[0] == 0


@pytest.mark.slow  # a 1M-edge graph in memory
def test_the_graph_record_of_a_big_graph_takes_well_under_a_second():
    from torch_geometric.data import Data

    from pyg_progcl.cli.checkpoint import graph_fingerprint

    gen = torch.Generator().manual_seed(0)
    n, e = 100_000, 1_000_000
    data = Data(
        x=torch.rand(n, 256, generator=gen),
        edge_index=torch.randint(0, n, (2, e), generator=gen),
        y=torch.randint(0, 10, (n,), generator=gen),
    )
    tic = time.perf_counter()
    record = graph_fingerprint(data)
    assert time.perf_counter() - tic < 1.0
    assert {k: record[k] for k in ("num_nodes", "num_edges", "num_features")} == {
        "num_nodes": n, "num_edges": e, "num_features": 256,
    }  # fmt: skip
    data.edge_index[1, -1] = (data.edge_index[1, -1] + 1) % n  # one id in the last bytes
    assert graph_fingerprint(data)["hash"] != record["hash"]


# ----------------------------------------------------------------------------- 4. edited files


@pytest.fixture(scope="module", name="finished")
def finished_fixture(tmp_path_factory):
    """A finished 3-epoch run's checkpoint folder (``RUN``) and its checkpoint's bytes."""
    from pyg_progcl.cli import main

    folder = tmp_path_factory.mktemp("finished")
    assert main(["train", *RUN, "--checkpoint", str(folder)]) == 0
    return (folder / "seed0.pt").read_bytes()


def _set(*keys, value=None, drop=False):
    """An edit of the payload entry at ``keys``: set to ``value`` or removed."""

    def edit(payload):
        *parents, last = keys
        entry = payload
        for key in parents:
            entry = entry[key]
        if drop:
            del entry[last]
        else:
            entry[last] = value

    return edit


def _moment_of_another_shape(payload):
    state = payload["optimizer"]["state"][0]
    state["exp_avg"] = torch.zeros(3, 3)


@pytest.mark.parametrize(
    "edit,words",
    [
        (_set("epoch", value=-5), "its epoch -5 is not a whole number from 0 to 3"),
        (_set("epoch", value="3"), "its epoch '3' is not a whole number"),
        (_set("epoch", value=99), "its epoch 99"),
        (_set("epoch", value=True), "its epoch True"),
        (_set("rng_ranks", 0, "torch", value=torch.zeros(7, dtype=torch.uint8)),
         "its rng_ranks holds an invalid generator state"),
        (_set("rng_ranks", 0, "python", value=[3, [1, 2], None]), "invalid generator state"),
        (_set("rng_ranks", 0, "numpy", drop=True), "invalid generator state"),
        (_set("rng_ranks", value=[]), "its rng_ranks is not a list of generator states"),
        (_set("record", "losses", drop=True), "its record has no list of losses"),
        (_set("record", "losses", value=[1.0]), "one number of losses per epoch (3)"),
        (_set("record", "seed", value="0"), "its record has no seed"),
        (_set("config", "hidden", value="16"), "its config is invalid"),
        (_set("model", value=[1, 2]), "its model is not a state dict"),
        (_set("optimizer", "param_groups", value="x"), "its optimizer is not"),
        (_moment_of_another_shape, "its optimizer does not fit this run's (exp_avg of shape"),
        (_set("graph", "num_nodes", value=-1), "its graph is not a graph's record"),
        (_set("record", drop=True), "incomplete checkpoint (no 'record' entry)"),
    ],
)  # fmt: skip
def test_edited_checkpoints_sealed_anew_are_refused_in_one_line(
    capsys, tmp_path, finished, edit, words
):
    folder = tmp_path / "ck"
    folder.mkdir()
    path = folder / "seed0.pt"
    payload = torch.load(io.BytesIO(finished), weights_only=True)
    if "graph" not in payload:  # (a checkpoint of a version without the graph's record)
        payload["graph"] = {"num_nodes": 1, "num_edges": 0, "num_features": 1, "hash": ""}
    edit(payload)
    payload["checksum"] = payload_checksum(payload)  # (sealed anew: the checksum passes)
    torch.save(payload, path)
    argv = [*RUN, "--checkpoint", str(folder), "--resume", "--output", str(tmp_path / "r.json")]
    status, _, err = run_main(capsys, "train", *argv)
    one_line_error(status, err, str(path), words)
    assert not (tmp_path / "r.json").exists()
    if edit is _moment_of_another_shape:  # (only a run's optimiser tells)
        return
    argv = ["diagnose", "--checkpoint", str(path), "--no-plot", "-q", "--out", str(tmp_path / "d")]
    status, _, err = run_main(capsys, *argv)
    one_line_error(status, err, str(path), words.split(" (")[0])


# ----------------------------------------------------------------------------- 5. datasets


def _cora_root(shared_data: Path, where: Path, grouped: bool = False) -> Path:
    folder = where / "planetoid" / "Cora" if grouped else where / "Cora"
    shutil.copytree(shared_data / "planetoid" / "Cora", folder, copy_function=shutil.copyfile)
    make_writable(where)
    return folder


CORA = ["--dataset", "Cora", "--epochs", "1", "--hidden", "16", "--proj", "16"]
CORA += ["--probe-epochs", "5", "--quiet", "--threads", "1"]


def test_damaged_dataset_files_name_the_file_and_what_to_delete(capsys, tmp_path, shared_data):
    root = tmp_path / "root"
    cora = _cora_root(shared_data, root)
    (cora / "processed" / "data.pt").write_bytes(b"garbage")
    status, _, err = run_main(capsys, "train", *CORA, "--root", str(root))
    processed = cora.resolve() / "processed"
    one_line_error(status, err, f"dataset file '{processed / 'data.pt'}' is damaged",
                   f"rm -r '{processed}'", "rebuilt from the raw files")  # fmt: skip
    shutil.rmtree(processed)  # as advised
    assert run_main(capsys, "train", *CORA, "--root", str(root))[0] == 0
    # a truncated raw file (no processed files): delete the dataset folder
    shutil.rmtree(processed)
    raw = cora / "raw" / "ind.cora.graph"
    raw.write_bytes(raw.read_bytes()[:1000])
    status, _, err = run_main(capsys, "train", *CORA, "--root", str(root))
    one_line_error(status, err, f"dataset file '{raw.resolve()}' is damaged",
                   f"rm -r '{cora.resolve()}'", "download it anew")  # fmt: skip


def test_a_damaged_file_of_a_read_only_root_is_named_in_the_root(capsys, tmp_path, shared_data):
    root = tmp_path / "root"
    cora = _cora_root(shared_data, root, grouped=True)
    shutil.rmtree(cora / "processed")
    raw = cora / "raw" / "ind.cora.allx"
    raw.write_bytes(raw.read_bytes()[:3000])
    make_read_only(root)
    try:
        status, _, err = run_main(capsys, "train", *CORA, "--root", str(root))
        one_line_error(status, err, f"dataset file '{raw}' is damaged", "read-only here",
                       "replace it with an intact copy")  # fmt: skip
    finally:
        make_writable(root)


# ----------------------------------------------------------------------------- model sizes


@pytest.mark.parametrize(
    "overrides",
    [{}, {"activation": "prelu", "num_layers": 3}, {"encoder": "mlp", "hidden": 32, "proj": 16}],
)
def test_the_weight_count_is_the_built_models(overrides):
    from pyg_progcl.cli import get_preset
    from pyg_progcl.cli.build import build_model, weight_count

    config = get_preset("synthetic", "grace", **overrides)
    built = sum(p.numel() for p in build_model(config, 37).parameters())
    assert weight_count(config, 37) == built


def test_a_model_too_large_to_train_is_refused_before_training(capsys, tmp_path):
    """Before: ``--hidden 100000000000`` gave a 49-line allocator traceback."""
    out = tmp_path / "out.json"
    argv = ["train", "--hidden", "100000000000", "--epochs", "1", "--output", str(out)]
    status, _, err = run_main(capsys, *argv)
    one_line_error(status, err, "--hidden 100000000000", "training it needs", "EB")
    assert not out.exists()


# ----------------------------------------------------------------------------- full disks


@pytest.fixture
def tiny_disk(tmp_path):
    """A 32 KB tmpfs at ``tmp_path / "tiny"`` (skipped where mounting is not allowed)."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=32k", "tmpfs", str(folder)]
    try:
        done = subprocess.run(mount, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        done = None
    if done is None or done.returncode != 0:
        pytest.skip("needs to mount a small tmpfs (root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def test_a_full_disk_ends_in_one_line_after_the_results_are_written(capsys, tmp_path, tiny_disk):
    """Before: a checkpoint or --save-model on a full disk ended with rc 1 and a 47-line
    "inline_container.cc ... unexpected pos" traceback, and a checkpoint's run lost its
    result file."""
    out = tmp_path / "out.json"
    checkpoint = ["--checkpoint", str(tiny_disk / "ck"), "--checkpoint-every", "2"]
    status, _, err = run_main(capsys, "train", *TINY, *checkpoint, "--output", str(out))
    one_line_error(status, err, "no space left on device", str(tiny_disk / "ck" / "seed0.pt"))
    result = json.loads(out.read_text())  # training went on; its result is written
    assert result["accuracies"] and "no space left" in result["unsaved_checkpoints"][0]
    out.unlink()
    model = tiny_disk / "m.pt"
    status, _, err = run_main(
        capsys, "train", *TINY, "--save-model", str(model), "--output", str(out)
    )
    one_line_error(status, err, "no space left on device", str(model))
    assert json.loads(out.read_text())["accuracies"] and not model.exists()
    assert [p.name for p in tiny_disk.iterdir()] == ["ck"]  # no temporary file left
