"""Long runs a user can plan: the ``estimate:`` line, the note on the slower path, progress
inside an epoch and an embedding, and the command line's threads."""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers import run_main
from torch_geometric.data import Data

import pyg_progcl.cli.planning as planning
import pyg_progcl.cli.threads as threads
from pyg_progcl import GCNEncoder, GRACEModel, InfoNCELoss
from pyg_progcl.cli.presets import get_preset
from pyg_progcl.minibatch import embed_minibatch, minibatch_epoch, neighbor_loader

CPU = torch.device("cpu")
SMALL = ["--hidden", "8", "--proj", "8", "--probe-epochs", "5", "--threads", "1"]


def fake_clock(monkeypatch, step: float = 1000.0) -> None:
    """Every reading of the epochs' clock is ``step`` seconds after the last."""
    ticks = itertools.count(0.0, step)
    monkeypatch.setattr(planning, "epoch_clock", lambda: next(ticks))


def dense_graph(n=1000, degree=20, f=8, seed=0) -> Data:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    edge_index = torch.randint(0, n, (2, n * degree), generator=g)
    return Data(x=torch.randn(n, f, generator=g), edge_index=edge_index, y=y)


# ----------------------------------------------------------------------------- estimate


def test_estimate_line_gives_the_projection_and_the_cheaper_options():
    # Amazon-Photo's 2500 epochs at 34 s each: about 24 hours.
    line = planning.estimate_line(34.0, 2500, 1, 2500, 2497, CPU, sampled=5.2)
    assert line.startswith("estimate: 2500 epochs x 1 seed at 34 s/epoch take about 23.6 h")
    assert "--epochs 105 (60 min)" in line  # the epochs that fit in an hour
    assert "--num-negatives 1024 (5.2 s/epoch measured: 3.6 h)" in line
    assert "--device cuda" in line and "\n" not in line
    assert "--seeds 1" not in line  # one seed already
    three = planning.estimate_line(34.0, 2500, 3, 7500, 7497, CPU)
    assert "x 3 seeds" in three and "--seeds 1 (23.6 h)" in three and "--epochs 35" in three
    assert planning.estimate_line(1.0, 3000, 1, 3000, 2997, CPU) is None  # 50 minutes
    # A sampled epoch that is not faster is not offered.
    assert "num-negatives" not in planning.estimate_line(34.0, 2500, 1, 2500, 2497, CPU, 40.0)


def test_run_estimate_times_the_first_epochs_and_speaks_once(monkeypatch):
    config = get_preset("synthetic", "grace", epochs=1000)
    lines = []
    # Epochs of 10 s: timed over the intervals after epochs 1 to 4; of 100 s: the first
    # interval already lasts a minute.
    for step, spoke_after, to_go in ((10.0, 4, "5.5 h"), (100.0, 2, "55.5 h")):
        fake_clock(monkeypatch, step)
        lines.clear()
        estimate = planning.RunEstimate(config, 2, CPU, lines.append)
        for epoch in range(1, spoke_after + 1):
            assert lines == []
            estimate(epoch, {})
        for epoch in range(spoke_after + 1, 10):
            estimate(epoch, {})
        assert len(lines) == 1, lines
        total = planning.format_duration(2000 * step)
        head = f"estimate: 1000 epochs x 2 seeds at {step:.3g} s/epoch take about {total}"
        assert lines[0].startswith(head) and f"({to_go} to go)" in lines[0]
        assert f"--epochs {int(3600 // (2 * step))} (60 min)" in lines[0]
    # A run of less than an hour says nothing; a resumed run counts only its own epochs.
    for epochs, first in ((30, 1), (1000, 990)):
        lines.clear()
        estimate = planning.RunEstimate(config.replace(epochs=epochs), 1, CPU, lines.append)
        for epoch in range(first, first + 5):
            estimate(epoch, {})
        assert lines == []


