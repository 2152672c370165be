"""The command line's own dependencies (the ``cli`` extra): the library works without
them, and the command line says in one line how to install them.

(PyG and torch import tqdm and filelock themselves, so they are hidden once those are
loaded: what is checked is that pyg_progcl's library never imports them.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO

#: Python code that hides a module (as if it were not installed) once torch and PyG are
#: loaded, then runs ``code``.
HIDE = "import sys, torch_geometric\nsys.modules[{module!r}] = None\n{code}"


def run_without(module: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", HIDE.format(module=module, code=code)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("module", ["tqdm", "filelock"])
def test_the_command_line_without_its_extra_says_how_to_install_it(module):
    code = (
        "import runpy; sys.argv = ['pyg_progcl', '--epochs', '1']\n"
        "runpy.run_module('pyg_progcl', run_name='__main__', alter_sys=True)"
    )
    proc = run_without(module, code)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert module in lines[0] and 'pip install "pyg_progcl[cli]"' in lines[0]
    assert not proc.stdout


def test_the_library_needs_neither_tqdm_nor_filelock():
    code = (
        "sys.modules['filelock'] = None\n"
        "import torch, pyg_progcl, pyg_progcl.io, pyg_progcl.evaluation, pyg_progcl.datasets\n"
        "import pyg_progcl.minibatch, pyg_progcl.distributed, pyg_progcl.diagnostics\n"
        "from pyg_progcl.datasets import synthetic_graph\n"
        "from pyg_progcl.io import embed\n"
        "data = synthetic_graph(num_nodes=60, seed=0)\n"
        "model = pyg_progcl.GRACEModel(pyg_progcl.GCNEncoder(data.num_features, 8), 8, 4)\n"
        "print(tuple(embed(model, data, batch_size=16).shape))\n"
        "try:\n"
        "    import pyg_progcl.cli\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name)\n"
    )
    proc = run_without("tqdm", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["(60,", "8)", "tqdm"]
