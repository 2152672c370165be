"""The command line's torch CPU threads (``--threads``, else :func:`choose_threads`).

torch runs one OpenMP thread per core by default. Its threads meet at a barrier after
every parallel operation, so one thread that another process keeps off its core stalls
all of them: on a shared 2-core machine two threads trained Amazon-Photo 2.4 times slower
than one (and the small synthetic graph 45 times slower), while on an idle machine two
are faster. So the commands take torch's default where the cores are free and fewer
threads where other processes keep them busy (the load average over the last minute),
and say so in one line.
"""

from __future__ import annotations

import os
from typing import Optional

import torch

__all__: list[str] = []


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _load() -> Optional[float]:
    """The system's load average over the last minute (``None`` where unknown)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def choose_threads(
    default: int, cores: int, load: Optional[float], small_graph: bool = False
) -> tuple[int, Optional[str]]:
    """The threads to use without ``--threads``, and why when not torch's ``default``.

    Args:
        default: torch's default thread count.
        cores: Cores this process may run on.
        load: The load average over the last minute (``None``: unknown): the other
            processes' demand for cores (a command just started adds little to it yet).
        small_graph: The built-in synthetic graph, whose operations are too small to
            pay for a second thread.

    Returns:
        ``(threads, reason)``; ``reason`` is ``None`` when ``threads == default``.
    """
    if small_graph:
        threads, reason = 1, "the small synthetic graph gains nothing from more"
    elif load is None:
        return default, None
    else:
        free = int(cores - load + 0.5)  # cores that other processes leave free
        threads = max(1, min(default, free))
        reason = f"the machine is busy: load average {load:.1f} on {cores} cores"
    if threads == default:
        return default, None
    return threads, reason


def set_threads(requested: Optional[int], small_graph: bool = False) -> Optional[str]:
    """Sets torch's CPU threads: ``requested`` (``--threads``), else
    :func:`choose_threads`'s. Returns the line that says what was chosen when that is not
    torch's default (``None`` otherwise), for the command to print once its run is under
    way (a run that fails before gives its one error line alone)."""
    if requested is not None:
        torch.set_num_threads(requested)
        return None
    default = torch.get_num_threads()
    threads, reason = choose_threads(default, _cores(), _load(), small_graph)
    if reason is None:
        return None
    torch.set_num_threads(threads)
    return f"threads: {threads} of torch's {default} ({reason}; --threads N sets them)"
