"""Command-line interface: ``neuscale-opt <command> ...``.

Each subcommand is a thin wrapper around library functions. Modules contribute subcommands with a
``register(subparsers)`` function; each parser sets ``func(args) -> int``.

Exit codes: 0 success, 1 infeasible, 2 bad input, 3 time limit without a plan
(see :mod:`neuscale_opt.errors`). Errors print one line on stderr; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from neuscale_opt import __version__
from neuscale_opt.errors import EXIT_BAD_INPUT, NeuscaleError

PROG = "neuscale-opt"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Plan LLM serving capacity on heterogeneous accelerator fleets.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for register in _registrars():
        register(sub)
    return parser


def _registrars():
    from neuscale_opt import commands

    return list(commands.REGISTRARS)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point. Returns the exit code instead of calling ``sys.exit`` (testable)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed its one-line usage error
        code = exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
        return code
    try:
        return int(args.func(args))
    except NeuscaleError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped early (e.g. `| head`)
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
