"""Hyperparameter presets by ``(dataset, method)`` (docs/algorithms.md §7), as data.

A preset is a :class:`TrainConfig`: the dataset's base row of
:data:`DATASET_PRESETS` with the method's delta of :data:`METHOD_PRESETS`
applied, then the user's overrides.

Base rows:

* Amazon-Photo / -Computers, Coauthor-CS, WikiCS: the public ProGCL
  configurations (GCA backbone, eigenvector-centrality adaptive augmentation,
  2 GCN layers, weight decay 1e-5, warm-up 400 epochs), Xia et al., "ProGCL:
  Rethinking Hard Negative Mining in Graph Contrastive Learning", ICML 2022.
* Coauthor-Physics: GCA's configuration (Zhu et al., WWW 2021); ProGCL ran out
  of memory there.
* Cora / CiteSeer / PubMed: GRACE's configurations (Zhu et al., 2020; uniform
  augmentation, GRACE protocol). ProGCL published no configuration for these
  200-epoch runs; it runs on GRACE's backbone (uniform augmentation, so that
  against GRACE only the loss differs) and its warm-up is half the epochs (100),
  so that the mixture is refitted online during the second half.
* ogbn-arxiv: no published full-graph configuration (GRACE ran out of memory);
  a WikiCS-like configuration with row-blocked loss computation.
* ogbn-products: no published configuration either; the arxiv row trained in
  mini-batches of 4096 seed nodes (2.4 M nodes do not fit full-graph encoder
  activations on most machines).
* synthetic: the built-in graph; small and fast.
* a graph file (``dataset="file:<name>"``, :func:`graph_file_name`; the command line's
  ``--data FILE``): the synthetic graph's generic row.

Method deltas: ``grace`` uses uniform edge dropping / feature masking; ``gca`` the
adaptive (eigenvector-centrality) augmentation; ``progcl-*`` the dataset's backbone
(evc on ProGCL's datasets, uniform on GRACE's and on the built-in graph);
``dcl`` (τ⁺ = 0.1) and ``hcl`` (τ⁺ = 0.1, β = 1.0, the HCL paper's defaults for
graphs) the uniform GRACE-style backbone.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, fields
from typing import Any, Optional, Union

from pyg_progcl.encoders import ACTIVATIONS
from pyg_progcl.losses.schedules import DEFAULT_SCHEDULE, SCHEDULES

from .checks import (
    check_bool,
    check_choice,
    check_int,
    check_nonnegative,
    check_positive,
    check_probability,
)
from .datasets import canonical_name

__all__ = ["TrainConfig", "get_preset"]

METHODS = ("grace", "gca", "dcl", "hcl", "progcl-weight", "progcl-mix")
AUGMENTATIONS = ("uniform", "degree", "pagerank", "evc")
ENCODERS = ("gcn", "mlp")

#: ``dataset`` of a run on a graph file: ``"file:<the file's name without suffix>"``.
FILE_PREFIX = "file:"
#: The preset row of graph files: the built-in graph's (generic) hyperparameters.
FILE_PRESET = "synthetic"


def graph_file_name(path) -> str:
    """The ``dataset`` name of a run on the graph file ``path``: ``file:<stem>``
    (``file:citations`` for ``data/citations.npz``)."""
    from pathlib import Path

    return FILE_PREFIX + Path(path).stem


def is_graph_file(dataset: str) -> bool:
    """Whether ``dataset`` names a graph file (:func:`graph_file_name`), not a dataset."""
    return isinstance(dataset, str) and dataset.startswith(FILE_PREFIX)


def _dataset_name(name: str) -> str:
    """A canonical dataset name, or a graph file's name as it is."""
    if is_graph_file(name):
        if not name[len(FILE_PREFIX) :].strip():
            raise ValueError(f"`dataset` {name!r} names no graph file (expected file:<name>)")
        return name
    try:
        return canonical_name(name)
    except ValueError as exc:
        raise ValueError(
            f"{exc}; a graph file's preset is {FILE_PREFIX}<name> (e.g. "
            f"'{FILE_PREFIX}{name}', with the graph from read_graph)"
        ) from None


