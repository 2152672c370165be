"""Tracking the diagnostics over training, as a trainer callback."""

from __future__ import annotations

from typing import Any, Optional

import torch

from .._checks import check_int
from .core import summarize

__all__ = ["DiagnosticsTracker"]


class DiagnosticsTracker:
    """Records :func:`~.core.summarize` every ``every`` epochs; a trainer ``callback``,
    called as ``tracker(epoch, info)`` with ``info['model']`` and ``info['loss_fn']``.
    Every epoch uses the same pairs and augmentations, and the global random state is
    restored (training is unchanged by tracking).

    Args:
        data, every: The graph with labels ``y`` (or pass ``labels``), the epochs between records.
        **diagnose_kwargs: Passed to :func:`~.core.diagnose` (``num_samples``, ``top_k``,
            ``labels``, ``seed``, ...).

    Attributes:
        history: ``[{'epoch': e, **summary}, ...]``, plain floats.
    """

    def __init__(self, data, every: int = 10, **diagnose_kwargs):
        self.data = data
        self.every = check_int("every", every, 1)
        self.kwargs = diagnose_kwargs
        self.history: list[dict[str, float]] = []

    def record(self, epoch: int, model: torch.nn.Module, loss: Optional[torch.nn.Module] = None):
        """Summarises ``model`` now and appends ``{'epoch': epoch, **summary}``."""
        summary = summarize(model, self.data, loss=loss, **self.kwargs)
        self.history.append({"epoch": float(epoch), **summary})
        return self.history[-1]

    def __call__(self, epoch: int, info: dict[str, Any]) -> None:
        if epoch % self.every == 0:
            self.record(epoch, info["model"], info.get("loss_fn"))
