"""Graph augmentations (docs/algorithms.md §2): GRACE's (Zhu et al., 2020,
https://arxiv.org/abs/2006.04131) drop every edge and zero every feature column with
probability ``p``; GCA's (Zhu et al., 2021, https://arxiv.org/abs/2010.14945), used by
ProGCL, drop unimportant ones more often, by a node centrality. Every augmenter is a
:class:`torch.nn.Module` taking ``(x, edge_index, edge_weight)`` and a PyG
:class:`~torch_geometric.transforms.BaseTransform` taking a ``Data``."""

from .adaptive import AdaptiveEdgeDrop, AdaptiveFeatureMask
from .centrality import node_centrality
from .functional import drop_edge_weighted, mask_feature_csr, mask_feature_weighted
from .modules import Augmenter, ComposeAugmenters, EdgeDrop, FeatureMask
from .probabilities import edge_drop_probabilities, feature_drop_probabilities

__all__ = [
    "AdaptiveEdgeDrop",
    "AdaptiveFeatureMask",
    "Augmenter",
    "ComposeAugmenters",
    "EdgeDrop",
    "FeatureMask",
    "drop_edge_weighted",
    "edge_drop_probabilities",
    "feature_drop_probabilities",
    "mask_feature_csr",
    "mask_feature_weighted",
    "node_centrality",
]
