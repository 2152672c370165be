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
    # environment variable (beyond what importing torch and PyG sets), and loads none of the subpackages imported by name: the
    # command line, the diagnostics, io, evaluation, datasets, mini-batch, distributed.
    code = (
        "import json, os, sys, torch_geometric; before = dict(os.environ); import pyg_progcl; "
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


def private_imports(path) -> list[str]:
    """The imports in ``path`` of a private module of the library (``pyg_progcl._x``,
    ``pyg_progcl.losses._x``) or of a private name (``_x``) from one of its modules; the
    command line's own modules, which a file of the command line may use, excepted."""
    import ast

    found = []
    own_cli = "pyg_progcl/cli/" in str(path)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            module, names = node.module or "", [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            module, names = "", [alias.name for alias in node.names]
        else:
            continue
        for name in [module] if module else names:
            if not name.startswith("pyg_progcl") or (own_cli and name.startswith("pyg_progcl.cli")):
                continue
            parts = name.split(".")
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if any(p.startswith("_") and not p.startswith("__") for p in parts) or (
                module and private
            ):
                found.append(f"{path.name}:{node.lineno} {name} {private}")
    return found


def test_the_command_line_benchmarks_and_examples_use_public_names_only(tmp_path):
    files = [*(REPO / "pyg_progcl" / "cli").glob("*.py"), *(REPO / "benchmarks").glob("*.py")]
    files += [*(REPO / "examples").glob("*.py"), REPO / "pyg_progcl" / "__main__.py"]
    found = {str(path.relative_to(REPO)): private_imports(path) for path in files}
    assert len(found) > 30
    assert not {path: imports for path, imports in found.items() if imports}
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from pyg_progcl.io.files import _reason\nimport pyg_progcl._checks\n"
        "from pyg_progcl.cli.loop import _machine\nfrom pyg_progcl import GRACEModel\n"
    )
    assert len(private_imports(bad)) == 3
