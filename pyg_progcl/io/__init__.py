"""Graphs and models in and out: read a graph file, save and load a trained model, embed
any graph with it (docs/own_graph.md).

* :func:`read_graph` reads a ``.pt`` file holding a :class:`torch_geometric.data.Data`
  (``torch.save(data, path)``) or a ``.npz`` file of plain arrays (``edge_index``, ``x``,
  optionally ``edge_weight``, ``y`` and boolean ``train_mask`` / ``val_mask`` /
  ``test_mask``), both without running code from the file (``weights_only=True``,
  ``allow_pickle=False``); training and :func:`embed` use its ``edge_weight`` where the
  encoder takes edge weights (:func:`graph_for_model`).
* :func:`save_model` writes a :class:`~pyg_progcl.GRACEModel` as one self-describing file,
  a dict ``{"format": "pyg_progcl.model", "version": 1, "config": ..., "state_dict": ...,
  "metadata": ..., "checksum": ...}`` of plain Python values and tensors: :func:`load_model`
  (or ``torch.load(path, weights_only=True)``) reads it back without the code that built
  it, and refuses a file whose checksum does not match or whose weights are not finite.
* :func:`embed` computes every node's embedding, on the whole graph or layer by layer
  over batches of nodes (:func:`~pyg_progcl.minibatch.embed_minibatch`).

Not PyG's :class:`~torch_geometric.nn.model_hub.PyGModelHubMixin`: its
``save_pretrained`` needs ``huggingface_hub`` and writes a folder (``config.json`` and
the weights), and ``from_pretrained`` rebuilds a model class that was mixed in, not one
assembled from an encoder, a projection head and augmenters. One file that ``torch.load``
reads safely travels more easily; it can be uploaded to a model hub as it is.

The package holds one module per kind of file: :mod:`~pyg_progcl.io.graphs`,
:mod:`~pyg_progcl.io.models` and :mod:`~pyg_progcl.io.embedding`; and
:mod:`~pyg_progcl.io.progress`, the progress bar of batches that :func:`embed` and the
trainer show.
"""

# Besides ``__all__``, the helpers of the command line and the trainer and the modules'
# constants (the ``name as name`` imports), documented at their modules.
from ._common import PathLike as PathLike
from .embedding import EMBEDDING_SUFFIXES as EMBEDDING_SUFFIXES
from .embedding import check_embedding_path as check_embedding_path
from .embedding import embed, save_embeddings
from .graphs import GRAPH_SUFFIXES as GRAPH_SUFFIXES
from .graphs import GraphFieldWarning, read_graph
from .graphs import graph_for_model as graph_for_model
from .graphs import takes_edge_weight as takes_edge_weight
from .models import MODEL_FORMAT as MODEL_FORMAT
from .models import MODEL_VERSION as MODEL_VERSION
from .models import build_from_config as build_from_config
from .models import load_model, save_model
from .models import model_config as model_config
from .models import read_model_file as read_model_file

__all__ = [
    "GraphFieldWarning",
    "embed",
    "load_model",
    "read_graph",
    "save_embeddings",
    "save_model",
]
