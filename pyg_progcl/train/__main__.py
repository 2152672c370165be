"""``python -m pyg_progcl.train``: the ``train`` subcommand alone."""

import sys

from .cli import main

sys.exit(main())
