"""Training on PyTorch's own distributed engine (``torch.distributed``, DDP, ``torchrun``).

Data parallel over seed nodes, as PyG's multi-GPU examples do: every rank holds the graph,
each global batch of ``W·b`` seeds is cut into ``W`` equal slices, each rank encodes its
slice's subgraph and the model's gradients are averaged by
:class:`~torch.nn.parallel.DistributedDataParallel`. What is distributed here is the
loss: :class:`DistributedLoss` gives every rank's anchors the whole global batch as
negatives, and :meth:`DistributedLoss.fit` fits ProGCL's mixture on every rank's sample. Only an
initialised default process group is needed (``torchrun``, Lightning, Ray Train, a SLURM
launcher); see docs/distributed.md.
"""

from .loss import DistributedLoss

__all__ = ["DistributedLoss"]
