"""Files a command writes: checked before the work starts, written atomically after it, and
owned by one run at a time.

An output is written to a temporary file of a unique name in its own folder and renamed
into place (:func:`atomic_write`), so that an interrupted or failed write leaves no
half-written file and never replaces a good file with a broken one. Where an output will
go is checked first (:func:`check_writable`, :func:`check_folder`), so that a bad path
fails before hours of training, not after. A folder that a run keeps writing to (its
checkpoints) is locked for the run (:func:`lock_folder`), and the temporary files that a
killed run left there are removed when the next run takes it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Callable, Union

PathLike = Union[str, os.PathLike]

#: Prefix of the temporary files :func:`atomic_write` creates (and cleans up).
TEMP_PREFIX = ".pyg_progcl-"
#: The lock file :func:`lock_folder` keeps in a folder (it holds the owner's process id).
LOCK_NAME = ".pyg_progcl.lock"

_held: dict[str, int] = {}  # folders this process has locked -> how many times (re-entrant)


def check_writable(path: PathLike, what: str = "output", create: bool = False) -> Path:
    """Checks that a file can be written at ``path``: its folder exists (``create``: is
    created, with its parents) and a file can be created in it, and ``path`` is not a
    folder (an existing file there is replaced). Returns ``path`` as a
    :class:`~pathlib.Path` (``~`` expanded).

    Raises:
        ValueError: naming ``what`` and the reason.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise ValueError(f"{what} {str(path)!r} is a folder, not a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {str(path)!r} exists and is not writable")
    _writable_folder(path.parent, f"{what} {str(path)!r}", create)
    return path


def check_folder(folder: PathLike, what: str = "output folder") -> Path:
    """Creates ``folder`` (with its parents) if missing and checks that files can be
    created in it. Returns it as a :class:`~pathlib.Path` (``~`` expanded).

    Raises:
        ValueError: naming ``what`` and the reason.
    """
    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{what} {str(folder)!r} is a file, not a folder")
    _writable_folder(folder, f"{what} {str(folder)!r}", create=True)
    return folder


def _writable_folder(folder: Path, label: str, create: bool) -> None:
    """Checks (by creating and removing a file: as root, ``os.access`` answers yes even
    on a read-only mount) that files can be created in ``folder``."""
    if not folder.exists():
        blocker = next((p for p in folder.parents if p.exists()), None)
        if blocker is not None and not blocker.is_dir():
            raise ValueError(f"{label}: {str(blocker)!r} is a file, not a folder")
        if not create:
            raise ValueError(f"{label}: folder {str(folder)!r} does not exist")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(
                f"{label}: cannot create folder {str(folder)!r} ({_reason(exc)})"
            ) from None
    if not folder.is_dir():
        raise ValueError(f"{label}: {str(folder)!r} is a file, not a folder")
    try:
        fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".tmp", dir=folder)
    except OSError as exc:
        raise ValueError(
            f"{label}: folder {str(folder)!r} is not writable ({_reason(exc)})"
        ) from None
    os.close(fd)
    os.unlink(name)


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def atomic_write(path: PathLike, write: Callable[[Path], None]) -> Path:
    """Calls ``write(tmp)`` on a new temporary file beside ``path``, flushes it to disk and
    renames it to ``path`` (atomic on POSIX). If ``write`` fails, the temporary file is
    removed and ``path`` is left as it was; if the process is killed, ``path`` is left as
    it was too (a temporary file may remain: see :func:`remove_temporaries`). Returns
    ``path``."""
    path = Path(path).expanduser()
    fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # as open() would create it (mkstemp: 0600)
        os.close(fd)
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _sync_folder(path.parent)
    return path


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


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _sync_folder(folder: Path) -> None:
    """Flushes a folder's entries (the rename) to disk where the platform allows it."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
