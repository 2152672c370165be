"""Malformed graphs are refused with a ValueError where they enter (``check_graph``), before
native code; ``views()`` augments in every mode; model and loss arguments are checked."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from conftest import REPO
from torch.overrides import TorchFunctionMode
from torch_geometric.data import Data
from torch_geometric.nn import GATConv
from torch_geometric.nn.models import GCN
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csr_tensor

from pyg_progcl import (
    EdgeDrop,
    FeatureMask,
    GCNEncoder,
    GRACEModel,
    InfoNCELoss,
    MLPEncoder,
    ProGCLLoss,
)
from pyg_progcl._graphs import check_graph
from pyg_progcl.diagnostics import core as diag_core
from pyg_progcl.losses.progcl import MAX_NUM_SAMPLES
from pyg_progcl.minibatch import embed_minibatch, minibatch_epoch, neighbor_loader

N, F = 10, 6


def ring(n=N):
    """An undirected ring: ``[2, 2n]`` edges, no self-loops (the encoder's CSR path)."""
    arange = torch.arange(n)
    one_way = torch.stack([arange, (arange + 1) % n])
    return torch.cat([one_way, one_way.flip(0)], 1)


def features(n=N, seed=0):
    return torch.randn(n, F, generator=torch.Generator().manual_seed(seed))


def with_entry(tensor, value, index=(0, 0)):
    tensor = tensor.clone()
    tensor[index] = value
    return tensor


def make_model(encoder=None, **kwargs):
    encoder = encoder if encoder is not None else GCNEncoder(F, 8)
    return GRACEModel(
        encoder,
        8,
        8,
        augment1=kwargs.get("augment1", [EdgeDrop(0.3), FeatureMask(0.3)]),
        augment2=kwargs.get("augment2", [EdgeDrop(0.4), FeatureMask(0.2)]),
    )


# (x, edge_index, edge_weight) -> the argument named and what the message says
BAD_GRAPHS = {
    "negative index": (
        lambda: (features(), with_entry(ring(), -1), None),
        r"`edge_index` has negative node indices \(min -1\)",
    ),
    "index = num_nodes": (
        lambda: (features(), with_entry(ring(), N), None),
        rf"`edge_index` has node indices >= num_nodes = {N} \(max {N}\)",
    ),
    "transposed": (
        lambda: (features(), ring().t(), None),
        r"`edge_index`.*looks transposed: pass edge_index.t\(\)",
    ),
    "float index": (
        lambda: (features(), ring().float(), None),
        r"`edge_index` must be an integer tensor \(got torch.float32\)",
    ),
    "1-D index": (lambda: (features(), ring()[0], None), r"`edge_index` must have shape"),
    "NaN feature": (
        lambda: (with_entry(features(), float("nan")), ring(), None),
        r"`x` has 1 NaN or infinite value",
    ),
    "inf feature": (
        lambda: (with_entry(features(), float("inf"), (3, 2)), ring(), None),
        r"`x` has 1 NaN or infinite value",
    ),
    "integer features": (
        lambda: (features().long(), ring(), None),
        r"`x` must be a floating-point tensor \(got torch.int64\).*x.float\(\)",
    ),
    "boolean features": (
        lambda: (features() > 0, ring(), None),
        r"`x` must be a floating-point tensor \(got torch.bool\)",
    ),
    "NaN weight": (
        lambda: (features(), ring(), with_entry(torch.ones(2 * N), float("nan"), 4)),
        r"`edge_weight` has 1 NaN or infinite value",
    ),
    "negative weight": (
        lambda: (features(), ring(), with_entry(torch.ones(2 * N), -0.5, 4)),
        r"`edge_weight` has negative weights \(min -0.5\)",
    ),
    "weights of the wrong length": (
        lambda: (features(), ring(), torch.ones(3)),
        rf"`edge_weight` must have one entry per edge, num_edges = {2 * N} \(got 3\)",
    ),
    "integer weights": (
        lambda: (features(), ring(), torch.ones(2 * N, dtype=torch.long)),
        r"`edge_weight` must be a floating-point tensor",
    ),
    "NaN in sparse x": (
        lambda: (with_entry(features(), float("nan")).to_sparse(), ring(), None),
        r"`x` has 1 NaN or infinite value",
    ),
}
X_ONLY = ("NaN feature", "inf feature", "integer features", "boolean features", "NaN in sparse x")


@pytest.mark.parametrize("case", list(BAD_GRAPHS))
def test_check_graph_names_the_argument_and_what_was_found(case):
    make, message = BAD_GRAPHS[case]
    x, edge_index, edge_weight = make()
    with pytest.raises(ValueError, match=message):
        check_graph(x, edge_index, edge_weight)


@pytest.mark.parametrize("case", list(BAD_GRAPHS))
def test_gcn_encoder_refuses_bad_graphs(case):
    make, message = BAD_GRAPHS[case]
    x, edge_index, edge_weight = make()
    with pytest.raises(ValueError, match=message):
        GCNEncoder(F, 8)(x, edge_index, edge_weight)


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("case", list(BAD_GRAPHS))
def test_grace_model_refuses_bad_graphs_in_both_modes(case, mode):
    make, message = BAD_GRAPHS[case]
    x, edge_index, edge_weight = make()
    model = make_model()
    model.train(mode == "train")
    with pytest.raises(ValueError, match=message):
        model(x, edge_index, edge_weight)
    with pytest.raises(ValueError, match=message):
        model.views(x, edge_index, edge_weight)
    with pytest.raises(ValueError, match=message):
        model(Data(x=x, edge_index=edge_index, edge_weight=edge_weight))


@pytest.mark.parametrize("case", X_ONLY)
def test_mlp_encoder_checks_its_features_and_ignores_the_graph(case):
    make, message = BAD_GRAPHS[case]
    x, _, _ = make()
    with pytest.raises(ValueError, match=message):
        MLPEncoder(F, 8)(x, ring())
    with pytest.raises(ValueError, match=message):
        make_model(MLPEncoder(F, 8)).eval()(x, ring())
    # The graph is ignored: a malformed one does not matter.
    assert MLPEncoder(F, 8)(features(), with_entry(ring(), -1)).shape == (N, 8)
    with pytest.raises(ValueError, match=message):
        MLPEncoder(F, 8)(x)


def test_num_nodes_and_featureless_graphs():
    x, edge_index = features(), ring()
    with pytest.raises(ValueError, match=rf"`x` must have num_nodes = {N + 1} rows \(got {N}\)"):
        check_graph(x, edge_index, num_nodes=N + 1)
    check_graph(None, edge_index, num_nodes=N)  # no features: num_nodes bounds the indices
    with pytest.raises(ValueError, match=r"`edge_index` has node indices >= num_nodes = 5"):
        check_graph(None, edge_index, num_nodes=5)
    with pytest.raises(ValueError, match=r"`x` is None"):
        check_graph(None, edge_index)


def test_a_negative_index_never_reaches_the_sparse_path():
    # The default GCNEncoder builds a CSR adjacency of the edge list: a negative index there
    # read and wrote outside its buffers (outputs changed call to call). Eval mode runs no
    # augmenter either.
    x, edge_index = features(), with_entry(ring(), -1, (1, 3))
    model = make_model().eval()
    for _ in range(3):
        with pytest.raises(ValueError, match="negative node indices"):
            model(x, edge_index)


@pytest.mark.slow
def test_negative_index_memory_corruption_scenario_in_a_subprocess():
    # A 1,000-node ring with one -1 entry, 50 forward passes of GCNEncoder(32, 16): this
    # used to abort the process (malloc_consolidate(): invalid chunk size).
    script = textwrap.dedent(
        """
        import torch
        from pyg_progcl import GCNEncoder
        n = 1000
        arange = torch.arange(n)
        ring = torch.stack([arange, (arange + 1) % n])
        edge_index = torch.cat([ring, ring.flip(0)], 1)
        edge_index[0, 17] = -1
        x = torch.randn(n, 32)
        encoder = GCNEncoder(32, 16)
        refused = 0
        for _ in range(50):
            try:
                encoder(x, edge_index)
            except ValueError as error:
                refused += "negative node indices" in str(error)
        print("refused", refused)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["refused", "50"], done.stdout


# --------------------------------------------------------------- sparse inputs stay valid


def test_sparse_features_work_in_views_and_their_values_are_checked():
    x, edge_index = features(), ring()
    model = make_model()
    for sparse in (x.to_sparse(), x.to_sparse_csr()):  # COO used to fail in the masks
        h1, h2 = model.views(sparse, edge_index)
        assert h1.shape == h2.shape == (N, 8) and torch.isfinite(h1).all()
        torch.testing.assert_close(model.eval()(sparse, edge_index), model(x, edge_index))
        model.train()
    with pytest.raises(ValueError, match="`x` has 1 NaN"):
        model.views(with_entry(x, float("-inf")).to_sparse_csr(), edge_index)


def test_a_sparse_adjacency_keeps_working_and_its_size_and_indices_are_checked():
    x, edge_index = features(), ring()
    encoder = GCNEncoder(F, 8)
    expected = encoder(x, edge_index)
    csr = to_torch_csr_tensor(edge_index.flip(0), size=(N, N))
    torch.testing.assert_close(encoder(x, csr), expected)
    torch.testing.assert_close(
        encoder(x, to_torch_coo_tensor(edge_index.flip(0), size=N)), expected
    )
    with pytest.raises(
        ValueError, match=rf"must have size \[num_nodes, num_nodes\] = \[{N}, {N}\]"
    ):
        encoder(x, to_torch_csr_tensor(edge_index, size=(N + 2, N + 2)))
    with warnings.catch_warnings():  # torch does not check the indices (it warns once)
        warnings.simplefilter("ignore")
        bad = torch.sparse_coo_tensor(with_entry(edge_index, N + 3), torch.ones(2 * N), (N, N))
    with pytest.raises(ValueError, match=rf"`edge_index` has node indices >= num_nodes = {N}"):
        encoder(x, bad)


# ------------------------------------------------- every call checks, once, what it is given

IN_PLACE_SCRIPT = """
import torch
from pyg_progcl import EdgeDrop, FeatureMask, GCNEncoder, GRACEModel

n = 1000
arange = torch.arange(n)
one_way = torch.stack([arange, (arange + 1) % n])


def outcome(target, write, value):
    torch.manual_seed(0)
    edge_index = torch.cat([one_way, one_way.flip(0)], 1)
    x = torch.randn(n, 32)
    encoder = GCNEncoder(32, 16)
    model = GRACEModel(encoder, 16, 16, [EdgeDrop(0.2), FeatureMask(0.2)], EdgeDrop(0.3))

    def step():  # a training step: forward and backward
        if target == "encoder":
            loss = encoder(x, edge_index).sum()
        elif target == "forward":
            loss = model(x, edge_index).sum()
        else:
            loss = sum(h.sum() for h in model.views(x, edge_index))
        loss.backward()

    step()
    tensor = x if value != value else edge_index  # NaN goes into x
    versions = (x._version, edge_index._version)
    if write == "numpy":
        tensor.numpy()[0, 17:40] = value
    else:
        tensor.data[0, 17:40] = value
    assert (x._version, edge_index._version) == versions  # writes torch does not count
    try:
        step()
    except ValueError as error:
        message = str(error)
        return "refused" if "\\n" not in message and ("edge_index" in message or "NaN" in message) else message
    return "silent"


for target in ("encoder", "forward", "views"):
    for write in ("numpy", ".data"):
        for value in (-5, n + 7, float("nan")):
            print(target, write, value, outcome(target, write, value), flush=True)
"""


@pytest.mark.slow
def test_tensors_modified_in_place_behind_torchs_back_are_refused_in_a_subprocess():
    # After a first step, a write through a numpy view or ``.data`` (which leaves
    # ``_version`` as it was) puts a negative or too large node index into edge_index, or a
    # NaN into x: every later call must refuse it in one line. A check skipped for tensors
    # seen before let the negative index reach native code, and the backward pass aborted
    # the interpreter (free(): invalid pointer).
    done = subprocess.run(
        [sys.executable, "-c", IN_PLACE_SCRIPT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    lines = done.stdout.splitlines()
    assert len(lines) == 3 * 2 * 3, done.stdout
    assert all(line.endswith(" refused") for line in lines), done.stdout


@pytest.mark.parametrize("write", ["numpy", ".data"])
def test_check_graph_sees_writes_that_torch_does_not_count(write):
    x, edge_index, weight = features(), ring(), torch.ones(2 * N)
    for bad, tensor, message in [
        (-3, edge_index, r"`edge_index` has negative node indices \(min -3\)"),
        (N, edge_index, rf"`edge_index` has node indices >= num_nodes = {N}"),
        (float("nan"), x, r"`x` has 1 NaN"),
        (-1.0, weight, r"`edge_weight` has negative weights"),
    ]:
        check_graph(x, edge_index, weight)
        before = tensor.clone()
        versions = (x._version, edge_index._version, weight._version)
        if write == "numpy":
            tensor.numpy()[(0,) * tensor.dim()] = bad
        else:
            tensor.data[(0,) * tensor.dim()] = bad
        assert (x._version, edge_index._version, weight._version) == versions
        with pytest.raises(ValueError, match=message):
            check_graph(x, edge_index, weight)
        tensor.copy_(before)


class GraphReads(TorchFunctionMode):
    """Counts the passes over ``edge_index`` that look for its extremes: one per check of
    its graph (the check reads ``torch.aminmax`` of the indices; nothing else here does)."""

    def __init__(self, edge_index: torch.Tensor):
        super().__init__()
        self.edge_index, self.calls = edge_index, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.aminmax and args and args[0] is self.edge_index:
            self.calls += 1
        return func(*args, **(kwargs or {}))


def test_each_call_checks_its_graph_once():
    x, edge_index = features(seed=3), ring()
    model = make_model()
    with GraphReads(edge_index) as reads:
        for step in range(1, 4):
            model.views(x, edge_index)  # the augmented views reach the encoder unchecked
            assert reads.calls == 2 * step - 1
            model(x, edge_index)
            assert reads.calls == 2 * step
    x[0, 0] = float("nan")
    with pytest.raises(ValueError, match="`x` has 1 NaN"):
        model.views(x, edge_index)


def test_check_false_skips_the_check_and_the_default_checks():
    x, edge_index = features(), ring()
    bad = with_entry(ring(), N + 1)
    encoder = GCNEncoder(F, 8)
    with pytest.raises(ValueError, match="node indices >= num_nodes"):
        encoder(x, bad)
    with pytest.raises(ValueError, match="node indices >= num_nodes"):
        make_model(encoder)(x, bad)
    torch.testing.assert_close(encoder(x, edge_index, check=False), encoder(x, edge_index))
    model = make_model(encoder).eval()
    torch.testing.assert_close(model(x, edge_index, check=False), model(x, edge_index))
    nan_x = with_entry(x, float("nan"))
    assert not torch.isfinite(MLPEncoder(F, 8)(nan_x, check=False)).all()


@pytest.mark.parametrize("encoder", [GCNEncoder(F, 8), GCN(F, 8, 2)], ids=["ours", "PyG"])
def test_the_output_of_a_custom_augmenter_is_checked(encoder):
    def shift(x, edge_index, edge_weight):
        return x, (edge_index + 1), edge_weight  # index N: out of range

    model = make_model(encoder, augment1=shift)
    with pytest.raises(ValueError, match=rf"node indices >= num_nodes = {N}"):
        model.views(features(), ring())


# ------------------------------------------------------------------------- mini-batches


def test_minibatch_entry_points_check_the_full_graph():
    good = Data(x=features(40), edge_index=ring(40))
    bad = Data(x=features(40), edge_index=with_entry(ring(40), -2))
    model = make_model()
    with pytest.raises(ValueError, match=r"negative node indices \(min -2\)"):
        neighbor_loader(bad, [3, 3], batch_size=8, backend="torch")
    with pytest.raises(ValueError, match=r"negative node indices \(min -2\)"):
        embed_minibatch(model, bad, batch_size=8)
    loader = neighbor_loader(good, [3, 3], batch_size=8, backend="torch")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(ValueError, match=r"negative node indices \(min -2\)"):
        minibatch_epoch(model, InfoNCELoss(), loader, optimizer, data=bad)
    nan_x = Data(x=with_entry(features(40), float("nan")), edge_index=ring(40))
    with pytest.raises(ValueError, match="`x` has 1 NaN"):
        embed_minibatch(model, nan_x, batch_size=8, num_neighbors=[2, 2])


def test_minibatch_training_checks_the_graph_not_every_batch():
    data = Data(x=features(40, seed=4), edge_index=ring(40))
    model = make_model()
    loader = neighbor_loader(data, [3, 3], batch_size=8, backend="torch")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with GraphReads(data.edge_index) as reads:
        for _ in range(2):
            assert minibatch_epoch(model, InfoNCELoss(), loader, optimizer) > 0
        embed_minibatch(model, data, batch_size=8, num_neighbors=[2, 2])
    assert reads.calls == 3  # five batches per epoch: one check per epoch and per inference


# ------------------------------------------------------------ model and loss arguments


def test_hidden_channels_must_match_the_encoder_output_width():
    with pytest.raises(ValueError, match=r"`hidden_channels` \(32\).*output width \(16"):
        GRACEModel(GCNEncoder(F, 16), 32, 8)
    with pytest.raises(ValueError, match=r"\(7, its `out_channels`\)"):
        GRACEModel(GCN(F, 16, 2, out_channels=7), 16, 8)
    with pytest.raises(ValueError, match=r"\(16, its `out_channels x heads`\)"):
        GRACEModel(GATConv(F, 4, heads=4), 4, 8)
    # Where the encoder states its width correctly, or not at all, the model is built.
    GRACEModel(GCN(F, 16, 2, out_channels=7), 7, 8)
    GRACEModel(GATConv(F, 4, heads=4), 16, 8)
    GRACEModel(GCNEncoder(F, 16), 16, 8)
    GRACEModel(torch.nn.Linear(F, 5), 5, 8)


def test_progcl_num_samples_has_an_upper_bound():
    with pytest.raises(ValueError, match=r"`num_samples` must be at most 100_000_000"):
        ProGCLLoss(num_samples=10**12)
    with pytest.raises(ValueError, match=r"at most"):
        ProGCLLoss(num_samples=MAX_NUM_SAMPLES + 1)
    assert ProGCLLoss(num_samples=MAX_NUM_SAMPLES).num_samples == MAX_NUM_SAMPLES


# ----------------------------------------------------------- views augment in every mode


@pytest.mark.parametrize("encoder_cls", [GCNEncoder, MLPEncoder])
def test_views_are_augmented_whatever_the_mode(encoder_cls):
    x, edge_index = features(seed=1), ring()
    augment = [EdgeDrop(0.5), FeatureMask(0.5)]  # (an MLP sees only the feature masks)
    model = make_model(encoder_cls(F, 8), augment1=augment, augment2=augment)
    torch.manual_seed(0)  # draws that mask different columns, some in the first view
    for mode in (True, False):
        model.train(mode)
        h1, h2 = model.views(x, edge_index)
        assert not torch.allclose(h1, h2)
        assert all(m.training == mode for m in model.modules())  # modes left as they were
    plain = model.project(model(x, edge_index))
    assert not torch.allclose(model.views(x, edge_index)[0], plain)


def test_diagnostics_without_augmentation_still_see_the_plain_graph():
    data = Data(x=features(30, seed=2), edge_index=ring(30))
    model = make_model()
    u, v = diag_core.embed(model, data, augment=False)
    with torch.no_grad():
        h = model.eval().project(model(data.x, data.edge_index))
    h = torch.nn.functional.normalize(h, dim=1)
    torch.testing.assert_close(u, h)
    torch.testing.assert_close(v, h)
    u, v = diag_core.embed(model, data, augment=True)
    assert not torch.allclose(u, v)
