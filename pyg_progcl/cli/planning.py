"""Planning a long run on the command line: the ``estimate:`` line after the first timed
epochs when the whole run would take more than an hour, with the cheapest ways to
shorten it (:class:`RunEstimate`)."""

from __future__ import annotations

import copy
import math
import statistics
import time
from collections.abc import Sequence
from typing import Any, Callable, Optional

import torch
from torch_geometric.data import Data

from pyg_progcl.io import graph_for_model
from pyg_progcl.losses.base import free_memory

from .build import build_loss, compiler_missing
from .presets import TrainConfig
from .run import full_graph_epoch

__all__: list[str] = []

#: Runs projected to take longer than this many seconds get an ``estimate:`` line.
LIMIT_S = 3600.0
#: Sampled negatives per anchor the line offers (and times).
NUM_NEGATIVES = 1024


def epoch_clock() -> float:
    """The clock that times epochs (seconds); tests replace it with a fake one."""
    return time.perf_counter()


def format_duration(seconds: float) -> str:
    """``'42 s'``, ``'12 min'``, ``'3.4 h'``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _seconds(value: float) -> str:
    """``'0.0431 s'``, ``'15.6 s'``, ``'1234 s'``."""
    return f"{value:.0f} s" if value >= 100 else f"{value:.3g} s"


def estimate_line(
    per_epoch: float,
    epochs: int,
    seeds: int,
    run: int,
    left: int,
    device: torch.device,
    sampled: Optional[float] = None,
    limit: float = LIMIT_S,
    unit: str = "seed",
    one: str = "--seeds 1",
    offers: Sequence[str] = (),
) -> Optional[str]:
    """The ``estimate:`` line, or ``None`` when the run fits in ``limit`` seconds.

    Args:
        per_epoch: Seconds per epoch, measured.
        epochs: Epochs per seed.
        seeds: Seeds of the run (each trains ``epochs`` epochs).
        run: Epochs the run trains, over all seeds (fewer than ``epochs x seeds`` when
            resumed).
        left: Epochs of them still to train.
        device: Where the run trains (a CPU run is offered a GPU).
        sampled: Seconds per epoch measured with ``--num-negatives`` :data:`NUM_NEGATIVES`
            (``None``: not offered).
        limit: Seconds above which the line is given.
        unit: What ``seeds`` counts (``diagnose`` trains one run per encoder).
        one: The option that trains one of them.
        offers: Further options that shorten the run, as they are to be written.
    """
    projected = per_epoch * run
    if projected <= limit:
        return None
    options = []
    fits = int(limit // (per_epoch * seeds))
    if 1 <= fits < epochs:
        options.append(f"--epochs {fits} ({format_duration(fits * per_epoch * seeds)})")
    if seeds > 1:
        options.append(f"{one} ({format_duration(per_epoch * epochs)})")
    if sampled is not None and sampled < per_epoch:
        options.append(
            f"--num-negatives {NUM_NEGATIVES} ({_seconds(sampled)}/epoch measured: "
            f"{format_duration(sampled * run)})"
        )
    options += offers
    if device.type == "cpu":
        gpu = "--device cuda" if torch.cuda.is_available() else "a GPU (--device cuda)"
        options.append(gpu)
    runs = f"{epochs} epochs x {seeds} {unit}{'s' if seeds > 1 else ''}"
    line = (
        f"estimate: {runs} at {_seconds(per_epoch)}/epoch take about "
        f"{format_duration(projected)} ({format_duration(per_epoch * left)} to go)"
    )
    return line + ("; faster: " + ", ".join(options) if options else "")


def sampled_epoch_time(
    model: torch.nn.Module, data: Data, config: TrainConfig, device: torch.device
) -> Optional[float]:
    """Seconds of a full-graph epoch with :data:`NUM_NEGATIVES` sampled negatives, the
    faster of two on copies of ``model`` (the run's model, optimiser and random
    generators stay as they were); ``None`` where the config cannot sample them."""
    try:
        loss_fn = build_loss(config.replace(num_negatives=NUM_NEGATIVES)).to(device)
    except ValueError:
        return None
    cuda = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        model = copy.deepcopy(model)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        graph = copy.copy(graph_for_model(model, data.to(device)))
        graph.x = model.input_features(graph.x)
        times = []
        for _ in range(2):  # (the first pays for allocations)
            tic = epoch_clock()
            full_graph_epoch(model, loss_fn, optimizer, graph, refit=False)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(epoch_clock() - tic)
    return min(times)


class RunEstimate:
    """A ``train`` callback (``callback(epoch, info)``) that times the first epochs and,
    when the whole run is projected to take more than ``limit`` seconds, writes one
    ``estimate:`` line (:func:`estimate_line`), once.

    The time per epoch is the median of the first ``timed`` intervals between callbacks
    (evaluations and checkpoints included); fewer when they already last a minute.

    Args:
        config: The run's config (its ``epochs``).
        seeds: Seeds of the run (or runs, e.g. ``diagnose``'s encoders).
        device: Where the run trains.
        write: Where the line goes (e.g. ``tqdm.write``).
        data: The graph, to time an epoch with sampled negatives on (full-graph runs with
            all negatives on graphs of more than ``2 x`` :data:`NUM_NEGATIVES` nodes).
        timed: Intervals to time.
        limit: Seconds above which the line is written.
        unit, one: What ``seeds`` counts and the option that trains one of them
            (:func:`estimate_line`).
        notes: Lines written at the first call, once the run is under way (e.g. the
            threads chosen, :func:`path_note`), so that a run that fails before its
            first epoch prints its error alone.
        offers: Options offered in the line (:func:`compile_offer`); ``None`` entries are
            left out.
    """

    def __init__(
        self,
        config: TrainConfig,
        seeds: int,
        device: torch.device,
        write: Callable[[str], Any],
        data: Optional[Data] = None,
        timed: int = 3,
        limit: float = LIMIT_S,
        unit: str = "seed",
        one: str = "--seeds 1",
        notes: Sequence[Optional[str]] = (),
        offers: Sequence[Optional[str]] = (),
    ):
        self.config, self.seeds, self.device, self.write = config, seeds, device, write
        self.data, self.timed, self.limit = data, timed, limit
        self.unit, self.one = unit, one
        self.notes = [line for line in notes if line]
        self.offers = [offer for offer in offers if offer]
        self.start: Optional[int] = None  # epochs done before the first callback
        self.last: Optional[float] = None
        self.intervals: list[float] = []
        self.done = False

    def __call__(self, epoch: int, info: dict[str, Any]) -> None:
        if self.done:
            return
        now = epoch_clock()
        if self.last is None:
            for line in self.notes:
                self.write(line)
            self.start, self.last = epoch - 1, now
            return
        self.intervals.append(now - self.last)
        self.last = now
        if len(self.intervals) < self.timed and sum(self.intervals) < 60:
            return
        self.done = True
        per_epoch = statistics.median(self.intervals)
        epochs = self.config.epochs
        run = (epochs - self.start) + (self.seeds - 1) * epochs
        left = run - (epoch - self.start)
        if per_epoch * run <= self.limit:
            return
        sampled = None
        if self._samples_help():
            sampled = sampled_epoch_time(info["model"], self.data, self.config, self.device)
        line = estimate_line(
            per_epoch, epochs, self.seeds, run, left, self.device, sampled, self.limit,
            self.unit, self.one, self.offers,
        )  # fmt: skip
        if line is not None:
            self.write(line)

    def _samples_help(self) -> bool:
        """Whether sampled negatives would replace all of them on the full graph."""
        config = self.config
        return (
            self.data is not None
            and config.batch_size is None
            and config.num_negatives is None
            and self.data.num_nodes > 2 * NUM_NEGATIVES
        )


def coverage(degrees: torch.Tensor, batch_size: int, fanout: list[int]) -> float:
    """The expected share of a graph's nodes in one batch's sampled subgraph:
    ``batch_size`` seeds, then ``fanout[k]`` neighbours (``-1``: all) of each node reached
    at hop ``k``, each draw a node at random (a mean-field estimate: the more of the
    graph is reached, the more draws land on nodes already in).

    Args:
        degrees: Every node's in-degree.
        batch_size: Seed nodes per batch.
        fanout: Neighbours sampled per hop.
    """
    n = degrees.numel()
    degrees = degrees.double()
    covered = min(1.0, batch_size / n)
    frontier = covered * n
    for k in fanout:
        draws = frontier * float((degrees if k < 0 else degrees.clamp(max=k)).mean())
        reached = 1.0 - (1.0 - covered) * math.exp(-draws / n)
        frontier, covered = (reached - covered) * n, reached
    return covered


def full_graph_bytes(data: Data, config: TrainConfig, num_negatives: int = NUM_NEGATIVES) -> int:
    """A generous estimate of the memory of a full-graph step with ``num_negatives``
    sampled negatives: the features three times (the graph's and two masked views), the
    edges four times, both views' activations (and their gradients) and the loss's
    ``N x k`` similarities."""
    n = data.num_nodes
    x = data.x
    features = (
        x.numel() * x.element_size() if x.layout == torch.strided else x.values().numel() * 12
    )
    widths = [2 * config.hidden] * (config.num_layers - 1) + [config.hidden, config.proj]
    activations = 2 * n * sum(widths) * 3 * 4
    loss = 2 * n * num_negatives * 4 * 4
    return int(3 * features + 4 * 16 * data.num_edges + activations + loss)


def path_note(
    data: Data, config: TrainConfig, device: torch.device, free: Optional[int] = None
) -> Optional[str]:
    """One line saying why mini-batch training (``config.batch_size``) is expected to be
    slower than full-graph training with sampled negatives on ``data``, where it is: the
    sampled subgraphs of an epoch's batches cover the graph at least twice over
    (:func:`coverage`) and a full-graph step would fit in memory (``free`` bytes; default
    :func:`free_memory`); else ``None``."""
    if config.batch_size is None or data.num_nodes == 0:
        return None
    from torch_geometric.utils import degree

    fanout = list(config.num_neighbors or [10] * config.num_layers)
    n = data.num_nodes
    share = coverage(degree(data.edge_index[1], n), config.batch_size, fanout)
    batches = math.ceil(n / config.batch_size)
    if batches * share < 2:
        return None
    need = full_graph_bytes(data, config)
    free = free_memory(device) if free is None else free
    if free is None or need > free:
        return None
    fan = "-".join("all" if k < 0 else str(k) for k in fanout)
    return (
        f"note: with --batch-size {config.batch_size} and {fan} neighbour sampling each of "
        f"the {batches} batches reaches about {share:.0%} of the {n:,} nodes, so an epoch "
        f"encodes the graph about {batches * share:.0f} times; full-graph training (no "
        f"--batch-size, --num-negatives {NUM_NEGATIVES}) encodes it once and is expected "
        f"to be faster (it needs at most about {need / 1e9:.1f} GB; {free / 1e9:.0f} GB "
        "are free)"
    )


def compile_offer(data: Data, config: TrainConfig, device: torch.device) -> Optional[str]:
    """``--compile-blocks`` as a way to shorten a long run (:func:`estimate_line`'s
    ``offers``) where the command line runs the loss in the CPU's cache-sized row blocks
    (:func:`~pyg_progcl.cli.build.cpu_block_size`) and a C++ compiler is found; else ``None``."""
    loss = build_loss(config, data.num_nodes, device)
    if loss.block_size is None or config.block_size is not None or compiler_missing(device):
        return None
    return (
        f"--compile-blocks (each row block of {loss.block_size} through torch.compile: Coauthor "
        "epochs ran 1.00-1.11x faster after the first)"
    )
