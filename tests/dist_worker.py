"""What each of the 2 gloo processes of ``test_distributed.py`` runs (spawned once per
module): every scenario in turn, results saved to ``<out>/rank<r>.pt`` for the tests."""

from __future__ import annotations

import datetime
import math
import os
import signal
import time
import traceback

import torch
import torch.distributed as dist
from helpers import class_views, fitted_mixture, sample_mixture, views
from torch.nn.parallel import DistributedDataParallel

from pyg_progcl.distributed import DistributedLoss
from pyg_progcl.distributed.mixture import fit_mixture
from pyg_progcl.losses import ContrastiveLoss, InfoNCELoss, NegativeBlock


class TwiceInfoNCE(InfoNCELoss):
    """A loss of one's own overriding ``compute_loss`` (with ``anchors``): twice
    InfoNCE's per-anchor losses."""

    def compute_loss(self, h1, h2, anchors=None):
        return 2 * super().compute_loss(h1, h2, anchors=anchors)


class TwiceInfoNCEAllRows(InfoNCELoss):
    """The same without ``anchors``: DistributedLoss computes all rows and keeps its own."""

    def compute_loss(self, h1, h2):
        return 2 * super().compute_loss(h1, h2)


class TripledNegatives(ContrastiveLoss):
    """A loss of one's own overriding ``negative_term``: GRACE's ``Ng`` times 3."""

    def negative_term(self, block: NegativeBlock) -> torch.Tensor:
        return block.log_sum_exp_both() + math.log(3.0)


#: Losses of one's own, by name: ``(class, options)``.
OWN_LOSSES = {
    "compute-loss": (TwiceInfoNCE, {"block_size": 5}),
    "compute-loss-all-rows": (TwiceInfoNCEAllRows, {}),
    "negative-term": (TripledNegatives, {}),
    "negative-term-blocks": (TripledNegatives, {"block_size": 5}),
}

#: (name, loss factory) of the equivalence cases; factories take no arguments.
LOSSES = {
    "infonce": lambda: _losses().InfoNCELoss(0.4),
    "infonce-blocks": lambda: _losses().InfoNCELoss(0.4, block_size=5),
    "infonce-small-tau": lambda: _losses().InfoNCELoss(0.01, block_size=5),
    "dcl": lambda: _losses().DebiasedInfoNCELoss(0.4, 0.1),
    "hcl": lambda: _losses().HardInfoNCELoss(0.4, 0.1, 1.0, block_size=7),
    "hcl-all-sampled": lambda: _losses().HardInfoNCELoss(0.4, 0.1, 1.0, num_negatives=23),
    "progcl-weight": lambda: _losses().ProGCLLoss(0.4, mixture=fitted_mixture()),
    "progcl-weight-blocks": lambda: _losses().ProGCLLoss(
        0.4, mixture=fitted_mixture(), block_size=5
    ),
    "progcl-weight-floor": lambda: _losses().ProGCLLoss(
        0.4, mixture=fitted_mixture(), schedule=_losses().OnlineFit(floor=0.5), block_size=5
    ),
    "progcl-mix": lambda: _losses().ProGCLLoss(
        0.4, mode="mix", num_mix=1, mixture=fitted_mixture(), block_size=5
    ),
    "infonce-sum": lambda: _losses().InfoNCELoss(0.4, reduction="sum"),
    **{
        f"own-{name}-{reduction}": lambda cls=cls, kw=kw, r=reduction: cls(0.4, reduction=r, **kw)
        for name, (cls, kw) in OWN_LOSSES.items()
        for reduction in ("mean", "sum")
    },
}
#: The global batch of the equivalence cases: 2 ranks x 12 rows.
ROWS = 12


def _losses():
    import pyg_progcl.losses as losses

    return losses


def loss_cases(rank: int, world: int) -> dict:
    """Each loss over this rank's rows of fixed float64 views: value and local gradients."""
    h1, h2 = views(n=ROWS * world, grad=False)
    rows = slice(rank * ROWS, (rank + 1) * ROWS)
    out = {}
    for name, make in LOSSES.items():
        a, b = h1[rows].clone().requires_grad_(), h2[rows].clone().requires_grad_()
        value = DistributedLoss(make())(a, b)
        out[name] = (value.detach(), *torch.autograd.grad(value, (a, b)))
    return out


def own_loss_cases(rank: int, world: int) -> dict:
    """Each loss of one's own with ``reduction='none'`` over this rank's rows: its
    ``[2, ROWS]`` per-anchor losses and the local gradients of their weighted sum (the
    weights of the global batch's ``[2, W·ROWS]`` losses, this rank's columns)."""
    h1, h2 = views(n=ROWS * world, grad=False)
    rows = slice(rank * ROWS, (rank + 1) * ROWS)
    weights = own_loss_weights(ROWS * world)[:, rows]
    out = {}
    for name, (cls, options) in OWN_LOSSES.items():
        a, b = h1[rows].clone().requires_grad_(), h2[rows].clone().requires_grad_()
        losses = DistributedLoss(cls(0.4, reduction="none", **options))(a, b)
        out[name] = (losses.detach(), *torch.autograd.grad(losses, (a, b), weights))
    return out


