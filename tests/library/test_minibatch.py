"""Mini-batch training on sampled subgraphs and batched inference (docs/algorithms.md §9)."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import SAGEConv

import pyg_progcl.minibatch as mb
from pyg_progcl import (
    AdaptiveEdgeDrop,
    AdaptiveFeatureMask,
    EdgeDrop,
    FeatureMask,
    GCNEncoder,
    GRACEModel,
    InfoNCELoss,
    MLPEncoder,
    ProGCLLoss,
)
from pyg_progcl.augment import ComposeAugmenters, edge_drop_probabilities, node_centrality
from pyg_progcl.datasets import synthetic_graph
from pyg_progcl.evaluation import evaluate
from pyg_progcl.minibatch import (
    NeighborSubgraphLoader,
    SubgraphAugmenter,
    embed_minibatch,
    minibatch_epoch,
    neighbor_loader,
)

#: Whether PyG's NeighborLoader can sample here (pyg-lib or torch-sparse installed).
PYG_CAN_SAMPLE = mb.pyg_can_sample()
NO_PYG_SAMPLER = (
    "PyG's NeighborLoader needs pyg-lib or torch-sparse "
    "(./scripts/setup.sh --dev --with-sparse builds torch-sparse)"
)
#: PyG warns about every NeighborLoader without pyg-lib (torch-sparse's sampler).
pytestmark = pytest.mark.filterwarnings("ignore:Using 'NeighborSampler' without:UserWarning")


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(num_nodes=600, seed=1)


@pytest.fixture(params=["torch", pytest.param("pyg", marks=pytest.mark.sparse)])
def backend(request, monkeypatch):
    """The sampler ``neighbor_loader(backend="auto")`` picks, everywhere: the plain-torch
    one or PyG's ``NeighborLoader`` (skipped where PyG cannot sample)."""
    if request.param == "pyg" and not PYG_CAN_SAMPLE:
        pytest.skip(NO_PYG_SAMPLER)
    monkeypatch.setattr(mb.sampling, "default_backend", lambda: request.param)
    return request.param


def make_model(data, hidden=32, augment=True, **encoder_kwargs):
    aug1 = [EdgeDrop(0.2), FeatureMask(0.3)] if augment else None
    aug2 = [EdgeDrop(0.4), FeatureMask(0.4)] if augment else None
    encoder = GCNEncoder(data.num_features, hidden, **encoder_kwargs)
    return GRACEModel(encoder, hidden, hidden, augment1=aug1, augment2=aug2)


# ----------------------------------------------------------------------------- sampling


def test_fallback_batches_are_sampled_subgraphs(graph):
    torch.manual_seed(0)
    loader = NeighborSubgraphLoader(graph, [4, 3], batch_size=50, shuffle=True)
    edges = set(map(tuple, graph.edge_index.t().tolist()))
    seen = []
    for batch in loader:
        seeds = batch.batch_size
        assert torch.equal(batch.n_id[:seeds], batch.input_id)
        assert batch.n_id.unique().numel() == batch.num_nodes  # relabelled, no duplicates
        glob = batch.n_id[batch.edge_index]
        assert all(tuple(e) in edges for e in glob.t().tolist())  # real edges, source -> target
        assert torch.equal(graph.edge_index[:, batch.e_id], glob)  # e_id = global edge ids
        assert torch.equal(batch.x, graph.x[batch.n_id])
        fan_in = torch.bincount(batch.edge_index[1], minlength=batch.num_nodes)
        assert int(fan_in[:seeds].max()) <= 4  # hop 1: at most 4 in-neighbours per seed
        assert int(fan_in[seeds:].max()) <= 3  # hop 2
        seen.append(batch.input_id)
    assert len(seen) == len(loader) == 12
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(graph.num_nodes))


def test_fallback_with_all_neighbours_takes_every_in_edge(graph):
    loader = NeighborSubgraphLoader(graph, [-1], batch_size=64)
    batch = next(iter(loader))
    degree = torch.bincount(graph.edge_index[1], minlength=graph.num_nodes)
    fan_in = torch.bincount(batch.edge_index[1], minlength=batch.num_nodes)
    assert torch.equal(fan_in[:64], degree[:64])


