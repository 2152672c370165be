"""The augmentations as functions on tensors, with PyG's contracts (docs/algorithms.md §2)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import mask_feature as _pyg_mask_feature
from torch_geometric.utils.num_nodes import maybe_num_nodes

from .._checks import check_bool, check_choice, check_edge_index, check_features, check_probability

__all__ = ["drop_edge_weighted", "mask_feature_csr", "mask_feature_weighted"]

#: The ``mode`` values of :func:`mask_feature_csr` (PyG's); a CSR ``x`` takes ``'col'`` only.
FEATURE_MASK_MODES = ("row", "col", "all")


def num_nodes_of(x: Optional[Tensor], edge_index: Tensor) -> int:
    """The number of nodes: ``x``'s rows, else one more than ``edge_index``'s largest index."""
    return x.size(0) if x is not None else maybe_num_nodes(edge_index)


def mask_feature_csr(
    x: Tensor,
    p: float = 0.5,
    mode: str = "col",
    fill_value: float = 0.0,
    training: bool = True,
) -> tuple[Tensor, Tensor]:
    r"""Masks features with probability ``p``: PyG's
    :func:`torch_geometric.utils.mask_feature`, extended to CSR ``x`` (``mode='col'`` and
    ``fill_value=0`` only). With ``mode='col'`` (GRACE, Zhu et al., 2020,
    https://arxiv.org/abs/2006.04131) one draw per column is shared by all nodes:
    ``x'_{ij} = x_{ij} m_j``, ``m_j ~ Bernoulli(1 - p)``.

    Args:
        x: Node features ``[num_nodes, num_features]``, dense or CSR.
        p, mode, fill_value, training: As PyG's (``mode``: ``'col'``, ``'row'`` or ``'all'``).

    Returns:
        ``(x, feat_mask)``: the masked features and the boolean keep mask, broadcastable
        with ``x`` (a CSR no-op's is ``[1, num_features]``).
    """
    p = check_probability("p", p)
    check_features(x)
    check_choice("mode", mode, FEATURE_MASK_MODES)
    if x.layout != torch.sparse_csr:
        return _pyg_mask_feature(x, p=p, mode=mode, fill_value=fill_value, training=training)
    if mode != "col":
        raise ValueError(
            f"`mode` must be 'col' for a sparse CSR `x` (got {mode!r}); pass x.to_dense() "
            "for 'row' or 'all'"
        )
    if fill_value != 0:
        raise ValueError(
            f"`fill_value` must be 0 for a sparse CSR `x` (got {fill_value!r}): masked "
            "entries are dropped, not stored"
        )
    return _mask_columns(x, p, training and p > 0.0)  # (PyG's draw for mode='col')


def drop_edge_weighted(
    edge_index: Tensor,
    drop_prob: Tensor,
    training: bool = True,
) -> tuple[Tensor, Tensor]:
    r"""Drops edge ``e`` with its own probability ``drop_prob[e]`` (GCA, Zhu et al., "Graph
    Contrastive Learning with Adaptive Augmentation", 2021,
    https://arxiv.org/abs/2010.14945): ``keep_e ~ Bernoulli(1 - p_e)``; with a constant
    ``drop_prob = p`` the draw of :func:`torch_geometric.utils.dropout_edge`.

    Args:
        edge_index: ``[2, num_edges]``.
        drop_prob: ``[num_edges]`` probabilities, e.g. from :func:`edge_drop_probabilities`.
        training: If :obj:`False`, a no-op.

    Returns:
        ``(edge_index, edge_mask)``: the kept edges and their boolean ``[num_edges]`` mask.
    """
    check_edge_index(edge_index)
    _check_drop_prob(drop_prob, edge_index.size(1), "num_edges")
    if not check_bool("training", training):
        return edge_index, edge_index.new_ones(edge_index.size(1), dtype=torch.bool)
    edge_mask = torch.rand(edge_index.size(1), device=edge_index.device) >= drop_prob
    return edge_index[:, edge_mask], edge_mask


def mask_feature_weighted(
    x: Tensor, drop_prob: Tensor, training: bool = True
) -> tuple[Tensor, Tensor]:
    r"""Zeroes column ``j`` for every node with probability ``drop_prob[j]`` (GCA, Zhu et
    al., 2021, https://arxiv.org/abs/2010.14945): ``x'_{ij} = x_{ij} m_j``, ``m_j ~
    Bernoulli(1 - p_j)``; with a constant ``drop_prob = p > 0``, ``mask_feature_csr(x, p)``.

    Args:
        x: Node features ``[num_nodes, num_features]``, dense or CSR.
        drop_prob: ``[num_features]`` probabilities, e.g. from
            :func:`feature_drop_probabilities`.
        training: If :obj:`False`, a no-op.

    Returns:
        ``(x, feat_mask)``: the masked features and the ``[1, num_features]`` keep mask.
    """
    check_features(x)
    _check_drop_prob(drop_prob, x.size(1), "num_features")
    return _mask_columns(x, drop_prob, check_bool("training", training))


def _mask_columns(x: Tensor, drop_prob, training: bool) -> tuple[Tensor, Tensor]:
    """``x`` with column ``j`` zeroed (CSR: its entries dropped) with probability
    ``drop_prob[j]`` (or ``drop_prob``) if ``training``, and the keep mask: ``[1, F]``, or
    PyG's ``ones_like(x)`` for a dense no-op."""
    if not training:
        shape = (1, x.size(1)) if x.layout == torch.sparse_csr else x.shape
        return x, torch.ones(shape, dtype=torch.bool, device=x.device)
    keep = torch.rand(x.size(1), device=x.device) >= drop_prob
    if x.layout != torch.sparse_csr:
        return x.masked_fill(~keep.view(1, -1), 0.0), keep.view(1, -1)
    crow, col, values = x.crow_indices(), x.col_indices(), x.values()
    kept = keep[col]
    kept_before = torch.cat([kept.new_zeros(1, dtype=crow.dtype), kept.cumsum(0, dtype=crow.dtype)])
    x = torch.sparse_csr_tensor(
        kept_before[crow], col[kept], values[kept], x.shape, check_invariants=False
    )
    return x, keep.view(1, -1)


def _check_drop_prob(drop_prob: Tensor, size: int, what: str) -> None:
    """Checks ``drop_prob`` is a ``[size]`` tensor of probabilities."""
    if not (isinstance(drop_prob, Tensor) and drop_prob.dim() == 1 and drop_prob.numel() == size):
        shape = list(drop_prob.shape) if isinstance(drop_prob, Tensor) else type(drop_prob)
        raise ValueError(f"`drop_prob` must be a tensor of shape [{what}] = [{size}] (got {shape})")
    if drop_prob.numel() and not bool(((drop_prob >= 0) & (drop_prob <= 1)).all()):
        raise ValueError("`drop_prob` must hold probabilities in [0, 1] (got values outside)")
