"""ProGCL's compiled row passes (``mix_kernel.c``): the hardness ``b`` of a block of
logits (ProGCL-weight and -mix), and ProGCL-mix's selection of the hardest negatives,
their mixing and its backward in one pass over each anchor's row, where the torch path
(:class:`~pyg_progcl.losses.mixing.MixedSums`) makes a dozen passes over the matrix.

The C file is compiled at first use by the system's C compiler (``$CC``, else ``cc``; no
Python package is needed), with OpenMP where the compiler has it, cached under
``$XDG_CACHE_HOME/pyg_progcl`` (default ``~/.cache``) per source, flags and CPU, and
loaded with ``ctypes`` (which releases the GIL). In torch's process the OpenMP runtime is
torch's own (``libgomp.so.1``), so the passes run on torch's ``torch.get_num_threads()``
threads. Where no compiler works, or with ``PYG_PROGCL_KERNELS=0``, the torch path runs:
the same selection given the same ``b``, and to rounding the same ``b``, values and
gradients (``tests/test_kernels.py``).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor

from .selection import _pool

SOURCE = Path(__file__).with_name("mix_kernel.c")
# -fno-math-errno: math functions need not set errno (their values are the same), so the
# exp and log loops can call glibc's vector expf and logf (libmvec, linked on x86-64
# Linux). -fopenmp is dropped where the compiler has no OpenMP.
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-std=c99", "-fPIC", "-shared")
OPENMP = "-fopenmp"
LIBS = ("-lm", "-lmvec") if sys.platform == "linux" and platform.machine() == "x86_64" else ("-lm",)

_P, _I = ctypes.c_void_p, ctypes.c_int64
_T = ctypes.c_int  # the threads of a call
_FORWARD_ARGS = [_P, _I, _P, _I, _I, _P, _I, ctypes.c_double, ctypes.c_double]
_FORWARD_ARGS += [_I, _I, _P, _P, _P, _P, _P, _T]
_BACKWARD_ARGS = [_P, _P, _P, _P, _P, _P, _I, ctypes.c_double, _I, _I, _P, _I, _I, _T]
_HARDNESS_ARGS = [_P, _I, _I, *[ctypes.c_double] * 6, _I, _I, _P, _T]
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}


def enabled() -> bool:
    """Whether the compiled pass is wanted (``PYG_PROGCL_KERNELS`` is not ``0``)."""
    return os.environ.get("PYG_PROGCL_KERNELS", "1") != "0"


def usable(b: Tensor, logits: Tensor) -> bool:
    """Whether the compiled passes take these CPU matrices (``b`` contiguous; and compile
    here)."""
    return (
        enabled()
        and b.device.type == "cpu"
        and b.dtype in _SUFFIX
        and logits.dtype == b.dtype
        and b.is_contiguous()
        and b.size(1) < 2**31
        and library() is not None
    )


def hardness(logits: Tensor, out: Tensor, tau: float, mixture, floor: float) -> Tensor:
    """``out = b`` of shifted logits with contiguous rows, as
    :meth:`~pyg_progcl.BetaMixture.hardness_` of ``s = 1 + τ·logit/2`` computes it."""
    n = logits.size(1)
    fn = getattr(library(), "hardness_" + _SUFFIX[out.dtype])
    head = (logits.data_ptr(), logits.stride(0), n, tau / 2, mixture.eps)
    head += (*mixture.log_odds_coefficients(), floor)
    _run(fn, lambda r0, r1: (*head, r0, r1, out.data_ptr()), logits.size(0))
    return out


def mix_forward(
    b: Tensor, logits: Tensor, perm: Tensor, k: int, tau: float, eps: float, out=None
) -> tuple[Tensor, ...]:
    """``((idx, own, pair, total), log X)`` of the anchors whose hardness and logits are
    the rows of ``b`` (contiguous) and ``logits`` (any strides), as ``MixedSums._mix``
    defines them: ``idx`` the ``k`` selected columns per row (int32, ascending),
    ``own``/``pair`` the gradient factors of backward, ``total = X`` (the four are
    :func:`mix_backward`'s ``saved``); the ``[N, k]`` three written to ``out`` if given."""
    n, cols = b.shape
    if out is None:
        out = torch.empty(n, k, dtype=torch.int32), b.new_empty(n, k), b.new_empty(n, k)
    idx, own, pair = out
    total, logx = b.new_empty(n), b.new_empty(n)
    perm = perm.to(torch.int64).contiguous()
    fn = getattr(library(), "mix_forward_" + _SUFFIX[b.dtype])
    head = (b.data_ptr(), cols, logits.data_ptr(), *logits.stride(), perm.data_ptr(), k, tau, eps)
    tail = tuple(t.data_ptr() for t in (idx, own, pair, total, logx))
    _run(fn, lambda r0, r1: (*head, r0, r1, *tail), n)
    return (idx, own, pair, total), logx


def mix_backward(grad: Tensor, saved: tuple, perm: Tensor, tau: float, out: Tensor) -> None:
    """Adds the gradient of :func:`mix_forward`'s ``log X`` (``grad``: ``∂J/∂ log X`` per
    row) to ``out[r, idx[r, a]]`` (``out`` of any strides, ``b``'s dtype)."""
    idx, own, pair, total = saved
    if out.dtype != own.dtype or out.device.type != "cpu":
        raise ValueError(f"`out` must be a CPU {own.dtype} matrix, got {out.dtype} on {out.device}")
    grad, perm = grad.to(own.dtype).contiguous(), perm.to(torch.int64).contiguous()
    fn = getattr(library(), "mix_backward_" + _SUFFIX[own.dtype])
    head = tuple(t.data_ptr() for t in (grad, total, own, pair, idx, perm))
    tail = (out.data_ptr(), *out.stride())
    _run(fn, lambda r0, r1: (*head, idx.size(1), tau, r0, r1, *tail), idx.size(0))


def _run(fn, args, n: int) -> None:
    """``fn(*args(r0, r1), threads)`` covering the rows ``[0, n)`` on
    ``torch.get_num_threads()`` threads: in one call on OpenMP's (torch's own), else in
    one row range per thread of the pool, each call on one thread."""
    threads = max(1, min(torch.get_num_threads(), n))
    if threads == 1 or library().openmp():
        codes = [fn(*args(0, n), threads)]
    else:  # the calling thread takes the first range, the pool's threads the others
        step = -(-n // threads)
        ranges = [(r, min(r + step, n)) for r in range(0, n, step)]
        pool = _pool(threads - 1, os.getpid())
        futures = [pool.submit(lambda r: fn(*args(*r), 1), r) for r in ranges[1:]]
        codes = [fn(*args(*ranges[0]), 1)] + [f.result() for f in futures]
    if any(codes):
        raise MemoryError("ProGCL-mix's compiled pass could not allocate its row scratch")


@functools.cache
def library() -> Optional[ctypes.CDLL]:
    """The compiled ``mix_kernel.c``, built on first use; ``None`` if it cannot be."""
    compiler = os.environ.get("CC", "cc")
    key = hashlib.sha256(SOURCE.read_bytes())
    key.update(" ".join((compiler, OPENMP, *FLAGS, *LIBS)).encode() + _cpu_id())
    try:
        path = _cache_dir() / f"mix_kernel_{key.hexdigest()[:16]}.so"
        if not path.exists():
            _compile(compiler, path)
        lib = ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError):
        return None
    lib.openmp.argtypes, lib.openmp.restype = [], ctypes.c_int
    for suffix in _SUFFIX.values():
        for name, argtypes in (
            ("hardness_", _HARDNESS_ARGS),
            ("mix_forward_", _FORWARD_ARGS),
            ("mix_backward_", _BACKWARD_ARGS),
        ):
            fn = getattr(lib, name + suffix)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return lib


def _compile(compiler: str, path: Path) -> None:
    """Compiles the source to ``path``, with OpenMP if the compiler has it (atomically:
    concurrent processes may race)."""
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        for openmp in ((OPENMP,), ()):
            cmd = [compiler, *FLAGS, *openmp, "-o", tmp, str(SOURCE), *LIBS]
            done = subprocess.run(cmd, capture_output=True, timeout=120)
            if done.returncode == 0:
                os.replace(tmp, path)
                return
        raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout, done.stderr)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _cache_dir() -> Path:
    """``$XDG_CACHE_HOME/pyg_progcl`` (default ``~/.cache``), else a temporary folder."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pyg_progcl"
    for folder in (
        base,
        Path(tempfile.gettempdir()) / f"pyg_progcl-{getattr(os, 'getuid', int)()}",
    ):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if os.access(folder, os.W_OK):
                return folder
        except OSError:
            continue
    raise OSError("no writable folder for the compiled kernel")


def _cpu_id() -> bytes:
    """The CPU's model and feature flags (``-march=native`` code runs on that CPU only)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor().encode()
    wanted = ("model name", "flags")
    return "\n".join(sorted({ln for ln in lines if ln.startswith(wanted)})).encode()
