"""The compiled pass of ProGCL (pyg_progcl/losses/mix_kernel.c) against the torch path it
replaces: the same selection, the same values and gradients to rounding, the fallback where
it cannot compile. (The loss tests check both against the dense reference.)"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest
import torch
from helpers import REPO, fitted_mixture, views

from pyg_progcl import ProGCLLoss
from pyg_progcl.losses import _kernels as kernels
from pyg_progcl.losses._mixing import MixedSums
from pyg_progcl.losses._selection import largest
from pyg_progcl.losses._weights import HardnessWeights
from pyg_progcl.losses.schedules import as_schedule

HAS_COMPILER = shutil.which(os.environ.get("CC", "cc")) is not None
needs_kernel = pytest.mark.skipif(not HAS_COMPILER, reason="no C compiler on this machine")


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """A build of the kernel into an empty cache (and the cached library restored after);
    the temporary folder (the fallback) is ``tmp_path/"tmp"``; no warning given yet."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("PYG_PROGCL_KERNELS", raising=False)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(kernels, "_WARNED", set(), raising=False)
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


# -- building and loading safely -----------------------------------------------------------

HAS_GCC = shutil.which("gcc") is not None
needs_gcc = pytest.mark.skipif(not HAS_GCC, reason="gcc is not on this machine")
is_root = pytest.mark.skipif(getattr(os, "geteuid", int)() != 0, reason="needs root (chown)")
MARKER_ENV = "PYG_PROGCL_TEST_MARKER"
PLANTED_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    const char *marker = getenv("PYG_PROGCL_TEST_MARKER");
    FILE *f = marker ? fopen(marker, "w") : NULL;
    if (f) fputs("executed\n", f), fclose(f);
}
int unrelated(void) { return 0; }
"""
# A child process: the status as JSON on its last line, after a compiled selection.
STATUS_SCRIPT = """
import json, torch
from pyg_progcl.losses import _kernels as kernels
from pyg_progcl.losses._selection import largest
kernels.library()  # (a truncated library, if mapped, would kill the process here)
status = kernels.compiled_status()
if status["available"]:
    b = torch.rand(40, 40, dtype=torch.float64)
    (idx, *_), _ = kernels.mix_forward(b, b - 1, torch.randperm(6), 6, 0.4, 1e-8)
    assert torch.equal(idx.long(), largest(b, 6, nonnegative=True))
print(json.dumps(status))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(path, bytes)`` of the library as this code builds it into an empty cache."""
    cache = tmp_path_factory.mktemp("built")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(cache))
        kernels.library.cache_clear()
        if kernels.library() is None:
            pytest.skip("the kernel does not build here")
        (path,) = (cache / "pyg_progcl").glob("*.so")
    kernels.library.cache_clear()
    return path, path.read_bytes()


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A shared library without the kernel's functions whose constructor writes the file
    ``$PYG_PROGCL_TEST_MARKER``: it must never be loaded from another user's folder."""
    if not HAS_COMPILER:
        pytest.skip("no C compiler on this machine")
    folder = tmp_path_factory.mktemp("planted")
    (folder / "planted.c").write_text(PLANTED_C)
    cc = shlex.split(os.environ.get("CC", "cc"))
    cmd = [*cc, "-shared", "-fPIC", "-o", str(folder / "planted.so"), str(folder / "planted.c")]
    subprocess.run(cmd, check=True, capture_output=True)
    return (folder / "planted.so").read_bytes()


def _plant(folder: Path, built_name: str, data: bytes) -> list[Path]:
    """Writes ``data`` under the built library's name and, where names carry the content's
    checksum, under the name that matches ``data`` (so only the folder's owner and mode
    can give it away)."""
    names = {built_name}
    hashed = re.fullmatch(r"(mix_kernel_\w+_)[0-9a-f]{24}\.so", built_name)
    if hashed:
        names.add(hashed[1] + hashlib.sha256(data).hexdigest()[:24] + ".so")
    for name in names:
        (folder / name).write_bytes(data)
    return [folder / name for name in names]


