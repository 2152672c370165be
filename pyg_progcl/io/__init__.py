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
:mod:`~pyg_progcl.io.files`, the checks of paths and the atomic writes they share.
"""

from .embedding import check_embedding_path, embed, save_embeddings
from .graphs import GraphFieldWarning, graph_for_model, read_graph
from .models import load_model, save_model

__all__ = [
    "GraphFieldWarning",
    "embed",
    "load_model",
    "read_graph",
    "save_embeddings",
    "save_model",
    "check_embedding_path",
    "graph_for_model",
]
