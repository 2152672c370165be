"""Graphs and models in and out (docs/own_graph.md): :func:`read_graph` reads a ``.pt``
``Data`` or a ``.npz`` of arrays, :func:`save_model` / :func:`load_model` a checksummed
model file, :func:`embed` computes every node's embedding, whole or in batches."""

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
