"""Benchmark of the trace pipeline, and the backtest table of ``formulations/forecast.md``.

``python benchmarks/bench_traces.py [--rows 1000000] [--format azure|mooncake] [--budget 5]``
    Writes ``--rows`` synthetic requests (seeded; arrivals over one day, log-normal lengths) to a
    temporary CSV in the chosen format, then times, separately and end to end: loading
    (``load_trace_file``, format auto-detected), bucketing (``bucket_table`` with the default 1-D
    and 2-D buckets) and per-epoch demand (``epoch_demand``). Writing the file is not timed.
    Prints one JSON object; exits 1 when load + bucket exceeds ``--budget`` seconds.

``python benchmarks/bench_traces.py --backtests``
    Prints the backtest figures of every forecaster on the shipped traces as a Markdown table
    (the one quoted in ``formulations/forecast.md``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from neuscale_opt.traces.buckets import DEFAULT_BUCKETS, DEFAULT_BUCKETS_2D, bucket_table
from neuscale_opt.traces.demand import epoch_demand, series_demand
from neuscale_opt.traces.forecast import METHODS, POOLED, backtest
from neuscale_opt.traces.loaders import load_rate_series, load_trace_file
from neuscale_opt.traces.shipped import AZURE_CODE, AZURE_CONV, SERVEGEN
from neuscale_opt.traces.synth import compose_demand


def write_synthetic(path: Path, rows: int, fmt: str, seed: int = 0) -> None:
    """``rows`` requests over 24 h, sorted, with log-normal token counts."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, 86400, rows))
    inp = np.maximum(1, rng.lognormal(7.0, 1.0, rows)).astype(np.int64)
    out = np.maximum(1, rng.lognormal(4.5, 1.0, rows)).astype(np.int64)
    if fmt == "azure":
        ts = pd.Timestamp("2023-11-16 00:00:00") + pd.to_timedelta(t, unit="s")
        df = pd.DataFrame(
            {"TIMESTAMP": ts.strftime("%Y-%m-%d %H:%M:%S.%f") + "0", "ContextTokens": inp, "GeneratedTokens": out}
        )
    else:
        df = pd.DataFrame(
            {"timestamp_ms": np.round(t * 1000).astype(np.int64), "input_length": inp, "output_length": out}
        )
    df.to_csv(path, index=False)


def bench(rows: int, fmt: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"bench_{fmt}.csv"
        write_synthetic(path, rows, fmt)
        size = path.stat().st_size
        t0 = time.perf_counter()
        trace = load_trace_file(path)
        t1 = time.perf_counter()
        b1 = bucket_table(trace, DEFAULT_BUCKETS)
        t2 = time.perf_counter()
        b2 = bucket_table(trace, DEFAULT_BUCKETS_2D)
        t3 = time.perf_counter()
        demand = epoch_demand(trace, DEFAULT_BUCKETS)
        t4 = time.perf_counter()
    assert len(trace) == rows and b1["count"].sum() == rows and b2["count"].sum() == rows
    assert demand["count"].sum() == rows
    return {
        "rows": rows,
        "format": fmt,
        "file_bytes": size,
        "load_s": round(t1 - t0, 3),
        "bucket_1d_s": round(t2 - t1, 3),
        "bucket_2d_s": round(t3 - t2, 3),
        "epoch_demand_s": round(t4 - t3, 3),
        "load_and_bucket_s": round(t2 - t0, 3),
        "total_s": round(t4 - t0, 3),
        "python": platform.python_version(),
        "pandas": pd.__version__,
        "machine": platform.machine(),
    }


def backtest_rows() -> list[dict]:
    """Pooled backtest figures of every method on the shipped sources (the doc's table)."""
    cases: list[tuple[str, pd.DataFrame, int]] = []
    for name, path in (("Azure conv", AZURE_CONV), ("Azure code", AZURE_CODE)):
        trace = load_trace_file(path)
        cases.append((f"{name}, 8 buckets", epoch_demand(trace, DEFAULT_BUCKETS), 1))
        cases.append((f"{name}, aggregate", epoch_demand(trace, None), 1))
    for series in ("m-large", "m-mid", "m-small"):
        rates = load_rate_series(SERVEGEN, series=series)
        cases.append((f"ServeGen {series}, 600-s", series_demand(rates), 144))
    rates = load_rate_series(SERVEGEN, series="m-large")
    syn = compose_demand(rates, load_trace_file(AZURE_CONV), DEFAULT_BUCKETS, seed=0)
    cases.append(("SYNTHETIC m-large x Azure conv, 8 buckets", syn, 288))
    out = []
    for label, demand, start in cases:
        for method in METHODS:
            row = backtest(demand, method, score_from=start).set_index("bucket").loc[POOLED]
            out.append({"demand": label, "method": method, "score_from": start, **row.to_dict()})
    return out


def markdown(rows: list[dict]) -> str:
    head = "| demand | method | epochs scored | MAE req/s | MAPE % | under-forecast | shortfall req/s | over % |"
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|"]

    def f(v: float, d: int) -> str:
        return "n/a" if v != v else f"{v:.{d}f}"

    for r in rows:
        lines.append(
            f"| {r['demand']} | {r['method']} | {int(r['n_epochs'])} | {f(r['mae_rps'], 3)} | "
            f"{f(r['mape_pct'], 1)} | {f(r['under_rate'], 3)} | {f(r['shortfall_rps'], 3)} | {f(r['over_pct'], 1)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--format", choices=("azure", "mooncake"), default="azure")
    p.add_argument("--budget", type=float, default=5.0, help="seconds allowed for load + bucket")
    p.add_argument("--backtests", action="store_true", help="print the backtest table instead")
    args = p.parse_args(argv)
    if args.backtests:
        print(markdown(backtest_rows()))
        return 0
    result = bench(args.rows, args.format)
    result["budget_s"] = args.budget
    result["within_budget"] = result["load_and_bucket_s"] <= args.budget
    print(json.dumps(result, indent=2))
    return 0 if result["within_budget"] else 1


if __name__ == "__main__":
    sys.exit(main())
