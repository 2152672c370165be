"""Tests of pyg_progcl.augment against the formulas of docs/algorithms.md §2."""

import math

import networkx
import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data, HeteroData
from torch_geometric.utils import dropout_edge, erdos_renyi_graph, to_undirected
from torch_geometric.utils import mask_feature as pyg_mask_feature

from pyg_progcl.augment import (
    AdaptiveEdgeDrop,
    AdaptiveFeatureMask,
    Augmenter,
    ComposeAugmenters,
    EdgeDrop,
    FeatureMask,
    drop_edge_weighted,
    edge_drop_probabilities,
    feature_drop_probabilities,
    mask_feature_csr,
    mask_feature_weighted,
    node_centrality,
)

# ----------------------------------------------------------------------- fixtures


def random_graph(num_nodes=60, prob=0.1, seed=0):
    torch.manual_seed(seed)
    return to_undirected(erdos_renyi_graph(num_nodes, prob))


def ring(num_nodes):
    src = torch.arange(num_nodes)
    return to_undirected(torch.stack([src, (src + 1) % num_nodes]))


def sparse_features(num_nodes, num_features, density=0.1, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(num_nodes, num_features, generator=gen) < density).float()


def karate():
    graph = networkx.karate_club_graph()
    edges = torch.tensor(list(graph.edges())).t()
    return graph, to_undirected(edges)


# ---------------------------------------------- independent dense references (§2)


def reference_rescale(s, p, threshold=0.7):
    """min((s_max - s)/(s_max - s_mean) * p / mean(...), threshold), written from §2."""
    w = (s.max() - s) / (s.max() - s.mean())
    return torch.clamp(w / w.mean() * p, max=threshold)


def reference_edge_probabilities(edge_index, c, p, threshold=0.7):
    s = torch.tensor([math.log(c[int(j)]) for j in edge_index[1]], dtype=torch.float64)
    return reference_rescale(s, p, threshold)


def reference_feature_probabilities(x, c, p, threshold=0.7, dense=False):
    n, f = x.shape
    w = []
    for j in range(f):
        total = sum(
            (abs(float(x[i, j])) if dense else float(x[i, j] != 0)) * c[i] for i in range(n)
        )
        w.append(math.log(total))
    return reference_rescale(torch.tensor(w, dtype=torch.float64), p, threshold)


# ------------------------------------------------------------ uniform augmentation


def test_edge_drop_rate_matches_p():
    torch.manual_seed(0)
    edge_index = torch.randint(0, 1000, (2, 20_000))
    weight = torch.arange(20_000, dtype=torch.float)
    _, kept, kept_weight = EdgeDrop(0.3)(None, edge_index, weight)
    assert abs(1 - kept.size(1) / 20_000 - 0.3) < 0.02
    # Weights stay aligned with their edges.
    assert torch.equal(edge_index[:, kept_weight.long()], kept)


def test_edge_drop_draws_what_pyg_dropout_edge_draws():
    edge_index = torch.randint(0, 100, (2, 500))
    torch.manual_seed(4)
    expected, mask = dropout_edge(edge_index, p=0.4)
    torch.manual_seed(4)
    assert torch.equal(EdgeDrop(0.4)(None, edge_index)[1], expected)
    assert 0 < int(mask.sum()) < 500


def test_mask_feature_masks_whole_columns_at_rate_p():
    torch.manual_seed(0)
    x = torch.rand(40, 4000) + 0.5
    out, feat_mask = mask_feature_csr(x, 0.3)
    zero_cols = (out == 0).all(dim=0)
    kept_cols = (out == x).all(dim=0)
    assert bool((zero_cols | kept_cols).all()), "every column is masked for all nodes or none"
    assert abs(zero_cols.float().mean().item() - 0.3) < 0.03
    assert not torch.equal(out, x) and x.min() > 0, "input not modified"
    assert feat_mask.shape == (1, 4000) and torch.equal(feat_mask[0], kept_cols)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"p": 0.3},
        {"p": 0.3, "mode": "row"},
        {"p": 0.3, "mode": "all", "fill_value": -1.0},
        {"p": 0.3, "training": False},
        {"p": 0.0},
    ],
)
def test_mask_feature_on_dense_x_is_pyg_mask_feature(kwargs):
    x = torch.rand(30, 20) + 0.5
    torch.manual_seed(5)
    out, feat_mask = mask_feature_csr(x, **kwargs)
    torch.manual_seed(5)
    expected, expected_mask = pyg_mask_feature(x, **kwargs)
    assert torch.equal(out, expected)
    assert feat_mask.dtype == torch.bool and torch.equal(feat_mask, expected_mask)
    assert torch.equal(out, torch.where(feat_mask, x, out))  # kept entries unchanged


