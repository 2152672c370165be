"""The experiment harness: presets, datasets, evaluation protocols, the trainer, the CLI.

Everything here sits on top of the library (:mod:`pyg_progcl`'s models, augmenters and
losses) and reproduces the papers' experiments: hyperparameter presets by dataset and
method (:mod:`.presets`), datasets by name with read-only data roots
(:mod:`.datasets`), the linear-probe protocols (:mod:`.evaluation`), the training loop
with checkpoints and resume (:mod:`.loop`, :mod:`.run`, :mod:`.checkpoint`,
:mod:`.build`), the GCN-vs-MLP control experiment (:mod:`.control`) and the
``train`` / ``diagnose`` subcommands (:mod:`.train_cli`, :mod:`.diagnose_cli`).

ProGCL's schedule (Xia et al., ICML 2022): ``warmup_epochs`` epochs with GRACE's loss, then
:meth:`~pyg_progcl.ProGCLLoss.fit` at every later epoch on that epoch's (detached) views
before the loss is computed (docs/algorithms.md §5.4).

.. code-block:: python

    from pyg_progcl.experiments import get_preset, train

    result = train(get_preset("Cora", "progcl-weight", epochs=50), seeds=2, root="data")
    print(result["accuracy_mean"], result["accuracy_std"])

Command line: ``python -m pyg_progcl train --dataset Cora --method progcl-weight``.
"""

# Besides ``__all__``, what the tests, the benchmarks and custom runs use (the ``name as
# name`` imports): ``evaluate`` and ``synthetic_graph`` are the library's own
# (:func:`pyg_progcl.evaluation.evaluate`, :func:`pyg_progcl.datasets.synthetic_graph`).
from .build import build_augmentations as build_augmentations
from .build import build_loss, build_model, seed_everything
from .checkpoint import TrainingInterruptedError
from .datasets import load_dataset
from .datasets import synthetic_graph as synthetic_graph
from .evaluation import evaluate as evaluate
from .loop import train
from .loop import train_seed as train_seed
from .presets import TrainConfig, get_preset

__all__ = [
    "TrainConfig",
    "TrainingInterruptedError",
    "build_loss",
    "build_model",
    "get_preset",
    "load_dataset",
    "seed_everything",
    "train",
]