def test_sampled_epoch_time_leaves_the_run_as_it_was(monkeypatch):
    monkeypatch.setattr(planning, "NUM_NEGATIVES", 8)
    data = dense_graph(n=60, degree=4)
    config = get_preset("synthetic", "grace", hidden=8, proj=8)
    model = GRACEModel(GCNEncoder(8, 8), 8, 8)
    before = [p.detach().clone() for p in model.parameters()]
    rng = torch.get_rng_state()
    seconds = planning.sampled_epoch_time(model, data, config, CPU)
    assert seconds is not None and seconds > 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert torch.equal(rng, torch.get_rng_state())


def test_train_prints_the_estimate_unless_quiet(capsys, monkeypatch):
    fake_clock(monkeypatch)
    status, _, err = run_main(capsys, "train", "--epochs", "8", *SMALL)
    assert status == 0, err
    lines = [line for line in err.splitlines() if "estimate:" in line]
    assert len(lines) == 1 and lines[0].startswith("estimate: 8 epochs x 1 seed at 1000 s/epoch")
    assert "--epochs 3" in lines[0]
    fake_clock(monkeypatch)
    status, out, err = run_main(capsys, "train", "--epochs", "8", *SMALL, "--quiet")
    assert status == 0 and "estimate" not in err + out


@pytest.mark.slow  # (the run with --compile-blocks compiles)
def test_train_offers_compile_blocks_in_the_estimate_of_the_cpu_s_row_blocks(
    capsys, monkeypatch, tmp_path
):
    from pyg_progcl.cli.build import cpu_block_size

    n = 4000
    if cpu_block_size(n) is None:
        pytest.skip("the loss takes the dense path on this CPU's cache")
    torch.save(dense_graph(n=n, degree=5), tmp_path / "g.pt")
    argv = ["train", "--data", str(tmp_path / "g.pt"), "--epochs", "5", "--warmup-epochs", "1"]
    for flags, offered in (([], True), (["--compile-blocks"], False)):
        fake_clock(monkeypatch)
        status, _, err = run_main(capsys, *argv, *SMALL, "--num-samples", "2000", *flags)
        lines = [line for line in err.splitlines() if "estimate:" in line]
        assert status == 0 and len(lines) == 1, err
        offer = f"--compile-blocks (each row block of {cpu_block_size(n)} through torch.compile"
        assert (offer in lines[0]) == offered, lines[0]


def test_diagnose_prints_the_estimate_unless_quiet(capsys, monkeypatch, tmp_path):
    fake_clock(monkeypatch)
    argv = ["diagnose", "--epochs", "6", "--out", str(tmp_path), "--no-plot", *SMALL[:4]]
    argv += ["--threads", "1", "--num-pairs", "500", "--num-anchors", "100"]
    status, _, err = run_main(capsys, *argv)
    assert status == 0, err
    lines = [line for line in err.splitlines() if "estimate:" in line]
    assert len(lines) == 1 and "6 epochs x 2 encoders" in lines[0]
    assert "--encoder gcn" in lines[0]
    # The two runs' progress bars say which encoder trains.
    assert "synthetic/progcl-weight seed 0" in err and "synthetic/progcl-weight MLP seed 0" in err
    fake_clock(monkeypatch)
    status, out, err = run_main(capsys, *argv, "--quiet")
    assert status == 0 and "estimate" not in err + out


# ----------------------------------------------------------------------------- the path


def test_coverage_of_a_batchs_sampled_subgraph():
    no_edges = torch.zeros(1000)
    assert planning.coverage(no_edges, 100, [10, 10]) == pytest.approx(0.1)
    dense = torch.full((1000,), 50.0)
    assert planning.coverage(dense, 100, [10, 10]) > 0.99  # 100 -> 1000 -> 10,000 draws
    sparse = torch.full((100_000,), 2.0)
    assert planning.coverage(sparse, 64, [10, 10]) < 0.01


