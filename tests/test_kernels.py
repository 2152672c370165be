"""The compiled pass of ProGCL (pyg_progcl/losses/mix_kernel.c) against the torch path it
replaces: the same selection, the same values and gradients to rounding, the fallback where
it cannot compile. (The loss tests check both against the dense reference.)"""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from helpers import fitted_mixture, views

from pyg_progcl import ProGCLLoss
from pyg_progcl.losses import kernels
from pyg_progcl.losses.mixing import MixedSums
from pyg_progcl.losses.schedules import as_schedule
from pyg_progcl.losses.selection import largest
from pyg_progcl.losses.weights import HardnessWeights

HAS_COMPILER = shutil.which(os.environ.get("CC", "cc")) is not None
needs_kernel = pytest.mark.skipif(not HAS_COMPILER, reason="no C compiler on this machine")


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """A build of the kernel into an empty cache (and the cached library restored after)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    kernels.library.cache_clear()
    yield tmp_path
    kernels.library.cache_clear()


def _torch_path(monkeypatch):
    monkeypatch.setenv("PYG_PROGCL_KERNELS", "0")


@pytest.fixture
def compiled_calls(monkeypatch):
    """Counts the calls of the compiled passes, so that a comparison with the torch path
    cannot pass by running the torch path twice."""
    calls = {"hardness": 0, "mix_forward": 0, "mix_backward": 0}
    for name in calls:
        fn = getattr(kernels, name)

        def counted(*args, _fn=fn, _name=name, **kwargs):
            calls[_name] += 1
            return _fn(*args, **kwargs)

        monkeypatch.setattr(kernels, name, counted)
    return calls


def _matrices(n, dtype, seed=0, ties=False):
    """Shifted logits of unit rows (τ = 0.4, the diagonal masked) and a fitted mixture's
    ``b`` of them; with ``ties``, ``b`` rounded to 8 levels (ties at every k-th value)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.nn.functional.normalize(torch.randn(n, 6, generator=g, dtype=dtype), dim=1)
    v = torch.nn.functional.normalize(u + 0.6 * torch.randn(n, 6, generator=g, dtype=dtype), dim=1)
    logits = (u @ v.T - 1) / 0.4
    logits.fill_diagonal_(float("-inf"))
    weights = HardnessWeights(fitted_mixture().to(dtype), 0.4, as_schedule("online"))
    with pytest.MonkeyPatch.context() as mp:
        _torch_path(mp)
        b = weights.of_logits(logits)
    b.fill_diagonal_(0.0)
    if ties:
        b = (b * 8).round() / 8
    return logits, b, weights


@needs_kernel
def test_the_kernel_compiles_here_with_openmp(fresh_build):
    lib = kernels.library()
    assert lib is not None and lib.openmp() == 1
    assert len(list(fresh_build.glob("pyg_progcl/mix_kernel_*.so"))) == 1
    kernels.library.cache_clear()
    assert kernels.library() is not None  # loaded from the cache, not built again
    assert len(list(fresh_build.glob("pyg_progcl/*"))) == 1


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("k", [1, 7, 40, 62])
def test_selection_equals_largest(dtype, ties, k):
    # The kernel's idx is largest(b, k): ascending columns, ties at the k-th value from
    # the lowest columns (with ties, most rows need a part of their ties only).
    logits, b, _ = _matrices(63, dtype, ties=ties)
    b[5] = 0.25  # a row of equal values
    perm = torch.randperm(k)
    for view in (logits, logits.T):
        (idx, *_), _ = kernels.mix_forward(b, view, perm, k, 0.4, 1e-8)
        assert torch.equal(idx.long(), largest(b, k, nonnegative=True))


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("floor", [0.0, 0.5])
def test_hardness_equals_the_mixtures(monkeypatch, compiled_calls, dtype, floor):
    logits, _, weights = _matrices(50, dtype)
    logits[0, :5] = torch.tensor([0.0, -5.0, -1e-9, -4.99, -1e-3], dtype=dtype)  # s at 1, 0
    weights.floor = floor
    b = weights.of_logits(logits)
    assert compiled_calls["hardness"] == 1
    _torch_path(monkeypatch)
    expected = weights.of_logits(logits)
    tol = 1e-6 if dtype == torch.float32 else 1e-13
    torch.testing.assert_close(b, expected, rtol=tol, atol=tol)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("threads", [1, 3])
