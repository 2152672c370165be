"""pyg_progcl: hard-negative-aware graph contrastive learning for PyTorch Geometric.

GRACE / GCA models (:class:`GRACEModel`) with edge-drop and feature-mask augmenters, a
message-passing encoder swappable for an MLP, and contrastive losses: InfoNCE (GRACE),
DCL, HCL and ProGCL with an online Beta-mixture refit (:class:`BetaMixture`).

Everything else is a subpackage, imported by name:

* :mod:`pyg_progcl.augment`: the augmentations as functions, GCA's probabilities, and
  :class:`~pyg_progcl.augment.ComposeAugmenters`;
* :mod:`pyg_progcl.losses`: the loss contract (:class:`~pyg_progcl.losses.NegativeBlock`)
  and ProGCL's fit schedules;
* :mod:`pyg_progcl.io`: graph files, model files, embeddings;
* :mod:`pyg_progcl.evaluation`: the linear probe, link prediction, clustering;
* :mod:`pyg_progcl.datasets`: a generated graph;
* :mod:`pyg_progcl.minibatch` and :mod:`pyg_progcl.distributed`: training on large graphs;
* :mod:`pyg_progcl.diagnostics`: false-negative diagnostics;
* :mod:`pyg_progcl.cli`: the command line (``python -m pyg_progcl``; the ``cli`` extra).
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
