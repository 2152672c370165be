"""Eigenvector centrality for GCA's ``'evc'`` (networkx, SciPy), loaded when it is computed."""

from __future__ import annotations

import contextlib

import networkx as nx
import numpy as np
import scipy.sparse as sps
import torch
from scipy.sparse.linalg import eigs
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import to_networkx


def eigenvector_centrality(edge_index: Tensor, num_nodes: int) -> Tensor:
    """networkx's ``eigenvector_centrality_numpy``, else (disconnected graphs) the unit
    leading eigenvector of ``A^T`` with a positive sum (networkx's formula) from SciPy."""
    if edge_index.numel() == 0:
        return torch.zeros(num_nodes, device=edge_index.device)
    values = None
    if num_nodes >= 3:
        graph = to_networkx(Data(edge_index=edge_index.cpu(), num_nodes=num_nodes))
        with contextlib.suppress(nx.AmbiguousSolution):  # (a disconnected graph)
            centrality = nx.eigenvector_centrality_numpy(graph)
            values = [centrality[i] for i in range(num_nodes)]
    if values is None:
        rows, cols = zip(*set(map(tuple, edge_index.t().tolist())))
        adj = sps.csr_array((np.ones(len(rows)), (rows, cols)), shape=(num_nodes, num_nodes))
        if num_nodes < 3:  # ARPACK needs k < N - 1
            eigenvalues, eigenvectors = np.linalg.eig(adj.toarray().T)
            vector = eigenvectors[:, np.argmax(eigenvalues.real)].real
        else:  # a fixed start vector keeps degenerate cases deterministic
            start = np.full(num_nodes, 1.0 / np.sqrt(num_nodes))
            vector = eigs(adj.T, k=1, which="LR", v0=start)[1].flatten().real
        norm = np.linalg.norm(vector) * (np.sign(vector.sum()) or 1.0)
        values = (vector / norm).tolist() if norm else [0.0] * num_nodes
    return torch.tensor(values, dtype=torch.float64, device=edge_index.device).clamp_min(0.0)
