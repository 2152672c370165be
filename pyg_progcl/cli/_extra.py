"""The command line's own dependencies (the ``cli`` extra), checked before it loads."""

from __future__ import annotations

import importlib

#: The modules the command line needs beyond the library's dependencies.
EXTRA_MODULES = ("tqdm", "filelock")


def require_extra() -> None:
    """Imports the modules of the ``cli`` extra.

    Raises:
        ModuleNotFoundError: one line naming the missing module and the install command;
            its ``name`` is the missing module's.
    """
    for module in EXTRA_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            raise ModuleNotFoundError(
                f"the command line needs the 'cli' extra ({module} is missing): "
                'pip install "pyg_progcl[cli]"',
                name=module,
            ) from None
