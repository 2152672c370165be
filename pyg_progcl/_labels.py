"""The check of node labels that a probe or a diagnosis takes (:func:`check_labels`)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def check_labels(y: Tensor, num_nodes: int, name: str = "y") -> Tensor:
    """Checks node labels (of a probe, a diagnosis) and returns them as a flat int64 tensor.

    ``y`` holds one label per node (``[N]`` or ``[N, 1]``): class ids ``0 .. C-1`` of an
    integer type (or integral floating-point values) with ``C <= num_nodes``, since the
    probe holds a ``[C, d]`` weight per class; arbitrary ids (e.g. hashes) are refused.

    Raises:
        ValueError: naming the argument (``name``) and what was found.
    """
    if not isinstance(y, Tensor):
        raise ValueError(f"`{name}` must be a tensor of node labels (got {type(y).__name__})")
    y = y.view(-1) if y.dim() == 2 and y.size(1) == 1 else y
    if y.dim() != 1 or y.numel() != num_nodes:
        raise ValueError(
            f"`{name}` must hold one label per node ({num_nodes}) (got shape {list(y.shape)})"
        )
    if y.is_complex() or y.layout != torch.strided:
        raise ValueError(f"`{name}` must be a dense tensor of integer class ids (got {y.dtype})")
    if y.numel() == 0 or y.dtype == torch.bool:
        return y.long()
    low, high = (float(v) for v in torch.stack(torch.aminmax(y.detach())).double().cpu())
    if y.is_floating_point() and not (
        math.isfinite(low) and math.isfinite(high) and bool((y == y.round()).all())
    ):
        raise ValueError(
            f"`{name}` must hold integer class ids 0 .. C-1 (got non-integer or non-finite "
            "floating-point labels)"
        )
    if low < 0:
        raise ValueError(
            f"`{name}` has negative class ids (min {int(low)}); every node's label must "
            "be a class id 0 .. C-1"
        )
    if high >= num_nodes:
        raise ValueError(
            f"`{name}` has class id {int(high)}, but there are {num_nodes} nodes: labels must be "
            f"class ids 0 .. C-1 with C <= {num_nodes}; map arbitrary ids with "
            "torch.unique(y, return_inverse=True)[1]"
        )
    return y.long()
