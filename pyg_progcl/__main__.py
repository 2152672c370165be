"""``python -m pyg_progcl`` (and ``pyg-progcl``): the command line, :mod:`pyg_progcl.cli`.

Without the ``cli`` extra installed, one line on stderr says so (exit status 2).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Optional


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line on ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    try:
        from pyg_progcl.cli import main as cli_main
    except ModuleNotFoundError as exc:
        if exc.name not in ("tqdm", "filelock"):  # (the cli extra: pyg_progcl.cli._extra)
            raise
        print(f"pyg_progcl: error: {exc.msg}", file=sys.stderr)
        return 2
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
