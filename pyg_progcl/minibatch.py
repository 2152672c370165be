"""Mini-batch contrastive training on sampled subgraphs, and batched inference (spec §9).

When a graph's encoder activations (two augmented views, with autograd) do not fit, each
step trains on the subgraph sampled around ``batch_size`` seed nodes, as GraphSAGE-style
training does (Hamilton et al., "Inductive Representation Learning on Large Graphs",
NeurIPS 2017): both views of the subgraph are encoded, the seed rows are projected, and
the contrastive loss (GRACE, DCL, HCL or ProGCL; Zhu et al. 2020, Xia et al. 2022) is
taken over the seeds, so each seed's negatives are the other seeds of its batch (or
``k`` of them with ``num_negatives``).

Sampling uses :class:`torch_geometric.loader.NeighborLoader` when PyG can sample
(``pyg-lib`` or ``torch-sparse`` installed); otherwise :class:`NeighborSubgraphLoader`,
a pure-torch sampler that draws the same kind of batches (seeds first, ``n_id``,
``e_id``, ``batch_size``, directed edges from sampled in-neighbours to their targets).
Any loader that yields such batches works, e.g. ``RandomNodeLoader`` (without ``n_id`` /
``batch_size`` every node of a batch is a seed, and adaptive augmenters refit per batch).

Python::

    loader = neighbor_loader(data, num_neighbors=[10, 10], batch_size=1024)
    for epoch in range(1, epochs + 1):
        loss = minibatch_epoch(model, loss_fn, loader, optimizer, fit=epoch > warmup)
    z = embed_minibatch(model, data, batch_size=4096)   # exact for GCN encoders
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data

from ._checks import check_choice, check_int
from .augment import (
    AdaptiveEdgeDrop,
    AdaptiveFeatureMask,
    Compose,
    drop_edge_weighted,
    mask_feature_weighted,
)
from .encoders import GCNEncoder, MLPEncoder

__all__ = [
    "NeighborSubgraphLoader",
    "SubgraphAugmenter",
    "embed_minibatch",
    "minibatch_epoch",
    "neighbor_loader",
    "pyg_can_sample",
]

Device = Union[str, torch.device, None]


# ----------------------------------------------------------------------------- sampling


def pyg_can_sample() -> bool:
    """Whether PyG's ``NeighborLoader`` can sample here (it needs pyg-lib or torch-sparse)."""
    import torch_geometric.typing as pyg_typing

    return bool(pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE)


def check_num_neighbors(num_neighbors: Sequence[int]) -> list[int]:
    """Checks a per-hop fan-out list: integers ``>= 1``, or ``-1`` for all neighbours."""
    if isinstance(num_neighbors, (int, str)) or not len(num_neighbors):
        raise ValueError(
            f"`num_neighbors` must be a non-empty list of integers, one per hop (got "
            f"{num_neighbors!r})"
        )
    values = [check_int("num_neighbors", k, minimum=-1) for k in num_neighbors]
    if 0 in values:
        raise ValueError(f"`num_neighbors` entries must be >= 1 or -1 (all) (got {values})")
    return values


