"""Tests of pyg_progcl.encoders and pyg_progcl.model (docs/algorithms.md §1)."""

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data, HeteroData
from torch_geometric.nn import MLP, GATConv, GCNConv, SAGEConv
from torch_geometric.nn.models import GCN
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from pyg_progcl.augment import (
    AdaptiveEdgeDrop,
    AdaptiveFeatureMask,
    ComposeAugmenters,
    EdgeDrop,
    FeatureMask,
)
from pyg_progcl.encoders import RRELU_EVAL_SLOPE, GCNEncoder, MLPEncoder, make_activation
from pyg_progcl.model import GRACEModel


def graph(num_nodes=40, num_features=12, seed=0):
    torch.manual_seed(seed)
    edge_index = to_undirected(erdos_renyi_graph(num_nodes, 0.15))
    x = torch.randn(num_nodes, num_features)
    return x, edge_index


def widths(encoder):
    return [(layer.in_features, layer.out_features) for layer in encoder.layers]


# ------------------------------------------------------------------------ encoders


@pytest.mark.parametrize(
    "num_layers, expected",
    [(1, [(12, 8)]), (2, [(12, 16), (16, 8)]), (3, [(12, 16), (16, 16), (16, 8)])],
)
def test_layer_widths_follow_grace(num_layers, expected):
    x, edge_index = graph()
    gcn = GCNEncoder(12, 8, num_layers=num_layers)
    assert [(c.in_channels, c.out_channels) for c in gcn.layers] == expected
    assert widths(MLPEncoder(12, 8, num_layers=num_layers)) == expected
    assert gcn(x, edge_index).shape == (40, 8)
    assert (gcn.in_channels, gcn.hidden_channels, gcn.num_layers) == (12, 8, num_layers)


@pytest.mark.parametrize("encoder_cls", [GCNEncoder, MLPEncoder])
def test_activation_after_every_layer(encoder_cls):
    x, edge_index = graph()
    seen = []

    def act(t):
        seen.append(t.size(1))
        return torch.relu(t)

    out = encoder_cls(12, 8, num_layers=3, activation=act)(x, edge_index)
    assert seen == [16, 16, 8]
    assert (out >= 0).all() and (out == 0).any(), "the last layer is activated too"


def test_rrelu_is_fixed_leaky_relu_of_reference_slope():
    assert pytest.approx(0.2291667, abs=1e-6) == RRELU_EVAL_SLOPE
    act = make_activation("rrelu")
    x = torch.linspace(-3, 3, 13)
    act.train()
    torch.testing.assert_close(act(x), F.rrelu(x))  # functional rrelu: training=False
    torch.testing.assert_close(act(x), torch.where(x < 0, RRELU_EVAL_SLOPE * x, x))
    enc = GCNEncoder(12, 8, activation="rrelu")
    x, edge_index = graph()
    assert torch.equal(enc(x, edge_index), enc(x, edge_index)), "deterministic in train mode"


@pytest.mark.parametrize(
    "name", ["relu", "prelu", "rrelu", "elu", "leaky_relu", "tanh", "identity"]
)
def test_named_activations(name):
    x, edge_index = graph()
    enc = GCNEncoder(12, 8, activation=name)
    assert enc(x, edge_index).shape == (40, 8)
    assert f"activation={name})" in repr(enc)
    expected = {
        "relu": F.relu, "prelu": lambda t: torch.where(t < 0, 0.25 * t, t),  # initial slope
        "rrelu": lambda t: F.leaky_relu(t, RRELU_EVAL_SLOPE), "elu": F.elu,
        "leaky_relu": lambda t: F.leaky_relu(t, 0.01), "tanh": torch.tanh,
        "identity": lambda t: t,
    }[name]  # fmt: skip
    t = torch.linspace(-3, 3, 25)
    torch.testing.assert_close(make_activation(name)(t), expected(t))


def test_prelu_one_learnable_slope_per_layer_reset():
    enc = GCNEncoder(12, 8, num_layers=3, activation="prelu")
    slopes = [act.weight for act in enc.activations]
    assert len({id(w) for w in slopes}) == 3
    with torch.no_grad():
        for w in slopes:
            w.fill_(0.9)
    enc.reset_parameters()
    assert all(w.item() == 0.25 for w in slopes)
    shared = torch.nn.PReLU()
    enc = MLPEncoder(12, 8, activation=shared)  # instances are copied per layer
    assert enc.activations[0].weight is not enc.activations[1].weight


