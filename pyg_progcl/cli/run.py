"""One seed's training state and what an epoch does with it: the step (ProGCL refits
first after the warm-up), the probe, the diagnostics, the checkpoint."""

from __future__ import annotations

import copy
import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.data import Data

from pyg_progcl.diagnostics import summarize
from pyg_progcl.distributed import DistributedLoss
from pyg_progcl.evaluation import EdgeSplit, check_labels, cluster_scores, evaluate
from pyg_progcl.io.files import NO_SPACE
from pyg_progcl.io.graphs import graph_for_model
from pyg_progcl.losses import ProGCLLoss
from pyg_progcl.minibatch import (
    SeedViews,
    embed_minibatch,
    epoch_seeds,
    minibatch_epoch,
    neighbor_loader,
)
from pyg_progcl.model import GRACEModel

from .build import build_loss, build_model, check_model_fits, seed_everything
from .checkpoint import (
    checkpoint_path,
    checkpoint_payload,
    graph_fingerprint,
    restore_checkpoint,
    rng_state,
    save_checkpoint,
    warmup_checkpoint_path,
)
from .parallel import ONE, Ranks
from .presets import TrainConfig

__all__: list[str] = []

#: What a result says in place of a probe accuracy on a graph without labels.
NO_LABELS = "skipped: the graph has no labels"
#: What a result says in place of a probe accuracy when the run asked for other probes.
NOT_ASKED = "skipped: not among the run's probes"


def has_labels(data: Data) -> bool:
    """Whether ``data`` has node labels ``y`` to probe the embeddings with."""
    return isinstance(data.get("y"), torch.Tensor)


def mixture_state(loss: torch.nn.Module) -> Optional[dict[str, Any]]:
    """ProGCL's fitted mixture as plain lists (``None`` for other losses and before the fit)."""
    if not isinstance(loss, ProGCLLoss) or not loss.fitted:
        return None
    mix = loss.mixture
    return {
        "alpha": mix.alpha.tolist(),
        "beta": mix.beta.tolist(),
        "weight": mix.weight.tolist(),
        "true_negative": mix.true_negative_index,
    }


def probe(
    model, data, config, seed, ranks: Ranks = ONE, probes=("linear",), edges=None
) -> dict[str, Any]:
    """The evaluations ``probes`` names of the encoder output (:func:`evaluate_embeddings`).
    With several ranks each embeds its part of the nodes, rank 0 evaluates, every rank gets
    rank 0's result."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        if config.batch_size is None:
            z = model(data.x, data.edge_index, data.get("edge_weight"))
        else:  # exact, layer by layer over batches of nodes
            gather = ranks.row_gather(data.num_nodes)
            z = embed_minibatch(model, data, config.batch_size, part=ranks.part(), gather=gather)
    model.train(was_training)
    result = evaluate_embeddings(z, data, config, seed, probes, edges) if ranks.main else None
    return ranks.from_main(result)


def evaluate_embeddings(z, data, config, seed, probes, edges=None) -> dict[str, Any]:
    """``{"linear": ..., "link": ..., "cluster": ...}``, the evaluations ``probes`` names
    that the graph allows: the linear probe (OGB graphs: the official evaluator) and
    clustering with labels only; link prediction on ``edges``' held-out pairs."""
    result: dict[str, Any] = {}
    if "linear" in probes and has_labels(data):
        result["linear"] = evaluate(
            z,
            data,
            config.protocol,
            split=config.split,
            seed=seed,
            probe_epochs=config.probe_epochs,
            ogb_name=config.dataset if config.dataset.startswith("ogbn-") else None,
        )
    if "link" in probes:
        result["link"] = edges.scores(z)
    if "cluster" in probes and has_labels(data):
        result["cluster"] = cluster_scores(z, data.y, seed=seed)
    return result


def full_graph_epoch(model, loss_fn, optimizer, data: Data, refit: bool) -> float:
    """One optimisation step on the whole graph (with its ``edge_weight``, if any); ProGCL
    refits first when ``refit``."""
    optimizer.zero_grad()
    h1, h2 = model.views(data.x, data.edge_index, data.get("edge_weight"))
    if refit:
        loss_fn.fit(h1.detach(), h2.detach())  # online refit, warm-started
    loss = loss_fn(h1, h2)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


class EpochLoader:
    """Mini-batch training's loader of one epoch: this rank's seeds of the epoch
    (:func:`~pyg_progcl.minibatch.epoch_seeds`, a permutation shared by the ranks) and the
    subgraphs sampled around them."""

    def __init__(self, data: Data, config: TrainConfig, seed: int, ranks: Ranks):
        self.data, self.seed, self.ranks = data, seed, ranks
        self.fanout = config.num_neighbors or [10] * config.num_layers
        self.batch_size = config.batch_size

    def __call__(self, epoch: int):
        seeds = epoch_seeds(
            self.data.num_nodes, self.batch_size, epoch, self.seed, *self.ranks.part()
        )
        if seeds.numel() == 0:
            raise ValueError(
                f"--batch-size {self.batch_size} on {self.ranks.world_size} rank(s) leaves no "
                f"seed of the {self.data.num_nodes} nodes to a rank"
            )
        return neighbor_loader(
            self.data, self.fanout, self.batch_size, shuffle=False, input_nodes=seeds
        )


