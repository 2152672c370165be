"""Data-parallel training over seed nodes on ``torch.distributed`` (DDP, ``torchrun``;
docs/distributed.md): :class:`DistributedLoss` gives every rank's anchors the whole
global batch as negatives and fits ProGCL's mixture on every rank's sample."""

from .loss import DistributedLoss

__all__ = ["DistributedLoss"]