@pytest.mark.parametrize("pyg_lib, torch_sparse", [(True, False), (True, True), (False, True)])
def test_auto_takes_pyg_sampler_only_with_pyg_lib(graph, monkeypatch, pyg_lib, torch_sparse):
    # torch-sparse alone samples more slowly than the plain-torch sampler: "auto" skips it.
    import torch_geometric.typing as pyg_typing
    from torch_geometric.loader import NeighborLoader

    monkeypatch.setattr(pyg_typing, "WITH_PYG_LIB", pyg_lib)
    monkeypatch.setattr(pyg_typing, "WITH_TORCH_SPARSE", torch_sparse)
    assert mb.pyg_can_sample()
    assert mb.default_backend() == ("pyg" if pyg_lib else "torch")
    expected = NeighborLoader if pyg_lib else NeighborSubgraphLoader
    assert isinstance(neighbor_loader(graph, [5, 5], 32), expected)
    assert isinstance(neighbor_loader(graph, [5, 5], 32, backend="pyg"), NeighborLoader)
    assert isinstance(neighbor_loader(graph, [5], 32, backend="torch"), NeighborSubgraphLoader)


def test_auto_takes_the_plain_torch_sampler_where_pyg_cannot_sample(graph, monkeypatch):
    import torch_geometric.typing as pyg_typing

    monkeypatch.setattr(pyg_typing, "WITH_PYG_LIB", False)
    monkeypatch.setattr(pyg_typing, "WITH_TORCH_SPARSE", False)
    assert not mb.pyg_can_sample() and mb.default_backend() == "torch"
    assert isinstance(neighbor_loader(graph, [5, 5], 32), NeighborSubgraphLoader)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_neighbors": []}, "num_neighbors"),
        ({"num_neighbors": 10}, "num_neighbors"),
        ({"num_neighbors": [10, 0]}, "num_neighbors"),
        ({"num_neighbors": [-2]}, "num_neighbors"),
        ({"batch_size": 0}, "batch_size"),
        ({"backend": "dgl"}, "backend"),
        ({"input_nodes": torch.tensor([0, 1, 1, 2])}, "repeat"),  # node 1 scored twice
        ({"input_nodes": torch.tensor([-1, 3])}, "input_nodes"),
        ({"input_nodes": torch.tensor([599, 600])}, "input_nodes"),
        ({"input_nodes": torch.tensor([0.0, 1.0])}, "input_nodes"),
        ({"input_nodes": [1, 2, 3]}, "input_nodes"),
        ({"input_nodes": torch.ones(150, dtype=torch.bool)}, "input_nodes"),
    ],
)
@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_bad_loader_arguments_raise(graph, kwargs, match, backend):
    args = {"num_neighbors": [5], "batch_size": 8, "backend": backend, **kwargs}
    with pytest.raises(ValueError, match=match):
        neighbor_loader(graph, **args)


def test_seed_candidates_as_ids_or_mask(graph):
    mask = torch.zeros(graph.num_nodes, dtype=torch.bool)
    mask[[5, 9, 40]] = True
    for nodes in (mask, torch.tensor([5, 9, 40]), torch.tensor([5, 9, 40], dtype=torch.int32)):
        batch = next(iter(NeighborSubgraphLoader(graph, [3], batch_size=8, input_nodes=nodes)))
        assert batch.n_id[:3].tolist() == [5, 9, 40] and batch.input_id.tolist() == [0, 1, 2]


def test_both_backends_yield_the_same_batch_contract(graph, backend):
    from torch_geometric.loader import NeighborLoader

    torch.manual_seed(0)
    seeds = torch.randperm(graph.num_nodes)[:130]
    loader = neighbor_loader(graph, [4, 3], 50, shuffle=False, input_nodes=seeds)
    assert isinstance(loader, NeighborLoader if backend == "pyg" else NeighborSubgraphLoader)
    edges = set(map(tuple, graph.edge_index.t().tolist()))
    batches = list(loader)
    assert [b.batch_size for b in batches] == [50, 50, 30] and len(loader) == 3
    for i, b in enumerate(batches):
        positions = torch.arange(50 * i, min(50 * (i + 1), 130))
        assert {"x", "y", "edge_index", "n_id", "e_id", "input_id", "batch_size"} <= set(b.keys())
        assert all(b[k].dtype == torch.long for k in ("edge_index", "n_id", "e_id", "input_id"))
        assert b.x.dtype == graph.x.dtype and b.y.dtype == graph.y.dtype
        assert type(b.batch_size) is int and b.num_nodes == b.n_id.numel()
        assert torch.equal(b.input_id, positions)  # positions in input_nodes, in order
        assert torch.equal(b.n_id[: b.batch_size], seeds[positions])  # the seeds first
        assert b.n_id.unique().numel() == b.num_nodes
        assert int(b.edge_index.min()) >= 0 and int(b.edge_index.max()) < b.num_nodes
        glob = b.n_id[b.edge_index]
        assert all(tuple(e) in edges for e in glob.t().tolist())  # source -> target
        assert torch.equal(graph.edge_index[:, b.e_id], glob)
        assert torch.equal(b.x, graph.x[b.n_id]) and torch.equal(b.y, graph.y[b.n_id])
        fan_in = torch.bincount(b.edge_index[1], minlength=b.num_nodes)
        assert int(fan_in[: b.batch_size].max()) <= 4 and int(fan_in[b.batch_size :].max()) <= 3
        hop1 = b.edge_index[:, b.edge_index[1] < b.batch_size]
        degree = torch.bincount(graph.edge_index[1], minlength=graph.num_nodes)
        expected = degree[b.n_id[: b.batch_size]].clamp(max=4)
        assert torch.equal(fan_in[: b.batch_size], expected) and hop1.size(1) == int(expected.sum())


