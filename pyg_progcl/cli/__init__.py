"""The command line and its experiment harness: presets, datasets, evaluation protocols,
the trainer (``python -m pyg_progcl``, :func:`main`).

A layer on top of the library: it uses the library's public names only, and
``import pyg_progcl`` does not load it. It needs the ``cli`` extra
(``pip install "pyg_progcl[cli]"``: tqdm, filelock); without it, importing it raises a
``ModuleNotFoundError`` that says so.

It reproduces the papers' experiments: hyperparameter presets by dataset and method
(:mod:`.presets`), datasets by name with read-only data roots (:mod:`.datasets`), the
probes a run may ask for (:mod:`.evaluation`), the training loop with checkpoints and
resume (:mod:`.loop`, :mod:`.run`, :mod:`.checkpoint`, :mod:`.build`), the GCN-vs-MLP
control experiment (:mod:`.control`) and the ``train`` / ``diagnose`` / ``embed``
subcommands (:mod:`.entry`, :mod:`.train_cli`, :mod:`.diagnose_cli`, :mod:`.embed_cli`).

ProGCL's schedule (Xia et al., ICML 2022): ``warmup_epochs`` epochs with GRACE's loss, then
:meth:`~pyg_progcl.ProGCLLoss.fit` at every later epoch on that epoch's (detached) views
before the loss is computed (docs/algorithms.md §5.4).

.. code-block:: python

    from pyg_progcl.cli import get_preset, train

    result = train(get_preset("Cora", "progcl-weight", epochs=50), seeds=2, root="data")
    print(result["accuracy_mean"], result["accuracy_std"])

Command line: ``python -m pyg_progcl train --dataset Cora --method progcl-weight``.
"""

from ._extra import require_extra

require_extra()

from .build import (  # noqa: E402
    build_augmentations,
    build_loss,
    build_model,
    cpu_block_size,
    seed_everything,
)
from .checkpoint import TrainingInterruptedError  # noqa: E402
from .datasets import load_dataset  # noqa: E402
from .entry import main  # noqa: E402
from .loop import train, train_seed  # noqa: E402
from .presets import TrainConfig, get_preset  # noqa: E402

__all__ = [
    "main",
    "TrainConfig",
    "TrainingInterruptedError",
    "build_augmentations",
    "build_loss",
    "build_model",
    "cpu_block_size",
    "get_preset",
    "load_dataset",
    "seed_everything",
    "train",
    "train_seed",
]
