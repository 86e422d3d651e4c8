"""Command-line interface: ``neuscale-opt <command> ...``, the one layer above the domain packages.

Each subcommand is a thin wrapper around library functions and lives in a module of this package
(:mod:`.core`, :mod:`.plan`, :mod:`.traces`, :mod:`.replay`, :mod:`.bench`). A module lists its
commands in ``COMMANDS``: name -> :class:`Command` (one help line, a function that adds the
arguments and sets ``func(args) -> int``). The domain packages never import this package; the
command modules import their domain inside the command functions, so building the parser imports
no numpy, pandas or Pyomo, and only the arguments of the command being run are built.

Exit codes: 0 success, 1 infeasible, 2 bad input, 3 time limit without a plan
(see :mod:`neuscale_opt.errors`). Errors print one line on stderr; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from typing import NoReturn

from neuscale_opt import __version__
from neuscale_opt.errors import EXIT_BAD_INPUT, NeuscaleError

PROG = "neuscale-opt"

#: The command modules, in the order their commands are listed by ``--help``.
MODULES: tuple[str, ...] = ("core", "traces", "plan", "replay", "bench", "export", "sweep")


class Command:
    """One subcommand: its one-line help and the function that adds its arguments (and ``func``).

    A plain class rather than a dataclass: building the parser is on the start-up path, and
    ``dataclasses`` costs more to import than the whole parser takes to build."""

    __slots__ = ("configure", "description", "help")

    def __init__(
        self, help: str, configure: Callable[[argparse.ArgumentParser], None], description: str | None = None
    ) -> None:
        self.help = help
        self.configure = configure
        self.description = description


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line naming where to read more, exit 2.

    ``help_prog`` is what the line sends the user to (``neuscale-opt plan`` for an unknown option of
    ``plan``, which the top-level parser reports); it defaults to the parser's own ``prog``.
    """

    help_prog: str | None = None

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{PROG}: error: {message} (see {self.help_prog or self.prog} --help)\n")


def commands() -> dict[str, Command]:
    """Every subcommand by name (the command modules are light: their domains load lazily)."""
    out: dict[str, Command] = {}
    for mod in MODULES:
        out.update(import_module(f"neuscale_opt.cli.{mod}").COMMANDS)
    return out


def build_parser(only: str | None = "*") -> argparse.ArgumentParser:
    """The argument parser. ``only``: the command whose arguments are built (``"*"``: all; ``None``:
    none, enough for ``--help`` and ``--version``, which list the commands)."""
    parser = OneLineParser(
        prog=PROG,
        description="Plan LLM serving capacity on heterogeneous accelerator fleets.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, cmd in commands().items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.description or cmd.help)
        if only == "*" or only == name:
            cmd.configure(p)
        if only == name:
            parser.help_prog = p.prog
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the first word that is not a top-level option)."""
    return next((a for a in argv if not a.startswith("-")), None)


#: True in the command-line process itself (:func:`console`), where :func:`settle_heap` may freeze.
_CONSOLE: list[bool] = []


def settle_heap() -> None:
    """Take every object alive now out of the garbage collector's view (``gc.freeze``): the
    instance, its coefficients and the imported modules live as long as the command, and every
    full collection would scan them again. Only in the command-line process (:func:`console`):
    when :func:`main` is called from Python, frozen objects would stay for the life of the caller."""
    if _CONSOLE:
        import gc

        gc.freeze()


def console() -> None:
    """The ``neuscale-opt`` console script and ``python -m neuscale_opt.cli``: :func:`main` in a
    process of its own."""
    _CONSOLE.append(True)
    raise SystemExit(main())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point. Returns the exit code instead of calling ``sys.exit`` (testable)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(only=_command_of(argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or the one-line usage error already printed
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    args.argv = argv  # recorded in a plan's provenance
    try:
        return int(args.func(args))
    except NeuscaleError as exc:
        if args.debug:
            import traceback

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
