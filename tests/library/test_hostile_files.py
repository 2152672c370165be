"""Graph files, model files and ``embed`` against hostile input: forged or damaged files
are refused in one line, features of any float dtype embed, and signals leave true
messages and no stray temporary files (docs/own_graph.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO
from torch_geometric.data import Data

from pyg_progcl import GCNEncoder, GRACEModel
from pyg_progcl.io import embed, save_model

TESTS = Path(__file__).resolve().parent


def graph(n=120, f=10, seed=0) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(
        x=torch.randn(n, f, generator=g), edge_index=torch.randint(0, n, (2, 4 * n), generator=g)
    )


def listing(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ----------------------------------------------------------------------------- .npz graph files


# ----------------------------------------------------------------------------- feature dtypes


def test_embed_takes_features_of_any_float_dtype():
    """Before: float64 or float16 features raised "expected m1 and m2 to have the same
    dtype" from inside the model, on both paths."""
    torch.manual_seed(0)
    model = GRACEModel(GCNEncoder(10, 8), 8, 8).eval()
    data = graph()
    data.edge_weight = torch.rand(data.edge_index.size(1))
    want = embed(model, data)
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        other = Data(
            x=data.x.to(dtype), edge_index=data.edge_index, edge_weight=data.edge_weight.double()
        )
        expected = want if dtype == torch.float64 else embed(model, Data(
            x=other.x.float(), edge_index=data.edge_index, edge_weight=data.edge_weight))  # fmt: skip
        for batch_size in (None, 50):
            z = embed(model, other, batch_size=batch_size)
            assert z.dtype == torch.float32
            torch.testing.assert_close(z, expected, rtol=1e-5, atol=1e-5)
        assert other.x.dtype == dtype  # (the caller's graph is left as it is)
    big = data.x.double()
    big[3, 2] = 1e300  # finite in float64, infinite in the model's float32
    with pytest.raises(ValueError, match="beyond the range of the model's torch.float32"):
        embed(model, Data(x=big, edge_index=data.edge_index))
    big[3, 2] = float("nan")
    with pytest.raises(ValueError, match="1 NaN or infinite values"):
        embed(model, Data(x=big, edge_index=data.edge_index))


# ----------------------------------------------------------------------------- model files


def test_a_model_with_nan_weights_is_not_saved(tmp_path):
    model = GRACEModel(GCNEncoder(10, 8), 8, 8)
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("nan")
    with pytest.raises(ValueError, match="holds NaN or infinite values .* was not written"):
        save_model(model, tmp_path / "nan.pt")
    assert listing(tmp_path) == []


# ----------------------------------------------------------------------------- signals


def _drive(window: str, argv: list[str]) -> None:
    """Runs in a subprocess: the command line ``argv`` with a SIGTERM sent to itself at
    ``window`` (around the output's rename, after its summary line, twice, while the
    handler is restored); exits with its status."""
    import builtins

    from pyg_progcl.cli import main

    real_replace, real_print, real_signal = os.replace, builtins.print, signal.signal

    def sigterm() -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    def replace(src, dst, *args, **kwargs):
        if window == "before-rename":
            sigterm()
        real_replace(src, dst, *args, **kwargs)
        if window in ("after-rename", "twice"):
            sigterm()

    def print_(*args, **kwargs):
        text = " ".join(map(str, args))
        if (window == "after-summary" and text.startswith("wrote")) or (
            window == "twice" and "terminated" in text
        ):
            sigterm()
        real_print(*args, **kwargs)

    def signal_(signum, handler):
        if window == "at-restore" and handler in (signal.SIG_DFL, signal.SIG_IGN):
            sigterm()
        return real_signal(signum, handler)

    os.replace, builtins.print, signal.signal = replace, print_, signal_
    sys.exit(main(argv))


@pytest.fixture(scope="module")
def small_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("small")
    g = graph()
    np.savez(folder / "g.npz", x=g.x.numpy(), edge_index=g.edge_index.numpy())
    save_model(GRACEModel(GCNEncoder(10, 8), 8, 8), folder / "m.pt")
    return folder


def _python(code: str, *args) -> list[str]:
    prefix = f"import sys; sys.path[:0] = [{str(TESTS)!r}, {str(TESTS.parent)!r}, {str(REPO)!r}]; "
    return [sys.executable, "-c", prefix + code, *map(str, args)]


@pytest.mark.slow  # a subprocess per window, each signalling itself
@pytest.mark.parametrize(
    "window", ["before-rename", "after-rename", "after-summary", "twice", "at-restore"]
)
def test_a_sigterm_in_any_window_of_embed_is_reported_truly(tmp_path, small_files, window):
    """Before: a SIGTERM after the output's rename said "nothing written" over a complete
    output, and a second one while the first was reported gave a traceback."""
    out = tmp_path / "z.npy"
    np.save(out, np.arange(6, dtype=np.float32))
    before = out.read_bytes()
    argv = ["embed", "--model", small_files / "m.pt", "--data", small_files / "g.npz",
            "--output", out, "--threads", "1"]  # fmt: skip
    code = "import test_hostile_files as t; t._drive(sys.argv[1], sys.argv[2:])"
    done = subprocess.run(_python(code, window, *argv), capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    text = done.stdout + done.stderr
    assert "Traceback" not in text, text
    assert listing(tmp_path) == ["z.npy"], text  # no temporary file
    written = out.read_bytes() != before
    if written:
        assert np.load(out).shape == (120, 8)  # complete
    if window == "before-rename":
        assert done.returncode == 128 + signal.SIGTERM and not written, text
        assert "terminated; nothing written" in done.stderr, text
    elif window == "at-restore":  # the run had ended: the signal is ignored
        assert done.returncode == 0 and written and "wrote" in done.stdout, text
    else:
        assert done.returncode == 128 + signal.SIGTERM and written, text
        assert f"terminated after writing {out} (complete)" in done.stderr, text
        assert "nothing written" not in done.stderr, text