def test_weighted_with_constant_probability_equals_uniform():
    edge_index = torch.randint(0, 100, (2, 500))
    x = torch.rand(100, 64)
    torch.manual_seed(3)
    uniform_edges, uniform_edge_mask = dropout_edge(edge_index, 0.4)
    uniform_x, uniform_feat_mask = mask_feature_csr(x, 0.4)
    torch.manual_seed(3)
    weighted_edges, weighted_edge_mask = drop_edge_weighted(edge_index, torch.full((500,), 0.4))
    weighted_x, weighted_feat_mask = mask_feature_weighted(x, torch.full((64,), 0.4))
    assert torch.equal(uniform_edges, weighted_edges)
    assert torch.equal(uniform_x, weighted_x)
    assert torch.equal(uniform_edge_mask, weighted_edge_mask)
    assert torch.equal(uniform_feat_mask, weighted_feat_mask)


def test_weighted_drop_rates_follow_per_item_probabilities():
    torch.manual_seed(0)
    edge_index = torch.arange(40_000).view(2, -1)
    drop_prob = torch.cat([torch.full((10_000,), 0.1), torch.full((10_000,), 0.6)])
    kept_edges, kept = drop_edge_weighted(edge_index, drop_prob)
    assert kept.shape == (20_000,) and kept.dtype == torch.bool
    assert torch.equal(kept_edges, edge_index[:, kept])
    assert abs(1 - kept[:10_000].float().mean().item() - 0.1) < 0.02
    assert abs(1 - kept[10_000:].float().mean().item() - 0.6) < 0.02

    x = torch.ones(3, 20_000)
    out, feat_mask = mask_feature_weighted(x, drop_prob)
    assert abs((out[0, :10_000] == 0).float().mean().item() - 0.1) < 0.02
    assert abs((out[0, 10_000:] == 0).float().mean().item() - 0.6) < 0.02
    assert torch.equal(out[0], out[2])
    assert torch.equal(feat_mask, out[:1] != 0)


def test_weighted_functions_are_no_ops_outside_training():
    edge_index, x = ring(6), torch.rand(6, 4)
    out_edges, edge_mask = drop_edge_weighted(edge_index, torch.ones(12), training=False)
    assert out_edges is edge_index and edge_mask.tolist() == [True] * 12
    out_x, feat_mask = mask_feature_weighted(x, torch.ones(4), training=False)
    assert out_x is x and torch.equal(feat_mask, pyg_mask_feature(x, training=False)[1])


# ------------------------------------------------------------------- centralities


def test_degree_centrality_counts_neighbours():
    edge_index = torch.tensor([[0, 0, 1, 3], [1, 2, 2, 0]])  # directed; GCA symmetrises
    assert node_centrality(edge_index, 5, "degree").tolist() == [3.0, 2.0, 2.0, 1.0, 0.0]


def test_evc_matches_networkx_on_karate():
    graph, edge_index = karate()
    expected = networkx.eigenvector_centrality(graph, max_iter=10_000, tol=1e-12)
    expected = torch.tensor([expected[i] for i in range(graph.number_of_nodes())])
    got = node_centrality(edge_index, graph.number_of_nodes(), "evc")
    torch.testing.assert_close(got, expected.float(), atol=1e-5, rtol=1e-4)


def test_evc_is_networkx_on_the_directed_edge_list_exactly():
    # Repeated and one-way edges: the graph handed to networkx is the edge list as a DiGraph.
    g = torch.Generator().manual_seed(0)
    edge_index = torch.cat([torch.randint(30, (2, 150), generator=g), ring(30)], dim=1)
    graph = networkx.DiGraph()
    graph.add_nodes_from(range(30))
    graph.add_edges_from(edge_index.t().tolist())
    expected = networkx.eigenvector_centrality_numpy(graph)
    expected = torch.tensor([expected[i] for i in range(30)], dtype=torch.float64)
    got = node_centrality(edge_index, 30, "evc")
    assert torch.equal(got, expected.clamp_min(0.0).to(got.dtype))


def test_pagerank_matches_dense_power_iteration():
    edge_index = random_graph(30, 0.2)
    adj = torch.zeros(30, 30, dtype=torch.float64)
    adj[edge_index[0], edge_index[1]] = 1.0
    out_deg = adj.sum(1)
    c = torch.ones(30, dtype=torch.float64)
    for _ in range(10):  # GCA: c <- 0.15 c + 0.85 A^T D_out^-1 c
        c = 0.15 * c + 0.85 * adj.t() @ (c / out_deg)
    torch.testing.assert_close(node_centrality(edge_index, 30, "pagerank"), c.float())


@pytest.mark.parametrize("kind", ["degree", "pagerank", "evc"])
def test_centrality_finite_on_disconnected_graph_with_isolated_nodes(kind):
    complete = torch.combinations(torch.arange(4)).t()  # K4: the dominant component
    edge_index = to_undirected(torch.cat([complete, ring(5) + 4, torch.tensor([[9], [10]])], 1))
    c = node_centrality(edge_index, 14, kind)  # nodes 11..13 isolated
    assert c.shape == (14,) and torch.isfinite(c).all() and (c >= 0).all()
    if kind == "evc":  # the reference's leading eigenvector lives on the dominant component
        assert c[:4].min() > 0.1 > c[4:].max()
    else:
        assert c[:11].min() > c[11:].max()


