"""Link prediction and node clustering: the edge split (no held-out edge reaches training),
the scores against scikit-learn and brute force."""

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import (
    small_graph,
)
from sklearn.metrics import average_precision_score, roc_auc_score
from torch_geometric.data import Data
from torch_geometric.utils import stochastic_blockmodel_graph, to_dense_adj, to_undirected

from pyg_progcl._clusters import matched_accuracy
from pyg_progcl._links import hits_at_k
from pyg_progcl.evaluation import cluster_scores, link_scores, split_edges


def pair_set(edge_index):
    """The unordered pairs of ``edge_index``."""
    return {(min(u, v), max(u, v)) for u, v in edge_index.t().tolist()}


# ----------------------------------------------------------------------------- the split


def test_split_is_seeded_and_leaves_the_global_rng_alone():
    data = small_graph()
    torch.manual_seed(0)
    state = torch.get_rng_state()
    a, b, c = split_edges(data, seed=1), split_edges(data, seed=1), split_edges(data, seed=2)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a.test_edges, b.test_edges) and torch.equal(
        a.test_negatives, b.test_negatives
    )
    assert not torch.equal(a.test_edges, c.test_edges)


def test_split_of_a_directed_graph_drops_held_out_edges_stored_either_way():
    # Edges stored as u > v only (RandomLinkSplit's undirected split would lose them).
    row = torch.arange(1, 60)
    data = Data(edge_index=torch.stack([row, row - 1]), num_nodes=60)
    split = split_edges(data, seed=0)
    assert split.test_edges.size(1) == 5 and split.val_edges.size(1) == 2
    held = pair_set(split.val_edges) | pair_set(split.test_edges)
    assert not held & pair_set(split.train_data.edge_index)
    assert split.train_data.num_edges == 59 - 7


def test_a_nearly_complete_graph_draws_its_few_non_edges():
    edge_index = torch.combinations(torch.arange(12)).t()
    keep = torch.ones(edge_index.size(1), dtype=torch.bool)
    keep[:20] = False  # 20 non-edges for 4 + 2 negatives (of 46 edges)
    split = split_edges(Data(edge_index=to_undirected(edge_index[:, keep]), num_nodes=12))
    negatives = pair_set(split.val_negatives) | pair_set(split.test_negatives)
    assert len(negatives) == 6 and negatives <= pair_set(edge_index[:, :20])


@pytest.mark.parametrize(
    "edge_index, num_nodes, words",
    [
        (torch.empty(2, 0, dtype=torch.long), 10, ["at least 20 undirected edges", "has 0 edges"]),
        # Mostly isolated nodes: 5 edges, too few to hold any out for validation.
        (to_undirected(torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])), 100, ["has 5 edges"]),
        (torch.tensor([[0, 0], [0, 0]]), 5, ["has 0 edges"]),  # self-loops only
        (to_undirected(torch.combinations(torch.arange(8)).t()), 8, ["no edge", "only 0"]),
    ],
)
def test_an_impossible_split_is_one_clear_error(edge_index, num_nodes, words):
    with pytest.raises(ValueError) as info:
        split_edges(Data(edge_index=edge_index, num_nodes=num_nodes))
    message = str(info.value)
    assert "\n" not in message and "link prediction needs" in message
    for word in words:
        assert word in message, message


# ----------------------------------------------------------------------------- link scores


def test_auc_and_ap_equal_scikit_learns_on_the_same_scores():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(50, 8, generator=gen)
    pos, neg = torch.randint(50, (2, 40), generator=gen), torch.randint(50, (2, 60), generator=gen)
    labels = np.r_[np.ones(40), np.zeros(60)]
    for score, fn in [
        ("cosine", lambda p: F.cosine_similarity(z[p[0]], z[p[1]])),
        ("inner", lambda p: (z[p[0]] * z[p[1]]).sum(-1)),
    ]:
        values = torch.cat([fn(pos), fn(neg)]).double().numpy()
        got = link_scores(z, pos, neg, score=score)
        assert got["auc"] == pytest.approx(roc_auc_score(labels, values), abs=1e-12)
        assert got["ap"] == pytest.approx(average_precision_score(labels, values), abs=1e-12)
    cos, inner = link_scores(z, pos, neg), link_scores(z, pos, neg, score="inner")
    assert cos["auc"] != inner["auc"]  # (the two scores differ, so each was checked)


