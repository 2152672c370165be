"""``scripts/setup.sh``, the README's first command: it says what it installs as it goes."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from helpers import REPO

#: A stand-in for the venv's python: nothing is installed yet, and pip prints what a real
#: install prints (with --quiet it would print nothing).
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "-c" ]; then exit 1; fi
case " $* " in *" --quiet "*) exit 0 ;; esac
echo "Collecting torch==2.13.0"
echo "args: $*"
echo "Requirement already satisfied: numpy in ./.venv"
echo "Successfully installed torch-2.13.0"
"""


@pytest.mark.slow  # a subprocess
@pytest.mark.skipif(sys.platform == "win32" or not shutil.which("bash"), reason="needs bash")
def test_setup_says_what_it_installs_as_it_goes(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    python = tmp_path / ".venv" / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    done = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "setup.sh")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    steps = [line for line in done.stderr.splitlines() if line.startswith("setup.sh: step")]
    assert len(steps) == 2 and "torch 2.13.0" in steps[0] and "torch_geometric" in steps[1]
    assert "minute" in steps[0] and "minute" in steps[1]  # how long, roughly
    assert done.stdout.count("Collecting torch==2.13.0") == 2  # pip's own lines, one per step
    assert "Requirement already satisfied" not in done.stdout
    assert "setup.sh: done" in done.stderr
    # The command line's extra comes with the plain set-up, the README's first command.
    assert "-e .[cli]" in done.stdout
