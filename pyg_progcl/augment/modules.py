"""The augmenter modules: each a :class:`torch.nn.Module` and a PyG ``BaseTransform``;
GRACE's :class:`EdgeDrop` and :class:`FeatureMask`, and :class:`Compose`
(docs/algorithms.md §2)."""

from __future__ import annotations

import copy
import warnings
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.data.data import BaseData
from torch_geometric.transforms import BaseTransform
from torch_geometric.utils import dropout_edge

from .._checks import check_edge_index, check_probability
from .functional import mask_feature, num_nodes_of

GraphTensors = tuple[Optional[Tensor], Tensor, Optional[Tensor]]


#: The hooks' names before they were public: former name -> public name.
_RENAMED_HOOKS = {
    "_augment_features": "augment_features",
    "_edge_keep_mask": "edge_keep_mask",
    "_prepare": "prepare",
}


def _connect_renamed_hooks(cls: type) -> None:
    """Lets a subclass's hooks answer to both names.

    A hook overridden under its former name (``_edge_keep_mask``) becomes the public
    hook too, with one ``FutureWarning`` per class; one overridden under its public name
    is also reachable under the former one, so that ``super()._edge_keep_mask(...)`` in
    an older subclass still reaches it.
    """
    legacy = []
    for old, new in _RENAMED_HOOKS.items():
        if old in cls.__dict__:
            legacy.append(f"{old} -> {new}")
            if new not in cls.__dict__:
                setattr(cls, new, cls.__dict__[old])
        elif new in cls.__dict__:
            setattr(cls, old, cls.__dict__[new])
    if legacy:
        warnings.warn(
            f"{cls.__qualname__} overrides Augmenter hooks under their former names; "
            f"rename them ({', '.join(legacy)}): the former names will stop working in a "
            "future release",
            FutureWarning,
            stacklevel=4,  # the class statement (after ABCMeta.__new__)
        )


class Augmenter(torch.nn.Module, BaseTransform):
    r"""Base class of the augmenters: a :class:`torch.nn.Module` that is also a
    :class:`~torch_geometric.transforms.BaseTransform`.

    Call it on tensors, ``aug(x, edge_index, edge_weight=None) -> (x, edge_index,
    edge_weight)`` (this runs :meth:`forward`), or on a
    :class:`~torch_geometric.data.Data`, ``aug(data) -> Data`` (a new object;
    edge-level attributes are filtered with the edges). It is a no-op in eval
    mode and with ``p = 0``; :meth:`GRACEModel.views <pyg_progcl.GRACEModel.views>`
    runs its augmenters in training mode whatever the model's mode.

    A new augmenter sets ``self.p`` (the hooks run when it is positive, in training mode)
    and overrides one or more hooks; the base class does the rest (both call styles,
    eval mode, filtering edge weights and edge attributes with the edges):

    * :meth:`augment_features` returns the new node features;
    * :meth:`edge_keep_mask` returns a boolean mask of the edges to keep;
    * :meth:`prepare` fits graph-dependent state (such as drop probabilities) on the
      un-augmented graph.

    .. code-block:: python

        class FeatureNoise(Augmenter):
            def __init__(self, p: float):
                super().__init__()
                self.p = p  # the noise's standard deviation; 0 switches it off

            def augment_features(self, x, edge_index, num_nodes):
                return x + self.p * torch.randn_like(x)

    The hooks were called ``_augment_features``, ``_edge_keep_mask`` and ``_prepare``
    before they were public; a subclass that overrides those names still works, with
    one ``FutureWarning`` when it is defined.

    Heterogeneous graphs (:class:`~torch_geometric.data.HeteroData`) are refused with a
    ``ValueError``: augment each type's tensors instead.
    """

    p: float = 0.0

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], BaseData):
            return self.transform(args[0])
        return super().__call__(*args, **kwargs)

    def is_active(self) -> bool:
        """Whether a call changes its input (training mode and ``p > 0``)."""
        return self.training and self.p > 0.0

    def forward(
        self,
        x: Optional[Tensor],
        edge_index: Tensor,
        edge_weight: Optional[Tensor] = None,
    ) -> GraphTensors:
        r"""Augments tensors; returns ``(x, edge_index, edge_weight)``."""
        if not self.is_active():  # passes anything through, e.g. a sparse adjacency
            return x, edge_index, edge_weight
        check_edge_index(edge_index)
        if edge_weight is not None and edge_weight.shape[:1] != edge_index.shape[1:]:
            raise ValueError(
                f"`edge_weight` must have one entry per edge, shape [num_edges] = "
                f"[{edge_index.size(1)}] (got {list(edge_weight.shape)})"
            )
        return self._augment_tensors(x, edge_index, edge_weight)

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
        self, x: Optional[Tensor], edge_index: Tensor, edge_weight: Optional[Tensor]
    ) -> GraphTensors:
        num_nodes = num_nodes_of(x, edge_index)
        if x is not None:
            x = self.augment_features(x, edge_index, num_nodes)
        keep = self.edge_keep_mask(edge_index, num_nodes)
        if keep is not None:
            edge_index = edge_index[:, keep]
            edge_weight = None if edge_weight is None else edge_weight[keep]
        return x, edge_index, edge_weight

    def _augment_data(self, data: Data) -> Data:
        """Augments a copy of the data (the input's attributes are replaced, not modified)."""
        if data.edge_index is None and "adj_t" in data and self._uses_edges():
            raise ValueError(
                f"{self.__class__.__name__} needs `data.edge_index`, but this graph is stored "
                "as `adj_t` (T.ToSparseTensor): augment before converting it"
            )
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
        r"""Hook: the augmented node features (default: ``x`` unchanged).

        Called in training mode only, before :meth:`edge_keep_mask`, with the graph's
        un-augmented edges. Return a new tensor; never modify ``x`` in place.

        Args:
            x (torch.Tensor): Node features ``[N, F]`` (dense, or sparse CSR).
            edge_index (torch.Tensor, optional): The edges ``[2, E]`` (:obj:`None` for a
                :class:`~torch_geometric.data.Data` without edges).
            num_nodes (int): The number of nodes ``N``.
        """
        return x

    def edge_keep_mask(self, edge_index: Tensor, num_nodes: int) -> Optional[Tensor]:
        r"""Hook: a boolean mask ``[E]`` of the edges to keep (default: :obj:`None`, keep all).

        Called in training mode only. Edge weights and edge attributes are filtered
        with the mask.

        Args:
            edge_index (torch.Tensor): The edges ``[2, E]``.
            num_nodes (int): The number of nodes ``N``.
        """
        return None

    def prepare(self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int) -> None:
        r"""Hook: fits graph-dependent state on the un-augmented graph (default: nothing).

        :class:`Compose` calls it on every member with its input graph before it applies
        the first member, so that a member placed after an edge dropper still sees every
        edge; the adaptive augmenters fit their drop probabilities here.

        Args:
            x (torch.Tensor, optional): Node features ``[N, F]``.
            edge_index (torch.Tensor): The edges ``[2, E]``.
            num_nodes (int): The number of nodes ``N``.
        """

    # The former names of the hooks, kept for code that calls them.
    _augment_features = augment_features
    _edge_keep_mask = edge_keep_mask
    _prepare = prepare

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _connect_renamed_hooks(cls)

    def reset_parameters(self):
        r"""Nothing to reset (no parameters)."""

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(p={self.p})"


