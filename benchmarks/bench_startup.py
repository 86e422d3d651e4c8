"""Benchmark: start-up time of the command line.

Each command runs as a fresh subprocess (``python -m neuscale_opt.cli ...``, the same entry point
as the ``neuscale-opt`` console script) several times; the table shows the median, minimum and
maximum wall time and the number of modules imported. Targets: ``--help`` and ``--version`` under
0.3 s, ``validate`` (the small instance) under 1 s. A bare ``python -c pass`` is the floor.

Run: ``.venv/bin/python benchmarks/bench_startup.py [--repeat N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
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


def _modules(argv: list[str]) -> int | None:
    if argv[:2] != ["-m", "neuscale_opt.cli"]:
        return None
    code = COUNT.format(argv=["neuscale-opt", *argv[2:]])
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stderr
    line = next((ln for ln in err.splitlines() if ln.startswith("MODULES ")), None)
    return int(line.split()[1]) if line else None


def run(repeat: int) -> list[dict]:
    rows = []
    for label, argv, target in CASES:
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, *argv], capture_output=True, check=False)
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
                "modules": _modules(argv),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7, help="runs per command (default 7)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    rows = run(args.repeat)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
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
