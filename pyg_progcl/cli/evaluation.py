"""The harness's evaluation, beside the library's (:mod:`pyg_progcl.evaluation`): the probes a run may ask for
(``PROBES``, ``check_probes``) and :func:`mean_std`, the summary of scores over
seeds that results report."""

from __future__ import annotations

import numpy as np

__all__: list[str] = []

#: The evaluations a training run may end in: the linear probe (node classification), link
#: prediction on held-out edges, node clustering.
PROBES = ("linear", "link", "cluster")


def check_probes(probes) -> tuple[str, ...]:
    """``probes`` as a tuple of distinct names of :data:`PROBES`, in the order given;
    a ``ValueError`` naming the first unknown one, or for none."""
    probes = (probes,) if isinstance(probes, str) else tuple(probes)
    if not probes:
        raise ValueError(f"`probes` must name at least one of {', '.join(PROBES)}")
    for name in probes:
        if name not in PROBES:
            raise ValueError(f"unknown probe {name!r}; use one or more of {', '.join(PROBES)}")
    return tuple(dict.fromkeys(probes))


def mean_std(values) -> tuple[float, float]:
    """Mean and (population) standard deviation, as reported by the papers' code."""
    arr = np.asarray(list(values), dtype=float)
    return float(arr.mean()), float(arr.std())
