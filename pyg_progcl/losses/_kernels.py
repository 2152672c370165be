"""ProGCL's compiled row passes (``mix_kernel.c``): the hardness ``b`` of a block of
logits (ProGCL-weight and -mix), and ProGCL-mix's selection of the hardest negatives,
their mixing and its backward in one pass over each anchor's row, where the torch path
(:class:`~pyg_progcl.losses._mixing.MixedSums`) makes a dozen passes over the matrix.

The C file is compiled at first use by the system's C compiler (``$CC``, else ``cc``; no
Python package is needed), with OpenMP where the compiler has it, and loaded with
``ctypes`` (which releases the GIL). In torch's process the OpenMP runtime is torch's own
(``libgomp.so.1``), so the passes run on torch's ``torch.get_num_threads()`` threads.

The library is cached in ``$XDG_CACHE_HOME/pyg_progcl`` (default ``~/.cache``), else in
``<tmp>/pyg_progcl-<uid>``, keyed by the source, the flags, the compiler and its version
and the CPU, and named after its own SHA-256. A folder is used only if it is the user's,
not a symlink and writable by no one else (nor are the folders above it, unless sticky);
otherwise the library is built in a private temporary folder for the process. A cached
file whose content does not match its name is rebuilt, as is one that does not load or
lacks a function (once). Where no compiler works the torch path runs, with one
:class:`CompiledPassWarning` per process; :func:`compiled_status` says why.
``PYG_PROGCL_KERNELS``: ``0`` the torch path, unset or ``auto`` the compiled passes where
they build, ``require`` a :class:`RuntimeError` where they do not. Both paths compute the
same selection given the same ``b``, and to rounding the same ``b``, values and gradients
(``tests/test_kernels.py``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor

from ._engine import thread_pool

SOURCE = Path(__file__).with_name("mix_kernel.c")
# -fno-math-errno: math functions need not set errno (their values are the same), so the
# exp and log loops can call glibc's vector expf and logf (libmvec, linked on x86-64
# Linux). Where a build fails it is retried without -march=native, -lmvec, -fopenmp.
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-std=c99", "-fPIC", "-shared")
NATIVE = "-march=native"
OPENMP = "-fopenmp"
LIBS = ("-lm", "-lmvec") if sys.platform == "linux" and platform.machine() == "x86_64" else ("-lm",)
#: The switch: ``0`` off, unset / ``1`` / ``auto`` where it builds, ``require`` or raise.
ENV = "PYG_PROGCL_KERNELS"
COMPILE_TIMEOUT = 300  # seconds per compiler run

_P, _I = ctypes.c_void_p, ctypes.c_int64
_T = ctypes.c_int  # the threads of a call
_FORWARD_ARGS = [_P, _I, _P, _I, _I, _P, _I, ctypes.c_double, ctypes.c_double]
_FORWARD_ARGS += [_I, _I, _P, _P, _P, _P, _P, _T]
_BACKWARD_ARGS = [_P, _P, _P, _P, _P, _P, _I, ctypes.c_double, _I, _I, _P, _I, _I, _T]
_HARDNESS_ARGS = [_P, _I, _I, *[ctypes.c_double] * 6, _I, _I, _P, _T]
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
_SIGNATURES = {
    "openmp": ([], ctypes.c_int),
    "avx2": ([], ctypes.c_int),
    "build_flags": ([], ctypes.c_char_p),
    **{f"hardness_{s}": (_HARDNESS_ARGS, ctypes.c_int) for s in _SUFFIX.values()},
    **{f"mix_forward_{s}": (_FORWARD_ARGS, ctypes.c_int) for s in _SUFFIX.values()},
    **{f"mix_backward_{s}": (_BACKWARD_ARGS, ctypes.c_int) for s in _SUFFIX.values()},
}
_MAX_LIBRARY_BYTES = 64 << 20
_STATUS: dict = {}
_LOCK = threading.Lock()
_WARNED: set = set()


class CompiledPassWarning(UserWarning):
    """ProGCL's compiled row passes cannot be used, so the (slower) torch path runs; given
    once per process, with the reason (:func:`compiled_status` reports it too)."""


class _UnavailableError(Exception):
    """Why the compiled passes cannot be used (the message is the reason)."""


def mode() -> str:
    """``PYG_PROGCL_KERNELS`` as ``"off"`` (``0``), ``"require"`` or ``"auto"`` (unset,
    ``1``, ``auto``; any other value, with a :class:`CompiledPassWarning`)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value == "0":
        return "off"
    if value == "require":
        return "require"
    if value not in ("", "1", "auto"):
        _warn_once(f"{ENV}={value!r} is not one of 0, 1, auto, require; taken as auto")
    return "auto"


