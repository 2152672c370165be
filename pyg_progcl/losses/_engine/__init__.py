"""The loss engine (private: the package exports what users and sibling packages need from
:mod:`pyg_progcl.losses`): every loss's anchors against their negatives, on the path that pays.

A loss supplies only its negative term (:class:`NegativeTerm`); :mod:`.dispatch` picks the
path up front and returns per-anchor losses. Modules, one way down: :mod:`.dispatch` →
:mod:`.onepass` (both directions from one pass over row blocks) and
:mod:`.per_direction` (dense, row blocks, sampled negatives) → :mod:`.blocks` (the
anchor blocks a negative term reads) → :mod:`.ops`; :mod:`.pool` (reused CPU matrices)
and :mod:`.sampling` (negative pairs for the mixture's fit) beside them. Why the package
has its own engine instead of a dense ``N×N`` matrix: docs/design.md.
"""

from .blocks import NegativeBlock, Pairs, dense_blocks
from .dispatch import NegativeTerm, Path, choose_path, contrastive_losses
from .onepass import ExpSums, ExtraTerm
from .ops import full_precision, normalize_views, row_chunks, transpose_, underflow_threshold
from .pool import BlockPool
from .sampling import sample_negative_pairs, sample_negative_similarities

__all__ = [
    "BlockPool",
    "ExpSums",
    "ExtraTerm",
    "NegativeBlock",
    "NegativeTerm",
    "Pairs",
    "Path",
    "choose_path",
    "contrastive_losses",
    "dense_blocks",
    "full_precision",
    "normalize_views",
    "row_chunks",
    "sample_negative_pairs",
    "sample_negative_similarities",
    "transpose_",
    "underflow_threshold",
]
