"""The ProGCL paper's control experiment in one call: message passing against an MLP.

ProGCL (Xia et al., ICML 2022, https://arxiv.org/abs/2110.02027) contrasts a
message-passing encoder with an MLP of the same widths: only under message passing do
false negatives (same-class nodes) crowd the top of the similarity ranking.
:func:`compare_encoders` trains both encoders with one preset and diagnoses them before
and after training (:mod:`pyg_progcl.diagnostics`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from pyg_progcl.diagnostics import Diagnosis, DiagnosticsTracker, diagnose

from .build import build_loss, build_model, seed_everything
from .loop import train_seed
from .presets import get_preset

__all__: list[str] = []


@dataclass
class EncoderReport:
    """One encoder's diagnoses before and after training.

    Attributes:
        before: Diagnosis of the freshly initialised model.
        after: Diagnosis of the trained model (``None`` if not trained).
        history: Tracked summaries over training (``[]`` if not tracked).
        accuracy: Linear-probe accuracy of the trained encoder (``None`` if not trained).
        model: The (trained) model.
    """

    before: Diagnosis
    after: Optional[Diagnosis] = None
    history: list = field(default_factory=list)
    accuracy: Optional[float] = None
    model: Optional[torch.nn.Module] = field(default=None, repr=False)


def diagnose_training(
    config,
    data,
    *,
    train: bool = True,
    seed: int = 0,
    every: int = 0,
    device="cpu",
    progress: bool = False,
    callback=None,
    **diagnose_kwargs,
) -> EncoderReport:
    """Diagnoses one preset's model at initialisation and after training.

    Args:
        config: A :class:`~pyg_progcl.cli.presets.TrainConfig` (its ``encoder`` is used).
        data: The graph with labels ``y``.
        train: Train ``config.epochs`` epochs with :func:`~pyg_progcl.cli.loop.train_seed`
            (then ``after`` and ``accuracy`` are set); else only the initial model.
        seed: Seed of the initialisation and training (the initial model is exactly the
            one training starts from).
        every: Track the summary every this many epochs (``0``: off).
        device: Torch device.
        progress: Show the trainer's progress bar.
        callback: Called after every training epoch as
            :func:`~pyg_progcl.cli.loop.train_seed` calls it (after the tracker).
        **diagnose_kwargs: Passed to :func:`~pyg_progcl.diagnostics.diagnose`.
    """
    seed_everything(seed)
    model = build_model(config, data.num_features, data.num_nodes, data.x, device).to(device)
    report = EncoderReport(before=diagnose(model, data.to(device), **diagnose_kwargs), model=model)
    if not train:
        return report
    tracker = None
    if every:
        tracker = DiagnosticsTracker(data.to(device), every, **diagnose_kwargs)
        tracker.record(0, model, build_loss(config))
    model, loss, record = train_seed(
        config, data, seed, device=device, progress=progress, callback=_both(tracker, callback)
    )
    report.after = diagnose(model, data.to(device), loss=loss, **diagnose_kwargs)
    report.history = [] if tracker is None else tracker.history
    report.accuracy = float(record["accuracy"])
    report.model = model
    return report


def _both(first, second):
    """A callback calling ``first`` then ``second`` (either may be ``None``)."""
    if first is None or second is None:
        return first or second

    def call(epoch, info):
        first(epoch, info)
        second(epoch, info)

    return call


def compare_encoders(
    data, config=None, *, encoders=("gcn", "mlp"), **kwargs
) -> dict[str, EncoderReport]:
    """The ProGCL paper's control experiment: message passing vs an MLP, one call.

    Runs :func:`diagnose_training` for each encoder with otherwise identical
    hyperparameters (same widths, augmentations, loss and seed).

    Args:
        data: The graph with labels ``y``.
        config: A :class:`~pyg_progcl.cli.presets.TrainConfig` (default: the synthetic
            ProGCL-weight preset).
        encoders: Encoder kinds, ``'gcn'`` and/or ``'mlp'``.
        **kwargs: Passed to :func:`diagnose_training` (``train``, ``seed``, ``every``, and
            :func:`~pyg_progcl.diagnostics.diagnose`'s options).

    Returns:
        ``{encoder: EncoderReport}``.
    """
    config = get_preset("synthetic", "progcl-weight") if config is None else config
    return {enc: diagnose_training(config.replace(encoder=enc), data, **kwargs) for enc in encoders}