# ----------------------------------------------------------- adaptive probabilities


def test_edge_probabilities_match_reference_formula():
    edge_index = random_graph()
    c = node_centrality(edge_index, 60, "degree")
    expected = reference_edge_probabilities(edge_index, c.tolist(), 0.3)
    got = edge_drop_probabilities(edge_index, c, 0.3)
    torch.testing.assert_close(got, expected.float(), atol=1e-5, rtol=1e-5)


def test_feature_probabilities_match_reference_formula():
    edge_index = random_graph()
    c = node_centrality(edge_index, 60, "degree")
    x = sparse_features(60, 20, density=0.3)
    expected = reference_feature_probabilities(x, c.tolist(), 0.3)
    got = feature_drop_probabilities(x, c, 0.3, dense=False)
    torch.testing.assert_close(got, expected.float(), atol=1e-5, rtol=1e-5)

    dense_x = torch.randn(60, 20)
    expected = reference_feature_probabilities(dense_x, c.tolist(), 0.3, dense=True)
    got = feature_drop_probabilities(dense_x, c, 0.3)  # auto-detected as dense
    torch.testing.assert_close(got, expected.float(), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got, feature_drop_probabilities(dense_x, c, 0.3, dense=False))


@pytest.mark.parametrize("kind", ["degree", "pagerank", "evc"])
def test_adaptive_probabilities_have_mean_p_and_respect_cap(kind):
    edge_index = random_graph(80, 0.1)
    c = node_centrality(edge_index, 80, kind)
    x = sparse_features(80, 100, density=0.2)
    small = edge_drop_probabilities(edge_index, c, 0.05)
    assert small.max() < 0.7, "cap not binding at p=0.05"
    assert abs(small.mean().item() - 0.05) < 1e-5
    assert small.std() > 0, "probabilities vary with centrality"
    for prob in (
        edge_drop_probabilities(edge_index, c, 0.6),
        feature_drop_probabilities(x, c, 0.6),
    ):
        assert prob.max() <= 0.7 + 1e-7 and prob.min() >= 0
    features = feature_drop_probabilities(x, c, 0.05)
    assert features.max() < 0.7 and abs(features.mean().item() - 0.05) < 1e-5


@pytest.mark.parametrize("kind", ["degree", "pagerank", "evc"])
def test_all_equal_scores_give_uniform_probabilities(kind):
    edge_index = ring(12)
    c = node_centrality(edge_index, 12, kind)
    prob = edge_drop_probabilities(edge_index, c, 0.3)
    torch.testing.assert_close(prob, torch.full_like(prob, 0.3))
    x = torch.ones(12, 5)
    torch.testing.assert_close(feature_drop_probabilities(x, c, 0.9), torch.full((5,), 0.7))


@pytest.mark.parametrize("kind", ["degree", "pagerank", "evc"])
def test_probabilities_finite_on_degenerate_graphs(kind):
    edge_index = torch.cat([ring(5), ring(3) + 5, torch.tensor([[8], [9]])], dim=1)
    x = sparse_features(12, 30, density=0.2)
    x[:, 0] = 0  # an all-zero column
    x[10:, :] = 1  # isolated nodes 10, 11 use every column
    c = node_centrality(edge_index, 12, kind)
    for p in (0.0, 0.3, 1.0):
        for prob in (
            edge_drop_probabilities(edge_index, c, p),
            feature_drop_probabilities(x, c, p),
        ):
            assert torch.isfinite(prob).all() and prob.min() >= 0 and prob.max() <= 0.7
    # No edges at all: empty edge probabilities, finite feature probabilities,
    # uniform ones where every centrality is 0 (degree, evc).
    empty = torch.empty(2, 0, dtype=torch.long)
    c = node_centrality(empty, 12, kind)
    assert edge_drop_probabilities(empty, c, 0.3).numel() == 0
    prob = feature_drop_probabilities(x, c, 0.3)
    assert torch.isfinite(prob).all() and prob.max() <= 0.7
    if kind != "pagerank":
        torch.testing.assert_close(prob, torch.full((30,), 0.3))
    # Tiny graphs (networkx's solver needs >= 3 nodes).
    pair = torch.tensor([[0, 1], [1, 0]])
    assert torch.isfinite(edge_drop_probabilities(pair, node_centrality(pair, 2, kind), 0.3)).all()


# ---------------------------------------------------------------------- modules


def make_data(num_nodes=60, num_features=30):
    edge_index = random_graph(num_nodes)
    x = sparse_features(num_nodes, num_features, density=0.3) + 0.0
    weight = edge_index[0] * 1000.0 + edge_index[1]  # encodes its edge
    return Data(x=x, edge_index=edge_index, edge_weight=weight)