@dataclass
class TrainConfig:
    """Every hyperparameter of one training run.

    Attributes:
        dataset: Canonical dataset name, or ``file:<name>`` for a graph file
            (:func:`graph_file_name`).
        method: One of :data:`METHODS`.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        epochs: Training epochs.
        warmup_epochs: ProGCL: epochs trained with plain GRACE before the Beta
            mixture is first fitted (then refitted every epoch, as ``schedule`` says).
        hidden: Encoder output width (the hidden layer is twice as wide).
        proj: Projection-head width.
        num_layers: Message-passing layers.
        activation: Encoder activation (``relu``, ``prelu``, ``rrelu``, ...).
        encoder: ``gcn``, or ``mlp`` (no message passing; ProGCL's control).
        augmentation: ``uniform`` (GRACE) or an adaptive centrality (GCA):
            ``degree``, ``pagerank``, ``evc``.
        pe1, pe2: Edge drop probabilities of view 1 / view 2.
        pf1, pf2: Feature mask probabilities of view 1 / view 2.
        aug_threshold: Cap of the adaptive drop probabilities (0.7 in GCA).
        tau: Temperature.
        tau_plus: DCL / HCL class prior τ⁺.
        beta: HCL concentration β.
        num_samples: ProGCL: similarities sampled per mixture fit (``None``:
            the loss's default).
        schedule: ProGCL's fit schedule: ``floored`` (the default: refit every epoch;
            from the first degenerate refit on, the posterior in ``b`` floored at
            ``floor``, 0.5 by default),
            ``online`` (refit every epoch, the paper's) or ``frozen`` (the reference
            code's: the weights of the first fit's epoch are kept; full-graph training
            only); see
            :class:`~pyg_progcl.ProGCLLoss`.
        min_beta_high: ProGCL: lower bound of β of the mixture's high-similarity
            component (``None``: none). The reference code clamps it at 1.01 in every EM
            iteration, so that component's density stays finite at cosine 1
            (:class:`~pyg_progcl.BetaMixture`'s ``min_beta_high``).
        shared_weights: ProGCL with ``schedule='frozen'``: weight the second direction's
            anchors by the first direction's matrix, index by index, as the reference code
            does (see :class:`~pyg_progcl.ProGCLLoss`).
        floor: ProGCL: the schedule's lower bound of ``p(TN | s')`` in the hardness
            ``b``: with ``floored`` from the first degenerate refit on, with the others
            from the first fit (``None``: the schedule's default, 0.5 for ``floored``, 0
            for the others; :mod:`~pyg_progcl.losses.schedules`).
        mixture_weight_init: ProGCL: initial weight of the mixture's high-similarity
            component (``None``: the reference code's default, 0.05; its Amazon-Photo
            parameter file says 0.15, a value its script reads only from the command line).
        num_mix: ProGCL-mix: hardest negatives mixed per anchor (K).
        block_size: Row block of the loss computation (``None``: the loss's
            :meth:`~pyg_progcl.losses.ContrastiveLoss.plan`).
        num_negatives: ``k`` sampled negatives per anchor and view instead of all
            (``None``: all; GRACE's ogbn-arxiv setting is 2048).
        batch_size: Seed nodes per mini-batch: train on sampled subgraphs
            (:mod:`pyg_progcl.minibatch`) instead of the full graph (``None``).
        num_neighbors: Neighbours sampled per hop for ``batch_size`` (``-1``: all;
            ``None``: 10 per message-passing layer).
        protocol: Evaluation protocol, ``gca`` or ``grace`` (docs/algorithms.md §6).
        split: ``random`` or ``public`` (the dataset's own split).
        probe_epochs: Epochs of the GCA protocol's logistic-regression probe.
        eval_every: Evaluate every this many epochs (0: only at the end).
        diagnose_every: Record the false-negative diagnostics
            (:func:`pyg_progcl.diagnostics.summarize`) every this many epochs and at
            the end into the results (0: never).
    """

    dataset: str = "synthetic"
    method: str = "grace"
    lr: float = 1e-3
    weight_decay: float = 1e-5
    epochs: int = 200
    warmup_epochs: int = 100
    hidden: int = 128
    proj: int = 128
    num_layers: int = 2
    activation: str = "relu"
    encoder: str = "gcn"
    augmentation: str = "uniform"
    pe1: float = 0.2
    pe2: float = 0.4
    pf1: float = 0.3
    pf2: float = 0.4
    aug_threshold: float = 0.7
    tau: float = 0.5
    tau_plus: float = 0.1
    beta: float = 1.0
    num_samples: Optional[int] = None
    schedule: str = DEFAULT_SCHEDULE
    min_beta_high: Optional[float] = None
    shared_weights: bool = False
    mixture_weight_init: Optional[float] = None
    floor: Optional[float] = None
    num_mix: int = 1000
    block_size: Optional[int] = None
    num_negatives: Optional[int] = None
    batch_size: Optional[int] = None
    num_neighbors: Optional[list[int]] = None
    protocol: str = "gca"
    split: str = "random"
    probe_epochs: int = 3000
    eval_every: int = 0
    diagnose_every: int = 0

    def __post_init__(self):
        self._check_training()
        self._check_sizes()
        self._check_progcl()
        self._check_model()

    def _check_training(self):
        """Dataset, method, optimiser, epochs and evaluation intervals."""
        self.dataset = _dataset_name(self.dataset)
        check_choice("method", self.method, METHODS)
        check_positive("lr", self.lr)
        check_nonnegative("weight_decay", self.weight_decay)
        self.epochs = check_int("epochs", self.epochs, minimum=1)
        self.warmup_epochs = check_int("warmup_epochs", self.warmup_epochs, minimum=0)
        if self.method.startswith("progcl") and self.warmup_epochs >= self.epochs:
            raise ValueError(
                f"`warmup_epochs` must be less than `epochs` for {self.method} (got "
                f"{self.warmup_epochs} and {self.epochs}): the mixture would never be fitted"
            )
        for key in ("hidden", "proj", "num_layers", "num_mix", "probe_epochs"):
            setattr(self, key, check_int(key, getattr(self, key)))
        self.eval_every = check_int("eval_every", self.eval_every, minimum=0)
        self.diagnose_every = check_int("diagnose_every", self.diagnose_every, minimum=0)

    def _check_sizes(self):
        """Optional sample, block and mini-batch sizes."""
        for key in ("num_samples", "block_size", "num_negatives", "batch_size"):
            if getattr(self, key) is not None:
                setattr(self, key, check_int(key, getattr(self, key)))
        if self.num_neighbors is not None:
            from pyg_progcl.minibatch.sampling import check_num_neighbors

            self.num_neighbors = check_num_neighbors(self.num_neighbors)
            if len(self.num_neighbors) != self.num_layers:
                raise ValueError(
                    f"`num_neighbors` must have one entry per layer (num_layers="
                    f"{self.num_layers}), got {self.num_neighbors}"
                )

    def _check_progcl(self):
        """The fit schedule and the mixture's options."""
        check_choice("schedule", self.schedule, SCHEDULES)
        if self.schedule == "frozen" and self.batch_size is not None:
            raise ValueError(
                "`schedule='frozen'` keeps per-node views of the whole graph and needs "
                f"full-graph training (`batch_size=None`, got {self.batch_size})"
            )
        check_bool("shared_weights", self.shared_weights)
        if self.shared_weights and self.schedule != "frozen":
            raise ValueError(
                "`shared_weights=True` reuses the frozen weight matrix of the reference code "
                f"and needs schedule='frozen' (got {self.schedule!r})"
            )
        if self.min_beta_high is not None:
            self.min_beta_high = check_positive("min_beta_high", self.min_beta_high)
        if self.floor is not None:
            self.floor = check_probability("floor", self.floor)
        if self.mixture_weight_init is not None:
            value = check_probability(
                "mixture_weight_init", self.mixture_weight_init, upper_open=True
            )
            self.mixture_weight_init = check_positive("mixture_weight_init", value)

    def _check_model(self):
        """Encoder, augmentation, loss hyperparameters and the probe protocol."""
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("encoder", self.encoder, ENCODERS)
        check_choice("augmentation", self.augmentation, AUGMENTATIONS)
        for key in ("pe1", "pe2", "pf1", "pf2", "aug_threshold"):
            check_probability(key, getattr(self, key))
        check_positive("tau", self.tau)
        check_probability("tau_plus", self.tau_plus, upper_open=True)
        check_nonnegative("beta", self.beta)
        check_choice("protocol", self.protocol, ("gca", "grace"))
        check_choice("split", self.split, ("random", "public"))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every field's default, by name."""
        return {f.name: f.default for f in fields(cls)}

    def to_dict(self) -> dict[str, Any]:
        """All fields as a plain (JSON-serialisable) dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Builds a config from :meth:`to_dict`'s output.

        Raises:
            ValueError: on unknown keys or invalid values.
        """
        unknown = set(values) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown config keys: {sorted(unknown)}")
        return cls(**values)

    def to_json(self) -> str:
        """The config as a JSON string."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        """Builds a config from :meth:`to_json`'s output."""
        return cls.from_dict(json.loads(text))

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with some fields changed (validated)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown config keys: {sorted(unknown)}")
        return dataclasses.replace(self, **changes)


