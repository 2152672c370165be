"""The worker threads of the losses' CPU passes that release the GIL (numpy's selection,
the compiled passes without OpenMP): one pool per size and process, shared by them."""

from __future__ import annotations

import concurrent.futures
import functools
import os


def thread_pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    """The pool of ``threads`` threads of this process (a forked child makes its own)."""
    return _pool(threads, os.getpid())


@functools.cache
def _pool(threads: int, pid: int) -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="pyg_progcl")
