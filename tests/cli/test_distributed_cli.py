"""torch.distributed through the command line: ``train --distributed`` under torchrun
against one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from helpers import REPO

from pyg_progcl.minibatch import pyg_can_sample

WORLD = 2
TIMEOUT = 120  # the workers' own collectives time out after 60 s


PYG_CAN_SAMPLE = pyg_can_sample()


def _torchrun(tmp_path, nproc, *args):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc-per-node={nproc}", "-m", "pyg_progcl", "train", "--distributed", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


TINY = ["--epochs", "3", "--warmup-epochs", "1", "--batch-size", "100", "--probe-epochs", "50"]


@pytest.mark.slow
def test_torchrun_trains_and_only_rank_zero_writes(tmp_path):
    run = _torchrun(tmp_path, 2, *TINY, "--output", "out.json", "--checkpoint", "ckpt")
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "out.json"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["seed0.pt", "seed0_warmup.pt"]
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["world_size"] == 2 and result["config"]["batch_size"] == 100
    assert run.stdout.count("accuracy") == 1  # the summary line, from rank 0 only


@pytest.mark.slow
def test_one_rank_equals_the_plain_mini_batch_run(tmp_path):
    run = _torchrun(tmp_path, 1, *TINY, "--output", "one.json", "--quiet")
    assert run.returncode == 0, run.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    plain = [sys.executable, "-m", "pyg_progcl", "train", *TINY, "--output", "plain.json", "-q"]
    subprocess.run(plain, cwd=tmp_path, env=env, check=True, timeout=300)
    one, ref = (json.loads((tmp_path / f).read_text()) for f in ("one.json", "plain.json"))
    assert one["final_loss"] == ref["final_loss"] and one["accuracies"] == ref["accuracies"]
    assert one["history"] == ref["history"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["--schedule", "frozen", "--batch-size", "100"], "schedule='frozen'"),
        ([], "set --batch-size"),
    ],
)
def test_a_bad_setup_ends_every_rank_with_one_error_line(tmp_path, args, message):
    tic = time.monotonic()
    run = _torchrun(tmp_path, 2, "--method", "progcl-weight", "--epochs", "2", *args)
    assert time.monotonic() - tic < 60
    assert run.returncode != 0
    errors = [line for line in run.stderr.splitlines() if "error:" in line and message in line]
    assert len(errors) == 2, run.stderr[-3000:]  # one line from each rank
    assert not list(tmp_path.iterdir())


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ranks_given(tmp_path, *per_rank: list[str], timeout: int = 240) -> list[tuple[int, str]]:
    """``train --distributed`` in one process per rank, rank ``r`` given ``per_rank[r]``
    (as a launcher that passes each rank its own command line would); ``(exit status,
    stderr)`` by rank. The processes are killed where they outlive ``timeout``."""
    port = str(_free_port())
    processes = []
    for rank, args in enumerate(per_rank):
        env = {
            **os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "RANK": str(rank),
            "LOCAL_RANK": str(rank), "WORLD_SIZE": str(len(per_rank)),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "PYG_PROGCL_DIST_TIMEOUT": "200",
        }  # fmt: skip
        cmd = [sys.executable, "-m", "pyg_progcl", "train", "--distributed", "-q", *args]
        processes.append(
            subprocess.Popen(cmd, cwd=tmp_path, env=env, text=True, stderr=subprocess.PIPE)
        )
    results = []
    for process in processes:
        try:
            _, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            pytest.fail(f"rank {processes.index(process)} did not exit within {timeout} s")
        results.append((process.returncode, err))
    return results


def _graph_files(tmp_path) -> None:
    """``g.npz`` and ``other/g.npz``: the same graph but for one feature value."""
    import numpy as np

    from pyg_progcl.datasets import synthetic_graph

    g = synthetic_graph(num_nodes=120)
    arrays = {"x": g.x.numpy(), "edge_index": g.edge_index.numpy(), "y": g.y.numpy()}
    np.savez(tmp_path / "g.npz", **arrays)
    arrays["x"] = arrays["x"].copy()
    arrays["x"][5, 3] += 1
    (tmp_path / "other").mkdir()
    np.savez(tmp_path / "other" / "g.npz", **arrays)


RANK_TINY = ["--epochs", "2", "--warmup-epochs", "1", "--probe-epochs", "20", "--data", "g.npz"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "rank0, rank1, message",
    [
        (["--lr", "0.001"], ["--lr", "0.1"], "rank 1: --lr 0.1, rank 0: 0.001"),
        # Before: both ranks printed the loss's row-count error and, now and then, never
        # exited (a gloo thread waiting for the interpreter lock the exiting thread held).
        (["--batch-size", "50"], ["--batch-size", "30"], "rank 1: --batch-size 30, rank 0: 50"),
        # Before: rank 1 died of SIGABRT (gloo: collective mismatch).
        (["--method", "grace"], ["--method", "progcl-weight"], "rank 1: --method progcl-weight"),
        ([], ["--data", "other/g.npz"], "rank 1: the graph's x "),
        ([], ["--data", "missing/g.npz"], "graph file 'missing/g.npz' does not exist"),
    ],
)
def test_ranks_that_disagree_stop_with_one_line_on_every_rank(tmp_path, rank0, rank1, message):
    # Before: another --lr or graph file on rank 1 trained with exit status 0.
    _graph_files(tmp_path)
    common = [*RANK_TINY, "--batch-size", "50", "--output", "out.json"]
    results = _ranks_given(tmp_path, common + rank0, common + rank1)
    for rank, (status, err) in enumerate(results):
        lines = err.strip().splitlines()
        assert status == 2 and len(lines) == 1 and "error:" in lines[0], (rank, err)
        assert message in lines[0], (rank, err)
    if "missing" in message:  # the rank that failed says why; the other names it
        assert "rank 1 failed: graph file 'missing/g.npz'" in results[0][1]
    assert not (tmp_path / "out.json").exists()
