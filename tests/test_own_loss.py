"""docs/own_loss.md: its example loss, run as the page shows it, against a dense float64
formula on every path of the engine, with each reduction."""

import re

import pytest
import torch
import torch.nn.functional as F
from helpers import REPO, views

import pyg_progcl.losses as losses
from pyg_progcl.losses._engine import choose_path

PAGE = REPO / "docs" / "own_loss.md"
N = 23
#: ``(tau, options, the engine's path)``: the one-pass engine (one block, row blocks), the
#: per-direction paths where the exponentials of scale 1 + β = 2 leave float32's range
#: (2·2/τ > 80), and sampled negatives, all ``N - 1`` of them (so that the loss is exact).
PATHS = [
    (0.5, {}, "one-pass"),
    (0.5, {"block_size": 7}, "one-pass"),
    (0.04, {}, "dense"),
    (0.04, {"block_size": 7}, "row-blocks"),
    (0.5, {"num_negatives": N - 1}, "sampled"),
    (0.5, {"num_negatives": N - 1, "block_size": 7}, "sampled"),
]


def page_example() -> str:
    """The page's one Python code block."""
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.M | re.S)
    assert len(blocks) == 1, "docs/own_loss.md should hold one ```python block"
    return blocks[0]


@pytest.fixture(scope="module")
def example_loss():
    namespace = {}
    exec(compile(page_example(), str(PAGE), "exec"), namespace)
    return namespace["HardnessWeightedLoss"]


def reference(h1, h2, tau, beta):
    """``[2, N]`` losses ``ℓ(u_i)``, ``ℓ(v_i)``: ``w_ik = e^{βθ_ik/τ} / mean_k e^{βθ_ik/τ}``
    over the ``2(N-1)`` inter- and intra-view negatives, ``Ng_i = Σ_k w_ik e^{θ_ik/τ}``."""
    u, v = F.normalize(h1, dim=1), F.normalize(h2, dim=1)
    n = u.size(0)
    off = ~torch.eye(n, dtype=torch.bool)
    rows = []
    for a, o in ((u, v), (v, u)):
        inter, intra = a @ o.T, a @ a.T
        theta = torch.cat([inter[off].view(n, n - 1), intra[off].view(n, n - 1)], dim=1)
        w = torch.exp(beta * theta / tau)
        ng = (w / w.mean(1, keepdim=True) * torch.exp(theta / tau)).sum(1)
        pos = torch.exp(inter.diagonal() / tau)
        rows.append(-torch.log(pos / (pos + ng)))
    return torch.stack(rows)


def test_the_example_imports_public_names_only():
    code = page_example()
    for module, names in re.findall(r"^from (\S+) import (.+)$", code, flags=re.M):
        if module.startswith("pyg_progcl"):
            assert module == "pyg_progcl.losses", module
            assert {name.strip() for name in names.split(",")} <= set(losses.__all__)
    assert not re.search(r"^import pyg_progcl", code, flags=re.M)


@pytest.mark.parametrize("tau, options, path", PATHS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_the_example_equals_its_dense_formula(example_loss, tau, options, path, reduction):
    loss_fn = example_loss(tau, beta=1.0, reduction=reduction, **options)
    term = loss_fn.negative_term()
    assert choose_path(N, tau, term, loss_fn.block_size, loss_fn.num_negatives).name == path
    h1, h2 = views(n=N)
    expected = reference(h1, h2, tau, 1.0)
    expected = {"mean": expected.mean(), "sum": expected.sum(), "none": expected}[reduction]
    got = loss_fn(h1, h2)
    assert got.shape == expected.shape and got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    weights = torch.rand(got.shape, generator=torch.Generator().manual_seed(1), dtype=got.dtype)
    grads = torch.autograd.grad(got, (h1, h2), weights)  # (each anchor's loss for 'none')
    want = torch.autograd.grad(expected, (h1, h2), weights)
    for a, b in zip(grads, want):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("tau, options", [(0.5, {}), (0.5, {"block_size": 3}), (0.03, {})])
def test_the_example_passes_gradcheck(example_loss, tau, options):
    # (one pass, in one block and in row blocks; τ = 0.03: per direction, in log space)
    h1, h2 = views(n=7, d=3)
    assert torch.autograd.gradcheck(example_loss(tau, beta=0.5, **options), (h1, h2))


def test_the_example_refuses_a_beta_without_weights(example_loss):
    with pytest.raises(ValueError, match="beta"):
        example_loss(0.5, beta=0.0)
