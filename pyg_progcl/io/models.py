"""Model files: :func:`~pyg_progcl.io.save_model` writes a :class:`~pyg_progcl.GRACEModel`
as one checksummed file of plain values and tensors that :func:`~pyg_progcl.io.load_model`
(or ``torch.load(path, weights_only=True)``) reads back."""

from __future__ import annotations

import json
import re
import threading
import warnings
from pathlib import Path
from typing import Any, Optional, Union

import torch

from ..augment import (
    AdaptiveEdgeDrop,
    AdaptiveFeatureMask,
    ComposeAugmenters,
    EdgeDrop,
    FeatureMask,
)
from ..encoders import ACTIVATIONS, GCNEncoder, MLPEncoder
from ..model import DEFAULT_PROJECTOR, GRACEModel
from ._common import first_line, load_failure, nonfinite, uncompiled
from .files import (
    PathLike,
    atomic_write,
    check_input_file,
    check_writable,
    payload_checksum,
    torch_save,
)

__all__ = ["load_model", "save_model"]

#: The ``format`` entry of a model file, and the newest ``version`` this code reads.
MODEL_FORMAT = "pyg_progcl.model"
MODEL_VERSION = 1

#: The most values (nested entries counted) a model file's configuration holds: a model's
#: is a few dozen; a forged one of millions is refused before anything of it is built.
MAX_CONFIG_VALUES = 10_000

_ENCODER_LAYER = re.compile(r"encoder\.layers\.(\d+)\.")

_AUGMENTERS = {
    cls.__name__: cls for cls in (EdgeDrop, FeatureMask, AdaptiveEdgeDrop, AdaptiveFeatureMask)
}


def _describe_augmenter(name: str, augment) -> Union[None, dict, list[dict[str, Any]]]:
    """A built-in augmenter as a dict of plain values (a list of them for a composition)."""
    if augment is None:
        return None
    composed = type(augment) is ComposeAugmenters
    members = list(augment.augmenters) if composed else [augment]
    described = []
    for aug in members:
        if type(aug) is not _AUGMENTERS.get(type(aug).__name__):
            warnings.warn(
                f"`{name}` ({augment!r}) is not made of built-in augmenters and is not saved; "
                "the loaded model has no augmentation there (embedding uses none)",
                stacklevel=3,
            )
            return None
        entry = {"type": type(aug).__name__, "p": float(aug.p)}
        if isinstance(aug, (AdaptiveEdgeDrop, AdaptiveFeatureMask)):
            entry.update(centrality=aug.centrality, threshold=float(aug.threshold))
        if isinstance(aug, AdaptiveFeatureMask):
            entry["dense"] = aug.dense
        described.append(entry)
    return described if composed else described[0]


def _build_augmenter(spec: Union[None, dict, list[dict[str, Any]]]):
    if spec is None:
        return None
    members = []
    for entry in spec if isinstance(spec, list) else [spec]:
        entry = dict(entry)
        members.append(_AUGMENTERS[entry.pop("type")](**entry))
    return ComposeAugmenters(*members) if isinstance(spec, list) else members[0]


def _describe_encoder(encoder) -> dict[str, Any]:
    """The constructor arguments of a :class:`GCNEncoder` / :class:`MLPEncoder`."""
    if type(encoder) not in (GCNEncoder, MLPEncoder):
        raise ValueError(
            f"save_model supports GRACEModel with a GCNEncoder or an MLPEncoder (got an encoder "
            f"of type {type(encoder).__name__}); save another encoder's state_dict yourself"
        )
    activation = getattr(encoder, "activation_name", None)
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"save_model supports activations named by a string, one of {list(ACTIVATIONS)} "
            f"(got {activation!r})"
        )
    config = {
        "type": type(encoder).__name__,
        "in_channels": int(encoder.in_channels),
        "hidden_channels": int(encoder.hidden_channels),
        "num_layers": int(encoder.num_layers),
        "activation": activation,
        "sparse_features": bool(encoder.sparse_features),
    }
    if isinstance(encoder, GCNEncoder):
        name = encoder.conv.__name__
        if _conv_class(name) is not encoder.conv:
            raise ValueError(
                f"save_model supports the convolutions of torch_geometric.nn (MessagePassing "
                f"classes), saved by name (got {encoder.conv.__module__}.{name})"
            )
        try:
            kwargs = json.loads(json.dumps(encoder.conv_kwargs))
        except (TypeError, ValueError):
            kwargs = None
        if kwargs != encoder.conv_kwargs:
            raise ValueError(
                f"save_model needs `conv_kwargs` of plain JSON values (got {encoder.conv_kwargs!r})"
            )
        config.update(conv=name, conv_kwargs=kwargs, sparse=getattr(encoder, "_sparse_arg", None))
    return config


