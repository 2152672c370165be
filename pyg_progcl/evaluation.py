"""Evaluation of frozen node embeddings: the linear probe (docs/algorithms.md §6), link
prediction on held-out edges (:func:`split_edges`, :func:`link_scores`) and node
clustering (:func:`cluster_scores`).

Two probe protocols, as in the papers' code: **GCA / ProGCL** (Zhu et al., WWW 2021; Xia
et al., ICML 2022: 10 / 10 / 80 % split, Adam probe) and **GRACE** (Zhu et al., 2020:
10 / 90 % splits, cross-validated liblinear). Accuracies are fractions in ``[0, 1]``.
"""

from __future__ import annotations

import math
import sys
import warnings
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from ._checks import check_choice, check_int, check_matrix, check_nonnegative, check_positive
from ._clusters import cluster_scores
from ._labels import check_labels
from ._links import EdgeSplit, link_scores, split_edges

__all__ = [
    "evaluate",
    "logistic_regression_probe",
    "random_split",
    "split_edges",
    "EdgeSplit",
    "link_scores",
    "cluster_scores",
]

#: The protocols of :func:`evaluate`.
PROTOCOLS = ("gca", "grace")
#: The splits of :func:`evaluate`: random, or the dataset's own masks.
SPLITS = ("random", "public")


def _check_labels(z: Tensor, y: Tensor) -> Tensor:
    check_matrix("embeddings", z)
    return check_labels(y, z.size(0))


def random_split(
    num_nodes: int, train_ratio: float = 0.1, val_ratio: float = 0.1, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor]:
    """A random node split: ``perm = randperm(num_nodes)`` from ``seed`` (not the global
    RNG), ``train = perm[:floor(r_train N)]`` (at least one node), ``val`` the next
    ``floor(r_val N)``, ``test`` the rest.

    Returns:
        ``(train_idx, val_idx, test_idx)`` index tensors (``val_ratio`` may be 0).
    """
    num_nodes = check_int("num_nodes", num_nodes, minimum=3)
    check_positive("train_ratio", train_ratio)
    check_nonnegative("val_ratio", val_ratio)
    if train_ratio + val_ratio >= 1:
        raise ValueError(f"train_ratio + val_ratio must be < 1 (got {train_ratio + val_ratio})")
    perm = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(int(seed)))
    n_train = max(1, int(math.floor(train_ratio * num_nodes)))
    n_val = int(math.floor(val_ratio * num_nodes))
    return perm[:n_train], perm[n_train : n_train + n_val], perm[n_train + n_val :]


def public_splits(data: Data) -> list[tuple[Tensor, Tensor, Tensor]]:
    """The public splits of ``data``'s masks, ``[N]`` (one) or ``[N, S]`` (``S`` splits)."""
    if "train_mask" not in data or "test_mask" not in data:
        raise ValueError("split='public' needs `train_mask` and `test_mask` on the data")
    train, val, test = (data.get(key) for key in ("train_mask", "val_mask", "test_mask"))
    masks = [m.bool() for m in (train, torch.zeros_like(train) if val is None else val, test)]
    count = 1 if masks[0].dim() == 1 else masks[0].size(1)
    return [
        tuple((mask if mask.dim() == 1 else mask[:, i]).nonzero().view(-1) for mask in masks)
        for i in range(count)
    ]


def _ogb_accuracy(name: str):
    sys.modules.setdefault("outdated", None)  # ogb's import-time version check
    from ogb.nodeproppred import Evaluator

    evaluator = Evaluator(name)

    def accuracy(pred: Tensor, y: Tensor) -> float:
        out = evaluator.eval({"y_true": y.view(-1, 1).cpu(), "y_pred": pred.view(-1, 1).cpu()})
        return float(out["acc"])

    return accuracy


def _plain_accuracy(pred: Tensor, y: Tensor) -> float:
    return float((pred == y).float().mean()) if y.numel() else float("nan")


