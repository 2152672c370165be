"""Neighbour sampling for mini-batch training (docs/algorithms.md §9): PyG's
``NeighborLoader`` where pyg-lib is installed, else a plain-torch sampler of the same batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Optional

import torch
import torch_geometric.typing as pyg_typing
from torch import Tensor
from torch_geometric.data import Data

from .._checks import check_choice, check_int
from .._graphs import check_graph

__all__ = ["epoch_seeds", "neighbor_loader"]


def check_data(data) -> None:
    """:func:`check_graph` of a ``Data`` (its ``adj_t`` where it has no ``edge_index``)."""
    edge_index = data.edge_index if data.edge_index is not None else data.get("adj_t")
    check_graph(data.x, edge_index, data.get("edge_weight"), num_nodes=data.num_nodes)


def pyg_can_sample() -> bool:
    """Whether PyG's ``NeighborLoader`` can sample here (it needs pyg-lib or torch-sparse)."""
    return bool(pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE)


def default_backend() -> str:
    """The sampler ``neighbor_loader(backend="auto")`` takes: ``"pyg"`` where pyg-lib is
    installed, else ``"torch"`` (faster than ``NeighborLoader`` on torch-sparse alone)."""
    return "pyg" if pyg_typing.WITH_PYG_LIB else "torch"


def check_input_nodes(input_nodes, num_nodes: int) -> Tensor:
    """Seed candidates as distinct ``long`` node ids in ``[0, num_nodes)``, from ids or a
    boolean mask of length ``num_nodes``."""
    if not isinstance(input_nodes, Tensor):
        raise ValueError(
            f"`input_nodes` must be a tensor of node ids or a boolean mask (got "
            f"{type(input_nodes).__name__})"
        )
    if input_nodes.dtype == torch.bool:
        if input_nodes.shape != (num_nodes,):
            raise ValueError(
                f"a boolean `input_nodes` mask must have shape [num_nodes] = [{num_nodes}] "
                f"(got {list(input_nodes.shape)})"
            )
        return input_nodes.nonzero().view(-1).cpu()
    if input_nodes.is_floating_point() or input_nodes.is_complex() or input_nodes.dim() != 1:
        raise ValueError(
            f"`input_nodes` must be a 1-D integer tensor of node ids (got {input_nodes.dtype}, "
            f"shape {list(input_nodes.shape)})"
        )
    ids = input_nodes.cpu().long()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise ValueError(f"`input_nodes` must hold node ids in [0, {num_nodes})")
    if torch.unique(ids).numel() != ids.numel():
        raise ValueError("`input_nodes` must not repeat a node")
    return ids


def check_num_neighbors(num_neighbors: Sequence[int]) -> list[int]:
    """Checks a per-hop fan-out list: integers ``>= 1``, or ``-1`` for all neighbours."""
    if isinstance(num_neighbors, (int, str)) or not len(num_neighbors):
        raise ValueError(
            f"`num_neighbors` must be a non-empty list of integers, one per hop (got "
            f"{num_neighbors!r})"
        )
    values = [check_int("num_neighbors", k, minimum=-1) for k in num_neighbors]
    if 0 in values:
        raise ValueError(f"`num_neighbors` entries must be >= 1 or -1 (all) (got {values})")
    return values