def enabled() -> bool:
    """Whether the compiled pass is wanted (``PYG_PROGCL_KERNELS`` is not ``0``)."""
    return mode() != "off"


def usable(b: Tensor, logits: Tensor) -> bool:
    """Whether the compiled passes take these CPU matrices (``b`` contiguous; and compile
    here). Where they do not compile: warns once, or with ``PYG_PROGCL_KERNELS=require``
    raises a :class:`RuntimeError`."""
    if not (
        enabled()
        and b.device.type == "cpu"
        and b.dtype in _SUFFIX
        and logits.dtype == b.dtype
        and b.is_contiguous()
        and b.size(1) < 2**31 - 8
    ):
        return False
    if library() is not None:
        return True
    reason = _STATUS.get("reason", "")
    if mode() == "require":
        raise RuntimeError(f"ProGCL's compiled row passes are required ({ENV}=require): {reason}")
    _warn_once(
        f"ProGCL's compiled row passes cannot be used, the slower torch path runs: {reason}"
        f"\n({ENV}=0 silences this, {ENV}=require makes it an error)"
    )
    return False


def compiled_status() -> dict:
    """Whether ProGCL's compiled row passes are in use here, building them if not yet tried.

    Returns:
        A dict: ``available`` (bool), ``reason`` (why not; empty when available),
        ``library`` (the loaded file's path, or ``None``), ``mode`` (``"auto"``, ``"off"``
        or ``"require"``, from ``PYG_PROGCL_KERNELS``), ``cached`` (whether the library
        lies in a persistent cache folder), ``flags`` (its compiler flags), ``openmp`` and
        ``avx2`` (bools; ``None`` without a library).
    """
    current = mode()
    if current == "off":
        status = _status(None, f"turned off ({ENV}=0)")
    else:
        library()
        status = dict(_STATUS)
    return {**status, "mode": current}


def hardness(logits: Tensor, out: Tensor, tau: float, mixture, floor: float) -> Tensor:
    """``out = b`` of shifted logits with contiguous rows, as
    :meth:`~pyg_progcl.BetaMixture.hardness_` of ``s = 1 + τ·logit/2`` computes it."""
    _check("logits", logits, None, _float("logits", logits), rows=True)
    _check("out", out, tuple(logits.shape), logits.dtype, contiguous=True)
    n = logits.size(1)
    fn = getattr(_loaded(), "hardness_" + _SUFFIX[out.dtype])
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
    _check("b", b, None, _float("b", b), contiguous=True)
    n, cols = b.shape
    _check("logits", logits, (n, cols), b.dtype)
    if not 1 <= k <= cols or cols >= 2**31 - 8:
        raise ValueError(f"`k` must lie in [1, {cols}] (the columns of `b`), got {k}")
    perm = _permutation(perm, k)
    if out is None:
        out = torch.empty(n, k, dtype=torch.int32), b.new_empty(n, k), b.new_empty(n, k)
    for name, t, dtype in zip(("idx", "own", "pair"), out, (torch.int32, b.dtype, b.dtype)):
        _check(f"out[{name}]", t, (n, k), dtype, contiguous=True)
    idx, own, pair = out
    total, logx = b.new_empty(n), b.new_empty(n)
    fn = getattr(_loaded(), "mix_forward_" + _SUFFIX[b.dtype])
    head = (b.data_ptr(), cols, logits.data_ptr(), *logits.stride(), perm.data_ptr(), k, tau, eps)
    tail = tuple(t.data_ptr() for t in (idx, own, pair, total, logx))
    _run(fn, lambda r0, r1: (*head, r0, r1, *tail), n)
    return (idx, own, pair, total), logx


