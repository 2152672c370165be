"""Node centralities of GCA's adaptive augmentation (degree, PageRank, eigenvector;
docs/algorithms.md §2), computed when an adaptive augmenter is prepared on a graph."""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import degree, to_networkx, to_undirected

from .._checks import check_choice, check_edge_index, check_int

__all__ = ["node_centrality"]

CENTRALITIES = ("degree", "pagerank", "evc")

_PAGERANK_DAMPING = 0.85
_PAGERANK_ITERATIONS = 10


def node_centrality(edge_index: Tensor, num_nodes: int, kind: str) -> Tensor:
    r"""Node centrality ``c`` used by GCA's adaptive augmentation (Zhu et al., "Graph
    Contrastive Learning with Adaptive Augmentation", 2021, https://arxiv.org/abs/2010.14945;
    docs/algorithms.md §2).

    * ``'degree'``: in-degree of the symmetrised graph, as GCA's.
    * ``'pagerank'``: GCA's power iteration ``c <- 0.15 c + 0.85 A^T D_out^{-1} c``
      from ``c = 1``, 10 iterations (unnormalised).
    * ``'evc'``: eigenvector centrality, :func:`networkx.eigenvector_centrality_numpy`
      (the reference); for disconnected graphs (and < 3 nodes), which networkx refuses,
      the same leading eigenvector of ``A^T`` from SciPy. Clamped at 0.

    Args:
        edge_index (torch.Tensor): ``[2, num_edges]``.
        num_nodes (int): Number of nodes ``N`` (isolated nodes included).
        kind (str): ``'degree'``, ``'pagerank'`` or ``'evc'``.

    Returns:
        A float tensor ``[num_nodes]`` on ``edge_index``'s device.
    """
    check_choice("kind", kind, CENTRALITIES)
    check_edge_index(edge_index)
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
    values = None
    if num_nodes >= 3:
        graph = to_networkx(Data(edge_index=edge_index.cpu(), num_nodes=num_nodes))
        try:
            centrality = nx.eigenvector_centrality_numpy(graph)
            values = [centrality[i] for i in range(num_nodes)]
        except nx.AmbiguousSolution:  # disconnected graph
            values = None
    if values is None:
        values = _leading_eigenvector(edge_index.t().tolist(), num_nodes)
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
