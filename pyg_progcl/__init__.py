"""pyg_progcl: hard-negative-aware graph contrastive learning for PyTorch Geometric.

GRACE / GCA models with edge-drop and feature-mask augmenters, a message-passing encoder
swappable for an MLP, and contrastive losses: InfoNCE (GRACE), DCL, HCL and ProGCL with an
online Beta-mixture refit. Graph files and trained models go in and out through
:func:`~pyg_progcl.io.read_graph`, :func:`~pyg_progcl.io.save_model`,
:func:`~pyg_progcl.io.load_model` and :func:`~pyg_progcl.io.embed`; a linear probe
(:func:`~pyg_progcl.evaluation.evaluate`) and a generated graph
(:func:`~pyg_progcl.datasets.synthetic_graph`) come with them. The mini-batch and
distributed entry points are in :mod:`pyg_progcl.minibatch` and
:mod:`pyg_progcl.distributed`, the false-negative diagnostics in
:mod:`pyg_progcl.diagnostics`.
"""

from .augment import (
    AdaptiveEdgeDrop,
    AdaptiveFeatureMask,
    Augmenter,
    Compose,
    EdgeDrop,
    FeatureMask,
    drop_edge_weighted,
    edge_drop_probabilities,
    feature_drop_probabilities,
    mask_feature,
    mask_feature_weighted,
    node_centrality,
)
from .datasets import synthetic_graph
from .encoders import GCNEncoder, MLPEncoder
from .evaluation import evaluate, logistic_regression_probe, random_split
from .io import embed, load_model, read_graph, save_model
from .losses import (
    ContrastiveLoss,
    DebiasedInfoNCELoss,
    HardInfoNCELoss,
    InfoNCELoss,
    ProGCLLoss,
)
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
    "Compose",
    "mask_feature",
    "drop_edge_weighted",
    "mask_feature_weighted",
    "edge_drop_probabilities",
    "feature_drop_probabilities",
    "node_centrality",
    "ContrastiveLoss",
    "InfoNCELoss",
    "DebiasedInfoNCELoss",
    "HardInfoNCELoss",
    "ProGCLLoss",
    "BetaMixture",
    "MixtureDegeneracyWarning",
    "read_graph",
    "save_model",
    "load_model",
    "embed",
    "evaluate",
    "logistic_regression_probe",
    "random_split",
    "synthetic_graph",
]