def test_mlp_encoder_is_pyg_mlp_with_an_activated_last_layer_and_own_activations():
    # For a parameter-free activation MLPEncoder is MLP(plain_last=False, norm=None): same
    # layers, initialisation order and outputs. PyG's MLP shares one activation module,
    # so with PReLU it has one slope where GRACE's encoder has one per layer.
    x = torch.randn(20, 12)
    torch.manual_seed(0)
    ours = MLPEncoder(12, 8, num_layers=3, sparse_features=False)
    torch.manual_seed(0)
    pyg = MLP([12, 16, 16, 8], act="relu", norm=None, plain_last=False)
    assert torch.equal(ours(x), pyg(x))
    slopes = MLPEncoder(12, 8, num_layers=3, activation="prelu").activations
    pyg_prelu = MLP([12, 16, 16, 8], act="prelu", norm=None, plain_last=False)
    assert len(list(slopes.parameters())) == 3
    assert sum(isinstance(m, torch.nn.PReLU) for m in pyg_prelu.modules()) == 1


def test_gcn_encoder_is_pyg_gcn_with_its_last_layer_activated():
    # PyG's GCN (BasicGNN) leaves the last layer plain; GRACE activates it.
    x, edge_index = graph()
    ours = GCNEncoder(12, 8, num_layers=3)
    pyg = GCN(12, 16, num_layers=3, out_channels=8)
    pyg.load_state_dict({k.replace("layers.", "convs."): v for k, v in ours.state_dict().items()})
    expected = pyg(x, edge_index)
    assert (expected < 0).any()
    torch.testing.assert_close(ours(x, edge_index), expected.relu())


def test_custom_conv_classes():
    x, edge_index = graph()
    sage = GCNEncoder(12, 8, conv=SAGEConv, conv_kwargs={"aggr": "max"})
    assert isinstance(sage.layers[0], SAGEConv) and sage.layers[0].aggr == "max"
    assert sage(x, edge_index).shape == (40, 8)
    gat = GCNEncoder(12, 8, conv=GATConv, conv_kwargs={"heads": 2, "concat": False})
    assert gat(x, edge_index).shape == (40, 8)
    assert "conv=SAGEConv" in repr(sage)


def test_edge_weight_reaches_gcn_and_is_refused_by_convs_without_it():
    x, edge_index = graph()
    enc = GCNEncoder(12, 8)
    weight = torch.rand(edge_index.size(1))
    assert not torch.allclose(enc(x, edge_index), enc(x, edge_index, weight))
    with pytest.raises(ValueError, match="edge weights"):
        GCNEncoder(12, 8, conv=SAGEConv)(x, edge_index, weight)


def test_mlp_ignores_edges_gcn_does_not():
    x, edge_index = graph()
    other = to_undirected(erdos_renyi_graph(40, 0.3))
    mlp = MLPEncoder(12, 8, conv=GCNConv)
    torch.testing.assert_close(mlp(x, edge_index), mlp(x, other))
    torch.testing.assert_close(mlp(x, edge_index), mlp(x))
    gcn = GCNEncoder(12, 8)
    assert not torch.allclose(gcn(x, edge_index), gcn(x, other))


@pytest.mark.parametrize("encoder_cls", [GCNEncoder, MLPEncoder])
def test_reset_parameters_deterministic_under_seed(encoder_cls):
    enc = encoder_cls(12, 8)
    torch.manual_seed(5)
    enc.reset_parameters()
    first = [p.detach().clone() for p in enc.parameters()]
    torch.manual_seed(5)
    enc.reset_parameters()
    assert all(torch.equal(a, b) for a, b in zip(first, enc.parameters()))
    torch.manual_seed(6)
    enc.reset_parameters()
    assert not all(torch.equal(a, b) for a, b in zip(first, enc.parameters()))


