"""Mini-batch contrastive training on sampled subgraphs (Hamilton et al., NeurIPS 2017),
and batched inference (docs/algorithms.md §9). Batches come from PyG's ``NeighborLoader``
where pyg-lib is installed, else from :class:`NeighborSubgraphLoader`, or any such loader.

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
