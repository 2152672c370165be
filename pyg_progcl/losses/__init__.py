"""Contrastive losses: GRACE (InfoNCE), DCL, HCL and ProGCL over one small contract.

* The losses: :class:`InfoNCELoss`, :class:`DebiasedInfoNCELoss`,
  :class:`HardInfoNCELoss` and :class:`ProGCLLoss`, with ProGCL's fit schedules
  (:class:`FitSchedule` and its kinds, :mod:`.schedules`).
* The contract of a loss (docs/own_loss.md): a :class:`ContrastiveLoss` maps a
  :class:`NegativeBlock` of anchors to their negative term ``log Ng``
  (:meth:`ContrastiveLoss.negative_term`), or computes its per-anchor losses itself
  (:meth:`ContrastiveLoss.compute_loss`).

Modules whose names start with ``_`` (the engine, ProGCL's terms, the sampling of
negative pairs) are internal.
"""

from ._engine import NegativeBlock, Plan
from .base import ContrastiveLoss
from .debiased import DebiasedInfoNCELoss, HardInfoNCELoss
from .infonce import InfoNCELoss
from .progcl import ProGCLLoss
from .schedules import FitSchedule, FlooredFit, FrozenFit, OnlineFit

__all__ = [
    "ContrastiveLoss",
    "InfoNCELoss",
    "DebiasedInfoNCELoss",
    "HardInfoNCELoss",
    "ProGCLLoss",
    "NegativeBlock",
    "Plan",
    "FitSchedule",
    "OnlineFit",
    "FlooredFit",
    "FrozenFit",
]
