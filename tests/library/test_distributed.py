"""torch.distributed: 2 gloo processes spawned once for this module (``dist_worker.py``)
against one process; and the torchrun command."""

from __future__ import annotations

import os
import pickle
import re
import time

import pytest
import torch
import torch.multiprocessing as mp
from dist_worker import LOSSES, OWN_LOSSES, ROWS, own_loss_weights, run_rank, train_steps
from helpers import views

import pyg_progcl.minibatch.sampling as sampling
from pyg_progcl.distributed import DistributedLoss
from pyg_progcl.losses import InfoNCELoss
from pyg_progcl.minibatch import pyg_can_sample
from pyg_progcl.mixture import BetaMixture

WORLD = 2
TIMEOUT = 120  # the workers' own collectives time out after 60 s


def spawn(fn, args, nprocs=WORLD, timeout=TIMEOUT, settle=False):
    """Runs ``fn(rank, *args)`` in ``nprocs`` spawned processes; raises the first failure
    (:func:`first_failure`), or ``TimeoutError`` (after killing them) if they do not end
    in time. ``settle``: let every process end on its own before looking at any (else a
    failure ends the others at once)."""
    context = mp.start_processes(
        run_rank, args=(fn, *args), nprocs=nprocs, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + timeout
    for process in context.processes if settle else ():
        process.join(max(0.0, deadline - time.monotonic()))
    try:
        while not context.join(timeout=max(0.0, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                raise TimeoutError(f"the processes did not end within {timeout} s")
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
        raise first_failure(context) or exc from None
    finally:
        for path in context.error_files:  # torch leaves them in the temporary folder
            if os.path.exists(path):
                os.unlink(path)


def first_failure(context):
    """The error of the rank that failed first, the other ranks' errors after it.

    ``ProcessContext.join`` reports the first process it sees *exit*: when rank 1 fails,
    rank 0 fails in turn in its collective ("Connection closed by peer", once rank 1's
    interpreter shutdown closes its sockets) and may exit first. :func:`run_rank` stamps
    each failure with the monotonic clock (shared by the processes), which orders them
    as they happened; the first is the cause (what torchrun reports as the root cause)."""
    failures = []
    for rank, path in enumerate(context.error_files):
        if os.path.exists(path):
            with open(path, "rb") as fh:
                trace = pickle.load(fh)
            stamp = re.search(r"RankFailedError: at (\d+) ns", trace)
            failures.append((int(stamp[1]) if stamp else float("inf"), rank, trace))
    if not failures:
        return None
    (_, rank, trace), *others = sorted(failures)
    message = f"\n\n-- Process {rank} failed first:\n{trace}"
    message += "".join(f"\n-- then process {r}:\n{t}" for _, r, t in others)
    error = mp.ProcessRaisedException(message, rank, context.processes[rank].pid)
    error.failed_at = {r: stamp for stamp, r, _ in failures}  # ns, by rank
    return error


#: Whether PyG's NeighborLoader can sample here (pyg-lib or torch-sparse installed).
PYG_CAN_SAMPLE = pyg_can_sample()


def run_workers(out, backend: str) -> list[dict]:
    """:func:`dist_worker.main` on 2 ranks; its results, by rank."""
    from dist_worker import main

    spawn(main, (WORLD, str(out / "init"), str(out), backend))
    prefix = "" if backend == "torch" else f"{backend}-"
    results = [torch.load(out / f"{prefix}rank{r}.pt", weights_only=False) for r in range(WORLD)]
    for r, result in enumerate(results):
        assert "failure" not in result, f"rank {r}:\n{result.get('failure')}"
    return results


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Every scenario's results, by rank (mini-batches from the plain-torch sampler)."""
    return run_workers(tmp_path_factory.mktemp("dist"), "torch")


@pytest.fixture(scope="module")
def pyg_ranks(tmp_path_factory):
    """The trainer's scenarios on PyG's NeighborLoader batches, by rank."""
    if not PYG_CAN_SAMPLE:
        pytest.skip(
            "PyG's NeighborLoader needs pyg-lib or torch-sparse "
            "(./scripts/setup.sh --dev --with-sparse builds torch-sparse)"
        )
    return run_workers(tmp_path_factory.mktemp("dist-pyg"), "pyg")


@pytest.fixture(params=["torch", pytest.param("pyg", marks=pytest.mark.sparse)])
def trained(request):
    """``(backend, results by rank)`` of the trainer's scenarios on each sampler."""
    fixture = "ranks" if request.param == "torch" else "pyg_ranks"
    return request.param, request.getfixturevalue(fixture)


@pytest.mark.parametrize("name", list(LOSSES))
def test_split_views_give_the_single_process_loss_and_gradients(ranks, name):
    # Mean over ranks = the loss of the global batch; the gradient reaching a rank's
    # rows = W x the single-process gradient there (DDP then averages).
    h1, h2 = views(n=ROWS * WORLD)
    expected = LOSSES[name]()(h1, h2)
    g1, g2 = torch.autograd.grad(expected, (h1, h2))
    values = torch.stack([r["losses"][name][0] for r in ranks])
    torch.testing.assert_close(values.mean(), expected.detach(), rtol=1e-10, atol=1e-12)
    for got, single in ((1, g1), (2, g2)):
        local = torch.cat([r["losses"][name][got] for r in ranks])
        torch.testing.assert_close(local, WORLD * single, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", list(OWN_LOSSES))
def test_a_rank_gets_its_rows_of_the_single_process_losses_of_ones_own_loss(ranks, name):
    # reduction='none': rank r's [2, b] losses are its columns of the global batch's,
    # computed by the loss's own compute_loss (with or without `anchors`) or
    # negative_term; the gradient of a weighted sum of every rank's losses reaching a
    # rank's rows is the single-process one there.
    cls, options = OWN_LOSSES[name]
    h1, h2 = views(n=ROWS * WORLD)
    expected = cls(0.4, reduction="none", **options)(h1, h2)
    g1, g2 = torch.autograd.grad(expected, (h1, h2), own_loss_weights(ROWS * WORLD))
    got = torch.cat([r["own-losses"][name][0] for r in ranks], dim=1)
    torch.testing.assert_close(got, expected.detach(), rtol=1e-10, atol=1e-12)
    for index, single in ((1, g1), (2, g2)):
        local = torch.cat([r["own-losses"][name][index] for r in ranks])
        torch.testing.assert_close(local, single, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", list(OWN_LOSSES))
def test_a_loss_of_ones_own_runs_its_own_computation(one_process_group, name, reduction):
    # One process: DistributedLoss(loss) is loss, values and gradients, whichever of
    # compute_loss (with or without `anchors`) and negative_term the loss overrides.
    cls, options = OWN_LOSSES[name]
    loss = cls(0.4, reduction=reduction, **options)
    h1, h2 = views()
    expected, got = loss(h1, h2), DistributedLoss(loss)(h1, h2)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    weights = torch.rand(got.shape, generator=torch.Generator().manual_seed(1), dtype=got.dtype)
    for a, b in zip(
        torch.autograd.grad(got, (h1, h2), weights),
        torch.autograd.grad(expected, (h1, h2), weights),
    ):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_a_loss_that_overrides_forward_is_refused():
    class OwnForward(InfoNCELoss):
        def forward(self, h1, h2):
            return 2 * super().forward(h1, h2)

    with pytest.raises(ValueError, match="OwnForward overrides `forward`.*`compute_loss`"):
        DistributedLoss(OwnForward())


def test_distributed_fit_equals_the_fit_of_the_union(ranks):
    samples = torch.cat([r["mixture"]["sample"] for r in ranks])
    single = BetaMixture().double().fit(samples)
    assert torch.equal(ranks[0]["mixture"]["params"], ranks[1]["mixture"]["params"])
    assert ranks[0]["mixture"]["iters"] == ranks[1]["mixture"]["iters"] == single.n_iter_
    expected = torch.cat([single.alpha, single.beta, single.weight])
    torch.testing.assert_close(ranks[0]["mixture"]["params"], expected, rtol=1e-10, atol=0)


def test_refits_leave_every_rank_with_the_same_mixture(ranks):
    assert torch.equal(ranks[0]["refit"]["params"], ranks[1]["refit"]["params"])
    assert ranks[0]["refit"]["fits"] == 2


def test_a_degenerate_refit_floors_the_posterior_on_every_rank(ranks):
    a, b = ranks[0]["floored"], ranks[1]["floored"]
    assert torch.equal(a["params"], b["params"]) and a["problems"] == b["problems"]
    assert any("spike at cosine 1" in p for p in a["problems"])
    assert a["floor"] == b["floor"] == 0.5


@pytest.mark.filterwarnings("ignore:Using 'NeighborSampler' without:UserWarning")
def test_training_steps_equal_one_process_over_the_global_batches(trained, monkeypatch):
    backend, ranks = trained
    monkeypatch.setattr(sampling, "default_backend", lambda: backend)
    assert torch.equal(ranks[0]["train"]["params"], ranks[1]["train"]["params"])
    replay = train_steps(0, WORLD, mixtures=ranks[0]["train"]["mixtures"])
    moved = ranks[0]["train"]["params"] - replay["params"]
    assert float(moved.abs().max()) < 1e-9


def test_bad_setups_fail_alike_on_every_rank(ranks):
    for r in ranks:
        errors = r["errors"]
        assert "as many rows on every rank" in errors["unequal"]
        assert "as many rows on every rank" in errors["unequal-fit"]
        assert "schedule='frozen'" in errors["frozen"]
        assert "on every rank" in errors["bad-samples"]  # rank 1's values are > 1
        message = "IgnoresAnchors.compute_loss(h1, h2, anchors=rows) must return [2, 8]"
        assert message in errors["ignored-anchors"]  # (it returned all 16 rows' losses)


def test_a_sigterm_on_one_rank_stops_all_and_resume_equals_uninterrupted(trained):
    _, ranks = trained
    for r in ranks:
        interrupted = r["interrupted"]
        assert interrupted["stopped"] == 3
        assert interrupted["resumed"] == interrupted["whole"]
    assert ranks[0]["interrupted"]["whole"] == ranks[1]["interrupted"]["whole"]


def test_a_failing_rank_ends_both_processes(tmp_path):
    from dist_worker import raise_on_rank_one

    # Both processes end on their own: rank 0's collective fails once rank 1 is gone, not
    # at the gloo timeout (60 s). Both have ended before the first look, as when the test
    # process is slow to wake (the first exit it saw was then rank 0's, reported instead).
    with pytest.raises(mp.ProcessRaisedException, match="rank 1 failed") as info:
        spawn(raise_on_rank_one, (WORLD, str(tmp_path / "init")), settle=True)
    assert info.value.error_index == 1 and "-- then process 0:" in str(info.value)
    failed_at = info.value.failed_at
    assert 0 < failed_at[0] - failed_at[1] < 30e9  # ns


TINY = ["--epochs", "3", "--warmup-epochs", "1", "--batch-size", "100", "--probe-epochs", "50"]


RANK_TINY = ["--epochs", "2", "--warmup-epochs", "1", "--probe-epochs", "20", "--data", "g.npz"]
