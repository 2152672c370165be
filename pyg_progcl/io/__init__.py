"""Graphs and models in and out (docs/own_graph.md): :func:`read_graph` reads a ``.pt``
``Data`` or a ``.npz`` of arrays without running code from the file; :func:`save_model`
writes a :class:`~pyg_progcl.GRACEModel` as one checksummed file of plain values and
tensors that :func:`load_model` (or ``torch.load(path, weights_only=True)``) reads back;
:func:`embed` computes every node's embedding, whole or in batches. One module per kind
of file (:mod:`~pyg_progcl.io.graphs`, :mod:`~pyg_progcl.io.models`,
:mod:`~pyg_progcl.io.embedding`) and :mod:`~pyg_progcl.io.files`, the path checks and
atomic writes they share.
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