ALL_AUGMENTERS = [
    lambda p: EdgeDrop(p),
    lambda p: FeatureMask(p),
    lambda p: AdaptiveEdgeDrop(p, centrality="degree"),
    lambda p: AdaptiveFeatureMask(p, centrality="degree"),
    lambda p: ComposeAugmenters(EdgeDrop(p), AdaptiveFeatureMask(p, centrality="evc")),
]


@pytest.mark.parametrize("make", ALL_AUGMENTERS)
def test_data_in_data_out_equals_the_tensor_call(make):
    data = make_data()
    aug = make(0.5)
    torch.manual_seed(2)
    x, edge_index, weight = aug(data.x, data.edge_index, data.edge_weight)
    torch.manual_seed(2)
    out = aug(data)
    assert type(out) is Data and out is not data
    assert torch.equal(out.x, x) and torch.equal(out.edge_index, edge_index)
    assert torch.equal(out.edge_weight, weight)


@pytest.mark.parametrize("make", ALL_AUGMENTERS)
def test_heterogeneous_data_is_a_clear_error(make):
    data = HeteroData()
    data["paper"].x = torch.rand(4, 3)
    data["paper", "cites", "paper"].edge_index = ring(4)
    with pytest.raises(ValueError, match="HeteroData"):
        make(0.5)(data)


def test_one_forward_serves_tensors_and_data_through_the_modules_call():
    # No __call__ of its own: a Data goes through nn.Module's call (hooks run) to the
    # one forward, which hands it to the BaseTransform path.
    assert Augmenter.__call__ is torch.nn.Module.__call__
    aug = FeatureMask(0.5)
    calls = []
    aug.register_forward_hook(lambda module, args, out: calls.append(type(out).__name__))
    data = Data(x=torch.ones(4, 6), edge_index=torch.tensor([[0, 1], [1, 2]]))
    assert isinstance(aug(data), Data) and data.x.sum() == 24  # (the input is untouched)
    assert isinstance(aug(data.x, data.edge_index), tuple)
    assert calls == ["Data", "tuple"]
    with pytest.raises(ValueError, match="either a Data"):
        aug(data, data.edge_index)
    with pytest.raises(ValueError, match="`edge_index` is required"):
        aug(data.x)


def test_augmenter_subclass_works_as_module_and_transform():
    class DropAll(Augmenter):  # the documented extension points
        p = 1.0

        def edge_keep_mask(self, edge_index, num_nodes):
            return torch.zeros(edge_index.size(1), dtype=torch.bool)

    data = make_data()
    assert DropAll()(data).num_edges == 0
    assert DropAll()(data.x, data.edge_index)[1].shape == (2, 0)
    assert torch.equal(DropAll().eval()(data).edge_index, data.edge_index)
    out = T.Compose([DropAll(), T.ToUndirected()])(data)
    assert out.num_edges == 0 and data.num_edges > 0


def test_the_docstring_example_augmenter_adds_noise_in_training_only():
    class FeatureNoise(Augmenter):
        def __init__(self, p: float):
            super().__init__()
            self.p = p

        def augment_features(self, x, edge_index, num_nodes):
            return x + self.p * torch.randn_like(x)

    data = make_data()
    torch.manual_seed(0)
    view = FeatureNoise(0.1)(data)
    torch.manual_seed(0)
    assert torch.equal(view.x, data.x + 0.1 * torch.randn_like(data.x))
    assert torch.equal(view.edge_index, data.edge_index)
    assert torch.equal(FeatureNoise(0.1).eval()(data).x, data.x)
    assert torch.equal(FeatureNoise(0.0)(data).x, data.x)


def test_a_custom_augmenter_is_prepared_once_on_the_input_graph():
    class KeepFirstEdges(Augmenter):  # keeps the edges it saw when prepared
        p = 1.0

        def prepare(self, x, edge_index, num_nodes):
            self.prepared_on = edge_index.size(1)
            return self

        def is_prepared(self):
            return hasattr(self, "prepared_on")

        def edge_keep_mask(self, edge_index, num_nodes):
            return torch.arange(edge_index.size(1)) < self.prepared_on // 2

    data = make_data()
    custom = KeepFirstEdges()
    compose = ComposeAugmenters(EdgeDrop(0.5), custom)
    assert not compose.is_prepared()
    for _ in range(3):
        compose(data.x, data.edge_index)
        assert custom.prepared_on == data.num_edges  # the input graph's, not the dropped one
    compose.prepare(data.x, data.edge_index[:, :10])  # asked: prepared again
    assert custom.prepared_on == 10
    alone = KeepFirstEdges()
    assert alone(data).num_edges == data.num_edges // 2 and alone.prepared_on == data.num_edges


@pytest.mark.parametrize("make", ALL_AUGMENTERS)
def test_tensor_call_changes_graph_and_keeps_weights_aligned(make):
    data = make_data()
    torch.manual_seed(0)
    x, edge_index, weight = make(0.5)(data.x, data.edge_index, data.edge_weight)
    assert x.shape == data.x.shape
    assert torch.equal(weight, edge_index[0] * 1000.0 + edge_index[1])
    assert not (torch.equal(x, data.x) and torch.equal(edge_index, data.edge_index))


