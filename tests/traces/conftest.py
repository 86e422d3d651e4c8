"""Fixtures of the trace tests: the shipped data folder and a CLI runner.

``run_cli`` goes through :func:`neuscale_opt.cli.main` (argument parsing, error handling, exit
codes).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from neuscale_opt import cli


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable:
    """``run_cli(*argv) -> (exit_code, stdout, stderr)`` through ``neuscale_opt.cli.main``."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run
