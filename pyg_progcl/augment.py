"""Graph augmentations of GRACE and GCA: uniform and centrality-adaptive edge
dropping and feature-column masking.

* GRACE (Zhu et al., 2020, https://arxiv.org/abs/2006.04131) drops every edge
  with probability ``p`` and zeroes every feature column with probability ``p``
  (one column mask shared by all nodes).
* GCA (Zhu et al., "Graph Contrastive Learning with Adaptive Augmentation",
  2021, https://arxiv.org/abs/2010.14945), used by ProGCL, drops unimportant
  edges / columns more often: ``p_i = min((s_max - s_i) / (s_max - s_mean) * p, threshold)``
  with ``s_e = log c(target of e)`` for edges and ``w_j = log(sum_i [x_ij != 0] c_i)``
  for feature columns, ``c`` a node centrality computed once per graph.

Every augmenter is both a :class:`torch.nn.Module` (``.train()`` / ``.eval()``
of a parent model propagate; eval mode is a no-op) and a
:class:`torch_geometric.transforms.BaseTransform`:

.. code-block:: python

    aug = Compose(EdgeDrop(0.2), FeatureMask(0.3))
    x, edge_index, edge_weight = aug(x, edge_index)   # tensors
    view = aug(data)                                  # a new Data, input untouched

Feature masks take dense or sparse CSR feature matrices; a CSR matrix loses the entries
of its masked columns (``O(nnz)``, no dense copy), which is how :class:`GRACEModel` feeds
bag-of-words features to an encoder that takes them sparse.
"""

from __future__ import annotations

import copy
import weakref
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.data.data import BaseData
from torch_geometric.transforms import BaseTransform
from torch_geometric.utils import degree, dropout_edge, to_undirected
from torch_geometric.utils import mask_feature as _pyg_mask_feature
from torch_geometric.utils.num_nodes import maybe_num_nodes
from torch_geometric.utils.sparse import ptr2index

from ._checks import check_choice, check_int, check_probability

CENTRALITIES = ("degree", "pagerank", "evc")
DEFAULT_THRESHOLD = 0.7

_LOG_EPS = 1e-8  # log(c + eps): the reference's guard for zero eigenvector centrality
_TIE_TOL = 1e-6  # relative spread of the scores below which they count as all equal
_PAGERANK_DAMPING = 0.85
_PAGERANK_ITERATIONS = 10
_DENSE_FRACTION = 0.5  # features with more non-zeros than this are "dense"

EdgeOutput = tuple[Tensor, Optional[Tensor]]
GraphTensors = tuple[Optional[Tensor], Tensor, Optional[Tensor]]


# --------------------------------------------------------------------------- checks


def _check_threshold(threshold: float) -> float:
    threshold = check_probability("threshold", threshold)
    if threshold == 0.0:
        raise ValueError(f"`threshold` must lie in (0, 1] (got {threshold})")
    return threshold


def _check_edge_index(edge_index: Tensor) -> Tensor:
    if not (isinstance(edge_index, Tensor) and edge_index.dim() == 2 and edge_index.size(0) == 2):
        shape = list(edge_index.shape) if isinstance(edge_index, Tensor) else type(edge_index)
        raise ValueError(f"`edge_index` must be a tensor of shape [2, num_edges] (got {shape})")
    if edge_index.is_floating_point() or edge_index.is_complex():
        raise ValueError(f"`edge_index` must be an integer tensor (got {edge_index.dtype})")
    return edge_index


def _check_features(x: Tensor) -> Tensor:
    if not (isinstance(x, Tensor) and x.dim() == 2):
        shape = list(x.shape) if isinstance(x, Tensor) else type(x)
        raise ValueError(f"`x` must be a tensor of shape [num_nodes, num_features] (got {shape})")
    return x


def _check_drop_prob(drop_prob: Tensor, size: int, what: str) -> Tensor:
    if not (isinstance(drop_prob, Tensor) and drop_prob.dim() == 1 and drop_prob.numel() == size):
        shape = list(drop_prob.shape) if isinstance(drop_prob, Tensor) else type(drop_prob)
        raise ValueError(f"`drop_prob` must be a tensor of shape [{what}] = [{size}] (got {shape})")
    if drop_prob.numel() and not bool(((drop_prob >= 0) & (drop_prob <= 1)).all()):
        raise ValueError("`drop_prob` must hold probabilities in [0, 1] (got values outside)")
    return drop_prob