# ----------------------------------------------------------------------------- inference


@pytest.mark.parametrize(
    "encoder_kwargs",
    [{}, {"conv": SAGEConv}, {"num_layers": 3, "activation": "prelu"}],
    ids=["gcn", "sage", "gcn-3-layers"],
)
def test_embed_minibatch_is_exact(graph, encoder_kwargs):
    torch.manual_seed(0)
    model = make_model(graph, **encoder_kwargs)
    z = embed_minibatch(model, graph, batch_size=128)
    model.eval()
    full = model(graph.x, graph.edge_index)
    assert z.shape == (graph.num_nodes, 32)
    torch.testing.assert_close(z, full, rtol=1e-5, atol=1e-6)
    model.train()
    embed_minibatch(model, graph, 200)
    assert model.training


def test_embed_minibatch_is_exact_for_improved_gcn_and_multi_hop_convs(graph):
    # GCNConv(improved=True): self-loops of weight 2 on every path (the CSR forward, the
    # edge list, the layer-wise inference); TAGConv reaches K = 3 hops per layer.
    from torch_geometric.nn import TAGConv

    loops = torch.arange(0, graph.num_nodes, 7)
    messy = graph.clone()  # self-loops: the encoder keeps the edge list
    messy.edge_index = torch.cat([graph.edge_index, torch.stack([loops, loops])], 1)
    for kwargs in ({"conv_kwargs": {"improved": True}}, {"conv": TAGConv}):
        for data in (graph, messy):
            torch.manual_seed(0)
            model = make_model(graph, hidden=16, augment=False, **kwargs).eval()
            full = model(data.x, data.edge_index)
            z = embed_minibatch(model, data, batch_size=100)
            torch.testing.assert_close(z, full, rtol=1e-5, atol=1e-6)


def test_improved_gcn_paths_equal_the_dense_formula():
    # Â = A + 2I, D̂ its degrees: H = D̂^-1/2 Â D̂^-1/2 X W (a 3-node path, one layer).
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    x = torch.tensor([[1.0], [2.0], [3.0]])
    a_hat = torch.zeros(3, 3)
    a_hat[edge_index[1], edge_index[0]] = 1.0
    a_hat += 2 * torch.eye(3)
    d = a_hat.sum(1).rsqrt()
    for sparse in (True, False):
        enc = GCNEncoder(1, 1, num_layers=1, activation="identity", sparse=sparse,
                         conv_kwargs={"improved": True})  # fmt: skip
        conv = enc.layers[0]
        torch.nn.init.ones_(conv.lin.weight)
        torch.nn.init.zeros_(conv.bias)
        expected = d[:, None] * a_hat * d[None, :] @ x
        torch.testing.assert_close(enc(x, edge_index), expected)


def test_embed_minibatch_needs_features_of_the_encoders_width(graph):
    model = make_model(graph, hidden=16, augment=False)
    with pytest.raises(ValueError, match="in_channels"):
        embed_minibatch(model, graph.clone().update({"x": graph.x[:, :7]}), 100)
    no_x = graph.clone()
    del no_x.x
    with pytest.raises(ValueError, match="`x`"):
        embed_minibatch(model, no_x, 100)


