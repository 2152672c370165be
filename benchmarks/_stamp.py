"""What a benchmark result file records of where it comes from, and how it is written.

:func:`machine` (CPU model, cores, torch's threads, the device and its GPU),
:func:`versions` (the library, torch, PyG, NumPy, scikit-learn, Python) and
:func:`write_json` (a result dict as JSON, atomically, creating the folder) are the ones
the command line's trainer stamps its own result files with (:mod:`pyg_progcl.cli.loop`); the benchmark scripts take them from here (their own folder is on
``sys.path`` when they run)::

    from _stamp import machine, versions, write_json
"""

from __future__ import annotations

from pyg_progcl.cli.loop import machine_info as machine
from pyg_progcl.cli.loop import versions, write_json

__all__ = ["machine", "versions", "write_json"]
