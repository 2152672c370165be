"""One view's augmenters on sampled subgraphs, with the full graph's probabilities
(docs/algorithms.md §9)."""

from __future__ import annotations

from typing import Optional

from torch import Tensor
from torch_geometric.data import Data

from ..augment import (
    AdaptiveEdgeDrop,
    AdaptiveFeatureMask,
    Augmenter,
    ComposeAugmenters,
    drop_edge_weighted,
    mask_feature_weighted,
)

__all__: list[str] = []


def _members(augment) -> list:
    """The augmenters of a view, nested :class:`ComposeAugmenters` flattened (``None``: none)."""
    if isinstance(augment, ComposeAugmenters):
        return [m for aug in augment.augmenters for m in _members(aug)]
    return [] if augment is None else [augment]


class SubgraphAugmenter:
    r"""Applies one view's augmenters to sampled subgraphs with the *full* graph's
    probabilities (GCA, Zhu et al., WWW 2021): looked up per target node for edges, as
    they are for feature columns; other augmenters run on the subgraph as they are.
    Adaptive augmenters not prepared yet are prepared on the full graph.

    Args:
        augment: A model's ``augment1`` / ``augment2`` (an augmenter, a
            :class:`ComposeAugmenters`, a callable or ``None``), in its current train/eval mode.
        data: The full graph the batches are sampled from.
    """

    def __init__(self, augment, data: Data):
        self.members = _members(augment)
        #: Whether a member is a custom callable, whose output may not stay a valid graph.
        self.has_custom_members = any(not isinstance(m, Augmenter) for m in self.members)
        self.node_drop_prob: dict[int, Tensor] = {}
        shared: dict = {}  # (each kind of centrality computed once)
        for i, aug in enumerate(self.members):
            if isinstance(aug, (AdaptiveEdgeDrop, AdaptiveFeatureMask)) and aug.is_active():
                aug._prepare_with(data.x, data.edge_index, data.num_nodes, shared, force=False)
                aug._check_prepared(data.num_nodes)
                if isinstance(aug, AdaptiveEdgeDrop):
                    self.node_drop_prob[i] = aug.node_drop_prob

    def __call__(
        self,
        x: Tensor,
        edge_index: Tensor,
        n_id: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
    ) -> tuple[Tensor, Tensor, Optional[Tensor]]:
        """Augments a subgraph whose node ``j`` is global node ``n_id[j]``; returns
        ``(x, edge_index, edge_weight)``, the weights of the edges kept (``None`` without
        ``edge_weight``).

        Without ``n_id`` (a loader that does not record it) adaptive members are fitted
        on the un-augmented subgraph, as :class:`ComposeAugmenters` fits them on its input.
        """
        if n_id is None:
            for aug in self.members:
                aug.prepare(x, edge_index, x.size(0))
        for i, aug in enumerate(self.members):
            if i in self.node_drop_prob and n_id is not None:
                table = self.node_drop_prob[i]
                prob = table[n_id.to(table.device)[edge_index[1].to(table.device)]]
                edge_index, edge_mask = drop_edge_weighted(edge_index, prob.to(edge_index.device))
                edge_weight = None if edge_weight is None else edge_weight[edge_mask]
            elif isinstance(aug, AdaptiveFeatureMask) and aug.is_active() and n_id is not None:
                x, _ = mask_feature_weighted(x, aug.drop_prob.to(x.device))
            else:
                x, edge_index, edge_weight = aug(x, edge_index, edge_weight)
        return x, edge_index, edge_weight