def test_encoder_reprs():
    assert repr(GCNEncoder(1433, 128)) == (
        "GCNEncoder(1433, 128, num_layers=2, conv=GCNConv, activation=relu)"
    )
    assert repr(MLPEncoder(1433, 128, 3, activation="prelu")) == (
        "MLPEncoder(1433, 128, num_layers=3, activation=prelu)"
    )
    assert "activation=tanh" in repr(GCNEncoder(4, 2, activation=torch.tanh))
    gat = GCNEncoder(4, 2, conv=GATConv, conv_kwargs={"heads": 2, "concat": False})
    assert "conv=GATConv, conv_kwargs={'heads': 2, 'concat': False}," in repr(gat)
    assert ", sparse_features=True," in repr(GCNEncoder(4, 2, sparse_features=True))
    assert "sparse" not in repr(GCNEncoder(4, 2))
    model = GRACEModel(GCNEncoder(4, 2), 2, 2, recompute_views=True)
    assert repr(model).endswith(", 2, 2, recompute_views=True)")


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"in_channels": 0}, "`in_channels`"),
        ({"hidden_channels": 0}, "`hidden_channels`"),
        ({"num_layers": 0}, "`num_layers`"),
        ({"num_layers": 1.5}, "`num_layers`"),
        ({"activation": "swish"}, "`activation`"),
        ({"activation": 3}, "`activation`"),
    ],
)
@pytest.mark.parametrize("encoder_cls", [GCNEncoder, MLPEncoder])
def test_encoder_bad_arguments(encoder_cls, kwargs, name):
    args = {"in_channels": 12, "hidden_channels": 8, **kwargs}
    with pytest.raises(ValueError, match=name):
        encoder_cls(**args)


def test_gcn_encoder_rejects_non_class_conv():
    with pytest.raises(ValueError, match="`conv`"):
        GCNEncoder(12, 8, conv=GCNConv(12, 8))


# ------------------------------------------------------------------------- model


def make_model(encoder_cls=GCNEncoder, **kwargs):
    encoder = encoder_cls(12, 8, num_layers=2, conv=GCNConv, activation="prelu")
    return GRACEModel(
        encoder,
        8,
        6,
        augment1=kwargs.get("augment1", [EdgeDrop(0.3), FeatureMask(0.3)]),
        augment2=kwargs.get("augment2", ComposeAugmenters(EdgeDrop(0.4), FeatureMask(0.2))),
    )


@pytest.mark.parametrize("encoder_cls", [GCNEncoder, MLPEncoder])
def test_views_shapes_and_encoder_swap(encoder_cls):
    x, edge_index = graph()
    model = make_model(encoder_cls)  # the swap is the class name only
    h1, h2 = model.views(x, edge_index)
    assert h1.shape == h2.shape == (40, 8)
    assert model(x, edge_index).shape == (40, 8)
    # A list of augmenters acts as their ComposeAugmenters.
    torch.manual_seed(4)
    listed = model.augment1(x, edge_index)
    torch.manual_seed(4)
    composed = ComposeAugmenters(EdgeDrop(0.3), FeatureMask(0.3))(x, edge_index)
    assert all(torch.equal(a, b) for a, b in zip(listed[:2], composed[:2]))


def test_projection_head_widths():
    model = make_model()
    first, act, last = model.projector
    assert (first.in_features, first.out_features) == (8, 6)
    assert isinstance(act, torch.nn.ELU)
    assert (last.in_features, last.out_features) == (6, 8)
    z = torch.randn(5, 8)
    torch.testing.assert_close(model.project(z), last(F.elu(first(z))))


def test_projector_is_any_module_or_none():
    x, edge_index = graph()
    head = torch.nn.Linear(8, 3)
    model = GRACEModel(GCNEncoder(12, 8), 8, projector=head)
    assert model.projector is head and model.proj_channels is None
    h1, h2 = model.views(x, edge_index)
    assert h1.shape == h2.shape == (x.size(0), 3)
    torch.testing.assert_close(model.project(model(x, edge_index)), head(model(x, edge_index)))
    bare = GRACEModel(GCNEncoder(12, 8), 8, projector=None)
    assert bare.projector is None and not any("projector" in k for k in bare.state_dict())
    torch.manual_seed(0)
    h1, _ = bare.views(x, edge_index)
    assert h1.shape == (x.size(0), 8)
    z = torch.randn(5, 8)
    assert bare.project(z) is z
    # The default head keeps its state-dict keys (the model files' contract).
    keys = [k for k in make_model().state_dict() if k.startswith("projector.")]
    assert keys == [
        "projector.0.weight",
        "projector.0.bias",
        "projector.2.weight",
        "projector.2.bias",
    ]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "`proj_channels` is required"),
        ({"proj_channels": 4, "projector": None}, "`proj_channels` sizes the default"),
        ({"projector": "mlp"}, "`projector` must be"),
        ({"projector": lambda z: z}, "`projector` must be"),
    ],
)
def test_bad_projector_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GRACEModel(GCNEncoder(12, 8), 8, **kwargs)