@pytest.mark.parametrize("make", ALL_AUGMENTERS)
def test_deterministic_under_manual_seed(make):
    data = make_data()
    aug = make(0.4)
    outputs = []
    for seed in (7, 7, 8):
        torch.manual_seed(seed)
        outputs.append(aug(data.x, data.edge_index))
    same = [torch.equal(a, b) for a, b in zip(outputs[0][:2], outputs[1][:2])]
    different = [torch.equal(a, b) for a, b in zip(outputs[0][:2], outputs[2][:2])]
    assert all(same) and not all(different)


@pytest.mark.parametrize("make", ALL_AUGMENTERS)
def test_noop_in_eval_mode_and_with_p_zero(make):
    data = make_data()
    for aug in (make(0.5).eval(), make(0.0)):
        x, edge_index, weight = aug(data.x, data.edge_index, data.edge_weight)
        assert x is data.x and edge_index is data.edge_index and weight is data.edge_weight
        out = aug(data)
        assert out is not data and torch.equal(out.edge_index, data.edge_index)
        assert torch.equal(out.x, data.x)


@pytest.mark.parametrize("make", ALL_AUGMENTERS)
def test_pyg_compose_on_data_does_not_mutate_input(make):
    data = make_data()
    before = data.clone()
    transform = T.Compose([make(0.5), T.ToUndirected()])
    torch.manual_seed(1)
    out = transform(data)
    assert isinstance(out, Data) and out is not data
    for key in ("x", "edge_index", "edge_weight"):
        assert torch.equal(data[key], before[key]), f"input `{key}` was modified"
    assert out.num_nodes == data.num_nodes
    assert out.edge_index.size(1) == out.edge_weight.numel()


def test_data_call_filters_edge_attributes_with_edges():
    data = make_data()
    torch.manual_seed(0)
    out = EdgeDrop(0.5)(data)
    assert out.edge_index.size(1) < data.edge_index.size(1)
    assert torch.equal(out.edge_weight, out.edge_index[0] * 1000.0 + out.edge_index[1])
    assert torch.equal(out.x, data.x)


def test_feature_mask_on_data_masks_columns():
    data = make_data(num_features=400)
    torch.manual_seed(0)
    out = FeatureMask(0.5)(data)
    masked = (out.x != data.x).any(dim=0)
    assert bool((out.x[:, masked] == 0).all()) and 0.35 < masked.float().mean() < 0.65
    assert torch.equal(out.edge_index, data.edge_index)


def test_eval_propagates_through_parent_module():
    compose = ComposeAugmenters(EdgeDrop(0.5), AdaptiveFeatureMask(0.5, centrality="degree"))
    parent = torch.nn.Module()
    parent.aug = compose
    parent.eval()
    assert not any(aug.training for aug in compose.augmenters)
    data = make_data()
    x, edge_index, _ = parent.aug(data.x, data.edge_index)
    assert x is data.x and edge_index is data.edge_index
    parent.train()
    assert all(aug.training for aug in compose.augmenters)


def count_evc_calls(monkeypatch) -> list:
    calls = []
    real = networkx.eigenvector_centrality_numpy

    def counting(graph, *args, **kwargs):
        calls.append(graph.number_of_nodes())
        return real(graph, *args, **kwargs)

    monkeypatch.setattr(networkx, "eigenvector_centrality_numpy", counting)
    return calls


def test_adaptive_augmenters_prepare_once_and_only_again_when_asked(monkeypatch):
    calls = count_evc_calls(monkeypatch)
    _, edge_index = karate()
    x = sparse_features(34, 20, density=0.3)
    view1 = ComposeAugmenters(AdaptiveEdgeDrop(0.3), AdaptiveFeatureMask(0.2))
    view2 = ComposeAugmenters(AdaptiveFeatureMask(0.4), AdaptiveEdgeDrop(0.2))
    assert not view1.is_prepared()
    for _ in range(5):
        view1(x, edge_index)
        view2(x, edge_index)
    assert len(calls) == 2, "one networkx call per ComposeAugmenters, shared by its members"
    assert view1.is_prepared() and view2.is_prepared()
    prepared = view1.augmenters[0].node_drop_prob
    view1(x.clone(), edge_index.clone())  # an equal graph: nothing recomputed
    assert view1.augmenters[0].node_drop_prob is prepared and len(calls) == 2

    other = to_undirected(torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]]))
    with pytest.raises(ValueError, match=r"prepared on a graph of 34 nodes, not 6: call \.prepare"):
        view1(torch.rand(6, 20), other)
    view1.prepare(torch.rand(6, 20), other)  # asked: computed again, once for both members
    assert len(calls) == 3 and view1.augmenters[0].node_drop_prob.shape == (6,)
    view1(torch.rand(6, 20), other)
    assert len(calls) == 3


