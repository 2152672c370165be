"""A built-in graph for examples and tests, generated from a seed (no download): real
datasets come from PyG's own classes (``Planetoid(root, "Cora")``, ...)."""

from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

from ._checks import check_int, check_nonnegative, check_probability

__all__ = ["synthetic_graph"]


def synthetic_graph(
    num_nodes: int = 800,
    num_classes: int = 5,
    num_features: int = 200,
    avg_degree: float = 8.0,
    homophily: float = 0.6,
    topic_size: int = 20,
    topic_prob: float = 0.1,
    noise_prob: float = 0.02,
    seed: int = 0,
) -> Data:
    """A contextual stochastic block model with bag-of-words features, ``Data(x=[N, F]
    float, edge_index=[2, E] undirected, y=[N])``.

    Nodes fall into ``num_classes`` balanced classes, each with a "topic" of
    ``topic_size`` feature columns; a node switches on a column of its topic with
    probability ``topic_prob`` and any column with probability ``noise_prob`` (binary
    features like Cora's). About ``num_nodes * avg_degree / 2`` undirected edges join
    two nodes of one class with probability ``homophily``, else of different classes:
    many of GRACE's negatives are false negatives, as ProGCL assumes.

    Args:
        num_nodes, num_classes, num_features: ``N``, the classes and the feature columns.
        avg_degree, homophily, topic_size, topic_prob, noise_prob: As above.
        seed: Random seed (the graph depends on nothing else).
    """
    num_nodes = check_int("num_nodes", num_nodes, minimum=2)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    num_features = check_int("num_features", num_features)
    topic_size = check_int("topic_size", topic_size)
    check_nonnegative("avg_degree", avg_degree)
    check_probability("homophily", homophily)
    check_probability("topic_prob", topic_prob)
    check_probability("noise_prob", noise_prob)
    if topic_size > num_features:
        raise ValueError(f"`topic_size` ({topic_size}) exceeds `num_features` ({num_features})")
    if num_nodes < 2 * num_classes:
        raise ValueError(f"`num_nodes` must be >= 2 * num_classes (got {num_nodes})")

    gen = torch.Generator().manual_seed(int(seed))
    y = (torch.arange(num_nodes) % num_classes)[torch.randperm(num_nodes, generator=gen)]
    topics = torch.zeros(num_classes, num_features)
    for c in range(num_classes):
        topics[c, torch.randperm(num_features, generator=gen)[:topic_size]] = 1.0
    prob = noise_prob + (1.0 - noise_prob) * topic_prob * topics[y]
    x = torch.bernoulli(prob, generator=gen)
    # O(E) edges from `gen` (PyG's stochastic_blockmodel_graph takes O(N^2) and the
    # global RNG): each within its source's class with probability `homophily`.
    num_edges = int(round(num_nodes * avg_degree / 2))
    src = torch.randint(num_nodes, (num_edges,), generator=gen)
    same = torch.rand(num_edges, generator=gen) < homophily
    dst = torch.empty_like(src)
    for c in range(num_classes):
        in_c = y[src] == c
        for pool, pick in ((y == c, in_c & same), (y != c, in_c & ~same)):
            nodes = pool.nonzero().view(-1)
            dst[pick] = nodes[torch.randint(nodes.numel(), (int(pick.sum()),), generator=gen)]
    edge_index, _ = remove_self_loops(torch.stack([src, dst]))
    edge_index = coalesce(to_undirected(edge_index, num_nodes=num_nodes), num_nodes=num_nodes)
    return Data(x=x, edge_index=edge_index, y=y)
