"""Contrastive losses: GRACE (InfoNCE), DCL, HCL and ProGCL on one block machinery."""

from .base import ContrastiveLoss, InfoNCELoss
from .debiased import DebiasedInfoNCELoss, HardInfoNCELoss
from .progcl import ProGCLLoss
from .similarity import NegativeBlock, sample_negative_pairs, sample_negative_similarities

__all__ = [
    "ContrastiveLoss",
    "InfoNCELoss",
    "DebiasedInfoNCELoss",
    "HardInfoNCELoss",
    "ProGCLLoss",
    "NegativeBlock",
    "sample_negative_pairs",
    "sample_negative_similarities",
]