def test_prepared_probabilities_ignore_later_in_place_edits_until_prepare():
    data = make_data()
    aug = AdaptiveEdgeDrop(0.3, centrality="degree")
    aug(data.x, data.edge_index)
    first = aug.node_drop_prob
    edge_index = data.edge_index.clone()
    edge_index[1, :5] = 0  # modified in place: the probabilities stay what was prepared
    aug(data.x, edge_index)
    assert aug.node_drop_prob is first
    aug.prepare(data.x, edge_index)
    assert not torch.equal(aug.node_drop_prob, first)
    aug.reset_parameters()
    assert aug.node_drop_prob is None and not aug.is_prepared()


def test_edge_drop_keeps_one_probability_per_target_node():
    data = make_data()
    c = node_centrality(data.edge_index, data.num_nodes, "degree")
    per_edge = edge_drop_probabilities(data.edge_index, c, 0.3)
    aug = AdaptiveEdgeDrop(0.3, centrality="degree").prepare(data)
    assert aug.node_drop_prob.shape == (data.num_nodes,)
    assert torch.equal(aug.node_drop_prob[data.edge_index[1]], per_edge)
    # Each call draws what drop_edge_weighted draws with the per-edge probabilities.
    torch.manual_seed(4)
    kept = aug(None, data.edge_index)[1]
    torch.manual_seed(4)
    assert torch.equal(kept, drop_edge_weighted(data.edge_index, per_edge)[0])


def test_an_adaptive_member_after_an_edge_drop_keeps_the_input_graphs_probabilities(
    monkeypatch,
):
    calls = count_evc_calls(monkeypatch)
    data = make_data()
    adaptive = AdaptiveEdgeDrop(0.5)
    compose = ComposeAugmenters(EdgeDrop(0.5), adaptive)
    torch.manual_seed(0)
    for _ in range(3):
        _, edge_index, _ = compose(data.x, data.edge_index)
        assert 0 < edge_index.size(1) < data.edge_index.size(1) // 2
    assert len(calls) == 1  # prepared on the input graph, not on each dropped one
    expected = AdaptiveEdgeDrop(0.5).prepare(data).node_drop_prob
    assert torch.equal(adaptive.node_drop_prob, expected)
    # An edge-only call: the members see the input's node count, not one inferred from
    # what the edge drop left (here nothing).
    _, edge_index, _ = ComposeAugmenters(EdgeDrop(1.0), adaptive)(None, data.edge_index)
    assert edge_index.shape == (2, 0)


def test_prepared_probabilities_are_buffers_that_move_and_show():
    data = make_data()
    edge_drop = AdaptiveEdgeDrop(0.3, centrality="degree")
    feature_mask = AdaptiveFeatureMask(0.2, centrality="degree")
    compose = ComposeAugmenters(edge_drop, feature_mask).prepare(data)
    assert repr(edge_drop) == (
        f"AdaptiveEdgeDrop(p=0.3, centrality=degree, threshold=0.7, "
        f"node_drop_prob=[{data.num_nodes}])"
    )
    assert repr(feature_mask) == (
        f"AdaptiveFeatureMask(p=0.2, centrality=degree, threshold=0.7, "
        f"drop_prob=[{data.num_features}], num_nodes={data.num_nodes})"
    )
    assert {name for name, _ in compose.named_buffers()} == {
        "augmenters.0.node_drop_prob",
        "augmenters.1.drop_prob",
    }
    assert compose.state_dict() == {}  # recomputed from the graph, not saved
    compose.double()
    assert edge_drop.node_drop_prob.dtype == feature_mask.drop_prob.dtype == torch.float64
    x, edge_index, _ = compose(data.x, data.edge_index)
    assert x.shape == data.x.shape and edge_index.size(1) < data.edge_index.size(1)


def test_features_of_another_shape_are_refused_with_one_line():
    data = make_data()
    aug = AdaptiveFeatureMask(0.3, centrality="degree").prepare(data)
    with pytest.raises(ValueError, match=r"prepared on 30 feature columns, not 12") as error:
        aug(data.x[:, :12], data.edge_index)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=r"prepared on a graph of 60 nodes, not 59"):
        aug(data.x[:59], data.edge_index[:, (data.edge_index < 59).all(0)])
    with pytest.raises(ValueError, match=r"AdaptiveEdgeDrop is not prepared: call \.prepare"):
        AdaptiveEdgeDrop(0.3).edge_keep_mask(data.edge_index, data.num_nodes)
    with pytest.raises(ValueError, match=r"AdaptiveFeatureMask needs node features `x`"):
        AdaptiveFeatureMask(0.3).prepare(None, data.edge_index)