_GRACE_COMMON = dict(weight_decay=1e-5, num_layers=2, augmentation="uniform", protocol="grace")
_PROGCL_COMMON = dict(weight_decay=1e-5, num_layers=2, augmentation="evc", protocol="gca")

#: Base hyperparameters per dataset (docs/algorithms.md §7).
DATASET_PRESETS: dict[str, dict[str, Any]] = {
    "synthetic": dict(
        lr=1e-3, hidden=128, proj=128, activation="relu", pe1=0.2, pe2=0.4, pf1=0.3,
        pf2=0.4, tau=0.5, epochs=120, warmup_epochs=60, augmentation="uniform",
        protocol="gca", probe_epochs=500, eval_every=40, num_samples=10_000,
    ),
    "Cora": dict(
        _GRACE_COMMON, lr=5e-4, hidden=128, proj=128, activation="relu", pe1=0.2, pe2=0.4,
        pf1=0.3, pf2=0.4, tau=0.4, epochs=200, warmup_epochs=100, eval_every=50,
    ),
    "CiteSeer": dict(
        _GRACE_COMMON, lr=1e-3, hidden=256, proj=256, activation="prelu", pe1=0.2, pe2=0.0,
        pf1=0.3, pf2=0.2, tau=0.9, epochs=200, warmup_epochs=100, eval_every=50,
    ),
    "PubMed": dict(
        _GRACE_COMMON, lr=1e-3, hidden=256, proj=256, activation="relu", pe1=0.4, pe2=0.1,
        pf1=0.0, pf2=0.2, tau=0.7, epochs=1500, warmup_epochs=400, eval_every=250,
    ),
    "Amazon-Computers": dict(
        _PROGCL_COMMON, lr=0.01, hidden=128, proj=128, activation="rrelu", pe1=0.6, pe2=0.3,
        pf1=0.2, pf2=0.3, tau=0.2, epochs=2000, warmup_epochs=400, eval_every=500,
    ),
    "Amazon-Photo": dict(
        _PROGCL_COMMON, lr=0.01, hidden=128, proj=128, activation="rrelu", pe1=0.6, pe2=0.3,
        pf1=0.2, pf2=0.3, tau=0.2, epochs=2500, warmup_epochs=400, eval_every=500,
    ),
    "Coauthor-CS": dict(
        _PROGCL_COMMON, lr=1e-4, hidden=256, proj=256, activation="rrelu", pe1=0.3, pe2=0.2,
        pf1=0.3, pf2=0.4, tau=0.2, epochs=1000, warmup_epochs=400, eval_every=250,
    ),
    "Coauthor-Physics": dict(
        _PROGCL_COMMON, lr=0.01, hidden=128, proj=64, activation="rrelu", pe1=0.4, pe2=0.1,
        pf1=0.1, pf2=0.4, tau=0.5, epochs=1500, warmup_epochs=400, eval_every=500,
    ),
    "WikiCS": dict(
        _PROGCL_COMMON, lr=0.01, hidden=256, proj=256, activation="prelu", pe1=0.2, pe2=0.3,
        pf1=0.1, pf2=0.1, tau=0.4, epochs=3000, warmup_epochs=400, split="public",
        eval_every=500,
    ),
    "ogbn-arxiv": dict(
        _PROGCL_COMMON, lr=1e-3, weight_decay=0.0, hidden=256, proj=256, activation="prelu",
        pe1=0.2, pe2=0.3, pf1=0.1, pf2=0.1, tau=0.5, epochs=500, warmup_epochs=250,
        split="public", eval_every=100,
    ),
    "ogbn-products": dict(
        _PROGCL_COMMON, lr=1e-3, weight_decay=0.0, hidden=256, proj=256, activation="prelu",
        pe1=0.2, pe2=0.3, pf1=0.1, pf2=0.1, tau=0.5, epochs=50, warmup_epochs=25,
        split="public", eval_every=10, batch_size=4096,  # 10 neighbours per layer
    ),
}  # fmt: skip

