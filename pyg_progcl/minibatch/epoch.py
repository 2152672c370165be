"""One epoch of contrastive training on sampled subgraphs (docs/algorithms.md §9)."""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor
from torch_geometric.data import Data

from .._checks import accepts_check
from ..losses import FrozenFit
from .augmentation import SubgraphAugmenter
from .sampling import check_data, seed_count

__all__ = ["SeedViews", "minibatch_epoch"]


class SeedViews(torch.nn.Module):
    """The projected views ``(h1, h2)`` of a batch's seed nodes: both augmented views of
    the batch's subgraph encoded, the seed rows projected. A module, so that
    ``DistributedDataParallel`` can wrap it. The full graph is checked once, here.

    Args:
        model: A :class:`~pyg_progcl.GRACEModel`.
        graph: The full graph (adaptive augmenters fit on it).
    """

    def __init__(self, model: torch.nn.Module, graph: Data):
        super().__init__()
        check_data(graph)
        self.model = model
        self.augmenters = [SubgraphAugmenter(a, graph) for a in (model.augment1, model.augment2)]

    def forward(self, batch: Data) -> tuple[Tensor, Tensor]:
        """The projected views of ``batch``'s seed nodes (its first rows)."""
        seeds = seed_count(batch)
        n_id, weight = batch.get("n_id"), batch.get("edge_weight")
        views = []
        for augment in self.augmenters:
            x, edge_index, edge_weight = augment(batch.x, batch.edge_index, n_id, weight)
            # A subgraph of the checked graph: checked again only after a custom callable.
            kwargs = {"check": augment.has_custom_members} if accepts_check(self.model) else {}
            z = self.model(x, edge_index, edge_weight, **kwargs)
            views.append(self.model.project(z[:seeds]))
        return views[0], views[1]


def minibatch_epoch(
    model: torch.nn.Module,
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    loader,
    optimizer: torch.optim.Optimizer,
    *,
    device: str | torch.device | None = None,
    fit: bool = False,
    data: Optional[Data] = None,
    views: Optional[torch.nn.Module] = None,
    progress: Optional[Callable[[int, Optional[int]], None]] = None,
) -> float:
    r"""One epoch of contrastive training on sampled subgraphs; returns its mean loss over
    the seeds.

    Per batch, ``loss_fn(h1, h2)`` over its seeds' views (docs/algorithms.md §9) and one
    optimiser step; with ``fit``, the mixture refitted on the first batch's detached views.
    Batches with fewer than two seeds, or than ``loss_fn.num_negatives + 1``, are skipped.

    Args:
        model: A :class:`~pyg_progcl.GRACEModel` (``model(x, edge_index, edge_weight)``
            encodes, ``model.project`` projects, ``augment1`` / ``augment2`` augment).
        loss_fn: Any loss of :mod:`pyg_progcl.losses` (or a callable ``(h1, h2)``).
        loader: Yields batches as ``NeighborLoader`` does (:func:`neighbor_loader`).
        device: Where batches go; default: the model's device.
        fit: Refit ``loss_fn``'s mixture at the start of this epoch (after warm-up).
        data: The full graph (default: ``loader.data``), for adaptive augmenters.
        views: The module computing a batch's ``(h1, h2)`` (default: :class:`SeedViews`
            of ``model``), e.g. a ``DistributedDataParallel`` wrapping one.
        progress: ``progress(done, total)``, ``done = 0`` before the first batch, then
            after every batch; ``total`` the loader's length (or ``None``).
    """
    schedule = getattr(loss_fn, "schedule", None)
    if isinstance(schedule, FrozenFit) or schedule == "frozen":
        raise ValueError(
            "`schedule='frozen'` keeps the views of the nodes it was fitted on; batches hold "
            "other nodes, so train it on the full graph"
        )
    if device is None:
        device = next(model.parameters()).device
    model.train()
    if views is None:
        data = data if data is not None else getattr(loader, "data", None)
        if not isinstance(data, Data):
            raise ValueError(
                "pass `data` (the full graph) when the loader has no `.data` attribute"
            )
        views = SeedViews(model, data)
    min_seeds = max(2, (getattr(loss_fn, "num_negatives", None) or 0) + 1)
    batches = len(loader) if hasattr(loader, "__len__") else None
    progress = progress or (lambda done, total: None)
    progress(0, batches)
    total, seen = 0.0, 0
    for done, batch in enumerate(loader, 1):
        seeds = seed_count(batch)
        if seeds >= min_seeds:
            optimizer.zero_grad()
            h1, h2 = views(batch.to(device))
            # ProGCL refits on the epoch's first batch
            if fit and seen == 0 and callable(getattr(loss_fn, "fit", None)):
                loss_fn.fit(h1.detach(), h2.detach())
            loss = loss_fn(h1, h2)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * seeds
            seen += seeds
        progress(done, batches)
    if seen == 0:
        raise ValueError(
            f"no batch had at least {min_seeds} seed nodes; increase `batch_size` (the "
            "loss needs two seeds, and num_negatives + 1 with sampled negatives)"
        )
    return total / seen