def test_reset_parameters_resets_a_custom_projector():
    head = torch.nn.Linear(8, 3)
    model = GRACEModel(GCNEncoder(12, 8), 8, projector=head)
    before = head.weight.detach().clone()
    torch.manual_seed(1)
    model.reset_parameters()
    assert not torch.equal(before, head.weight)


def test_views_are_augmented_in_eval_mode_too():
    # views() always draws its augmentations; eval mode changes only the encoder's mode.
    x, edge_index = graph()
    model = make_model()
    torch.manual_seed(0)
    train_views = model.views(x, edge_index)
    assert not torch.allclose(*train_views)
    model.eval()
    torch.manual_seed(0)
    eval_views = model.views(x, edge_index)
    for got, expected in zip(eval_views, train_views):
        torch.testing.assert_close(got, expected)  # the same draws as in training mode
    assert not any(m.training for m in model.modules())  # the modes are left as they were
    plain = model.project(model(x, edge_index))  # the un-augmented graph
    assert not torch.allclose(eval_views[0], plain)
    model.augment1 = None  # the identity
    torch.testing.assert_close(model.views(x, edge_index)[0], plain)


def test_no_augmenters_means_identity_views():
    x, edge_index = graph()
    model = GRACEModel(GCNEncoder(12, 8), 8, 8)
    h1, h2 = model.views(x, edge_index)
    torch.testing.assert_close(h1, h2)


def test_gradient_reaches_encoder_and_head():
    x, edge_index = graph()
    model = make_model()
    h1, h2 = model.views(x, edge_index)
    (h1 * h2).sum().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_state_dict_round_trip():
    x, edge_index = graph()
    torch.manual_seed(0)
    model = make_model()
    torch.manual_seed(1)
    clone = make_model()
    assert not torch.allclose(model(x, edge_index), clone(x, edge_index))
    clone.load_state_dict(model.state_dict())
    model.eval()
    clone.eval()
    torch.testing.assert_close(model(x, edge_index), clone(x, edge_index))
    torch.manual_seed(2)
    h1 = model.views(x, edge_index)[0]
    torch.manual_seed(2)
    torch.testing.assert_close(h1, clone.views(x, edge_index)[0])
    assert any("activations" in key for key in model.state_dict())


def test_reset_parameters_resets_encoder_and_head():
    model = make_model()
    torch.manual_seed(3)
    model.reset_parameters()
    first = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for param in model.parameters():
            param.add_(1.0)
    torch.manual_seed(3)
    model.reset_parameters()
    for key, value in model.state_dict().items():
        assert torch.equal(value, first[key]), key


def test_data_input_and_edge_weight():
    x, edge_index = graph()
    weight = torch.rand(edge_index.size(1))
    model = make_model().eval()
    data = Data(x=x, edge_index=edge_index, edge_weight=weight)
    torch.testing.assert_close(model(data), model(x, edge_index, weight))
    torch.manual_seed(0)
    h1, _ = model.views(data)
    torch.manual_seed(0)
    torch.testing.assert_close(h1, model.views(x, edge_index, weight)[0])
    assert not torch.allclose(model(data), model(x, edge_index))
    hetero = HeteroData()
    hetero["paper"].x = x
    with pytest.raises(ValueError, match="HeteroData"):
        model(hetero)


