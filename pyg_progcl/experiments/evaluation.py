"""The harness's linear-probe evaluation: the library's protocols
(:mod:`pyg_progcl.evaluation`, re-exported here) and :func:`mean_std`, the summary of
accuracies over seeds that results report."""

from __future__ import annotations

import numpy as np

from ..evaluation import (
    PROTOCOLS,
    SPLITS,
    evaluate,
    gca_protocol,
    grace_protocol,
    logistic_regression_probe,
    public_splits,
    random_split,
)

__all__ = [
    "PROTOCOLS",
    "SPLITS",
    "evaluate",
    "gca_protocol",
    "grace_protocol",
    "logistic_regression_probe",
    "mean_std",
    "public_splits",
    "random_split",
]


def mean_std(values) -> tuple[float, float]:
    """Mean and (population) standard deviation, as reported by the papers' code."""
    arr = np.asarray(list(values), dtype=float)
    return float(arr.mean()), float(arr.std())