def _conv_class(name: Any) -> Optional[type]:
    """The ``MessagePassing`` class ``torch_geometric.nn.<name>``, if that is one."""
    import torch_geometric.nn as pyg_nn
    from torch_geometric.nn.conv import MessagePassing

    conv = getattr(pyg_nn, name, None) if isinstance(name, str) else None
    ok = isinstance(conv, type) and issubclass(conv, MessagePassing) and conv is not MessagePassing
    return conv if ok else None


def model_config(model: GRACEModel) -> dict[str, Any]:
    """The plain-value description of ``model`` (unwrapped from ``torch.compile``) that
    :func:`save_model` stores, or its ``ValueError``."""
    model = uncompiled(model)
    if type(model) is not GRACEModel:
        raise ValueError(
            f"save_model supports a GRACEModel (got {type(model).__name__}); save another "
            "module's state_dict yourself"
        )
    if model.proj_channels is None and model.projector is not None:
        raise ValueError(
            f"save_model supports the default projection head or none (got a "
            f"{type(model.projector).__name__}); save the model's state_dict yourself"
        )
    config = {
        "model": "GRACEModel",
        "hidden_channels": int(model.hidden_channels),
        "proj_channels": None if model.proj_channels is None else int(model.proj_channels),
        "recompute_views": bool(model.recompute_views),
        "encoder": _describe_encoder(uncompiled(model.encoder)),
        "augment1": _describe_augmenter("augment1", model.augment1),
        "augment2": _describe_augmenter("augment2", model.augment2),
    }
    if model.projector is None:
        config["projector"] = None  # (no projection head; absent: the default one)
    return config


def build_from_config(config: dict[str, Any]) -> GRACEModel:
    """A freshly initialised :class:`GRACEModel` from :func:`model_config`'s description."""
    enc = dict(config["encoder"])
    kind = enc.pop("type")
    if kind == "GCNEncoder":
        conv = _conv_class(enc.pop("conv", None))
        if conv is None:
            raise ValueError(
                f"{config['encoder'].get('conv')!r} is not a convolution of torch_geometric.nn "
                "(a MessagePassing class such as GCNConv)"
            )
        encoder = GCNEncoder(conv=conv, **enc)
    elif kind == "MLPEncoder":
        encoder = MLPEncoder(**enc)
    else:
        raise ValueError(f"unknown encoder type {kind!r}")
    return GRACEModel(
        encoder,
        config["hidden_channels"],
        config["proj_channels"],
        _build_augmenter(config.get("augment1")),
        _build_augmenter(config.get("augment2")),
        recompute_views=config.get("recompute_views", False),
        projector=config.get("projector", DEFAULT_PROJECTOR),
    )


