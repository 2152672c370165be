"""GCA's centrality-adaptive augmenters, used by ProGCL (docs/algorithms.md §2)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .._checks import check_choice, check_probability
from .centrality import CENTRALITIES, node_centrality
from .functional import mask_feature_weighted
from .modules import Augmenter, _prepare_arguments
from .probabilities import (
    DEFAULT_THRESHOLD,
    check_threshold,
    edge_drop_probabilities,
    feature_drop_probabilities,
)

__all__ = ["AdaptiveEdgeDrop", "AdaptiveFeatureMask"]


class _Adaptive(Augmenter):
    """Shared arguments and preparation of the GCA augmenters."""

    def __init__(self, p: float, centrality: str, threshold: float):
        super().__init__()
        self.p = check_probability("p", p)
        self.centrality = check_choice("centrality", centrality, CENTRALITIES)
        self.threshold = check_threshold(threshold)
        self.num_nodes: Optional[int] = None  # the prepared graph's

    #: Whether :meth:`prepare` needs node features (besides the edges).
    _needs_x = False

    def prepare(
        self,
        x,
        edge_index: Optional[Tensor] = None,
        num_nodes: Optional[int] = None,
        *,
        centrality: Optional[Tensor] = None,
    ) -> Augmenter:
        r"""Computes the drop probabilities of a graph (``x`` may be a ``Data``, and is
        ignored by :class:`AdaptiveEdgeDrop`), kept as a buffer (not in the ``state_dict``);
        a graph with another number of nodes is then refused. ``centrality``: the graph's
        ``[N]`` centralities of this kind, if already computed. Returns ``self``."""
        x, edge_index, num_nodes = _prepare_arguments(self, x, edge_index, num_nodes)
        if self._needs_x and x is None:
            raise ValueError(f"{type(self).__name__} needs node features `x`")
        if centrality is None:
            centrality = node_centrality(edge_index, num_nodes, self.centrality)
        elif not (isinstance(centrality, Tensor) and centrality.shape == (num_nodes,)):
            raise ValueError(f"`centrality` must be a tensor of shape [num_nodes] = [{num_nodes}]")
        self._compute(x, edge_index, num_nodes, centrality)
        self.num_nodes = num_nodes
        return self

    def is_prepared(self) -> bool:
        """Whether :meth:`prepare` has computed the drop probabilities."""
        return self.num_nodes is not None

    def _prepare_with(
        self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int, shared: dict, force: bool
    ) -> None:
        needed = force or (self.p > 0.0 and not self.is_prepared())
        if not needed or (self._needs_x and x is None):
            return
        if self.centrality not in shared:
            shared[self.centrality] = node_centrality(edge_index, num_nodes, self.centrality)
        self.prepare(x, edge_index, num_nodes, centrality=shared[self.centrality])

    def _check_prepared(self, num_nodes: int) -> None:
        """Refuses a call before :meth:`prepare`, or on a graph with another node count."""
        name = type(self).__name__
        if self.num_nodes is None:
            raise ValueError(f"{name} is not prepared: call .prepare(data) with the graph first")
        if num_nodes != self.num_nodes:
            raise ValueError(
                f"{name} was prepared on a graph of {self.num_nodes} nodes, not {num_nodes}: "
                "call .prepare(data) with this graph"
            )

    def reset_parameters(self):
        r"""Forgets the prepared probabilities (prepared again on the next graph)."""
        self.num_nodes = None
        for name in self._buffers:
            self._buffers[name] = None

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(p={self.p}, centrality={self.centrality}, "
            f"threshold={self.threshold}{self._extra_repr_args()})"
        )

    def _extra_repr_args(self) -> str:
        return ""

    def _uses_edges(self) -> bool:
        return True  # centralities, for edges and features alike


class AdaptiveEdgeDrop(_Adaptive):
    r"""GCA's centrality-adaptive edge dropping (Zhu et al., 2021, docs/algorithms.md §2):
    ``p_e = min((s_max - s_e) / (s_max - s_mean) * p, threshold)``, ``s_e = log c(target of e)``.

    An edge's probability depends on its target only: :meth:`prepare` keeps one per node
    (the buffer ``node_drop_prob``), which serves any subset of the prepared graph's edges.

    Args:
        p, threshold: The mean drop probability in ``[0, 1]`` and its cap in ``(0, 1]``.
        centrality: ``'degree'``, ``'pagerank'`` or ``'evc'`` (ProGCL's).
    """

    node_drop_prob: Optional[Tensor]

    def __init__(self, p: float, centrality: str = "evc", threshold: float = DEFAULT_THRESHOLD):
        super().__init__(p, centrality, threshold)
        self.register_buffer("node_drop_prob", None, persistent=False)

    def _compute(self, x, edge_index: Tensor, num_nodes: int, centrality: Tensor) -> None:
        prob = edge_drop_probabilities(edge_index, centrality, self.p, self.threshold)
        self.node_drop_prob = prob.new_zeros(num_nodes).scatter_(0, edge_index[1], prob)

    def edge_keep_mask(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        """Keeps edge ``e`` with probability ``1 - p_e``."""
        self._check_prepared(num_nodes)
        prob = self.node_drop_prob.to(edge_index.device)[edge_index[1]]
        return torch.rand(edge_index.size(1), device=edge_index.device) >= prob

    def _extra_repr_args(self) -> str:
        prepared = self.node_drop_prob
        return "" if prepared is None else f", node_drop_prob=[{prepared.numel()}]"


class AdaptiveFeatureMask(_Adaptive):
    r"""GCA's centrality-adaptive feature masking (Zhu et al., 2021, docs/algorithms.md §2):
    ``p_j = min((w_max - w_j) / (w_max - w_mean) * p, threshold)``, ``w_j = log(sum_i [x_ij != 0] c_i)``.

    :meth:`prepare` computes the column probabilities once (the buffer ``drop_prob``).

    Args:
        p, threshold: The mean masking probability in ``[0, 1]`` and its cap in ``(0, 1]``.
        centrality: ``'degree'``, ``'pagerank'`` or ``'evc'``.
        dense: Weight by ``|x_ij|`` instead of ``[x_ij != 0]`` (dense real-valued
            features); auto-detected when :obj:`None`.
    """

    drop_prob: Optional[Tensor]
    _needs_x = True

    def __init__(
        self,
        p: float,
        centrality: str = "evc",
        threshold: float = DEFAULT_THRESHOLD,
        dense: Optional[bool] = None,
    ):
        super().__init__(p, centrality, threshold)
        if dense is not None and not isinstance(dense, bool):
            raise ValueError(f"`dense` must be True, False or None (got {dense!r})")
        self.dense = dense
        self.register_buffer("drop_prob", None, persistent=False)

    def _compute(self, x, edge_index: Tensor, num_nodes: int, centrality: Tensor) -> None:
        self.drop_prob = feature_drop_probabilities(
            x, centrality, self.p, self.threshold, self.dense
        )

    def augment_features(self, x: Tensor, edge_index: Optional[Tensor], num_nodes: int) -> Tensor:
        """Zeroes column ``j`` with probability ``p_j``."""
        self._check_prepared(num_nodes)
        if x.size(1) != self.drop_prob.numel():
            raise ValueError(
                f"AdaptiveFeatureMask was prepared on {self.drop_prob.numel()} feature "
                f"columns, not {x.size(1)}: call .prepare(data) with this graph"
            )
        return mask_feature_weighted(x, self.drop_prob.to(x.device))[0]

    def _extra_repr_args(self) -> str:
        text = "" if self.dense is None else f", dense={self.dense}"
        if self.drop_prob is not None:
            text += f", drop_prob=[{self.drop_prob.numel()}], num_nodes={self.num_nodes}"
        return text