def test_embed_minibatch_mlp_and_generic_encoders(graph, backend):
    torch.manual_seed(0)
    mlp = GRACEModel(MLPEncoder(graph.num_features, 16), 16, 16).eval()
    torch.testing.assert_close(embed_minibatch(mlp, graph, 100), mlp(graph.x, graph.edge_index))

    class Wrapped(torch.nn.Module):  # unknown to the layer-wise path: full L+1 hops
        def __init__(self):
            super().__init__()
            self.inner = GCNEncoder(graph.num_features, 16)
            self.num_layers = 2

        def forward(self, x, edge_index):
            return self.inner(x, edge_index)

    model = GRACEModel(Wrapped(), 16, 16).eval()
    z = embed_minibatch(model, graph, 100)
    torch.testing.assert_close(z, model(graph.x, graph.edge_index), rtol=1e-5, atol=1e-6)
    # L hops are not enough for GCN: the outermost nodes' degrees would be wrong.
    short = embed_minibatch(model, graph, 100, num_neighbors=[-1, -1])
    assert not torch.allclose(short, z, atol=1e-4)


# ----------------------------------------------------------------------------- augmentation


def test_adaptive_augmenters_use_the_full_graphs_probabilities(graph):
    torch.manual_seed(0)
    edge_drop = AdaptiveEdgeDrop(0.4, "degree")
    feature_mask = AdaptiveFeatureMask(0.3, "degree")
    augment = SubgraphAugmenter(ComposeAugmenters(edge_drop, feature_mask), graph)
    centrality = node_centrality(graph.edge_index, graph.num_nodes, "degree")
    full_prob = edge_drop_probabilities(graph.edge_index, centrality, 0.4)
    prepared = edge_drop.node_drop_prob  # prepared on the full graph
    batch = next(iter(NeighborSubgraphLoader(graph, [5, 5], 64)))
    table = augment.node_drop_prob[0]
    # An edge's probability depends on its target only: the table reproduces the full graph's.
    assert torch.equal(table[batch.n_id[batch.edge_index[1]]], full_prob[batch.e_id])
    x, edge_index, _ = augment(batch.x, batch.edge_index, batch.n_id)
    assert edge_drop.node_drop_prob is prepared  # not prepared again on the subgraph
    assert edge_index.size(1) < batch.edge_index.size(1)
    dropped_cols = (x == 0).all(0) & (batch.x != 0).any(0)
    assert dropped_cols.any()


def test_without_n_id_adaptive_members_fit_the_unaugmented_subgraph(graph):
    # A loader that records no n_id: the feature mask is fitted on the subgraph as it came,
    # not on what the edge drop before it left (as ComposeAugmenters does on the full graph).
    batch = next(iter(NeighborSubgraphLoader(graph, [5, 5], 64)))
    expected = AdaptiveFeatureMask(0.3, "degree").prepare(batch.x, batch.edge_index).drop_prob
    feature_mask = AdaptiveFeatureMask(0.3, "degree")
    augment = SubgraphAugmenter(
        ComposeAugmenters(AdaptiveEdgeDrop(0.7, "degree"), feature_mask), graph
    )
    feature_mask.reset_parameters()  # forget the full graph's fit
    augment(batch.x, batch.edge_index)
    torch.testing.assert_close(feature_mask.drop_prob, expected)


# ----------------------------------------------------------------------------- training


def _train(graph, loss_fn, epochs, warmup=0, batch_size=150, seed=0):
    torch.manual_seed(seed)
    model = make_model(graph)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = neighbor_loader(graph, [10, 10], batch_size)
    losses = [
        minibatch_epoch(model, loss_fn, loader, optimizer, fit=epoch > warmup)
        for epoch in range(1, epochs + 1)
    ]
    return model, losses


def test_minibatch_training_learns(graph, backend):
    torch.manual_seed(0)
    before = evaluate(embed_minibatch(make_model(graph), graph, 300), graph, probe_epochs=200)
    model, losses = _train(graph, InfoNCELoss(0.5), epochs=12)
    z = embed_minibatch(model, graph, 300)
    after = evaluate(z, graph, probe_epochs=200)
    assert z.shape == (graph.num_nodes, 32)
    assert losses[-1] < losses[0] - 0.2
    assert after["accuracy"] > max(0.5, before["accuracy"])  # chance is 0.2


def test_minibatch_progcl_refits_once_per_epoch_after_warmup(graph, backend, monkeypatch):
    loss_fn = ProGCLLoss(0.5, num_samples=2000)
    sizes = []
    fit = loss_fn.fit
    monkeypatch.setattr(loss_fn, "fit", lambda h1, h2: sizes.append(h1.size(0)) or fit(h1, h2))
    _, losses = _train(graph, loss_fn, epochs=5, warmup=2)
    assert loss_fn.fitted
    assert sizes == [150, 150, 150]  # epochs 3, 4, 5; on one batch of seeds each
    assert all(torch.isfinite(torch.tensor(losses)))


