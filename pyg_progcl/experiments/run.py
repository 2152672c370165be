"""One seed's training state and what an epoch does with it: the step (ProGCL refits
first after the warm-up), the probe, the diagnostics, the checkpoint."""

from __future__ import annotations

import dataclasses
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import torch
from torch_geometric.data import Data

from ..diagnostics import summarize
from ..losses import ProGCLLoss
from ..minibatch import embed_minibatch, minibatch_epoch, neighbor_loader
from ..mixture import MixtureDegeneracyWarning
from ..model import GRACEModel
from .build import build_loss, build_model, seed_everything
from .checkpoint import (
    checkpoint_path,
    checkpoint_payload,
    restore_checkpoint,
    save_checkpoint,
    warmup_checkpoint_path,
)
from .evaluation import evaluate
from .presets import TrainConfig


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


def probe(model, data, config, seed) -> dict[str, Any]:
    """Linear-probe evaluation of the encoder output (OGB graphs: the official evaluator)."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        if config.batch_size is None:
            z = model(data.x, data.edge_index)
        else:  # exact, layer by layer over batches of nodes
            z = embed_minibatch(model, data, config.batch_size)
    model.train(was_training)
    return evaluate(
        z,
        data,
        config.protocol,
        split=config.split,
        seed=seed,
        probe_epochs=config.probe_epochs,
        ogb_name=config.dataset if config.dataset.startswith("ogbn-") else None,
    )


def full_graph_epoch(model, loss_fn, optimizer, data: Data, refit: bool) -> float:
    """One optimisation step on the whole graph; ProGCL refits first when ``refit``."""
    optimizer.zero_grad()
    h1, h2 = model.views(data.x, data.edge_index)
    if refit:
        loss_fn.fit(h1.detach(), h2.detach())  # online refit, warm-started
    loss = loss_fn(h1, h2)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


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
    loader: Optional[Any]  # neighbour loader of mini-batch training, else None
    path: Optional[Path]  # checkpoint file, if any
    record: dict[str, Any]

    def step(self, epoch: int) -> float:
        """Trains one epoch (ProGCL refits first after the warm-up); returns its loss."""
        refit = isinstance(self.loss_fn, ProGCLLoss) and epoch > self.config.warmup_epochs
        fits = int(self.loss_fn.mixture.num_fits) if refit else 0
        tic = time.perf_counter()
        with warnings.catch_warnings():  # reported once per run below, recorded every epoch
            warnings.simplefilter("ignore", MixtureDegeneracyWarning)
            if self.loader is not None:
                value = minibatch_epoch(
                    self.model, self.loss_fn, self.loader, self.optimizer, device=self.device,
                    fit=refit,
                )  # fmt: skip
            else:
                value = full_graph_epoch(self.model, self.loss_fn, self.optimizer, self.data, refit)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.record["epoch_times"].append(time.perf_counter() - tic)
        self.record["losses"].append(value)
        if refit and int(self.loss_fn.mixture.num_fits) > fits:
            self.note_degeneracy(epoch, self.loss_fn.mixture.problems_)
        return value

    def note_degeneracy(self, epoch: int, problems: list[str]) -> None:
        """Records a degenerate mixture fit of ``epoch`` (``degenerate_fits`` in the
        results) and warns about the run's first one."""
        if not problems:
            return
        noted = self.record.setdefault("degenerate_fits", [])
        noted.append({"epoch": epoch, "problems": list(problems)})
        if len(noted) == 1:
            warnings.warn(
                MixtureDegeneracyWarning(
                    f"seed {self.seed}, epoch {epoch}: the Beta mixture degenerated: "
                    + "; ".join(problems)
                    + " (reported once per run; every such epoch is "
                    "listed under 'degenerate_fits' in the results; docs/algorithms.md §5.4)"
                ),
                stacklevel=2,
            )

    def evaluate(self, epoch: int, value: float) -> float:
        """Probes the current embeddings; at the last epoch also stores the final result."""
        result = probe(self.model, self.data, self.config, self.seed)
        self.record["history"].append(
            {"epoch": epoch, "accuracy": result["accuracy"], "loss": value}
        )
        if epoch == self.config.epochs:
            self.record["accuracy"] = result["accuracy"]
            self.record["evaluation"] = {k: v for k, v in result.items() if k != "accuracy"}
            self.record["mixture"] = mixture_state(self.loss_fn)
        return result["accuracy"]

    def diagnose(self, epoch: int) -> None:
        """Appends the false-negative summary of this epoch to the record."""
        loss = self.loss_fn if isinstance(self.loss_fn, ProGCLLoss) else None
        summary = summarize(self.model, self.data, loss=loss, seed=self.seed)
        self.record.setdefault("diagnostics", []).append({"epoch": epoch, **summary})

    def ends_warmup(self, epoch: int) -> bool:
        """Whether ``epoch`` is the last one before ProGCL's first mixture fit."""
        return epoch == self.config.warmup_epochs and isinstance(self.loss_fn, ProGCLLoss)

    def checkpoint(self, epoch: int) -> None:
        """Saves the run; the warm-up's last epoch also to :func:`warmup_checkpoint_path`."""
        if self.path is not None:
            payload = checkpoint_payload(
                epoch, self.config, self.model, self.optimizer, self.loss_fn, self.record
            )
            save_checkpoint(self.path, payload)
            if self.ends_warmup(epoch):
                save_checkpoint(warmup_checkpoint_path(self.path), payload)


def start_seed(
    config, data, seed, device, checkpoint_dir, resume, loss_factory
) -> tuple[SeedRun, int]:
    """Builds a seed's model, loss and optimiser (restored from its checkpoint when
    resuming); returns the run and the number of epochs already done."""
    loader = None
    if config.batch_size is None:
        data = data.to(device)
    else:  # the graph stays where it is; sampled batches go to the device
        fanout = config.num_neighbors or [10] * config.num_layers
        loader = neighbor_loader(data, fanout, config.batch_size, shuffle=True)
    path = None if checkpoint_dir is None else checkpoint_path(Path(checkpoint_dir), seed)

    seed_everything(seed)
    model = build_model(config, data.num_features, data.num_nodes, data.x).to(device)
    loss_fn = (loss_factory or build_loss)(config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    record: dict[str, Any] = {"seed": seed, "history": [], "losses": [], "epoch_times": []}
    start = 0
    if resume and path is not None and path.exists():
        start, record = restore_checkpoint(path, config, model, optimizer, loss_fn)
    run = SeedRun(config, data, seed, device, model, loss_fn, optimizer, loader, path, record)
    return run, start