def test_compose_fits_adaptive_members_on_the_input_graph():
    data = make_data()
    compose = ComposeAugmenters(EdgeDrop(0.9), AdaptiveFeatureMask(0.3, centrality="degree"))
    compose(data.x, data.edge_index)
    c = node_centrality(data.edge_index, data.num_nodes, "degree")
    expected = feature_drop_probabilities(data.x, c, 0.3)
    torch.testing.assert_close(compose.augmenters[1].drop_prob, expected)


def test_explicit_prepare_accepts_data_and_tensors():
    data = make_data()
    aug = AdaptiveFeatureMask(0.3, centrality="pagerank").prepare(data)
    assert aug.drop_prob.shape == (data.num_features,) and aug.num_nodes == data.num_nodes
    edge_aug = AdaptiveEdgeDrop(0.3, centrality="pagerank").prepare(None, data.edge_index)
    assert edge_aug.node_drop_prob.shape == (data.num_nodes,)
    c = node_centrality(data.edge_index, data.num_nodes, "pagerank")
    shared = AdaptiveEdgeDrop(0.3, centrality="pagerank").prepare(data, centrality=c)
    assert torch.equal(shared.node_drop_prob, edge_aug.node_drop_prob)
    with pytest.raises(ValueError, match=r"`centrality` must be a tensor of shape \[num_nodes\]"):
        AdaptiveEdgeDrop(0.3).prepare(data, centrality=c[:-1])


