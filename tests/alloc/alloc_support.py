"""Shared fixtures and runners of the allocation tests (imported by the test modules of this folder)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

from neuscale_opt.alloc.cli import load_plan_input, register
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.errors import NeuscaleError

ROOT = Path(__file__).resolve().parents[2]
INSTANCES = ROOT / "instances" / "alloc"
EXPECTED = json.loads((INSTANCES / "expected.json").read_text())


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """Run an allocation subcommand as ``neuscale_opt.cli.main`` would: (exit code, stdout, stderr)."""
    parser = argparse.ArgumentParser(prog="neuscale-opt")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            args = parser.parse_args(argv)
            code = int(args.func(args))
        except NeuscaleError as exc:
            print(f"neuscale-opt: error: {exc}", file=err)
            code = exc.exit_code
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def case_inputs(case: dict):
    coeffs, inst = load_plan_input(str(INSTANCES / case["instance"]))
    return coeffs, PlanOptions.from_instance(inst).replace(**case["overrides"])
