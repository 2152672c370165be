"""Node clustering with frozen node embeddings: k-means (a cluster per class) on the
L2-normalised embeddings, scored by NMI, ARI and the accuracy of the best one-to-one
matching of clusters to classes."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ._checks import check_bool, check_int, check_matrix
from ._labels import check_labels

__all__ = ["cluster_scores"]


def matched_accuracy(y_true, y_pred) -> float:
    """Clustering accuracy: the fraction of nodes whose cluster (``y_pred``) maps to their
    class (``y_true``) under the best one-to-one map (``linear_sum_assignment`` on the
    contingency table)."""
    from scipy.optimize import linear_sum_assignment
    from sklearn.metrics.cluster import contingency_matrix

    y_true, y_pred = (np.asarray(torch.as_tensor(v).cpu()).ravel() for v in (y_true, y_pred))
    if y_true.shape != y_pred.shape or y_true.size == 0:
        raise ValueError(
            f"`y_true` and `y_pred` must hold one id per node, as many of each (got "
            f"{y_true.size} and {y_pred.size})"
        )
    table = contingency_matrix(y_true, y_pred)
    rows, cols = linear_sum_assignment(table, maximize=True)
    return float(table[rows, cols].sum() / y_true.size)


def cluster_scores(
    z: Tensor,
    y: Tensor,
    *,
    seed: int = 0,
    n_init: int = 10,
    normalize: bool = True,
) -> dict:
    """k-means on the embeddings, scored against the node labels: ``{"nmi", "ari", "acc",
    "n_clusters"}``, scikit-learn's NMI and ARI and the matched accuracy.

    Args:
        z, y: Frozen embeddings ``[N, d]`` and class ids ``[N]`` (a cluster per class present).
        seed, n_init: k-means's ``random_state`` and initialisations (least inertia kept).
        normalize: Cluster the L2-normalised embeddings (else the raw ones).

    Raises:
        ValueError: without labels, or with fewer than two classes.
    """
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    check_matrix("embeddings", z)
    if y is None:
        raise ValueError("clustering scores need node labels `y`; the graph has none")
    labels = check_labels(y, z.size(0)).cpu().numpy()
    n_init = check_int("n_init", n_init)
    check_bool("normalize", normalize)
    k = int(np.unique(labels).size)
    if k < 2:
        raise ValueError(f"clustering scores need at least two classes (got {k})")
    X = z.detach().cpu().double()
    if normalize:
        X = torch.nn.functional.normalize(X, dim=-1)
    pred = KMeans(n_clusters=k, n_init=n_init, random_state=int(seed)).fit_predict(X.numpy())
    return {
        "nmi": float(normalized_mutual_info_score(labels, pred)),
        "ari": float(adjusted_rand_score(labels, pred)),
        "acc": matched_accuracy(labels, pred),
        "n_clusters": k,
    }
