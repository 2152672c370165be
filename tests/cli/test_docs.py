"""The documentation: the API reference, the user-facing pages, the command-line help.

The API reference (docs/api) builds with Sphinx in strict mode, and strict means strict:
``sphinx-build -b html -W --keep-going -n``: every warning fails the build, including
(nitpicky) a cross-reference that resolves to nothing. References into pyg_progcl must
resolve; only those into other packages (torch, PyG, numpy, ...) are left unchecked, as
there are no intersphinx inventories offline. A second group of tests builds a tiny
project with the same configuration to show that a broken reference does fail it.

The Markdown pages (README.md, docs/*.md, the results index) link only to files and
headings that exist; ``benchmarks/results`` holds one current file per question, each
indexed; and every command-line option says what it does.
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from pathlib import Path

import pytest


def build_main(argv: list[str]) -> int:
    """Sphinx's ``sphinx-build`` in this process (skips the test without Sphinx)."""
    pytest.importorskip("sphinx", reason="the docs need Sphinx (pip install 'sphinx>=7')")
    from sphinx.cmd.build import build_main as sphinx_main

    return sphinx_main(argv)


# napoleon itself still reads autodoc's options as a mapping (Sphinx 9).
pytestmark = pytest.mark.filterwarnings(
    "ignore:The mapping interface for autodoc options objects is deprecated"
)

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "api"
PAGES = ["index", "package", "model", "augment", "encoders", "losses", "mixture"]
PAGES += ["minibatch", "distributed", "io", "evaluation", "datasets", "diagnostics"]
PAGES += ["cli"]


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
    assert 10 <= len(pyg_progcl.__all__) <= 15
    for name in pyg_progcl.__all__:  # at its subpackage: pyg_progcl.losses.progcl -> losses
        subpackage = getattr(pyg_progcl, name).__module__.split(".")[1]
        assert f"pyg_progcl.{subpackage}.{name}" in anchors, name
    # The entry points of the main modules, with their methods.
    for name in [
        "pyg_progcl.model.GRACEModel.views",
        "pyg_progcl.losses.ProGCLLoss.fit",
        "pyg_progcl.losses.ProGCLLoss.reference_code",
        "pyg_progcl.losses.schedules.FrozenFit",
        "pyg_progcl.losses.NegativeBlock",
        "pyg_progcl.minibatch.neighbor_loader",
        "pyg_progcl.minibatch.minibatch_epoch",
        "pyg_progcl.minibatch.embed_minibatch",
        "pyg_progcl.diagnostics.diagnose",
        "pyg_progcl.diagnostics.DiagnosticsTracker",
        "pyg_progcl.diagnostics.plot_similarity_histogram",
        "pyg_progcl.cli.train",
        "pyg_progcl.cli.get_preset",
        "pyg_progcl.cli.load_dataset",
        "pyg_progcl.datasets.synthetic_graph",
        "pyg_progcl.evaluation.evaluate",
        "pyg_progcl.augment.AdaptiveFeatureMask.prepare",  # inherited from a private base
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


# -- the Markdown pages: links, result files ----------------------------------------------

#: The user-facing Markdown pages whose links must resolve.
PAGES_MD = ["README.md", "tests/README.md", "benchmarks/results/README.md"]
PAGES_MD += sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))
RESULTS = REPO / "benchmarks" / "results"
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", flags=re.M | re.S)


def heading_anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces -> '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text())
    return {heading_anchor(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` (outside code blocks) whose file or heading is missing."""
    broken = []
    for target in _LINK.findall(_FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        missing_heading = anchor and dest.suffix == ".md" and anchor not in anchors(dest)
        if not dest.exists() or missing_heading:
            broken.append(target)
    return broken


def test_a_broken_link_or_heading_is_found(tmp_path):
    (tmp_path / "there.md").write_text("# A heading: with `code`, ProGCL's\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-heading-with-code-progcls) [web](https://x.org/y)\n"
        "[file](missing.md) [anchor](there.md#no-such-heading)\n```\n[in code](nowhere)\n```\n"
    )
    assert broken_links(page) == ["missing.md", "there.md#no-such-heading"]


@pytest.mark.parametrize("page", PAGES_MD)
def test_every_link_of_the_pages_resolves(page):
    assert broken_links(REPO / page) == [], f"{page} links to missing files or headings"


def test_each_result_file_is_current_and_indexed():
    """One current file per question (git keeps the history), each in the results index."""
    files = sorted(p.relative_to(RESULTS) for p in RESULTS.rglob("*") if p.is_file())
    assert len(files) <= 40, f"{len(files)} files in benchmarks/results"
    index = set(_LINK.findall((RESULTS / "README.md").read_text()))
    for file in files:
        if file.name != "README.md":
            assert str(file) in index or str(file.parent) in index, f"{file} is not indexed"


def test_the_readme_links_a_file_for_each_headline_figure():
    text = (REPO / "README.md").read_text()
    results = text[text.index("## Results") :].split("\n## ")[0]
    rows = [r for r in results.splitlines() if r.startswith("| ") and "---" not in r][1:]
    assert rows, "no results table in the README"
    for row in rows:
        assert "](benchmarks/results/" in row, f"no result file for: {row[:60]}"


# -- the command line's help ----------------------------------------------------------------


def _subparser(command: str):
    from pyg_progcl.cli.entry import build_parser

    return build_parser(command)[1][command]


def test_every_train_option_says_what_it_does():
    parser = _subparser("train")
    silent = [a.option_strings[0] for a in parser._actions if a.option_strings and not a.help]
    assert silent == []
    epochs = next(a for a in parser._actions if "--epochs" in a.option_strings)
    assert "preset" in epochs.help and "--warmup-epochs" in epochs.help


def test_diagnose_help_has_no_train_only_option_and_explains_its_columns():
    from pyg_progcl.cli.diagnose_cli import _TABLE

    parser = _subparser("diagnose")
    options = {s for a in parser._actions for s in a.option_strings}
    assert not options & {"--eval-every", "--diagnose-every", "--checkpoint-every"}
    silent = [a.option_strings[0] for a in parser._actions if a.option_strings and not a.help]
    assert silent == []
    text = parser.format_help()
    for _, label in _TABLE:
        assert re.search(rf"^  {re.escape(label.split()[0])}", text, flags=re.M), label
