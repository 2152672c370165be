"""The harness's linear-probe evaluation: the library's protocols
(:mod:`pyg_progcl.evaluation`, re-exported here) and :func:`mean_std`, the summary of
accuracies over seeds that results report."""

from __future__ import annotations

import numpy as np

# The library's probe, re-exported for the harness (not part of the public API here).
from ..evaluation import PROTOCOLS as PROTOCOLS
from ..evaluation import SPLITS as SPLITS
from ..evaluation import evaluate as evaluate
from ..evaluation import gca_protocol as gca_protocol
from ..evaluation import grace_protocol as grace_protocol
from ..evaluation import logistic_regression_probe as logistic_regression_probe
from ..evaluation import public_splits as public_splits
from ..evaluation import random_split as random_split

__all__: list[str] = []


def mean_std(values) -> tuple[float, float]:
    """Mean and (population) standard deviation, as reported by the papers' code."""
    arr = np.asarray(list(values), dtype=float)
    return float(arr.mean()), float(arr.std())
