"""Files a command writes beside the library's (:mod:`pyg_progcl.io.files`): outputs that
must not be one another or an input (:func:`check_distinct`), and a folder that a run keeps
writing to (its checkpoints), locked for the run (:func:`lock_folder`); the temporary
files that a killed run left there are removed when the next run takes it
(``remove_temporaries``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Optional

from pyg_progcl.io.files import TEMP_PREFIX, PathLike, atomic_write

#: The lock file :func:`lock_folder` keeps in a folder (it holds the owner's process id).
LOCK_NAME = ".pyg_progcl.lock"

__all__: list[str] = []

_held: dict[str, int] = {}  # folders this process has locked -> how many times (re-entrant)


def same_file(a: PathLike, b: PathLike) -> bool:
    """Whether ``a`` and ``b`` name one file: one path once ``~``, ``..`` and symbolic links
    are resolved, or, where both exist, one file under two names (a hard link, a
    case-insensitive file system)."""
    a, b = Path(a).expanduser(), Path(b).expanduser()
    if _resolved(a) == _resolved(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # (one of them does not exist yet)
        return False


def _resolved(path: Path) -> Path:
    """``path`` resolved, or made absolute where it cannot be (a loop of symbolic links:
    whoever reads it says so)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def check_distinct(
    outputs: Sequence[tuple[str, Optional[PathLike]]],
    inputs: Sequence[tuple[str, Optional[PathLike]]] = (),
) -> None:
    """Checks, before any work, that the files a command writes are distinct and none is a
    file it reads: ``outputs`` and ``inputs`` are ``(what, path)`` pairs (a ``None`` path
    is skipped), compared with ``same_file``.

    Raises:
        ValueError: one line naming both, e.g. ``--save-model 'c.pt' is also
            --save-embeddings`` (writing one would lose the other) or ``--output 'g.npz'
            is the --data graph file`` (writing it would replace the input).
    """
    named = [(what, path) for what, path in outputs if path is not None]
    for i, (what, path) in enumerate(named):
        for other, earlier in named[:i]:
            if same_file(path, earlier):
                raise ValueError(
                    f"{what} {str(path)!r} is also {other}: one file cannot hold both "
                    "(the second would replace the first); give each output its own file"
                )
        for source, given in inputs:
            if given is not None and same_file(path, given):
                raise ValueError(
                    f"{what} {str(path)!r} is {source}: writing it would replace that input; "
                    "write it to another file"
                )


def atomic_write_text(path: PathLike, text: str) -> Path:
    """:func:`atomic_write` of a text file."""
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def remove_temporaries(folder: PathLike, also: tuple[str, ...] = ()) -> list[Path]:
    """Removes the temporary files of :func:`atomic_write` (and those matching the glob
    patterns ``also``) from ``folder``; returns them. Only safe while no other process
    writes there, e.g. under :func:`lock_folder`."""
    removed = []
    for pattern in (TEMP_PREFIX + "*.tmp", *also):
        for tmp in Path(folder).glob(pattern):
            with contextlib.suppress(OSError):
                tmp.unlink()
                removed.append(tmp)
    return removed


@contextlib.contextmanager
def lock_folder(folder: PathLike, what: str = "folder") -> Iterator[Path]:
    """Holds an exclusive lock on ``folder`` (which must exist) while the ``with`` block
    runs, so that two runs never write the same files. Re-entrant within a process; the
    operating system releases it when the process dies, however it dies.

    Raises:
        ValueError: another process holds the lock (naming its process id), at once.
    """
    key = str(Path(folder).expanduser().resolve())
    if key in _held:
        _held[key] += 1
        try:
            yield Path(folder)
        finally:
            _held[key] -= 1
        return
    fd = _acquire(Path(key), what)
    _held[key] = 1
    try:
        yield Path(folder)
    finally:
        del _held[key]
        _release(fd, Path(key))


def _acquire(folder: Path, what: str) -> int:
    """Locks ``folder``'s lock file and writes this process's id into it; returns its fd.
    (The holder removes the file when done: a lock taken on a file removed meanwhile is
    dropped and taken again on the new one.)"""
    path = folder / LOCK_NAME
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            if not _try_lock(fd):
                raise ValueError(
                    f"{what} {str(folder)!r} is in use by another run (process {_owner(fd)}); "
                    "wait for it to end, or use another folder"
                )
            if _same_file(fd, path):
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except OSError:
        return False


def _try_lock(fd: int) -> bool:
    try:
        import fcntl
    except ImportError:  # (not POSIX) msvcrt locks a byte range instead
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _owner(fd: int) -> str:
    """The process id in a lock file another process holds (it writes it right after it
    locks; 'unknown' if that has not happened yet)."""
    import time

    for _ in range(20):
        with contextlib.suppress(OSError):
            os.lseek(fd, 0, os.SEEK_SET)
            text = os.read(fd, 32).decode(errors="replace").strip()
            if text:
                return text
        time.sleep(0.01)
    return "unknown"


def _release(fd: int, folder: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(folder / LOCK_NAME)  # (still locked: no other process holds it)
    os.close(fd)  # (releases the lock)
