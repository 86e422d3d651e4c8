"""Fixtures of the trace tests: the shipped data folder and a CLI runner.

``run_cli`` goes through :func:`neuscale_opt.cli.main` (argument parsing, error handling, exit
codes). Until ``neuscale_opt.commands`` registers :func:`neuscale_opt.traces.cli.register`, the
runner registers it itself, so the same tests run before and after the wiring.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from neuscale_opt import cli
from neuscale_opt.traces.cli import register


def _wired() -> bool:
    try:
        from neuscale_opt import commands
    except ImportError:
        return False
    return any(getattr(r, "__module__", "") == "neuscale_opt.traces.cli" for r in commands.REGISTRARS)


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable:
    """``run_cli(*argv) -> (exit_code, stdout, stderr)`` through ``neuscale_opt.cli.main``."""
    if not _wired():
        monkeypatch.setattr(cli, "_registrars", lambda: [register])

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run
