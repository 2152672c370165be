"""Contrastive losses: GRACE (InfoNCE), DCL, HCL and ProGCL over one small contract.

Each loss supplies its negative term ``Ng`` (:meth:`ContrastiveLoss.negative_term`);
:mod:`.engine` computes the per-anchor losses on the path that pays and
:class:`ContrastiveLoss` reduces them. ProGCL's fit schedules are in :mod:`.schedules`,
its two negative terms in :mod:`.weights` and :mod:`.mixing`; :func:`compiled_status`
says whether its compiled CPU passes (:mod:`.kernels`) are in use.
"""

from .base import REDUCTIONS, ContrastiveLoss
from .debiased import DebiasedInfoNCELoss, HardInfoNCELoss
from .engine import NegativeBlock, sample_negative_pairs, sample_negative_similarities
from .infonce import InfoNCELoss
from .kernels import CompiledPassWarning, compiled_status
from .progcl import ProGCLLoss
from .schedules import FitOnce, FitSchedule, FlooredFit, FrozenFit, OnlineFit

__all__ = [
    "REDUCTIONS",
    "ContrastiveLoss",
    "InfoNCELoss",
    "DebiasedInfoNCELoss",
    "HardInfoNCELoss",
    "ProGCLLoss",
    "FitSchedule",
    "OnlineFit",
    "FlooredFit",
    "FitOnce",
    "FrozenFit",
    "NegativeBlock",
    "sample_negative_pairs",
    "sample_negative_similarities",
    "compiled_status",
    "CompiledPassWarning",
]
