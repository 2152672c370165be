"""Link prediction with frozen node embeddings: a held-out edge split (whole undirected
edges, one non-edge per held-out edge, from ``seed`` alone) and its scores (AUC, AP, OGB's
Hits@K of cosine or inner-product pair scores). Train and embed on ``split.train_data``,
then ``split.scores(z)``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from ._checks import check_choice, check_edge_index, check_int, check_matrix, check_nonnegative

__all__ = ["EdgeSplit", "link_scores", "split_edges"]

#: How :func:`link_scores` scores a node pair from its two embeddings.
LINK_SCORES = ("cosine", "inner")
#: The ``K`` of the Hits@K :func:`link_scores` reports.
HITS_K = (20, 50, 100)


@dataclasses.dataclass(frozen=True)
class EdgeSplit:
    """A graph's edges split for link prediction (:func:`split_edges`).

    Attributes:
        train_data: The graph with the training edges only: every field of the input,
            its ``edge_index`` (and per-edge fields such as ``edge_weight``) without the
            edges of a held-out pair, in either direction. Train, augment and embed on it.
        val_edges, test_edges: Held-out node pairs ``[2, n]`` (``u < v``), one per
            undirected edge.
        val_negatives, test_negatives: As many pairs ``[2, n]`` (``u < v``) that are no
            edge of the input graph, in either direction; distinct, and none in both.
        seed: The seed the split was drawn with.
    """

    train_data: Data
    val_edges: Tensor
    val_negatives: Tensor
    test_edges: Tensor
    test_negatives: Tensor
    seed: int

    def sizes(self) -> dict[str, int]:
        """``train_edges`` (undirected, left to train on), ``val_edges``, ``test_edges``, ``seed``."""
        edge_index = self.train_data.edge_index
        loops = (edge_index[0] == edge_index[1]).cpu()  # (the keys are on the CPU)
        train = _pair_keys(edge_index, self.train_data.num_nodes)[~loops]
        return {
            "train_edges": int(train.unique().numel()),
            "val_edges": int(self.val_edges.size(1)),
            "test_edges": int(self.test_edges.size(1)),
            "seed": int(self.seed),
        }

    def scores(self, z: Tensor, *, score: str = "cosine") -> dict[str, Any]:
        """``{"val": ..., "test": ...}``: :func:`link_scores` of the validation pairs (``None``
        without) and the test pairs, for embeddings ``z`` of :attr:`train_data`."""
        val = None
        if self.val_edges.size(1):
            val = link_scores(z, self.val_edges, self.val_negatives, score=score)
        test = link_scores(z, self.test_edges, self.test_negatives, score=score)
        return {"val": val, "test": test}


def _pair_keys(edge_index: Tensor, num_nodes: int) -> Tensor:
    """One int64 key per edge naming its unordered pair: ``min(u, v) * N + max(u, v)``."""
    row, col = edge_index.long().cpu()
    return torch.minimum(row, col) * num_nodes + torch.maximum(row, col)


def _pairs(keys: Tensor, num_nodes: int) -> Tensor:
    """The node pairs ``[2, n]`` of keys from :func:`_pair_keys`."""
    return torch.stack([keys // num_nodes, keys % num_nodes])


def split_edges(
    data: Data, val_ratio: float = 0.05, test_ratio: float = 0.1, seed: int = 0
) -> EdgeSplit:
    """Splits ``data``'s edges for link prediction before any training on them.

    The undirected edges (pairs ``{u, v}``, ``u != v``) are permuted from ``seed``;
    ``floor(test_ratio E)`` go to the test set, ``floor(val_ratio E)`` (may be 0) to
    validation, and leave the training graph in both directions; each gets one negative, a
    distinct non-edge drawn uniformly. Unlike ``T.RandomLinkSplit``, the global RNG is
    untouched. Other fields of ``data`` are carried along.

    Raises:
        ValueError: where the graph has too few edges (or non-edges) for the split.
    """
    check_nonnegative("val_ratio", val_ratio)
    check_nonnegative("test_ratio", test_ratio)
    if not test_ratio > 0 or val_ratio + test_ratio >= 1:
        raise ValueError(
            f"test_ratio must be > 0 and val_ratio + test_ratio < 1 (got {val_ratio} and "
            f"{test_ratio})"
        )
    edge_index = check_edge_index(data.edge_index)
    num_nodes = int(data.num_nodes or 0)
    keys = _pair_keys(edge_index, num_nodes)
    pairs = keys[edge_index[0].cpu() != edge_index[1].cpu()].unique()  # sorted, no loops
    num_pairs = pairs.numel()
    n_test, n_val = math.floor(test_ratio * num_pairs), math.floor(val_ratio * num_pairs)
    if n_test < 1 or (val_ratio > 0 and n_val < 1) or num_pairs - n_test - n_val < 1:
        need = math.ceil(1 / min(r for r in (val_ratio, test_ratio) if r > 0))
        raise ValueError(
            f"link prediction needs at least {need} undirected edges to hold out "
            f"{val_ratio:.0%} for validation and {test_ratio:.0%} for the test "
            f"(the graph has {num_pairs} edges between {num_nodes} nodes)"
        )
    gen = torch.Generator().manual_seed(int(seed))
    held = pairs[torch.randperm(num_pairs, generator=gen)[: n_test + n_val]]
    test, val = held[:n_test].sort().values, held[n_test:].sort().values
    negatives = _negative_pairs(pairs, num_nodes, n_test + n_val, gen)
    train_data = data.edge_subgraph(~torch.isin(keys, held).to(edge_index.device))
    return EdgeSplit(
        train_data=train_data,
        val_edges=_pairs(val, num_nodes),
        val_negatives=_pairs(negatives[n_test:], num_nodes),
        test_edges=_pairs(test, num_nodes),
        test_negatives=_pairs(negatives[:n_test], num_nodes),
        seed=int(seed),
    )


def _negative_pairs(edges: Tensor, num_nodes: int, count: int, gen: torch.Generator) -> Tensor:
    """``count`` distinct keys of pairs ``u < v`` not in ``edges``, in random order: by
    rejection where non-edges are plenty, else from a permutation of every non-edge."""
    total = num_nodes * (num_nodes - 1) // 2
    if total - edges.numel() < count:
        raise ValueError(
            f"link prediction needs {count} node pairs that are no edge, for as many "
            f"negatives, but the graph's {num_nodes} nodes have only {total - edges.numel()}"
        )
    if total - edges.numel() < 4 * count:  # a nearly complete graph: enumerate
        row, col = torch.triu_indices(num_nodes, num_nodes, offset=1)
        every = row * num_nodes + col
        free = every[~torch.isin(every, edges)]
        return free[torch.randperm(free.numel(), generator=gen)[:count]]
    found = torch.empty(0, dtype=torch.long)
    while found.numel() < count:
        u, v = torch.randint(num_nodes, (2, 2 * count), generator=gen)
        keys = torch.minimum(u, v) * num_nodes + torch.maximum(u, v)
        keys = keys[(u != v) & ~torch.isin(keys, edges) & ~torch.isin(keys, found)]
        first = np.unique(keys.numpy(), return_index=True)[1]  # (each key once, as drawn)
        found = torch.cat([found, keys[torch.from_numpy(np.sort(first))]])
    return found[:count]


def hits_at_k(pos: Tensor, neg: Tensor, k: int) -> float:
    """OGB's Hits@K: the fraction of positive scores above the ``k``-th highest negative
    score (1 where there are fewer than ``k`` negatives, as OGB's evaluator does)."""
    k = check_int("k", k)
    if neg.numel() < k:
        return 1.0
    threshold = torch.topk(neg.flatten(), k).values[-1]
    return float((pos > threshold).double().mean())


def link_scores(
    z: Tensor,
    edges: Tensor,
    negatives: Tensor,
    *,
    score: str = "cosine",
    ks: Sequence[int] = HITS_K,
) -> dict[str, float]:
    """Scores node pairs by their embeddings against negative pairs: scikit-learn's ROC-AUC
    and average precision, OGB's Hits@K per ``ks`` (``{"auc", "ap", "hits@20", ...}``).

    Args:
        z: Frozen embeddings ``[N, d]``.
        edges, negatives: Positive pairs ``[2, P]`` (e.g. a split's ``test_edges``) and
            negative pairs ``[2, Q]``.
        score: ``"cosine"`` (cosine similarity of the two embeddings) or ``"inner"``
            (their inner product, GAE's decoder; the sigmoid would not change a ranking).
    """
    from sklearn.metrics import average_precision_score, roc_auc_score

    check_matrix("embeddings", z)
    check_choice("score", score, LINK_SCORES)
    for name, pairs in (("edges", edges), ("negatives", negatives)):
        check_edge_index(pairs)
        if pairs.size(1) < 1:
            raise ValueError(f"`{name}` needs at least one node pair")
        if int(pairs.min()) < 0 or int(pairs.max()) >= z.size(0):
            raise ValueError(f"`{name}` names a node outside the {z.size(0)} embeddings")
    pos, neg = (pair_scores(z.detach(), pairs, score).cpu() for pairs in (edges, negatives))
    labels = np.concatenate([np.ones(pos.numel()), np.zeros(neg.numel())])
    values = torch.cat([pos, neg]).double().numpy()
    return {
        "auc": float(roc_auc_score(labels, values)),
        "ap": float(average_precision_score(labels, values)),
        **{f"hits@{k}": hits_at_k(pos, neg, k) for k in ks},
    }


def pair_scores(z: Tensor, pairs: Tensor, score: str = "cosine") -> Tensor:
    """Each pair's (``[2, n]``) cosine similarity or inner product of embeddings."""
    a, b = z[pairs[0]], z[pairs[1]]
    if score == "cosine":
        a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    return (a * b).sum(dim=-1)
