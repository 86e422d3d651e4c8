"""Benchmark: calibration of the roofline against published measurements, and its held-out check.

Fits the profile on ``neuscale_opt/data/measured/points.csv`` (or a CSV given on the command line,
the points the shipped profile is fitted on) and prints, per chip and metric, MAPE and Spearman of
the pure roofline (before), of the fit (after) and of leave-one-source-out cross-validation; then
the target figure: MAPE on the fixed-length, known-batch TTFT and TPOT points (target:
cross-validated <= 20 %). Then the held-out check (K10): the fitted profile predicts the points of
``neuscale_opt/data/measured/extra_points.csv`` (or ``--held-out CSV``), which it was not fitted on,
per chip and metric (chips without fitted points use their family prior, as shipped).

Run: ``.venv/bin/python benchmarks/bench_calibration.py [MEASUREMENTS.csv] [--held-out CSV] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import time

from neuscale_opt.calibrate import (
    calibrate,
    default_held_out_path,
    default_measurements_path,
    held_out,
    held_out_table,
    summary_table,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measurements", nargs="?", default=str(default_measurements_path()))
    ap.add_argument("--held-out", default=str(default_held_out_path()))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    t = time.perf_counter()
    cal = calibrate(args.measurements)
    wall = time.perf_counter() - t
    h = held_out(cal, args.held_out)
    if args.json:
        out = {
            "target": cal.target,
            "summary": cal.summary.to_dict("records"),
            "held_out": h.totals,
            "held_out_summary": h.summary.to_dict("records"),
            "wall_s": wall,
        }
        print(json.dumps(out, indent=2))
    else:
        print(summary_table(cal), end="")
        n_used, n_skip = len(cal.measurements.points), len(cal.measurements.skipped)
        print(f"points used {n_used}, skipped {n_skip}; fit + CV {wall:.1f} s")
        print()
        print(held_out_table(h), end="")
        print(f"held-out rows modelled {len(h.residuals)}, skipped {len(h.measurements.skipped)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