def _num_nodes(x: Optional[Tensor], edge_index: Tensor) -> int:
    return x.size(0) if x is not None else maybe_num_nodes(edge_index)


# --------------------------------------------------------------- uniform (GRACE)


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
    _check_edge_index(edge_index)
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
    _check_features(x)
    if x.layout != torch.sparse_csr:
        return _pyg_mask_feature(x, p=p, mode="col", training=training)[0]
    if not training or p == 0.0:
        return x
    return _keep_columns(x, torch.rand(x.size(1), device=x.device) >= p)  # PyG's draw


# ------------------------------------------------------------------ adaptive (GCA)


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
    _check_edge_index(edge_index)
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
    _check_features(x)
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


# --------------------------------------------------------------------- centralities


def node_centrality(edge_index: Tensor, num_nodes: int, kind: str) -> Tensor:
    r"""Node centrality ``c`` used by GCA's adaptive augmentation (Zhu et al., 2021).

    * ``'degree'``: in-degree after symmetrising the graph, as GCA's
      ``degree(to_undirected(edge_index)[1])`` (the degree for undirected graphs).
    * ``'pagerank'``: GCA's power iteration ``c <- 0.15 c + 0.85 A^T D_out^{-1} c``
      from ``c = 1``, 10 iterations (unnormalised; isolated nodes stay > 0).
    * ``'evc'``: eigenvector centrality from
      :func:`networkx.eigenvector_centrality_numpy` (the reference). networkx
      refuses disconnected graphs; for those (and graphs of < 3 nodes) the same
      leading eigenvector of ``A^T`` is computed directly with SciPy, which is
      what networkx returned before it refused them: nodes outside the dominant
      component get ~0. Negative round-off is clamped to 0; a graph without
      edges gives all zeros.

    Args:
        edge_index (torch.Tensor): ``[2, num_edges]``.
        num_nodes (int): Number of nodes ``N`` (isolated nodes included).
        kind (str): ``'degree'``, ``'pagerank'`` or ``'evc'``.

    Returns:
        A float tensor ``[num_nodes]`` on ``edge_index``'s device.
    """
    check_choice("kind", kind, CENTRALITIES)
    _check_edge_index(edge_index)
    num_nodes = check_int("num_nodes", num_nodes, minimum=1)
    if edge_index.numel() and int(edge_index.max()) >= num_nodes:
        raise ValueError(
            f"`num_nodes` must exceed every node index of `edge_index` (got {num_nodes}, "
            f"max index {int(edge_index.max())})"
        )
    if edge_index.numel() and int(edge_index.min()) < 0:
        raise ValueError("`edge_index` must hold non-negative node indices")
    compute = {"degree": _degree, "pagerank": _pagerank, "evc": _eigenvector_centrality}[kind]
    return compute(edge_index, num_nodes).to(torch.get_default_dtype())


def _degree(edge_index: Tensor, num_nodes: int) -> Tensor:
    return degree(to_undirected(edge_index, num_nodes=num_nodes)[1], num_nodes)


def _pagerank(edge_index: Tensor, num_nodes: int) -> Tensor:
    src, dst = edge_index
    out_degree = degree(src, num_nodes)
    c = torch.ones(num_nodes, device=edge_index.device)
    for _ in range(_PAGERANK_ITERATIONS):
        message = c[src] / out_degree[src]
        incoming = torch.zeros_like(c).index_add_(0, dst, message)
        c = (1.0 - _PAGERANK_DAMPING) * c + _PAGERANK_DAMPING * incoming
    return c


def _eigenvector_centrality(edge_index: Tensor, num_nodes: int) -> Tensor:
    import networkx as nx

    if edge_index.numel() == 0:
        return torch.zeros(num_nodes, device=edge_index.device)
    edges = edge_index.t().tolist()
    values = None
    if num_nodes >= 3:
        graph = nx.DiGraph()
        graph.add_nodes_from(range(num_nodes))
        graph.add_edges_from(edges)
        try:
            centrality = nx.eigenvector_centrality_numpy(graph)
            values = [centrality[i] for i in range(num_nodes)]
        except nx.AmbiguousSolution:  # disconnected graph
            values = None
    if values is None:
        values = _leading_eigenvector(edges, num_nodes)
    return torch.tensor(values, dtype=torch.float64, device=edge_index.device).clamp_min(0.0)


