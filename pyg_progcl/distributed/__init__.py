"""Training on PyTorch's own distributed engine (``torch.distributed``, DDP, ``torchrun``).

Data parallel over seed nodes, as PyG's multi-GPU examples do: every rank holds the graph,
each global batch of ``W·b`` seeds is cut into ``W`` equal slices, each rank encodes its
slice's subgraph and the model's gradients are averaged by
:class:`~torch.nn.parallel.DistributedDataParallel`. What is distributed here is the
loss: :class:`DistributedLoss` gives every rank's anchors the whole global batch as
negatives, and :func:`fit_mixture` fits ProGCL's mixture on every rank's sample. Only an
initialised default process group is needed (``torchrun``, Lightning, Ray Train, a SLURM
launcher); see docs/distributed.md.
"""

from .comm import all_gather_rows, all_gather_with_grad, all_reduce_sum
from .loss import DistributedLoss
from .mixture import fit_mixture

__all__ = [
    "DistributedLoss",
    "all_gather_rows",
    "all_gather_with_grad",
    "all_reduce_sum",
    "fit_mixture",
]
