"""Sphinx configuration of the pyg_progcl API reference (docs/api).

Build it strictly, as tests/cli/test_docs.py does::

    python -m sphinx -b html -W --keep-going -n docs/api /tmp/pyg_progcl-api

Every public object is documented once, at the path of its subpackage (the path the
root package imports it from): ``pyg_progcl.losses.ProGCLLoss``,
``pyg_progcl.model.GRACEModel``, ``pyg_progcl.augment.EdgeDrop``; autodoc records the
defining module as the canonical name (``pyg_progcl.losses.progcl.ProGCLLoss``), so both
resolve. References to the other public spellings of the same object, such as the root
export ``pyg_progcl.GRACEModel``, are resolved by :func:`resolve_alias` below to the
documented object, and only when that object exists and is documented: a reference to a
name that does not exist (``pyg_progcl.NoSuchThing``) or is not documented still fails
the nitpicky build. References into other packages (torch, PyG, numpy, typing, ...) are
not checked: there are no intersphinx inventories offline.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from types import FunctionType, ModuleType

from sphinx.ext.napoleon import _process_docstring as _napoleon_process_docstring

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:  # build from a checkout without installing the package
    sys.path.insert(0, ROOT)

project = "pyg_progcl"
author = "pyg_progcl contributors"
copyright = "pyg_progcl contributors"
release = version = importlib.import_module("pyg_progcl").__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
]

root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []
templates_path: list[str] = []

# -- autodoc / napoleon -------------------------------------------------------------------

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# (Not ``inherited-members`` here: on an ``automodule`` it documents every member. The
# classes built on a private base list its members with ``:inherited-members:`` in their
# own ``autoclass``: see augment.rst and encoders.rst.)
autodoc_default_options = {"show-inheritance": True}

napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_include_init_with_doc = False
# One ``:param:`` field per entry, so ``h1, h2: ...`` entries document both names.
napoleon_use_param = True
napoleon_use_rtype = False
# ``Attributes:`` entries become ``.. attribute::`` entries, targets of ``:attr:``. (The
# ``:ivar:`` fields of ``napoleon_use_ivar = True`` link nothing, and read an entry that
# names two attributes, ``pe1, pe2: ...``, as a type ``pe1,`` and a name ``pe2``: a broken
# reference. As an ``.. attribute::`` such an entry is shown as is, without a target.)
napoleon_use_ivar = False
napoleon_attr_annotations = True

# -- strictness ---------------------------------------------------------------------------

nitpicky = True
suppress_warnings: list[str] = []

#: Packages whose objects this reference does not document; references to them stay
#: unchecked (no intersphinx offline). pyg_progcl is deliberately not in this list.
EXTERNAL_PACKAGES = (
    "torch",
    "torch_geometric",
    "numpy",
    "np",
    "scipy",
    "sklearn",
    "matplotlib",
    "ogb",
    "networkx",
    "filelock",
    "tqdm",
    "typing",
    "typing_extensions",
    "collections",
    "os",
    "pathlib",
    "dataclasses",
    "contextlib",
    "types",
    "enum",
    "abc",
    "functools",
    "weakref",
)
_external = "|".join(EXTERNAL_PACKAGES)
#: Builtin names that appear in signatures and ``Args:`` types (``int``, ``optional``, ...).
BUILTIN_NAMES = (
    "None",
    "bool",
    "int",
    "float",
    "complex",
    "str",
    "bytes",
    "dict",
    "list",
    "tuple",
    "set",
    "frozenset",
    "type",
    "object",
    "callable",
    "Callable",
    "optional",
    "Ellipsis",
    "ValueError",
    "TypeError",
    "RuntimeError",
    "KeyError",
    "FileNotFoundError",
    "NotImplementedError",
    "Exception",
)
nitpick_ignore_regex = [
    (r"py:.*", rf"(?:{_external})(?:\..*)?"),
    (r"py:.*", rf"(?:{'|'.join(BUILTIN_NAMES)})"),
    # PyG's docstring convention marks literals with the ``:obj:`` role: :obj:`None`,
    # :obj:`True`, :obj:`2`, :obj:`0.7`, :obj:`'relu'`. They name no object.
    (
        r"py:obj",
        r"(?:True|False|None|[-+]?[0-9][0-9_]*\.?[0-9_]*(?:[eE][-+]?[0-9]+)?|'[^']*'|\"[^\"]*\")",
    ),
]


# -- aliases of documented pyg_progcl objects ---------------------------------------------


def _import_path(path: str):
    """The object a dotted path names (a module, then attributes); raises if none."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(path)


def _indexable(obj) -> bool:
    """Objects whose identity names them: not numbers or strings, which may be shared."""
    return not isinstance(obj, (bool, int, float, complex, str, bytes, type(None)))


def _documented(env) -> dict[int, str]:
    """``id(object) -> documented name`` of every documented pyg_progcl object (cached
    per build)."""
    cache = getattr(env, "_pyg_progcl_documented", None)
    if cache is None:
        cache, keep = {}, []
        for name, entry in env.get_domain("py").objects.items():
            if entry.aliased or not name.startswith("pyg_progcl"):
                continue
            try:
                obj = _import_path(name)
            except (ImportError, AttributeError):
                continue
            if _indexable(obj) and id(obj) not in cache:
                cache[id(obj)] = name
                keep.append(obj)
        env._pyg_progcl_documented = cache
        env._pyg_progcl_keep = keep  # ids stay valid while the objects live
    return cache