def test_path_note_says_why_batches_are_expected_to_be_slower():
    data = dense_graph()
    config = get_preset("synthetic", "grace", batch_size=100)
    note = planning.path_note(data, config, CPU, free=10**12)
    assert note.startswith("note: with --batch-size 100 and 10-10 neighbour sampling each of ")
    assert "the 10 batches reaches about 100% of the 1,000 nodes" in note
    assert "--num-negatives 1024" in note and "\n" not in note
    assert planning.path_note(data, config, CPU, free=1000) is None  # no room for it
    assert planning.path_note(data, config.replace(batch_size=None), CPU, free=10**12) is None
    # One batch of every node encodes the graph once, as the full graph does: no note.
    assert planning.path_note(data, config.replace(batch_size=1000), CPU, free=10**12) is None


def test_compile_blocks_is_offered_where_the_cpu_s_row_blocks_run():
    import torch._inductor.config as inductor

    from pyg_progcl.cli.build import cpu_block_size

    n = 100_000
    block = cpu_block_size(n)
    if block is None:
        pytest.skip("the CPU's last-level cache is not reported here")
    config, graph = get_preset("synthetic", "progcl-weight"), Data(num_nodes=n)
    offer = planning.compile_offer(graph, config, CPU)
    assert offer.startswith(f"--compile-blocks (each row block of {block} through torch.compile")
    for other in ({"block_size": 500}, {"num_negatives": 64}, {"batch_size": 256}):
        assert planning.compile_offer(graph, config.replace(**other), CPU) is None
    assert planning.compile_offer(Data(num_nodes=100), config, CPU) is None  # (dense path)
    with inductor.patch({"cpp.cxx": ("/nonexistent/c++",)}):  # (nothing to compile with)
        assert planning.compile_offer(graph, config, CPU) is None
    line = planning.estimate_line(100.0, 100, 1, 100, 99, CPU, offers=[offer])
    assert f"; faster: --epochs 36 (60 min), {offer}, a GPU" in line
    assert planning.estimate_line(1.0, 100, 1, 100, 99, CPU, offers=[offer]) is None  # (short)


def test_train_notes_the_slower_path(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(planning, "free_memory", lambda device: 10**12)
    torch.save(dense_graph(n=600, degree=10), tmp_path / "g.pt")
    argv = ["train", "--data", str(tmp_path / "g.pt"), "--batch-size", "200", "--epochs", "1"]
    status, _, err = run_main(capsys, *argv, *SMALL)
    assert status == 0, err
    assert "note: with --batch-size 200 and 10-10 neighbour sampling" in err
    status, out, err = run_main(capsys, *argv, *SMALL, "--quiet")
    assert status == 0 and "note" not in err + out


# ----------------------------------------------------------------------------- progress


def test_minibatch_epoch_reports_every_batch():
    data = dense_graph(n=100, degree=4)
    model = GRACEModel(GCNEncoder(8, 8), 8, 8)
    optimizer = torch.optim.Adam(model.parameters())
    loader = neighbor_loader(data, [5, 5], batch_size=30, shuffle=True)
    calls = []
    minibatch_epoch(model, InfoNCELoss(), loader, optimizer, progress=lambda *a: calls.append(a))
    assert calls == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]  # (the last batch of 10, too)


@pytest.mark.parametrize("num_neighbors", [None, [5, 5]])
def test_embed_minibatch_reports_every_batch(num_neighbors):
    data = dense_graph(n=100, degree=4)
    model = GRACEModel(GCNEncoder(8, 8), 8, 8)
    calls = []
    embed_minibatch(model, data, 40, num_neighbors, progress=lambda *a: calls.append(a))
    total = 6 if num_neighbors is None else 3  # 3 batches in each of 2 layers, or one pass
    assert calls == [(i, total) for i in range(total + 1)]


def test_command_line_shows_batches_done(capsys, tmp_path):
    status, _, err = run_main(capsys, "train", "--batch-size", "200", "--epochs", "2", *SMALL)
    assert status == 0, err
    assert "batch 4/4 [" in err and ("batch/s]" in err or "s/batch]" in err)  # 800 nodes
    torch.save(dense_graph(n=100, degree=4), tmp_path / "g.pt")
    argv = ["train", "--data", str(tmp_path / "g.pt"), "--epochs", "1", *SMALL, "--quiet"]
    assert run_main(capsys, *argv, "--save-model", str(tmp_path / "m.pt"))[0] == 0
    argv = ["embed", "--model", str(tmp_path / "m.pt"), "--data", str(tmp_path / "g.pt")]
    argv += ["--output", str(tmp_path / "z.npy"), "--batch-size", "40", "--threads", "1"]
    status, _, err = run_main(capsys, *argv)
    assert status == 0, err
    assert "embedding: batch 6/6 [" in err  # 3 batches in each of 2 layers


