"""Autocast and ``torch.compile`` queries for torch >= 2.1; the user's stack level."""

from __future__ import annotations

import importlib
import os
import sys

import torch


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (``False`` for devices without one)."""
    if device_type not in ("cpu", "cuda", "xpu"):
        return False
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4: one query per device
        if device_type == "cpu":
            return torch.is_autocast_cpu_enabled()
        return device_type == "cuda" and torch.is_autocast_enabled()


def is_compiling() -> bool:
    """Whether the calling code is being traced by ``torch.compile`` (TorchDynamo)."""
    query = getattr(torch.compiler, "is_compiling", None)  # torch >= 2.3
    if query is None:  # (imported here: torch._dynamo takes a while to import)
        query = importlib.import_module("torch._dynamo").is_compiling
    return query()


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_TORCH_DECORATORS = (
    os.path.join("torch", "utils", "_contextlib.py"),
    os.path.join("torch", "nn", "modules", "module.py"),
)


def stacklevel_outside_package() -> int:
    """The ``stacklevel`` of the caller's first frame outside this package (and torch's
    ``no_grad`` wrappers and module calls): a warning then names the user's line."""
    frame, level = sys._getframe(1), 1
    while frame is not None and (
        frame.f_code.co_filename.startswith(_PACKAGE_DIR)
        or frame.f_code.co_filename.endswith(_TORCH_DECORATORS)
    ):
        frame, level = frame.f_back, level + 1
    return level
