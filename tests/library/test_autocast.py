"""PyTorch's own tools with the defaults: autocast (mixed precision) and torch.compile."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import REPO
from helpers import fitted_mixture
from torch._dynamo.utils import counters

from pyg_progcl.augment import EdgeDrop, FeatureMask
from pyg_progcl.encoders import GCNEncoder, MLPEncoder
from pyg_progcl.losses import DebiasedInfoNCELoss, HardInfoNCELoss, InfoNCELoss, ProGCLLoss
from pyg_progcl.mixture import BetaMixture
from pyg_progcl.model import GRACEModel

# Relative tolerances of half-precision encoders against float32: a few roundings of the
# format's unit (bfloat16 2^-8 ~ 0.004, float16 2^-11 ~ 0.0005) through two layers and a
# projection head. Measured on the graph below: embeddings up to 0.17x of these, a step's
# gradients up to 1.5x (sums over nodes and edges of rounded terms), checked at 3x.
HALF = [(torch.bfloat16, 3e-2), (torch.float16, 5e-3)]


def graph(num_nodes=120, num_features=40, num_edges=600, seed=0):
    """Bag-of-words-like features (5 % non-zero: the encoder's sparse path) and an edge
    list without self-loops (its CSR adjacency)."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(num_nodes, num_features, generator=g) < 0.05).float()
    edge_index = torch.randint(num_nodes, (2, num_edges), generator=g)
    return x, edge_index[:, edge_index[0] != edge_index[1]]


def model(num_features=40, seed=0):
    torch.manual_seed(seed)
    return GRACEModel(
        GCNEncoder(num_features, 32), 32, 32,
        augment1=[EdgeDrop(0.2), FeatureMask(0.3)], augment2=[EdgeDrop(0.4), FeatureMask(0.4)],
    )  # fmt: skip


def losses():
    """Each loss on the dense path, two on row blocks and two with sampled negatives."""
    weight, mix = ProGCLLoss(mode="weight"), ProGCLLoss(mode="mix")
    mix_blocks = ProGCLLoss(mode="mix", num_mix=20, block_size=50)
    g = torch.Generator().manual_seed(1)
    h1, h2 = torch.randn(120, 16, generator=g), torch.randn(120, 16, generator=g)
    for fitted in (weight, mix, mix_blocks):
        fitted.fit(h1, h2, generator=torch.Generator().manual_seed(0))
    sampled = [InfoNCELoss(num_negatives=10), HardInfoNCELoss(num_negatives=10)]
    blocks = [HardInfoNCELoss(block_size=50), mix_blocks]
    return [InfoNCELoss(), DebiasedInfoNCELoss(), HardInfoNCELoss(), weight, mix, *sampled, *blocks]


LOSS_IDS = [
    "InfoNCE", "Debiased", "Hard", "ProGCL-weight", "ProGCL-mix", "InfoNCE-k", "Hard-k",
    "Hard-blocks", "ProGCL-mix-blocks",
]  # fmt: skip


def close(a, b, rtol):
    return (a.float() - b.float()).abs().max() <= rtol * b.float().abs().max()


def seeded(loss_fn, h1, h2):
    torch.manual_seed(0)  # (the sampled negatives)
    return loss_fn(h1, h2)


# ----------------------------------------------------------------------------- autocast


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("loss_fn", losses(), ids=LOSS_IDS)
def test_losses_compute_in_float32_under_autocast(loss_fn, dtype):
    g = torch.Generator().manual_seed(2)
    h1, h2 = torch.randn(120, 16, generator=g), torch.randn(120, 16, generator=g)
    h1_half, h2_half = h1.to(dtype), h2.to(dtype)
    expected, upcast = seeded(loss_fn, h1, h2), seeded(loss_fn, h1_half.float(), h2_half.float())
    with torch.autocast("cpu", dtype=dtype):
        same = seeded(loss_fn, h1, h2)  # float32 views: autocast changes nothing
        half = seeded(loss_fn, h1_half, h2_half)  # half views: upcast, not an error
    assert same.dtype == half.dtype == torch.float32
    # (bfloat16 logits, as the sampled negatives' got before: off by 1e-4 to 4e-3)
    torch.testing.assert_close(same, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(half, upcast, rtol=1e-5, atol=1e-5)


def test_progcl_fit_under_autocast_matches_float32():
    g = torch.Generator().manual_seed(3)
    h1, h2 = torch.randn(300, 16, generator=g), torch.randn(300, 16, generator=g)
    fits = []
    for dtype in (None, torch.bfloat16):
        loss_fn = ProGCLLoss(num_samples=5000)  # (a [80, 16] x [16, 64] product)
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss_fn.fit(h1, h2, generator=torch.Generator().manual_seed(0))
        fits.append(torch.cat([p.flatten() for p in loss_fn.mixture.buffers()]))
    torch.testing.assert_close(fits[1], fits[0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("loss_fn", losses(), ids=LOSS_IDS)
def test_distributed_loss_computes_in_float32_under_autocast(one_process_group, loss_fn, dtype):
    from pyg_progcl.distributed import DistributedLoss

    g = torch.Generator().manual_seed(2)
    h1, h2 = (torch.randn(120, 16, generator=g).to(dtype).requires_grad_() for _ in range(2))
    expected = seeded(loss_fn, h1.float(), h2.float())
    want = torch.autograd.grad(expected, (h1, h2))
    with torch.autocast("cpu", dtype=dtype):
        got = seeded(DistributedLoss(loss_fn), h1, h2)  # half views: upcast, float32 products
    grad = torch.autograd.grad(got, (h1, h2))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,rtol", HALF)
def test_default_encoder_and_model_under_autocast(dtype, rtol):
    x, edge_index = graph()
    m = model()
    assert not m.encoder.sparse  # the default: PyG's edge list and dense features
    with torch.no_grad():
        expected = m(x, edge_index)
        torch.manual_seed(5)
        views = m.views(x, edge_index)
        with torch.autocast("cpu", dtype=dtype):
            z = m(x, edge_index)
            z_enc = m.encoder(x, edge_index)
            torch.manual_seed(5)
            half_views = m.views(x, edge_index)
    for got, want in [(z, expected), (z_enc, expected), *zip(half_views, views)]:
        assert torch.isfinite(got).all()
        assert close(got, want, rtol)


def sparse_adjacency(edge_index, num_nodes, kind):
    """The transposed adjacency (rows = targets) of ``edge_index`` as a ``kind`` matrix."""
    from torch_geometric.utils import to_torch_coo_tensor, to_torch_csr_tensor

    if kind == "SparseTensor":
        torch_sparse = pytest.importorskip(
            "torch_sparse", reason="needs torch-sparse (./scripts/setup.sh --dev --with-sparse)"
        )
        return torch_sparse.SparseTensor.from_edge_index(
            edge_index.flip(0), sparse_sizes=(num_nodes, num_nodes)
        )
    convert = to_torch_csr_tensor if kind == "csr" else to_torch_coo_tensor
    return convert(edge_index.flip(0), size=(num_nodes, num_nodes))


@pytest.mark.filterwarnings("ignore:Converting sparse tensor to CSR:UserWarning")
@pytest.mark.filterwarnings("ignore:Sparse (CSR tensor support|invariant checks):UserWarning")
@pytest.mark.parametrize("conv", ["GCNConv", "SAGEConv"])
@pytest.mark.parametrize(
    "kind", ["csr", "coo", pytest.param("SparseTensor", marks=pytest.mark.sparse)]
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_encoder_on_a_sparse_adjacency_under_autocast(dtype, kind, conv):
    # The caller's sparse adjacency: the layers run in float32 (no half-precision CPU
    # sparse kernels), so the embeddings and gradients are the float32 ones.
    import torch_geometric.nn as pyg_nn

    x, edge_index = graph()
    adj = sparse_adjacency(torch.unique(edge_index, dim=1), x.size(0), kind)
    torch.manual_seed(0)
    encoder = GCNEncoder(40, 32, conv=getattr(pyg_nn, conv))
    expected = encoder(x, adj)
    want = torch.autograd.grad(expected.square().sum(), list(encoder.parameters()))
    with torch.autocast("cpu", dtype=dtype):
        got = encoder(x, adj)
        half = encoder(x.to(dtype), adj)  # half-precision features: upcast
    grad = torch.autograd.grad(got.square().sum(), list(encoder.parameters()))
    assert got.dtype == half.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(half, encoder(x.to(dtype).float(), adj), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype,rtol", HALF)
def test_mlp_encoder_with_sparse_features_under_autocast(dtype, rtol):
    x, _ = graph()
    torch.manual_seed(0)
    encoder = MLPEncoder(40, 32)
    with torch.no_grad():
        expected = encoder(x)
        with torch.autocast("cpu", dtype=dtype):
            got = encoder(x), encoder(x.to_sparse_csr())
    assert all(close(z, expected, rtol) for z in got)


@pytest.mark.filterwarnings("ignore:BetaMixture fit degenerated")  # (an untrained model)
@pytest.mark.parametrize("dtype,rtol", HALF)
def test_training_step_under_autocast(dtype, rtol):
    x, edge_index = graph()
    results = []
    for enabled in (False, True):
        m, loss_fn = model(), ProGCLLoss()
        opt = torch.optim.Adam(m.parameters(), lr=1e-2)
        torch.manual_seed(7)
        with torch.autocast("cpu", dtype=dtype, enabled=enabled):
            h1, h2 = m.views(x, edge_index)
            loss_fn.fit(h1.detach(), h2.detach(), generator=torch.Generator().manual_seed(0))
            loss = loss_fn(h1, h2)
        loss.backward()
        grads = [p.grad.clone() for p in m.parameters()]
        opt.step()
        results.append((loss.detach(), grads, [p.detach().clone() for p in m.parameters()]))
    (loss32, grads32, params32), (loss16, grads16, params16) = results
    assert torch.isfinite(loss16) and all(torch.isfinite(g).all() for g in grads16)
    assert close(loss16, loss32, rtol)
    assert all(close(a, b, 3 * rtol) for a, b in zip(grads16, grads32))
    assert any(not torch.equal(a, b) for a, b in zip(params16, model().parameters()))


# ----------------------------------------------------------------------------- compile


@pytest.fixture
def dynamo_counters():
    torch._dynamo.reset()
    counters.clear()
    yield counters
    torch._dynamo.reset()


def test_compiled_model_forward_and_views(dynamo_counters):
    x, edge_index = graph()
    m = model()
    compiled = torch.compile(m, backend="eager")  # compiles model(x, edge_index) only
    compiled_views = torch.compile(m.views, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, edge_index), m(x, edge_index))
        for _ in range(3):  # (EdgeDrop: another number of edges each call)
            torch.manual_seed(5)
            views = compiled_views(x, edge_index)
            torch.manual_seed(5)
            for got, want in zip(views, m.views(x, edge_index)):
                torch.testing.assert_close(got, want)
    breaks = " ".join(dynamo_counters["graph_break"])
    assert "sparse" not in breaks.lower()  # the edge-list path: no CSR tensor to trace


def test_compiled_encoder_in_training_views(dynamo_counters):
    # Two runs in one process, as a sweep does: on the CSR path the second one's first
    # compiled view failed inside PyG's add_remaining_self_loops (TorchDynamo's shape
    # bookkeeping of the first run).
    for run in range(2):
        torch.manual_seed(run)
        x = (torch.rand(200, 50) < 0.05).float()
        edge_index = torch.randint(200, (2, 800))
        edge_index = edge_index[:, edge_index[0] != edge_index[1]]
        compiled, m = model(num_features=50, seed=run), model(num_features=50, seed=run)
        compiled.encoder.compile(backend="eager")  # in place: the state_dict keeps its keys
        for seed in range(3):  # (EdgeDrop: another number of edges each call)
            torch.manual_seed(seed)
            views = compiled.views(x, edge_index)
            torch.manual_seed(seed)
            for got, want in zip(views, m.views(x, edge_index)):
                torch.testing.assert_close(got, want)
        torch._dynamo.reset()


@pytest.mark.parametrize("mode", [None, "weight", "mix"], ids=["InfoNCE", "weight", "mix"])
def test_the_compiled_loss_has_no_graph_break_and_equals_the_eager_one(mode, dynamo_counters):
    g = torch.Generator().manual_seed(4)
    h1 = torch.randn(120, 16, generator=g, requires_grad=True)
    h2 = torch.randn(120, 16, generator=g, requires_grad=True)
    loss_fn = InfoNCELoss() if mode is None else ProGCLLoss(mode=mode, num_mix=10)
    if mode is not None:
        loss_fn.fit(h1.detach(), h2.detach())
    torch._dynamo.reset()
    assert torch._dynamo.explain(loss_fn)(h1, h2).graph_break_count == 0
    torch._dynamo.reset()
    compiled = torch.compile(loss_fn, backend="aot_eager")
    torch.manual_seed(0)
    loss = compiled(h1, h2)
    grads = torch.autograd.grad(loss, (h1, h2))
    torch.manual_seed(0)
    want = loss_fn(h1, h2)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, torch.autograd.grad(want, (h1, h2))):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    torch._dynamo.reset()


def test_a_compiled_loss_with_a_loaded_mixture_weights_from_its_first_call(dynamo_counters):
    # (a mixture loaded from a state, e.g. a checkpoint, is fitted for compiled code too)
    h1, h2 = torch.randn(40, 6, dtype=torch.float64), torch.randn(40, 6, dtype=torch.float64)
    mixture = BetaMixture().double()
    mixture.load_state_dict(fitted_mixture().state_dict())
    torch._dynamo.reset()
    got = torch.compile(ProGCLLoss(0.5, mixture=mixture), backend="eager")(h1, h2)
    want = ProGCLLoss(0.5, mixture=fitted_mixture())(h1, h2)
    torch.testing.assert_close(got, want)
    assert not torch.allclose(got, InfoNCELoss(0.5)(h1, h2))  # (not GRACE's)
    torch._dynamo.reset()


# ProGCL-mix's step compiled by inductor with two threads, against eager (a subprocess: the
# bug it guards against, inductor's CPU code for an index_select's backward fused with a
# transposed load, pytorch/pytorch#191837, corrupted the heap and aborted the process).
INDUCTOR_MIX_SCRIPT = textwrap.dedent(
    """
    import json, torch
    from pyg_progcl.losses import ProGCLLoss
    torch.set_num_threads(2)  # (one thread takes another code path)
    out = {}
    for dtype in (torch.float32, torch.float64):
        g = torch.Generator().manual_seed(0)
        h1 = torch.randn(256, 16, generator=g, dtype=dtype)
        h2 = h1 + 0.5 * torch.randn(256, 16, generator=g, dtype=dtype)
        loss_fn = ProGCLLoss(0.4, mode="mix", num_mix=64).fit(h1, h2)
        torch._dynamo.reset()
        breaks = torch._dynamo.explain(loss_fn)(h1, h2).graph_break_count
        steps = []
        for fn in (loss_fn, torch.compile(loss_fn)):
            a, b = h1.clone().requires_grad_(), h2.clone().requires_grad_()
            torch.manual_seed(0)  # (the pairing)
            loss = fn(a, b)
            loss.backward()
            steps.append((loss.detach(), a.grad, b.grad))
        out[str(dtype)] = [breaks] + [
            ((c - e).abs().max() / e.abs().max()).item() for e, c in zip(*steps)
        ]
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_the_mix_step_compiled_by_inductor_equals_eager():
    done = subprocess.run(
        [sys.executable, "-c", INDUCTOR_MIX_SCRIPT],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.splitlines()[-1])
    for dtype, rtol in (("torch.float32", 1e-4), ("torch.float64", 1e-12)):
        breaks, *differences = got[dtype]
        assert breaks == 0
        assert max(differences) <= rtol, (dtype, differences)  # loss, both views' gradients


def train_step(m, loss_fn, x, edge_index):
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    torch.manual_seed(7)
    h1, h2 = m.views(x, edge_index)
    loss = loss_fn(h1, h2)
    loss.backward()
    opt.step()
    return loss.detach()


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_compiled_model_training_step(backend, dynamo_counters):
    x, edge_index = graph()
    eager_model, compiled_model = model(), model()
    expected = train_step(eager_model, InfoNCELoss(), x, edge_index)
    compiled_model.encoder.compile(backend=backend)
    loss = train_step(compiled_model, InfoNCELoss(), x, edge_index)
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    for a, b in zip(compiled_model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
