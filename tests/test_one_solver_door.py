"""The evaluators and the roofline never touch a solver; only the solve module imports one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "neuscale_opt"


def test_evaluators_and_engine_import_without_pyomo():
    code = (
        "import sys\n"
        "import neuscale_opt.alloc.evaluate, neuscale_opt.horizon.evaluate, neuscale_opt.candidates\n"
        "import neuscale_opt.replay, neuscale_opt.traces.forecast\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pyomo', 'highspy', 'ortools')]\n"
        "print(','.join(sorted(bad)[:5]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_solver_libraries_are_imported_in_the_solve_module_only():
    """Only ``alloc/solve.py`` imports a solver library or asks Pyomo for a solver."""
    pattern = re.compile(r"^\s*(import|from)\s+(highspy|ortools|pyomo\.contrib\.appsi)\b|SolverFactory\(", re.M)
    offenders = [
        str(p.relative_to(PKG))
        for p in sorted(PKG.rglob("*.py"))
        if p.name != "solve.py" and pattern.search(p.read_text())
    ]
    assert offenders == []
    assert pattern.search((PKG / "alloc" / "solve.py").read_text())