def brute_force_hits(pos, neg, k):
    """A positive is a hit when fewer than ``k`` negatives score at least as high."""
    return sum(sum(n >= p for n in neg) < k for p in pos) / len(pos)


@pytest.mark.parametrize("k", [1, 3, 10, 40])
def test_hits_at_k_equals_a_brute_force_count(k):
    gen = torch.Generator().manual_seed(k)
    pos = torch.randint(0, 12, (30,), generator=gen).double()  # many ties
    neg = torch.randint(0, 12, (35,), generator=gen).double()
    assert hits_at_k(pos, neg, k) == pytest.approx(brute_force_hits(pos.tolist(), neg.tolist(), k))


def test_hits_with_fewer_negatives_than_k_is_one_as_in_ogb():
    assert hits_at_k(torch.zeros(3), torch.ones(5), 20) == 1.0


def test_link_scores_name_each_score():
    z = torch.randn(10, 4)
    pairs = torch.tensor([[0, 1], [2, 3]])
    assert set(link_scores(z, pairs, pairs)) == {"auc", "ap", "hits@20", "hits@50", "hits@100"}
    with pytest.raises(ValueError, match="outside the 10 embeddings"):
        link_scores(z, pairs, torch.tensor([[0], [10]]))
    with pytest.raises(ValueError, match="score"):
        link_scores(z, pairs, pairs, score="dot")


# ----------------------------------------------------------------------------- clustering


def test_on_a_planted_partition_nmi_and_ari_reach_one():
    sizes = [40, 30, 50, 35]
    probs = torch.full((4, 4), 0.01) + torch.eye(4) * 0.29  # 0.3 within a block, 0.01 across
    with torch.random.fork_rng():
        torch.manual_seed(0)
        edge_index = stochastic_blockmodel_graph(sizes, probs)
    y = torch.repeat_interleave(torch.tensor([2, 0, 3, 1]), torch.tensor(sizes))
    # Two steps of propagation from each node: mostly the own block's coordinates.
    adj = to_dense_adj(edge_index, max_num_nodes=sum(sizes))[0] + torch.eye(sum(sizes))
    scores = cluster_scores(adj @ adj, y, seed=0)
    assert scores["nmi"] == pytest.approx(1.0) and scores["ari"] == pytest.approx(1.0)
    assert scores["acc"] == pytest.approx(1.0) and scores["n_clusters"] == 4


def test_clustering_scores_are_low_on_noise_and_need_labels():
    gen = torch.Generator().manual_seed(0)
    scores = cluster_scores(torch.randn(200, 8, generator=gen), torch.arange(200) % 4)
    assert scores["nmi"] < 0.1 and scores["ari"] < 0.1
    with pytest.raises(ValueError, match="labels"):
        cluster_scores(torch.randn(20, 3), None)
    with pytest.raises(ValueError, match="two classes"):
        cluster_scores(torch.randn(20, 3), torch.zeros(20, dtype=torch.long))


@pytest.mark.parametrize("seed", range(4))
def test_matched_accuracy_equals_a_brute_force_search_over_permutations(seed):
    rng = np.random.default_rng(seed)
    k = 4
    y_true = rng.integers(0, k, 60)
    y_pred = (y_true + (rng.random(60) < 0.4) * rng.integers(0, k, 60)) % k
    best = max(
        np.mean(np.asarray(perm)[y_pred] == y_true) for perm in itertools.permutations(range(k))
    )
    assert matched_accuracy(torch.as_tensor(y_true), y_pred) == pytest.approx(best)
    assert best < 1.0


# ----------------------------------------------------------------------------- training


# ----------------------------------------------------------------------------- command line
