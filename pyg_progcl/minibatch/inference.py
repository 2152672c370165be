"""Every node's embeddings in batches: exact layer by layer, or sampled (docs/algorithms.md §9)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable, Optional

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.nn import GATConv, GATv2Conv, GCNConv, GINConv, GraphConv, SAGEConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from .._checks import accepts_check, check_input_width, check_int
from ..encoders import GCNEncoder, MLPEncoder, sparse_features
from .sampling import InEdges, check_data, neighbor_loader, seed_count

__all__ = ["embed_minibatch"]


def _layerwise_supported(encoder) -> bool:
    """Whether :func:`_layerwise` computes this encoder exactly (known layers, one hop)."""
    if not isinstance(encoder, GCNEncoder):
        return isinstance(encoder, MLPEncoder)
    exact = (GCNConv, SAGEConv, GATConv, GATv2Conv, GINConv, GraphConv)
    return all(
        isinstance(conv, exact) and getattr(conv, "flow", "source_to_target") == "source_to_target"
        for conv in encoder.layers
    )


def _layer_graph(
    conv, edge_index: Tensor, num_nodes: int, dtype, edge_weight: Optional[Tensor] = None
) -> tuple[Tensor, Optional[Tensor]]:
    """The edges and weights one layer aggregates over (GCN's: normalised on the full graph)."""
    if isinstance(conv, GCNConv) and conv.normalize:
        # Explicit unit weights: without them PyG gives added self-loops weight 1 even with
        # ``improved=True`` (2), unlike GCNConv's own sparse path.
        if edge_weight is None:
            edge_weight = torch.ones(edge_index.size(1), dtype=dtype)
        return gcn_norm(
            edge_index, edge_weight.to(dtype), num_nodes, conv.improved, conv.add_self_loops,
            conv.flow, dtype,
        )  # fmt: skip
    return edge_index, edge_weight


def _apply_layer(
    conv, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor], keyword: Optional[str]
) -> Tensor:
    """``conv`` on a batch's edges, their weights passed as its argument ``keyword``."""
    if isinstance(conv, GCNConv) and conv.normalize:
        conv.normalize = False  # the weights already hold the full graph's normalisation
        try:
            return conv(x, edge_index, edge_weight)
        finally:
            conv.normalize = True
    if edge_weight is None or keyword is None:
        return conv(x, edge_index)
    return conv(x, edge_index, **{keyword: edge_weight})


def _layer_on_targets(conv, x: Tensor, graph: InEdges, targets: Tensor, device, keyword):
    """One layer's (pre-activation) output at ``targets`` from their in-neighbours' rows."""
    nodes, sub_ei, pos = graph.subgraph(targets, [-1])
    weight = None if graph.weight is None else graph.weight[pos].to(device)
    h = _apply_layer(conv, x[nodes.to(x.device)].to(device), sub_ei.to(device), weight, keyword)
    return h[: targets.numel()]


def _transform_rows(lin, x: Tensor, batch_size: int, device, sparse: bool) -> Tensor:
    """``lin(x)``, ``batch_size`` rows at a time (sparse rows if ``sparse``, as layer 0)."""
    out = x.new_empty(x.size(0), lin.out_channels)
    for start in range(0, x.size(0), batch_size):
        rows = x[start : start + batch_size].to(device)
        out[start : start + rows.size(0)] = lin(sparse_features(rows) if sparse else rows)
    return out


#: The default ``message_chunk`` of :func:`embed_minibatch`: values of a batch's messages
#: (edges x width) gathered at a time (all at once they outweigh a full-graph forward).
MESSAGE_CHUNK = 1 << 22


