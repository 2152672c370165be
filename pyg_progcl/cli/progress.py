"""A progress bar of batches, for the ``progress(done, total)`` callbacks of
:func:`~pyg_progcl.minibatch.minibatch_epoch` and
:func:`~pyg_progcl.minibatch.embed_minibatch`: ``batch 3/9 [00:10<00:20, 3.33s/batch]``
(batches done of all, time so far, time left, time per batch), so that a slow epoch is
told from a hung one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Optional

__all__: list[str] = []

#: The bar's text: the unit, batches done of all, elapsed<left, time per batch.
BAR_FORMAT = "{desc} {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]"


class BatchBar:
    """A tqdm bar driven by ``progress(done, total)`` calls; ``done == 0`` starts a new
    pass (an epoch), with its own clock and total. Every batch is shown (batches take
    long enough that redrawing costs nothing), on its own line below the epochs' bar.

    Args:
        desc: What is counted, before the counts (``"batch"``).
        disable: Show nothing.
        position: The bar's line (1: below another bar).
    """

    def __init__(self, desc: str = "batch", disable: bool = False, position: int = 0):
        from tqdm.auto import tqdm

        self.bar = tqdm(
            desc=desc, unit="batch", bar_format=BAR_FORMAT, disable=disable, leave=False,
            position=position, mininterval=0, miniters=1, dynamic_ncols=True, delay=0,
        )  # fmt: skip

    def __call__(self, done: int, total: Optional[int]) -> None:
        if done == 0:
            self.bar.reset(total=total)
        else:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        self.bar.close()


@contextlib.contextmanager
def batch_bar(desc: str, shown: bool, batched: bool = True) -> Iterator[Optional[BatchBar]]:
    """A :class:`BatchBar` of ``desc`` while the ``with`` block runs, closed after it;
    ``None`` where nothing is batched (``batched`` false: no bar is drawn at all)."""
    if not batched:
        yield None
        return
    bar = BatchBar(desc, disable=not shown)
    try:
        yield bar
    finally:
        bar.close()
