"""A hostile tester's inputs to the trainer (pyg_progcl.cli): one clear line, never a long
traceback or a silent NaN."""

from __future__ import annotations

import pytest
import torch
from helpers import small_config, small_graph
from torch_geometric.data import Data

from pyg_progcl import (
    DebiasedInfoNCELoss,
    HardInfoNCELoss,
    InfoNCELoss,
    ProGCLLoss,
)
from pyg_progcl.evaluation import evaluate

LOSSES = [InfoNCELoss, DebiasedInfoNCELoss, HardInfoNCELoss, ProGCLLoss]


def one_line(excinfo) -> str:
    """The exception's message, checked to be one line."""
    message = str(excinfo.value)
    assert "\n" not in message, message
    return message


# 8. Class ids of 2^62: the probe allocated a [2^62 + 1, d] weight ("Trying to create
# tensor with negative dimension" / out of memory) after the whole training.
def test_huge_labels_are_refused_before_the_probe_and_before_training():
    z = torch.randn(50, 8)
    for y, message in [
        (torch.full((50,), 2**62), r"`y` has class id 4611686018427387904, but there are 50"),
        (torch.arange(50) - 1, r"`y` has negative class ids \(min -1\)"),
        (torch.rand(50), r"`y` must hold integer class ids"),
    ]:
        with pytest.raises(ValueError, match=message) as err:
            evaluate(z, Data(y=y, num_nodes=50), probe_epochs=5)
        one_line(err)
    assert 0 <= evaluate(z, Data(y=torch.arange(50) % 3), probe_epochs=5)["accuracy"] <= 1

    from pyg_progcl.cli.loop import train

    data = small_graph()
    data.y = torch.full_like(data.y, 2**62)
    epochs = []
    with pytest.raises(ValueError, match=r"`y` has class id .*torch.unique"):
        train(small_config(epochs=3, warmup_epochs=1), data, progress=False,
              callback=lambda epoch, info: epochs.append(epoch))  # fmt: skip
    assert epochs == []  # refused before the first epoch