class EdgeDrop(Augmenter):
    r"""Drops every edge independently with probability ``p`` (GRACE, Zhu et al.,
    2020, https://arxiv.org/abs/2006.04131): ``keep_e ~ Bernoulli(1 - p)``, drawn by
    :func:`torch_geometric.utils.dropout_edge` (docs/algorithms.md §2).

    Args:
        p (float): Drop probability in ``[0, 1]``.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = check_probability("p", p)

    def edge_keep_mask(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        """Keeps each edge with probability ``1 - p``."""
        return dropout_edge(edge_index, p=self.p, training=True)[1]


class FeatureMask(Augmenter):
    r"""Zeroes every feature column with probability ``p``, shared by all nodes
    (GRACE, Zhu et al., 2020, https://arxiv.org/abs/2006.04131): ``x'_{ij} = x_{ij} m_j``,
    ``m_j ~ Bernoulli(1 - p)``, drawn by :func:`mask_feature` (PyG's, dense or CSR ``x``).

    Args:
        p (float): Masking probability in ``[0, 1]``.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = check_probability("p", p)

    def augment_features(self, x: Tensor, edge_index: Optional[Tensor], num_nodes: int) -> Tensor:
        """Zeroes each feature column with probability ``p``."""
        return mask_feature(x, self.p)[0]


class Compose(Augmenter):
    r"""Applies augmenters in order: ``Compose(a, b)(g) = b(a(g))``.

    Before applying them, adaptive members are fitted on the *input* graph, so
    that e.g. :class:`AdaptiveFeatureMask` after :class:`AdaptiveEdgeDrop` sees
    the un-dropped graph, as GCA does. ``.train()`` / ``.eval()`` propagate to
    the members.

    Args:
        *augmenters (Augmenter): The augmenters, applied left to right.
    """

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

    def prepare(self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int) -> None:
        """Prepares every member on the same (input) graph."""
        for aug in self.augmenters:
            aug.prepare(x, edge_index, num_nodes)

    def _augment_tensors(
        self, x: Optional[Tensor], edge_index: Tensor, edge_weight: Optional[Tensor]
    ) -> GraphTensors:
        self.prepare(x, edge_index, num_nodes_of(x, edge_index))
        for aug in self.augmenters:
            x, edge_index, edge_weight = aug(x, edge_index, edge_weight)
        return x, edge_index, edge_weight

    def _augment_data(self, data: Data) -> Data:
        if data.edge_index is not None:
            self.prepare(data.x, data.edge_index, data.num_nodes)
        for aug in self.augmenters:
            data = aug.transform(data)
        return data

    def reset_parameters(self):
        r"""Resets every member."""
        for aug in self.augmenters:
            aug.reset_parameters()

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({', '.join(map(repr, self.augmenters))})"
