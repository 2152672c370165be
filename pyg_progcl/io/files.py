"""Files the library writes and reads: outputs checked before the work starts and written
atomically after it, inputs that must be regular files, contents sealed by a checksum."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Union

__all__: list[str] = []

PathLike = Union[str, os.PathLike]

#: Prefix of :func:`atomic_write`'s temporary files, ``TEMP_PREFIX + "<host>-<pid>-<random>.tmp"``.
TEMP_PREFIX = ".pyg_progcl-"
#: Seconds after which a temporary file whose writer cannot be checked counts as left behind.
STALE_AFTER_S = 24 * 3600
_TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + r"([0-9a-f]{8})-(\d+)-.*\.tmp")
#: The errors of a write to a full disk (or a full quota).
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def check_writable(path: PathLike, what: str = "output", create: bool = False) -> Path:
    """Checks that a file can be written at ``path`` (not a folder; its folder exists, or
    with ``create`` is created, and a file can be created in it); a ``ValueError`` names
    ``what`` and the reason. Returns ``path`` as a :class:`~pathlib.Path` (``~`` expanded)."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ValueError(f"{what} {str(path)!r} is a folder, not a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {str(path)!r} exists and is not writable")
    _writable_folder(path.parent, f"{what} {str(path)!r}", create)
    return path


def check_folder(folder: PathLike, what: str = "output folder") -> Path:
    """Creates ``folder`` (with its parents) if missing and checks that files can be
    created in it (a ``ValueError`` names ``what`` and the reason); returns it as a Path."""
    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{what} {str(folder)!r} is a file, not a folder")
    _writable_folder(folder, f"{what} {str(folder)!r}", create=True)
    return folder


def check_input_file(path: PathLike, what: str = "input file") -> Path:
    """Checks that ``path`` names a regular file (through symbolic links); returns it as a
    :class:`~pathlib.Path` (``~`` expanded).

    Raises:
        FileNotFoundError: nothing is there (or a symbolic link to nothing).
        ValueError: naming ``what`` and what is there instead (a folder, a device, ...).
    """
    path = Path(path).expanduser()
    label = f"{what} {str(path)!r}"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{label} does not exist") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"{label} is a loop of symbolic links, not a file") from None
        raise ValueError(f"{label} cannot be read ({_reason(exc)})") from None
    if stat.S_ISREG(mode):
        return path
    kinds = {
        stat.S_IFDIR: "a folder",
        stat.S_IFCHR: "a device",
        stat.S_IFBLK: "a device",
        stat.S_IFIFO: "a pipe",
        stat.S_IFSOCK: "a socket",
    }
    raise ValueError(f"{label} is {kinds.get(stat.S_IFMT(mode), 'not a regular file')}, not a file")


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
    remove_stale_temporaries(folder)
    try:
        fd, name = tempfile.mkstemp(prefix=_temp_prefix(), suffix=".tmp", dir=folder)
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
    renames it to ``path`` (atomic on POSIX): a failed or killed write leaves ``path`` as
    it was. Returns ``path``. A full disk raises a one-line ``OSError``."""
    path = Path(path).expanduser()
    remove_stale_temporaries(path.parent)
    fd, name = tempfile.mkstemp(prefix=_temp_prefix(), suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    replaced = False
    try:
        umask = os.umask(0o022)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as open() would create it (mkstemp: 0600)
        os.close(fd)
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        replaced = True
    except BaseException as exc:
        if not replaced:  # (after the rename, the name is free: not ours to remove)
            with contextlib.suppress(OSError):
                tmp.unlink()
        if isinstance(exc, OSError) and exc.errno in NO_SPACE:
            raise OSError(exc.errno, f"no space left on device to write {path}") from None
        raise
    with contextlib.suppress(OSError):  # (the rename, to disk where the platform allows)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return path


class _WriteRecorder:
    """A file's ``write`` for ``torch.save``, which keeps the ``OSError`` a write raised
    (``torch.save`` turns it into a ``RuntimeError`` that does not say why)."""

    def __init__(self, fh) -> None:
        self.fh, self.error = fh, None
        self.name = fh.name  # (the file's path, as a file object has it)

    def write(self, data) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.fh.flush()


def torch_save(obj: Any, path: PathLike) -> None:
    """``torch.save(obj, path)``; a failed write raises its ``OSError`` (a full disk:
    ``ENOSPC``), not torch's ``RuntimeError`` about the archive's position."""
    import torch  # (here: this module is also loaded alone, without torch)

    with open(path, "wb") as fh:
        recorder = _WriteRecorder(fh)
        try:
            torch.save(obj, recorder)
        except RuntimeError:
            if recorder.error is not None:
                raise recorder.error from None
            raise


def _temp_prefix() -> str:
    """The start of this process's temporary file names (a forked child has its own)."""
    return f"{TEMP_PREFIX}{_host_tag()}-{os.getpid()}-"


