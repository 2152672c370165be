"""Shared fixtures (an isolated dataset cache, the benchmark datasets, read-only copies)
and the ``slow`` marker.

Tests marked ``@pytest.mark.slow`` (subprocesses, signals, file locks, plots, end-to-end
training) are skipped unless ``--slow`` is given or ``PYG_PROGCL_SLOW=1`` is set; a
``-m`` expression that names ``slow`` (``-m slow``) or a test named by its node id runs
them too. CI runs everything: ``pytest --slow``.

Helpers shared by several test modules live in ``helpers.py`` (``from helpers import ...``).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
for _path in (REPO, TESTS):  # tests run without an installed package too; `import helpers`
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

SHARED_DATA_ENV = "PYG_PROGCL_SHARED_DATA"
SLOW_ENV = "PYG_PROGCL_SLOW"

# ogb checks PyPI for a newer version at import (a thread doing network I/O, and a warning
# when it fails): tests import ogb without it, in every process (pytest-xdist workers too).
sys.modules.setdefault("outdated", None)

# The tests' tensors are small, and the machine is shared: with several torch
# threads, OpenMP's barriers stall whenever a core is busy elsewhere (measured
# here: a 300-node probe 8x slower with 2 threads than with 1 under load).
# PYG_PROGCL_TEST_THREADS=0 keeps torch's default.
_threads = int(os.environ.get("PYG_PROGCL_TEST_THREADS", "1"))
if _threads > 0:
    import torch

    torch.set_num_threads(_threads)


def pytest_addoption(parser):
    parser.addoption(
        "--slow",
        action="store_true",
        default=False,
        help=f"also run the tests marked slow (or set {SLOW_ENV}=1)",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow: subprocess, signal, file-lock, plotting or end-to-end training test; skipped "
        f"unless --slow or {SLOW_ENV}=1",
    )
    config.addinivalue_line(
        "markers",
        "sparse: needs torch-sparse (./scripts/setup.sh --dev --with-sparse builds it); "
        "skipped without it",
    )


def _run_slow(config) -> bool:
    if config.getoption("--slow") or os.environ.get(SLOW_ENV, "0") not in ("", "0"):
        return True
    return "slow" in (config.getoption("markexpr", "") or "")  # `-m slow`: the user chose


def pytest_collection_modifyitems(config, items):
    if _run_slow(config):
        return
    named = {arg.split("[")[0] for arg in config.args if "::" in arg}  # asked for by node id
    skip = pytest.mark.skip(reason=f"slow: run with --slow or {SLOW_ENV}=1")
    for item in items:
        if "slow" in item.keywords and not _named(item, named):
            item.add_marker(skip)


def _named(item, named: set) -> bool:
    if not named:
        return False
    path = str(item.path)
    name = item.nodeid.split("::", 1)[1].split("[")[0]
    for arg in named:
        file, _, rest = arg.partition("::")
        same_file = path.endswith(os.path.normpath(file)) or os.path.abspath(file) == path
        if same_file and (name == rest or name.startswith(rest + "::")):
            return True
    return False


@pytest.fixture
def one_process_group(tmp_path):
    """A default process group of this process alone (gloo)."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("needs torch.distributed without a default group")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Copies of read-only datasets go to a temporary cache, never to ``~/.cache``."""
    cache = tmp_path_factory.mktemp("pyg_progcl_cache")
    old = os.environ.get("PYG_PROGCL_CACHE")
    os.environ["PYG_PROGCL_CACHE"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("PYG_PROGCL_CACHE", None)
    else:
        os.environ["PYG_PROGCL_CACHE"] = old


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The benchmark datasets in PyG's raw files, grouped layout (``planetoid/Cora/raw``,
    ``amazon/Photo/raw``, ...), at ``$PYG_PROGCL_SHARED_DATA``; skips the test when the
    variable is unset or Cora is not there (tests/README.md)."""
    value = os.environ.get(SHARED_DATA_ENV, "")
    if not value:
        pytest.skip(f"needs the benchmark datasets: set {SHARED_DATA_ENV} (tests/README.md)")
    path = Path(value).expanduser()
    if not (path / "planetoid" / "Cora" / "raw").is_dir():
        pytest.skip(f"{SHARED_DATA_ENV}={value} holds no planetoid/Cora/raw")
    return path


def make_read_only(path: Path) -> None:
    """Removes every write bit under ``path`` (files and folders)."""
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            p = os.path.join(dirpath, name)
            os.chmod(p, os.stat(p).st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    for dirpath, _, _ in sorted(os.walk(path), key=lambda t: -len(t[0])):
        os.chmod(dirpath, os.stat(dirpath).st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def make_writable(path: Path) -> None:
    for dirpath, _, filenames in os.walk(path):
        os.chmod(dirpath, os.stat(dirpath).st_mode | stat.S_IWUSR)
        for name in filenames:
            p = os.path.join(dirpath, name)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)


@pytest.fixture(scope="session")
def readonly_root(shared_data, tmp_path_factory):
    """A read-only data root in the grouped layout (``planetoid/Cora``, ``amazon/Photo``),
    copied from the benchmark datasets, so that tests never depend on that folder's
    own permissions."""
    root = tmp_path_factory.mktemp("readonly_root")
    for group, name in [("planetoid", "Cora"), ("amazon", "Photo")]:
        src = shared_data / group / name
        if src.is_dir():
            shutil.copytree(src, root / group / name, copy_function=shutil.copyfile)
    make_read_only(root)
    yield root
    make_writable(root)  # so that pytest can clean up
