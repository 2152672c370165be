"""A loss's CPU block matrices, reused from one call to the next."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from torch import Tensor

#: Free block matrices a :class:`BlockPool` holds between calls at most (1 GiB).
POOL_BYTES = 1 << 30


class BlockPool:
    """Free CPU block matrices kept from one loss call to the next.

    Every step allocates the same ``[B, N]`` matrices, and a fresh CPU matrix is faulted
    in and zeroed by the kernel page by page (Amazon-Photo, 2 cores: 0.1–0.5 s of system
    time in a 1.6–2.1 s ProGCL step, the noisiest part of it; < 0.03 s with the pool).
    Each loss module owns a pool (``loss.pool``) holding at most ``max_bytes``; set it to
    0 to allocate anew every call. GPUs bypass it: CUDA's caching allocator does the same.
    Copies and pickles of a pool start empty.
    """

    def __init__(self, max_bytes: int = POOL_BYTES):
        self.max_bytes, self.bytes = max_bytes, 0
        self.free: dict[tuple, list[Tensor]] = {}

    def take(self, rows: int, like: Tensor) -> Tensor:
        """An uninitialised ``[rows, N]`` matrix of ``like``'s dtype and device (``[N, d]``)."""
        free = self.free.get((rows, like.size(0), like.dtype, like.device))
        if not free:
            return like.new_empty(rows, like.size(0))
        mat = free.pop()
        self.bytes -= mat.nbytes
        return mat

    def give(self, mats: Iterable[Optional[Tensor]]) -> None:
        """Takes back whole matrices from :meth:`take` that nothing uses any more."""
        for mat in mats:
            if mat is None or mat.device.type != "cpu" or self.bytes + mat.nbytes > self.max_bytes:
                continue
            self.free.setdefault((*mat.shape, mat.dtype, mat.device), []).append(mat)
            self.bytes += mat.nbytes

    def __deepcopy__(self, memo) -> BlockPool:
        return BlockPool(self.max_bytes)

    def __getstate__(self) -> dict:
        return {"max_bytes": self.max_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["max_bytes"])
