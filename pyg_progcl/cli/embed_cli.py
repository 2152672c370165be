"""The ``embed`` subcommand: ``python -m pyg_progcl embed --model M --data G --output Z``
embeds every node of a graph file with a model saved by ``train --save-model``
(docs/own_graph.md).

The graph may be another one than the model was trained on (new nodes, a later snapshot)
as long as its features have the same width. Its ``edge_weight``, if any, is used as in
training (:func:`~pyg_progcl.io.graph_for_model`: one warning line where the model's
encoder takes no edge weights). Full-graph by default; ``--batch-size``
computes the embeddings layer by layer over batches of nodes (exact, memory of one
batch's neighbourhood per layer); ``--num-neighbors`` samples neighbours instead (``-1``:
all of them, exact). The output is checked first and written atomically: a failed or
interrupted command (SIGTERM, Ctrl-C) leaves no output file and an existing one as it was,
unless the signal came after the output's rename, when the output is complete and the
message says it was written. A temporary file that a killed run (SIGKILL) left beside the
output is removed by the next run that writes to that folder.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Optional

import torch

from pyg_progcl.io import check_embedding_path, embed, load_model, read_graph, save_embeddings

from .files import check_distinct
from .loop import resolve_device
from .progress import batch_bar
from .threads import set_threads
from .train_cli import THREADS_HELP, int_at_least, note

__all__: list[str] = []


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the ``embed`` subcommand's arguments to ``parser``."""
    parser.add_argument(
        "--model", required=True, metavar="FILE",
        help="a model written by `train --save-model` (or pyg_progcl.io.save_model)",
    )  # fmt: skip
    parser.add_argument(
        "--data", required=True, metavar="FILE",
        help="the graph: .pt (a torch_geometric Data) or .npz (edge_index, x, ...), features "
        "of the model's input width",
    )  # fmt: skip
    parser.add_argument(
        "--output", required=True, metavar="FILE",
        help="where to write the embeddings (N x hidden, float32, node order): .npy or .pt",
    )  # fmt: skip
    parser.add_argument(
        "--batch-size", type=int_at_least(1), metavar="B",
        help="embed layer by layer over batches of B nodes (default: the whole graph at once)",
    )  # fmt: skip
    parser.add_argument(
        "--num-neighbors", type=int, nargs="+", metavar="K",
        help="with --batch-size: neighbours sampled per layer (approximate); -1: all (exact, "
        "the default)",
    )  # fmt: skip
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 or auto")
    parser.add_argument("--threads", type=int_at_least(1), help=THREADS_HELP)
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")


class _Terminated(BaseException):
    """Raised by the SIGTERM handler, so that a half-written output is removed."""


class _OnSigterm:
    """The SIGTERM handler of a run: raises :class:`_Terminated` at the first signal while
    ``armed`` and disarms itself, so that the cleanup and the report that follow are
    never cut by a second exception; a signal while disarmed is ignored (the run is
    ending anyway)."""

    def __init__(self) -> None:
        self.armed = True

    def __call__(self, signum, frame) -> None:
        if self.armed:
            self.armed = False
            raise _Terminated


def run_cli(args: argparse.Namespace) -> int:
    """Runs the ``embed`` subcommand; returns the exit status.

    On SIGTERM it stops, removes its temporary file and says whether the output was
    written: ``terminated; nothing written`` (an existing output as it was) or, where
    the signal came after the output's rename, ``terminated after writing ...`` (the
    output is complete); exit status 143 either way.
    """
    if args.num_neighbors is not None and args.batch_size is None:
        raise ValueError("--num-neighbors needs --batch-size (mini-batch inference)")
    output = check_embedding_path(args.output, "--output")
    inputs = [("the --model file", args.model), ("the --data graph file", args.data)]
    check_distinct([("--output", output)], inputs)  # (writing it would replace an input)
    device = resolve_device(args.device)
    threads = set_threads(args.threads)
    before = _identity(output)
    handler = _OnSigterm()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        try:
            signal.signal(signal.SIGTERM, handler)  # (inside: its exception is caught below)
            return _embed(args, output, device, threads)
        finally:
            handler.armed = False  # a SIGTERM from here on is ignored: the run is ending
    except _Terminated:
        # The output's file is the truth: a rename that happened before the signal was
        # handled has written it, complete (atomic_write), whatever ran after it.
        if _identity(output) == before:
            print("pyg_progcl embed: terminated; nothing written", file=sys.stderr)
        else:
            print(
                f"pyg_progcl embed: terminated after writing {args.output} (complete)",
                file=sys.stderr,
            )
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _identity(path: Path) -> Optional[tuple[int, ...]]:
    """What tells one file at ``path`` from another written there later (an atomic write
    renames a new file into place), or ``None`` where there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _embed(args, output: Path, device: torch.device, threads: Optional[str]) -> int:
    """Embeds and writes; the ``threads`` line (if any) comes with the summary, so that a
    failed command prints its error alone."""
    tic = time.perf_counter()
    model = load_model(args.model, map_location=device)
    # (a graph file of another feature width is refused before its arrays are read)
    data = read_graph(args.data, num_features=model.encoder.in_channels)
    with batch_bar("embedding: batch", not args.quiet, args.batch_size is not None) as bar:
        z = embed(
            model, data, batch_size=args.batch_size, num_neighbors=args.num_neighbors,
            device=device, progress=bar,
        )  # fmt: skip
    save_embeddings(z, output)
    if not args.quiet:
        if threads:
            note(threads)
        how = "full graph" if args.batch_size is None else f"batches of {args.batch_size}"
        print(
            f"wrote {args.output}: {z.size(0)} x {z.size(1)} embeddings of {args.data} "
            f"({how}, {time.perf_counter() - tic:.1f} s)"
        )
    return 0