class _InEdges:
    """The edges of a graph grouped by target node (CSC), for sampling in-neighbours."""

    def __init__(self, edge_index: Tensor, num_nodes: int, edge_weight: Optional[Tensor] = None):
        edge_index = edge_index.cpu()
        self.perm = torch.argsort(edge_index[1], stable=True)
        self.source = edge_index[0, self.perm]
        self.weight = None if edge_weight is None else edge_weight.cpu()[self.perm]
        counts = torch.bincount(edge_index[1], minlength=num_nodes)
        self.ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        self.num_nodes = num_nodes

    def sample(self, targets: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """Positions (into the sorted edges) of up to ``k`` in-edges per target, without
        replacement (all of them for ``k = -1``), and each edge's target slot."""
        start = self.ptr[targets]
        deg = self.ptr[targets + 1] - start
        slot = torch.repeat_interleave(torch.arange(targets.numel()), deg)
        offset = torch.arange(slot.numel()) - torch.repeat_interleave(deg.cumsum(0) - deg, deg)
        pos = start[slot] + offset
        if k < 0 or slot.numel() == 0 or int(deg.max()) <= k:
            return pos, slot
        # A random order within each target's edges: sort by slot + uniform key in [0, 1).
        order = torch.argsort(slot.double() + torch.rand(slot.numel(), dtype=torch.float64))
        first = torch.repeat_interleave(deg.cumsum(0) - deg, deg)
        keep = order[(torch.arange(order.numel()) - first) < k]
        return pos[keep], slot[keep]


class NeighborSubgraphLoader:
    r"""Neighbour sampling in plain torch, shaped like PyG's ``NeighborLoader``.

    Each batch is the subgraph sampled around ``batch_size`` seed nodes: hop ``l`` draws
    up to ``num_neighbors[l]`` in-neighbours (without replacement; ``-1``: all) of the
    nodes first reached at hop ``l - 1``, as ``NeighborLoader`` does (Hamilton et al.,
    2017). The batch holds ``x`` (and ``y``) of the sampled nodes, seeds first, the
    sampled edges relabelled (``source -> target``), ``n_id`` and ``e_id`` (global node and
    edge ids) and ``batch_size`` (the number of seeds). Used where PyG cannot sample
    (no pyg-lib / torch-sparse); see :func:`neighbor_loader`.

    Args:
        data: The graph (``x``, ``edge_index``, optionally ``y``).
        num_neighbors: Neighbours sampled per hop, e.g. ``[10, 10]``.
        batch_size: Seed nodes per batch.
        input_nodes: Seed candidates (index or boolean mask); default: all nodes.
        shuffle: Draw the seeds in a random order each epoch (torch's global RNG).
        drop_last: Skip the last, smaller batch.
    """

    def __init__(
        self,
        data: Data,
        num_neighbors: Sequence[int],
        batch_size: int = 1,
        input_nodes: Optional[Tensor] = None,
        shuffle: bool = False,
        drop_last: bool = False,
    ):
        self.data = data
        self.num_neighbors = check_num_neighbors(num_neighbors)
        self.batch_size = check_int("batch_size", batch_size)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        n = data.num_nodes
        if input_nodes is None:
            input_nodes = torch.arange(n)
        elif input_nodes.dtype == torch.bool:
            input_nodes = input_nodes.nonzero().view(-1)
        self.input_nodes = input_nodes.cpu().long()
        self._edges = _InEdges(data.edge_index, n)
        self._local = torch.full((n,), -1, dtype=torch.long)

    def __len__(self) -> int:
        full, rest = divmod(self.input_nodes.numel(), self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def __iter__(self) -> Iterator[Data]:
        seeds = self.input_nodes
        if self.shuffle:
            seeds = seeds[torch.randperm(seeds.numel())]
        for i in range(len(self)):
            yield self.sample(seeds[i * self.batch_size : (i + 1) * self.batch_size])

    def sample(self, seeds: Tensor) -> Data:
        """The batch of the subgraph sampled around ``seeds`` (distinct node ids)."""
        local, edges = self._local, self._edges
        n_id, frontier = [seeds], seeds
        local[seeds] = torch.arange(seeds.numel())
        count = seeds.numel()
        src, dst, e_pos = [], [], []
        try:
            for k in self.num_neighbors:
                pos, slot = edges.sample(frontier, k)
                source = edges.source[pos]
                new = torch.unique(source[local[source] < 0])
                local[new] = torch.arange(count, count + new.numel())
                count += new.numel()
                src.append(local[source])
                dst.append(local[frontier[slot]])
                e_pos.append(pos)
                n_id.append(new)
                frontier = new
            n_id = torch.cat(n_id)
        finally:
            local[torch.cat(n_id) if isinstance(n_id, list) else n_id] = -1
        batch = Data(
            edge_index=torch.stack([torch.cat(src), torch.cat(dst)]),
            n_id=n_id,
            e_id=edges.perm[torch.cat(e_pos)],
            batch_size=int(seeds.numel()),
            input_id=seeds,
            num_nodes=int(n_id.numel()),
        )
        for key in ("x", "y"):
            if self.data.get(key) is not None:
                batch[key] = self.data[key][n_id.to(self.data[key].device)]
        return batch


def neighbor_loader(
    data: Data,
    num_neighbors: Sequence[int],
    batch_size: int,
    *,
    shuffle: bool = True,
    input_nodes: Optional[Tensor] = None,
    backend: str = "auto",
    **kwargs: Any,
):
    """A neighbour-sampling loader: PyG's ``NeighborLoader`` if it can sample, else
    :class:`NeighborSubgraphLoader` (same batches, plain torch).

    Args:
        data: The graph (kept where it is; batches are moved by the training loop).
        num_neighbors: Neighbours per hop (``-1``: all), e.g. ``[10, 10]``.
        batch_size: Seed nodes per batch.
        shuffle: Random seed order every epoch.
        input_nodes: Seed candidates; default all nodes.
        backend: ``"auto"``, ``"pyg"`` (``NeighborLoader``; fails at the first batch
            without pyg-lib / torch-sparse) or ``"torch"`` (:class:`NeighborSubgraphLoader`).
        **kwargs: Passed to ``NeighborLoader`` (e.g. ``num_workers``); ``drop_last`` is
            also understood by the fallback.
    """
    num_neighbors = check_num_neighbors(num_neighbors)
    batch_size = check_int("batch_size", batch_size)
    check_choice("backend", backend, {"auto", "pyg", "torch"})
    if backend == "pyg" or (backend == "auto" and pyg_can_sample()):
        from torch_geometric.loader import NeighborLoader

        return NeighborLoader(
            data,
            num_neighbors=num_neighbors,
            batch_size=batch_size,
            shuffle=shuffle,
            input_nodes=input_nodes,
            **kwargs,
        )
    drop_last = bool(kwargs.pop("drop_last", False))
    if kwargs:
        raise ValueError(f"unsupported options for the plain-torch loader: {sorted(kwargs)}")
    return NeighborSubgraphLoader(data, num_neighbors, batch_size, input_nodes, shuffle, drop_last)


# ----------------------------------------------------------------------------- augmentation


def _members(augment) -> list:
    if isinstance(augment, Compose):
        return [m for aug in augment.augmenters for m in _members(aug)]
    return [] if augment is None else [augment]


class SubgraphAugmenter:
    r"""Applies one view's augmenters to sampled subgraphs with the *full* graph's
    probabilities.

    GCA's adaptive augmenters (Zhu et al., "Graph Contrastive Learning with Adaptive
    Augmentation", WWW 2021) derive drop probabilities from centralities of the whole
    graph; on a subgraph they are looked up, not refitted: an edge's drop probability
    depends only on its target node, so a per-node table serves every batch, and the
    feature-column probabilities are global. Uniform augmenters (and any other callable)
    are applied to the subgraph as they are.

    Args:
        augment: A model's ``augment1`` / ``augment2`` (an augmenter, a
            :class:`Compose`, a callable or ``None``), in its current train/eval mode.
        data: The full graph the batches are sampled from.
    """

    def __init__(self, augment, data: Data):
        self.members = _members(augment)
        self.node_drop_prob: dict[int, Tensor] = {}
        for i, aug in enumerate(self.members):
            if isinstance(aug, (AdaptiveEdgeDrop, AdaptiveFeatureMask)):
                aug._prepare(data.x, data.edge_index, data.num_nodes)  # cached per graph
            if isinstance(aug, AdaptiveEdgeDrop) and aug.is_active():
                prob = torch.zeros(data.num_nodes, dtype=aug.drop_prob.dtype)
                target = data.edge_index[1].to(prob.device)
                self.node_drop_prob[i] = prob.scatter_(0, target, aug.drop_prob.to(prob.device))

    def __call__(
        self, x: Tensor, edge_index: Tensor, n_id: Optional[Tensor] = None
    ) -> tuple[Tensor, Tensor, Optional[Tensor]]:
        """Augments a subgraph whose node ``j`` is global node ``n_id[j]``."""
        edge_weight = None
        for i, aug in enumerate(self.members):
            if i in self.node_drop_prob and n_id is not None:
                table = self.node_drop_prob[i]
                prob = table[n_id.to(table.device)[edge_index[1].to(table.device)]]
                edge_index, edge_weight = drop_edge_weighted(
                    edge_index, prob.to(edge_index.device), edge_weight
                )
            elif isinstance(aug, AdaptiveFeatureMask) and aug.is_active() and n_id is not None:
                x = mask_feature_weighted(x, aug.drop_prob.to(x.device))
            else:
                x, edge_index, edge_weight = aug(x, edge_index, edge_weight)
        return x, edge_index, edge_weight


# ----------------------------------------------------------------------------- training


def _seed_count(batch: Data) -> int:
    size = batch.get("batch_size")
    return int(batch.num_nodes if size is None else size)


def _graph_of(loader, data: Optional[Data]) -> Data:
    data = data if data is not None else getattr(loader, "data", None)
    if not isinstance(data, Data):
        raise ValueError("pass `data` (the full graph) when the loader has no `.data` attribute")
    return data


def _seed_views(model, augmenters, batch: Data, device) -> tuple[Tensor, Tensor]:
    """Projected views ``(h1, h2)`` of the batch's seed nodes."""
    batch = batch.to(device)
    seeds = _seed_count(batch)
    n_id = batch.get("n_id")
    views = []
    for augment in augmenters:
        x, edge_index, edge_weight = augment(batch.x, batch.edge_index, n_id)
        z = model(x, edge_index, edge_weight)
        views.append(model.project(z[:seeds]))
    return views[0], views[1]


def minibatch_epoch(
    model: torch.nn.Module,
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    loader,
    optimizer: torch.optim.Optimizer,
    *,
    device: Device = None,
    fit: bool = False,
    data: Optional[Data] = None,
) -> float:
    r"""One epoch of contrastive training on sampled subgraphs.

    For every batch (the subgraph around ``batch.batch_size`` seed nodes): two augmented
    views of the subgraph are encoded by ``model`` (a :class:`~pyg_progcl.GRACEModel`),
    the seed rows projected, and ``loss_fn(h1, h2)`` taken over the seeds, whose
    negatives are the other seeds of the batch; then one optimiser step. With ``fit``,
    ProGCL's mixture (Xia et al., ICML 2022) is refitted once, on the first batch's
    detached projections before its loss, so the rest of the epoch weights negatives
    with a mixture of the current embeddings, as the full-graph trainer refits once per
    epoch after its warm-up.

    Batches with fewer than two seeds, or fewer seeds than ``loss_fn.num_negatives + 1``,
    are skipped (a last, small batch); use ``drop_last`` to avoid them.

    Args:
        model: A :class:`~pyg_progcl.GRACEModel` (``model(x, edge_index, edge_weight)``
            encodes, ``model.project`` projects, ``augment1`` / ``augment2`` augment).
        loss_fn: Any loss of :mod:`pyg_progcl.losses` (or a callable ``(h1, h2)``).
        loader: Yields batches as ``NeighborLoader`` does (:func:`neighbor_loader`).
        optimizer: Steps after every batch.
        device: Where batches go; default: the model's device.
        fit: Refit ``loss_fn``'s mixture at the start of this epoch (after warm-up).
        data: The full graph (default: ``loader.data``), for adaptive augmenters.

    Returns:
        The epoch's mean loss over its seeds.
    """
    if device is None:
        device = next(model.parameters()).device
    model.train()
    graph = _graph_of(loader, data)
    augmenters = [SubgraphAugmenter(a, graph) for a in (model.augment1, model.augment2)]
    min_seeds = max(2, (getattr(loss_fn, "num_negatives", None) or 0) + 1)
    total, seen = 0.0, 0
    for batch in loader:
        seeds = _seed_count(batch)
        if seeds < min_seeds:
            continue
        optimizer.zero_grad()
        h1, h2 = _seed_views(model, augmenters, batch, device)
        if fit and seen == 0 and callable(getattr(loss_fn, "fit", None)):
            loss_fn.fit(h1.detach(), h2.detach())
        loss = loss_fn(h1, h2)
        loss.backward()
        optimizer.step()
        total += float(loss.detach()) * seeds
        seen += seeds
    if seen == 0:
        raise ValueError(
            f"no batch had at least {min_seeds} seed nodes; increase `batch_size` (the "
            "loss needs two seeds, and num_negatives + 1 with sampled negatives)"
        )
    return total / seen


# ----------------------------------------------------------------------------- inference


def _layerwise_supported(encoder) -> bool:
    from torch_geometric.nn import GATConv, GATv2Conv, GCNConv, GINConv, GraphConv, SAGEConv

    if isinstance(encoder, MLPEncoder):
        return True
    if not isinstance(encoder, GCNEncoder):
        return False
    exact = (GCNConv, SAGEConv, GATConv, GATv2Conv, GINConv, GraphConv)
    return all(
        isinstance(conv, exact) and getattr(conv, "flow", "source_to_target") == "source_to_target"
        for conv in encoder.layers
    )


def _layer_graph(
    conv, edge_index: Tensor, num_nodes: int, dtype
) -> tuple[Tensor, Optional[Tensor]]:
    """The edges (and weights) one layer aggregates over: GCN's symmetric normalisation
    with the full graph's degrees (self-loops included); the raw edges otherwise."""
    from torch_geometric.nn import GCNConv
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    if isinstance(conv, GCNConv) and conv.normalize:
        return gcn_norm(
            edge_index, None, num_nodes, conv.improved, conv.add_self_loops, conv.flow, dtype
        )
    return edge_index, None


def _apply_layer(conv, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> Tensor:
    from torch_geometric.nn import GCNConv

    if isinstance(conv, GCNConv) and conv.normalize:
        conv.normalize = False  # the weights already hold the full graph's normalisation
        try:
            return conv(x, edge_index, edge_weight)
        finally:
            conv.normalize = True
    return conv(x, edge_index)


@torch.no_grad()
def _layerwise(encoder, x: Tensor, edge_index: Tensor, batch_size: int, device) -> Tensor:
    """Exact encoder output, one layer at a time over target-node batches: a layer's
    output at a node needs only its in-neighbours' inputs (and, for GCN, degrees)."""
    n = x.size(0)
    local = torch.full((n,), -1, dtype=torch.long)
    for conv, act in zip(encoder.layers, encoder.activations):
        out = None
        if isinstance(encoder, MLPEncoder):
            graph = None
        else:
            ei, ew = _layer_graph(conv, edge_index.cpu(), n, x.dtype)
            graph = _InEdges(ei, n, ew)
        for start in range(0, n, batch_size):
            targets = torch.arange(start, min(start + batch_size, n))
            if graph is None:
                h = act(conv(x[targets].to(device)))
            else:
                pos, slot = graph.sample(targets, -1)
                source = graph.source[pos]
                local[targets] = torch.arange(targets.numel())
                others = torch.unique(source[local[source] < 0])
                local[others] = torch.arange(targets.numel(), targets.numel() + others.numel())
                nodes = torch.cat([targets, others])
                sub_ei = torch.stack([local[source], slot]).to(device)
                weight = None if graph.weight is None else graph.weight[pos].to(device)
                local[nodes] = -1
                h = act(_apply_layer(conv, x[nodes.to(x.device)].to(device), sub_ei, weight))
                h = h[: targets.numel()]
            if out is None:
                out = x.new_empty(n, h.size(1))
            out[start : start + targets.numel()] = h.to(out.device)
        x = out
    return x


@torch.no_grad()
def embed_minibatch(
    model: torch.nn.Module,
    data: Data,
    batch_size: int,
    num_neighbors: Optional[Sequence[int]] = None,
    *,
    device: Device = None,
) -> Tensor:
    r"""Encoder embeddings ``f(G)`` of every node, computed in batches of nodes.

    With ``num_neighbors=None`` the result is exact (equal to ``model(data.x,
    data.edge_index)`` up to float round-off): for :class:`~pyg_progcl.GCNEncoder` with
    GCN, SAGE, GAT, GATv2, GIN or GraphConv layers and for :class:`~pyg_progcl.MLPEncoder`
    it runs layer by layer over batches of target nodes and their in-neighbours (GCN's
    normalisation uses the full graph's degrees), one pass per layer; other encoders are
    run on full ``L + 1``-hop neighbourhoods (``-1`` per hop; the extra hop gives the
    outermost nodes their true degrees), with ``L = encoder.num_layers``. With an explicit
    ``num_neighbors`` the embeddings come from sampled neighbourhoods (approximate,
    cheaper), seeds' rows of each batch.

    Args:
        model: A :class:`~pyg_progcl.GRACEModel` (or an encoder ``(x, edge_index) -> z``).
        data: The graph.
        batch_size: Nodes per batch.
        num_neighbors: Sampled neighbours per hop; ``None``: exact inference.
        device: Where batches are encoded (default: the model's device); the result is on
            ``data.x``'s device.

    Returns:
        ``[num_nodes, hidden_channels]`` embeddings.
    """
    batch_size = check_int("batch_size", batch_size)
    if device is None:
        device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        encoder = getattr(model, "encoder", model)
        if num_neighbors is None and _layerwise_supported(encoder):
            return _layerwise(encoder, data.x, data.edge_index, batch_size, device)
        if num_neighbors is None:
            layers = getattr(encoder, "num_layers", None)
            if layers is None:
                raise ValueError(
                    "pass `num_neighbors` for an encoder without a `num_layers` attribute"
                )
            num_neighbors = [-1] * (int(layers) + 1)
        loader = neighbor_loader(data, num_neighbors, batch_size, shuffle=False)
        out = None
        for batch in loader:
            seeds = _seed_count(batch)
            batch = batch.to(device)
            z = model(batch.x, batch.edge_index)[:seeds]
            if out is None:
                out = data.x.new_empty(data.num_nodes, z.size(1))
            out[batch.n_id[:seeds].to(out.device)] = z.to(out.device)
        return out
    finally:
        model.train(was_training)