def test_minibatch_refuses_the_frozen_schedule(graph):
    # Frozen weights belong to the nodes of the fit; every batch holds other nodes.
    with pytest.raises(ValueError, match="frozen"):
        _train(graph, ProGCLLoss(0.5, schedule="frozen"), epochs=1)


def test_minibatch_with_sampled_negatives_skips_too_small_batches(graph):
    loss_fn = InfoNCELoss(0.5, num_negatives=100)
    torch.manual_seed(0)
    model = make_model(graph)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    seen = []
    loader = neighbor_loader(graph, [5], 250)  # 250, 250, 100 seeds: the last is skipped

    def wrapped(h1, h2):
        seen.append(h1.size(0))
        return loss_fn(h1, h2)

    wrapped.num_negatives = 100
    value = minibatch_epoch(model, wrapped, loader, optimizer)
    assert seen == [250, 250] and value > 0
    with pytest.raises(ValueError, match="batch_size"):
        minibatch_epoch(model, wrapped, neighbor_loader(graph, [5], 100), optimizer)


# ----------------------------------------------------------------------------- trainer


def test_embed_minibatch_applies_gcns_linear_map_once_per_layer(graph):
    # x @ W runs once over all nodes (in row chunks), not again for every batch's
    # in-neighbours; exact with sparse features and GCNConv's options.
    sparse_x = graph.clone()
    sparse_x.x = graph.x * (torch.rand_like(graph.x) < 0.05)  # CSR in the first layer
    options = [{}, {"add_self_loops": False}, {"normalize": False}, {"improved": True}]
    calls = []
    for data, conv_kwargs in [(sparse_x, {})] + [(graph, kw) for kw in options]:
        torch.manual_seed(0)
        model = make_model(graph, hidden=16, augment=False, conv_kwargs=conv_kwargs).eval()
        full = model(data.x, data.edge_index)
        for conv in model.encoder.layers:
            conv.lin.register_forward_hook(lambda m, i, o: calls.append(o.size(0)))
        z = embed_minibatch(model, data, batch_size=100)
        torch.testing.assert_close(z, full, rtol=1e-5, atol=1e-6)
        assert sum(calls) == data.num_nodes * len(model.encoder.layers)
        calls.clear()


def test_embed_minibatch_sums_messages_in_chunks_exactly(graph):
    # A batch's messages are summed a few edges at a time (here 16 values: one edge of 16
    # features per chunk), with and without edge weights, and still exact.
    weighted = graph.clone()
    weighted.edge_weight = torch.rand(graph.num_edges)
    for data in (graph, weighted):
        torch.manual_seed(0)
        model = make_model(graph, hidden=8, augment=False).eval()
        full = model(data.x, data.edge_index, data.get("edge_weight"))
        z = embed_minibatch(model, data, 250, message_chunk=16)
        torch.testing.assert_close(z, full, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="`message_chunk`"):
        embed_minibatch(model, graph, 250, message_chunk=0)


_PEAK_SCRIPT = """
import resource, sys, torch
from torch_geometric.data import Data
from pyg_progcl import GCNEncoder
from pyg_progcl.minibatch import embed_minibatch
torch.set_num_threads(1)
torch.manual_seed(0)
n, e = 20_000, 400_000
data = Data(x=torch.randn(n, 64), edge_index=torch.randint(0, n, (2, e)))
encoder = GCNEncoder(64, 256, num_layers=2).eval()
embed_minibatch(encoder, Data(x=data.x[:100], edge_index=data.edge_index[:, :100] % 100), 50)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
embed_minibatch(encoder, data, batch_size=10_000)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(__import__("resource"), "getrusage"), reason="needs getrusage")
def test_embed_minibatch_peak_stays_below_a_batchs_messages():
    # Half the graph's targets per batch hold ~200,000 in-edges: their 512-wide messages
    # at once are ~410 MB, twice that with GCN's weights (the peak grew by 950 MB); in
    # chunks it grows by ~190 MB. Measured in a fresh process (peak RSS is a high mark).
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT], capture_output=True, text=True, check=True
    )
    assert float(out.stdout.split()[-1]) < 400, out.stdout
