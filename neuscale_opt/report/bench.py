"""Benchmark table of ``neuscale-opt bench``: every method on every instance.

For each instance the coefficients are built once; each method plans on them and the independent
evaluator accounts the plan. Columns: objective value (evaluated, in the instance's objective
units), the gap of that value to the best proven lower bound among the methods that prove one
(the MILP's), the method's own status and bound, solve time, and the ratio to the MILP's value.
``unlimited`` ignores the inventory: it is accounted against unlimited inventory and has no gap
(its value is a lower reference, below the instance's bound when inventory binds).
With ``--replay`` each plan is also replayed against the instance's trace and its SLO attainment
reported.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pandas as pd

from neuscale_opt.alloc.options import METHODS as ALLOC_METHODS
from neuscale_opt.planning import HORIZON_POLICIES

#: Epoch methods (every epoch planned independently) and horizon policies (a schedule under the
#: auto-scaling rules; they need an instance with a trace and epochs).
EPOCH_METHODS: tuple[str, ...] = ALLOC_METHODS
METHODS = EPOCH_METHODS + HORIZON_POLICIES
BENCH_COLUMNS = [
    "instance",
    "method",
    "status",
    "objective",
    "objective_value",
    "bound",
    "gap_to_best_bound",
    "solve_seconds",
    "ratio_to_milp",
    "feasible",
    "slo_attainment",
]


def run_bench(
    paths: list[str | None],
    methods: tuple[str, ...],
    replay: bool = False,
    progress=None,
    notes: list[str] | None = None,
) -> pd.DataFrame:
    """One row per (instance, method). With ``replay``, a plan holding more chips of a generation
    than the fleet has (the ``unlimited`` reference, typically) is not replayed: its attainment is
    NaN and a line saying so is appended to ``notes``."""
    from neuscale_opt.alloc.options import PlanOptions
    from neuscale_opt.alloc.plan import plan
    from neuscale_opt.candidates import build_coefficients
    from neuscale_opt.horizon import plan_horizon
    from neuscale_opt.instance import load_instance
    from neuscale_opt.planning import evaluate_any

    rows: list[dict[str, Any]] = []
    for path in paths:
        inst = load_instance(path)
        coeffs = build_coefficients(inst)
        opts = PlanOptions.from_instance(inst)
        sols = {}
        for method in methods:
            t0 = time.perf_counter()
            if method in HORIZON_POLICIES:
                policy = "milp" if method == "rolling-milp" else method
                sol = plan_horizon(inst, policy, coeffs=coeffs, options=opts)
            else:
                sol = plan(coeffs, opts, method)
            wall = time.perf_counter() - t0
            # a schedule is checked with its coupling rules; the unlimited reference ignores
            # inventory and is accounted against unlimited inventory
            ev = evaluate_any(sol, coeffs, inst) if sol.has_plan else None
            sols[method] = sol
            row = {
                "instance": inst.name,
                "method": method,
                "status": sol.status,
                "objective": sol.objective,
                "objective_value": ev.objective_value if ev is not None else math.nan,
                "bound": sol.bound,
                "solve_seconds": wall,
                "feasible": bool(ev.feasible) if ev is not None else False,
                "slo_attainment": math.nan,
            }
            if replay and ev is not None:
                over = _over_fleet(sol, coeffs)
                if over:
                    if notes is not None:
                        notes.append(
                            f"{inst.name} {method}: not replayed, the plan holds more chips than the fleet ({over})"
                        )
                else:
                    row["slo_attainment"] = _replay_attainment(inst, sol, coeffs)
            rows.append(row)
            if progress is not None:
                progress.update(1)
        # the best proven lower bound on the instance's true optimum comes from the MILP (the
        # unlimited reference relaxes inventory, so its bound is a bound too)
        bounds = [s.bound for m, s in sols.items() if m in ("milp", "unlimited") and s.bound == s.bound]
        best = max(bounds) if bounds else math.nan
        mine = [r for r in rows if r["instance"] == inst.name]
        milp_val = next((r["objective_value"] for r in mine if r["method"] == "milp"), math.nan)
        for r in mine:
            v = r["objective_value"]
            gap = (v - best) / abs(v) if v == v and best == best and v else math.nan
            if r["method"] == "unlimited":
                gap = math.nan  # a relaxation of the instance: its value lies below the instance's bound
            elif abs(gap) < 1e-9:
                gap = 0.0  # solver round-off around a proven optimum
            r["gap_to_best_bound"] = gap
            r["ratio_to_milp"] = v / milp_val if v == v and milp_val == milp_val and milp_val else math.nan
    return pd.DataFrame(rows, columns=BENCH_COLUMNS)


def _over_fleet(sol, coeffs) -> str:
    """The generations of which ``sol`` holds more chips than the fleet's healthy inventory."""
    inv = coeffs.inventory()
    held = sol.totals.get("chips_by_version", {}) or {}
    return ", ".join(f"{c} {int(n)} > {int(inv.get(c, 0))}" for c, n in sorted(held.items()) if n > inv.get(c, 0))


def _replay_attainment(inst, sol, coeffs=None) -> float:
    """SLO attainment of ``sol`` replayed against the instance's trace (NaN without a trace)."""
    from neuscale_opt.replay import replay

    if getattr(inst, "workload", None) is None or inst.workload.trace is None:
        return math.nan
    return float(replay(sol.to_dict(timing=False), inst, coeffs=coeffs).totals["slo_attainment"])


def to_markdown(df: pd.DataFrame) -> str:
    from neuscale_opt.report.build import num

    head = "| " + " | ".join(BENCH_COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in BENCH_COLUMNS) + "|"
    body = ["| " + " | ".join(num(r[c]) for c in BENCH_COLUMNS) + " |" for r in df.to_dict("records")]
    return "\n".join([head, sep, *body]) + "\n"
