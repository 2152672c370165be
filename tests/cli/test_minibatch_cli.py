"""Mini-batch training through the command line and the trainer (``--batch-size``)."""

from __future__ import annotations

import pytest
from helpers import InterruptError as _InterruptError
from helpers import stop_at

import pyg_progcl.minibatch as mb
from pyg_progcl.datasets import synthetic_graph

#: Whether PyG's NeighborLoader can sample here (pyg-lib or torch-sparse installed).
PYG_CAN_SAMPLE = mb.pyg_can_sample()
NO_PYG_SAMPLER = (
    "PyG's NeighborLoader needs pyg-lib or torch-sparse "
    "(./scripts/setup.sh --dev --with-sparse builds torch-sparse)"
)
#: PyG warns about every NeighborLoader without pyg-lib (torch-sparse's sampler).
pytestmark = pytest.mark.filterwarnings("ignore:Using 'NeighborSampler' without:UserWarning")


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(num_nodes=600, seed=1)


@pytest.fixture(params=["torch", pytest.param("pyg", marks=pytest.mark.sparse)])
def backend(request, monkeypatch):
    """The sampler ``neighbor_loader(backend="auto")`` picks, everywhere: the plain-torch
    one or PyG's ``NeighborLoader`` (skipped where PyG cannot sample)."""
    if request.param == "pyg" and not PYG_CAN_SAMPLE:
        pytest.skip(NO_PYG_SAMPLER)
    monkeypatch.setattr(mb.sampling, "default_backend", lambda: request.param)
    return request.param


def test_trainer_minibatch_from_python(graph, backend, monkeypatch):
    import pyg_progcl.cli as trainer
    import pyg_progcl.cli.run as run
    from pyg_progcl.cli.presets import get_preset

    calls = []
    epoch = run.minibatch_epoch
    monkeypatch.setattr(
        run, "minibatch_epoch", lambda *a, **k: calls.append(k["fit"]) or epoch(*a, **k)
    )
    config = get_preset(
        "synthetic", "progcl-weight", epochs=4, warmup_epochs=2, batch_size=200,
        num_neighbors=[5, 5], hidden=32, proj=32, probe_epochs=100, eval_every=0,
    )  # fmt: skip
    result = trainer.train(config, graph, seeds=1, progress=False)
    assert calls == [False, False, True, True]  # refit after the warm-up
    assert result["mixture"][0] is not None
    assert result["accuracy_mean"] > 0.3  # chance is 0.2


def test_trainer_cli_minibatch_flags(tmp_path):
    import json

    from pyg_progcl.cli import main

    out = tmp_path / "result.json"
    argv = ["train", "--dataset", "synthetic", "--method", "grace", "--epochs", "3"]
    argv += ["--batch-size", "250", "--num-neighbors", "5", "5", "--num-negatives", "50"]
    argv += ["--hidden", "32", "--proj", "32", "--probe-epochs", "50", "--eval-every", "0"]
    assert main([*argv, "--quiet", "--output", str(out)]) == 0
    config = json.loads(out.read_text())["config"]
    assert (config["batch_size"], config["num_neighbors"], config["num_negatives"]) == (
        250,
        [5, 5],
        50,
    )


@pytest.mark.parametrize(
    "flags", [["--batch-size", "0"], ["--num-neighbors", "0"], ["--num-negatives", "0"]]
)
def test_trainer_cli_rejects_bad_minibatch_flags(flags, capsys):
    from pyg_progcl.cli import main

    with pytest.raises(SystemExit) as info:
        main(["train", "--epochs", "1", "--quiet", *flags])
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err


def test_trainer_minibatch_resume_equals_uninterrupted(graph, tmp_path):
    from pyg_progcl.cli import train_seed
    from pyg_progcl.cli.presets import get_preset

    config = get_preset(
        "synthetic", "progcl-weight", epochs=6, warmup_epochs=2, batch_size=200,
        num_neighbors=[4, 4], hidden=16, proj=16, probe_epochs=20, eval_every=0,
        num_samples=1000,
    )  # fmt: skip
    _, _, rec_a = train_seed(config, graph, seed=1, progress=False)

    ckpt = tmp_path / "ckpt"
    with pytest.raises(_InterruptError):
        train_seed(
            config, graph, seed=1, checkpoint_dir=ckpt, checkpoint_every=2, progress=False,
            callback=stop_at(5),
        )  # fmt: skip
    _, _, rec_b = train_seed(
        config, graph, seed=1, checkpoint_dir=ckpt, checkpoint_every=2, resume=True,
        progress=False,
    )  # fmt: skip
    assert rec_b["losses"] == rec_a["losses"] and rec_b["accuracy"] == rec_a["accuracy"]


_PEAK_SCRIPT = """
import resource, sys, torch
from torch_geometric.data import Data
from pyg_progcl import GCNEncoder
from pyg_progcl.minibatch import embed_minibatch
torch.set_num_threads(1)
torch.manual_seed(0)
n, e = 20_000, 400_000
data = Data(x=torch.randn(n, 64), edge_index=torch.randint(0, n, (2, e)))
encoder = GCNEncoder(64, 256, num_layers=2).eval()
embed_minibatch(encoder, Data(x=data.x[:100], edge_index=data.edge_index[:, :100] % 100), 50)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
embed_minibatch(encoder, data, batch_size=10_000)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""
