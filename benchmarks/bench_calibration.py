"""Benchmark: calibration of the roofline against the shipped published measurements.

Fits the profile on ``neuscale_opt/data/measured/points.csv`` (or a CSV given on the command line)
and prints, per chip and metric, MAPE and Spearman of the pure roofline (before), of the fit
(after) and of leave-one-source-out cross-validation; then the target figure: MAPE on the
fixed-length, known-batch TTFT and TPOT points (target: cross-validated <= 20 %).

Run: ``.venv/bin/python benchmarks/bench_calibration.py [MEASUREMENTS.csv] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import time

from neuscale_opt.calibrate import calibrate, default_measurements_path, summary_table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measurements", nargs="?", default=str(default_measurements_path()))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    t = time.perf_counter()
    cal = calibrate(args.measurements)
    wall = time.perf_counter() - t
    if args.json:
        print(json.dumps({"target": cal.target, "summary": cal.summary.to_dict("records"), "wall_s": wall}, indent=2))
    else:
        print(summary_table(cal), end="")
        print(f"points used {len(cal.measurements.points)}, skipped {len(cal.measurements.skipped)}; {wall:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