def own_loss_weights(n: int) -> torch.Tensor:
    """Fixed ``[2, n]`` weights of per-anchor losses (gradients of each anchor's loss)."""
    return torch.rand(2, n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def mixture_case(rank: int, world: int) -> dict:
    """A distributed fit of samples that differ by rank (and in size)."""
    x = sample_mixture(20_000 + 3_000 * rank, [(2, 8), (9, 3)], [0.8, 0.2], seed=rank)
    m = fit_mixture(_mixture(), x)
    return {"sample": x, "params": torch.cat([m.alpha, m.beta, m.weight]), "iters": m.n_iter_}


def _mixture():
    from pyg_progcl.mixture import BetaMixture

    return BetaMixture().double()


def refit_case(rank: int, world: int) -> dict:
    """Two online refits of a ProGCL loss through DistributedLoss (each rank's own draws)."""
    torch.manual_seed(10 + rank)
    h1, h2 = views(n=40 * world, grad=False)
    rows = slice(rank * 40, (rank + 1) * 40)
    loss = DistributedLoss(_losses().ProGCLLoss(0.4, num_samples=3_000))
    loss.fit(h1[rows], h2[rows]).fit(h1[rows], h2[rows])
    m = loss.mixture
    return {"params": torch.cat([m.alpha, m.beta, m.weight]), "fits": int(m.num_fits)}


def floored_case(rank: int, world: int) -> dict:
    """Refits of near-duplicate classmates (a degenerate mixture) under schedule='floored'."""
    import warnings

    torch.manual_seed(10 + rank)
    h1, h2 = class_views(per_class=10 * world)
    rows = slice(rank * 50, (rank + 1) * 50)
    loss = DistributedLoss(_losses().ProGCLLoss(0.5, num_samples=5_000, schedule="floored"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss.fit(h1[rows], h2[rows]).fit(h1[rows], h2[rows])
    m = loss.mixture
    return {
        "params": torch.cat([m.alpha, m.beta, m.weight]),
        "problems": m.problems_,
        "floor": loss.schedule.posterior_floor,
    }


def complete_graph(n: int = 16, features: int = 6):
    """A complete graph (every subgraph around any seeds holds every node and edge)."""
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(3)
    src, dst = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    keep = src != dst
    x = torch.randn(n, features, generator=g, dtype=torch.float64)
    return Data(x=x, edge_index=torch.stack([src[keep], dst[keep]]), y=torch.arange(n) % 2)


def use_backend(backend: str) -> None:
    """Makes ``neighbor_loader(backend="auto")`` pick ``backend``'s sampler in this process:
    ``"torch"`` (the plain-torch one) or ``"pyg"`` (PyG's ``NeighborLoader``)."""
    import warnings

    import pyg_progcl.minibatch.sampling as sampling

    sampling.default_backend = lambda: backend
    warnings.filterwarnings("ignore", "Using 'NeighborSampler' without", UserWarning)


def train_steps(rank: int, world: int, mixtures=None) -> dict:
    """Two epochs of mini-batch training (2 steps each, a refit at epoch 2), without
    augmentation, from the same initial model on every rank; with ``mixtures`` (the
    mixtures the distributed run fitted) one process replays it over the global batches."""
    from torch_geometric.nn import GraphSAGE

    from pyg_progcl import GRACEModel, ProGCLLoss
    from pyg_progcl.minibatch import SeedViews, epoch_seeds, minibatch_epoch, neighbor_loader

    data = complete_graph()
    torch.manual_seed(0)
    model = GRACEModel(GraphSAGE(data.num_features, 8, num_layers=2), 8, 8).double()
    loss = ProGCLLoss(0.5, num_samples=500)
    if mixtures is not None:  # replay: the fits the ranks made together
        fitted = iter(mixtures)
        loss.refit = lambda *a, **k: loss.mixture.load_state_dict(next(fitted))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    distributed = mixtures is None
    objective = DistributedLoss(loss) if distributed else loss
    step_views = DistributedDataParallel(SeedViews(model, data)) if distributed else None
    batch, seen = (4, []) if distributed else (4 * world, [])
    for epoch in (1, 2):
        seeds = epoch_seeds(16, batch, epoch, 7, *((rank, world) if distributed else (0, 1)))
        loader = neighbor_loader(data, [-1, -1], batch, shuffle=False, input_nodes=seeds)
        minibatch_epoch(
            model, objective, loader, optimizer, fit=epoch == 2, data=data, views=step_views
        )
        if epoch == 2:
            seen.append({k: v.clone() for k, v in loss.mixture.state_dict().items()})
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    return {"params": params, "mixtures": seen}


class IgnoresAnchors(InfoNCELoss):
    """A ``compute_loss`` that takes ``anchors`` (as ``**kwargs``) but returns all rows."""

    def compute_loss(self, h1, h2, **kwargs):
        return super().compute_loss(h1, h2)


def error_cases(rank: int, world: int) -> dict:
    """Bad setups: unequal local batches; a frozen schedule; no process group needed; a
    ``compute_loss`` that ignores ``anchors``."""
    out = {}
    h1, h2 = views(n=10 + rank, grad=False)
    for name, call in {
        "unequal": lambda: DistributedLoss(_losses().InfoNCELoss())(h1, h2),
        "frozen": lambda: DistributedLoss(_losses().ProGCLLoss(schedule="frozen")),
        "unequal-fit": lambda: DistributedLoss(_losses().ProGCLLoss()).fit(h1, h2),
        "bad-samples": lambda: fit_mixture(_mixture(), torch.rand(50) + rank),
        "ignored-anchors": lambda: DistributedLoss(IgnoresAnchors())(*views(n=8)),
    }.items():
        try:
            call()
            out[name] = None
        except ValueError as exc:
            out[name] = str(exc)
    return out


def interrupted_training(rank: int, world: int, folder: str) -> dict:
    """The trainer on 2 ranks: uninterrupted, then a SIGTERM on rank 1 at epoch 3 and a
    resume, from the same seed."""
    from pyg_progcl.cli import TrainingInterruptedError, get_preset, train_seed
    from pyg_progcl.cli.datasets import synthetic_graph
    from pyg_progcl.cli.parallel import Ranks

    ranks = Ranks(rank, world, distributed=True)
    data = synthetic_graph(num_nodes=160)
    config = get_preset(
        "synthetic", "progcl-weight", epochs=5, warmup_epochs=2, batch_size=40,
        probe_epochs=30, num_samples=1000, eval_every=0,
    )  # fmt: skip
    kwargs = dict(progress=False, ranks=ranks, checkpoint_every=100)
    _, _, whole = train_seed(config, data, 0, checkpoint_dir=f"{folder}/whole", **kwargs)

    def sigterm_at_3(epoch, info):
        if epoch == 3 and rank == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    stopped = None
    try:
        train_seed(config, data, 0, checkpoint_dir=f"{folder}/cut", callback=sigterm_at_3, **kwargs)
    except TrainingInterruptedError as exc:
        stopped = exc.epoch
    _, _, resumed = train_seed(
        config, data, 0, checkpoint_dir=f"{folder}/cut", resume=True, **kwargs
    )
    keys = ("accuracy", "losses", "history")
    return {"whole": {k: whole[k] for k in keys}, "resumed": {k: resumed[k] for k in keys},
            "stopped": stopped}  # fmt: skip


class RankFailedError(RuntimeError):
    """A rank's failure, stamped with when it was caught (``time.monotonic_ns``)."""


def run_rank(rank: int, fn, *args) -> None:
    """Runs ``fn(rank, *args)``; a failure is re-raised as a :class:`RankFailedError` stamped
    with the time, so that the test can tell which rank failed first."""
    try:
        fn(rank, *args)
    except Exception as exc:
        raise RankFailedError(f"at {time.monotonic_ns()} ns") from exc


def main(rank: int, world: int, init_file: str, out: str, backend: str = "torch") -> None:
    """Every scenario (the trainer's on ``backend``'s batches); with ``backend="pyg"`` only
    the trainer's, saved to ``<out>/pyg-rank<r>.pt``."""
    torch.set_num_threads(1)
    use_backend(backend)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )  # fmt: skip
    cases = {"train": train_steps}
    if backend == "torch":
        cases = {
            "losses": loss_cases, "own-losses": own_loss_cases, "mixture": mixture_case,
            "refit": refit_case, "floored": floored_case, "train": train_steps,
            "errors": error_cases,
        }  # fmt: skip
    results = {}
    try:
        for name, case in cases.items():
            results[name] = case(rank, world)
        results["interrupted"] = interrupted_training(rank, world, os.path.join(out, backend))
    except Exception:
        results["failure"] = traceback.format_exc()
    finally:
        prefix = "" if backend == "torch" else f"{backend}-"
        torch.save(results, os.path.join(out, f"{prefix}rank{rank}.pt"))
        dist.destroy_process_group()


def raise_on_rank_one(rank: int, world: int, init_file: str) -> None:
    """Rank 1 fails before its first collective; rank 0 waits in one."""
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )  # fmt: skip
    if rank == 1:
        raise RuntimeError("rank 1 failed")
    dist.all_reduce(torch.zeros(1))
