"""Benchmark: start-up time of the command line.

Each command runs as a fresh subprocess (``python -m neuscale_opt.cli ...``, the same entry point
as the ``neuscale-opt`` console script) several times; the table shows the median, minimum and
maximum wall time and the number of modules imported. Targets: ``--help`` and ``--version`` under
0.3 s, ``validate`` (the small instance) under 1 s. A bare ``python -c pass`` is the floor.

Bytecode: an installed package runs from compiled bytecode (pip writes it at install time). Here
each command runs with Python's bytecode cache on, in a temporary ``PYTHONPYCACHEPREFIX`` folder,
after one untimed warm-up run, so an environment that sets ``PYTHONDONTWRITEBYTECODE`` does not
make every run recompile the package's sources (about 50-70 ms of the ``--help`` path on this
machine, which is not start-up work the package does). ``--no-bytecode-cache`` keeps the
environment as it is (that compile included).

Run: ``.venv/bin/python benchmarks/bench_startup.py [--repeat N] [--json] [--no-bytecode-cache]``.

Measured 2026-12-01 on the shared 2-core machine, medians of 9 runs at a load of 2.1: ``python -c
pass`` 0.050 s, ``--version`` 0.085 s, ``--help`` 0.095 s, ``plan --help`` 0.120 s, ``validate
small.toml`` 0.71 s (97 modules for ``--help``: ``json`` is no longer imported to build the
parser). With ``--no-bytecode-cache`` (the environment's PYTHONDONTWRITEBYTECODE kept; 7 runs, load
2.0): ``--help`` 0.127 s. At a load of 4-5 the same ``--help`` took 0.24-0.34 s (0.35 s without
the bytecode cache), the floor ``python -c pass`` itself 0.15 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL = str(ROOT / "instances" / "small.toml")

#: (label, argv after ``python``, target seconds or None)
CASES: list[tuple[str, list[str], float | None]] = [
    ("python -c pass", ["-c", "pass"], None),
    ("--version", ["-m", "neuscale_opt.cli", "--version"], 0.3),
    ("--help", ["-m", "neuscale_opt.cli", "--help"], 0.3),
    ("plan --help", ["-m", "neuscale_opt.cli", "plan", "--help"], None),
    ("validate small.toml", ["-m", "neuscale_opt.cli", "validate", SMALL], 1.0),
]

COUNT = "import sys, runpy; sys.argv = {argv!r}; code = 0\n" + (
    "try:\n    runpy.run_module('neuscale_opt.cli', run_name='__main__')\n"
    "except SystemExit as e:\n    code = e.code\n"
    "sys.stderr.write(f'MODULES {{len(sys.modules)}}\\n')\n"
)


def _modules(argv: list[str], env: dict[str, str] | None) -> int | None:
    if argv[:2] != ["-m", "neuscale_opt.cli"]:
        return None
    code = COUNT.format(argv=["neuscale-opt", *argv[2:]])
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stderr
    line = next((ln for ln in err.splitlines() if ln.startswith("MODULES ")), None)
    return int(line.split()[1]) if line else None


def bytecode_env(prefix: str) -> dict[str, str]:
    """This environment with Python's bytecode cache on, written under ``prefix``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = prefix
    return env


def run(repeat: int, env: dict[str, str] | None = None) -> list[dict]:
    rows = []
    for label, argv, target in CASES:
        times = []
        if env is not None:  # warm-up: compile and cache the bytecode once
            subprocess.run([sys.executable, *argv], capture_output=True, check=False, env=env)
        for _ in range(repeat):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, *argv], capture_output=True, check=False, env=env)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        rows.append(
            {
                "command": label,
                "median_s": med,
                "min_s": min(times),
                "max_s": max(times),
                "target_s": target,
                "ok": None if target is None else med < target,
                "modules": _modules(argv, env),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7, help="runs per command (default 7)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--no-bytecode-cache", action="store_true", help="run in this environment as it is")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as prefix:
        rows = run(args.repeat, None if args.no_bytecode_cache else bytecode_env(prefix))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    mode = "as the environment is" if args.no_bytecode_cache else "bytecode cached"
    print(f"load (1 min) {load:.2f} before, {os.getloadavg()[0]:.2f} after; {mode}")
    print(f"| command | median s | min s | max s | target s | met | modules |  ({args.repeat} runs each)")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        target = "" if r["target_s"] is None else f"{r['target_s']:g}"
        met = "" if r["ok"] is None else ("yes" if r["ok"] else "NO")
        mods = "" if r["modules"] is None else str(r["modules"])
        times = f"{r['median_s']:.3f} | {r['min_s']:.3f} | {r['max_s']:.3f}"
        print(f"| {r['command']} | {times} | {target} | {met} | {mods} |")


if __name__ == "__main__":
    main()