#: Per-method changes applied on top of the dataset's base row.
METHOD_PRESETS: dict[str, dict[str, Any]] = {
    "grace": dict(augmentation="uniform"),
    "gca": dict(augmentation="evc"),
    "dcl": dict(augmentation="uniform", tau_plus=0.1),
    "hcl": dict(augmentation="uniform", tau_plus=0.1, beta=1.0),
    "progcl-weight": dict(),  # the dataset's backbone: GCA's (evc) or GRACE's (uniform)
    "progcl-mix": dict(num_mix=1000),
}


def get_preset(
    dataset: str = "synthetic",
    method: str = "grace",
    config: Optional[Union[dict[str, Any], TrainConfig]] = None,
    **overrides: Any,
) -> TrainConfig:
    """The preset of ``(dataset, method)`` with ``overrides`` applied.

    If ``epochs`` is overridden and ``warmup_epochs`` is not (in the same place:
    ``overrides`` or ``config``), the warm-up keeps the fraction of training it had
    before (e.g. Amazon-Photo's 400 of 2500 epochs becomes 80 of 500; a ``config``
    taken from a 2500-epoch run with ``epochs=500`` the same), so that a shortened
    ProGCL run still refits its mixture.

    Args:
        dataset: Dataset name (aliases accepted), or ``file:<name>`` for a graph file
            (the built-in graph's generic preset row).
        method: One of :data:`METHODS`.
        config: More overrides, as a dict or a config (all its fields).
        **overrides: Field values, e.g. ``epochs=50, tau=0.3``.

    Returns:
        A validated :class:`TrainConfig`.

    Raises:
        ValueError: unknown dataset, method or field; invalid value.
    """
    dataset = _dataset_name(dataset)
    check_choice("method", method, METHODS)
    values = dict(DATASET_PRESETS[FILE_PRESET if is_graph_file(dataset) else dataset])
    values.update(METHOD_PRESETS[method])
    config = config.to_dict() if isinstance(config, TrainConfig) else dict(config or {})
    changes = {**config, **overrides}
    unknown = set(changes) - {f.name for f in fields(TrainConfig)}
    if unknown:
        raise ValueError(f"unknown config keys: {sorted(unknown)}")
    # The layer that sets `epochs` last decides: unless it or a layer above sets the warm-up,
    # the warm-up keeps its fraction in the layers below (the preset, then `config`).
    top, below = (overrides, {**values, **config}) if "epochs" in overrides else (config, values)
    if "epochs" in top and "warmup_epochs" not in {**top, **overrides}:
        epochs, base = check_int("epochs", top["epochs"]), check_int("epochs", below["epochs"])
        warmup = check_int("warmup_epochs", below["warmup_epochs"], minimum=0)
        changes["warmup_epochs"] = round(warmup * epochs / base)
    values.update(changes)
    values["dataset"], values["method"] = dataset, method
    return TrainConfig(**values)
