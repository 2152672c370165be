"""Graph augmentations of GRACE and GCA (docs/algorithms.md §2): uniform and
centrality-adaptive edge dropping and feature-column masking.

GRACE (Zhu et al., 2020, https://arxiv.org/abs/2006.04131) drops every edge and zeroes
every feature column with probability ``p``; GCA (Zhu et al., 2021,
https://arxiv.org/abs/2010.14945), used by ProGCL, drops unimportant edges and columns
more often, by a node centrality computed once per graph.

Every augmenter is a :class:`torch.nn.Module` whose one ``forward`` takes tensors,
``aug(x, edge_index, edge_weight)``, or a :class:`~torch_geometric.data.Data`,
``aug(data)`` (a new object), as a :class:`~torch_geometric.transforms.BaseTransform`;
in eval mode it is a no-op, while :meth:`GRACEModel.views <pyg_progcl.GRACEModel.views>`
runs it in every mode. The functions follow PyG's contracts: :func:`mask_feature_csr` is
:func:`torch_geometric.utils.mask_feature` for sparse CSR features too (masked columns
lose their entries in ``O(nnz)``), and GCA's :func:`drop_edge_weighted` and
:func:`mask_feature_weighted` return what :func:`~torch_geometric.utils.dropout_edge` and
``mask_feature`` return.
"""

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
