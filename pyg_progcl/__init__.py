"""pyg_progcl: hard-negative-aware graph contrastive learning for PyTorch Geometric.

The GRACE / GCA model, its encoders and augmenters, and the contrastive losses: InfoNCE
(GRACE), DCL, HCL and ProGCL with its Beta mixture. Subpackages, imported by name:
:mod:`~pyg_progcl.augment` (functions, GCA's probabilities, ``ComposeAugmenters``),
:mod:`~pyg_progcl.losses` (the loss contract, ProGCL's schedules), :mod:`~pyg_progcl.io`,
:mod:`~pyg_progcl.evaluation`, :mod:`~pyg_progcl.datasets`, :mod:`~pyg_progcl.minibatch`,
:mod:`~pyg_progcl.distributed`, :mod:`~pyg_progcl.diagnostics` and
:mod:`~pyg_progcl.cli` (the command line, ``python -m pyg_progcl``; the ``cli`` extra).
"""

from .augment.adaptive import AdaptiveEdgeDrop, AdaptiveFeatureMask
from .augment.modules import Augmenter, EdgeDrop, FeatureMask
from .encoders import GCNEncoder, MLPEncoder
from .losses.base import ContrastiveLoss
from .losses.debiased import DebiasedInfoNCELoss, HardInfoNCELoss
from .losses.infonce import InfoNCELoss
from .losses.progcl import ProGCLLoss
from .mixture import BetaMixture, MixtureDegeneracyWarning
from .model import GRACEModel

__version__ = "0.1.0"

__all__ = [
    "GRACEModel",
    "GCNEncoder",
    "MLPEncoder",
    "Augmenter",
    "EdgeDrop",
    "FeatureMask",
    "AdaptiveEdgeDrop",
    "AdaptiveFeatureMask",
    "ContrastiveLoss",
    "InfoNCELoss",
    "DebiasedInfoNCELoss",
    "HardInfoNCELoss",
    "ProGCLLoss",
    "BetaMixture",
    "MixtureDegeneracyWarning",
]
