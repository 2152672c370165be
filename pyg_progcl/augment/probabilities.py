"""GCA's drop probabilities: rare for important edges and feature columns, mean ``p`` until
the cap ``threshold`` binds (docs/algorithms.md §2)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils.sparse import ptr2index

from .._checks import check_features, check_probability, check_within

__all__ = ["edge_drop_probabilities", "feature_drop_probabilities"]

DEFAULT_THRESHOLD = 0.7

_LOG_EPS = 1e-8  # log(c + eps): the reference's guard for zero eigenvector centrality
_TIE_TOL = 1e-6  # relative spread of the scores below which they count as all equal
_DENSE_FRACTION = 0.5  # features with more non-zeros than this are "dense"


def check_threshold(threshold: float) -> float:
    """Checks the cap ``threshold`` lies in ``(0, 1]``."""
    return check_within("threshold", threshold, 0.0, 1.0, "a cap on drop probabilities")


def _log_scores(values: Tensor) -> Tensor:
    """``log(max(v, 0) + eps)`` in float64."""
    return torch.log(values.to(torch.float64).clamp_min(0.0) + _LOG_EPS)


def _scores_to_probabilities(scores: Tensor, p: float, threshold: float) -> Tensor:
    """``min((s_max - s) / (s_max - s_mean) * p, threshold)``; uniform ``p`` if all scores tie."""
    if scores.numel() == 0:
        return scores.to(torch.get_default_dtype())
    gap = scores.max() - scores
    spread = gap.mean()  # = s_max - s_mean, so the rescaled mean is exactly p
    if bool(spread > _TIE_TOL * (1.0 + scores.abs().max())):
        prob = gap * (p / spread)
    else:
        prob = torch.full_like(scores, p)
    return prob.clamp(max=threshold).to(torch.get_default_dtype())


def edge_drop_probabilities(
    edge_index: Tensor,
    centrality: Tensor,
    p: float,
    threshold: float = DEFAULT_THRESHOLD,
) -> Tensor:
    r"""GCA's per-edge drop probabilities ``[num_edges]`` (Zhu et al., 2021):
    ``p_e = min((s_max - s_e) / (s_max - s_mean) * p, threshold)``, ``s_e = log c(target of e)``
    (all-equal scores: a uniform ``min(p, threshold)``).

    Args:
        edge_index: ``[2, num_edges]``.
        centrality: ``[num_nodes]``, e.g. from :func:`node_centrality`.
        p, threshold: The mean drop probability in ``[0, 1]`` and its cap in ``(0, 1]``.
    """
    from .._graphs import check_graph  # (node ids in range)

    p = check_probability("p", p)
    threshold = check_threshold(threshold)
    if not (isinstance(centrality, Tensor) and centrality.dim() == 1):
        raise ValueError("`centrality` must be a tensor of shape [num_nodes]")
    check_graph(None, edge_index, num_nodes=centrality.numel())
    scores = _log_scores(centrality.to(edge_index.device))[edge_index[1]]
    return _scores_to_probabilities(scores, p, threshold)


def is_dense(x: Tensor) -> bool:
    """Whether ``x`` counts as dense real-valued features (more than half non-zero)."""
    stored = x.values() if x.layout == torch.sparse_csr else x
    return bool(torch.count_nonzero(stored) > _DENSE_FRACTION * x.numel())


def feature_drop_probabilities(
    x: Tensor,
    centrality: Tensor,
    p: float,
    threshold: float = DEFAULT_THRESHOLD,
    dense: Optional[bool] = None,
) -> Tensor:
    r"""GCA's per-column drop probabilities ``[num_features]`` (Zhu et al., 2021):
    ``p_j = min((w_max - w_j) / (w_max - w_mean) * p, threshold)``, ``w_j = log(sum_i [x_ij != 0] c_i)``.

    Args:
        x: Node features ``[num_nodes, num_features]``, dense or CSR.
        centrality: ``[num_nodes]``, e.g. from :func:`node_centrality`.
        p, threshold: The mean masking probability in ``[0, 1]`` and its cap in ``(0, 1]``.
        dense: Use ``|x_ij|`` for the indicator (as GCA for WikiCS); :obj:`None`: where
            :func:`is_dense`.
    """
    p = check_probability("p", p)
    threshold = check_threshold(threshold)
    check_features(x)
    if not (isinstance(centrality, Tensor) and centrality.shape == (x.size(0),)):
        raise ValueError(f"`centrality` must be a tensor of shape [num_nodes] = [{x.size(0)}]")
    dense = is_dense(x) if dense is None else dense
    # (summed in at least float32: half-precision sums overflow)
    dtype = torch.promote_types(x.dtype, torch.float32) if x.is_floating_point() else torch.float32
    centrality = centrality.to(x.device, dtype)
    if x.layout == torch.sparse_csr:  # Σ_i usage_ij c_i over the stored entries
        usage = (x.values().abs() if dense else (x.values() != 0)).to(dtype)
        rows = ptr2index(x.crow_indices(), output_size=usage.numel())
        terms = usage * centrality[rows]
        weights = centrality.new_zeros(x.size(1)).index_add_(0, x.col_indices(), terms)
    else:
        usage = (x.abs() if dense else (x != 0)).to(dtype)
        weights = usage.t() @ centrality
    return _scores_to_probabilities(_log_scores(weights), p, threshold)