def _leading_eigenvector(edges, num_nodes: int):
    """Unit leading eigenvector of ``A^T`` with a positive sum (networkx's formula)."""
    import numpy as np
    import scipy.sparse as sps
    from scipy.sparse.linalg import eigs

    rows, cols = zip(*set(map(tuple, edges)))
    adj = sps.csr_array((np.ones(len(rows)), (rows, cols)), shape=(num_nodes, num_nodes))
    if num_nodes < 3:  # ARPACK needs k < N - 1
        eigenvalues, eigenvectors = np.linalg.eig(adj.toarray().T)
        vector = eigenvectors[:, np.argmax(eigenvalues.real)].real
    else:  # a fixed start vector keeps degenerate cases deterministic
        start = np.full(num_nodes, 1.0 / np.sqrt(num_nodes))
        vector = eigs(adj.T, k=1, which="LR", v0=start)[1].flatten().real
    norm = np.linalg.norm(vector) * (np.sign(vector.sum()) or 1.0)
    return (vector / norm).tolist() if norm else [0.0] * num_nodes


class _CentralityCache:
    """Centralities of the last few graphs, keyed on the ``edge_index`` object
    (held by weak reference) and its in-place version, so that several
    augmenters on one graph share one networkx call."""

    def __init__(self, size: int = 8):
        self.size = size
        self.entries: dict[tuple, tuple] = {}

    def get(self, edge_index: Tensor, num_nodes: int, kind: str) -> Tensor:
        key = (id(edge_index), edge_index._version, num_nodes, kind)
        entry = self.entries.get(key)
        if entry is not None and entry[0]() is edge_index:
            return entry[1]
        value = node_centrality(edge_index, num_nodes, kind)
        self.entries = {k: v for k, v in self.entries.items() if v[0]() is not None}
        while len(self.entries) >= self.size:
            self.entries.pop(next(iter(self.entries)))
        self.entries[key] = (weakref.ref(edge_index), value)
        return value

    def clear(self):
        self.entries.clear()


_CENTRALITY_CACHE = _CentralityCache()


# ------------------------------------------------------------ drop probabilities


def _log_scores(values: Tensor) -> Tensor:
    """``log(max(v, 0) + eps)`` in float64: finite for zero centralities/weights."""
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
    r"""GCA's per-edge drop probabilities (Zhu et al., 2021):
    ``p_e = min((s_max - s_e) / (s_max - s_mean) * p, threshold)``, ``s_e = log c(target of e)``.

    Edges into central nodes are kept more often. The normalised scores have
    mean 1, so the probabilities have mean ``p`` until the cap binds. All-equal
    scores (e.g. a ring) give a uniform ``min(p, threshold)``; zero centralities
    are guarded by ``log(c + 1e-8)`` as in the reference, so the result is always
    finite.

    Args:
        edge_index (torch.Tensor): ``[2, num_edges]``.
        centrality (torch.Tensor): ``[num_nodes]``, e.g. from :func:`node_centrality`.
        p (float): Mean drop probability in ``[0, 1]``.
        threshold (float, optional): Cap in ``(0, 1]``. (default: :obj:`0.7`)

    Returns:
        A float tensor ``[num_edges]`` on ``edge_index``'s device.
    """
    p = check_probability("p", p)
    threshold = _check_threshold(threshold)
    _check_edge_index(edge_index)
    if not (isinstance(centrality, Tensor) and centrality.dim() == 1):
        raise ValueError("`centrality` must be a tensor of shape [num_nodes]")
    if edge_index.numel() and int(edge_index.max()) >= centrality.numel():
        raise ValueError("`centrality` must have one entry per node of `edge_index`")
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
    r"""GCA's per-column drop probabilities (Zhu et al., 2021):
    ``p_j = min((w_max - w_j) / (w_max - w_mean) * p, threshold)``, ``w_j = log(sum_i [x_ij != 0] c_i)``.

    For dense real-valued features (``dense=True``) ``|x_ij|`` replaces the
    indicator, as GCA does for WikiCS; ``dense=None`` picks it when more than
    half of the entries are non-zero (:func:`is_dense`). Columns used by
    central nodes are masked less often; the probabilities have mean ``p``
    until the cap binds, are uniform when all weights tie, and are always finite
    (``log(w + 1e-8)``; an all-zero column gets the highest probability).

    Args:
        x (torch.Tensor): Node features ``[num_nodes, num_features]``, dense or CSR.
        centrality (torch.Tensor): ``[num_nodes]``, e.g. from :func:`node_centrality`.
        p (float): Mean masking probability in ``[0, 1]``.
        threshold (float, optional): Cap in ``(0, 1]``. (default: :obj:`0.7`)
        dense (bool, optional): Use ``|x_ij|`` instead of ``[x_ij != 0]``;
            auto-detected when :obj:`None`. (default: :obj:`None`)

    Returns:
        A float tensor ``[num_features]`` on ``x``'s device.
    """
    p = check_probability("p", p)
    threshold = _check_threshold(threshold)
    _check_features(x)
    if not (isinstance(centrality, Tensor) and centrality.shape == (x.size(0),)):
        raise ValueError(f"`centrality` must be a tensor of shape [num_nodes] = [{x.size(0)}]")
    if dense is None:
        dense = is_dense(x)
    dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
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


