"""Node centralities of GCA's adaptive augmentation (docs/algorithms.md §2)."""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import degree, to_undirected

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
      (the reference; SciPy's for graphs networkx refuses), clamped at 0.

    Returns a float tensor ``[num_nodes]`` (isolated nodes included) on ``edge_index``'s
    device.
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
    if kind == "evc":  # (networkx and SciPy: a module of its own, loaded here)
        from ._eigenvector import eigenvector_centrality as compute
    else:
        compute = _degree if kind == "degree" else _pagerank
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