@dataclasses.dataclass
class SeedRun:
    """One seed's training state: what an epoch advances and a checkpoint saves."""

    config: TrainConfig
    data: Data
    seed: int
    device: torch.device
    model: GRACEModel
    loss_fn: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loader: Optional[EpochLoader]  # mini-batch training, else None
    path: Optional[Path]  # checkpoint file, if any
    record: dict[str, Any]
    ranks: Ranks = ONE
    objective: Optional[torch.nn.Module] = None  # what trains: loss_fn, or its DistributedLoss
    views: Optional[torch.nn.Module] = None  # the seeds' views, DDP-wrapped with several ranks
    graph: Optional[dict[str, Any]] = None  # what a checkpoint records of the graph
    clock: float = dataclasses.field(default_factory=time.perf_counter)  # see tick()
    probes: tuple[str, ...] = ("linear",)  # the evaluations (PROBES) the run asked for
    edges: Optional[EdgeSplit] = None  # link prediction's held-out edges, with "link"
    batch_progress: Optional[Callable[[int, Optional[int]], None]] = None  # mini-batch epochs
    unsaved: Optional[str] = None  # why the last checkpoint was not written (a full disk)

    def tick(self) -> None:
        """Adds the time since the last call to the record's ``wall_time_s`` (which a
        checkpoint keeps, so that a resumed run's time includes the earlier part)."""
        now = time.perf_counter()
        self.record["wall_time_s"] = self.record.get("wall_time_s", 0.0) + now - self.clock
        self.clock = now

    def step(self, epoch: int) -> float:
        """Trains one epoch (ProGCL refits first after the warm-up); returns its loss."""
        refit = isinstance(self.loss_fn, ProGCLLoss) and epoch > self.config.warmup_epochs
        fits = int(self.loss_fn.mixture.num_fits) if refit else 0
        tic = time.perf_counter()
        if self.loader is not None:
            value = minibatch_epoch(
                self.model, self.objective or self.loss_fn, self.loader(epoch),
                self.optimizer, device=self.device, fit=refit, data=self.data,
                views=self.views, progress=self.batch_progress,
            )  # fmt: skip
        else:
            value = full_graph_epoch(self.model, self.loss_fn, self.optimizer, self.data, refit)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.record["epoch_times"].append(time.perf_counter() - tic)
        value = self.ranks.mean(value)  # the loss of the global batches
        self.record["losses"].append(value)
        if refit and int(self.loss_fn.mixture.num_fits) > fits:
            self.note_degeneracy(epoch, self.loss_fn.mixture.problems_)
        return value

    def note_degeneracy(self, epoch: int, problems: list[str]) -> None:
        """Records a degenerate mixture fit of ``epoch`` (``degenerate_fits`` in the
        results, with the floor on ``p(TN | s')`` the schedule applies from then on); the
        schedule itself warns where no floor bounds it."""
        if problems:
            floor = self.loss_fn.schedule.posterior_floor
            noted = self.record.setdefault("degenerate_fits", [])
            noted.append({"epoch": epoch, "problems": list(problems), "floor": floor})

    def evaluate(self, epoch: int, value: float) -> dict[str, Any]:
        """Evaluates the current embeddings as :attr:`probes` asks (``{}`` when nothing
        applies); at the last epoch also stores the final results. A graph without labels
        has no linear probe and no clustering: the record says why."""
        final = epoch == self.config.epochs
        result: dict[str, Any] = {}
        if has_labels(self.data) or "link" in self.probes:
            result = probe(
                self.model, self.data, self.config, self.seed, self.ranks, self.probes,
                self.edges,
            )  # fmt: skip
            entry: dict[str, Any] = {"epoch": epoch, "loss": value}
            if "linear" in result:
                entry["accuracy"] = result["linear"]["accuracy"]
            entry.update({k: result[k] for k in ("link", "cluster") if k in result})
            self.record["history"].append(entry)
        if final:
            linear = result.get("linear")
            if linear is not None:
                self.record["accuracy"] = linear["accuracy"]
                self.record["evaluation"] = {k: v for k, v in linear.items() if k != "accuracy"}
            else:
                self.record["accuracy"] = None
                why = NO_LABELS if "linear" in self.probes else NOT_ASKED
                self.record["probe"] = why
            for name in ("link", "cluster"):
                if name in result:
                    self.record[name] = result[name]
            self.record["mixture"] = mixture_state(self.loss_fn)
        return result

    def diagnose(self, epoch: int) -> None:
        """Appends the false-negative summary of this epoch to the record."""
        loss = self.loss_fn if isinstance(self.loss_fn, ProGCLLoss) else None
        summary = None
        if self.ranks.main:
            summary = summarize(self.model, self.data, loss=loss, seed=self.seed)
        summary = self.ranks.from_main(summary)
        self.record.setdefault("diagnostics", []).append({"epoch": epoch, **summary})

    def ends_warmup(self, epoch: int) -> bool:
        """Whether ``epoch`` is the last one before ProGCL's first mixture fit."""
        return epoch == self.config.warmup_epochs and isinstance(self.loss_fn, ProGCLLoss)

    def checkpoint(self, epoch: int, warmup_only: bool = False) -> None:
        """Saves the run; the warm-up's last epoch first to :func:`warmup_checkpoint_path`
        (so that a run killed in between still has both: the main checkpoint, not yet
        replaced, trains to the warm-up's end again)."""
        if self.path is None:
            return
        self.tick()
        rng = self.ranks.gather(rng_state())  # every rank's generators, for rank 0 to save
        if self.ranks.main:
            payload = checkpoint_payload(
                epoch, self.config, self.model, self.optimizer, self.loss_fn, self.record, rng,
                graph=self.graph,
            )  # fmt: skip
            try:
                if self.ends_warmup(epoch):
                    save_checkpoint(warmup_checkpoint_path(self.path), payload)
                if not warmup_only:
                    save_checkpoint(self.path, payload)
                    self.unsaved = None
            except OSError as exc:  # a full disk: training goes on, its result is kept
                if exc.errno not in NO_SPACE:
                    raise
                self.unsaved = exc.strerror or str(exc)
        self.ranks.wait()  # the others, until the checkpoint is written


