"""Poisson against the trace's own arrivals: does a vPod at its safe load keep the SLO target?

The safe load of a configuration (``formulations/allocation.md``, "SLO attainment and safe load",
AT0-AT3) is derived for Poisson arrivals with lengths drawn independently from the class's trace.
This benchmark replays one vPod of each configuration a scenario's plan uses in its first epoch,
at the plan's rate per vPod, twice over the first ``--horizon`` seconds of the trace: once with
Poisson arrivals (the model's assumption; lengths drawn from the class's requests), once with the
class's own arrivals of the trace, thinned at random to the same mean rate in each epoch (the
timing within the epoch and the lengths as they came; the drift between epochs, which the planner
follows epoch by epoch, taken out). It reports both attainments beside the class's index of dispersion of
counts (variance / mean of the arrivals per window; 1 for Poisson) at 1 s and 10 s. The plan is
the rolling MILP's plan of the first epoch alone (each instance's forecaster and reserve, ``--objective``, default
both, pooled groups; a pooled group's classes are replayed one at a time, each at its own row's rate per vPod).

With ``--search``, where the trace's arrivals miss the instance's SLO-attainment target at the
plan's rate, it also finds by bisection the largest share of that rate at which they keep it: how
far a safe load that knew the trace's arrivals would sit below the model's. Beside it, the model's
own answer: the row's safe load over the plan's load, with the class's rate movement (AT4 of
``formulations/allocation.md``, the class's ``rate_cv2`` as the plan read it: over its epoch)
and with Poisson arrivals alone (AT0-AT3).

Run: ``.venv/bin/python benchmarks/arrival_burstiness.py [--only LABEL,...] [--horizon S]
[--objective energy|cost|both] [--search] [--out PATH]`` (about a minute per scenario and
objective, a few more with ``--search``). Results go to ``benchmarks/arrival_burstiness_results.md``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from headline import ROOT, WINDOW, cases, forecast_of, params_of

from neuscale_opt.alloc.attainment import safe_load
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.candidates import build_coefficients, instance_trace
from neuscale_opt.horizon import instance_inventory, plan_rolling
from neuscale_opt.replay import ReplayOptions, replay
from neuscale_opt.traces.buckets import bucket_codes, bucket_names

SEED = 1
#: bisection steps of ``--search`` (the share of the plan's rate found to 1/64)
SEARCH_STEPS = 6


def dispersion(times: np.ndarray, horizon_s: float, window_s: float) -> float:
    """Index of dispersion of the counts of ``times`` in windows of ``window_s`` over the horizon."""
    counts = np.histogram(times, bins=np.arange(0.0, horizon_s + window_s, window_s))[0]
    return float(counts.var() / counts.mean()) if counts.mean() > 0 else float("nan")


def one_vpod(row: dict, rate: float, horizon_s: float, epoch_s: float) -> list[dict]:
    """Plan rows holding one vPod of allocation ``row``'s configuration (every field of its vPod
    type as planned) for its class at ``rate`` over the horizon."""
    base = {k: v for k, v in row.items() if k not in ("epoch", "rate_rps", "n_vpods", "vpod_group")}
    return [base | {"epoch": e, "rate_rps": rate, "n_vpods": 1} for e in range(int(np.ceil(horizon_s / epoch_s)))]


def thin(own: pd.DataFrame, rate: float, epoch_s: float) -> pd.DataFrame:
    """``own`` (one class's arrivals) thinned at random, epoch by epoch, to ``rate`` req/s on
    average: the drift between epochs (which the planner follows epoch by epoch) taken out, the
    movement within each epoch kept."""
    epoch_of = (own["arrival_s"].to_numpy() // epoch_s).astype(int)
    counts = np.bincount(epoch_of)
    share = np.minimum(rate * epoch_s / np.maximum(counts[epoch_of], 1), 1.0)
    return own[np.random.default_rng(SEED).random(len(own)) < share]


def run(label: str, inst1, inst, objective: str, horizon_s: float, search: bool = False) -> list[dict]:
    """The rows of scenario ``label``: planned on ``inst1`` (its first epoch), replayed on the trace
    of ``inst`` (the whole scenario)."""
    coeffs = build_coefficients(inst1)
    classes = coeffs.buckets  # as the plan read them (AT4's rate_cv2 over the planned epoch)
    opts = PlanOptions.from_instance(inst1).replace(objective=objective)
    sol = plan_rolling(coeffs, opts, params_of(inst1), forecast_of(inst1), WINDOW, instance_inventory(coeffs, []))
    trace = instance_trace(inst)
    trace = trace[trace["arrival_s"] < horizon_s].reset_index(drop=True)
    spec = inst.workload.buckets
    names = np.asarray(bucket_names(spec))[bucket_codes(trace, spec)]
    cfg = coeffs.configs.set_index("config_id")
    target = float(inst.slo.attainment)
    out = []
    rows = [a for a in sol.to_dict(timing=False)["allocations"] if a["epoch"] == 0 and a["rate_rps"] > 0]
    for rec in sorted(rows, key=lambda a: (a["vpod_group"], a["bucket"])):
        r = pd.Series(rec)
        ref = cfg.loc[f"{r.vpod_type}|{r.bucket}"]
        lam = float(r.rate_rps) / float(r.n_vpods)
        own = trace[names == r.bucket].sort_values("arrival_s", kind="mergesort")
        thinned = thin(own, lam, coeffs.epoch_s)
        rng = np.random.default_rng(SEED)
        n = int(rng.poisson(lam * horizon_s))
        pick = own[["input_tokens", "output_tokens"]].to_numpy()[rng.integers(0, len(own), n)]
        poisson = pd.DataFrame(
            {
                "arrival_s": np.sort(rng.random(n) * horizon_s),
                "input_tokens": pick[:, 0].astype(np.int64),
                "output_tokens": pick[:, 1].astype(np.int64),
            }
        )

        def attain(arrivals: pd.DataFrame, rate: float, rec=rec) -> float:
            plan = {
                "status": "feasible",
                "method": "hand",
                "objective": objective,
                "allocations": one_vpod(rec, rate, horizon_s, coeffs.epoch_s),
            }
            tr = arrivals[["arrival_s", "input_tokens", "output_tokens"]].assign(bucket=rec["bucket"])
            res = replay(plan, inst, trace=tr.reset_index(drop=True), options=ReplayOptions(surge=False), coeffs=coeffs)
            return float(res.totals["slo_attainment"])

        got = {"poisson": attain(poisson, lam), "trace": attain(thinned, lam)}
        kept = float("nan")
        if search:  # the largest rate whose thinned trace arrivals keep the target (bisection)
            kept = 1.0
            if got["trace"] < target:
                lo, hi = 0.0, 1.0
                for _ in range(SEARCH_STEPS):
                    mid = 0.5 * (lo + hi)
                    if attain(thin(own, mid * lam, coeffs.epoch_s), mid * lam) >= target:
                        lo = mid
                    else:
                        hi = mid
                kept = lo
        # the model's share of the plan's rate: the safe load over the plan's load, with the class's
        # movement (AT4) and without it (AT0-AT3, Poisson)
        row_cfg = cfg.loc[[f"{r.vpod_type}|{r.bucket}"]].reset_index()
        mu = float(ref["max_rate_rps"])
        model = min(1.0, float(safe_load(row_cfg, classes, target)[0]) * mu / lam)
        steady = classes.drop(columns=["rate_cv2"], errors="ignore")
        model_poisson = min(1.0, float(safe_load(row_cfg, steady, target)[0]) * mu / lam)
        c2 = float(classes.set_index("bucket")["rate_cv2"].get(r.bucket, 0.0)) if "rate_cv2" in classes else 0.0
        t = thinned["arrival_s"].to_numpy()
        out.append(
            {
                "scenario": label,
                "vpod_type": str(r.vpod_type),
                "class": str(r.bucket),
                "rate_per_vpod": lam,
                "load": lam / float(ref["max_rate_rps"]),
                "idc_1s": dispersion(t, horizon_s, 1.0),
                "idc_10s": dispersion(t, horizon_s, 10.0),
                "attainment_poisson": got["poisson"],
                "attainment_trace": got["trace"],
                "kept_share": kept,
                "rate_cv2": c2,
                "model_share": model,
                "model_share_poisson": model_poisson,
            }
        )
        print(
            f"  {r.vpod_type} {r.bucket}: {lam:.3g} req/s, Poisson {got['poisson']:.4f}, trace {got['trace']:.4f}",
            flush=True,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="comma-separated scenario labels (default: the shipped four)")
    ap.add_argument("--horizon", type=float, default=1800.0, help="seconds of the trace replayed (default 1800)")
    ap.add_argument("--objective", default="both", choices=("energy", "cost", "both"))
    ap.add_argument(
        "--search",
        action="store_true",
        help="also find, where the trace's arrivals miss the target, the largest share of the plan's rate "
        "they keep it at (bisection, 6 replays per row)",
    )
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "arrival_burstiness_results.md"))
    args = ap.parse_args(argv)
    only = {s.strip() for s in args.only.split(",")} if args.only else None
    start = time.perf_counter()
    rows: list[dict] = []
    for first, case in zip(cases(True, 1), cases(True, None), strict=True):
        if only is not None and case.label not in only:
            continue
        for objective in ("energy", "cost") if args.objective == "both" else (args.objective,):
            print(case.label, objective, flush=True)
            rows.extend(
                {**r, "objective": objective}
                for r in run(case.label, first.instance, case.instance, objective, args.horizon, args.search)
            )
    lines = [
        "# Poisson against the trace's own arrivals\n",
        "Generated by `benchmarks/arrival_burstiness.py` (see its docstring): one vPod of each configuration "
        "the rolling MILP's plan (energy, cost objective) uses in its first epoch, at the plan's rate per vPod, "
        "over the "
        f"first {args.horizon:.0f} s of the trace, without the surge guard. Load = rate per vPod / full rate "
        "(`max_rate_rps`); IDC = variance / mean of the thinned arrivals' counts per window (Poisson: 1). "
        "Share kept (`--search`): the largest share of the plan's rate at which the thinned trace arrivals keep "
        "the instance's SLO-attainment target (1 where the plan's rate does; bisection to 1/64; `-`: not searched). "
        "c2: the class's rate movement inside the sizing window beyond Poisson (D12, over the planned epoch; 0 "
        "where the scenario sizes for each class's peak). Model's share: the row's safe load (AT0-AT4, resp. AT0-AT3 "
        "alone) over the plan's load, at most 1: what the model predicts for the last column. "
        f"Run time {time.perf_counter() - start:.0f} s.\n",
        "| scenario | plan | vPod type | class | req/s per vPod | load | IDC 1 s | IDC 10 s | attainment, Poisson | "
        "attainment, the trace's arrivals | share of the rate kept at the target | c2 (D12) | "
        "model's share, AT4 | model's share, Poisson |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | {r['objective']} | {r['vpod_type']} | {r['class']} | "
            f"{r['rate_per_vpod']:.3g} | {r['load']:.2f} | "
            f"{r['idc_1s']:.2f} | {r['idc_10s']:.1f} | {r['attainment_poisson']:.4f} | {r['attainment_trace']:.4f} | "
            + ("-" if math.isnan(r["kept_share"]) else f"{r['kept_share']:.2f}")
            + f" | {r['rate_cv2']:.4f} | {r['model_share']:.2f} | {r['model_share_poisson']:.2f} |"
        )
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
