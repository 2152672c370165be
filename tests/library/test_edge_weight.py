"""A graph file is used as written: its ``edge_weight`` reaches every encoder that takes
edge weights, in full-graph and mini-batch training, the probe and ``embed`` (full graph
and layer by layer alike); encoders that cannot use a field say so once; malformed
weights are one clear error. Also the small io messages: compiled models, files that are
not model files, a graph file's preset."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.nn import GraphConv, SAGEConv
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

from pyg_progcl import EdgeDrop, GCNEncoder, GRACEModel, MLPEncoder
from pyg_progcl.augment import AdaptiveEdgeDrop, ComposeAugmenters, FeatureMask
from pyg_progcl.io import (
    GraphFieldWarning,
    embed,
    graph_for_model,
    load_model,
    read_graph,
    save_model,
)
from pyg_progcl.minibatch import SubgraphAugmenter, embed_minibatch, neighbor_loader

TINY = ["--epochs", "3", "--hidden", "16", "--proj", "16", "--probe-epochs", "20"]
TINY += ["--threads", "1"]


def weighted_graph(n=120, f=10, classes=3, seed=0, self_loops=False) -> Data:
    """An undirected graph (both directions of each edge carry one weight) whose features
    carry the class; ``self_loops`` adds repeated edges and self-loops (the encoders'
    edge-list path instead of the sparse adjacency)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, f, generator=g)
    x[torch.arange(n), y] += 2.0
    edges = torch.randint(0, n, (2, 3 * n), generator=g)
    if self_loops:
        edge_index = torch.cat([edges, edges[:, :20], torch.arange(10).repeat(2, 1)], dim=1)
        weight = 0.2 + 3 * torch.rand(edge_index.size(1), generator=g)
    else:
        edges, _ = remove_self_loops(coalesce(edges, num_nodes=n))
        weight = 0.2 + 3 * torch.rand(edges.size(1), generator=g)
        edge_index, weight = to_undirected(edges, weight, num_nodes=n, reduce="max")
    return Data(x=x, edge_index=edge_index, edge_weight=weight, y=y)


def without_weights(data: Data) -> Data:
    data = copy.copy(data)
    del data.edge_weight
    return data


def with_weights(data: Data, weight: torch.Tensor) -> Data:
    data = copy.copy(data)
    data.edge_weight = weight
    return data


def write_npz(path, data: Data, **override):
    arrays = {k: v.numpy() for k, v in data.items() if isinstance(v, torch.Tensor)}
    arrays.update(override)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


# ----------------------------------------------------------------------------- graph files


@pytest.mark.parametrize("suffix", [".pt", ".npz"])
def test_read_graph_keeps_the_edge_weights(tmp_path, suffix):
    data = weighted_graph()
    path = tmp_path / f"g{suffix}"
    if suffix == ".pt":
        torch.save(with_weights(data, data.edge_weight.double()), path)
    else:
        write_npz(path, data, edge_weight=data.edge_weight.double().numpy())
    got = read_graph(path)
    assert got.edge_weight.dtype == torch.float32
    assert torch.equal(got.edge_weight, data.edge_weight)
    ints = write_npz(tmp_path / "ints.npz", data, edge_weight=np.arange(data.num_edges))
    assert torch.equal(read_graph(ints).edge_weight, torch.arange(data.num_edges).float())


def test_malformed_edge_weights_are_one_clear_error(tmp_path):
    data = weighted_graph(n=30)
    e = data.num_edges
    w = data.edge_weight.numpy()
    cases = {
        "nan": (np.where(np.arange(e) == 3, np.nan, w), "`edge_weight` has 1 NaN or infinite"),
        "inf": (np.where(np.arange(e) == 3, np.inf, w), "NaN or infinite"),
        "negative": (-w, "negative"),
        "length": (w[:-1], f"one weight per edge, shape [{e}]"),
        "2-d": (w.reshape(-1, 1), f"one weight per edge, shape [{e}]"),
        "bool": (w > 1, "real numbers"),
    }
    for name, (weight, message) in cases.items():
        for path in (write_npz(tmp_path / f"{name}.npz", data, edge_weight=weight),
                     tmp_path / f"{name}.pt"):  # fmt: skip
            if path.suffix == ".pt":
                torch.save(with_weights(data, torch.from_numpy(np.ascontiguousarray(weight))), path)
            with pytest.raises(ValueError) as info:
                read_graph(path)
            text = str(info.value)
            assert message in text and path.name in text and "\n" not in text, (name, text)


