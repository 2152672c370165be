"""Graph augmentations of GRACE and GCA: uniform and centrality-adaptive edge
dropping and feature-column masking (docs/algorithms.md §2).

* GRACE (Zhu et al., 2020, https://arxiv.org/abs/2006.04131) drops every edge
  with probability ``p`` and zeroes every feature column with probability ``p``
  (one column mask shared by all nodes).
* GCA (Zhu et al., "Graph Contrastive Learning with Adaptive Augmentation",
  2021, https://arxiv.org/abs/2010.14945), used by ProGCL, drops unimportant
  edges / columns more often: ``p_i = min((s_max - s_i) / (s_max - s_mean) * p, threshold)``
  with ``s_e = log c(target of e)`` for edges and ``w_j = log(sum_i [x_ij != 0] c_i)``
  for feature columns, ``c`` a node centrality computed once per graph.

Every augmenter is both a :class:`torch.nn.Module` (``.train()`` / ``.eval()``
of a parent model propagate; called on its own in eval mode it is a no-op, while
:meth:`GRACEModel.views <pyg_progcl.GRACEModel.views>` runs it in every mode) and a
:class:`torch_geometric.transforms.BaseTransform`:

.. code-block:: python

    aug = ComposeAugmenters(EdgeDrop(0.2), FeatureMask(0.3))
    x, edge_index, edge_weight = aug(x, edge_index)   # tensors
    view = aug(data)                                  # a new Data, input untouched

The functions follow PyG's contracts: :func:`mask_feature_csr` is
:func:`torch_geometric.utils.mask_feature` (``(x, feat_mask)``) that also takes sparse CSR
features; uniform edge dropping is :func:`torch_geometric.utils.dropout_edge` itself; GCA's
:func:`drop_edge_weighted` and :func:`mask_feature_weighted` return ``(edge_index,
edge_mask)`` and ``(x, feat_mask)`` like them.

A CSR feature matrix loses the entries of its masked columns (``O(nnz)``, no dense copy),
which is how :class:`~pyg_progcl.GRACEModel` feeds bag-of-words features to an encoder that takes them
sparse.

Modules: :mod:`.functional` (the functions on tensors), :mod:`.modules` (``Augmenter``,
``EdgeDrop``, ``FeatureMask``, ``ComposeAugmenters``), :mod:`.adaptive` (GCA's augmenters), their
:mod:`.centrality` and :mod:`.probabilities`.
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
