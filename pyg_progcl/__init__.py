"""pyg_progcl: hard-negative-aware graph contrastive learning for PyTorch Geometric."""

__version__ = "0.1.0"