def logistic_regression_probe(
    z: Tensor,
    y: Tensor,
    train_idx: Tensor,
    val_idx: Tensor,
    test_idx: Tensor,
    *,
    epochs: int = 3000,
    lr: float = 0.01,
    weight_decay: float = 0.0,
    eval_every: int = 20,
    seed: int = 0,
    ogb_name: Optional[str] = None,
) -> dict:
    """The GCA code's probe: one linear layer trained with Adam, full batch; the test
    accuracy at the best validation accuracy, checked every ``eval_every`` epochs (without
    validation nodes, after the last): ``{"accuracy", "val_accuracy", "best_epoch"}``.
    Its initial weights come from ``seed`` alone.

    Args:
        z, y: Frozen embeddings ``[N, d]`` and labels ``[N]``.
        train_idx, val_idx, test_idx: Node indices of the split.
        epochs: Training epochs (3000 in the papers).
        lr, weight_decay: Adam's.
        ogb_name: Score with ``ogb.nodeproppred.Evaluator(ogb_name)``.
    """
    y = _check_labels(z, y)
    epochs = check_int("epochs", epochs)
    eval_every = check_int("eval_every", eval_every)
    if train_idx.numel() == 0:
        raise ValueError("the probe needs at least one training node")
    z, y = z.detach(), y.to(z.device)
    train_idx, val_idx, test_idx = (i.to(z.device) for i in (train_idx, val_idx, test_idx))
    num_classes = int(y.max()) + 1
    accuracy = _ogb_accuracy(ogb_name) if ogb_name else _plain_accuracy

    gen = torch.Generator().manual_seed(int(seed))
    bound = 1.0 / math.sqrt(z.size(1))  # nn.Linear's default initialisation
    weight, bias = (
        torch.empty(shape).uniform_(-bound, bound, generator=gen).to(z.device, z.dtype)
        for shape in ((num_classes, z.size(1)), (num_classes,))
    )
    params = [weight.requires_grad_(), bias.requires_grad_()]
    optimizer = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)

    z_train, y_train = z[train_idx], y[train_idx]
    best = {"accuracy": float("nan"), "val_accuracy": -1.0, "best_epoch": 0}
    for epoch in range(1, epochs + 1):
        optimizer.zero_grad()
        F.cross_entropy(F.linear(z_train, weight, bias), y_train).backward()
        optimizer.step()
        if epoch % eval_every and epoch != epochs:
            continue
        with torch.no_grad():
            pred = F.linear(z, weight, bias).argmax(dim=-1)
        val_acc = accuracy(pred[val_idx], y[val_idx]) if val_idx.numel() else 0.0
        if val_acc > best["val_accuracy"] or not val_idx.numel():
            test_acc = accuracy(pred[test_idx], y[test_idx])
            best = {"accuracy": test_acc, "val_accuracy": val_acc, "best_epoch": epoch}
    if not val_idx.numel():
        best["val_accuracy"] = float("nan")
    return best


def gca_protocol(
    z: Tensor,
    y: Tensor,
    *,
    splits: Optional[list[tuple[Tensor, Tensor, Tensor]]] = None,
    train_ratio: float = 0.1,
    val_ratio: float = 0.1,
    seed: int = 0,
    epochs: int = 3000,
    lr: float = 0.01,
    eval_every: int = 20,
    ogb_name: Optional[str] = None,
) -> dict:
    """GCA / ProGCL evaluation: Adam logistic-regression probe, best-validation test accuracy;
    ``{"accuracy", "val_accuracy", "accuracies"}`` (``accuracies``: one per split).

    Args:
        z, y: Frozen embeddings ``[N, d]`` (not normalised) and labels ``[N]``.
        splits: Given splits (e.g. :func:`public_splits`); the accuracy is
            their mean. Default: one :func:`random_split` (10 / 10 / 80).
        seed: Seed of the random split and of the probe's initial weights.
        epochs, lr, eval_every, ogb_name: See :func:`logistic_regression_probe`.
    """
    y = _check_labels(z, y)
    if splits is None:
        splits = [random_split(z.size(0), train_ratio, val_ratio, seed)]
    results = [
        logistic_regression_probe(
            z, y, *split, epochs=epochs, lr=lr, eval_every=eval_every, seed=seed, ogb_name=ogb_name
        )
        for split in splits
    ]
    accs = [r["accuracy"] for r in results]
    return {
        "accuracy": float(np.mean(accs)),
        "val_accuracy": float(np.mean([r["val_accuracy"] for r in results])),
        "accuracies": accs,
    }


