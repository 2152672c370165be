"""pyg_progcl: hard-negative-aware graph contrastive learning for PyTorch Geometric.

GRACE / GCA models with edge-drop and feature-mask augmenters, a message-passing encoder
swappable for an MLP, and contrastive losses: InfoNCE (GRACE), DCL, HCL and ProGCL with an
online Beta-mixture refit. Graph files and trained models go in and out through
:func:`~pyg_progcl.io.read_graph`, :func:`~pyg_progcl.io.save_model`,
:func:`~pyg_progcl.io.load_model` and :func:`~pyg_progcl.io.embed`.

Importing the package imports nothing else: each public name below loads its module on
first use, so that ``python -m pyg_progcl`` (and :func:`enable_huge_pages`) can configure
torch before it allocates.
"""

from importlib import import_module

from ._hugepages import enable_huge_pages

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_EXPORTS = {
    "GRACEModel": "model",
    "GCNEncoder": "encoders",
    "MLPEncoder": "encoders",
    "Augmenter": "augment",
    "EdgeDrop": "augment",
    "FeatureMask": "augment",
    "AdaptiveEdgeDrop": "augment",
    "AdaptiveFeatureMask": "augment",
    "Compose": "augment",
    "mask_feature": "augment",
    "drop_edge_weighted": "augment",
    "mask_feature_weighted": "augment",
    "edge_drop_probabilities": "augment",
    "feature_drop_probabilities": "augment",
    "node_centrality": "augment",
    "ContrastiveLoss": "losses",
    "InfoNCELoss": "losses",
    "DebiasedInfoNCELoss": "losses",
    "HardInfoNCELoss": "losses",
    "ProGCLLoss": "losses",
    "BetaMixture": "mixture",
    "MixtureDegeneracyWarning": "mixture",
    "read_graph": "io",
    "save_model": "io",
    "load_model": "io",
    "embed": "io",
}

__all__ = [*_EXPORTS, "enable_huge_pages"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
