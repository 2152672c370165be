"""The package's shape: imports point down its layers, no cycles, nothing at import."""

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO

importlinter = pytest.importorskip("importlinter.cli")


def test_import_contracts_hold(monkeypatch, tmp_path, capsys):
    # pyproject.toml's contracts: entry point > command line > diagnostics > library, the
    # library never imports the command line, the command line imports no private module
    # of the library, and no import cycle between the modules of any package.
    monkeypatch.chdir(REPO)
    status = importlinter.lint_imports(
        config_filename="pyproject.toml", no_cache=True, no_logo=True
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert "4 kept, 0 broken" in out


@pytest.mark.parametrize(
    "module, line",
    [
        ("mixture.py", "from .cli import presets"),
        ("cli/presets.py", "from pyg_progcl import _checks"),
    ],
)
def test_a_layer_violation_breaks_the_contracts(module, line, tmp_path, monkeypatch, capsys):
    # The same check on a copy of the package whose library imports the command line fails,
    # and so does one whose command line imports a private module of the library.
    import shutil

    copy = tmp_path / "pyg_progcl"
    shutil.copytree(REPO / "pyg_progcl", copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / module, "a") as fh:
        fh.write(f"\n{line}  # noqa\n")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "pyg_progcl" or m.startswith("pyg_progcl.")]:
        monkeypatch.delitem(sys.modules, name)
    status = importlinter.lint_imports(
        config_filename="pyproject.toml", no_cache=True, no_logo=True
    )
    assert status != 0 and "BROKEN" in capsys.readouterr().out


def test_importing_the_package_changes_nothing_and_imports_only_the_library():
    # The root imports its names as PyG's does (no module __getattr__), changes no
    # environment variable, and loads none of the subpackages imported by name: the
    # command line, the diagnostics, io, evaluation, datasets, mini-batch, distributed.
    code = (
        "import json, os, sys; before = dict(os.environ); import pyg_progcl; "
        "loaded = sorted(m for m in sys.modules if m.startswith('pyg_progcl.')); "
        "print(json.dumps([dict(os.environ) == before, hasattr(pyg_progcl, '__getattr__'), "
        "all(n in vars(pyg_progcl) for n in pyg_progcl.__all__), loaded]))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    unchanged, lazy, eager, loaded = json.loads(out)
    assert unchanged and not lazy and eager
    assert "pyg_progcl.losses" in loaded and "pyg_progcl.model" in loaded
    by_name = ("cli", "diagnostics", "io", "evaluation", "datasets", "minibatch", "distributed")
    assert not [m for m in loaded if m.split(".")[1] in by_name]