def test_mixing_and_its_backward_equal_the_torch_path(monkeypatch, compiled_calls, dtype, threads):
    logits, b, weights = _matrices(70, dtype, seed=1)
    logits[3, 9] = -2.0 / 0.4 - 1e-3  # a cosine below -1 (rounding), clamped, among the
    b[3, 9] = 0.99  # selected of both directions: no gradient through its own θ_mix
    grad = torch.rand(2, 70, dtype=dtype, generator=torch.Generator().manual_seed(2))
    results = []
    for flag in ("1", "0"):
        monkeypatch.setenv("PYG_PROGCL_KERNELS", flag)
        monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
        term, perm = MixedSums(weights, 25), torch.randperm(25, generator=torch.Generator())
        term.saved = []
        out = torch.stack([term._mix(logits, b, perm, 25), term._mix(logits.T, b, perm, 25)])
        g = torch.zeros_like(logits)
        term.backward(grad, g)
        results.append((out, g))
    assert compiled_calls["mix_forward"] == 2 and compiled_calls["mix_backward"] == 2
    tol = 1e-6 if dtype == torch.float32 else 1e-13
    for a, e in zip(*results):
        torch.testing.assert_close(a, e, rtol=tol, atol=tol)


@needs_kernel
def test_without_openmp_the_row_ranges_run_on_the_pool(monkeypatch, fresh_build):
    monkeypatch.setattr(kernels, "OPENMP", "-fno-openmp")
    assert kernels.library() is not None and kernels.library().openmp() == 0
    logits, b, _ = _matrices(90, torch.float64)
    perm = torch.randperm(30)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    factors, logx = kernels.mix_forward(b, logits.T, perm, 30, 0.4, 1e-8)
    pooled = (*factors, logx)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    factors, logx = kernels.mix_forward(b, logits.T, perm, 30, 0.4, 1e-8)
    for a, e in zip(pooled, (*factors, logx)):
        assert torch.equal(a, e)


def test_without_a_compiler_the_torch_path_runs(monkeypatch, fresh_build):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert kernels.library() is None
    logits, b, _ = _matrices(20, torch.float64)
    assert not kernels.usable(b, logits)
    h1, h2 = views()
    loss = ProGCLLoss(0.4, mode="mix", num_mix=5, mixture=fitted_mixture())
    assert torch.isfinite(loss(h1, h2))


def test_the_switch_turns_the_kernel_off(monkeypatch):
    logits, b, _ = _matrices(20, torch.float64)
    assert kernels.usable(b, logits) == (kernels.library() is not None)
    _torch_path(monkeypatch)
    assert not kernels.usable(b, logits)
    assert not kernels.usable(b.T, logits)  # (and never on a non-contiguous b)


@needs_kernel
@pytest.mark.parametrize("mode", ["weight", "mix"])
def test_the_loss_is_the_same_on_both_paths(monkeypatch, compiled_calls, mode):
    # float64: the kernel's b differs from torch's in the last bits, which cannot change
    # which negatives are the hardest here; values and gradients to rounding.
    h1, h2 = views(n=40, d=8)
    results = []
    for flag in ("1", "0"):
        monkeypatch.setenv("PYG_PROGCL_KERNELS", flag)
        torch.manual_seed(0)
        loss = ProGCLLoss(0.4, mode=mode, num_mix=12, mixture=fitted_mixture())
        out = loss(h1, h2)
        results.append((out, *torch.autograd.grad(out, (h1, h2))))
    assert compiled_calls["hardness"] > 0
    assert (compiled_calls["mix_forward"] == 2) == (mode == "mix")
    for a, e in zip(*results):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)