def mix_backward(grad: Tensor, saved: tuple, perm: Tensor, tau: float, out: Tensor) -> None:
    """Adds the gradient of :func:`mix_forward`'s ``log X`` (``grad``: ``∂J/∂ log X`` per
    row) to ``out[r, idx[r, a]]`` (``out`` of any strides, ``b``'s dtype)."""
    idx, own, pair, total = saved
    _check("saved[own]", own, None, _float("saved[own]", own), contiguous=True)
    n, k = own.shape
    _check("saved[idx]", idx, (n, k), torch.int32, contiguous=True)
    _check("saved[pair]", pair, (n, k), own.dtype, contiguous=True)
    _check("saved[total]", total, (n,), own.dtype, contiguous=True)
    _check("out", out, None, own.dtype)
    if out.size(0) != n or (
        idx.numel() and not 0 <= int(idx.min()) <= int(idx.max()) < out.size(1)
    ):
        raise ValueError(f"`out` of shape {tuple(out.shape)} does not hold the selected columns")
    grad, perm = grad.to(own.dtype).contiguous(), _permutation(perm, k)
    _check("grad", grad, (n,), own.dtype)
    fn = getattr(_loaded(), "mix_backward_" + _SUFFIX[own.dtype])
    head = tuple(t.data_ptr() for t in (grad, total, own, pair, idx, perm))
    tail = (out.data_ptr(), *out.stride())
    _run(fn, lambda r0, r1: (*head, k, tau, r0, r1, *tail), n)


def _loaded() -> ctypes.CDLL:
    """:func:`library`, or a RuntimeError with the reason where it is not available."""
    lib = library()
    if lib is None:
        raise RuntimeError(f"ProGCL's compiled row passes are not available: {_STATUS['reason']}")
    return lib


def _check(name: str, t: Tensor, shape, dtype, contiguous: bool = False, rows: bool = False):
    """Raises a ValueError naming ``name`` unless ``t`` is a CPU tensor of ``dtype``,
    ``shape`` (or any 2-D one) and the strides the C pass reads."""
    if not isinstance(t, Tensor):
        raise ValueError(f"`{name}` must be a tensor, got {type(t).__name__}")
    found = f"{t.dtype} {tuple(t.shape)} on {t.device} with strides {t.stride()}"
    wanted = "a contiguous " if contiguous else "a "
    wanted += f"CPU {dtype} tensor of shape {shape if shape is not None else '[N, M]'}"
    ok = t.device.type == "cpu" and t.dtype == dtype
    ok = ok and (tuple(t.shape) == shape if shape is not None else t.dim() == 2)
    ok = ok and (not contiguous or t.is_contiguous())
    ok = ok and (not rows or t.size(-1) <= 1 or t.stride(-1) == 1)
    if not ok:
        raise ValueError(f"`{name}` must be {wanted}{' (rows contiguous)' * rows}, got {found}")


def _float(name: str, t: Tensor) -> torch.dtype:
    """``t``'s dtype if the C passes have it (float32, float64), else a ValueError."""
    if not isinstance(t, Tensor) or t.dtype not in _SUFFIX:
        raise ValueError(f"`{name}` must be a float32 or float64 tensor, got {t!r:.80}")
    return t.dtype


def _permutation(perm: Tensor, k: int) -> Tensor:
    """``perm`` as a contiguous CPU int64 vector of ``k`` positions in ``[0, k)``."""
    if not isinstance(perm, Tensor) or perm.shape != (k,) or perm.is_floating_point():
        raise ValueError(f"`perm` must be an integer vector of {k} positions, got {perm!r}")
    perm = perm.to("cpu", torch.int64).contiguous()
    if k and not 0 <= int(perm.min()) <= int(perm.max()) < k:
        raise ValueError(f"`perm` must hold positions in [0, {k}), got {perm.tolist()}")
    return perm


