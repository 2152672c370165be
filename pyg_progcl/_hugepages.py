"""Opting in to transparent huge pages for torch's CPU allocator."""

from __future__ import annotations

import os
import sys
import warnings

#: Read by torch's CPU allocator at its first allocation, and never again.
THP_ENV = "THP_MEM_ALLOC_ENABLE"


def enable_huge_pages() -> bool:
    """Asks torch's CPU allocator for transparent huge pages; call it before any tensor exists.

    The losses allocate several ``N×N`` (or ``B×N``) float matrices per step; with 4 KiB
    pages their page faults cost a few per cent of a training step on the CPU
    (docs/design.md). torch reads ``THP_MEM_ALLOC_ENABLE``
    once, at its first allocation: this sets it to ``1`` unless it is already set (so
    ``THP_MEM_ALLOC_ENABLE=0`` in the environment opts out). ``python -m pyg_progcl``
    calls it; importing the package does not.

    Returns:
        Whether it can still take effect: ``False``, with a warning, once PyTorch
        Geometric is imported (its import allocates tensors); then set
        ``THP_MEM_ALLOC_ENABLE=1`` in the environment before starting Python instead.
    """
    os.environ.setdefault(THP_ENV, "1")
    if "torch_geometric" in sys.modules:
        warnings.warn(
            "enable_huge_pages() was called after tensors were allocated and has no effect; "
            f"call it before importing torch_geometric, or set {THP_ENV}=1 before starting "
            "Python",
            stacklevel=2,
        )
        return False
    return True