def test_adaptive_augmenters_inside_model_are_prepared_once(monkeypatch):
    import networkx

    calls = []
    real = networkx.eigenvector_centrality_numpy

    def counting(g, *args, **kwargs):
        calls.append(1)
        return real(g, *args, **kwargs)

    monkeypatch.setattr(networkx, "eigenvector_centrality_numpy", counting)
    x, edge_index = graph(seed=2)
    model = make_model(
        augment1=[AdaptiveEdgeDrop(0.3), AdaptiveFeatureMask(0.2)],
        augment2=[AdaptiveFeatureMask(0.3), AdaptiveEdgeDrop(0.4)],
    )
    for _ in range(3):
        model.views(x, edge_index)
    assert len(calls) == 1  # both views' members share the centralities
    other_x, other_edges = graph(num_nodes=x.size(0) + 5, seed=3)
    with pytest.raises(ValueError, match=rf"prepared on a graph of {x.size(0)} nodes, not"):
        model.views(other_x, other_edges)
    model.augment1.prepare(other_x, other_edges)
    model.augment2.prepare(other_x, other_edges)
    model.views(other_x, other_edges)
    assert len(calls) == 3


def test_resetting_the_model_or_a_compose_forgets_what_augmenters_prepared():
    x, edge_index = graph(seed=2)
    model = make_model(
        augment1=[AdaptiveEdgeDrop(0.3, "degree"), AdaptiveFeatureMask(0.2, "degree")],
        augment2=[AdaptiveFeatureMask(0.3, "degree"), AdaptiveEdgeDrop(0.4, "degree")],
    )
    members = [*model.augment1.augmenters, *model.augment2.augmenters]
    model.views(x, edge_index)
    assert all(m.is_prepared() for m in members)
    model.augment1.reset_parameters()
    assert [m.is_prepared() for m in members] == [False, False, True, True]
    model.views(x, edge_index)
    model.reset_parameters()
    assert not any(m.is_prepared() for m in members)


def test_model_moves_with_to_and_keeps_working():
    x, edge_index = graph()
    model = make_model(augment1=[AdaptiveEdgeDrop(0.3, "degree")])
    model.views(x, edge_index)  # prepares the edge drop
    edge_drop = model.augment1.augmenters[0]
    assert edge_drop.node_drop_prob.dtype == torch.float32
    assert f"node_drop_prob=[{x.size(0)}]" in repr(model)
    model = model.to(torch.float64)
    assert all(p.dtype == torch.float64 for p in model.parameters())
    assert edge_drop.node_drop_prob.dtype == torch.float64  # buffers move with the model
    h1, h2 = model.views(x.double(), edge_index)
    assert h1.dtype == torch.float64 and torch.isfinite(h1).all()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        model = model.to(device)
        assert edge_drop.node_drop_prob.device.type == device
        h1, _ = model.views(x.double().to(device), edge_index.to(device))
        assert h1.device.type == device


def test_model_repr_is_one_line_in_pygs_style():
    assert repr(make_model()) == (
        "GRACEModel(GCNEncoder(12, 8, num_layers=2, conv=GCNConv, activation=prelu), 8, 6, "
        "augment1=ComposeAugmenters(EdgeDrop(p=0.3), FeatureMask(p=0.3)), "
        "augment2=ComposeAugmenters(EdgeDrop(p=0.4), FeatureMask(p=0.2)))"
    )
    head = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU())
    assert repr(GRACEModel(MLPEncoder(4, 2), 2, projector=head)) == (
        "GRACEModel(MLPEncoder(4, 2, num_layers=2, activation=relu), 2, projector=Sequential( "
        "(0): Linear(in_features=2, out_features=3, bias=True) (1): ReLU() ))"
    )
    assert repr(GRACEModel(MLPEncoder(4, 2), 2, projector=None)).endswith(", 2, projector=None)")


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"hidden_channels": 0}, "`hidden_channels`"),
        ({"proj_channels": -1}, "`proj_channels`"),
        ({"augment1": 0.3}, "`augment1`"),
        ({"augment2": [EdgeDrop(0.1), "x"]}, "`augmenters"),
    ],
)
def test_model_bad_arguments(kwargs, name):
    args = {"encoder": GCNEncoder(12, 8), "hidden_channels": 8, "proj_channels": 8, **kwargs}
    with pytest.raises(ValueError, match=name):
        GRACEModel(**args)


