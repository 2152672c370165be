"""GCA's centrality-adaptive augmenters (Zhu et al., "Graph Contrastive Learning with
Adaptive Augmentation", 2021, https://arxiv.org/abs/2010.14945), used by ProGCL: drop
probabilities fitted once per graph (:mod:`.centrality`, :mod:`.probabilities`), then
drawn at every call (docs/algorithms.md §2)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.data.data import BaseData

from .._checks import check_choice, check_edge_index, check_features, check_probability
from .centrality import CENTRALITIES, CENTRALITY_CACHE
from .functional import mask_feature_weighted, num_nodes_of
from .modules import Augmenter
from .probabilities import (
    DEFAULT_THRESHOLD,
    check_threshold,
    edge_drop_probabilities,
    feature_drop_probabilities,
)


class _FitCache:
    """One value fitted on one tensor; a hit is the same tensor (not modified in
    place since) or an equal one, with the same ``extra`` key."""

    def __init__(self):
        self.clear()

    def clear(self):
        """Forgets the fitted value."""
        self.tensor: Optional[Tensor] = None
        self.version = -1
        self.extra = None
        self.value: Optional[Tensor] = None

    def hit(self, tensor: Tensor, extra) -> bool:
        """Whether the stored value was fitted on ``tensor`` (or an equal one) and ``extra``."""
        cached = self.tensor
        if cached is None or extra != self.extra or cached._version != self.version:
            return False
        if cached is tensor:
            return True
        return (
            cached.shape == tensor.shape
            and cached.dtype == tensor.dtype
            and cached.device == tensor.device
            and cached.layout == tensor.layout
            and all(map(torch.equal, _parts(cached), _parts(tensor)))
        )

    def store(self, tensor: Tensor, extra, value: Tensor) -> Tensor:
        """Stores ``value`` as fitted on ``tensor`` with ``extra``; returns it."""
        self.tensor, self.version, self.extra, self.value = tensor, tensor._version, extra, value
        return value


def _parts(x: Tensor) -> tuple[Tensor, ...]:
    """The strided tensors that make up ``x`` (a CSR matrix's three arrays)."""
    if x.layout == torch.sparse_csr:
        return x.crow_indices(), x.col_indices(), x.values()
    return (x,)


class _Adaptive(Augmenter):
    """Shared arguments, fitting and caching of the GCA augmenters."""

    def __init__(self, p: float, centrality: str, threshold: float):
        super().__init__()
        self.p = check_probability("p", p)
        self.centrality = check_choice("centrality", centrality, CENTRALITIES)
        self.threshold = check_threshold(threshold)
        self._cache = _FitCache()

    @property
    def drop_prob(self) -> Optional[Tensor]:
        """The fitted drop probabilities (:obj:`None` before the first fit)."""
        return self._cache.value

    def fit(self, x, edge_index: Optional[Tensor] = None, num_nodes: Optional[int] = None):
        r"""Computes the centralities and drop probabilities of a graph now.

        Called lazily on the first augmentation of each graph; call it yourself
        to choose when the cost is paid. Accepts ``fit(data)`` or
        ``fit(x, edge_index)`` (``x`` may be :obj:`None` for edge dropping, then
        ``num_nodes`` defaults to ``edge_index.max() + 1``). Returns ``self``.
        """
        if isinstance(x, BaseData):
            x, edge_index, num_nodes = x.x, x.edge_index, x.num_nodes
        if edge_index is None:
            raise ValueError(
                f"{self.__class__.__name__} needs `edge_index` to compute centralities"
            )
        check_edge_index(edge_index)
        if num_nodes is None:
            num_nodes = num_nodes_of(x, edge_index)
        self._fit(x, edge_index, num_nodes)
        return self

    def _centrality(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        return CENTRALITY_CACHE.get(edge_index, num_nodes, self.centrality)

    def reset_parameters(self):
        r"""Forgets the fitted probabilities (recomputed on the next call)."""
        self._cache.clear()

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

    The probabilities are computed once per graph (cached on ``edge_index``: the
    same tensor, or an equal one) and reused on every later call; each call keeps edge
    ``e`` with probability ``1 - p_e``, as :func:`drop_edge_weighted`. See
    :func:`edge_drop_probabilities` and :func:`node_centrality`.

    Args:
        p (float): Mean drop probability in ``[0, 1]``.
        centrality (str, optional): ``'degree'``, ``'pagerank'`` or ``'evc'``.
            (default: :obj:`'evc'`, as in ProGCL)
        threshold (float, optional): Cap in ``(0, 1]``. (default: :obj:`0.7`)
    """

    def __init__(self, p: float, centrality: str = "evc", threshold: float = DEFAULT_THRESHOLD):
        super().__init__(p, centrality, threshold)

    def _fit(self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int) -> Tensor:
        c = self._centrality(edge_index, num_nodes)
        prob = edge_drop_probabilities(edge_index, c, self.p, self.threshold)
        return self._cache.store(edge_index, num_nodes, prob)

    def prepare(self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int) -> None:
        """Fits the drop probabilities on ``edge_index`` unless they are cached."""
        if self.is_active() and not self._cache.hit(edge_index, num_nodes):
            self._fit(x, edge_index, num_nodes)

    def edge_keep_mask(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        """Keeps edge ``e`` with probability ``1 - p_e``."""
        self.prepare(None, edge_index, num_nodes)
        return torch.rand(edge_index.size(1), device=edge_index.device) >= self._cache.value


class AdaptiveFeatureMask(_Adaptive):
    r"""GCA's centrality-adaptive feature masking (Zhu et al., 2021, docs/algorithms.md §2):
    ``p_j = min((w_max - w_j) / (w_max - w_mean) * p, threshold)``, ``w_j = log(sum_i [x_ij != 0] c_i)``.

    The probabilities are computed once per feature matrix (cached on ``x``: the
    same tensor, or an equal one) from the graph seen at that first call; inside
    :class:`Compose` that is the un-augmented graph whatever the order. Call
    :meth:`fit` or :meth:`reset_parameters` to refit for another graph with the
    same ``x``. Each call masks as :func:`mask_feature_weighted`. See
    :func:`feature_drop_probabilities`.

    Args:
        p (float): Mean masking probability in ``[0, 1]``.
        centrality (str, optional): ``'degree'``, ``'pagerank'`` or ``'evc'``.
            (default: :obj:`'evc'`)
        threshold (float, optional): Cap in ``(0, 1]``. (default: :obj:`0.7`)
        dense (bool, optional): Weight by ``|x_ij|`` instead of ``[x_ij != 0]``
            (dense real-valued features such as WikiCS); auto-detected when
            :obj:`None`. (default: :obj:`None`)
    """

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

    def _fit(self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int) -> Tensor:
        if x is None:
            raise ValueError("AdaptiveFeatureMask needs node features `x`")
        check_features(x)
        c = self._centrality(edge_index, num_nodes)
        prob = feature_drop_probabilities(x, c, self.p, self.threshold, self.dense)
        return self._cache.store(x, None, prob)

    def prepare(self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int) -> None:
        """Fits the column probabilities on ``x`` (and the graph) unless they are cached."""
        if self.is_active() and x is not None and not self._cache.hit(x, None):
            if edge_index is None:
                raise ValueError("AdaptiveFeatureMask needs `edge_index` to compute centralities")
            self._fit(x, edge_index, num_nodes)

    def augment_features(self, x: Tensor, edge_index: Optional[Tensor], num_nodes: int) -> Tensor:
        """Zeroes column ``j`` with probability ``p_j``."""
        self.prepare(x, edge_index, num_nodes)
        return mask_feature_weighted(x, self._cache.value)[0]

    def _extra_repr_args(self) -> str:
        return "" if self.dense is None else f", dense={self.dense}"
