"""The augmenter base class, GRACE's augmenters and their composition (docs/algorithms.md §2)."""

from __future__ import annotations

import copy
from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.data.data import BaseData
from torch_geometric.transforms import BaseTransform

from .._checks import check_edge_index, check_probability
from .functional import mask_feature_csr, num_nodes_of

__all__ = ["Augmenter", "ComposeAugmenters", "EdgeDrop", "FeatureMask"]

GraphTensors = tuple[Optional[Tensor], Tensor, Optional[Tensor]]


def _prepare_arguments(
    augmenter, x, edge_index: Optional[Tensor], num_nodes: Optional[int]
) -> tuple[Optional[Tensor], Tensor, int]:
    """``prepare``'s arguments ``(x, edge_index, num_nodes)``, from a ``Data`` in place of ``x``."""
    if isinstance(x, BaseData):
        x, edge_index, num_nodes = x.x, x.edge_index, x.num_nodes
    if edge_index is None:
        raise ValueError(f"{type(augmenter).__name__}.prepare needs the graph's `edge_index`")
    check_edge_index(edge_index)
    return x, edge_index, num_nodes_of(x, edge_index) if num_nodes is None else num_nodes


class Augmenter(torch.nn.Module, BaseTransform):
    r"""Base class of the augmenters: a :class:`torch.nn.Module` and a
    :class:`~torch_geometric.transforms.BaseTransform`.

    Call it on tensors, ``aug(x, edge_index, edge_weight=None) -> (x, edge_index,
    edge_weight)``, or on a :class:`~torch_geometric.data.Data`, ``aug(data) -> Data`` (a
    new object). It is a no-op in eval mode and with ``p = 0``. A new augmenter sets
    ``self.p`` and overrides the hooks :meth:`augment_features`, :meth:`edge_keep_mask`
    and :meth:`prepare`:

    .. code-block:: python

        class FeatureNoise(Augmenter):
            def __init__(self, p: float):
                super().__init__()
                self.p = p  # the noise's standard deviation; 0 switches it off

            def augment_features(self, x, edge_index, num_nodes):
                return x + self.p * torch.randn_like(x)
    """

    p: float = 0.0

    def is_active(self) -> bool:
        """Whether a call changes its input (training mode and ``p > 0``)."""
        return self.training and self.p > 0.0

    def forward(
        self,
        x: Union[Optional[Tensor], BaseData],
        edge_index: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
    ) -> Union[GraphTensors, Data]:
        r"""Augments tensors, returning ``(x, edge_index, edge_weight)``, or a ``Data``
        alone, returning a new one (:meth:`transform`)."""
        if isinstance(x, BaseData):
            if edge_index is not None or edge_weight is not None:
                raise ValueError("pass either a Data object or (x, edge_index, edge_weight)")
            return self.transform(x)
        if edge_index is None:
            raise ValueError("`edge_index` is required (the graph's connectivity)")
        if not self.is_active():  # passes anything through, e.g. a sparse adjacency
            return x, edge_index, edge_weight
        check_edge_index(edge_index)
        if edge_weight is not None and edge_weight.shape[:1] != edge_index.shape[1:]:
            raise ValueError(
                f"`edge_weight` must have one entry per edge, shape [num_edges] = "
                f"[{edge_index.size(1)}] (got {list(edge_weight.shape)})"
            )
        return self._augment_tensors(x, edge_index, edge_weight, num_nodes_of(x, edge_index))

    def transform(self, data: Data) -> Data:
        r"""Augments a :class:`~torch_geometric.data.Data`; returns a new object."""
        if not isinstance(data, Data):
            raise ValueError(
                f"`data` must be a homogeneous torch_geometric Data (got {type(data).__name__}); "
                "for a HeteroData, call the augmenter on each type's tensors, "
                "aug(x, edge_index, edge_weight)"
            )
        data = copy.copy(data)
        return self._augment_data(data) if self.is_active() else data

    def _augment_tensors(
        self, x: Optional[Tensor], edge_index: Tensor, edge_weight: Optional[Tensor], num_nodes: int
    ) -> GraphTensors:
        """Augments the tensors of a graph of ``num_nodes`` nodes (this augmenter is active)."""
        self._prepare_with(x, edge_index, num_nodes, {}, force=False)
        if x is not None:
            x = self.augment_features(x, edge_index, num_nodes)
        keep = self.edge_keep_mask(edge_index, num_nodes)
        if keep is not None:
            edge_index = edge_index[:, keep]
            edge_weight = None if edge_weight is None else edge_weight[keep]
        return x, edge_index, edge_weight

    def _augment_data(self, data: Data) -> Data:
        """Augments a shallow copy of the data."""
        if data.edge_index is None and "adj_t" in data and self._uses_edges():
            raise ValueError(
                f"{self.__class__.__name__} needs `data.edge_index`, but this graph is stored "
                "as `adj_t` (T.ToSparseTensor): augment before converting it"
            )
        if data.edge_index is not None:
            self._prepare_with(data.x, data.edge_index, data.num_nodes, {}, force=False)
        if data.x is not None:
            data.x = self.augment_features(data.x, data.edge_index, data.num_nodes)
        if data.edge_index is not None:
            keep = self.edge_keep_mask(data.edge_index, data.num_nodes)
            if keep is not None:
                data = data.edge_subgraph(keep)
        return data

    def _uses_edges(self) -> bool:
        """Whether the augmenter reads the edges (drops them, or weighs nodes by them)."""
        return type(self).edge_keep_mask is not Augmenter.edge_keep_mask

    def augment_features(self, x: Tensor, edge_index: Optional[Tensor], num_nodes: int) -> Tensor:
        r"""Hook: the augmented node features ``[N, F]`` (dense or CSR), a new tensor
        (default: ``x``). Called in training mode, before :meth:`edge_keep_mask`, with the
        un-augmented edges ``[2, E]`` (:obj:`None` for a ``Data`` without edges)."""
        return x

    def edge_keep_mask(self, edge_index: Tensor, num_nodes: int) -> Optional[Tensor]:
        r"""Hook: a boolean mask ``[E]`` of the edges ``[2, E]`` to keep (default:
        :obj:`None`, all), which filters edge weights and attributes too. Called in
        training mode."""
        return None

    def prepare(self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int) -> Augmenter:
        r"""Hook: computes graph-dependent state from the un-augmented graph (default:
        nothing); returns ``self``. Called by the user, or on the first graph augmented
        while :meth:`is_prepared` is :obj:`False` (a subclass with state overrides both)."""
        return self

    def is_prepared(self) -> bool:
        """Whether :meth:`prepare` has nothing (more) to do (default: :obj:`True`)."""
        return True

    def _prepare_with(
        self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int, shared: dict, force: bool
    ) -> None:
        """Calls :meth:`prepare` if ``force`` or not :meth:`is_prepared`; ``shared`` holds
        what augmenters prepared on one graph compute once (centralities)."""
        if force or not self.is_prepared():
            self.prepare(x, edge_index, num_nodes)

    def reset_parameters(self):
        r"""Nothing to reset (no parameters)."""

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(p={self.p})"


