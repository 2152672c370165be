"""Mini-batch contrastive training on sampled subgraphs, and batched inference
(docs/algorithms.md §9).

When a graph's encoder activations (two augmented views, with autograd) do not fit, each
step trains on the subgraph sampled around ``batch_size`` seed nodes, as GraphSAGE-style
training does (Hamilton et al., "Inductive Representation Learning on Large Graphs",
NeurIPS 2017): both views of the subgraph are encoded, the seed rows are projected, and
the contrastive loss (GRACE, DCL, HCL or ProGCL; Zhu et al. 2020, Xia et al. 2022) is
taken over the seeds, so each seed's negatives are the other seeds of its batch (or
``k`` of them with ``num_negatives``).

Sampling uses :class:`torch_geometric.loader.NeighborLoader` when ``pyg-lib`` is
installed (or with ``backend="pyg"``, also on ``torch-sparse``); otherwise
:class:`NeighborSubgraphLoader`, a pure-torch sampler that draws the same kind of batches (seeds first, ``n_id``,
``e_id``, ``batch_size``, directed edges from sampled in-neighbours to their targets).
Any loader that yields such batches works, e.g. ``RandomNodeLoader`` (without ``n_id`` /
``batch_size`` every node of a batch is a seed, and adaptive augmenters refit per batch).

Python::

    loader = neighbor_loader(data, num_neighbors=[10, 10], batch_size=1024)
    for epoch in range(1, epochs + 1):
        loss = minibatch_epoch(model, loss_fn, loader, optimizer, fit=epoch > warmup)
    z = embed_minibatch(model, data, batch_size=4096)   # exact for GCN encoders
"""

from .augmentation import SubgraphAugmenter
from .epoch import SeedViews, minibatch_epoch
from .inference import embed_minibatch
from .sampling import (
    NeighborSubgraphLoader,
    default_backend,
    epoch_seeds,
    neighbor_loader,
    pyg_can_sample,
)

__all__ = [
    "SeedViews",
    "embed_minibatch",
    "epoch_seeds",
    "minibatch_epoch",
    "neighbor_loader",
    "SubgraphAugmenter",
    "NeighborSubgraphLoader",
    "default_backend",
    "pyg_can_sample",
]
