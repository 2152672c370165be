"""Command line: ``python -m pyg_progcl [SUBCOMMAND] [options]`` (also ``pyg-progcl``).

Without arguments it trains ProGCL on the built-in synthetic graph (no files,
no network) and prints the linear-probe accuracy. Options without a
subcommand go to ``train``: ``python -m pyg_progcl --dataset Cora`` is
``python -m pyg_progcl train --dataset Cora``.

Adding a subcommand: add one line to :data:`SUBCOMMANDS` naming a module that
defines ``add_arguments(parser)`` and ``run_cli(args) -> int`` (the exit
status). A module that does not exist (yet) is skipped. ``ValueError``,
``FileNotFoundError`` and other ``OSError`` raised by ``run_cli`` become one
``error:`` line on stderr and exit status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from typing import NoReturn, Optional

__all__: list[str] = []

#: name -> (module, one-line help). The module defines add_arguments(parser) and run_cli(args).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": (
        "pyg_progcl.cli.train_cli",
        "train a model and evaluate it with a linear probe",
    ),
    "diagnose": (
        "pyg_progcl.cli.diagnose_cli",
        "true/false-negative analysis of a trained model",
    ),
    "embed": ("pyg_progcl.cli.embed_cli", "embed a graph's nodes with a saved model"),
}
DEFAULT_SUBCOMMAND = "train"


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (no usage block) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _load(name: str):
    """The module of subcommand ``name``, or ``None`` if it does not exist (yet)."""
    module_name = SUBCOMMANDS[name][0]
    if importlib.util.find_spec(module_name) is None:
        return None
    module = importlib.import_module(module_name)
    if not (hasattr(module, "add_arguments") and hasattr(module, "run_cli")):
        return None
    return module


def build_parser(
    command: Optional[str] = None,
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and its sub-parsers.

    Only ``command``'s module is imported and asked for its arguments (all of
    them when ``command`` is ``None``), so that one subcommand's imports never
    slow down or break another.
    """
    from pyg_progcl import __version__

    parser = _Parser(
        prog="pyg_progcl",
        description="Hard-negative-aware graph contrastive learning (GRACE, GCA, DCL, HCL, "
        "ProGCL). Without arguments: ProGCL on the built-in synthetic graph.",
    )
    parser.add_argument("--version", action="version", version=f"pyg_progcl {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subs = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if importlib.util.find_spec(module_name) is None:
            continue
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        if command in (None, name):
            module = _load(name)
            if module is not None:
                module.add_arguments(sub)
                sub.set_defaults(_module=module)
        subs[name] = sub
    return parser, subs


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses ``argv`` (default: ``sys.argv[1:]``), runs the subcommand, returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, DEFAULT_SUBCOMMAND)
    parser, subs = build_parser(argv[0])
    args = parser.parse_args(argv)
    sub = subs[args.command]
    if not hasattr(args, "_module"):
        sub.exit(2, f"{sub.prog}: error: subcommand {args.command!r} is not available\n")
    try:
        return int(args._module.run_cli(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        sub.exit(2, f"{sub.prog}: error: {exc}\n")
    except OSError as exc:  # e.g. a download that failed offline
        sub.exit(2, f"{sub.prog}: error: {type(exc).__name__}: {exc}\n")
    except KeyboardInterrupt:
        hint = " (rerun with --resume to continue)" if getattr(args, "checkpoint", None) else ""
        sub.exit(130, f"{sub.prog}: interrupted{hint}\n")


if __name__ == "__main__":
    sys.exit(main())