class EdgeDrop(Augmenter):
    r"""Drops every edge independently with probability ``p`` (GRACE, Zhu et al.,
    2020, https://arxiv.org/abs/2006.04131): ``keep_e ~ Bernoulli(1 - p)``, the mask
    :func:`torch_geometric.utils.dropout_edge` draws (docs/algorithms.md §2).

    Args:
        p: Drop probability in ``[0, 1]``.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = check_probability("p", p)

    def edge_keep_mask(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        """Keeps each edge with probability ``1 - p``."""
        return torch.rand(edge_index.size(1), device=edge_index.device) >= self.p


class FeatureMask(Augmenter):
    r"""Zeroes every feature column with probability ``p``, shared by all nodes
    (GRACE, Zhu et al., 2020, https://arxiv.org/abs/2006.04131): ``x'_{ij} = x_{ij} m_j``,
    ``m_j ~ Bernoulli(1 - p)``, drawn by :func:`mask_feature_csr` (PyG's, dense or CSR ``x``).

    Args:
        p: Masking probability in ``[0, 1]``.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = check_probability("p", p)

    def augment_features(self, x: Tensor, edge_index: Optional[Tensor], num_nodes: int) -> Tensor:
        """Zeroes each feature column with probability ``p``."""
        return mask_feature_csr(x, self.p)[0]


class ComposeAugmenters(Augmenter):
    r"""Applies augmenters in order: ``ComposeAugmenters(a, b)(g) = b(a(g))``; members
    are prepared on the *input* graph, as in GCA."""

    def __init__(self, *augmenters: Augmenter):
        super().__init__()
        for i, aug in enumerate(augmenters):
            if not isinstance(aug, Augmenter):
                raise ValueError(
                    f"`augmenters[{i}]` must be a pyg_progcl Augmenter (got {type(aug).__name__})"
                )
        self.augmenters = torch.nn.ModuleList(augmenters)

    def is_active(self) -> bool:
        """Whether a call changes its input (some member is active)."""
        return any(aug.is_active() for aug in self.augmenters)

    def prepare(
        self, x, edge_index: Optional[Tensor] = None, num_nodes: Optional[int] = None
    ) -> Augmenter:
        """Prepares every member on one graph (or ``Data``), each centrality computed once."""
        x, edge_index, num_nodes = _prepare_arguments(self, x, edge_index, num_nodes)
        self._prepare_with(x, edge_index, num_nodes, {}, force=True)
        return self

    def is_prepared(self) -> bool:
        """Whether every member is prepared."""
        return all(aug.is_prepared() for aug in self.augmenters)

    def _prepare_with(
        self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int, shared: dict, force: bool
    ) -> None:
        for aug in self.augmenters:
            aug._prepare_with(x, edge_index, num_nodes, shared, force)

    def _augment_tensors(
        self, x: Optional[Tensor], edge_index: Tensor, edge_weight: Optional[Tensor], num_nodes: int
    ) -> GraphTensors:
        self._prepare_with(x, edge_index, num_nodes, {}, force=False)
        for aug in self.augmenters:  # (dropping edges keeps the nodes: num_nodes holds)
            if aug.is_active():
                x, edge_index, edge_weight = aug._augment_tensors(
                    x, edge_index, edge_weight, num_nodes
                )
        return x, edge_index, edge_weight

    def _augment_data(self, data: Data) -> Data:
        if data.edge_index is not None:
            self._prepare_with(data.x, data.edge_index, data.num_nodes, {}, force=False)
        for aug in self.augmenters:
            data = aug.transform(data)
        return data

    def reset_parameters(self):
        r"""Resets every member."""
        for aug in self.augmenters:
            aug.reset_parameters()

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({', '.join(map(repr, self.augmenters))})"
