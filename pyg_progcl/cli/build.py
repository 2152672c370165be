"""Building blocks of a run from its config: the augmenters, the model, the loss, the seeds."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch
from torch import Tensor

from pyg_progcl.augment import (
    AdaptiveEdgeDrop,
    AdaptiveFeatureMask,
    ComposeAugmenters,
    EdgeDrop,
    FeatureMask,
)
from pyg_progcl.encoders import GCNEncoder, MLPEncoder, layer_widths
from pyg_progcl.losses import (
    DebiasedInfoNCELoss,
    FrozenFit,
    HardInfoNCELoss,
    InfoNCELoss,
    ProGCLLoss,
)
from pyg_progcl.losses.schedules import as_schedule
from pyg_progcl.mixture import BetaMixture
from pyg_progcl.model import GRACEModel

from .presets import TrainConfig

__all__ = ["build_loss", "build_model", "cpu_block_size", "seed_everything"]

#: On the CPU, the share of the last-level cache one ``B×N`` matrix of the loss's row blocks
#: may take (measured: docs/design.md, *The CPU's cache*).
CACHE_FRACTION = 1.0

#: Bytes per weight while training with Adam: the weight, its gradient and Adam's two
#: moments, in float32.
TRAINING_BYTES_PER_WEIGHT = 4 * 4


def build_augmentations(config: TrainConfig) -> tuple[ComposeAugmenters, ComposeAugmenters]:
    """The two views' augmenters: GRACE's uniform edge drop + feature mask, or
    GCA's centrality-adaptive versions (``config.augmentation``)."""

    def view(pe: float, pf: float) -> ComposeAugmenters:
        if config.augmentation == "uniform":
            return ComposeAugmenters(EdgeDrop(pe), FeatureMask(pf))
        kind, cap = config.augmentation, config.aug_threshold
        return ComposeAugmenters(
            AdaptiveEdgeDrop(pe, kind, cap), AdaptiveFeatureMask(pf, kind, cap)
        )

    return view(config.pe1, config.pf1), view(config.pe2, config.pf2)


#: Views whose feature matrix holds at least this many entries (256 MB of float32) are not
#: kept: the model recomputes them in backward (``GRACEModel(recompute_views=True)``).
RECOMPUTE_FEATURES = 1 << 26


def build_model(
    config: TrainConfig,
    in_channels: int,
    num_nodes: int = 0,
    x: Optional[Tensor] = None,
    device=None,
) -> GRACEModel:
    """A :class:`GRACEModel` (encoder, projection head, augmenters) for ``config``.

    On the CPU (``device`` ``None`` or a CPU) the encoder propagates over a CSR adjacency
    and takes mostly-zero features as CSR matrices (``sparse=True``,
    ``sparse_features=True``: measured faster there, docs/design.md); elsewhere it keeps
    PyG's edge list and dense features, the GPU's path.

    Views are recomputed in backward when each view's feature matrix would hold
    :data:`RECOMPUTE_FEATURES` entries: ``num_nodes × in_channels``, or with the features
    ``x`` the entries the model actually masks (the non-zeros where it feeds them sparse:
    Coauthor-Physics 1.1M, not 290M).
    """
    encoder_cls = GCNEncoder if config.encoder == "gcn" else MLPEncoder
    cpu = device is None or torch.device(device).type == "cpu"
    encoder = encoder_cls(
        in_channels, config.hidden, num_layers=config.num_layers, activation=config.activation,
        sparse=cpu, sparse_features=cpu,
    )  # fmt: skip
    aug1, aug2 = build_augmentations(config)
    model = GRACEModel(encoder, config.hidden, config.proj, aug1, aug2)
    entries = num_nodes * in_channels
    if x is not None:
        x = model.input_features(x)  # (what the views mask: CSR where the encoder takes it)
        entries = x.values().numel() if x.layout == torch.sparse_csr else x.numel()
    model.recompute_views = entries >= RECOMPUTE_FEATURES
    return model


def memory_of(device: Union[str, torch.device]) -> Optional[int]:
    """The memory of ``device`` in bytes: a GPU's, or the machine's RAM for the CPU
    (``None`` where it cannot be told)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # (not POSIX)
        return None


def check_model_fits(
    config: TrainConfig, in_channels: int, device: Union[str, torch.device] = "cpu"
) -> None:
    """Checks, before anything is allocated, that the model of ``config`` can be trained
    on ``device``: its weights, their gradients and Adam's moments
    (:data:`TRAINING_BYTES_PER_WEIGHT` per weight, :func:`weight_count`) within the
    device's memory (:func:`memory_of`).

    Raises:
        ValueError: naming the widths and the memory they need.
    """
    weights = weight_count(config, in_channels)
    need, have = weights * TRAINING_BYTES_PER_WEIGHT, memory_of(device)
    if have is not None and need > have:
        raise ValueError(
            f"the model (--hidden {config.hidden}, --proj {config.proj}, --num-layers "
            f"{config.num_layers}, {in_channels} input features) has {weights:,} weights: "
            f"training it needs {_size(need)}, more than the {_size(have)} of "
            f"{torch.device(device).type} memory here"
        )


def weight_count(config: TrainConfig, in_channels: int) -> int:
    """The number of weights of :func:`build_model`'s model, counted without building it
    (in Python integers: sizes beyond what a tensor can address are counted too): each
    encoder layer a weight matrix and a bias (GCNConv, Linear), PReLU's slope per layer,
    and the projection head's two layers."""
    widths = layer_widths(in_channels, config.hidden, config.num_layers)
    encoder = sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))
    slopes = config.num_layers if config.activation == "prelu" else 0
    head = 2 * config.hidden * config.proj + config.proj + config.hidden
    return encoder + slopes + head


