"""Datasets: the synthetic graph (pyg_progcl.datasets)."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.utils import homophily, is_undirected

from pyg_progcl.datasets import synthetic_graph


def test_synthetic_graph_is_a_homophilous_deterministic_csbm():
    kw = dict(num_nodes=300, num_classes=3, homophily=0.7)
    data, again, other = (synthetic_graph(**kw, seed=s) for s in (1, 1, 2))
    assert torch.equal(data.x, again.x) and torch.equal(data.edge_index, again.edge_index)
    assert not torch.equal(data.x, other.x)
    assert data.x.shape == (300, 200) and data.y.shape == (300,)
    assert torch.bincount(data.y).tolist() == [100, 100, 100]
    assert is_undirected(data.edge_index)
    assert (data.edge_index[0] != data.edge_index[1]).all()
    assert 0.6 < homophily(data.edge_index, data.y) < 0.8
    assert 6 < data.num_edges / data.num_nodes < 9  # avg degree ~8 minus duplicates
    # Features are class-correlated: class-mean profiles differ much more than noise.
    means = torch.stack([data.x[data.y == c].mean(0) for c in range(3)])
    assert (means.max(0).values - means.min(0).values).max() > 0.05


def test_synthetic_graph_of_a_seed_never_changes():
    # Stored results were trained on these graphs: a refactor must draw the same one.
    data = synthetic_graph(
        num_nodes=40, num_classes=2, num_features=12, topic_size=4, avg_degree=4.0, seed=3
    )
    assert data.y.tolist() == [
        0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0,
        0, 1, 0, 0, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1,
    ]  # fmt: skip
    assert data.x.sum(0).int().tolist() == [7, 3, 2, 2, 0, 0, 3, 2, 2, 3, 1, 1]
    assert data.num_edges == 152
    assert data.edge_index[:, :12].tolist() == [
        [0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2],
        [6, 26, 37, 3, 11, 25, 26, 29, 30, 12, 25, 37],
    ]


def test_synthetic_graph_rejects_bad_arguments():
    with pytest.raises(ValueError, match="homophily"):
        synthetic_graph(homophily=1.5)
    with pytest.raises(ValueError, match="num_nodes"):
        synthetic_graph(num_nodes=1)
    with pytest.raises(ValueError, match="topic_size"):
        synthetic_graph(num_features=5, topic_size=10)