def save_model(
    model: GRACEModel, path: PathLike, *, metadata: Optional[dict[str, Any]] = None
) -> Path:
    """Writes ``model`` (its configuration and weights) to one file, atomically; returns
    ``path``.

    The file is ``torch.save`` of plain values and CPU tensors sealed by a SHA-256
    checksum, readable with ``torch.load(path, weights_only=True)``; its format, and what
    it describes (custom augmenters are left out with a warning): docs/own_graph.md.

    Args:
        model: A :class:`GRACEModel` with a :class:`~pyg_progcl.GCNEncoder` or an
            :class:`~pyg_progcl.MLPEncoder`, possibly wrapped by ``torch.compile``.
        path: Where to write (its folder must exist).
        metadata: Plain JSON values stored alongside (e.g. the training config).

    Raises:
        ValueError: for a model this format cannot describe, weights that are not
            finite, metadata that is not plain JSON, or a path that cannot be written.
    """
    target = check_writable(path, "model file")
    config = model_config(model)
    if metadata is not None:
        try:
            metadata = json.loads(json.dumps(metadata))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"`metadata` must hold plain JSON values ({exc})") from None
    state = {  # (an ``OptimizedModule`` keeps its module's tensors under ``_orig_mod.``)
        key.replace("._orig_mod.", "."): value.detach().cpu().clone()
        for key, value in uncompiled(model).state_dict().items()
    }
    bad = next((key for key, value in state.items() if nonfinite(value)), None)
    if bad is not None:
        raise ValueError(
            f"weight {bad!r} holds NaN or infinite values (the training diverged?): "
            f"{str(target)!r} was not written, as no such model can embed"
        )
    payload = {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        "config": config,
        "state_dict": state,
        "metadata": metadata,
    }
    payload["checksum"] = payload_checksum(payload)
    return atomic_write(target, lambda tmp: torch_save(payload, tmp))


def read_model_file(path: PathLike) -> dict[str, Any]:
    """The checked contents of a model file (CPU tensors): its format, version and
    entries, its checksum, and finite weights; a ``ValueError`` names the problem."""
    path = check_input_file(path, "model file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(
            f"model file {str(path)!r} is not a readable pyg_progcl model: "
            f"{load_failure(path, exc)}"
        ) from None
    if not (isinstance(payload, dict) and payload.get("format") == MODEL_FORMAT):
        hint = ""
        if isinstance(payload, dict) and "model" in payload and "config" in payload:
            hint = " (a training checkpoint? save a model with --save-model)"
        raise ValueError(
            f"model file {str(path)!r} is not a pyg_progcl model: no 'format': "
            f"{MODEL_FORMAT!r} entry{hint}"
        )
    version = payload.get("version")
    if type(version) is not int or not 1 <= version <= MODEL_VERSION:  # (not a bool)
        raise ValueError(
            f"model file {str(path)!r} has format version {version!r}; this pyg_progcl reads "
            f"versions up to {MODEL_VERSION} (a newer pyg_progcl wrote it?)"
        )
    if not all(isinstance(payload.get(key), dict) for key in ("config", "state_dict")):
        raise ValueError(f"model file {str(path)!r} lacks its 'config' or 'state_dict' entry")
    count, stack = 0, [payload["config"]]  # (nested values too, counted to just past the limit)
    while stack and count <= MAX_CONFIG_VALUES:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    if count > MAX_CONFIG_VALUES:
        raise ValueError(
            f"model file {str(path)!r}: its configuration holds more than "
            f"{MAX_CONFIG_VALUES} values (a model's holds a few dozen); not a model to build"
        )
    for key, value in payload["state_dict"].items():  # (before the checksum densifies any)
        _check_weight_type(path, key, value)
    if "checksum" not in payload:
        raise ValueError(
            f"model file {str(path)!r} has no checksum (written by a development version "
            "of pyg_progcl before model files were sealed): save the model again"
        )
    if payload_checksum(payload) != payload["checksum"]:
        raise ValueError(
            f"model file {str(path)!r} is corrupted or was edited: its content does not "
            "match its checksum"
        )
    bad = next((k for k, v in payload["state_dict"].items() if nonfinite(v)), None)
    if bad is not None:
        raise ValueError(
            f"model file {str(path)!r}: weight {bad!r} holds NaN or infinite values (the "
            "training diverged?); such a model cannot embed"
        )
    return payload


