"""The harness's evaluation: the library's linear-probe protocols, link prediction and
clustering (:mod:`pyg_progcl.evaluation`, re-exported here), the probes a run may ask for
(``PROBES``, ``check_probes``) and :func:`mean_std`, the summary of scores over
seeds that results report."""

from __future__ import annotations

import numpy as np

# The library's probe, re-exported for the harness (not part of the public API here).
from ..evaluation import PROTOCOLS as PROTOCOLS
from ..evaluation import SPLITS as SPLITS
from ..evaluation import EdgeSplit as EdgeSplit
from ..evaluation import cluster_scores as cluster_scores
from ..evaluation import evaluate as evaluate
from ..evaluation import gca_protocol as gca_protocol
from ..evaluation import grace_protocol as grace_protocol
from ..evaluation import link_scores as link_scores
from ..evaluation import logistic_regression_probe as logistic_regression_probe
from ..evaluation import public_splits as public_splits
from ..evaluation import random_split as random_split
from ..evaluation import split_edges as split_edges

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