def start_seed(
    config, data, seed, device, checkpoint_dir, resume, loss_factory, ranks: Ranks = ONE,
    probes=("linear",), edges: Optional[EdgeSplit] = None,
) -> tuple[SeedRun, int]:  # fmt: skip
    """Builds a seed's model, loss and optimiser (restored from its checkpoint when
    resuming); returns the run and the number of epochs already done. With several ranks:
    data parallel mini-batch training (DistributedDataParallel over the seeds' views, a
    :class:`~pyg_progcl.distributed.DistributedLoss`), each rank seeded ``seed + rank``.
    With ``edges`` (link prediction's split) the run trains, augments and evaluates on
    ``edges.train_data``, not on ``data``: no held-out edge reaches the model."""
    if edges is not None:
        data = edges.train_data
    if ranks.distributed and config.batch_size is None:
        raise ValueError("--distributed trains on mini-batches of seed nodes: set --batch-size")
    if has_labels(data):  # before the training, not at its end's probe
        check_labels(data.y, data.num_nodes)
    path = None if checkpoint_dir is None else checkpoint_path(Path(checkpoint_dir), seed)
    # What a checkpoint records of its graph, which a resumed run's graph must match.
    graph = None if path is None else graph_fingerprint(data)
    if config.batch_size is None:
        data = data.to(device)  # (mini-batches: the graph stays, sampled batches move)

    seed_everything(seed + ranks.rank)
    check_model_fits(config, data.num_features, device)  # (before the weights are allocated)
    model = build_model(config, data.num_features, data.num_nodes, data.x, device).to(device)
    # The fields the model uses: a graph's edge weights, unless the encoder takes none.
    data = graph_for_model(model, data)
    if config.batch_size is None:  # the features as the model feeds them (CSR where sparse
        data = copy.copy(data)  # enough), converted once, not at every step
        data.x = model.input_features(data.x)
    loader = None if config.batch_size is None else EpochLoader(data, config, seed, ranks)
    loss_fn = loss_factory(config) if loss_factory else build_loss(config, data.num_nodes, device)
    loss_fn = loss_fn.to(device)
    objective, views = None, None
    if ranks.distributed:
        objective = DistributedLoss(loss_fn)
        ids = [device.index] if device.type == "cuda" else None
        views = DistributedDataParallel(SeedViews(model, data), device_ids=ids)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    record: dict[str, Any] = {"seed": seed, "history": [], "losses": [], "epoch_times": []}
    start = 0
    if resume and path is not None and ranks.any(path.exists()):
        start, record = restore_checkpoint(
            path, config, model, optimizer, loss_fn, ranks, graph=graph
        )
    run = SeedRun(
        config, data, seed, device, model, loss_fn, optimizer, loader, path, record, ranks,
        objective, views, graph, probes=tuple(probes), edges=edges,
    )  # fmt: skip
    if start and run.ends_warmup(start) and ranks.any(not warmup_checkpoint_path(path).exists()):
        run.checkpoint(start, warmup_only=True)  # (restores a lost warm-up checkpoint)
    return run, start
