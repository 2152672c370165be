"""The engine as a GPU sees it, counted on the CPU (every outermost operator a kernel
launch, every read of a device value on the host a stall), and the edges of its input:
norms far from 1, anchors that are not a plain range, mixtures that are not finite."""

import math

import pytest
import reference as ref
import torch
from helpers import fitted_mixture, params
from torch.profiler import ProfilerActivity, profile
from torch_geometric.utils import dropout_edge

from pyg_progcl import (
    BetaMixture,
    DebiasedInfoNCELoss,
    EdgeDrop,
    FeatureMask,
    GCNEncoder,
    GRACEModel,
    HardInfoNCELoss,
    InfoNCELoss,
    ProGCLLoss,
)

HOST_READS = {"aten::item", "aten::nonzero", "aten::nonzero_static", "aten::equal", "aten::tolist"}


def count(fn) -> tuple[int, int]:
    """``(outermost operator calls, host reads)`` of one call of ``fn``."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    outer = [
        e for e in events if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")
    ]
    names = [e.name for e in events]
    reads = sum(names.count(k) for k in HOST_READS)
    reads += max(0, names.count("aten::_local_scalar_dense") - names.count("aten::item"))
    return len(outer), reads


LOSSES = {
    "infonce": lambda: InfoNCELoss(0.4),
    "dcl": lambda: DebiasedInfoNCELoss(0.4),
    "hcl": lambda: HardInfoNCELoss(0.4),
    "weight": lambda: ProGCLLoss(0.4, num_mix=20),
    "mix": lambda: ProGCLLoss(0.4, mode="mix", num_mix=20),
}


def random_views(n, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    h1 = torch.randn(n, d, generator=g)
    return h1.requires_grad_(), (h1 + 0.5 * torch.randn(n, d, generator=g)).requires_grad_()


@pytest.mark.parametrize("name", list(LOSSES))
def test_a_loss_step_reads_the_device_once_and_its_calls_do_not_grow_with_n(name):
    counts = []
    for n in (64, 300):
        h1, h2 = random_views(n)
        loss = LOSSES[name]()
        if isinstance(loss, ProGCLLoss):
            loss.fit(h1.detach(), h2.detach())
            _, fit_reads = count(lambda: loss.fit(h1.detach(), h2.detach()))  # noqa: B023
            assert fit_reads <= 3
        loss(h1, h2).backward()
        counts.append(count(lambda: loss(h1, h2).backward()))  # noqa: B023
    (calls_small, reads_small), (calls_large, reads_large) = counts
    assert reads_small == reads_large == 1  # (the views' finiteness, for both at once)
    assert calls_small == calls_large


def test_the_views_read_the_device_as_the_authors_code_does():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 8, generator=g)
    edge_index = torch.randint(40, (2, 160), generator=g)
    model = GRACEModel(
        GCNEncoder(8, 16), 16, 16, augment1=[EdgeDrop(0.2), FeatureMask(0.3)],
        augment2=[EdgeDrop(0.4), FeatureMask(0.4)],
    )  # fmt: skip
    model.views(x, edge_index)
    _, reads = count(lambda: model.views(x, edge_index))
    # one edge selection per view, one self-loop pass per layer (PyG's GCNConv), as the
    # authors' code (which reads once more per view, for its feature mask); the graph's
    # check copies its extremes to the host once per call (no read of a CPU tensor)
    assert reads == 2 + 2 * 2
    edge_index[0, 5] = 40
    with pytest.raises(ValueError, match="edge_index"):
        model.views(x, edge_index)
    with pytest.raises(ValueError, match="edge_index"):
        model.views(x, edge_index.clone())


def test_edge_drop_draws_pyg_s_mask():
    edge_index = torch.randint(30, (2, 500))
    torch.manual_seed(3)
    want = dropout_edge(edge_index, p=0.3)[0]
    torch.manual_seed(3)
    got = EdgeDrop(0.3)(torch.zeros(30, 2), edge_index, None)[1]
    assert torch.equal(got, want)


@pytest.mark.parametrize("scale", [1e-15, 1e-30, 1e15, 1e20])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rows_of_any_finite_norm_give_their_cosines(scale, dtype):
    g = torch.Generator().manual_seed(1)
    a, b = (torch.randn(6, 4, generator=g, dtype=torch.float64) for _ in "ab")
    expected = ref.grace(a, b, 0.5)
    if dtype == torch.float32 and scale > 1e19:
        assert torch.isinf((a.float() * scale).square().sum())  # (a naive norm overflows)
    h1 = (a * scale).to(dtype).requires_grad_()
    h2 = (b * scale).to(dtype).requires_grad_()
    got = InfoNCELoss(0.5)(h1, h2)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(got.double(), expected, rtol=tol, atol=tol)
    grads = torch.autograd.grad(got, (h1, h2))
    want = torch.autograd.grad(ref.grace(a.requires_grad_(), b.requires_grad_(), 0.5), (a, b))
    for g_got, g_want in zip(grads, want):  # (the cosine's gradient scales as 1 / scale)
        torch.testing.assert_close(g_got.double() * scale, g_want, rtol=1e-4, atol=1e-6)


def test_a_zero_row_keeps_f_normalize_s_behaviour():
    h1, h2 = random_views(6, d=4)
    h1 = h1.detach().clone()
    h1[2] = 0.0
    h1.requires_grad_()
    got = InfoNCELoss(0.5)(h1, h2)
    h1b = h1.detach().clone().requires_grad_()
    want = ref.grace(h1b, h2, 0.5)  # (F.normalize's cosines: the zero row's are 0)
    torch.testing.assert_close(got, want)
    g_got, g_want = torch.autograd.grad(got, h1)[0], torch.autograd.grad(want, h1b)[0]
    torch.testing.assert_close(g_got, g_want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("anchors", [slice(0, 11, 2), slice(10, 0, -1), (0, 5)])
def test_anchors_must_be_a_plain_range(anchors):
    h1, h2 = random_views(12)
    with pytest.raises(ValueError, match="anchors"):
        InfoNCELoss(0.5).compute_loss(h1, h2, anchors=anchors)
    part = InfoNCELoss(0.5).compute_loss(h1, h2, anchors=slice(2, 9, 1))
    assert part.shape == (2, 7)


@pytest.mark.parametrize(
    "name, value", [("alpha", [math.nan, 1.0]), ("weight", [0.0, 0.0]), ("beta", [2.0, -1.0])]
)
def test_a_mixture_state_that_is_not_finite_and_positive_is_refused(name, value):
    m = fitted_mixture()
    state = m.state_dict()
    state[name] = torch.tensor(value, dtype=state[name].dtype)
    fresh = BetaMixture().double()
    with pytest.raises(ValueError, match="finite and > 0"):
        fresh.load_state_dict(state)
    loss = ProGCLLoss(0.4)
    loss_state = {f"mixture.{k}": v for k, v in state.items()}
    with pytest.raises(ValueError, match="finite and > 0"):
        loss.load_state_dict(loss_state, strict=False)


def test_a_fit_whose_statistics_are_not_finite_keeps_the_previous_parameters():
    m = fitted_mixture()
    before = [t.clone() for t in params(m)]
    x = torch.rand(100, dtype=torch.float64)
    with pytest.raises(ValueError, match="not finite"):
        m.fit(x, max_iter=5, reduce=lambda stats: stats * math.nan)
    for now, then in zip(params(m), before):
        assert torch.equal(now, then)


def test_a_fit_on_a_meta_tensor_says_so():
    with pytest.raises(ValueError, match="meta tensor"):
        BetaMixture().fit(torch.empty(10, device="meta"))


@pytest.mark.parametrize("name", list(LOSSES))
def test_the_dense_path_takes_both_views_in_one_block_and_equals_one_block_per_view(
    name, monkeypatch
):
    h1, h2 = (h.double().detach().requires_grad_() for h in random_views(60))
    loss = LOSSES[name]()
    loss.fit(h1.detach(), h2.detach()) if isinstance(loss, ProGCLLoss) else None
    term = type(loss).negative_term

    def seeded(fn):
        torch.manual_seed(0)  # (ProGCL-mix's pairing)
        out = fn(h1, h2)
        return out, torch.autograd.grad(out, (h1, h2))

    batched, grads = seeded(loss)
    views = []

    def one_view_at_a_time(self, block):  # (an unmarked negative term: a block per view)
        views.append(block.view)
        return term(self, block)

    monkeypatch.setattr(type(loss), "negative_term", one_view_at_a_time)
    expected, expected_grads = seeded(loss)
    assert views == [0, 1]
    torch.testing.assert_close(batched, expected, rtol=1e-12, atol=0)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-14)
    one_view_at_a_time.batched_views = True  # (marked: one block of both views)
    views.clear()
    loss(h1, h2)
    assert views[0] is None