def _size(count: int) -> str:
    """A byte count in the largest unit that keeps it at least 1 (``2.9 TB``)."""
    value, unit = float(count), "bytes"
    for name in ("KB", "MB", "GB", "TB", "PB", "EB"):
        if value < 1000:
            break
        value, unit = value / 1000, name
    return f"{value:.3g} {unit}" if unit != "bytes" else f"{count} bytes"


def cache_size() -> Optional[int]:
    """Bytes of the CPU's last-level data cache (Linux's sysfs), ``None`` where unknown."""
    sizes = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
            if (index / "type").read_text().strip() != "Instruction":
                size = (index / "size").read_text().strip()
                unit = {"K": 2**10, "M": 2**20, "G": 2**30}[size[-1]] if size[-1].isalpha() else 1
                sizes[int((index / "level").read_text())] = int(size.rstrip("KMG")) * unit
    return sizes[max(sizes)] if sizes else None


def cpu_block_size(num_nodes: int, itemsize: int = 4) -> Optional[int]:
    """The loss's ``block_size`` for a full graph of ``num_nodes`` on the CPU: ``None`` (the
    loss's own plan) where one ``N×N`` matrix fits the last-level cache or its size is
    unknown, else the anchors whose ``B×N`` matrix takes ``CACHE_FRACTION`` of it
    (docs/design.md, *The CPU's cache*)."""
    cache = cache_size()
    if cache is None or num_nodes * num_nodes * itemsize <= cache:
        return None
    return max(1, int(CACHE_FRACTION * cache // (num_nodes * itemsize)))


def compiler_missing(device: torch.device) -> Optional[str]:
    """What ``torch.compile`` lacks to compile a loss's blocks on ``device``, or ``None``:
    triton on CUDA, elsewhere a C++ compiler (inductor's own search: ``$CXX``, else g++)."""
    if device.type == "cuda":
        return None if importlib.util.find_spec("triton") else "triton (pip install triton)"
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:  # (another torch: torch.compile says so at the first block)
        return None
    try:
        get_cpp_compiler()
    except Exception:
        return "a C++ compiler (g++, or the one $CXX names)"
    return None


def build_loss(
    config: TrainConfig,
    num_nodes: Optional[int] = None,
    device: Optional[torch.device] = None,
    compile_blocks: bool = False,
) -> torch.nn.Module:
    """The method's loss: InfoNCE (grace, gca), DCL, HCL or ProGCL (weight / mix). Given the
    full graph's ``num_nodes`` on a CPU ``device``, with all negatives and no ``block_size``,
    its row blocks are :func:`cpu_block_size`'s; ``compile_blocks``: the loss's option."""
    block_size, cpu = config.block_size, device is not None and torch.device(device).type == "cpu"
    full = config.batch_size is None and config.num_negatives is None and num_nodes is not None
    if block_size is None and cpu and full:
        block_size = cpu_block_size(num_nodes)
    common = {"tau": config.tau, "block_size": block_size, "num_negatives": config.num_negatives}
    common["compile_blocks"] = compile_blocks
    if config.method in ("grace", "gca"):
        return InfoNCELoss(**common)
    if config.method == "dcl":
        return DebiasedInfoNCELoss(tau_plus=config.tau_plus, **common)
    if config.method == "hcl":
        return HardInfoNCELoss(tau_plus=config.tau_plus, beta=config.beta, **common)
    progcl = {"mode": config.method.split("-", 1)[1], "num_mix": config.num_mix, **common}
    if config.num_samples is not None:
        progcl["num_samples"] = config.num_samples
    mixture = {"min_beta_high": config.min_beta_high, "weight_init": config.mixture_weight_init}
    mixture = {k: v for k, v in mixture.items() if v is not None}
    if mixture:
        progcl["mixture"] = BetaMixture(**mixture)
    schedule = as_schedule(config.schedule, config.floor)
    if config.schedule == "frozen":
        schedule = FrozenFit(shared_weights=config.shared_weights, floor=schedule.floor)
    return ProGCLLoss(schedule=schedule, **progcl)


def seed_everything(seed: int) -> None:
    """Seeds Python's, NumPy's and torch's (CPU and CUDA) random generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
