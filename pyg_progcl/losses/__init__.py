"""Contrastive losses: GRACE (InfoNCE), DCL, HCL and ProGCL with its fit schedules, over
one small contract (docs/own_loss.md). Modules whose names start with ``_`` are internal."""

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
