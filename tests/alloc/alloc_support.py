"""Shared fixtures and runners of the allocation tests (imported by the test modules of this folder)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.cli import main
from neuscale_opt.planning import load_plan_input

ROOT = Path(__file__).resolve().parents[2]
INSTANCES = ROOT / "instances" / "alloc"
EXPECTED = json.loads((INSTANCES / "expected.json").read_text())


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """Run a subcommand through ``neuscale_opt.cli.main``: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def case_inputs(case: dict):
    coeffs, inst = load_plan_input(str(INSTANCES / case["instance"]))
    return coeffs, PlanOptions.from_instance(inst).replace(**case["overrides"])