def _aggregate_on_targets(
    conv, xw: Tensor, graph: InEdges, targets: Tensor, device, chunk: int
) -> Tensor:
    """A linear-first layer's output at ``targets``: the (weighted) sum of their
    in-neighbours' transformed rows ``xw``, ``chunk`` values at a time, plus the bias."""
    pos, slot = graph.sample(targets, -1)
    h = torch.zeros(targets.numel(), xw.size(1), dtype=xw.dtype, device=device)
    step = max(1, chunk // max(1, xw.size(1)))
    for start in range(0, pos.numel(), step):
        part = pos[start : start + step]
        messages = xw[graph.source[part].to(xw.device)].to(device)
        if graph.weight is not None:
            messages.mul_(graph.weight[part].to(device, messages.dtype).unsqueeze(-1))
        h.index_add_(0, slot[start : start + step].to(device), messages)
    return h if conv.bias is None else h + conv.bias


def node_part(num_nodes: int, part: tuple[int, int]) -> slice:
    """The nodes of part ``p`` of ``P`` (``part = (p, P)``): contiguous, sizes within one."""
    p, parts = part
    return slice(num_nodes * p // parts, num_nodes * (p + 1) // parts)


@torch.no_grad()
def _layerwise(
    encoder,
    x: Tensor,
    edge_index: Tensor,
    edge_weight: Optional[Tensor],
    batch_size: int,
    device,
    part,
    gather,
    progress,
    message_chunk: int,
) -> Tensor:
    """Exact encoder output, layer by layer over batches of the ``part``'s nodes (§9)."""
    n = x.size(0)
    own = node_part(n, part)
    total, done = -(-(own.stop - own.start) // batch_size) * len(encoder.layers), 0
    progress(0, total)
    keyword = getattr(encoder, "_edge_weight_arg", None)  # how GCNEncoder passes weights
    weight = None if edge_weight is None else edge_weight.cpu()
    for i, (conv, act) in enumerate(zip(encoder.layers, encoder.activations)):
        out, graph, xw = None, None, None
        if not isinstance(encoder, MLPEncoder):
            layer_edges, layer_weight = _layer_graph(conv, edge_index.cpu(), n, x.dtype, weight)
            graph = InEdges(layer_edges, n, layer_weight)
        if graph is not None and isinstance(conv, GCNConv) and conv.aggr == "add":
            # x @ W, then a sum over in-edges, then a bias: x @ W once per layer
            sparse = i == 0 and getattr(encoder, "sparse_features", False)
            xw = _transform_rows(conv.lin, x, batch_size, device, sparse)
        for start in range(own.start, own.stop, batch_size):
            targets = torch.arange(start, min(start + batch_size, own.stop))
            if graph is None:
                h = act(conv(x[targets].to(device)))
            elif xw is not None:
                h = act(_aggregate_on_targets(conv, xw, graph, targets, device, message_chunk))
            else:
                h = act(_layer_on_targets(conv, x, graph, targets, device, keyword))
            if out is None:
                out = x.new_empty(own.stop - own.start, h.size(1))
            out[start - own.start : start - own.start + targets.numel()] = h.to(out.device)
            done += 1
            progress(done, total)
        x = out if gather is None else gather(out)
    return x


def _embed_sampled(
    model, data: Data, num_neighbors, batch_size: int, device, part, gather, progress
) -> Tensor:
    """Each batch's seed rows of ``model``'s output on the subgraph sampled around them."""
    own = node_part(data.num_nodes, part)
    nodes = torch.arange(own.start, own.stop)
    loader = neighbor_loader(data, num_neighbors, batch_size, shuffle=False, input_nodes=nodes)
    out = None
    unchecked = {"check": False} if accepts_check(model) else {}  # (subgraphs of a checked graph)
    progress(0, len(loader))
    for done, batch in enumerate(loader, 1):
        seeds = seed_count(batch)
        batch = batch.to(device)
        inputs = (batch.x, batch.edge_index, batch.get("edge_weight"))  # (sampled weights)
        z = model(*(t for t in inputs if t is not None), **unchecked)[:seeds]
        if out is None:
            out = data.x.new_empty(own.stop - own.start, z.size(1))
        out[batch.n_id[:seeds].to(out.device) - own.start] = z.to(out.device)
        progress(done, len(loader))
    return out if gather is None else gather(out)


def _full_neighbourhoods(encoder) -> list[int]:
    """``[-1] * (L + 1)``, ``L`` the hops the encoder reaches (a layer's ``K``, else 1)."""
    layers = getattr(encoder, "layers", None) or getattr(encoder, "convs", None)
    if layers is not None:
        return [-1] * (sum(int(getattr(conv, "K", 1)) for conv in layers) + 1)
    if getattr(encoder, "num_layers", None) is None:
        raise ValueError("pass `num_neighbors` for an encoder without `layers` or `num_layers`")
    return [-1] * (int(encoder.num_layers) + 1)


@torch.no_grad()
def embed_minibatch(
    model: torch.nn.Module,
    data: Data,
    batch_size: int,
    num_neighbors: Optional[Sequence[int]] = None,
    *,
    device: str | torch.device | None = None,
    part: tuple[int, int] = (0, 1),
    gather: Optional[Callable[[Tensor], Tensor]] = None,
    progress: Optional[Callable[[int, Optional[int]], None]] = None,
    message_chunk: int = MESSAGE_CHUNK,
) -> Tensor:
    r"""Encoder embeddings ``f(G)`` ``[num_nodes, hidden_channels]``, in batches of nodes.

    With ``num_neighbors=None`` the result is exact (``model(data.x, data.edge_index,
    data.edge_weight)`` up to round-off; the encoders computed layer by layer:
    docs/algorithms.md §9); with ``num_neighbors``, from sampled neighbourhoods.

    Args:
        model: A :class:`~pyg_progcl.GRACEModel` (or an encoder ``(x, edge_index) -> z``).
        data: The graph.
        batch_size: Nodes per batch.
        num_neighbors: Sampled neighbours per hop; ``None``: exact inference.
        device: Where batches are encoded (default: the model's device); the result is on
            ``data.x``'s device.
        part: ``(p, P)``: compute only part ``p`` of ``P`` of the nodes (contiguous), the
            work of one of ``P`` processes.
        gather: With several parts: assembles every part's rows (in part order) from this
            part's (an all-gather); called once per layer.
        progress: ``progress(done, total)``, ``done = 0`` before the first batch, then
            after every batch (of every layer).
        message_chunk: Exact GCN layers sum a batch's messages this many values at a
            time.
    """
    batch_size = check_int("batch_size", batch_size)
    message_chunk = check_int("message_chunk", message_chunk)
    progress = progress or (lambda done, total: None)
    if device is None:
        device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        encoder = getattr(model, "encoder", model)
        if not isinstance(data.get("x"), Tensor):
            raise ValueError("`data` needs node features `x` to embed")
        check_input_width(data.x, encoder)
        weight = data.get("edge_weight")
        if weight is not None and isinstance(encoder, GCNEncoder) and not encoder._edge_weight_arg:
            raise ValueError(  # (as GCNEncoder.forward refuses them)
                f"`edge_weight` was given but {encoder.conv.__name__} does not accept edge weights"
            )
        if part[1] > 1 and gather is None:
            raise ValueError("computing one `part` of the nodes needs `gather` to assemble them")
        if num_neighbors is None and _layerwise_supported(encoder):
            check_data(data)  # (the sampled path's loader checks it)
            return _layerwise(
                encoder, data.x, data.edge_index, weight, batch_size, device, part, gather,
                progress, message_chunk,
            )  # fmt: skip
        if num_neighbors is None:
            num_neighbors = _full_neighbourhoods(encoder)
        return _embed_sampled(
            model, data, num_neighbors, batch_size, device, part, gather, progress
        )
    finally:
        model.train(was_training)