def _check_weight_type(path: Path, key: str, value: Any) -> None:
    """Checks that state_dict entry ``key`` is a dense tensor of real numbers (floating
    point, or integer: a counter some modules keep)."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(
            f"model file {str(path)!r}: state_dict entry {key!r} is a "
            f"{type(value).__name__}, not a tensor"
        )
    if value.layout != torch.strided:
        raise ValueError(
            f"model file {str(path)!r}: weight {key!r} is a {value.layout} tensor; a "
            "model's weights are dense tensors"
        )
    if value.is_complex() or value.dtype == torch.bool or value.is_quantized:
        raise ValueError(
            f"model file {str(path)!r}: weight {key!r} is of type {value.dtype}; a model's "
            "weights are real floating-point numbers"
        )


class _TooManyTensorsError(Exception):
    """Raised while a configuration is built once it has made more tensors than allowed."""


def _check_fits(config: dict[str, Any], state_dict: dict[str, torch.Tensor]) -> None:
    """Checks that the model ``config`` describes has tensors of exactly the names and
    shapes of ``state_dict``, built on the ``meta`` device (no memory allocated), its
    layer count first and stopped beyond twice the file's tensors (a forged ``K = 10**7``
    stops at once); a ``ValueError`` names the first mismatch."""
    from torch.nn.modules import module as nn_module

    encoder = config.get("encoder")
    layers = encoder.get("num_layers") if isinstance(encoder, dict) else None
    held = {int(m.group(1)) for m in map(_ENCODER_LAYER.match, state_dict) if m is not None}
    if not isinstance(layers, int) or isinstance(layers, bool) or layers != len(held):
        raise ValueError(
            f"the configuration's num_layers is {layers!r}; the weights hold "
            f"{len(held)} encoder layers"
        )
    limit = 2 * len(state_dict) + 64  # (some modules register a tensor twice, or unsaved)
    thread, count = threading.get_ident(), [0]

    def registered(*args) -> None:  # (parameters and buffers registered in this thread)
        if threading.get_ident() == thread:
            count[0] += 1
            if count[0] > limit:
                raise _TooManyTensorsError(f"it makes more than {limit} weights")

    handles = [
        nn_module.register_module_parameter_registration_hook(registered),
        nn_module.register_module_buffer_registration_hook(registered),
    ]
    try:
        with torch.device("meta"):
            expected = build_from_config(config).state_dict()
    except _TooManyTensorsError as exc:
        raise ValueError(
            f"the configuration implies weights the file does not hold: {exc}, "
            f"the file holds {len(state_dict)}"
        ) from None
    finally:
        for handle in handles:
            handle.remove()
    missing = [key for key in expected if key not in state_dict]
    unexpected = [key for key in state_dict if key not in expected]
    if missing or unexpected:  # (the first few: a forged file may name thousands)
        raise ValueError(
            f"{len(missing)} weights missing {missing[:5]}, {len(unexpected)} unexpected "
            f"{unexpected[:5]}"
        )
    for key, tensor in expected.items():
        if tensor.shape != state_dict[key].shape:
            raise ValueError(
                f"weight {key!r} has shape {list(state_dict[key].shape)}, the configuration "
                f"makes {list(tensor.shape)}"
            )
        if tensor.is_floating_point() != state_dict[key].is_floating_point():
            raise ValueError(
                f"weight {key!r} is of type {state_dict[key].dtype}, the model holds "
                f"{tensor.dtype} there"
            )


def load_model(
    path: PathLike, map_location: Optional[Union[str, torch.device]] = None
) -> GRACEModel:
    """Reads a model written by :func:`save_model` (or ``--save-model``).

    Args:
        path: The model file.
        map_location: Device of the returned model (default: the CPU).

    Returns:
        The :class:`GRACEModel` in eval mode, ready for ``model(x, edge_index)``.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if it is not a sound pyg_progcl model file (docs/own_graph.md).
    """
    payload = read_model_file(path)
    try:
        _check_fits(payload["config"], payload["state_dict"])
        model = build_from_config(payload["config"])
        model.load_state_dict(payload["state_dict"], strict=True)
    except Exception as exc:  # whatever a configuration the code does not build raises
        raise ValueError(
            f"model file {str(path)!r}: its configuration and weights do not make a model "
            f"({type(exc).__name__}: {first_line(exc)})"
        ) from None
    model.eval()
    return model if map_location is None else model.to(map_location)
