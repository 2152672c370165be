"""Contrastive losses: GRACE (InfoNCE), DCL, HCL and ProGCL over one small contract.

The public surface is this package's ``__all__`` and :mod:`.schedules`; the modules whose
names start with ``_`` (the engine, ProGCL's negative terms and selection) are
internal and may change without notice.

* The losses: :class:`InfoNCELoss`, :class:`DebiasedInfoNCELoss`,
  :class:`HardInfoNCELoss` and :class:`ProGCLLoss`, with ProGCL's fit schedules
  (:class:`FitSchedule` and its kinds, :mod:`.schedules`).
* The contract of a loss (docs/own_loss.md): a :class:`ContrastiveLoss` supplies its
  negative term ``Ng`` (:meth:`ContrastiveLoss.negative_term`), a :class:`NegativeTerm`
  that reads a :class:`NegativeBlock` of anchors, and where ``log Ng`` follows from
  exponential sums, an :class:`ExpSums` (with, for ProGCL-mix, an :class:`ExtraTerm`);
  the engine computes the per-anchor losses on the path that pays
  (:func:`contrastive_losses`) and :class:`ContrastiveLoss` reduces them.
* The engine's pieces that other packages build on: :func:`contrastive_losses` (a part of
  the anchors, as :mod:`pyg_progcl.distributed` computes them), :func:`full_precision`,
  :func:`normalize_views`, :func:`sample_negative_pairs`,
  :func:`sample_negative_similarities` and :class:`BlockPool`.
"""

from ._engine import (
    BlockPool,
    ExpSums,
    ExtraTerm,
    NegativeBlock,
    NegativeTerm,
    Pairs,
    contrastive_losses,
    full_precision,
    normalize_views,
    sample_negative_pairs,
    sample_negative_similarities,
)
from .base import REDUCTIONS, ContrastiveLoss
from .debiased import DebiasedInfoNCELoss, HardInfoNCELoss
from .infonce import InfoNCELoss
from .progcl import ProGCLLoss
from .schedules import FitSchedule, FlooredFit, FrozenFit, OnlineFit

__all__ = [
    # the losses
    "REDUCTIONS",
    "ContrastiveLoss",
    "InfoNCELoss",
    "DebiasedInfoNCELoss",
    "HardInfoNCELoss",
    "ProGCLLoss",
    # ProGCL's fit schedules
    "FitSchedule",
    "OnlineFit",
    "FlooredFit",
    "FrozenFit",
    # the contract of a loss
    "NegativeTerm",
    "ExpSums",
    "NegativeBlock",
    "Pairs",
    "ExtraTerm",
    # the engine, for other packages
    "contrastive_losses",
    "full_precision",
    "normalize_views",
    "sample_negative_pairs",
    "sample_negative_similarities",
    "BlockPool",
]