def _host_tag() -> str:
    """8 hex digits naming this machine, boot and process-id namespace (within which alone
    process ids are compared)."""
    parts = [socket.gethostname()]
    for source in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        with contextlib.suppress(OSError):
            parts.append(
                os.readlink(source) if source.endswith("/pid") else Path(source).read_text()
            )
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


def _writer_is_gone(path: Path) -> bool:
    """Whether the process that created temporary file ``path`` has ended: by its process
    id where it ran here, else by the file being unchanged for :data:`STALE_AFTER_S`."""
    found = _TEMP_NAME.fullmatch(path.name)
    if found and found.group(1) == _host_tag() and os.name != "nt":
        try:
            os.kill(int(found.group(2)), 0)  # (signal 0: only asks whether the process exists)
        except ProcessLookupError:
            return True
        except (OSError, OverflowError):  # alive under another user, or not a valid id
            return False
        return False
    try:
        return time.time() - path.lstat().st_mtime > STALE_AFTER_S
    except OSError:
        return False


def remove_stale_temporaries(folder: PathLike) -> list[Path]:
    """Removes from ``folder`` the temporary files of :func:`atomic_write` whose writing
    process has ended (killed mid-write); returns them. Other runs' files are left alone."""
    removed = []
    with contextlib.suppress(OSError):
        for tmp in Path(folder).glob(TEMP_PREFIX + "*.tmp"):
            if _writer_is_gone(tmp):
                with contextlib.suppress(OSError):
                    tmp.unlink()
                    removed.append(tmp)
    return removed


def payload_checksum(payload: dict[str, Any]) -> str:
    """SHA-256 of everything in ``payload`` but its ``checksum`` entry (tensors' dtype,
    shape and bytes, other values' type and value, every key, in order)."""
    digest = hashlib.sha256()
    _feed(digest, {k: v for k, v in payload.items() if k != "checksum"})
    return digest.hexdigest()


def _feed(digest, value: Any) -> None:
    import torch  # (here: this module is also loaded alone, without torch)

    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        t = (t.to_dense() if t.layout != torch.strided else t).contiguous().reshape(-1)
        digest.update(f"T{t.dtype}{tuple(value.shape)};".encode())
        digest.update(t.view(torch.uint8).numpy())
    elif isinstance(value, dict):
        digest.update(f"D{len(value)};".encode())
        for key, item in value.items():
            _feed(digest, key)
            _feed(digest, item)
    elif isinstance(value, (list, tuple)):
        digest.update(f"L{len(value)};".encode())
        for item in value:
            _feed(digest, item)
    elif isinstance(value, float):
        digest.update(f"F{value.hex()};".encode())
    elif isinstance(value, bytes):
        digest.update(f"Y{len(value)};".encode() + value)
    else:  # str, int, bool, None, ...
        text = repr(value)
        digest.update(f"{type(value).__name__}{len(text)};{text}".encode())