class InEdges:
    """The edges of a graph grouped by target node (CSC), for sampling in-neighbours."""

    def __init__(self, edge_index: Tensor, num_nodes: int, edge_weight: Optional[Tensor] = None):
        edge_index = edge_index.cpu()
        self.perm = torch.argsort(edge_index[1], stable=True)
        self.source = edge_index[0, self.perm]
        self.weight = None if edge_weight is None else edge_weight.cpu()[self.perm]
        counts = torch.bincount(edge_index[1], minlength=num_nodes)
        self.ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        self._local = torch.full((num_nodes,), -1, dtype=torch.long)  # (all -1 between calls)

    def sample(self, targets: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """Positions (into the sorted edges) of up to ``k`` in-edges per target, without
        replacement (all of them for ``k = -1``), and each edge's target slot."""
        start = self.ptr[targets]
        deg = self.ptr[targets + 1] - start
        slot = torch.repeat_interleave(torch.arange(targets.numel()), deg)
        offset = torch.arange(slot.numel()) - torch.repeat_interleave(deg.cumsum(0) - deg, deg)
        pos = start[slot] + offset
        if k < 0 or slot.numel() == 0 or int(deg.max()) <= k:
            return pos, slot
        # Each target keeps the first k of its edges in a random order (slot + a key in [0, 1)).
        order = torch.argsort(slot.double() + torch.rand(slot.numel(), dtype=torch.float64))
        keep = order[offset < k]
        return pos[keep], slot[keep]

    def subgraph(self, seeds: Tensor, num_neighbors: list[int]) -> tuple[Tensor, Tensor, Tensor]:
        """The subgraph sampled around ``seeds``, ``num_neighbors[l]`` in-edges per node first
        reached at hop ``l - 1``: its nodes (seeds first), relabelled edges and their positions."""
        local = self._local
        local[seeds] = torch.arange(seeds.numel())
        n_id, frontier, count, src, dst, e_pos = [seeds], seeds, seeds.numel(), [], [], []
        try:
            for k in num_neighbors:
                pos, slot = self.sample(frontier, k)
                source = self.source[pos]
                new = torch.unique(source[local[source] < 0])
                local[new] = torch.arange(count, count + new.numel())
                count += new.numel()
                src.append(local[source])
                dst.append(local[frontier[slot]])
                e_pos.append(pos)
                n_id.append(new)
                frontier = new
        finally:
            n_id = torch.cat(n_id)
            local[n_id] = -1
        return n_id, torch.stack([torch.cat(src), torch.cat(dst)]), torch.cat(e_pos)


class NeighborSubgraphLoader:
    r"""Neighbour sampling in plain torch, shaped like PyG's ``NeighborLoader``.

    Each batch is the subgraph sampled around ``batch_size`` seed nodes: hop ``l`` draws
    up to ``num_neighbors[l]`` in-neighbours (without replacement; ``-1``: all) of the
    nodes first reached at hop ``l - 1`` (Hamilton et al., 2017). A batch holds what
    ``NeighborLoader``'s do: ``x`` (and ``y``) of the sampled nodes, seeds first, the
    relabelled edges (with their ``edge_weight``), ``n_id``, ``e_id``, ``input_id`` and
    ``batch_size``.

    Args:
        data: The graph (``x``, ``edge_index``, optionally ``y`` and ``edge_weight``).
        num_neighbors, batch_size, input_nodes: As :func:`neighbor_loader`'s.
        shuffle: Draw the seeds in a random order each epoch (torch's global RNG).
        drop_last: Skip the last, smaller batch.
    """

    def __init__(
        self,
        data: Data,
        num_neighbors: Sequence[int],
        batch_size: int = 1,
        input_nodes: Optional[Tensor] = None,
        shuffle: bool = False,
        drop_last: bool = False,
    ):
        check_data(data)
        self.data = data
        self.num_neighbors = check_num_neighbors(num_neighbors)
        self.batch_size = check_int("batch_size", batch_size)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        n = data.num_nodes
        self.input_nodes = (
            torch.arange(n) if input_nodes is None else check_input_nodes(input_nodes, n)
        )
        self._edges = InEdges(data.edge_index, n)

    def __len__(self) -> int:
        full, rest = divmod(self.input_nodes.numel(), self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def __iter__(self) -> Iterator[Data]:
        count = self.input_nodes.numel()
        order = torch.randperm(count) if self.shuffle else torch.arange(count)
        for i in range(len(self)):
            index = order[i * self.batch_size : (i + 1) * self.batch_size]
            yield self.sample(self.input_nodes[index], input_id=index)

    def sample(self, seeds: Tensor, input_id: Optional[Tensor] = None) -> Data:
        """The batch of the subgraph sampled around ``seeds`` (distinct node ids);
        ``input_id``: the seeds' positions in ``input_nodes`` (default: ``seeds``)."""
        n_id, edge_index, e_pos = self._edges.subgraph(seeds, self.num_neighbors)
        batch = Data(
            edge_index=edge_index,
            n_id=n_id,
            e_id=self._edges.perm[e_pos],
            batch_size=int(seeds.numel()),
            input_id=seeds if input_id is None else input_id,
            num_nodes=int(n_id.numel()),
        )
        for key in ("x", "y"):
            value = self.data.get(key)
            if value is not None:  # (index_select: 2-4x faster than x[n_id] on the CPU)
                batch[key] = value.index_select(0, n_id.to(value.device))
        weight = self.data.get("edge_weight")
        if weight is not None:  # the sampled edges' weights, as NeighborLoader carries them
            batch.edge_weight = weight.index_select(0, batch.e_id.to(weight.device))
        return batch


def neighbor_loader(
    data: Data,
    num_neighbors: Sequence[int],
    batch_size: int,
    *,
    shuffle: bool = True,
    input_nodes: Optional[Tensor] = None,
    backend: str = "auto",
    **kwargs: Any,
):
    """A neighbour-sampling loader: PyG's ``NeighborLoader`` where pyg-lib is installed,
    else :class:`NeighborSubgraphLoader` (same batches, plain torch).

    Args:
        data: The graph (kept where it is; batches are moved by the training loop).
        num_neighbors: Neighbours per hop (``-1``: all), e.g. ``[10, 10]``.
        batch_size: Seed nodes per batch.
        input_nodes: Seed candidates (ids or a boolean mask); default all nodes.
        backend: ``"auto"`` (:func:`default_backend`), ``"pyg"`` (``NeighborLoader``, which
            needs pyg-lib or torch-sparse) or ``"torch"`` (:class:`NeighborSubgraphLoader`).
        **kwargs: Passed to ``NeighborLoader`` (e.g. ``num_workers``); ``drop_last`` is
            also understood by the fallback.
    """
    num_neighbors = check_num_neighbors(num_neighbors)
    batch_size = check_int("batch_size", batch_size)
    check_choice("backend", backend, {"auto", "pyg", "torch"})
    if input_nodes is not None:
        input_nodes = check_input_nodes(input_nodes, data.num_nodes)
    if backend == "auto":
        backend = default_backend()
    if backend == "pyg":
        from torch_geometric.loader import NeighborLoader

        check_data(data)  # once: the batches are subgraphs of a checked graph
        return NeighborLoader(
            data,
            num_neighbors=num_neighbors,
            batch_size=batch_size,
            shuffle=shuffle,
            input_nodes=input_nodes,
            **kwargs,
        )
    drop_last = bool(kwargs.pop("drop_last", False))
    if kwargs:
        raise ValueError(f"unsupported options for the plain-torch loader: {sorted(kwargs)}")
    return NeighborSubgraphLoader(data, num_neighbors, batch_size, input_nodes, shuffle, drop_last)


def epoch_seeds(
    num_nodes: int,
    batch_size: int,
    epoch: int,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
) -> Tensor:
    """This rank's seed nodes of one epoch, in batch order: a permutation drawn from
    ``(seed, epoch)`` alone, cut into global batches of ``world_size · batch_size``
    seeds, of which rank ``r`` takes the ``r``-th slice (a last, smaller batch is split
    evenly; the fewer than ``world_size`` seeds left over skip the epoch). Load the result
    with ``neighbor_loader(data, ..., batch_size, shuffle=False, input_nodes=...)``.
    """
    num_nodes, batch_size = check_int("num_nodes", num_nodes), check_int("batch_size", batch_size)
    rank, world_size = check_int("rank", rank, 0), check_int("world_size", world_size)
    if rank >= world_size:
        raise ValueError(f"`rank` must be < `world_size` (got {rank} and {world_size})")
    generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    perm = torch.randperm(num_nodes, generator=generator)
    step = world_size * batch_size
    full = num_nodes // step * step
    tail = (num_nodes - full) // world_size  # the last, smaller batch's share per rank
    own = perm[:full].view(-1, world_size, batch_size)[:, rank].reshape(-1)
    return torch.cat([own, perm[full + rank * tail : full + (rank + 1) * tail]])


def seed_count(batch: Data) -> int:
    """The number of seed nodes of a batch (its first rows): ``batch_size``, else all."""
    size = batch.get("batch_size")
    return int(batch.num_nodes if size is None else size)
