"""docs/own_loss.md: its example loss, run as the page shows it, against a dense float64
formula on each of the engine's three paths, with each reduction; and the same loss
written here on the contract (``negative_term(block)``), so that the contract is tested
whatever the page holds."""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from helpers import REPO, record_paths, views

import pyg_progcl.losses as losses

PAGE = REPO / "docs" / "own_loss.md"
N = 23
#: ``(tau, options, the engine's path)``: the dense path and row blocks, at τ = 0.5 and at
#: τ = 0.04, where the exponentials of scale 1 + β = 2 leave float32's range (2·2/τ > 80:
#: log-sum-exp), and sampled negatives, all ``N - 1`` of them (so that the loss is exact).
PATHS = [
    (0.5, {}, "dense"),
    (0.5, {"block_size": 7}, "rows"),
    (0.04, {}, "dense"),
    (0.04, {"block_size": 7}, "rows"),
    (0.5, {"num_negatives": N - 1}, "sampled"),
    (0.5, {"num_negatives": N - 1, "block_size": 7}, "sampled"),
]


class ContractLoss(losses.ContrastiveLoss):
    """The page's loss, written here on the contract: ``log Ng`` of a block's anchors."""

    def __init__(self, tau=0.5, beta=1.0, **kwargs):
        super().__init__(tau, **kwargs)
        if not beta > 0:
            raise ValueError(f"`beta` must be > 0 (got {beta})")
        self.beta = beta

    def negative_term(self, block: losses.NegativeBlock):
        log_mean_w = block.log_sum_exp_both(self.beta) - math.log(2 * block.count)
        return block.log_sum_exp_both(1 + self.beta) - log_mean_w


def page_example() -> str:
    """The page's one Python code block."""
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.M | re.S)
    assert len(blocks) == 1, "docs/own_loss.md should hold one ```python block"
    return blocks[0]


@pytest.fixture(scope="module", params=["page", "contract"])
def example_loss(request):
    """The page's ``HardnessWeightedLoss`` as the page defines it, and :class:`ContractLoss`."""
    if request.param == "contract":
        return ContractLoss
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
def test_the_example_equals_its_dense_formula(
    monkeypatch, example_loss, tau, options, path, reduction
):
    loss_fn = example_loss(tau, beta=1.0, reduction=reduction, **options)
    calls = record_paths(monkeypatch, example_loss)
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
    assert calls and {c if c == "dense" else c[0] for c in calls} == {path}


@pytest.mark.parametrize("tau, options", [(0.5, {}), (0.5, {"block_size": 3}), (0.03, {})])
def test_the_example_passes_gradcheck(example_loss, tau, options):
    # (dense and row blocks; τ = 0.03: the exponentials in log space)
    h1, h2 = views(n=7, d=3)
    assert torch.autograd.gradcheck(example_loss(tau, beta=0.5, **options), (h1, h2))


def test_the_example_refuses_a_beta_without_weights(example_loss):
    with pytest.raises(ValueError, match="beta"):
        example_loss(0.5, beta=0.0)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), (1.0, 0.0)])
def test_a_scale_that_is_not_positive_is_refused_in_one_line(scale):
    # exp(0·(-inf)) at the excluded entries would be NaN, a negative scale overflows.
    class ScaledLoss(losses.ContrastiveLoss):
        def negative_term(self, block):
            out = block.log_sum_exp_both(scale)
            return out if out.dim() == 1 else out[0]

    h1, h2 = views(n=6)
    with pytest.raises(ValueError, match="`scale` must be positive and finite"):
        ScaledLoss(0.5)(h1, h2)