def test_reprs():
    assert repr(EdgeDrop(0.2)) == "EdgeDrop(p=0.2)"
    assert repr(FeatureMask(0.3)) == "FeatureMask(p=0.3)"
    assert repr(AdaptiveEdgeDrop(0.3)) == "AdaptiveEdgeDrop(p=0.3, centrality=evc, threshold=0.7)"
    assert (
        repr(AdaptiveFeatureMask(0.1, "degree", 0.5, dense=True))
        == "AdaptiveFeatureMask(p=0.1, centrality=degree, threshold=0.5, dense=True)"
    )
    assert repr(ComposeAugmenters(EdgeDrop(0.2), FeatureMask(0.3))) == (
        "ComposeAugmenters(EdgeDrop(p=0.2), FeatureMask(p=0.3))"
    )


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support")
@pytest.mark.parametrize(
    "build, name",
    [
        (lambda: EdgeDrop(-0.1), "`p`"),
        (lambda: FeatureMask(1.5), "`p`"),
        (lambda: AdaptiveEdgeDrop(0.3, threshold=0.0), "`threshold`"),
        (lambda: AdaptiveFeatureMask(0.3, threshold=1.2), "`threshold`"),
        (lambda: AdaptiveEdgeDrop(0.3, centrality="katz"), "`centrality`"),
        (lambda: AdaptiveFeatureMask(0.3, dense="yes"), "`dense`"),
        (lambda: ComposeAugmenters(EdgeDrop(0.1), "not an augmenter"), "`augmenters"),
        (lambda: node_centrality(ring(4), 4, "closeness"), "`kind`"),
        (lambda: node_centrality(ring(4), 3, "degree"), "`num_nodes`"),
        (lambda: mask_feature_csr(torch.ones(4, 2), 2.0), "`p`"),
        (lambda: mask_feature_csr(torch.ones(4, 2), 0.1, mode="column"), "`mode`"),
        (
            lambda: drop_edge_weighted(torch.zeros(3, 4, dtype=torch.long), torch.zeros(4)),
            "`edge_index`",
        ),
        (lambda: mask_feature_csr(torch.ones(4), 0.1), "`x`"),
        (lambda: mask_feature_csr(torch.eye(3).to_sparse_csr(), 0.1, mode="row"), "`mode`"),
        (
            lambda: mask_feature_csr(torch.eye(3).to_sparse_csr(), 0.1, fill_value=1.0),
            "`fill_value`",
        ),
        (lambda: drop_edge_weighted(ring(4), torch.full((3,), 0.1)), "`drop_prob`"),
        (  # the edge weights of the old signature, now `training`
            lambda: drop_edge_weighted(ring(4), torch.full((8,), 0.1), torch.ones(8)),
            "`training`",
        ),
        (
            lambda: mask_feature_weighted(torch.ones(2, 3), torch.tensor([0.1, 1.5, 0])),
            "`drop_prob`",
        ),
        (lambda: edge_drop_probabilities(ring(4), torch.ones(4), 0.3, threshold=0), "`threshold`"),
        (lambda: feature_drop_probabilities(torch.ones(4, 2), torch.ones(3), 0.3), "`centrality`"),
        (lambda: edge_drop_probabilities(-ring(4), torch.ones(4), 0.3), "`edge_index`"),
        (lambda: EdgeDrop(True), "`p`"),
        (lambda: EdgeDrop(0.3)(None, ring(4).t()), "`edge_index`"),
        (lambda: EdgeDrop(0.3)(None, ring(4).float()), "`edge_index`"),
        (lambda: EdgeDrop(0.3)(None, ring(4), torch.ones(3)), "`edge_weight`"),
        (lambda: FeatureMask(0.3)(torch.ones(4, 2), ring(4), torch.ones(3)), "`edge_weight`"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(build, name):
    with pytest.raises(ValueError, match=name):
        build()


# ------------------------------------------------------------- sparse CSR features


def _csr_parts(x):
    return x.crow_indices(), x.col_indices(), x.values()


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support")
@pytest.mark.parametrize("mask", ["uniform", "weighted"])
def test_csr_feature_masks_draw_the_dense_masks(mask):
    x = sparse_features(40, 30, density=0.2) * torch.rand(40, 30)
    prob = torch.linspace(0.0, 0.9, 30)

    def apply(features):
        torch.manual_seed(3)
        if mask == "uniform":
            return mask_feature_csr(features, 0.4)
        return mask_feature_weighted(features, prob)

    (dense, dense_mask), (sparse, sparse_mask) = apply(x), apply(x.to_sparse_csr())
    assert sparse.layout == torch.sparse_csr
    assert 0 < int((dense != 0).sum()) < int((x != 0).sum())  # some columns masked
    # exactly what converting the masked dense matrix gives (no stored zeros)
    for a, b in zip(_csr_parts(sparse), _csr_parts(dense.to_sparse_csr())):
        assert torch.equal(a, b)
    assert torch.equal(sparse_mask, dense_mask) and sparse_mask.shape == (1, 30)
    if mask == "uniform":  # and the dense result is PyG's
        torch.manual_seed(3)
        assert torch.equal(dense, pyg_mask_feature(x, 0.4)[0])
    for no_op in (
        mask_feature_csr(x.to_sparse_csr(), 0.4, training=False),
        mask_feature_csr(x.to_sparse_csr(), 0.0),
        mask_feature_weighted(x.to_sparse_csr(), prob, training=False),
    ):
        assert no_op[0].layout == torch.sparse_csr
        assert no_op[1].shape == (1, 30) and bool(no_op[1].all())


def test_csr_feature_probabilities_equal_dense_ones():
    edge_index = random_graph()
    c = node_centrality(edge_index, 60, "evc")
    x = sparse_features(60, 20, density=0.3) * torch.rand(60, 20)
    for dense in (False, True, None):
        torch.testing.assert_close(
            feature_drop_probabilities(x.to_sparse_csr(), c, 0.3, dense=dense),
            feature_drop_probabilities(x, c, 0.3, dense=dense),
        )


def test_adaptive_feature_mask_prepared_once_masks_dense_and_csr_features_alike(monkeypatch):
    import pyg_progcl.augment.adaptive as augment

    edge_index = random_graph()
    x = sparse_features(60, 20, density=0.3)
    fits = []
    original = augment.feature_drop_probabilities
    monkeypatch.setattr(
        augment, "feature_drop_probabilities", lambda *a, **k: fits.append(1) or original(*a, **k)
    )
    aug = AdaptiveFeatureMask(0.3)
    torch.manual_seed(0)
    dense = aug(x, edge_index)[0]
    for _ in range(2):
        torch.manual_seed(0)
        assert torch.equal(aug(x.to_sparse_csr(), edge_index)[0].to_dense(), dense)
    assert len(fits) == 1


@pytest.mark.filterwarnings("ignore:Sparse (CSR tensor support|invariant checks)")
@pytest.mark.parametrize(
    "make",
    [
        lambda: EdgeDrop(0.9),
        lambda: AdaptiveEdgeDrop(0.9),
        lambda: AdaptiveFeatureMask(0.3, "degree"),
    ],
)
def test_edge_augmenters_refuse_a_graph_stored_as_adj_t(make):
    # After T.ToSparseTensor the edges live in adj_t: dropping nothing would be silent.
    data = T.ToSparseTensor()(Data(x=sparse_features(8, 4, density=0.5), edge_index=ring(8)))
    with pytest.raises(ValueError, match="adj_t"):
        make()(data)
    assert FeatureMask(0.3)(data).adj_t is data.adj_t  # features alone need no edges


def test_feature_probabilities_of_half_precision_features_equal_float32_ones():
    # Column weights sum centralities over nodes: in float16 they overflow (65504).
    edge_index = random_graph(400, 0.25)
    x = sparse_features(400, 30, density=0.5)
    c = node_centrality(edge_index, 400, "degree")
    expected = feature_drop_probabilities(x, c, 0.3)
    assert float(expected.max() - expected.min()) > 0.1
    for dtype in (torch.float16, torch.bfloat16):
        torch.testing.assert_close(feature_drop_probabilities(x.to(dtype), c, 0.3), expected)


def test_inactive_augmenters_pass_any_graph_through():
    # In eval mode (or with p = 0) nothing is read: a sparse adjacency passes unchanged.
    adj = torch.sparse_coo_tensor(ring(4), torch.ones(8), (4, 4), check_invariants=True)
    for aug in (EdgeDrop(0.5).eval(), AdaptiveEdgeDrop(0.5).eval(), EdgeDrop(0.0)):
        assert aug(None, adj)[1] is adj
