"""Planned against replayed: does the evaluator's energy and money of a plan match its replay?

For every shipped scenario of the headline experiment (``benchmarks/headline.py``: azure-conv x1,
the default azure-conv x10, azure-code x5, DeepSeek-V3 on azure-conv x10; the scenarios are built
by ``headline.cases``) and a set of alternative plans per scenario:

* the rolling horizon MILP (window 6, last-peak forecast) with the ``energy`` and the ``cost``
  objective, each ``dedicated`` and ``pooled``, and with a window of 3 epochs;
* the oracle (rolling MILP on the actual demand), ``energy`` and ``cost``;
* the greedy heuristic (epoch by epoch on the provisioned demand), ``energy`` and ``cost``;
* NeuScale's auto-scaler and the homogeneous auto-scaler on every generation (own inventory),

each plan's planned energy (J at the facility) and money (USD) from the independent evaluator
(``Solution.totals``: ``alloc.evaluate`` / ``horizon.evaluate_schedule``, which account energy with
``neuscale_opt.energy``) are set against the replay's (``neuscale_opt.replay``, 30-s creation delay,
warm start). Targets: each within 10 % (planned / replayed - 1), and across the plans of a scenario
a Spearman rank correlation >= 0.95 between planned and replayed energy and between planned and
replayed money. The energy parts (static, weight streaming, marginal; before PUE) are reported too,
so a miss can be traced to its part. Results go to ``benchmarks/consistency_results.md``.

**Plans that leave demand unserved.** The evaluator accounts the traffic a plan serves; the replay
queues every arrival of a class that has vPods and serves it late, holding vPods past the horizon
to drain the backlog. Such a plan and its replay do different amounts of work, so their totals are
not comparable. A plan whose evaluator reports unserved demand is therefore judged per token
served: planned energy (money) / the evaluator's served tokens (input + output, ``totals["tokens"]``)
against replayed energy (money) / the tokens (input + output) the replay serves; the 10 % target
and the Spearman ranks use these figures for such plans and the totals for every other plan. The
totals are shown for every plan either way. On DeepSeek-V3 x10 this rule does not bring the plans
together (the replay serves late part of what the plan leaves unserved, within the same vPod-hours;
``consistency_results.md``); the comparison that would is a replay cut at the horizon.

Run: ``.venv/bin/python benchmarks/consistency.py [--quick] [--epochs N] [--no-pooled] [--only LABEL,...]
[--out PATH]`` (about 30 min on two shared cores; the file is rewritten after every scenario, and
the rows are kept in a ``.json`` beside it). ``--quick``: 2 epochs, no pooled-vs-dedicated pair.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from headline import ROOT, WINDOW, Case, cases
from scipy.stats import spearmanr

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import greedy
from neuscale_opt.candidates import build_coefficients, instance_trace
from neuscale_opt.horizon import HorizonParams, homogeneous_each, instance_inventory, neuscale_autoscaler, plan_rolling
from neuscale_opt.replay import replay

TARGET_REL = 0.10
TARGET_RHO = 0.95
#: a plan leaving more than this demand unserved (req/s, summed over its epochs) is judged per token
UNSERVED_RPS = 1e-6
FC = "last-peak"


@dataclass(frozen=True)
class Row:
    case: str
    method: str
    plan_s: float
    planned: dict[str, float]
    replayed: dict[str, float]


PARTS = ("energy_j", "cost_usd", "energy_static_j", "energy_busy_j", "energy_dynamic_j")


def plans(case: Case, pooled: bool) -> tuple[Any, Any, list[tuple[str, Callable[[], Any]]]]:
    """(coefficients, trace, [(method label, planner)]) of one scenario."""
    inst = case.instance
    coeffs = build_coefficients(inst)
    trace = instance_trace(inst)
    opts = PlanOptions.from_instance(inst)
    params = HorizonParams.from_instance(inst)
    inv = instance_inventory(coeffs, inst.inventory_events)
    out: list[tuple[str, Callable[[], Any]]] = []
    variants = ("dedicated", "pooled") if pooled else ("dedicated",)
    for objective in ("energy", "cost"):
        o = opts.replace(objective=objective)
        for variant in variants:
            ov = o.replace(variant=variant)
            out.append((f"milp {objective} {variant}", lambda ov=ov: plan_rolling(coeffs, ov, params, FC, WINDOW, inv)))
        out.append((f"milp {objective} window 3", lambda o=o: plan_rolling(coeffs, o, params, FC, 3, inv)))
        out.append(
            (f"oracle {objective}", lambda o=o: plan_rolling(coeffs, o, params, "oracle", WINDOW, inv, method="oracle"))
        )
        out.append((f"greedy {objective}", lambda o=o: greedy(coeffs, o)))
    out.append(("neuscale-autoscaler", lambda: neuscale_autoscaler(coeffs, opts, params, inv)))
    each = homogeneous_each(coeffs, opts, params, inv)
    for chip, sol in each.items():
        out.append((f"homogeneous-autoscaler {chip}", lambda s=sol: s))
    return coeffs, trace, out


def run_case(case: Case, pooled: bool) -> list[Row]:
    coeffs, trace, todo = plans(case, pooled)
    rows = []
    for method, fn in todo:
        t0 = time.perf_counter()
        sol = fn()
        t1 = time.perf_counter()
        # a plan the evaluator finds infeasible only because it leaves demand unserved is compared
        # too (per token, see the module docstring); one without any allocation is not a plan
        if sol.allocations.empty:
            print(f"  {method}: no plan ({sol.status})", flush=True)
            continue
        res = replay(sol.to_dict(timing=False), case.instance, trace, coeffs=coeffs)
        planned = {k: float(sol.totals.get(k, math.nan)) for k in PARTS}
        replayed = {k: float(res.totals[k]) for k in PARTS}
        planned["slo_attainment"] = math.nan
        replayed["slo_attainment"] = float(res.totals["slo_attainment"])
        planned["unserved_rps"] = float(sol.totals.get("unserved_rps", 0.0))
        planned["tokens"] = float(sol.totals.get("tokens", math.nan))
        replayed["unserved_rps"] = math.nan
        replayed["tokens"] = float(res.totals["tokens_in"] + res.totals["tokens_out"])
        rows.append(Row(case.label, method, t1 - t0, planned, replayed))
        print(
            f"  {method}: energy {planned['energy_j']:.4g} / {replayed['energy_j']:.4g} J, "
            f"cost {planned['cost_usd']:.4g} / {replayed['cost_usd']:.4g} USD ({t1 - t0:.1f} s)",
            flush=True,
        )
    return rows


def _rel(p: float, r: float) -> float:
    return p / r - 1.0 if r and math.isfinite(p) and math.isfinite(r) else math.nan


def _pct(x: float) -> str:
    return f"{x:+.1%}" if math.isfinite(x) else "n/a"


def _num(x: float, f: str = ".3g") -> str:
    return format(x, f) if math.isfinite(x) else "n/a"


def _rho(a: list[float], b: list[float]) -> float:
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return math.nan
    return float(spearmanr(a, b).statistic)


def short(r: Row) -> bool:
    """The plan leaves demand unserved (more than :data:`UNSERVED_RPS` req/s summed over its
    epochs): then it is compared with its replay per token (module docstring)."""
    return r.planned["unserved_rps"] > UNSERVED_RPS


def compared(r: Row, key: str) -> tuple[float, float]:
    """(planned, replayed) figure of ``key`` the targets judge: the totals, or per token served
    (input + output) for a plan that leaves demand unserved."""
    p, q = r.planned[key], r.replayed[key]
    if short(r):
        return p / r.planned["tokens"], q / r.replayed["tokens"]
    return p, q


def table(rows: list[Row]) -> tuple[str, list[dict[str, Any]]]:
    lines: list[str] = []
    summary: list[dict[str, Any]] = []
    for label in dict.fromkeys(r.case for r in rows):
        rs = [r for r in rows if r.case == label]
        lines.append(f"\n### {label}\n")
        lines.append(
            "| method | planned energy (MJ) | replayed (MJ) | energy error | planned cost (USD) | replayed (USD) | "
            "cost error | static error | busy: planned / replayed (MJ) | dynamic: planned / replayed (MJ) | "
            "replayed SLO | plan s |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rs:
            p, q = r.planned, r.replayed
            lines.append(
                f"| {r.method} | {p['energy_j'] / 1e6:.4g} | {q['energy_j'] / 1e6:.4g} | "
                f"{_pct(_rel(p['energy_j'], q['energy_j']))} | {p['cost_usd']:.4g} | {q['cost_usd']:.4g} | "
                f"{_pct(_rel(p['cost_usd'], q['cost_usd']))} | "
                f"{_pct(_rel(p['energy_static_j'], q['energy_static_j']))} | "
                f"{_num(p['energy_busy_j'] / 1e6)} / {_num(q['energy_busy_j'] / 1e6)} | "
                f"{_num(p['energy_dynamic_j'] / 1e6)} / {_num(q['energy_dynamic_j'] / 1e6)} | "
                f"{_num(q['slo_attainment'], '.3f')} | {r.plan_s:.1f} |"
            )
        pe = [compared(r, "energy_j") for r in rs]
        pc = [compared(r, "cost_usd") for r in rs]
        e_err = [abs(_rel(a, b)) for a, b in pe]
        c_err = [abs(_rel(a, b)) for a, b in pc]
        rho_e = _rho([a for a, _ in pe], [b for _, b in pe])
        rho_c = _rho([a for a, _ in pc], [b for _, b in pc])
        n_short = sum(1 for r in rs if short(r))
        if n_short:
            lines.append(
                f"\n{n_short} of {len(rs)} plans leave demand unserved (planned unserved > {UNSERVED_RPS:g} req/s); "
                "they are judged per token served:\n"
            )
            lines.append(
                "| method | planned unserved req/s | planned / replayed tokens (M) | planned / replayed mJ per token "
                "| energy error per token | planned / replayed micro-USD per token | cost error per token |"
            )
            lines.append("|---|---:|---:|---:|---:|---:|---:|")
            for r in rs:
                if not short(r):
                    continue
                (ea, eb), (ca, cb) = compared(r, "energy_j"), compared(r, "cost_usd")
                lines.append(
                    f"| {r.method} | {r.planned['unserved_rps']:.3g} | {r.planned['tokens'] / 1e6:.4g} / "
                    f"{r.replayed['tokens'] / 1e6:.4g} | {ea * 1e3:.4g} / {eb * 1e3:.4g} | {_pct(_rel(ea, eb))} | "
                    f"{ca * 1e6:.4g} / {cb * 1e6:.4g} | {_pct(_rel(ca, cb))} |"
                )
        s = {
            "case": label,
            "plans": len(rs),
            "max_energy_error": float(np.nanmax(e_err)),
            "max_cost_error": float(np.nanmax(c_err)),
            "within_energy": sum(1 for e in e_err if e <= TARGET_REL),
            "within_cost": sum(1 for e in c_err if e <= TARGET_REL),
            "spearman_energy": rho_e,
            "spearman_cost": rho_c,
        }
        summary.append(s)
        lines.append(
            f"\n{len(rs)} plans. Energy within 10 %: {s['within_energy']}/{len(rs)} (largest error "
            f"{s['max_energy_error']:.1%}); cost within 10 %: {s['within_cost']}/{len(rs)} (largest "
            f"{s['max_cost_error']:.1%}). Spearman planned vs replayed: energy {rho_e:.3f}, cost {rho_c:.3f} "
            f"(target {TARGET_RHO})."
        )
    head = [
        "\n### Summary\n",
        "| scenario | plans | energy within 10 % | largest energy error | cost within 10 % | largest cost error "
        "| Spearman energy | Spearman cost |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        head.append(
            f"| {s['case']} | {s['plans']} | {s['within_energy']}/{s['plans']} | {s['max_energy_error']:.1%} | "
            f"{s['within_cost']}/{s['plans']} | {s['max_cost_error']:.1%} | {s['spearman_energy']:.3f} | "
            f"{s['spearman_cost']:.3f} |"
        )
    return "\n".join(head + lines) + "\n", summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=None, help="plan only the first N epochs")
    ap.add_argument("--no-pooled", action="store_true", help="skip the pooled MILP plans (the slow ones)")
    ap.add_argument("--only", default=None, help="comma-separated scenario labels to run (default: all)")
    ap.add_argument("--quick", action="store_true", help="2 epochs, no pooled pair (a smoke run)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "consistency_results.md"))
    args = ap.parse_args(argv)
    if args.quick:
        args.epochs = args.epochs or 2
        args.no_pooled = True
    start = time.perf_counter()
    rows: list[Row] = []
    only = {s.strip() for s in args.only.split(",")} if args.only else None
    for case in cases(True, args.epochs):
        if only is not None and case.label not in only:
            continue
        t0 = time.perf_counter()
        print(case.label, flush=True)
        rows.extend(run_case(case, not args.no_pooled))
        print(f"{case.label}: {time.perf_counter() - t0:.1f} s", flush=True)
        write(rows, args.out, time.perf_counter() - start)  # after every scenario: partial runs keep theirs
    body = write(rows, args.out, time.perf_counter() - start)
    print(body)
    print(f"written {args.out} in {time.perf_counter() - start:.1f} s")
    return 0


def write(rows: list[Row], out: str, total: float) -> str:
    """Write the results file of ``rows``; returns the tables."""
    body, _ = table(rows)
    Path(out).with_suffix(".json").write_text(
        json.dumps([r.__dict__ for r in rows], indent=1, sort_keys=True, default=float) + "\n", encoding="utf-8"
    )
    header = (
        "# Planned against replayed energy and money\n\n"
        "Generated by `benchmarks/consistency.py` (see its docstring for the plans). Planned = the "
        "independent evaluator's totals of the plan (`Solution.totals`, energy model of "
        '`formulations/allocation.md`, "Load-dependent energy"); replayed = `neuscale_opt.replay` '
        "(30-s creation delay, warm start). Errors are planned / replayed - 1; energy at the facility "
        "(PUE applied), its parts (static, busy = weight streaming, dynamic = busy + marginal) before PUE. "
        f"Targets: |error| <= {TARGET_REL:.0%}, Spearman >= {TARGET_RHO}. Total run time {total:.0f} s.\n"
    )
    Path(out).write_text(header + body, encoding="utf-8")
    return body


if __name__ == "__main__":
    raise SystemExit(main())
