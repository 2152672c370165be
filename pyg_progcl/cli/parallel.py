"""The trainer's view of torch.distributed: which rank this process is, and the few
agreements the ranks need (stop together, rank 0's results, sharded embeddings).

One process (no process group) is rank 0 of 1, for which every agreement is a no-op. The
trainer never launches processes: ``torchrun`` (or Lightning, Ray, a SLURM launcher)
starts them and sets up the environment; :func:`join` initialises the default process
group from it.
"""

from __future__ import annotations

import datetime
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_progcl.minibatch.inference import node_part

__all__: list[str] = []


def all_gather_rows(x: Tensor, sizes: list[int]) -> Tensor:
    """Every rank's rows, concatenated in rank order, when rank ``r`` holds ``sizes[r]``
    rows (padded to the largest for the gather; no gradient)."""
    padded = x.new_zeros(max(sizes), *x.shape[1:])
    padded[: x.size(0)] = x
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return torch.cat([part[:size] for part, size in zip(parts, sizes)])


#: How long a collective waits for the other ranks before the job fails (not hangs).
TIMEOUT = datetime.timedelta(seconds=int(os.environ.get("PYG_PROGCL_DIST_TIMEOUT", "300")))


@dataclass(frozen=True)
class Ranks:
    """This process's place among the training processes."""

    rank: int = 0
    world_size: int = 1
    distributed: bool = False

    @property
    def main(self) -> bool:
        """Whether this process writes results, checkpoints and progress (rank 0)."""
        return self.rank == 0

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on some rank (every rank gets the same answer)."""
        if not self.distributed:
            return flag
        value = torch.tensor([1 if flag else 0])
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=_cpu_group())
        return bool(value)

    def wait(self) -> None:
        """Returns when every rank has called it (a barrier)."""
        if self.distributed:
            dist.barrier(group=_cpu_group())

    def mean(self, value: float) -> float:
        """The mean of ``value`` over the ranks (every rank gets the same answer)."""
        if not self.distributed:
            return value
        total = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(total, group=_cpu_group())
        return float(total) / self.world_size

    def from_main(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (a picklable object)."""
        if not self.distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, group=_cpu_group())
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (picklable), in rank order, on every rank."""
        if not self.distributed:
            return [value]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, value, group=_cpu_group())
        return out

    def part(self) -> tuple[int, int]:
        """``(rank, world_size)``: this rank's part of work split by ranks."""
        return self.rank, self.world_size

    def row_gather(self, num_nodes: int) -> Optional[Callable[[Tensor], Tensor]]:
        """Assembles every rank's :func:`~pyg_progcl.minibatch.inference.node_part` rows
        (``None`` for one process)."""
        if not self.distributed:
            return None
        parts = [node_part(num_nodes, (r, self.world_size)) for r in range(self.world_size)]
        sizes = [part.stop - part.start for part in parts]
        return lambda rows: all_gather_rows(rows, sizes)


#: A single process: rank 0 of 1.
ONE = Ranks()

_CPU_GROUP: Optional[dist.ProcessGroup] = None
_JOINED = False  # whether join() initialised the default group (leave() destroys it)


def _cpu_group() -> Optional[dist.ProcessGroup]:
    """A gloo group for the small CPU-side agreements (the default group may be NCCL)."""
    global _CPU_GROUP
    if dist.get_backend() == "gloo":
        return None
    if _CPU_GROUP is None:
        _CPU_GROUP = dist.new_group(backend="gloo", timeout=TIMEOUT)
    return _CPU_GROUP


def join(device: str) -> tuple[Ranks, torch.device]:
    """Joins the training processes: the default process group (initialised here from the
    launcher's environment unless it already is; NCCL for CUDA, gloo on the CPU) and this
    rank's device (``cuda:LOCAL_RANK`` for a CUDA device)."""
    if not dist.is_available():
        raise ValueError("--distributed needs a torch build with torch.distributed")
    cuda = str(device).startswith("cuda") or (str(device) == "auto" and torch.cuda.is_available())
    if not dist.is_initialized():
        missing = [
            k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ
        ]
        if missing:
            raise ValueError(
                "--distributed runs under a launcher that sets up the processes, e.g. "
                "`torchrun --standalone --nproc-per-node N -m pyg_progcl train --distributed ...` "
                f"(missing {', '.join(missing)})"
            )
        dist.init_process_group("nccl" if cuda else "gloo", timeout=TIMEOUT)
        global _JOINED
        _JOINED = True
    ranks = Ranks(dist.get_rank(), dist.get_world_size(), distributed=True)
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", ranks.rank % max(torch.cuda.device_count(), 1)))
        torch.cuda.set_device(local)
        return ranks, torch.device("cuda", local)
    return ranks, torch.device("cpu")


#: Seconds :func:`leave` yields the interpreter lock before it destroys the group.
SETTLE_S = 0.05


def leave() -> None:
    """Destroys the default process group if :func:`join` initialised it.

    First it yields the interpreter lock for ``SETTLE_S``: a gloo worker thread
    that has just completed a collective may still need the lock to release the
    collective's tensors, and a group destroyed meanwhile (here, or later where a
    DistributedDataParallel that holds it is freed with an exception's traceback) waits
    for that thread while holding the lock: the process never exits."""
    global _CPU_GROUP, _JOINED
    if _JOINED and dist.is_initialized():
        time.sleep(SETTLE_S)
        dist.destroy_process_group()
    _CPU_GROUP, _JOINED = None, False
