"""Where the horizon MILP's gain over NeuScale's auto-scaler goes: the forecast, the scaling rules, the SLO.

The headline (``benchmarks/headline.py``) plans the MILP on each shipped instance's forecaster
under NeuScale's auto-scaling rules as coupling constraints (``formulations/horizon.md``): the
quantile forecast (FC4 of ``formulations/forecast.md``) with room kept in the fleet for the last-peak
forecast (FC1, NeuScale's own rule: the peak of the last 30 minutes; the guard reserve,
``formulations/horizon.md``, "Guard reserve"), on the conversation-trace instances, which size for
the pooled burst (``workload.provision_for = "burst"``), and on the code trace, which sizes for
per-class peaks. Every MILP plan below keeps that reserve (the oracle's none: it knows the demand). This benchmark
splits the distance between that plan and the plan that knows each epoch's demand and obeys no
rule, on the headline's scenarios and on scenarios outside it (other rates, models and the code
trace at other scales). Every plan, NeuScale's auto-scaler's included, sizes as its instance does.
Per scenario and objective, every plan is replayed (``neuscale_opt.replay``, as in the headline)
and compared with NeuScale's auto-scaler:

* ``milp last-peak`` - the MILP on NeuScale's own forecast (rolling 3-epoch windows, rules as coupling;
  the reserve is then empty);
* ``milp ewma`` - the same on the EWMA forecast (FC2: unbiased, so below the actual peak in about
  half of the epochs);
* ``milp quantile`` - the same on the quantile forecast (FC4, q = 0.9 over 30 minutes: the
  shipped instances' forecaster);
* ``milp oracle`` - the same on the actual demand (what a perfect forecast gives under the rules);
* ``no rules last-peak``, ``no rules oracle`` - the same without the coupling rules
  (``[horizon] coupling = false``: each epoch planned alone on its forecast, resp. its actual
  demand; what the rules cost on top of the forecast). Where the instance pre-warms, such a plan is
  made 30 s before its epoch from the same history as the others (``HorizonParams.lead_s``) and its
  new vPods are pre-warmed in the replay as theirs are; where it does not, the replay loads the
  weights of every created vPod for the first 30 s of its epoch, which a plan without rules does not
  see.

Columns: goodput tokens/J of the energy plans and goodput tokens/$ of the cost plans, each as a
ratio to NeuScale's auto-scaler planned with the same objective, and the replayed SLO attainment
(the instance's target is 0.99); a ratio is marked ``SLO`` where the plan's attainment is more
than 0.5 point below the auto-scaler's (the headline's slack). Results go to
``benchmarks/forecast_gap_results.md``.

Run: ``.venv/bin/python benchmarks/forecast_gap.py [--only NAME,...] [--out PATH]`` (about 15 min
on two shared cores).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headline import EXTRA, ROOT, SLO_SLACK, WINDOW, cases, extra_instance, params_of

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.candidates import build_coefficients, instance_trace
from neuscale_opt.horizon import HorizonParams, instance_inventory, neuscale_autoscaler, plan_rolling
from neuscale_opt.instance import Instance
from neuscale_opt.replay import replay

METHODS = (
    "neuscale-autoscaler",
    "milp last-peak",
    "milp ewma",
    "milp quantile",
    "milp oracle",
    "no rules last-peak",
    "no rules oracle",
)
METRIC = {"energy": "goodput_tokens_per_joule", "cost": "goodput_tokens_per_usd"}


def scenarios() -> dict[str, Callable[[], Instance]]:
    """The headline's four scenarios, then the seven outside it (``headline.EXTRA``: same fleet, SLO
    and epochs)."""
    out: dict[str, Callable[[], Instance]] = {c.label: (lambda c=c: c.instance) for c in cases(True, None)}
    for label in EXTRA:
        out[label] = lambda n=label: extra_instance(n)
    return out


def _plan(method: str, coeffs: Any, o: PlanOptions, params: HorizonParams, inv: Any) -> Any:
    if method == "neuscale-autoscaler":
        return neuscale_autoscaler(coeffs, o, params, inv)
    rules, fc = method.rsplit(" ", 1)
    p = params if rules == "milp" else params.replace(coupling=False)
    return plan_rolling(coeffs, o, p, fc, WINDOW, inv, method="oracle" if fc == "oracle" else "milp")


def run(label: str, inst: Instance) -> list[dict[str, Any]]:
    coeffs = build_coefficients(inst)
    trace = instance_trace(inst)
    opts = PlanOptions.from_instance(inst)
    params = params_of(inst)
    inv = instance_inventory(coeffs, inst.inventory_events)
    rows = []
    for objective in METRIC:
        o = opts.replace(objective=objective)
        for method in METHODS:
            t0 = time.perf_counter()
            sol = _plan(method, coeffs, o, params, inv)
            t1 = time.perf_counter()
            tot = replay(sol.to_dict(timing=False), inst, trace, coeffs=coeffs).totals
            rows.append(
                {
                    "case": label,
                    "objective": objective,
                    "method": method,
                    "metric": float(tot[METRIC[objective]]),
                    "slo": float(tot["slo_attainment"]),
                    "energy_mj": float(tot["energy_j"]) / 1e6,
                    "cost_usd": float(tot["cost_usd"]),
                    "planned_unserved_rps": float(sol.totals.get("unserved_rps", 0.0)),
                    "plan_s": t1 - t0,
                }
            )
            print(f"  {label} {objective} {method}: {rows[-1]['metric']:.4g}, SLO {rows[-1]['slo']:.4f}", flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| scenario | objective | NeuScale: metric, SLO | "
        + " | ".join(f"{m}: ratio, SLO" for m in METHODS[1:])
        + " |\n|---|---|---:|"
        + "---:|" * (len(METHODS) - 1)
        + "\n"
    )
    body = []
    keys = list(dict.fromkeys((r["case"], r["objective"]) for r in rows))
    for case, objective in keys:
        by = {r["method"]: r for r in rows if r["case"] == case and r["objective"] == objective}
        base = by["neuscale-autoscaler"]
        unit = "tokens/J" if objective == "energy" else "tokens/$"
        cells = [case, objective, f"{base['metric']:.4g} {unit}, {base['slo']:.4f}"]
        for m in METHODS[1:]:
            r = by[m]
            low = r["slo"] < base["slo"] - SLO_SLACK
            cells.append(f"{r['metric'] / base['metric']:.2f}x, {r['slo']:.4f}{' SLO' if low else ''}")
        body.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(body) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="comma-separated scenario labels (default: all)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "forecast_gap_results.md"))
    args = ap.parse_args(argv)
    todo = scenarios()
    only = [s.strip() for s in args.only.split(",")] if args.only else list(todo)
    unknown = [s for s in only if s not in todo]
    if unknown:
        ap.error(f"--only: no scenario {', '.join(map(repr, unknown))} (scenarios: {', '.join(todo)})")
    start = time.perf_counter()
    load0 = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    for label in only:
        print(label, flush=True)
        rows += run(label, todo[label]())
    total = time.perf_counter() - start
    text = (
        "# Where the MILP's gain goes: forecast, scaling rules, SLO\n\n"
        "Generated by `benchmarks/forecast_gap.py` (see its docstring). Ratio = the plan's replayed goodput "
        "tokens/J (energy plans) or tokens/$ (cost plans) over NeuScale's auto-scaler's with the same objective; "
        "SLO = replayed attainment; `SLO` marks an attainment more than 0.5 point below the auto-scaler's. "
        f"Run time {total:.0f} s on 2 shared cores (1-min load {load0:.2f} -> {os.getloadavg()[0]:.2f}).\n\n"
        + table(rows)
    )
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