# ----------------------------------------------------------------------------- threads


def test_threads_default_to_the_cores_other_processes_leave_free():
    assert threads.choose_threads(2, 2, 0.2) == (2, None)  # a quiet machine: torch's
    threads_, reason = threads.choose_threads(2, 2, 2.7)
    assert threads_ == 1 and reason == "the machine is busy: load average 2.7 on 2 cores"
    assert threads.choose_threads(16, 16, 6.0)[0] == 10
    assert threads.choose_threads(2, 2, None) == (2, None)  # load unknown
    assert threads.choose_threads(2, 2, 0.0, small_graph=True)[0] == 1
    assert threads.choose_threads(1, 1, 5.0) == (1, None)


@pytest.mark.parametrize("command", ["train", "diagnose", "embed"])
def test_every_command_takes_threads_and_says_what_it_chose(capsys, monkeypatch, tmp_path, command):
    torch.save(dense_graph(n=100, degree=4), tmp_path / "g.pt")
    monkeypatch.setattr(threads, "_load", lambda: 7.5)
    monkeypatch.setattr(threads, "_cores", lambda: 4)
    run_main(capsys, "train", "--data", str(tmp_path / "g.pt"), *SMALL[:6], "--epochs", "1",
             "--quiet", "--save-model", str(tmp_path / "m.pt"))  # fmt: skip
    argv = {
        "train": ["train", "--data", str(tmp_path / "g.pt"), "--epochs", "1", *SMALL[:6]],
        "diagnose": ["diagnose", "--data", str(tmp_path / "g.pt"), "--out", str(tmp_path / "d"),
                     "--no-plot", "--num-pairs", "500"],
        "embed": ["embed", "--model", str(tmp_path / "m.pt"), "--data", str(tmp_path / "g.pt"),
                  "--output", str(tmp_path / "z.npy")],
    }[command]  # fmt: skip
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(4)
        status, _, err = run_main(capsys, *argv)
        assert status == 0, err
        assert torch.get_num_threads() == 1
        expected = "threads: 1 of torch's 4 (the machine is busy: load average 7.5 on 4 cores"
        assert expected in err
        torch.set_num_threads(4)
        status, _, err = run_main(capsys, *argv, "--threads", "3")
        assert status == 0 and torch.get_num_threads() == 3 and "threads:" not in err
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("command", ["train", "diagnose", "embed"])
def test_a_failing_command_prints_its_error_alone_on_a_busy_machine(
    capsys, monkeypatch, tmp_path, command
):
    # The threads line comes once the run is under way, not before an error line.
    monkeypatch.setattr(threads, "_load", lambda: 7.5)
    monkeypatch.setattr(threads, "_cores", lambda: 4)
    (tmp_path / "bad.pt").write_bytes(b"not a graph")
    torch.save(dense_graph(n=100, degree=4), tmp_path / "g.pt")
    run_main(capsys, "train", "--data", str(tmp_path / "g.pt"), *SMALL[:6], "--epochs", "1",
             "--quiet", "--save-model", str(tmp_path / "m.pt"))  # fmt: skip
    bad = str(tmp_path / "bad.pt")
    argv = {
        "train": ["train", "--data", bad, "--epochs", "1"],
        "diagnose": ["diagnose", "--data", bad, "--out", str(tmp_path / "d"), "--no-plot"],
        "embed": ["embed", "--model", str(tmp_path / "m.pt"), "--data", bad, "--output",
                  str(tmp_path / "z.npy")],
    }[command]  # fmt: skip
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(4)
        status, _, err = run_main(capsys, *argv)
    finally:
        torch.set_num_threads(before)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
