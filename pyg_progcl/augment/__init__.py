"""Graph augmentations, GRACE's and GCA's (docs/algorithms.md §2): each augmenter is a
:class:`torch.nn.Module` on ``(x, edge_index, edge_weight)`` and a PyG
:class:`~torch_geometric.transforms.BaseTransform` on a ``Data``."""

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