def _child(env_update: dict, timeout: int = 300) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PYG_PROGCL_KERNELS"}
    env.update(PYTHONPATH=str(REPO), **env_update)
    return subprocess.Popen(
        [sys.executable, "-c", STATUS_SCRIPT], env=env, cwd=REPO, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _child_status(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"exit status {proc.returncode}:\n{err[-3000:]}"
    return json.loads(out.strip().splitlines()[-1])


@needs_kernel
def test_without_home_or_passwd_entry_it_builds_in_a_private_folder(monkeypatch, fresh_build):
    import pwd

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    with pytest.raises(RuntimeError):
        Path.home()  # (the situation, as Python sees it)
    assert kernels.library() is not None
    fallback = fresh_build / "tmp" / f"pyg_progcl-{os.geteuid()}"
    assert Path(kernels.compiled_status()["library"]).parent == fallback.resolve()
    assert fallback.stat().st_mode & 0o777 == 0o700


REFUSED = ["foreign", "foreign-tmp", "world-writable", "group-writable", "shared-parent"]
REFUSED += ["symlinked-folder", "symlinked-library"]


@needs_kernel
@pytest.mark.parametrize("case", REFUSED)
def test_a_library_others_could_have_written_is_never_loaded(
    monkeypatch, fresh_build, built, planted, case
):
    marker = fresh_build / "marker"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    folder = fresh_build / "pyg_progcl"
    if case in ("foreign", "foreign-tmp"):  # another user's folder, writable by all
        if os.geteuid() != 0:
            pytest.skip("needs root (chown)")
        if case == "foreign-tmp":  # the cache cannot be made: the shared temporary folder
            (fresh_build / "file").write_text("")
            monkeypatch.setenv("XDG_CACHE_HOME", str(fresh_build / "file" / "cache"))
            folder = fresh_build / "tmp" / f"pyg_progcl-{os.geteuid()}"
        folder.mkdir()
        for path in [folder, *_plant(folder, built[0].name, planted)]:
            os.chown(path, 65534, 65534)
            os.chmod(path, 0o777)
    elif case in ("world-writable", "group-writable"):  # the user's, writable by others
        folder.mkdir()
        _plant(folder, built[0].name, planted)
        folder.chmod(0o777 if case == "world-writable" else 0o770)
    elif case == "shared-parent":  # a private folder in a folder all can write
        shared = fresh_build / "shared"
        folder = shared / "pyg_progcl"
        folder.mkdir(parents=True, mode=0o700)
        shared.chmod(0o777)
        monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
        _plant(folder, built[0].name, planted)
    elif case == "symlinked-folder":
        elsewhere = fresh_build / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        _plant(elsewhere, built[0].name, planted)
        folder.symlink_to(elsewhere)
    else:  # symlinks to the library, in a private folder
        folder.mkdir(mode=0o700)
        elsewhere = fresh_build / "elsewhere"
        elsewhere.mkdir()
        for path in _plant(elsewhere, built[0].name, planted):
            (folder / path.name).symlink_to(path)
    assert kernels.library() is not None
    assert not marker.exists(), "a planted library was loaded"
    status = kernels.compiled_status()
    library = Path(status["library"])
    assert status["available"] and not library.is_symlink()
    assert library.parent != folder.resolve() or case == "symlinked-library"


@needs_kernel
def test_a_corrupt_library_is_rebuilt(fresh_build, built):
    folder = fresh_build / "pyg_progcl"
    folder.mkdir(mode=0o700)
    (folder / built[0].name).write_bytes(b"not a shared library\n" * 100)
    assert kernels.library() is not None
    status = kernels.compiled_status()
    assert status["available"] and Path(status["library"]).read_bytes()[:4] == b"\x7fELF"
    assert all(p.read_bytes()[:4] == b"\x7fELF" for p in folder.iterdir())


@needs_kernel
@pytest.mark.slow
def test_a_truncated_library_is_rebuilt_not_mapped(fresh_build, built):
    folder = fresh_build / "pyg_progcl"
    folder.mkdir(mode=0o700)
    (folder / built[0].name).write_bytes(built[1][: len(built[1]) // 2])
    status = _child_status(_child({"XDG_CACHE_HOME": str(fresh_build)}))  # (SIGBUS: dies)
    assert status["available"] and Path(status["library"]).read_bytes()[:4] == b"\x7fELF"


@needs_kernel
def test_a_library_without_the_functions_is_rebuilt_once(monkeypatch, fresh_build, built, planted):
    folder = fresh_build / "pyg_progcl"
    folder.mkdir(mode=0o700)
    _plant(folder, built[0].name, planted)
    assert kernels.library() is not None and kernels.compiled_status()["available"]
    # A build that lacks a function too: one rebuild, then the torch path, with the reason.
    builds = []
    compile_ = kernels._compile
    monkeypatch.setattr(kernels, "_compile", lambda *a: builds.append(a) or compile_(*a))
    monkeypatch.setitem(kernels._SIGNATURES, "not_in_the_source", ([], ctypes.c_int))
    kernels.library.cache_clear()
    assert kernels.library() is None and len(builds) == 1
    assert "not_in_the_source" in kernels.compiled_status()["reason"]


@needs_kernel
@pytest.mark.slow
def test_two_processes_building_at_once_both_load_it(tmp_path):
    (tmp_path / "tmp").mkdir()
    env = {"XDG_CACHE_HOME": str(tmp_path), "TMPDIR": str(tmp_path / "tmp")}
    children = [_child(env) for _ in range(2)]
    for status in [_child_status(child) for child in children]:
        assert status["available"] and status["cached"]
        assert Path(status["library"]).parent == (tmp_path / "pyg_progcl").resolve()
    assert not list((tmp_path / "pyg_progcl").glob(".build-*"))  # (no leftovers)


def test_a_killed_builds_leftover_is_removed_and_a_running_ones_kept(fresh_build):
    folder = fresh_build / "pyg_progcl"
    folder.mkdir(mode=0o700)
    stale, running = folder / ".build-stale.so", folder / ".build-running.so"
    for path in (stale, running):
        path.write_bytes(b"partial")
    hours_ago = time.time() - 3 * 3600
    os.utime(stale, (hours_ago, hours_ago))
    assert kernels.library() is not None
    assert not stale.exists() and running.exists()


@pytest.mark.parametrize("how", ["CC", "PATH"])
def test_without_a_compiler_the_status_says_why(monkeypatch, fresh_build, how):
    if how == "CC":
        monkeypatch.setenv("CC", "/nonexistent/cc")
    else:  # no cc on the PATH
        monkeypatch.delenv("CC", raising=False)
        monkeypatch.setenv("PATH", str(fresh_build / "tmp"))
    status = kernels.compiled_status()
    assert status["available"] is False and status["library"] is None
    assert "no C compiler" in status["reason"] and status["mode"] == "auto"


def test_the_torch_path_warns_once_per_process_at_the_users_call(monkeypatch, fresh_build):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    h1, h2 = views()
    loss = ProGCLLoss(0.4, mode="mix", num_mix=5, mixture=fitted_mixture())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            loss(h1, h2).backward()
    ours = [w for w in caught if issubclass(w.category, kernels.CompiledPassWarning)]
    assert len(ours) == 1 and issubclass(kernels.CompiledPassWarning, UserWarning)
    assert ours[0].filename == __file__  # the user's line, not the package's
    assert "no C compiler" in str(ours[0].message)
    assert "PYG_PROGCL_KERNELS=require" in str(ours[0].message)


FAILING_CC = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "fake-cc 1.0"; exit 0; fi
echo "mix_kernel.c:1:1: error: this compiler refuses (line 1)" >&2
echo "mix_kernel.c:2:1: error: the last words of the compiler" >&2
exit 1
"""
NO_NATIVE_CC = """#!/bin/sh
for arg in "$@"; do
    if [ "$arg" = "-march=native" ]; then echo "error: no -march=native here" >&2; exit 1; fi
done
exec gcc "$@"
"""


def _fake_cc(folder: Path, script: str) -> str:
    path = folder / "fake-cc"
    path.write_text(script)
    path.chmod(0o755)
    return str(path)


def test_require_raises_with_the_compilers_words(monkeypatch, fresh_build):
    monkeypatch.setenv("CC", _fake_cc(fresh_build, FAILING_CC))
    status = kernels.compiled_status()
    assert not status["available"] and "the last words of the compiler" in status["reason"]
    monkeypatch.setenv("PYG_PROGCL_KERNELS", "require")
    assert kernels.compiled_status()["mode"] == "require"  # (the query itself never raises)
    loss = ProGCLLoss(0.4, mode="mix", num_mix=5, mixture=fitted_mixture())
    with pytest.raises(RuntimeError, match="the last words of the compiler"):
        loss(*views())


@needs_gcc
def test_a_failing_march_native_is_retried_without_it(monkeypatch, fresh_build):
    monkeypatch.setenv("CC", _fake_cc(fresh_build, NO_NATIVE_CC))
    assert kernels.library() is not None
    status = kernels.compiled_status()
    assert status["available"] and "-march=native" not in status["flags"]
    assert status["openmp"]  # (only the failing flag dropped)


def test_an_unknown_switch_value_warns_and_means_auto(monkeypatch, fresh_build):
    logits, b, _ = _matrices(20, torch.float64)
    monkeypatch.setenv("PYG_PROGCL_KERNELS", "yes")
    with pytest.warns(kernels.CompiledPassWarning, match="PYG_PROGCL_KERNELS='yes'"):
        assert kernels.usable(b, logits) == (kernels.library() is not None)


@needs_kernel
def test_compiled_status_reports_the_library(monkeypatch, fresh_build):
    from pyg_progcl.losses import compiled_status

    status = compiled_status()  # (builds it)
    assert status["available"] is True and status["reason"] == "" and status["mode"] == "auto"
    library = Path(status["library"])
    assert library.is_file() and library.parent == (fresh_build / "pyg_progcl").resolve()
    assert status["cached"] and status["openmp"] and "-O3" in status["flags"]
    if Path("/proc/cpuinfo").exists() and kernels.platform.machine() == "x86_64":
        assert status["avx2"] == (" avx2" in Path("/proc/cpuinfo").read_text())
    monkeypatch.setenv("PYG_PROGCL_KERNELS", "0")
    off = compiled_status()
    assert off["available"] is False and off["library"] is None and off["mode"] == "off"
    assert "PYG_PROGCL_KERNELS=0" in off["reason"]


@needs_kernel
def test_the_scalar_branch_selects_as_the_avx2_one(monkeypatch, compiled_calls, fresh_build):
    monkeypatch.setattr(kernels, "FLAGS", (*kernels.FLAGS, "-DPYG_PROGCL_NO_AVX2"))
    assert kernels.library().avx2() == 0
    for dtype in (torch.float32, torch.float64):
        for ties in (False, True):
            logits, b, _ = _matrices(63, dtype, ties=ties)
            b[5] = 0.25  # a row of equal values
            for k in (1, 7, 8, 9, 40, 62):
                perm = torch.randperm(k)
                for view in (logits, logits.T):
                    (idx, *_), _ = kernels.mix_forward(b, view, perm, k, 0.4, 1e-8)
                    assert torch.equal(idx.long(), largest(b, k, nonnegative=True))
    h1, h2 = views(n=40, d=8)
    results = []
    for flag in ("1", "0"):
        monkeypatch.setenv("PYG_PROGCL_KERNELS", flag)
        torch.manual_seed(0)
        loss = ProGCLLoss(0.4, mode="mix", num_mix=12, mixture=fitted_mixture())
        out = loss(h1, h2)
        results.append((out, *torch.autograd.grad(out, (h1, h2))))
    assert compiled_calls["mix_forward"] > 0
    for a, e in zip(*results):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)


def _call(name):
    """The call of ``name``'s case with one bad argument (the rest valid)."""
    logits, b, _ = _matrices(20, torch.float64)
    perm, k = torch.randperm(5), 5
    idx, own, total = torch.zeros(20, k, dtype=torch.int32), torch.zeros(20, k), torch.ones(20)
    own, total = own.double(), total.double()
    out = (idx, own, own.clone())
    cases = {
        "b": lambda: kernels.mix_forward(b.T, logits, perm, k, 0.4, 1e-8),
        "b-dtype": lambda: kernels.mix_forward(b.int(), logits, perm, k, 0.4, 1e-8),
        "logits": lambda: kernels.mix_forward(b, logits.float(), perm, k, 0.4, 1e-8),
        "logits-shape": lambda: kernels.mix_forward(b, logits[:, :10], perm, k, 0.4, 1e-8),
        "perm": lambda: kernels.mix_forward(b, logits, torch.tensor([0, 1, 2, 3, 7]), k, 0.4, 0),
        "perm-length": lambda: kernels.mix_forward(b, logits, torch.randperm(4), k, 0.4, 1e-8),
        "k": lambda: kernels.mix_forward(b, logits, torch.randperm(25), 25, 0.4, 1e-8),
        "out[idx]": lambda: kernels.mix_forward(b, logits, perm, k, 0.4, 0, (idx.long(), *out[1:])),
        "out[own]": lambda: kernels.mix_forward(b, logits, perm, k, 0.4, 0, (idx, own[:, :4], own)),
        "hardness-logits": lambda: kernels.hardness(logits.T, b, 0.4, fitted_mixture(), 0.0),
        "hardness-out": lambda: kernels.hardness(logits, b[:, :3], 0.4, fitted_mixture(), 0.0),
        "backward-out": lambda: kernels.mix_backward(
            total, (idx + 9, own, own, total), perm, 0.4, torch.zeros(20, 3, dtype=torch.float64)
        ),
        "backward-grad": lambda: kernels.mix_backward(
            total[:19], (idx, own, own, total), perm, 0.4, torch.zeros_like(b)
        ),
        "backward-total": lambda: kernels.mix_backward(
            total, (idx, own, own, total[:19]), perm, 0.4, torch.zeros_like(b)
        ),
    }
    return cases[name]


ARGUMENT = {"b-dtype": "b", "logits-shape": "logits", "perm-length": "perm"}
ARGUMENT |= {"hardness-logits": "logits", "hardness-out": "out", "backward-out": "out"}
ARGUMENT |= {"backward-grad": "grad", "backward-total": "saved[total]"}


@pytest.mark.parametrize(
    "case", ["b", "b-dtype", "logits", "logits-shape", "perm", "perm-length", "k", "out[idx]",
             "out[own]", "hardness-logits", "hardness-out", "backward-out", "backward-grad",
             "backward-total"],
)  # fmt: skip
def test_bad_arguments_are_refused_before_the_c_call(case):
    call = _call(case)
    with pytest.raises(ValueError, match=re.escape(f"`{ARGUMENT.get(case, case)}`")):
        call()


AARCH64_CPUINFO = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1
"""


def test_the_cache_key_knows_the_cpu_on_aarch64(monkeypatch, tmp_path):
    # /proc/cpuinfo on aarch64 has no `model name` and no `flags`: the key must still
    # tell a Neoverse N1 (part 0xd0c) from a V1 (0xd40).
    texts = [AARCH64_CPUINFO, AARCH64_CPUINFO.replace("0xd0c", "0xd40")]
    texts.append(AARCH64_CPUINFO.replace("50.00", "48.00"))  # (the same CPU)
    ids = []
    for i, text in enumerate(texts):
        (tmp_path / f"cpuinfo{i}").write_text(text)
        ids.append(kernels._cpu_id(str(tmp_path / f"cpuinfo{i}"), str(tmp_path / "no-sys")))
    assert ids[0] and ids[0] != ids[1] and ids[0] == ids[2]
    regs = tmp_path / "sys" / "cpu0" / "regs" / "identification"
    regs.mkdir(parents=True)
    (regs / "midr_el1").write_text("0x00000000413fd0c1\n")
    assert kernels._cpu_id(str(tmp_path / "none"), str(tmp_path / "sys"))  # (MIDR alone)
    keys = []
    for cpu in ids[:2]:
        monkeypatch.setattr(kernels, "_cpu_id", lambda cpu=cpu: cpu)
        keys.append(kernels._key([sys.executable], kernels._attempts()))
    assert keys[0] != keys[1]
    monkeypatch.setattr(kernels, "_cpu_id", lambda: b"")  # an unknown CPU: no native code
    assert all("-march=native" not in flags for flags, _ in kernels._attempts())