def _propagation_paths(encoder, x, edge_index):
    """Which of PyG's propagation paths the first layer took: ``'sparse'`` (one fused
    ``message_and_aggregate`` over an adjacency matrix) and/or ``'edges'`` (messages)."""
    conv, seen = encoder.layers[0], set()
    handles = [
        conv.register_message_and_aggregate_forward_hook(lambda *a: seen.add("sparse")),
        conv.register_message_forward_hook(lambda *a: seen.add("edges")),
    ]
    encoder(x, edge_index)
    for handle in handles:
        handle.remove()
    return seen


@pytest.mark.parametrize("conv", [GCNConv, SAGEConv])
def test_sparse_propagation_equals_edge_index_path(conv):
    from pyg_progcl.encoders import SPARSE_CONVS

    assert conv in SPARSE_CONVS
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 6, generator=g)
    raw = torch.randint(40, (2, 160), generator=g)  # with self-loops and repeats
    edge_index = to_undirected(raw[:, raw[0] != raw[1]])
    assert _propagation_paths(GCNEncoder(6, 8, conv=conv), x, edge_index) == {"edges"}
    opted = GCNEncoder(6, 8, conv=conv, sparse=True)
    assert _propagation_paths(opted, x, raw) == {"edges"}  # falls back to the edge list
    assert _propagation_paths(opted, x, edge_index) == {"sparse"}
    torch.manual_seed(0)
    plain = GCNEncoder(6, 8, conv=conv)
    torch.manual_seed(0)
    fast = GCNEncoder(6, 8, conv=conv, sparse=True)
    assert fast.sparse and "sparse=True" in repr(fast) and "sparse" not in repr(plain)
    torch.testing.assert_close(fast(x, edge_index), plain(x, edge_index))
    if conv is GCNConv:
        w = torch.rand(edge_index.size(1), generator=g)
        torch.testing.assert_close(fast(x, edge_index, w), plain(x, edge_index, w))
    torch.testing.assert_close(fast(x, raw), plain(x, raw))


def test_sparse_propagation_casts_edge_weights_to_the_features_dtype():
    # PyG's GCNConv takes float32 weights with float64 features; so must the CSR path.
    x, edge_index = graph()
    w = torch.rand(edge_index.size(1))
    torch.manual_seed(0)
    plain = GCNEncoder(12, 8, sparse=False).double()
    torch.manual_seed(0)
    fast = GCNEncoder(12, 8).double()
    out = fast(x.double(), edge_index, w)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, plain(x.double(), edge_index, w))


def test_features_of_the_wrong_width_are_a_clear_error():
    x, edge_index = graph()
    model = GRACEModel(GCNEncoder(12, 8), hidden_channels=8, proj_channels=8)
    for bad in (x[:, :7], x[:, 0]):
        with pytest.raises(ValueError, match=r"`x` must have shape \[num_nodes, 12\]"):
            model.views(bad, edge_index)
        with pytest.raises(ValueError, match="in_channels"):
            model(bad, edge_index)