def _run(fn, args, n: int) -> None:
    """``fn(*args(r0, r1), threads)`` covering the rows ``[0, n)`` on
    ``torch.get_num_threads()`` threads: in one call on OpenMP's (torch's own), else in
    one row range per thread of the pool, each call on one thread."""
    threads = max(1, min(torch.get_num_threads(), n))
    if threads == 1 or _loaded().openmp():
        codes = [fn(*args(0, n), threads)]
    else:  # the calling thread takes the first range, the pool's threads the others
        step = -(-n // threads)
        ranges = [(r, min(r + step, n)) for r in range(0, n, step)]
        pool = thread_pool(threads - 1)
        futures = [pool.submit(lambda r: fn(*args(*r), 1), r) for r in ranges[1:]]
        codes = [fn(*args(*ranges[0]), 1)] + [f.result() for f in futures]
    if any(codes):
        raise MemoryError("ProGCL-mix's compiled pass could not allocate its row scratch")


def _warn_once(message: str) -> None:
    """A :class:`CompiledPassWarning` at the user's call, once per process and message kind."""
    kind = message.split(":", 1)[0]
    if kind in _WARNED:
        return
    _WARNED.add(kind)
    warnings.warn(message, CompiledPassWarning, stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    """``warnings.warn``'s stacklevel of the innermost caller outside pyg_progcl and torch
    (counted from the function that calls ``warnings.warn``)."""
    inside = (str(Path(__file__).parents[1]) + os.sep, os.path.dirname(torch.__file__) + os.sep)
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
    return level


# ---------------------------------------------------------------------------- the build


@functools.cache
def library() -> Optional[ctypes.CDLL]:
    """The compiled ``mix_kernel.c``, built on first use; ``None`` if it cannot be (the
    reason: :func:`compiled_status`). Never raises for the environment's sake."""
    global _STATUS
    with _LOCK:
        try:
            lib, path, cached = _load()
        except Exception as err:  # a compiler, a folder, a file: the torch path runs
            reason = (
                str(err) if isinstance(err, _UnavailableError) else f"{type(err).__name__}: {err}"
            )
            _STATUS = _status(None, reason or type(err).__name__)
            return None
        _STATUS = _status(lib, "", path, cached)
        return lib


def _status(lib, reason: str, path: Optional[Path] = None, cached: bool = False) -> dict:
    """:func:`compiled_status`'s dict (without ``mode``)."""
    return {
        "available": lib is not None,
        "reason": reason,
        "library": None if path is None else str(path),
        "cached": cached,
        "flags": None if lib is None else lib.build_flags().decode(errors="replace"),
        "openmp": None if lib is None else bool(lib.openmp()),
        "avx2": None if lib is None else bool(lib.avx2()),
    }


def _load() -> tuple[ctypes.CDLL, Path, bool]:
    """``(library, its path, whether cached)``: from the cache, or built into it, or
    built into a private temporary folder. Raises :class:`_UnavailableError`."""
    compiler = _compiler()
    attempts = _attempts()
    prefix = f"mix_kernel_{_key(compiler, attempts)}_"
    folder = _cache_dir()
    if folder is not None:
        try:
            lib, path = _load_cached(folder, prefix, compiler, attempts)
            return lib, path, True
        except OSError:  # (such as a full disk) the private folder below
            pass
    folder = tempfile.mkdtemp(prefix="pyg_progcl-")
    atexit.register(shutil.rmtree, folder, True)
    folder = _private_dir(Path(folder))
    path = _build(folder, prefix, compiler, attempts)
    return _open(path), path, False


def _load_cached(folder: Path, prefix: str, compiler: list, attempts: list):
    """``(library, path)`` of a verified cached build, else of a new one (rebuilt once if
    the cached file does not load or lacks a function)."""
    _remove_stale_builds(folder, len(attempts))
    for path in sorted(folder.glob(prefix + "*.so")):
        try:
            return _open(path), path
        except _UnavailableError:  # a wrong checksum, no ELF, missing functions
            _unlink(path)
    path = _build(folder, prefix, compiler, attempts)
    return _open(path), path


def _open(path: Path) -> ctypes.CDLL:
    """The library at ``path`` if it is a private regular file whose SHA-256 matches its
    name (else it may be truncated: never mapped) and it has every function."""
    data = _read_private(path)
    if not path.stem.endswith("_" + hashlib.sha256(data).hexdigest()[:24]):
        raise _UnavailableError(f"{path} does not match its checksum (truncated or corrupt)")
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as err:
        raise _UnavailableError(f"{path} does not load: {err}") from None
    missing = [name for name in _SIGNATURES if not hasattr(lib, name)]
    if missing:
        _dlclose(lib)
        raise _UnavailableError(f"{path} lacks the functions {', '.join(missing)}")
    for name, (argtypes, restype) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
    return lib


def _remove_stale_builds(folder: Path, attempts: int) -> None:
    """Removes the partial outputs of builds that were killed (older than any running
    build can be: two compiler timeouts per flag set of the ``attempts``)."""
    cutoff = time.time() - 2 * COMPILE_TIMEOUT * attempts
    for path in folder.glob(".build-*.so"):
        with contextlib.suppress(OSError):
            if path.lstat().st_mtime < cutoff:
                path.unlink()


def _build(folder: Path, prefix: str, compiler: list, attempts: list) -> Path:
    """Compiles the source into ``folder`` (private) under a unique name, then renames it
    to ``prefix + <its SHA-256>.so`` (atomic: concurrent builds cannot clash)."""
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=folder)
    os.close(fd)
    try:
        _compile(compiler, tmp, attempts)
        os.chmod(tmp, 0o700)
        path = folder / f"{prefix}{hashlib.sha256(_read_private(Path(tmp))).hexdigest()[:24]}.so"
        os.replace(tmp, path)
        return path
    finally:
        _unlink(Path(tmp))


def _compile(compiler: list, out: str, attempts: list) -> None:
    """Runs the compiler with each flag set of ``attempts`` until one succeeds; raises
    :class:`_UnavailableError` with the last lines of its output if none does."""
    for flags, libs in attempts:
        described = shlex.join((*flags, *libs)).replace("\\", "/").replace('"', "'")
        cmd = [*compiler, *flags, f'-DPYG_PROGCL_FLAGS="{described}"', "-o", out]
        cmd += [str(SOURCE), *libs]
        try:
            done = subprocess.run(
                cmd, capture_output=True, timeout=COMPILE_TIMEOUT, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.SubprocessError) as err:
            raise _UnavailableError(
                f"the C compiler could not run ({shlex.join(cmd)}): {err}"
            ) from None
        if done.returncode == 0:
            return
    output = (done.stdout + done.stderr).decode(errors="replace").strip().splitlines()
    tail = "\n".join(output[-8:]) or f"exit status {done.returncode}"
    raise _UnavailableError(f"the C compiler failed ({shlex.join(cmd)}):\n{tail}")


def _compiler() -> list[str]:
    """``$CC`` (else ``cc``) as an argument list with its executable's full path."""
    spec = os.environ.get("CC") or "cc"
    argv = shlex.split(spec)
    exe = shutil.which(argv[0]) if argv else None
    if exe is None:
        raise _UnavailableError(f"no C compiler: {spec!r} was not found (set CC to one)")
    return [exe, *argv[1:]]


def _attempts() -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """The ``(flags, libraries)`` to try in order: all, then without ``-fopenmp``, without
    ``-lmvec``, without ``-march=native`` (never with it where the CPU is unknown)."""
    plain = tuple(f for f in FLAGS if f != NATIVE)
    marches = (FLAGS, plain) if _cpu_id() else (plain,)
    attempts = []
    for flags in marches:
        for libs in (LIBS, ("-lm",)):
            for openmp in ((OPENMP,), ()):
                if (flags + openmp, libs) not in attempts:
                    attempts.append((flags + openmp, libs))
    return attempts


def _key(compiler: list, attempts: list) -> str:
    """A hash of the source, the flags, the compiler and its version, and the CPU."""
    try:
        done = subprocess.run(
            [*compiler, "--version"], capture_output=True, timeout=60, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise _UnavailableError(f"the C compiler {compiler[0]} does not run: {err}") from None
    if done.returncode != 0:
        raise _UnavailableError(
            f"`{shlex.join(compiler)} --version` failed: {done.stderr[-500:]!r}"
        )
    version = (done.stdout.decode(errors="replace").strip().splitlines() or [""])[0]
    key = hashlib.sha256(SOURCE.read_bytes())
    for part in (compiler, version, attempts, _cpu_id(), sys.platform, platform.machine()):
        key.update(repr(part).encode() + b"\0")
    return key.hexdigest()[:20]


def _cpu_id(cpuinfo: str = "/proc/cpuinfo", cpus: str = "/sys/devices/system/cpu") -> bytes:
    """What ``-march=native`` code depends on: the CPU's model and features (x86: model
    name, flags; aarch64: implementer, part, variant, features, MIDR), or b"" if unknown."""
    fields = {"vendor_id", "model name", "flags", "cpu family", "model", "cpu", "isa"}
    fields |= {"CPU implementer", "CPU architecture", "CPU variant", "CPU part", "Features"}
    try:
        lines = Path(cpuinfo).read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    found = {ln.strip() for ln in lines if ":" in ln and ln.split(":", 1)[0].strip() in fields}
    for midr in Path(cpus).glob("cpu[0-9]*/regs/identification/midr_el1"):
        with contextlib.suppress(OSError):
            found.add("MIDR " + midr.read_text().strip())
    return "\n".join(sorted(found)).encode()


# ---------------------------------------------------------------------------- the folders


def _cache_dir() -> Optional[Path]:
    """A private persistent folder: ``$XDG_CACHE_HOME/pyg_progcl`` (default ``~/.cache``),
    else ``<tmp>/pyg_progcl-<uid>``; ``None`` if neither is (or can be made) private."""
    for folder in _cache_candidates():
        try:
            return _private_dir(folder, create=True)
        except (OSError, _UnavailableError):
            continue
    return None


def _cache_candidates():
    """The folders :func:`_cache_dir` tries, in order (no home: none from it)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    try:
        base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    except (RuntimeError, KeyError, OSError):  # no HOME and no passwd entry
        base = None
    if base is not None and base.is_absolute():
        yield base / "pyg_progcl"
    try:
        yield Path(tempfile.gettempdir()) / f"pyg_progcl-{os.geteuid()}"
    except (OSError, AttributeError):  # no temporary folder (or no uids)
        return


def _private_dir(folder: Path, create: bool = False) -> Path:
    """``folder`` (created ``0700`` if missing and ``create``), resolved, if no other user
    can write or replace it: not a symlink, the user's, not group/other-writable, and every
    folder above it root's or the user's and not group/other-writable unless sticky."""
    if create:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
    st = os.lstat(folder)
    uid = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        raise _UnavailableError(f"{folder} is not a folder (or a symlink)")
    if st.st_uid != uid or st.st_mode & 0o022:
        raise _UnavailableError(f"{folder} is another user's or writable by others")
    real = Path(os.path.realpath(folder))
    for parent in real.parents:
        pst = os.lstat(parent)
        shared = pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX
        if pst.st_uid not in (0, uid) or shared or stat.S_ISLNK(pst.st_mode):
            raise _UnavailableError(f"{parent} (above {folder}) is writable by other users")
    if os.lstat(real)[stat.ST_INO] != st.st_ino:
        raise _UnavailableError(f"{folder} changed while checked")
    return real


def _read_private(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file, not a symlink, of the user's and
    writable by no one else."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise _UnavailableError(f"{path} cannot be opened (a symlink?): {err}") from None
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise _UnavailableError(f"{path} is not a private regular file")
        if st.st_size > _MAX_LIBRARY_BYTES:
            raise _UnavailableError(f"{path} is too large for the library")
        return file.read()


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _dlclose(lib: ctypes.CDLL) -> None:
    """Unloads a library that will not be used (so that a rebuild under its name loads)."""
    try:
        import _ctypes

        _ctypes.dlclose(lib._handle)
    except (ImportError, AttributeError, OSError):
        pass
