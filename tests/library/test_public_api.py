"""The public API: its size, what the examples import, what the API reference documents,
and the augmenters' extension hooks.

The public namespaces are ``pyg_progcl`` and every module or package under it whose dotted
path has no component starting with ``_``; each declares ``__all__``, and together they
export at most 60 distinct names, none of which names two different objects.

The examples are what users copy, so they import only public names: ``pyg_progcl`` and its
public subpackages (each name listed in the module's ``__all__``, no module path with a
component starting with ``_``, not the experiment harness), torch, PyG, NumPy,
scikit-learn and the standard library.
"""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from pyg_progcl.augment import (
    AdaptiveEdgeDrop,
    AdaptiveFeatureMask,
    Augmenter,
    ComposeAugmenters,
    EdgeDrop,
    FeatureMask,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.py"))
API_PAGES = sorted((REPO / "docs" / "api").glob("*.rst"))

THIRD_PARTY = {"torch", "torch_geometric", "numpy", "sklearn"}
STDLIB = set(getattr(sys, "stdlib_module_names", ())) or {
    "argparse", "os", "pathlib", "sys", "tempfile",  # Python 3.9 has no list of them
}  # fmt: skip


def is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


def import_errors(source: str) -> list[str]:
    """What is wrong with the imports of ``source``; also returns, as ``"ok: M.name"``,
    every pyg_progcl name it imports correctly (so that callers can see it checked some)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append((f"relative import of {node.module}", None))
                continue
            found += [(node.module, alias.name) for alias in node.names]
    return [problem for module, name in found for problem in check_import(module, name)]


def check_import(module: str, name: str | None) -> list[str]:
    top = module.split(".")[0]
    if top != "pyg_progcl":
        return [] if top in THIRD_PARTY | STDLIB else [f"{module}: not an allowed package"]
    if is_private(module) or module.startswith("pyg_progcl.cli"):
        return [f"{module}: not a public library module"]
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        return [f"{module}: does not import ({exc})"]
    if name is None:
        return [f"ok: {module}"]
    if name not in getattr(imported, "__all__", ()):
        return [f"{module}.{name}: not in {module}.__all__"]
    return [f"ok: {module}.{name}"]


def automodules(page: Path) -> list[str]:
    return re.findall(r"^\.\. automodule:: (\S+)", page.read_text(), flags=re.M)


# -- the public surface --------------------------------------------------------------------

#: The most distinct names that the library's public namespaces may export together: the
#: root's, and those of the subpackages imported by name (the command line's are its own).
MAX_PUBLIC_NAMES = 67
#: The most names the root (``pyg_progcl.__all__``) may export: the model, the encoders,
#: the augmenters, the losses, the mixture and its warning.
MAX_ROOT_NAMES = 15


def _raise(name: str) -> None:
    importlib.import_module(name)  # raises what made the package fail to import
    raise ImportError(name)


def public_modules(cli: bool = False) -> list[ModuleType]:
    """``pyg_progcl`` and every module or package of the library under it whose dotted
    path has no component starting with ``_``, each imported (none is skipped); with
    ``cli``, those of the command line (:mod:`pyg_progcl.cli`) instead."""
    import pyg_progcl

    found = pkgutil.walk_packages(pyg_progcl.__path__, "pyg_progcl.", onerror=_raise)
    names = [info.name for info in found if not is_private(info.name)]
    names = [name for name in names if (name.split(".")[1] == "cli") == cli]
    return ([] if cli else [pyg_progcl]) + [importlib.import_module(name) for name in names]


def exports(modules: list[ModuleType]) -> dict[str, list[tuple[str, object]]]:
    """``{name: [(module, object), ...]}`` over the ``__all__`` of ``modules``."""
    found: dict[str, list[tuple[str, object]]] = {}
    for module in modules:
        for name in getattr(module, "__all__", ()):
            found.setdefault(name, []).append((module.__name__, getattr(module, name, None)))
    return found


def ambiguous(found: dict[str, list[tuple[str, object]]]) -> dict[str, list[str]]:
    """The names that two namespaces bind to different objects, with those namespaces."""
    return {
        name: [module for module, _ in where]
        for name, where in found.items()
        if any(obj is not where[0][1] for _, obj in where)
    }


@pytest.fixture(scope="module", name="modules", params=["library", "cli"])
def modules_fixture(request):
    return public_modules(cli=request.param == "cli")


def test_the_walk_finds_the_packages_and_their_modules():
    names = {module.__name__ for module in public_modules()}
    assert {
        "pyg_progcl", "pyg_progcl.augment.functional", "pyg_progcl.io.graphs",
        "pyg_progcl.diagnostics.core", "pyg_progcl.mixture",
        "pyg_progcl.model", "pyg_progcl.encoders", "pyg_progcl.datasets",
    } <= names  # fmt: skip
    assert not [name for name in names if is_private(name) or name.startswith("pyg_progcl.cli")]
    cli = {module.__name__ for module in public_modules(cli=True)}
    assert {"pyg_progcl.cli", "pyg_progcl.cli.loop", "pyg_progcl.cli.entry"} <= cli


def test_every_public_module_declares_what_it_exports(modules):
    for module in modules:
        assert isinstance(getattr(module, "__all__", None), (list, tuple)), module.__name__
        names = module.__all__
        assert len(set(names)) == len(names), f"{module.__name__}.__all__ repeats a name"
        missing = [name for name in names if not hasattr(module, name)]
        assert not missing, f"{module.__name__}.__all__ lists missing names: {missing}"


def test_the_public_surface_is_small_and_unambiguous():
    found = exports(public_modules())
    assert len(found) <= MAX_PUBLIC_NAMES, f"{len(found)} public names: {sorted(found)}"
    assert not ambiguous(found), f"names bound to different objects: {ambiguous(found)}"


def test_the_root_is_small_and_names_nothing_as_pyg_does():
    import torch_geometric.nn
    import torch_geometric.transforms
    import torch_geometric.utils

    import pyg_progcl

    assert len(pyg_progcl.__all__) <= MAX_ROOT_NAMES, pyg_progcl.__all__
    pyg = [torch_geometric.utils, torch_geometric.transforms, torch_geometric.nn]
    clashes = [
        f"{module.__name__}.{name}"
        for module in public_modules()
        for name in getattr(module, "__all__", ())
        for namespace in pyg
        if hasattr(namespace, name) and getattr(namespace, name) is not getattr(module, name)
    ]
    assert not clashes, f"public names that PyG gives other objects: {clashes}"


def reexport_aliases(source: str) -> list[str]:
    """The ``from M import X as X`` imports of ``source`` (a re-export that names ``X``
    twice)."""
    return [
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name
    ]


def test_no_module_reexports_a_name_under_an_alias():
    assert reexport_aliases("from a import b as b\nfrom a import c as d\nfrom a import e") == ["b"]
    package = REPO / "pyg_progcl"
    found = {
        str(path.relative_to(REPO)): reexport_aliases(path.read_text())
        for path in sorted(package.rglob("*.py"))
    }
    assert not {path: names for path, names in found.items() if names}


def test_a_submodule_exports_only_what_its_package_exports(modules):
    """The modules of a subpackage (``pyg_progcl.io.graphs``) list only names that the
    subpackage (``pyg_progcl.io``) exports, or none."""
    by_name = {module.__name__: module for module in modules}
    for module in modules:
        package, _, _ = module.__name__.rpartition(".")
        if package.count(".") >= 1:  # (the root's own subpackages have their own)
            extra = set(getattr(module, "__all__", ())) - set(by_name[package].__all__)
            assert not extra, f"{module.__name__} exports {sorted(extra)}, {package} not"


def test_the_surface_check_can_fail():
    def namespace(name: str, **names) -> ModuleType:
        module = ModuleType(name)
        module.__dict__.update(names, __all__=list(names))
        return module

    one, other = namespace("a", embed=len, fit=abs), namespace("b", embed=print, fit=abs)
    assert ambiguous(exports([one, other])) == {"embed": ["a", "b"]}
    wide = namespace("c", **{f"name{i}": i for i in range(MAX_PUBLIC_NAMES + 1)})
    assert len(exports([wide, one])) == MAX_PUBLIC_NAMES + 3


# -- examples -------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_import_only_public_names(path):
    report = import_errors(path.read_text())
    problems = [line for line in report if not line.startswith("ok: ")]
    assert not problems, f"{path.name}: {problems}"
    assert any(line.startswith("ok: pyg_progcl") for line in report), "imports nothing of ours"


def test_there_are_examples_to_check():
    assert len(EXAMPLES) >= 5


def test_the_import_check_can_fail():
    bad = """
import ogb
from pyg_progcl.cli import train
from pyg_progcl._checks import check_int
from pyg_progcl.io import takes_edge_weight
from pyg_progcl.nonexistent import thing
from . import sibling
from pyg_progcl import GRACEModel
"""
    report = import_errors(bad)
    problems = [line for line in report if not line.startswith("ok: ")]
    assert len(problems) == 6, report
    assert "ok: pyg_progcl.GRACEModel" in report


def test_every_library_module_the_examples_use_is_documented():
    used = set()
    for path in EXAMPLES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyg_progcl"):
                used.add(node.module)
    documented = {module for page in API_PAGES for module in automodules(page)}
    assert {"pyg_progcl", "pyg_progcl.evaluation", "pyg_progcl.datasets"} <= used
    assert used <= documented, used - documented


def test_the_probe_and_the_synthetic_graph_need_no_harness():
    code = (
        "import sys, pyg_progcl.evaluation, pyg_progcl.datasets\n"
        "bad = [m for m in sys.modules if m.startswith(('pyg_progcl.cli', "
        "'pyg_progcl.diagnostics'))]\n"
        "assert 'pyg_progcl.evaluation' in sys.modules and not bad, bad\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr


# -- API reference ----------------------------------------------------------------------


def test_the_api_reference_documents_only_public_modules_that_import():
    modules = [module for page in API_PAGES for module in automodules(page)]
    assert len(API_PAGES) >= 5 and len(modules) >= 20
    private = [module for module in modules if is_private(module)]
    assert not private, f"private modules in docs/api: {private}"
    for module in modules:
        importlib.import_module(module)


# -- augmenter hooks ----------------------------------------------------------------------

HOOKS = ["augment_features", "edge_keep_mask", "prepare"]


@pytest.mark.parametrize("hook", HOOKS)
def test_augmenter_hooks_are_public_and_documented(hook):
    method = getattr(Augmenter, hook)
    assert callable(method) and method.__name__ == hook
    assert method.__doc__ and method.__doc__.startswith("Hook:")
    assert f":meth:`{hook}`" in Augmenter.__doc__


@pytest.mark.parametrize(
    "cls, hook",
    [
        (EdgeDrop, "edge_keep_mask"),
        (FeatureMask, "augment_features"),
        (AdaptiveEdgeDrop, "edge_keep_mask"),
        (AdaptiveEdgeDrop, "prepare"),
        (AdaptiveFeatureMask, "augment_features"),
        (AdaptiveFeatureMask, "prepare"),
        (ComposeAugmenters, "prepare"),
    ],
)
def test_builtin_augmenters_implement_the_public_hooks(cls, hook):
    method = getattr(cls, hook)  # (the adaptive ones share `prepare` through their base)
    assert method is not getattr(Augmenter, hook) and method.__name__ == hook