def grace_protocol(
    z: Tensor,
    y: Tensor,
    *,
    splits: Optional[list[tuple[Tensor, Tensor, Tensor]]] = None,
    train_ratio: float = 0.1,
    seed: int = 0,
    repeats: int = 3,
    c_grid: Optional[list[float]] = None,
    folds: int = 5,
) -> dict:
    """GRACE evaluation, as its ``eval.py``: L2-normalised embeddings; for each of
    ``repeats`` random ``train_ratio`` / rest splits, one-vs-rest liblinear logistic
    regression on one-hot targets, ``C`` from ``2**-10 ... 2**9`` by ``folds``-fold
    ``GridSearchCV``; the mean test accuracy of the most probable classes. Returns
    ``{"accuracy", "accuracies", "C"}`` (``accuracies`` and ``C``: per split).

    Args:
        z, y: Embeddings ``[N, d]`` and labels ``[N]``.
        splits: Given splits (the validation part is not used) instead of random ones.
        seed: Seed of the random splits.
        c_grid: Values of ``C`` to search.
        folds: Cross-validation folds (fewer when there are fewer training nodes).
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.preprocessing import normalize

    y = _check_labels(z, y)
    repeats = check_int("repeats", repeats, minimum=1)
    if splits is None:
        splits = [
            random_split(z.size(0), train_ratio, 0.0, seed * 1000 + r) for r in range(repeats)
        ]
    grid = {"estimator__C": list(c_grid) if c_grid else [2.0**k for k in range(-10, 10)]}
    X = normalize(z.detach().cpu().double().numpy(), norm="l2")
    labels = y.cpu().numpy()
    onehot = np.eye(int(labels.max()) + 1, dtype=bool)[labels]
    accs, chosen = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.filterwarnings("ignore", message="Label .* present")  # tiny splits
        for train_idx, _, test_idx in splits:
            tr, te = train_idx.cpu().numpy(), test_idx.cpu().numpy()
            clf = OneVsRestClassifier(LogisticRegression(solver="liblinear"))
            if min(int(folds), len(tr)) >= 2:
                clf = GridSearchCV(clf, grid, cv=min(int(folds), len(tr))).fit(X[tr], onehot[tr])
                chosen.append(float(clf.best_params_["estimator__C"]))
            else:  # too few training nodes to cross-validate: C = 1
                clf.fit(X[tr], onehot[tr])
                chosen.append(1.0)
            pred = clf.predict_proba(X[te]).argmax(axis=1)
            accs.append(float((pred == labels[te]).mean()))
    return {"accuracy": float(np.mean(accs)), "accuracies": accs, "C": chosen}


def evaluate(
    z: Tensor,
    data: Data,
    protocol: str = "gca",
    *,
    split: str = "random",
    seed: int = 0,
    probe_epochs: int = 3000,
    ogb_name: Optional[str] = None,
) -> dict:
    """Evaluates embeddings of ``data``'s nodes with one protocol (the split and the
    probe's weights come from ``seed`` alone): the protocol's result dict, whose
    ``"accuracy"`` is in ``[0, 1]``.

    Args:
        z: Frozen embeddings ``[N, d]``.
        data: The graph (``y``, and the masks for ``split="public"``).
        protocol: ``"gca"`` (10/10/80, Adam probe) or ``"grace"`` (10/90, CV).
        split: ``"random"`` or ``"public"`` (the dataset's masks).
        probe_epochs: Epochs of the GCA protocol's probe.
        ogb_name: OGB dataset name, to score with the official evaluator (needs ``ogb``).
    """
    check_choice("protocol", protocol, PROTOCOLS)
    check_choice("split", split, SPLITS)
    splits = public_splits(data) if split == "public" else None
    if protocol == "gca":
        return gca_protocol(
            z, data.y, splits=splits, seed=seed, epochs=probe_epochs, ogb_name=ogb_name
        )
    return grace_protocol(z, data.y, splits=splits, seed=seed)
