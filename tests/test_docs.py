"""The API reference (docs/api) builds with Sphinx in strict mode, and strict means strict.

``sphinx-build -b html -W --keep-going -n``: every warning fails the build, including
(nitpicky) a cross-reference that resolves to nothing. References into pyg_progcl must
resolve; only those into other packages (torch, PyG, numpy, ...) are left unchecked, as
there are no intersphinx inventories offline. The second group of tests builds a tiny
project with the same configuration to show that a broken reference does fail it.
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="the docs need Sphinx (pip install 'sphinx>=7')")
from sphinx.cmd.build import build_main  # noqa: E402

# napoleon itself still reads autodoc's options as a mapping (Sphinx 9).
pytestmark = pytest.mark.filterwarnings(
    "ignore:The mapping interface for autodoc options objects is deprecated"
)

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "api"
PAGES = ["index", "package", "model", "augment", "encoders", "losses", "mixture"]
PAGES += ["minibatch", "diagnostics", "experiments"]


def sphinx_build(src: Path, out: Path, capsys) -> tuple[int, str]:
    """Builds ``src`` strictly into ``out``; returns the exit status and the warnings."""
    capsys.readouterr()
    status = build_main(
        ["-b", "html", "-W", "--keep-going", "-n", "-q", "-E",
         "-d", str(out / ".doctrees"), str(src), str(out)]
    )  # fmt: skip
    captured = capsys.readouterr()
    return status, captured.err + captured.out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The full reference, built once for this module: ``(status, warnings, out, seconds)``
    (not through ``capsys``, which is function-scoped)."""
    out = tmp_path_factory.mktemp("api-html")
    err = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
        status = build_main(
            ["-b", "html", "-W", "--keep-going", "-n", "-q",
             "-d", str(out / ".doctrees"), str(DOCS), str(out)]
        )  # fmt: skip
    return status, err.getvalue(), out, time.perf_counter() - start


def test_the_api_reference_builds_strictly(built):
    status, warnings, _, seconds = built
    assert status == 0, f"the strict Sphinx build failed:\n{warnings}"
    assert not warnings.strip(), warnings
    print(f"docs/api built in {seconds:.1f} s")


def test_every_page_and_every_root_export_is_documented(built):
    _, _, out, _ = built  # (--keep-going writes every page even when a warning fails it)
    for page in PAGES:
        assert (out / f"{page}.html").is_file(), page
    html = "".join((out / f"{page}.html").read_text() for page in PAGES)
    anchors = set(re.findall(r'id="(pyg_progcl[\w.]*)"', html))

    import pyg_progcl

    # Every public name of the root is documented at the module it is loaded from.
    for name, module in pyg_progcl._EXPORTS.items():
        assert f"pyg_progcl.{module}.{name}" in anchors, name
    assert "pyg_progcl.enable_huge_pages" in anchors
    # The entry points of the brief's modules, with their methods.
    for name in [
        "pyg_progcl.model.GRACEModel.views",
        "pyg_progcl.losses.ProGCLLoss.fit",
        "pyg_progcl.losses.ProGCLLoss.reference_code",
        "pyg_progcl.losses.schedules.FrozenFit",
        "pyg_progcl.losses.engine.NegativeTerm",
        "pyg_progcl.minibatch.neighbor_loader",
        "pyg_progcl.minibatch.minibatch_epoch",
        "pyg_progcl.minibatch.embed_minibatch",
        "pyg_progcl.diagnostics.diagnose",
        "pyg_progcl.diagnostics.DiagnosticsTracker",
        "pyg_progcl.diagnostics.plot_similarity_histogram",
        "pyg_progcl.experiments.train",
        "pyg_progcl.experiments.get_preset",
        "pyg_progcl.experiments.load_dataset",
        "pyg_progcl.experiments.synthetic_graph",
        "pyg_progcl.experiments.evaluate",
        "pyg_progcl.augment.AdaptiveFeatureMask.fit",  # inherited from a private base
    ]:
        assert name in anchors, name


# -- the check can fail ------------------------------------------------------------------

CONF = f"""\
import runpy
globals().update(runpy.run_path({str(DOCS / "conf.py")!r}))
"""


def tiny_project(tmp_path: Path, body: str) -> Path:
    """A one-page project with docs/api's configuration (conf.py runs the real one)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(CONF)
    (src / "index.rst").write_text(f"Tiny\n====\n\n{body}\n")
    return src


# Described by hand, not by autodoc, so that these tests never read the package's
# docstrings (the full build checks those).
DOCUMENTED = ".. py:class:: pyg_progcl.mixture.BetaMixture\n\n   .. py:method:: fit(x)\n\n"


@pytest.mark.parametrize(
    "body",
    [
        # Other public spellings of a documented object resolve to it.
        DOCUMENTED + "See :class:`pyg_progcl.BetaMixture` and :meth:`pyg_progcl.BetaMixture.fit`.",
        DOCUMENTED + "See :class:`pyg_progcl.mixture.BetaMixture`.",
        # Other packages' objects are not checked (no inventories offline).
        "See :class:`torch.Tensor` and :class:`torch_geometric.data.Data`.",
    ],
    ids=["root-alias", "canonical", "external"],
)
def test_a_tiny_build_with_good_references_passes(tmp_path, capsys, body):
    status, warnings = sphinx_build(tiny_project(tmp_path, body), tmp_path / "out", capsys)
    assert status == 0, warnings


@pytest.mark.parametrize(
    "body, target",
    [
        ("See :class:`pyg_progcl.NoSuchThing`.", "pyg_progcl.NoSuchThing"),
        (DOCUMENTED + "See :meth:`pyg_progcl.BetaMixture.no_such_method`.", "no_such_method"),
        # A real object that the reference does not document is not a target either.
        ("See :class:`pyg_progcl.mixture.BetaMixture`.", "pyg_progcl.mixture.BetaMixture"),
        # A bare name is looked up where it is written; the page's module has no such name.
        (".. currentmodule:: pyg_progcl.mixture\n\nSee :class:`GRACEModel`.", "GRACEModel"),
    ],
    ids=["no-such-name", "no-such-method", "undocumented", "not-in-scope"],
)
def test_a_broken_reference_fails_the_build(tmp_path, capsys, body, target):
    status, warnings = sphinx_build(tiny_project(tmp_path, body), tmp_path / "out", capsys)
    assert status != 0, f"the build passed despite a reference to {target}"
    assert "reference target not found" in warnings and target in warnings, warnings


def test_the_readme_is_a_user_guide_that_opens_with_the_two_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; details belong in docs/"
    assert lines[2:6] == [
        "```bash",
        "./scripts/setup.sh && .venv/bin/python -m pyg_progcl",
        "./scripts/setup.sh --dev && .venv/bin/python -m pytest",
        "```",
    ]
