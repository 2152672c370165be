"""Training: GRACE-style contrastive pre-training with any loss, then a linear probe.

The schedule of ProGCL (Xia et al., "ProGCL: Rethinking Hard Negative Mining in
Graph Contrastive Learning", ICML 2022), refitted online as in spec §5.1:
``warmup_epochs`` epochs with GRACE's loss, then the chosen loss, with
:meth:`ProGCLLoss.fit` called at every later epoch on that epoch's (detached)
views before the loss is computed. One :class:`ProGCLLoss` object serves both
phases (before its first fit it equals :class:`InfoNCELoss`).

Python::

    from pyg_progcl.presets import get_preset
    from pyg_progcl.train import train

    result = train(get_preset("Cora", "progcl-weight", epochs=50), seeds=2, root="data")
    print(result["accuracy_mean"], result["accuracy_std"])

Command line: ``python -m pyg_progcl train --dataset Cora --method progcl-weight``
(see :func:`add_arguments`).

Modules: :mod:`.build` (augmenters, model and loss from a config), :mod:`.run` (one
seed's state and epoch), :mod:`.loop` (:func:`train_seed`, :func:`train`),
:mod:`.checkpoint` (save, resume, SIGTERM), :mod:`.cli` (the ``train`` subcommand).
"""

from .build import build_augmentations, build_loss, build_model, seed_everything
from .checkpoint import TrainingInterruptedError
from .cli import add_arguments, config_from_args, main, run_cli
from .loop import machine, train, train_seed, versions, write_json

__all__ = [
    "TrainingInterruptedError",
    "add_arguments",
    "build_augmentations",
    "build_loss",
    "build_model",
    "config_from_args",
    "machine",
    "main",
    "run_cli",
    "seed_everything",
    "train",
    "train_seed",
    "versions",
    "write_json",
]
