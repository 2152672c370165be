"""What the file modules share: one-line error details, non-finite values."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import torch


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (torch's and numpy's run over several)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else "no message"


def uncompiled(module):
    """The module that ``torch.compile(module)`` wrapped (an ``OptimizedModule``'s
    ``_orig_mod``, which holds the parameters), else ``module`` itself."""
    inner = getattr(module, "_orig_mod", None)
    return inner if isinstance(inner, torch.nn.Module) else module


def nonfinite(t: torch.Tensor) -> int:
    """How many NaN or infinite values ``t`` holds, counted in blocks of about 4 M values."""
    if not t.is_floating_point() or t.numel() == 0:
        return 0
    t = t.reshape(1) if t.dim() == 0 else t
    rows = max(1, (1 << 22) // max(1, t[0].numel()))
    return sum(int(block.numel() - torch.isfinite(block).sum()) for block in t.split(rows))


NPY_MAGIC = b"\x93NUMPY"
_PICKLED_CLASS = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")


def load_failure(path: Path, exc: BaseException) -> str:
    """Why ``torch.load(path, weights_only=True)`` raised ``exc``, in a few words, without
    torch's advice to load with ``weights_only=False`` (which would run code from the
    file): the kind of file it is where that is recognisable, else the error's first line."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(NPY_MAGIC))
        if head == NPY_MAGIC:
            return "it is a NumPy .npy file, not a torch file"
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
            if names and all(name.endswith(".npy") for name in names):
                return "it is a NumPy .npz file, not a torch file"
    except Exception:  # (a damaged zip directory: its kind is not recognisable)
        pass
    text = str(exc)
    found = _PICKLED_CLASS.search(text)
    if found:
        return (
            f"it holds a pickled {found.group(1)}, which is not loaded (no code from a file is run)"
        )
    if "Weights only load failed" in text:
        return "it is not a torch file of tensors and plain values"
    return f"corrupt, truncated or another kind of file ({type(exc).__name__}: {first_line(exc)})"
