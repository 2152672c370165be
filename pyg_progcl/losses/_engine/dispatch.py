"""The dispatcher: which path computes a loss, decided up front from the inputs and options.

==============  ==================================================================  ==============
path            when                                                                memory
==============  ==================================================================  ==============
``sampled``     ``num_negatives=k``: ``k`` uniform negatives per anchor and view    ``O(B·k)``
``one-pass``    all anchors, and the loss's ``log Ng`` follows from exponential     ``O(B·N)``
                sums (:class:`~.onepass.ExpSums`) that stay normal floats at this
                ``τ`` (with an extra term, ProGCL-mix: one block of them, O(N²))
``dense``       otherwise, one block of all ``N`` anchors per direction             ``O(N²)``
``row-blocks``  otherwise (and for a part of the anchors), ``B`` anchors per        ``O(B·N)``
                block, recomputed in backward
==============  ==================================================================  ==============

``B`` is ``block_size``, or chosen: all ``N`` anchors up to :data:`DENSE_MAX_NODES` nodes
(:data:`WHOLE_MATRIX_MAX_NODES` for a term with an extra term on the one-pass path), else
:data:`BLOCK_ELEMENTS` ``/ N``. The one-pass engine works in linear space; anchors
whose ProGCL weights underflow there are recomputed on the row-block path in log space.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .blocks import LogNegatives, NegativeBlock
from .onepass import ExpSums, one_pass_losses
from .ops import normalize_views
from .per_direction import chosen_anchor_losses, dense_losses, row_block_losses, sampled_losses
from .pool import BlockPool

#: Above this many nodes the losses switch to row blocks when ``block_size`` is ``None``.
DENSE_MAX_NODES = 4096
#: The same for a term with an extra term on the one-pass path (ProGCL-mix), which needs
#: all anchors in one block: 2^26 elements (256 MiB of float32) per ``N×N`` matrix.
WHOLE_MATRIX_MAX_NODES = 8192
#: Elements of one ``B×N`` block chosen automatically (32 MiB per float32 matrix).
BLOCK_ELEMENTS = 1 << 23


@dataclass(frozen=True)
class NegativeTerm:
    """What a loss supplies to the engine: its negative term ``log Ng`` (docs/design.md).

    Attributes:
        log_negatives: ``[B]`` shifted ``log Ng`` of a :class:`NegativeBlock` of
            anchors (every path can use it).
        sums: The same term as a function of exponential sums over the negatives, if it is
            one; the one-pass engine then serves both directions from one pass.
    """

    log_negatives: LogNegatives
    sums: Optional[ExpSums] = None

    @classmethod
    def from_sums(cls, sums: ExpSums) -> NegativeTerm:
        """The term of unweighted exponential sums, on every path."""
        if sums.weight is not None:
            raise ValueError("a weighted ExpSums needs its own `log_negatives`")

        def log_negatives(block: NegativeBlock) -> Tensor:
            log_sums = [block.log_sum_exp_both(scale) for scale in sums.scales]
            return sums.combine(
                pos=block.pos, log_sums=log_sums, log_weight_mean=None, count=block.count
            )

        return cls(log_negatives, sums)


@dataclass(frozen=True)
class Path:
    """The dispatcher's decision: ``name`` (see the module's table) and the anchors per block
    (``None``: all)."""

    name: str
    block_size: Optional[int] = None


def auto_block_size(
    num_nodes: int, num_columns: Optional[int] = None, dense_max: int = DENSE_MAX_NODES
) -> Optional[int]:
    """The block size chosen when a loss has ``block_size=None`` (``None`` = dense, up to
    ``dense_max`` nodes)."""
    if num_columns is None and num_nodes <= dense_max:
        return None
    cols = num_nodes if num_columns is None else num_columns
    return max(1, min(num_nodes, BLOCK_ELEMENTS // max(cols, 1)))


def choose_path(
    num_nodes: int,
    tau: float,
    term: NegativeTerm,
    block_size: Optional[int] = None,
    num_negatives: Optional[int] = None,
    num_anchors: Optional[int] = None,
) -> Path:
    """The path of a loss with these options on ``num_nodes`` nodes (see the module's
    table), for ``num_anchors`` of them as anchors (default: all). A part of them takes
    row blocks (or sampled negatives): the one-pass engine's column sums need every row,
    and a dense block holds all anchors."""
    if num_negatives is not None:
        return Path("sampled", block_size or auto_block_size(num_nodes, num_negatives + 1))
    if num_anchors is not None and num_anchors < num_nodes:
        rows = block_size or auto_block_size(num_anchors, num_nodes)
        return Path("row-blocks", min(rows, num_anchors))
    sums = term.sums if term.sums is not None and term.sums.fits(tau) else None
    whole = sums is not None and sums.extra is not None  # one-pass only as one block
    if block_size is None:
        dense_max = WHOLE_MATRIX_MAX_NODES if whole else DENSE_MAX_NODES
        block_size = auto_block_size(num_nodes, dense_max=dense_max)
    blocked = block_size is not None and block_size < num_nodes
    if sums is not None and not (whole and blocked):
        return Path("one-pass", block_size if blocked else None)
    if blocked:
        return Path("row-blocks", block_size)
    return Path("dense")


def contrastive_losses(
    h1: Tensor,
    h2: Tensor,
    tau: float,
    term: NegativeTerm,
    block_size: Optional[int] = None,
    num_negatives: Optional[int] = None,
    pool: Optional[BlockPool] = None,
    generator: Optional[torch.Generator] = None,
    anchors: Optional[slice] = None,
) -> Tensor:
    """``[2, M]`` losses ``ℓ(u_i)`` (row 0) and ``ℓ(v_i)`` (row 1) of the anchors ``i`` in
    ``anchors`` (default: all ``N`` nodes), each against all nodes, on the path that the
    options and the data call for (dense, row blocks, one pass for both directions or
    sampled negatives; docs/design.md).

    Args:
        h1, h2: Projected views ``[N, d]`` (checked by the caller; normalised here).
        tau: Temperature.
        term: The loss's :class:`NegativeTerm`.
        block_size, num_negatives: The loss's options of these names
            (:class:`~pyg_progcl.losses.ContrastiveLoss`).
        pool: The loss's :class:`BlockPool` for the one-pass engine's matrices.
        generator: Random generator of the negative sampling.
        anchors: A range of rows: the anchors whose losses are returned (a part of the
            rows is computed per direction, in row blocks or with sampled negatives).
    """
    u, v = normalize_views(h1, h2)
    n = u.size(0)
    lo, hi, _ = (anchors or slice(0, n)).indices(n)
    path = choose_path(n, tau, term, block_size, num_negatives, hi - lo)
    rows = slice(lo, hi)
    if path.name == "sampled":
        return sampled_losses(
            u, v, tau, term.log_negatives, path.block_size, num_negatives, generator, rows
        )
    if path.name == "one-pass":
        return _one_pass(u, v, tau, term, path.block_size or n, pool)
    if path.name == "dense":
        return dense_losses(u, v, tau, term.log_negatives)
    return row_block_losses(u, v, tau, term.log_negatives, path.block_size, rows)


def _one_pass(
    u: Tensor, v: Tensor, tau: float, term: NegativeTerm, block_size: int, pool
) -> Tensor:
    """The one-pass losses of all anchors, with the anchors it reports as underflowed
    recomputed in log space (their linear-space entries get no gradient)."""
    losses, underflow = one_pass_losses(u, v, tau, term.sums, block_size, pool)
    if not bool(underflow.any()):
        return losses
    exact = chosen_anchor_losses(u, v, tau, term.log_negatives, underflow, block_size)
    replaced = losses.detach().index_put(tuple(underflow.nonzero().T), exact)
    return torch.where(underflow, replaced, losses)
