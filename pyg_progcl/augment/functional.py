"""The augmentations as functions on tensors: GRACE's uniform edge dropping and
feature-column masking, and GCA's variants with a probability per edge / column.

Feature masks take dense or sparse CSR feature matrices; a CSR matrix loses the entries
of its masked columns (``O(nnz)``, no dense copy).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import dropout_edge
from torch_geometric.utils import mask_feature as _pyg_mask_feature
from torch_geometric.utils.num_nodes import maybe_num_nodes

from .._checks import check_edge_index, check_features, check_probability

EdgeOutput = tuple[Tensor, Optional[Tensor]]


def num_nodes_of(x: Optional[Tensor], edge_index: Tensor) -> int:
    """The number of nodes: ``x``'s rows, else one more than ``edge_index``'s largest index."""
    return x.size(0) if x is not None else maybe_num_nodes(edge_index)


def drop_edge(
    edge_index: Tensor,
    p: float,
    edge_weight: Optional[Tensor] = None,
    training: bool = True,
) -> EdgeOutput:
    r"""Drops every edge independently with probability ``p`` (GRACE, Zhu et al., 2020).

    ``keep_e ~ Bernoulli(1 - p)``, via :func:`torch_geometric.utils.dropout_edge`.

    Args:
        edge_index (torch.Tensor): ``[2, num_edges]``.
        p (float): Drop probability in ``[0, 1]``.
        edge_weight (torch.Tensor, optional): ``[num_edges]``, filtered alike.
        training (bool, optional): If :obj:`False`, a no-op. (default: :obj:`True`)

    Returns:
        ``(edge_index, edge_weight)`` of the kept edges (``edge_weight`` stays
        :obj:`None` when not given).
    """
    p = check_probability("p", p)
    check_edge_index(edge_index)
    edge_index, mask = dropout_edge(edge_index, p=p, training=training)
    return edge_index, None if edge_weight is None else edge_weight[mask]


def mask_feature(x: Tensor, p: float, training: bool = True) -> Tensor:
    r"""Zeroes every feature column with probability ``p``, the same columns for all
    nodes (GRACE, Zhu et al., 2020): ``x'_{ij} = x_{ij} m_j``, ``m_j ~ Bernoulli(1 - p)``.

    Uses :func:`torch_geometric.utils.mask_feature` with ``mode='col'``; a sparse CSR
    ``x`` gets the same draw and loses the masked columns' entries.

    Args:
        x (torch.Tensor): Node features ``[num_nodes, num_features]``, dense or CSR.
        p (float): Masking probability in ``[0, 1]``.
        training (bool, optional): If :obj:`False`, a no-op. (default: :obj:`True`)

    Returns:
        The masked feature matrix (a new tensor unless it is a no-op).
    """
    p = check_probability("p", p)
    check_features(x)
    if x.layout != torch.sparse_csr:
        return _pyg_mask_feature(x, p=p, mode="col", training=training)[0]
    if not training or p == 0.0:
        return x
    return _keep_columns(x, torch.rand(x.size(1), device=x.device) >= p)  # PyG's draw


def drop_edge_weighted(
    edge_index: Tensor,
    drop_prob: Tensor,
    edge_weight: Optional[Tensor] = None,
    training: bool = True,
) -> EdgeOutput:
    r"""Drops edge ``e`` with its own probability ``drop_prob[e]`` (GCA, Zhu et al., 2021):
    ``keep_e ~ Bernoulli(1 - p_e)``.

    With a constant ``drop_prob`` it draws exactly what :func:`drop_edge` draws
    under the same seed.

    Args:
        edge_index (torch.Tensor): ``[2, num_edges]``.
        drop_prob (torch.Tensor): ``[num_edges]`` probabilities, e.g. from
            :func:`edge_drop_probabilities`.
        edge_weight (torch.Tensor, optional): ``[num_edges]``, filtered alike.
        training (bool, optional): If :obj:`False`, a no-op. (default: :obj:`True`)

    Returns:
        ``(edge_index, edge_weight)`` of the kept edges.
    """
    check_edge_index(edge_index)
    _check_drop_prob(drop_prob, edge_index.size(1), "num_edges")
    if not training:
        return edge_index, edge_weight
    keep = torch.rand(edge_index.size(1), device=edge_index.device) >= drop_prob
    return edge_index[:, keep], None if edge_weight is None else edge_weight[keep]


def mask_feature_weighted(x: Tensor, drop_prob: Tensor, training: bool = True) -> Tensor:
    r"""Zeroes column ``j`` for every node with probability ``drop_prob[j]`` (GCA, Zhu et
    al., 2021): ``x'_{ij} = x_{ij} m_j``, ``m_j ~ Bernoulli(1 - p_j)``.

    With a constant ``drop_prob`` it draws exactly what :func:`mask_feature`
    draws under the same seed.

    Args:
        x (torch.Tensor): Node features ``[num_nodes, num_features]``, dense or CSR.
        drop_prob (torch.Tensor): ``[num_features]`` probabilities, e.g. from
            :func:`feature_drop_probabilities`.
        training (bool, optional): If :obj:`False`, a no-op. (default: :obj:`True`)
    """
    check_features(x)
    _check_drop_prob(drop_prob, x.size(1), "num_features")
    if not training:
        return x
    return _keep_columns(x, torch.rand(x.size(1), device=x.device) >= drop_prob)


def _keep_columns(x: Tensor, keep: Tensor) -> Tensor:
    """``x`` with the columns where ``keep`` is ``False`` zeroed. A CSR ``x`` drops their
    entries instead, in ``O(nnz)``: the result is what ``to_sparse_csr`` gives for the
    masked dense matrix."""
    if x.layout != torch.sparse_csr:
        return x.masked_fill(~keep.view(1, -1), 0.0)
    crow, col, values = x.crow_indices(), x.col_indices(), x.values()
    kept = keep[col]
    kept_before = torch.cat([kept.new_zeros(1, dtype=crow.dtype), kept.cumsum(0, dtype=crow.dtype)])
    return torch.sparse_csr_tensor(
        kept_before[crow], col[kept], values[kept], x.shape, check_invariants=False
    )


def _check_drop_prob(drop_prob: Tensor, size: int, what: str) -> Tensor:
    if not (isinstance(drop_prob, Tensor) and drop_prob.dim() == 1 and drop_prob.numel() == size):
        shape = list(drop_prob.shape) if isinstance(drop_prob, Tensor) else type(drop_prob)
        raise ValueError(f"`drop_prob` must be a tensor of shape [{what}] = [{size}] (got {shape})")
    if drop_prob.numel() and not bool(((drop_prob >= 0) & (drop_prob <= 1)).all()):
        raise ValueError("`drop_prob` must hold probabilities in [0, 1] (got values outside)")
    return drop_prob