def _unwrap(obj):
    """Functions behind ``torch.no_grad()`` and similar decorators compare as themselves."""
    return getattr(obj, "__wrapped__", obj)


def _documented_name(env, path: str):
    """The documented name of the object ``path`` names, or ``None``.

    Walks ``path`` from its module; the deepest object on the way that is documented
    gives the name, and the rest of the path is appended (attributes of a documented
    class are documented under it). ``None`` when the path names nothing.
    """
    parts = path.split(".")
    documented = _documented(env)
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        break
    else:
        return None
    best = documented.get(id(obj)) and (documented[id(obj)], i)
    try:
        for j, name in enumerate(parts[i:], start=i + 1):
            obj = getattr(obj, name)
            key = id(_unwrap(obj)) if id(obj) not in documented else id(obj)
            if key in documented:
                best = (documented[key], j)
    except AttributeError:
        return None
    if not best:
        return None
    name, depth = best
    return ".".join([name, *parts[depth:]])


def _written_in(node) -> list[str]:
    """Namespaces a docstring's relative reference is looked up in: the class and module
    where the docstring is written (from the node's source, ``docstring of X``)."""
    source = node.source or ""
    if "docstring of " not in source:
        return []
    path = source.rsplit("docstring of ", 1)[1].strip()
    try:
        obj = _import_path(path)
    except (ImportError, AttributeError):
        return []
    if isinstance(obj, ModuleType):
        return [obj.__name__]
    obj = _unwrap(getattr(obj, "fget", obj))
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", "")
    if not module or not module.startswith("pyg_progcl"):
        return []
    spaces = [module]
    if isinstance(obj, type):
        spaces.insert(0, f"{module}.{qualname}")
    elif "." in qualname:  # a method: its class first
        spaces.insert(0, f"{module}.{qualname.rsplit('.', 1)[0]}")
    return spaces


def _is_external(path: str) -> bool:
    """Whether ``path`` names an object of another package (by its defining module)."""
    try:
        obj = _import_path(path)
    except (ImportError, AttributeError):
        return False
    module = obj.__name__ if isinstance(obj, ModuleType) else getattr(obj, "__module__", None)
    if not isinstance(module, str) or not isinstance(obj, (ModuleType, type, FunctionType)):
        return False
    return module.split(".")[0] in EXTERNAL_PACKAGES


def resolve_alias(app, env, node, contnode):
    """``missing-reference``: resolves another public path of a documented pyg_progcl
    object (``pyg_progcl.GRACEModel``, ``pyg_progcl.ProGCLLoss.fit``) to its entry.

    A relative target is looked up as Python would look the name up where it is written:
    in the documenting module and class, then in the module (and class) whose docstring
    holds the reference (``BetaMixture`` in a module that imports it). Leaves everything
    else unresolved, so the nitpicky build reports it.
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip(".~")
    module, cls = node.get("py:module"), node.get("py:class")
    candidates = [target] if target.startswith("pyg_progcl.") else []
    spaces = []
    if module and module.startswith("pyg_progcl"):
        spaces += [f"{module}.{cls}"] if cls else []
        spaces.append(module)
    spaces += _written_in(node)
    candidates += [f"{space}.{target}" for space in spaces]
    domain = env.get_domain("py")
    for path in candidates:
        if _is_external(path):  # e.g. ``GCNConv`` where the module imports it from PyG
            return contnode
        name = _documented_name(env, path)
        if name is None or name not in domain.objects:
            continue
        new = node.deepcopy()
        new["reftarget"] = name
        new["refspecific"] = False
        found = domain.resolve_xref(
            env, node["refdoc"], app.builder, node["reftype"], name, new, contnode
        )
        if found is not None:
            return found
    return None


def public_bases(app, name, obj, options, bases: list) -> None:
    """``autodoc-process-bases``: a private base class of the package (``_StackEncoder``,
    ``_Adaptive``) is shown as its own bases; its members are documented on the subclass
    (``inherited-members``)."""
    i = 0
    while i < len(bases):
        base = bases[i]
        private = (
            isinstance(base, type)
            and base.__module__.startswith("pyg_progcl")
            and base.__name__.startswith("_")
        )
        if private:
            bases[i : i + 1] = [b for b in base.__bases__ if b not in bases]
        else:
            i += 1


def napoleon_except_data(app, what, name, obj, options, lines) -> None:
    """napoleon, except on the docstrings of module data and attributes.

    napoleon reads the first line of such a docstring as ``type: description``; the
    package annotates types instead and writes ``#: Anchors of a block: a range, ...``,
    whose text before the colon napoleon would turn into a type (a broken reference).
    """
    if what not in ("data", "attribute"):
        _napoleon_process_docstring(app, what, name, obj, options, lines)


def no_type_docstring(app, what, name, obj, options, lines) -> None:
    """A constant without a ``#:`` comment shows no docstring, not its type's (``dict``'s)."""
    doc = getattr(type(obj), "__doc__", None)
    if what == "data" and doc and "\n".join(lines).strip() == inspect.cleandoc(doc).strip():
        lines[:] = []


def setup(app):
    app.connect("autodoc-process-docstring", no_type_docstring, priority=400)
    for listener in list(app.events.listeners["autodoc-process-docstring"]):
        if listener.handler is _napoleon_process_docstring:
            app.disconnect(listener.id)
    app.connect("autodoc-process-docstring", napoleon_except_data)
    app.connect("missing-reference", resolve_alias)
    app.connect("autodoc-process-bases", public_bases)
