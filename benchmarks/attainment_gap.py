"""Planned against replayed SLO attainment: how much room does the safe-load model keep in a whole plan?

``benchmarks/consistency.py`` checks a plan's energy and money against its replay; this benchmark
checks its SLO attainment. Each plan is sized so that every configuration's vPods keep the
instance's target ``slo.attainment`` (``formulations/allocation.md``, AT0-AT4: one vPod, at the
demand of the window the plan provisions for). For each shipped scenario of the headline
(``headline.cases``; ``--extra``: the scenarios of ``headline.EXTRA``), the rolling MILP (each
instance's forecaster and guard reserve, window 3) and the oracle (the same on the actual demand)
are planned with the instance's target and with lower ones (``--targets``, default 0.99, 0.97, 0.95,
0.90), then replayed (30-s creation delay, warm start, the surge guard on, as in the headline).
Reported per plan: the target it was sized for, the replayed attainment over the horizon and in the
worst 60-s window (requests by arrival), the replayed energy, money and goodput per J and per USD,
and the latter against the same method's plan at the first target.

A replayed attainment far above the target at which the plan was sized is capacity the model holds
that the replay does not need: the single-vPod queueing model of AT1-AT2 (a prompt waits for a slot
or a prefill on its own vPod) against the replay's router, which sends each arrival to the vPod of
its group with the fewest prompts waiting, so that a group of n vPods queues like one pool.

Run: ``.venv/bin/python benchmarks/attainment_gap.py [--only LABEL,...] [--extra] [--objective
energy|cost] [--targets 0.99,0.95] [--out PATH]`` (about a minute per scenario and target on two
cores). Results go to ``benchmarks/attainment_gap_results.md``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from headline import EXTRA, ROOT, WINDOW, cases, extra_instance, forecast_of, params_of, variant

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.candidates import build_coefficients, instance_trace
from neuscale_opt.horizon import instance_inventory, plan_rolling
from neuscale_opt.instance import Instance
from neuscale_opt.replay import replay

#: the window (s) of the worst-window attainment: the surge guard's (``ReplayOptions.surge_window_s``)
WORST_WINDOW_S = 60.0


def worst_window(arrival_s: np.ndarray, met: np.ndarray, window_s: float) -> float:
    """The lowest share of requests that met their SLO among those arriving in one window of
    ``window_s`` (windows tiled from 0; empty windows left out)."""
    k = np.floor(arrival_s / window_s).astype(np.int64)
    n = np.bincount(k)
    ok = np.bincount(k, weights=met.astype(np.float64), minlength=len(n))
    has = n > 0
    return float((ok[has] / n[has]).min()) if has.any() else float("nan")


def run(label: str, inst: Instance, objective: str, targets: list[float]) -> list[dict]:
    rows = []
    trace = instance_trace(inst)
    for method in ("milp", "oracle"):
        first: dict | None = None
        for target in targets:
            sized = variant(inst, slo=inst.slo.model_copy(update={"attainment": target}))
            coeffs = build_coefficients(sized)
            params = params_of(sized)
            inv = instance_inventory(coeffs, sized.inventory_events)
            opts = PlanOptions.from_instance(sized).replace(objective=objective)
            fc = forecast_of(sized) if method == "milp" else "oracle"
            t0 = time.perf_counter()
            sol = plan_rolling(coeffs, opts, params, fc, WINDOW, inv, method=method)
            res = replay(sol.to_dict(timing=False), sized, trace, coeffs=coeffs)
            t = res.totals
            rq = res.requests
            row = {
                "scenario": label,
                "method": method,
                "target": target,
                "slo": float(t["slo_attainment"]),
                "worst": worst_window(rq["arrival_s"].to_numpy(), rq["slo_met"].to_numpy(bool), WORST_WINDOW_S),
                "energy_mj": float(t["energy_j"]) / 1e6,
                "cost_usd": float(t["cost_usd"]),
                "gp_j": float(t["goodput_tokens_per_joule"]),
                "gp_usd": float(t["goodput_tokens_per_usd"]),
                "surge_chip_h": float(t.get("surge_chip_hours", 0.0)),
                "seconds": time.perf_counter() - t0,
            }
            first = first or row
            key = "gp_j" if objective == "energy" else "gp_usd"
            row["gain"] = row[key] / first[key] if first[key] > 0 else float("nan")
            rows.append(row)
            print(
                f"  {method} target {target}: SLO {row['slo']:.4f} (worst {WORST_WINDOW_S:.0f} s {row['worst']:.4f}), "
                f"{row['cost_usd']:.1f} USD, {row['energy_mj']:.2f} MJ, x{row['gain']:.3f} ({row['seconds']:.0f} s)",
                flush=True,
            )
    return rows


def write(rows: list[dict], out: str, objective: str, total: float) -> None:
    unit = "goodput tokens/J" if objective == "energy" else "goodput tokens/$"
    lines = [
        "# Planned against replayed SLO attainment\n",
        f"Generated by `benchmarks/attainment_gap.py` (see its docstring), objective `{objective}`. Each plan is "
        "sized for the SLO-attainment target in the *target* column and replayed with the surge guard; *worst "
        f"{WORST_WINDOW_S:.0f} s*: the lowest attainment of the requests arriving in one {WORST_WINDOW_S:.0f}-s "
        f"window; *gain*: {unit} over the same method's plan at the first target. Targets "
        f"{', '.join(f'{t:g}' for t in dict.fromkeys(r['target'] for r in rows))}. Total run time {total:.0f} s.\n",
        "| scenario | method | target | replayed SLO | worst 60 s | energy (MJ) | cost (USD) | goodput tokens/J "
        "| goodput tokens/$ | surge chip-h | gain |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | {r['method']} | {r['target']:.2f} | {r['slo']:.4f} | {r['worst']:.4f} | "
            f"{r['energy_mj']:.2f} | {r['cost_usd']:.1f} | {r['gp_j']:.4g} | {r['gp_usd']:.4g} | "
            f"{r['surge_chip_h']:.2f} | {r['gain']:.3f}x |"
        )
    Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="comma-separated scenario labels (default: all)")
    ap.add_argument("--extra", action="store_true", help="the scenarios of headline.EXTRA instead of the shipped ones")
    ap.add_argument("--objective", choices=("energy", "cost"), default="cost")
    ap.add_argument("--targets", default="0.99,0.97,0.95,0.90", help="comma-separated SLO-attainment targets")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "attainment_gap_results.md"))
    args = ap.parse_args(argv)
    targets = [float(x) for x in args.targets.split(",")]
    only = {s.strip() for s in args.only.split(",")} if args.only else None
    if args.extra:
        scen = [(lb, extra_instance(lb)) for lb in EXTRA]
    else:
        scen = [(c.label, c.instance) for c in cases(True, None)]
    start = time.perf_counter()
    rows: list[dict] = []
    for label, inst in scen:
        if only is not None and label not in only:
            continue
        print(label, flush=True)
        rows += run(label, inst, args.objective, targets)
        write(rows, args.out, args.objective, time.perf_counter() - start)
    print(f"written {args.out} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
