"""The harness's summary of scores over seeds (pyg_progcl.cli.evaluation)."""

from __future__ import annotations

import pytest

from pyg_progcl.cli.evaluation import mean_std


def test_mean_std():
    assert mean_std([0.5, 0.7]) == pytest.approx((0.6, 0.1))