def test_recomputed_views_equal_kept_views_in_value_and_gradient(monkeypatch):
    import pyg_progcl.model as model_module

    calls = []
    original = model_module.checkpoint
    monkeypatch.setattr(
        model_module, "checkpoint", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    g = torch.Generator().manual_seed(0)
    x = torch.rand(30, 12, generator=g)
    edge_index = to_undirected(erdos_renyi_graph(30, 0.2))
    grads = []
    for recompute in (False, True):
        torch.manual_seed(0)
        model = GRACEModel(
            GCNEncoder(12, 8),
            8,
            8,
            [EdgeDrop(0.3), FeatureMask(0.3)],
            [EdgeDrop(0.2), FeatureMask(0.4)],
            recompute_views=recompute,
        )
        torch.manual_seed(1)
        h1, h2 = model.views(x, edge_index)
        (h1.square().sum() + (h1 * h2).sum()).backward()
        grads.append([h1.detach(), h2.detach()] + [p.grad.clone() for p in model.parameters()])
    assert len(calls) == 2  # only the recomputing model checkpoints, once per view
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("encoder_cls", [GCNEncoder, MLPEncoder])
def test_sparse_features_equal_dense_features_in_value_and_gradient(encoder_cls):
    from pyg_progcl.encoders import sparse_features

    g = torch.Generator().manual_seed(0)
    x = torch.rand(60, 50, generator=g) * (torch.rand(60, 50, generator=g) < 0.05)  # ~5 %
    assert sparse_features(x).layout == torch.sparse_csr
    dense_x = torch.rand(60, 50, generator=g)
    assert sparse_features(dense_x) is dense_x  # dense features stay dense
    assert sparse_features(x.requires_grad_()) is x  # features that need a gradient too
    x = x.detach()
    edge_index = to_undirected(torch.randint(60, (2, 200), generator=g))
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    outs = []
    for flag in (True, False):
        torch.manual_seed(0)
        enc = encoder_cls(50, 8, sparse_features=flag)
        z = enc(x, edge_index)
        outs.append((z, torch.autograd.grad(z.square().sum(), list(enc.parameters()))))
    torch.testing.assert_close(outs[0][0], outs[1][0])
    for a, b in zip(outs[0][1], outs[1][1]):
        torch.testing.assert_close(a, b)


def test_sparse_features_only_for_convs_that_start_with_a_linear_map():
    assert GCNEncoder(5, 4, sparse_features=True).sparse_features
    assert not GCNEncoder(5, 4, conv=SAGEConv, sparse_features=True).sparse_features
    assert not GCNEncoder(5, 4).sparse_features  # (a CPU option: off by default)


def _bag_of_words(num_nodes=50, num_features=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(num_nodes, num_features, generator=g) < 0.05
    return torch.rand(num_nodes, num_features, generator=g) * mask


@pytest.mark.parametrize("adaptive", [False, True])
def test_model_masks_csr_features_as_the_dense_path_does(adaptive, monkeypatch):
    x = _bag_of_words()
    edge_index = to_undirected(erdos_renyi_graph(50, 0.1))

    def view(p):
        return [AdaptiveEdgeDrop(p), AdaptiveFeatureMask(p)] if adaptive else FeatureMask(p)

    torch.manual_seed(0)
    model = GRACEModel(GCNEncoder(40, 8, sparse_features=True), 8, 8, view(0.3), view(0.4))
    csr = model.input_features(x)
    assert csr.layout == torch.sparse_csr and torch.equal(csr.to_dense(), x)
    assert model.input_features(csr) is csr  # a CSR x is used as it is
    conversions = []
    to_csr = torch.Tensor.to_sparse_csr
    monkeypatch.setattr(
        torch.Tensor,
        "to_sparse_csr",
        lambda t, *a: conversions.append(t.shape == x.shape) or to_csr(t, *a),
    )
    for _ in range(2):
        torch.manual_seed(1)
        h1, h2 = model.views(csr, edge_index)
        assert not any(conversions)  # the views mask the CSR matrix (not the adjacency)
        torch.manual_seed(1)
        assert all(map(torch.equal, model.views(x, edge_index), (h1, h2)))  # x converted
        torch.manual_seed(1)  # the dense path: mask the dense matrix, the encoder converts it
        augments = (model.augment1, model.augment2)
        dense = [model._augment_and_encode(a, x, edge_index, None) for a in augments]
        assert torch.equal(h1, dense[0]) and torch.equal(h2, dense[1])
        conversions.clear()
    torch.testing.assert_close(model(x, edge_index), model._encode(x, edge_index, None))
    x.mul_(2.0)  # modified in place: what the model feeds follows
    assert torch.equal(model.input_features(x).to_dense(), x)


def test_the_model_keeps_no_copy_of_the_features():
    import copy
    import pickle

    x = _bag_of_words()
    model = GRACEModel(
        GCNEncoder(40, 8, sparse_features=True), 8, 8, FeatureMask(0.3), FeatureMask(0.3)
    )
    size = len(pickle.dumps(model))
    model.views(x, erdos_renyi_graph(50, 0.1))
    assert len(pickle.dumps(model)) == size
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert clone(x, erdos_renyi_graph(50, 0.1)).shape == (50, 8)
    plain = GRACEModel(MLPEncoder(40, 8), 8, 8)
    assert plain.input_features(x) is x  # an encoder that takes dense features gets them
