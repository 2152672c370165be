"""Helpers shared by the test modules: ``from helpers import views, small_config, ...``.

``tests/`` is on ``sys.path`` (see ``conftest.py``). What lives here is used by more than
one test module; a helper of one module stays in that module. ``reference.py`` is not a
helper: it is the independent dense reference of the losses and imports nothing from the
package.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch

REPO = Path(__file__).resolve().parents[1]

# ----------------------------------------------------------------------------- losses

#: Row blocks of the loss tests: dense, and blocks that do / do not divide N = 23.
BLOCKS = [None, 1, 7, 64]
#: Sampled negatives on N = 23 nodes, all ``N - 1`` of them (so that the loss is exact,
#: whatever the sample), in one block and in blocks of 5 anchors.
SAMPLED = [{"num_negatives": 22}, {"num_negatives": 22, "block_size": 5}]
#: The options of the engine's three paths on N = 23 nodes: dense, row blocks, sampled.
PATHS = [{"block_size": b} for b in BLOCKS] + SAMPLED


def path_id(options: dict) -> str:
    """A short test id of :data:`PATHS`' options: ``dense``, ``rows7``, ``sampled22-5``."""
    block = options.get("block_size")
    if options.get("num_negatives") is not None:
        return f"sampled{options['num_negatives']}" + (f"-{block}" if block else "")
    return "dense" if block is None else f"rows{block}"


def views(n=23, d=5, seed=0, dtype=torch.float64, grad=True):
    """Two correlated ``[n, d]`` views (float64 by default, with gradients)."""
    g = torch.Generator().manual_seed(seed)
    h1 = torch.randn(n, d, generator=g, dtype=dtype)
    h2 = h1 + 0.7 * torch.randn(n, d, generator=g, dtype=dtype)  # correlated views
    return h1.requires_grad_(grad), h2.requires_grad_(grad)


def fitted_mixture(alpha=(2.0, 6.0), beta=(5.0, 2.0), weight=(0.8, 0.2)):
    """A float64 :class:`BetaMixture` with these parameters, marked as fitted once."""
    from pyg_progcl.mixture import BetaMixture

    m = BetaMixture().double()
    m.alpha.copy_(torch.tensor(alpha))
    m.beta.copy_(torch.tensor(beta))
    m.weight.copy_(torch.tensor(weight))
    m.num_fits.fill_(1)
    return m


def params(m):
    """``(alpha, beta, weight)`` of a mixture, as ``reference.py`` takes them."""
    return m.alpha, m.beta, m.weight


def assert_matches(loss_fn, ref_fn, h1, h2):
    """Values and gradients of the loss equal the dense reference."""
    out, expected = loss_fn(h1, h2), ref_fn(h1, h2)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    g = torch.autograd.grad(out, (h1, h2))
    g_ref = torch.autograd.grad(expected, (h1, h2))
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def engine_weights(loss, h1, h2, block_size=None):
    """``[2, N, N]`` weights ``w = b / mean b`` of ProGCL's negatives, anchors ``u`` (0)
    and ``v`` (1), as a fitted ``loss`` computes them: its hardness on the dense blocks
    (``block_size=None``) or on row blocks, the anchor's own entry 0."""
    from pyg_progcl.losses._engine import dense_blocks, normalize_views, row_block
    from pyg_progcl.losses._hardness import Hardness

    loss.check_inputs(h1, h2)
    with torch.no_grad():
        u, v = normalize_views(h1, h2)
        n = u.size(0)
        if block_size is None:
            blocks = dense_blocks(u, v, loss.tau)
        else:
            blocks = [
                row_block(a[r], a, o[r], o, r, view, loss.tau)
                for view, (a, o) in enumerate(((u, v), (v, u)))
                for r in (slice(s, min(s + block_size, n)) for s in range(0, n, block_size))
            ]
        hardness, rows = Hardness(loss.mixture, loss.schedule), []
        for block in blocks:
            rows.append(hardness.log_weights(block).exp())
        return torch.cat(rows).view(2, n, n)


def record_paths(monkeypatch, *classes) -> list:
    """The blocks the losses of ``classes`` (default: InfoNCE and ProGCL) receive in their
    public ``negative_term``, in order: ``"dense"`` (once for both views), or
    ``(kind, view, start, stop)`` of a row block (``"rows"``) or a sampled block
    (``"sampled"``), read from the block's documented attributes."""
    from pyg_progcl.losses import InfoNCELoss, ProGCLLoss

    calls = []
    for cls in classes or (InfoNCELoss, ProGCLLoss):
        term = cls.negative_term

        def negative_term(self, block, term=term):
            if block.rows is None:
                calls.extend(["dense"] if block.view == 0 else [])
            else:
                kind = "rows" if block.cols is None else "sampled"
                calls.append((kind, block.view, block.rows.start, block.rows.stop))
            return term(self, block)

        monkeypatch.setattr(cls, "negative_term", negative_term)
    return calls