# ----------------------------------------------------------------------------- training


def test_edge_attr_is_said_to_be_unused():
    data = weighted_graph()
    data.edge_attr = torch.rand(data.num_edges, 3)
    with pytest.warns(GraphFieldWarning, match="`edge_attr` is not used") as caught:
        assert graph_for_model(GRACEModel(GCNEncoder(10, 8), 8, 8), data) is data
    assert len([w for w in caught if issubclass(w.category, GraphFieldWarning)]) == 1
    assert "\n" not in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say about a plain weighted graph
        assert graph_for_model(GRACEModel(GCNEncoder(10, 8), 8, 8), weighted_graph()) is not None


def test_an_mlp_encoder_given_weights_says_that_it_ignores_them():
    data = weighted_graph()
    encoder, other = MLPEncoder(10, 8), MLPEncoder(10, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own: once per calling line
        for _ in range(3):
            z = encoder(data.x, data.edge_index, data.edge_weight)
        other(data.x, data.edge_index, data.edge_weight)
    said = [w for w in caught if "MLPEncoder ignores `edge_weight`" in str(w.message)]
    assert len(said) == 2 and {w.filename for w in said} == {__file__}
    torch.testing.assert_close(z, encoder(data.x, data.edge_index))


# ----------------------------------------------------------------------------- embed


def _models():
    yield "gcn", GRACEModel(GCNEncoder(10, 8, num_layers=3), 8, 8)
    yield "gcn-improved", GRACEModel(GCNEncoder(10, 8, conv_kwargs={"improved": True}), 8, 8)
    yield "gcn-unnormalised", GRACEModel(GCNEncoder(10, 8, conv_kwargs={"normalize": False}), 8, 8)
    yield "graphconv", GRACEModel(GCNEncoder(10, 8, conv=GraphConv), 8, 8)


@pytest.mark.parametrize("self_loops", [False, True], ids=["simple", "self-loops"])
@pytest.mark.parametrize("index", range(4), ids=[name for name, _ in _models()])
def test_embed_full_and_batched_agree_with_weights(index, self_loops):
    _, model = list(_models())[index]
    data = weighted_graph(self_loops=self_loops)
    with torch.no_grad():
        expected = model.eval()(data.x, data.edge_index, data.edge_weight)
        unweighted = model(data.x, data.edge_index)
    assert not torch.allclose(expected, unweighted, atol=1e-3)
    full = embed(model, data)
    torch.testing.assert_close(full, expected)
    for batched in (
        embed(model, data, batch_size=17),  # layer by layer
        embed_minibatch(model, data, 17, [-1] * (model.encoder.num_layers + 1)),  # sampled, all
    ):
        torch.testing.assert_close(batched, full, atol=1e-5, rtol=1e-5)


def test_embed_with_a_conv_without_edge_weights_says_so_and_ignores_them():
    model = GRACEModel(GCNEncoder(10, 8, conv=SAGEConv), 8, 8)
    data = weighted_graph()
    with pytest.warns(GraphFieldWarning, match="GCNEncoder with SAGEConv takes no edge weights"):
        full = embed(model, data)
    torch.testing.assert_close(full, embed(model, without_weights(data)))
    torch.testing.assert_close(embed(model, data, batch_size=17), full, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="SAGEConv does not accept edge weights"):
        embed_minibatch(model, data, 17)  # as model(x, edge_index, edge_weight) refuses


# ----------------------------------------------------------------------------- command line


# ----------------------------------------------------------------------------- edge drop


def test_edge_drop_keeps_the_surviving_edges_weights():
    data = weighted_graph()
    code = torch.arange(1, data.num_edges + 1, dtype=torch.float)  # weight = edge id + 1
    torch.manual_seed(0)
    _, kept, weight = EdgeDrop(0.5)(data.x, data.edge_index, code)
    assert 0 < kept.size(1) < data.num_edges
    assert torch.equal(data.edge_index[:, weight.long() - 1], kept)


@pytest.mark.parametrize("backend", ["torch", "pyg"])
def test_sampled_batches_and_their_edge_drop_keep_the_weights(backend):
    from pyg_progcl.minibatch import pyg_can_sample

    if backend == "pyg" and not pyg_can_sample():
        pytest.skip("PyG's NeighborLoader needs pyg-lib or torch-sparse")
    data = weighted_graph()
    data.edge_weight = torch.arange(1, data.num_edges + 1, dtype=torch.float)  # edge id + 1
    loader = neighbor_loader(data, [5, 5], 32, backend=backend)
    batch = next(iter(loader))
    assert torch.equal(batch.edge_weight, data.edge_weight[batch.e_id])
    views = ComposeAugmenters(AdaptiveEdgeDrop(0.5, "degree"), EdgeDrop(0.3), FeatureMask(0.2))
    torch.manual_seed(0)
    _, kept, weight = SubgraphAugmenter(views, data)(
        batch.x, batch.edge_index, batch.n_id, batch.edge_weight
    )
    assert 0 < kept.size(1) < batch.edge_index.size(1)
    global_kept = batch.n_id[kept]  # the kept edges' global endpoints
    assert torch.equal(data.edge_index[:, weight.long() - 1], global_kept)


# ----------------------------------------------------------------------------- io messages


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")  # (torch)
def test_a_compiled_model_saves_as_the_model_it_wraps(tmp_path):
    model = GRACEModel(GCNEncoder(10, 8), 8, 8, [EdgeDrop(0.2)], [EdgeDrop(0.3)])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    data = weighted_graph()
    with torch.no_grad():
        expected = model.eval()(data.x, data.edge_index, data.edge_weight)
    plain = copy.deepcopy(model)
    in_place = copy.deepcopy(model)
    in_place.encoder.compile()  # (keeps the module's type)
    model.encoder = torch.compile(model.encoder)  # an OptimizedModule: saved unwrapped
    for saved in (model, torch.compile(plain), in_place):
        path = save_model(saved, tmp_path / "m.pt")
        payload = torch.load(path, weights_only=True)
        assert not any("_orig_mod" in key for key in payload["state_dict"])
        loaded = load_model(path)
        assert type(loaded.encoder) is GCNEncoder and repr(loaded) == repr(plain)
        with torch.no_grad():
            got = loaded(data.x, data.edge_index, data.edge_weight)
        torch.testing.assert_close(got, expected)


def test_a_file_that_is_not_a_model_says_so_in_one_line(tmp_path):
    np.save(tmp_path / "z.npy", np.ones((3, 2), np.float32))
    np.savez(tmp_path / "g.npz", x=np.ones((3, 2)))
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt")
    torch.save(weighted_graph(n=10), tmp_path / "graph.pt")
    expected = {
        "z.npy": "a NumPy .npy file",
        "g.npz": "a NumPy .npz file",
        "module.pt": "a pickled torch.nn.modules.linear.Linear",
        "graph.pt": "a pickled torch_geometric.data.data.Data",
    }
    for name, message in expected.items():
        with pytest.raises(ValueError) as info:
            load_model(tmp_path / name)
        text = str(info.value)
        assert text.startswith(f"model file {str(tmp_path / name)!r} is not a readable")
        assert message in text and "\n" not in text and "\x1b" not in text, text
        assert "weights_only" not in text, text
    with pytest.raises(ValueError) as info:
        read_graph(tmp_path / "module.pt")
    text = str(info.value)
    assert "a pickled torch.nn.modules.linear.Linear" in text and "weights_only" not in text
