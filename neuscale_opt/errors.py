"""Errors that reach the user, each with its documented exit code.

Exit codes (the CLI contract, also in the README):

* 0 - success (a plan, a table, a report)
* 1 - the problem is infeasible (a one-line diagnosis says what cannot be covered)
* 2 - bad input: a file, field or row is wrong; the message names it
* 3 - the solver hit its work limit (nodes) or its time limit without an incumbent
* 4 - the solver failed (an error of HiGHS, not a property of the instance)

Library code raises these; ``neuscale_opt.cli.main`` turns them into a single line on stderr
and the exit code, without a traceback unless ``--debug`` is given.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2
EXIT_TIME_LIMIT = 3
EXIT_SOLVER_ERROR = 4


class NeuscaleError(Exception):
    """Base class of every error meant for the user."""

    exit_code: int = EXIT_BAD_INPUT


class InputError(NeuscaleError, ValueError):
    """Bad input: a file, field or row is wrong. The message names where.

    ``where`` is the file (and optionally field/row) the problem was found in; it is
    prefixed to the message so that the one line the user sees always says where.
    """

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, where: str | None = None) -> None:
        self.where = where
        self.detail = message
        super().__init__(f"{where}: {message}" if where else message)


class InfeasibleError(NeuscaleError):
    """The instance admits no plan (with the diagnosis in the message)."""

    exit_code = EXIT_INFEASIBLE


class TimeLimitError(NeuscaleError):
    """The solver stopped at its work limit or its time limit without any feasible plan (the
    message says which)."""

    exit_code = EXIT_TIME_LIMIT


class SolverError(NeuscaleError):
    """The solver failed on a model (an error status, with and without its presolve): no answer,
    neither a plan nor a proof of infeasibility."""

    exit_code = EXIT_SOLVER_ERROR