def class_views(num_classes=5, per_class=60, d=16, spread=1e-3, seed=0):
    """Two views of nodes around one random centre per class, ``spread`` apart."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(num_classes, d, generator=g)
    labels = torch.arange(num_classes).repeat_interleave(per_class)
    return tuple(centres[labels] + spread * torch.randn(len(labels), d, generator=g) for _ in "uv")


# ----------------------------------------------------------------------------- mixture


def fits_that_find(kinds, text="problem {}"):
    """A replacement of :meth:`BetaMixture.fit` that fits and then records, as the
    problems of the fit, those of ``kinds()`` (a list of kinds, called once per fit), in
    the mixture's public ``problems_`` and ``degenerate_fits``."""
    from pyg_progcl import BetaMixture

    fit = getattr(BetaMixture.fit, "unpatched", BetaMixture.fit)

    def patched(self, *args, **kwargs):
        before = dict(self.degenerate_fits)
        fit(self, *args, **kwargs)
        found = list(kinds())
        self.problems_ = [text.format(kind) for kind in found]
        self.degenerate_fits.clear()  # (in place: the loss shares the dict)
        self.degenerate_fits.update(before)
        for kind in dict.fromkeys(found):
            self.degenerate_fits[kind] = self.degenerate_fits.get(kind, 0) + 1
        return self

    patched.unpatched = fit
    return patched


def sample_mixture(n, components, weights, seed=0):
    """``n`` float64 draws of the Beta mixture ``components`` = ``[(a, b), ...]``."""
    g = torch.Generator().manual_seed(seed)
    which = torch.multinomial(torch.tensor(weights), n, replacement=True, generator=g)
    torch.manual_seed(seed)
    out = torch.empty(n, dtype=torch.float64)
    for c, (a, b) in enumerate(components):
        mask = which == c
        out[mask] = torch.distributions.Beta(float(a), float(b)).sample((int(mask.sum()),)).double()
    return out


# ----------------------------------------------------------------------------- training


def small_graph():
    """300 nodes, 3 classes, homophilous: 30 epochs of ProGCL reach > 0.6 (chance 1/3)."""
    import torch_geometric.transforms as T

    from pyg_progcl.cli.datasets import synthetic_graph

    graph = synthetic_graph(num_nodes=300, num_classes=3, homophily=0.8, topic_prob=0.15)
    return T.NormalizeFeatures()(graph)


def small_config(method="progcl-weight", **kw):
    """The synthetic preset of ``method``, made small (narrow, 30 epochs, short probe)."""
    from pyg_progcl.cli.presets import get_preset

    values = dict(
        epochs=30, warmup_epochs=10, hidden=32, proj=32, lr=0.01, probe_epochs=200,
        eval_every=15, num_samples=2000,
    )  # fmt: skip
    values.update(kw)
    return get_preset("synthetic", method, **values)


class InterruptError(Exception):
    """Raised by :func:`stop_at`'s callback: a run interrupted after some epoch."""


def stop_at(stop: int):
    """A training callback that interrupts the run after epoch ``stop`` (and its checkpoint)."""

    def callback(epoch, info):
        if epoch == stop:
            raise InterruptError

    return callback


# ----------------------------------------------------------------------------- command line

#: ``train`` flags of a run that takes a fraction of a second.
TINY = [
    "--epochs", "3", "--hidden", "16", "--proj", "16", "--probe-epochs", "20",
    "--quiet", "--threads", "1",
]  # fmt: skip


def run_main(capsys, *argv):
    """Runs the CLI in-process; returns ``(exit status, stdout, stderr)``."""
    from pyg_progcl.cli import main

    try:
        status = main(list(argv))
    except SystemExit as exc:
        status = exc.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ----------------------------------------------------------------------------- benchmarks


def one_line_error(status, err, *words):
    """Asserts a command failed with exit 2 and one ``error:`` line holding ``words``."""
    assert status == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0], err
    for word in words:
        assert word in lines[0], err


def load_script(name: str) -> ModuleType:
    """Imports ``benchmarks/<name>.py`` as a module (its folder on ``sys.path`` meanwhile,
    for the scripts that import ``compare.py``)."""
    folder = str(REPO / "benchmarks")
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module
