"""Benchmark: wall time of the trace replay.

1. The one-hour Azure 2023 conversation trace (``instances/azure-conv.toml``, Llama-3-70B, 19,366
   requests) replayed against the allocation MILP's plan, colocated and disaggregated. Target:
   under 10 s. Also the default instance (the same trace at 10x, 193,648 requests) with its MILP plan.
2. A synthetic 24-hour trace of about 1,000,000 requests (seeded): ServeGen's daily rate shape (series ``m-large``) x
   the Azure conversation token mix (:func:`neuscale_opt.traces.synth.compose_trace`, mean rate
   10^6 / 86,400 req/s), 288 five-minute epochs, a plan sized to its own per-epoch demand.
   Target: under 120 s.

Times are wall-clock ``time.perf_counter`` around :func:`neuscale_opt.replay.replay` (plan checks,
step tables, event loop and accounting; trace loading and plan building excluded and reported
apart).

Run: ``.venv/bin/python benchmarks/bench_replay.py [--requests N] [--seed S] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import plan
from neuscale_opt.candidates import build_coefficients, instance_trace
from neuscale_opt.instance import load_instance
from neuscale_opt.replay import replay, simple_plan
from neuscale_opt.traces.buckets import DEFAULT_BUCKETS
from neuscale_opt.traces.demand import epoch_demand
from neuscale_opt.traces.loaders import load_rate_series, load_trace
from neuscale_opt.traces.shipped import SERVEGEN
from neuscale_opt.traces.synth import compose_trace

ROOT = Path(__file__).resolve().parents[1]
SERIES = "m-large"  # the ServeGen series giving the daily shape
KEYS = ("requests", "slo_attainment", "p99_ttft_s", "p99_tpot_s", "energy_j", "cost_usd", "events", "vpods_created")


def bench_milp_plan(path: str | None, serving: str, label: str) -> dict:
    """Replay the allocation MILP's plan of an instance against its own (scaled) trace."""
    inst = load_instance(path)
    coeffs = build_coefficients(inst)
    trace = instance_trace(inst)
    sol = plan(coeffs, PlanOptions.from_instance(inst, serving=serving), "milp")
    t = time.perf_counter()
    res = replay(sol.to_dict(timing=False), inst, trace, coeffs=coeffs)
    wall = time.perf_counter() - t
    return {"case": label, "replay_s": wall, **{k: res.totals[k] for k in KEYS}}


def bench_day(n_requests: int, seed: int) -> dict:
    inst = load_instance(None)
    coeffs = build_coefficients(inst)
    t = time.perf_counter()
    tokens = load_trace(inst.workload.trace, inst.base_dir)
    series = load_rate_series(SERVEGEN, series=SERIES)
    trace = compose_trace(series, tokens, seed=seed, mean_rps=n_requests / 86400.0, days=1.0)
    spec = inst.workload.buckets or DEFAULT_BUCKETS
    length = inst.epochs.length_s
    dem = epoch_demand(trace, spec, epoch_s=length, subwindow_s=inst.workload.subwindow_s, horizon_s=86400.0)
    demand = dem[["epoch", "bucket", "peak_rps"]].rename(columns={"peak_rps": "rate_rps"})
    demand["bucket"] = demand["bucket"].astype(str)
    demand["epoch"] = demand["epoch"].astype(int)
    day_coeffs = replace(coeffs, demand=demand.reset_index(drop=True))
    plan = simple_plan(day_coeffs)
    prep = time.perf_counter() - t
    t = time.perf_counter()
    res = replay(plan, inst, trace, coeffs=day_coeffs)
    wall = time.perf_counter() - t
    return {
        "case": f"synthetic 24 h (seed {seed})",
        "series": SERIES,
        "prepare_s": prep,
        "replay_s": wall,
        **{k: res.totals[k] for k in KEYS},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1_000_000, help="requests of the synthetic day")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    conv = str(ROOT / "instances" / "azure-conv.toml")
    rows = [
        bench_milp_plan(conv, "colocated", "Azure conv 1 h, MILP plan, colocated"),
        bench_milp_plan(conv, "disaggregated", "Azure conv 1 h, MILP plan, disaggregated"),
        bench_milp_plan(None, "colocated", "default (Azure conv at 10x), MILP plan"),
        bench_day(args.requests, args.seed),
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        print(r["case"])
        for k, v in r.items():
            if k != "case":
                print(f"  {k:<16} {v:.4g}" if isinstance(v, float) else f"  {k:<16} {v}")


if __name__ == "__main__":
    main()