# ----------------------------------------------------------------------- modules


class Augmenter(torch.nn.Module, BaseTransform):
    r"""Base class of the augmenters: a :class:`torch.nn.Module` that is also a
    :class:`~torch_geometric.transforms.BaseTransform`.

    Call it on tensors, ``aug(x, edge_index, edge_weight=None) -> (x, edge_index,
    edge_weight)`` (this runs :meth:`forward`), or on a
    :class:`~torch_geometric.data.Data`, ``aug(data) -> Data`` (a new object;
    edge-level attributes are filtered with the edges). It is a no-op in eval
    mode and with ``p = 0``. Subclasses override :meth:`_augment_features`
    and/or :meth:`_edge_keep_mask`.
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
        if not self.is_active():
            return x, edge_index, edge_weight
        num_nodes = _num_nodes(x, edge_index)
        if x is not None:
            x = self._augment_features(x, edge_index, num_nodes)
        keep = self._edge_keep_mask(edge_index, num_nodes)
        if keep is not None:
            edge_index = edge_index[:, keep]
            edge_weight = None if edge_weight is None else edge_weight[keep]
        return x, edge_index, edge_weight

    def transform(self, data: Data) -> Data:
        r"""Augments a :class:`~torch_geometric.data.Data`; returns a new object."""
        if not isinstance(data, Data):
            raise ValueError(f"`data` must be a torch_geometric Data (got {type(data).__name__})")
        data = copy.copy(data)
        if not self.is_active():
            return data
        if data.x is not None:
            data.x = self._augment_features(data.x, data.edge_index, data.num_nodes)
        if data.edge_index is not None:
            keep = self._edge_keep_mask(data.edge_index, data.num_nodes)
            if keep is not None:
                data = data.edge_subgraph(keep)
        return data

    def _augment_features(self, x: Tensor, edge_index: Tensor, num_nodes: int) -> Tensor:
        return x

    def _edge_keep_mask(self, edge_index: Tensor, num_nodes: int) -> Optional[Tensor]:
        return None

    def _prepare(self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int) -> None:
        """Hook: fit graph-dependent state on the un-augmented graph (see :class:`Compose`)."""

    def reset_parameters(self):
        r"""Nothing to reset (no parameters)."""

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(p={self.p})"


class EdgeDrop(Augmenter):
    r"""Drops every edge independently with probability ``p`` (GRACE, Zhu et al.,
    2020): ``keep_e ~ Bernoulli(1 - p)``. See :func:`drop_edge`.

    Args:
        p (float): Drop probability in ``[0, 1]``.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = check_probability("p", p)

    def _edge_keep_mask(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        return dropout_edge(edge_index, p=self.p, training=True)[1]


class FeatureMask(Augmenter):
    r"""Zeroes every feature column with probability ``p``, shared by all nodes
    (GRACE, Zhu et al., 2020): ``x'_{ij} = x_{ij} m_j``, ``m_j ~ Bernoulli(1 - p)``.
    See :func:`mask_feature`.

    Args:
        p (float): Masking probability in ``[0, 1]``.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = check_probability("p", p)

    def _augment_features(self, x: Tensor, edge_index: Tensor, num_nodes: int) -> Tensor:
        return mask_feature(x, self.p)


class _FitCache:
    """One value fitted on one tensor; a hit is the same tensor (not modified in
    place since) or an equal one, with the same ``extra`` key."""

    def __init__(self):
        self.clear()

    def clear(self):
        self.tensor: Optional[Tensor] = None
        self.version = -1
        self.extra = None
        self.value: Optional[Tensor] = None

    def hit(self, tensor: Tensor, extra) -> bool:
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
        self.threshold = _check_threshold(threshold)
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
        _check_edge_index(edge_index)
        if num_nodes is None:
            num_nodes = _num_nodes(x, edge_index)
        self._fit(x, edge_index, num_nodes)
        return self

    def _centrality(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        return _CENTRALITY_CACHE.get(edge_index, num_nodes, self.centrality)

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


class AdaptiveEdgeDrop(_Adaptive):
    r"""GCA's centrality-adaptive edge dropping (Zhu et al., 2021):
    ``p_e = min((s_max - s_e) / (s_max - s_mean) * p, threshold)``, ``s_e = log c(target of e)``.

    The probabilities are computed once per graph (cached on ``edge_index``: the
    same tensor, or an equal one) and reused on every later call. See
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

    def _prepare(self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int) -> None:
        if self.is_active() and not self._cache.hit(edge_index, num_nodes):
            self._fit(x, edge_index, num_nodes)

    def _edge_keep_mask(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        self._prepare(None, edge_index, num_nodes)
        return torch.rand(edge_index.size(1), device=edge_index.device) >= self._cache.value


class AdaptiveFeatureMask(_Adaptive):
    r"""GCA's centrality-adaptive feature masking (Zhu et al., 2021):
    ``p_j = min((w_max - w_j) / (w_max - w_mean) * p, threshold)``, ``w_j = log(sum_i [x_ij != 0] c_i)``.

    The probabilities are computed once per feature matrix (cached on ``x``: the
    same tensor, or an equal one) from the graph seen at that first call; inside
    :class:`Compose` that is the un-augmented graph whatever the order. Call
    :meth:`fit` or :meth:`reset_parameters` to refit for another graph with the
    same ``x``. See :func:`feature_drop_probabilities`.

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
        _check_features(x)
        c = self._centrality(edge_index, num_nodes)
        prob = feature_drop_probabilities(x, c, self.p, self.threshold, self.dense)
        return self._cache.store(x, None, prob)

    def _prepare(self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int) -> None:
        if self.is_active() and x is not None and not self._cache.hit(x, None):
            if edge_index is None:
                raise ValueError("AdaptiveFeatureMask needs `edge_index` to compute centralities")
            self._fit(x, edge_index, num_nodes)

    def _augment_features(self, x: Tensor, edge_index: Tensor, num_nodes: int) -> Tensor:
        self._prepare(x, edge_index, num_nodes)
        return mask_feature_weighted(x, self._cache.value)

    def _extra_repr_args(self) -> str:
        return "" if self.dense is None else f", dense={self.dense}"


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
        return any(aug.is_active() for aug in self.augmenters)

    def _prepare(self, x: Optional[Tensor], edge_index: Tensor, num_nodes: int) -> None:
        for aug in self.augmenters:
            aug._prepare(x, edge_index, num_nodes)

    def forward(
        self,
        x: Optional[Tensor],
        edge_index: Tensor,
        edge_weight: Optional[Tensor] = None,
    ) -> GraphTensors:
        r"""Augments tensors; returns ``(x, edge_index, edge_weight)``."""
        if not self.is_active():
            return x, edge_index, edge_weight
        self._prepare(x, edge_index, _num_nodes(x, edge_index))
        for aug in self.augmenters:
            x, edge_index, edge_weight = aug(x, edge_index, edge_weight)
        return x, edge_index, edge_weight

    def transform(self, data: Data) -> Data:
        r"""Augments a :class:`~torch_geometric.data.Data`; returns a new object."""
        if not isinstance(data, Data):
            raise ValueError(f"`data` must be a torch_geometric Data (got {type(data).__name__})")
        data = copy.copy(data)
        if not self.is_active():
            return data
        if data.edge_index is not None:
            self._prepare(data.x, data.edge_index, data.num_nodes)
        for aug in self.augmenters:
            data = aug.transform(data)
        return data

    def reset_parameters(self):
        r"""Resets every member."""
        for aug in self.augmenters:
            aug.reset_parameters()

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({', '.join(map(repr, self.augmenters))})"
