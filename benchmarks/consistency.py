"""Planned against replayed: does the evaluator's energy and money of a plan match its replay?

For every shipped scenario of the headline experiment (``benchmarks/headline.py``: azure-conv x1,
the default azure-conv x10, azure-code x5, DeepSeek-V3 on azure-conv x10; the scenarios are built
by ``headline.cases``) and a set of alternative plans per scenario:

* the rolling horizon MILP (window 3, the default; each instance's forecaster,
  ``headline.forecast_of``) with the ``energy`` and the ``cost`` objective, each ``dedicated`` and
  ``pooled``, and with a window of 6 epochs;
* the oracle (rolling MILP on the actual demand), ``energy`` and ``cost``;
* the greedy heuristic (epoch by epoch on the provisioned demand), ``energy`` and ``cost``, and the
  epoch MILP on the same terms (``milp <objective> independent``, ``alloc.plan.solve_milp``): each
  epoch planned on its own demand (hindsight, as the oracle) without the scaling rules, so neither is
  a plan the rolling MILP could make; the two are set side by side per scenario (*same terms*);
* NeuScale's auto-scaler and the homogeneous auto-scaler on every generation (own inventory),

each plan's planned energy (J at the facility) and money (USD) from the independent evaluator
(``Solution.totals``: ``alloc.evaluate`` / ``horizon.evaluate_schedule``, which account energy with
``neuscale_opt.energy``) are set against the replay's (``neuscale_opt.replay``, 30-s creation delay,
warm start, each class split over its groups as the plan says: ``ReplayOptions.routing``; the
run-time surge guard on, as in every replay). A plan runs with the guard, so its planned totals are
its own vPods' (``energy_j``, ``cost_usd``) plus the guard's vPods the evaluator expects on the
demand that came (``guard_energy_j``, ``guard_cost_usd``: ``formulations/horizon.md``, "The guard,
as run", G1-G4; 0 for a plan sized on that demand); each plan is also replayed without the guard,
its own vPods alone, against its own planned totals alone (the "guard off" columns), to tell the
model's part of an error from the guard estimate's. Targets:
each within 10 % (planned / replayed - 1), and across the plans of a scenario a Spearman rank
correlation >= 0.95 between planned and replayed energy and between planned and replayed money
(values rounded to 9 significant digits first, so that equal plans tie on both sides). Beside
Spearman, the *separated pairs*: of the pairs of plans whose planned values differ by more than twice
the scenario's largest error (those the model can order at its accuracy), how many the replay
orders the same way; where most plans tie within the error, Spearman ranks noise. The energy
parts (static, weight streaming, marginal; before PUE) are reported too, so a miss can be traced to
its part. Results go to ``benchmarks/consistency_results.md``.

**Plans that leave demand unserved.** The evaluator accounts the traffic a plan serves: of each
class's arrivals in an epoch the share ``r / (r + s)`` its rows serve (``s`` its unserved rate);
the unserved rest costs only the penalty. The replay runs every plan the same way,
``ReplayOptions(admission="plan")``: that share of the arrivals of each (epoch, class) is admitted
(evenly spread) and the rest rejected at arrival (``formulations/allocation.md``, "Unserved
demand"; ``neuscale_opt/replay/README.md`` section 3), so both sides do the same work and every
plan is judged on its totals. A replay that admits every arrival (the replay's default, used by
the headline benchmark) serves the unserved share late, in later epochs or past the horizon while
the vPods drain, at energy and chip-hours the plan does not account; for the plans that leave
demand unserved that replay's totals are shown too (``all admitted``), with the tokens each side
serves and the chip-hours held past the horizon, to show the size of the difference.

Run: ``.venv/bin/python benchmarks/consistency.py [--quick] [--epochs N] [--no-pooled] [--only
LABEL,...] [--extra] [--out PATH]`` (``--extra``: the seven scenarios outside the shipped ones,
``headline.EXTRA``, into ``consistency_extra_results.md``) (every epoch: 15-25 min per scenario on
two cores shared with other work, load 4-8; the scenarios can run side by side with ``--only`` and
their own ``--out``; the file is rewritten after every scenario, and the rows are kept in a
``.json`` beside it). ``--quick``: 2 epochs, no pooled-vs-dedicated pair. A plan that is not a plan
for every epoch (a heuristic infeasible in some epochs plans none of them) cannot be replayed; it is
listed as not compared, with the reason.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from headline import ROOT, WINDOW, Case, cases, forecast_of, params_of
from scipy.stats import spearmanr

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import greedy, solve_milp
from neuscale_opt.candidates import build_coefficients, instance_trace
from neuscale_opt.errors import InputError
from neuscale_opt.horizon import homogeneous_each, instance_inventory, neuscale_autoscaler, plan_rolling
from neuscale_opt.replay import ReplayOptions, replay

TARGET_REL = 0.10
TARGET_RHO = 0.95
#: a plan leaving more than this demand unserved (req/s, in its worst epoch) is "short"
UNSERVED_RPS = 1e-6
#: the replay as the evaluator accounts a plan: the unserved share rejected at arrival
AS_PLANNED = ReplayOptions(admission="plan")
#: the same without the run-time surge guard: the plan's own vPods alone (the model's part of an error)
PLAN_ALONE = ReplayOptions(admission="plan", surge=False)


@dataclass(frozen=True)
class Row:
    case: str
    method: str
    plan_s: float
    planned: dict[str, float]
    replayed: dict[str, float]


PARTS = ("energy_j", "cost_usd", "energy_static_j", "energy_busy_j", "energy_dynamic_j")
#: the evaluator's totals of the surge guard's expected vPods added to each planned part
GUARD_PARTS = {
    "energy_j": "energy_j",
    "cost_usd": "cost_usd",
    "energy_static_j": "static_j",
    "energy_busy_j": "busy_j",
}
#: (scenario, method, why) of the plans not compared: no allocation at all, or one the replay refuses
NOT_COMPARED: list[tuple[str, str, str]] = []


def load() -> float:
    """1-minute load average (as ``uptime`` prints it)."""
    return float(os.getloadavg()[0])


def past_horizon_chip_h(res: Any) -> float:
    """Chip-hours the replay holds vPods after the horizon (draining what is left)."""
    v = res.vpods
    past = (v["held_to_s"] - float(res.totals["horizon_s"])).clip(lower=0.0) - (
        v["held_from_s"] - float(res.totals["horizon_s"])
    ).clip(lower=0.0)
    return float((past * v["chips"]).sum()) / 3600.0


def plans(case: Case, pooled: bool) -> tuple[Any, Any, list[tuple[str, Callable[[], Any]]]]:
    """(coefficients, trace, [(method label, planner)]) of one scenario."""
    inst = case.instance
    coeffs = build_coefficients(inst)
    trace = instance_trace(inst)
    opts = PlanOptions.from_instance(inst)
    params = params_of(inst)
    inv = instance_inventory(coeffs, inst.inventory_events)
    fc = forecast_of(inst)
    out: list[tuple[str, Callable[[], Any]]] = []
    variants = ("dedicated", "pooled") if pooled else ("dedicated",)
    for objective in ("energy", "cost"):
        o = opts.replace(objective=objective)
        for variant in variants:
            ov = o.replace(variant=variant)
            out.append((f"milp {objective} {variant}", lambda ov=ov: plan_rolling(coeffs, ov, params, fc, WINDOW, inv)))
        out.append((f"milp {objective} window 6", lambda o=o: plan_rolling(coeffs, o, params, fc, 6, inv)))
        out.append(
            (f"oracle {objective}", lambda o=o: plan_rolling(coeffs, o, params, "oracle", WINDOW, inv, method="oracle"))
        )
        out.append((f"greedy {objective}", lambda o=o: greedy(coeffs, o)))
        out.append((f"milp {objective} independent", lambda o=o: solve_milp(coeffs, o)))
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
        # too (its replay rejects that demand, see the module docstring); one without any
        # allocation is not a plan
        if sol.allocations.empty:
            print(f"  {method}: no plan ({sol.status})", flush=True)
            NOT_COMPARED.append((case.label, method, f"no plan ({sol.status})"))
            continue
        plan = sol.to_dict(timing=False)
        try:
            res = replay(plan, case.instance, trace, AS_PLANNED, coeffs=coeffs)
        except InputError as exc:  # e.g. a heuristic infeasible in some epochs plans none of them
            print(f"  {method}: not replayable ({sol.status}): {exc}", flush=True)
            NOT_COMPARED.append((case.label, method, f"not replayable ({sol.status}): {exc}"))
            continue
        planned = {k: float(sol.totals.get(k, math.nan)) for k in PARTS}
        # the plan as it runs: its own vPods and the surge guard's the evaluator expects on the
        # demand that came (formulations/horizon.md, "The guard, as run"); "alone": its own
        for k in PARTS:
            planned[f"alone_{k}"] = planned[k]
        guard = {k: float(sol.totals.get(f"guard_{g}", 0.0)) for k, g in GUARD_PARTS.items()}
        for k, v in guard.items():
            planned[k] += v
        planned["energy_dynamic_j"] += guard["energy_busy_j"]  # dynamic = busy + marginal
        planned["guard_chip_hours"] = float(sol.totals.get("guard_chip_hours", 0.0))
        replayed = {k: float(res.totals[k]) for k in PARTS}
        planned["slo_attainment"] = math.nan
        replayed["slo_attainment"] = float(res.totals["slo_attainment"])
        replayed["slo_attainment_admitted"] = float(res.totals["slo_attainment_admitted"])
        planned["unserved_rps"] = float(sol.totals.get("unserved_rps", 0.0))
        planned["tokens"] = float(sol.totals.get("tokens", math.nan))
        replayed["unserved_rps"] = math.nan
        replayed["tokens"] = float(res.totals["tokens_in"] + res.totals["tokens_out"])
        replayed["requests"] = float(res.totals["requests"])
        replayed["rejected"] = float(res.totals["rejected"])
        replayed["past_horizon_chip_h"] = past_horizon_chip_h(res)
        alone = replay(plan, case.instance, trace, PLAN_ALONE, coeffs=coeffs)
        for k in ("energy_j", "cost_usd"):
            replayed[f"alone_{k}"] = float(alone.totals[k])
        replayed["surge_chip_hours"] = float(res.totals.get("surge_chip_hours", 0.0))
        if planned["unserved_rps"] > UNSERVED_RPS:  # what a replay admitting every arrival does instead
            every = replay(plan, case.instance, trace, coeffs=coeffs)
            for k in ("energy_j", "cost_usd"):
                replayed[f"all_{k}"] = float(every.totals[k])
            replayed["all_tokens"] = float(every.totals["tokens_in"] + every.totals["tokens_out"])
            replayed["all_past_horizon_chip_h"] = past_horizon_chip_h(every)
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


#: significant digits kept before ranking: sums of the same chip-hours in another order differ in
#: the last bits (965.4400000000002 vs 965.44 USD), which would break ties at random
RANK_DIGITS = 9


def _rho(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation of ``a`` and ``b``, each rounded to :data:`RANK_DIGITS`
    significant digits first (equal plans tie on both sides)."""
    a, b = ([float(f"{x:.{RANK_DIGITS}g}") for x in v] for v in (a, b))
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return math.nan
    return float(spearmanr(a, b).statistic)


def separated_pairs(planned: list[float], replayed: list[float], err: float) -> tuple[int, int, int]:
    """Of the pairs of plans whose planned values differ by more than twice the scenario's largest
    relative error ``err`` (pairs the model can tell apart: each value may be off by ``err``), how
    many there are, how many the replay orders the same way, and how many it orders the other way
    (the rest tie in the replay)."""
    n = same = other = 0
    for i in range(len(planned)):
        for j in range(i + 1, len(planned)):
            a, b = planned[i], planned[j]
            if abs(a - b) <= 2 * err * max(abs(a), abs(b)):
                continue
            n += 1
            d = (a - b) * (replayed[i] - replayed[j])
            same += d > 0
            other += d < 0
    return n, same, other


def short(r: Row) -> bool:
    """The plan leaves demand unserved (more than :data:`UNSERVED_RPS` req/s in an epoch)."""
    return r.planned["unserved_rps"] > UNSERVED_RPS


def misses(r: Row) -> str:
    """Why a plan misses a target, in numbers: the parts of its energy, what the replay holds after
    the horizon and the work each side does ('' when both errors are within the target)."""
    p, q = r.planned, r.replayed
    e, c = _rel(p["energy_j"], q["energy_j"]), _rel(p["cost_usd"], q["cost_usd"])
    if abs(e) <= TARGET_REL and abs(c) <= TARGET_REL:
        return ""
    return (
        f"energy {_pct(e)}, cost {_pct(c)}: static {_pct(_rel(p['energy_static_j'], q['energy_static_j']))}, "
        f"busy {_num(p['energy_busy_j'] / 1e6)} / {_num(q['energy_busy_j'] / 1e6)} MJ, dynamic "
        f"{_num(p['energy_dynamic_j'] / 1e6)} / {_num(q['energy_dynamic_j'] / 1e6)} MJ (planned / replayed); "
        f"{q['past_horizon_chip_h']:.3g} chip-h held past the horizon; tokens {p['tokens'] / 1e6:.4g} / "
        f"{q['tokens'] / 1e6:.4g} M; replayed SLO {q['slo_attainment']:.3f} ({q['slo_attainment_admitted']:.3f} of "
        "the admitted)"
    )


def same_terms(rs: list[Row]) -> list[str]:
    """Greedy against the epoch MILP with the same information and rules (each epoch on its own
    demand, no coupling), per objective: replayed value and SLO of each, and which is lower."""
    by = {r.method: r for r in rs}
    out = []
    for objective, key, unit, scale in (("energy", "energy_j", "MJ", 1e6), ("cost", "cost_usd", "USD", 1.0)):
        g, m = by.get(f"greedy {objective}"), by.get(f"milp {objective} independent")
        if g is None or m is None:
            continue
        gv, mv = g.replayed[key], m.replayed[key]
        gs, ms = g.replayed["slo_attainment"], m.replayed["slo_attainment"]
        verdict = "the MILP lower" if mv < gv else ("equal" if mv == gv else "GREEDY LOWER")
        out.append(
            f"* {objective}: greedy {gv / scale:.4g} {unit} at SLO {gs:.4f}, MILP {mv / scale:.4g} {unit} at SLO "
            f"{ms:.4f} (MILP / greedy {mv / gv:.3f}: {verdict})"
        )
    return out


def table(rows: list[Row]) -> tuple[str, list[dict[str, Any]]]:
    lines: list[str] = []
    summary: list[dict[str, Any]] = []
    for label in dict.fromkeys(r.case for r in rows):
        rs = [r for r in rows if r.case == label]
        lines.append(f"\n### {label}\n")
        lines.append(
            "| method | planned energy (MJ) | replayed (MJ) | energy error | planned cost (USD) | replayed (USD) | "
            "cost error | static error | busy: planned / replayed (MJ) | dynamic: planned / replayed (MJ) | "
            "tokens: planned / replayed (M) | replayed SLO | plan s |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rs:
            p, q = r.planned, r.replayed
            lines.append(
                f"| {r.method} | {p['energy_j'] / 1e6:.4g} | {q['energy_j'] / 1e6:.4g} | "
                f"{_pct(_rel(p['energy_j'], q['energy_j']))} | {p['cost_usd']:.4g} | {q['cost_usd']:.4g} | "
                f"{_pct(_rel(p['cost_usd'], q['cost_usd']))} | "
                f"{_pct(_rel(p['energy_static_j'], q['energy_static_j']))} | "
                f"{_num(p['energy_busy_j'] / 1e6)} / {_num(q['energy_busy_j'] / 1e6)} | "
                f"{_num(p['energy_dynamic_j'] / 1e6)} / {_num(q['energy_dynamic_j'] / 1e6)} | "
                f"{p['tokens'] / 1e6:.4g} / {q['tokens'] / 1e6:.4g} | "
                f"{_num(q['slo_attainment'], '.3f')} | {r.plan_s:.1f} |"
            )
        e_err = [abs(_rel(r.planned["energy_j"], r.replayed["energy_j"])) for r in rs]
        c_err = [abs(_rel(r.planned["cost_usd"], r.replayed["cost_usd"])) for r in rs]
        rho_e = _rho([r.planned["energy_j"] for r in rs], [r.replayed["energy_j"] for r in rs])
        rho_c = _rho([r.planned["cost_usd"] for r in rs], [r.replayed["cost_usd"] for r in rs])
        # the same against the replay without the surge guard (the plan's own vPods alone)
        a_err = {
            k: [abs(_rel(r.planned[f"alone_{k}"], r.replayed.get(f"alone_{k}", math.nan))) for r in rs]
            for k in ("energy_j", "cost_usd")
        }
        rho_alone = {
            k: _rho([r.planned[f"alone_{k}"] for r in rs], [r.replayed.get(f"alone_{k}", math.nan) for r in rs])
            for k in ("energy_j", "cost_usd")
        }
        n_short = sum(1 for r in rs if short(r))
        sep = {
            key: separated_pairs(
                [r.planned[key] for r in rs], [r.replayed[key] for r in rs], float(np.nanmax(err or [0.0]))
            )
            for key, err in (("energy_j", e_err), ("cost_usd", c_err))
        }
        if n_short:
            lines.append(
                f"\n{n_short} of {len(rs)} plans leave demand unserved (more than {UNSERVED_RPS:g} req/s in an epoch); "
                "their replays reject it at arrival (above). A replay admitting every arrival instead "
                '(`admission = "all"`) serves it late:\n'
            )
            lines.append(
                "| method | planned unserved req/s (worst epoch) | requests rejected | all admitted: energy (MJ), "
                "error | all admitted: cost (USD), error | all admitted: tokens (M) | chip-h past the horizon: "
                "as planned / all admitted |"
            )
            lines.append("|---|---:|---:|---:|---:|---:|---:|")
            for r in rs:
                if not short(r):
                    continue
                p, q = r.planned, r.replayed
                lines.append(
                    f"| {r.method} | {p['unserved_rps']:.3g} | {q['rejected'] / q['requests']:.1%} | "
                    f"{q['all_energy_j'] / 1e6:.4g}, {_pct(_rel(p['energy_j'], q['all_energy_j']))} | "
                    f"{q['all_cost_usd']:.4g}, {_pct(_rel(p['cost_usd'], q['all_cost_usd']))} | "
                    f"{q['all_tokens'] / 1e6:.4g} | "
                    f"{q['past_horizon_chip_h']:.3g} / {q['all_past_horizon_chip_h']:.3g} |"
                )
        skipped = [(m, why) for c, m, why in NOT_COMPARED if c == label]
        if skipped:
            lines.append("\nNot compared (no plan to replay):\n")
            lines.extend(f"* {m}: {why}" for m, why in skipped)
        terms = same_terms(rs)
        if terms:
            lines.append(
                "\n*Same terms* (each epoch planned on its own demand, no scaling rules): the greedy heuristic "
                "against the epoch MILP, replayed, on the objective each optimises:\n"
            )
            lines.extend(terms)
        missed = [(r.method, misses(r)) for r in rs if misses(r)]
        if missed:
            lines.append("\nPlans outside the 10 % target:\n")
            lines.extend(f"* {m}: {why}" for m, why in missed)
        s = {
            "case": label,
            "plans": len(rs),
            "max_energy_error": float(np.nanmax(e_err)),
            "max_cost_error": float(np.nanmax(c_err)),
            "within_energy": sum(1 for e in e_err if e <= TARGET_REL),
            "within_cost": sum(1 for e in c_err if e <= TARGET_REL),
            "spearman_energy": rho_e,
            "spearman_cost": rho_c,
            "short_plans": n_short,
            "separated_energy": sep["energy_j"],
            "separated_cost": sep["cost_usd"],
            "alone_max_energy_error": float(np.nanmax(a_err["energy_j"])),
            "alone_max_cost_error": float(np.nanmax(a_err["cost_usd"])),
            "alone_spearman_energy": rho_alone["energy_j"],
            "alone_spearman_cost": rho_alone["cost_usd"],
            "surge_chip_hours_max": max(r.replayed.get("surge_chip_hours", 0.0) for r in rs),
            "guard_chip_hours_max": max(r.planned.get("guard_chip_hours", 0.0) for r in rs),
        }
        summary.append(s)
        pairs = len(rs) * (len(rs) - 1) // 2
        lines.append(
            f"\n{len(rs)} plans. Energy within 10 %: {s['within_energy']}/{len(rs)} (largest error "
            f"{s['max_energy_error']:.1%}); cost within 10 %: {s['within_cost']}/{len(rs)} (largest "
            f"{s['max_cost_error']:.1%}). Spearman planned vs replayed: energy {rho_e:.3f}, cost {rho_c:.3f} "
            f"(target {TARGET_RHO}). Of the {pairs} pairs of plans, those whose planned values differ by more "
            f"than twice the largest error: energy {_pairs(sep['energy_j'])}, cost {_pairs(sep['cost_usd'])}. "
            f"Against the replay without the surge guard (each plan's own vPods alone): largest error energy "
            f"{s['alone_max_energy_error']:.1%}, cost {s['alone_max_cost_error']:.1%}; Spearman energy "
            f"{rho_alone['energy_j']:.3f}, cost {rho_alone['cost_usd']:.3f}."
        )
    head = [
        "\n### Summary\n",
        "| scenario | plans | leave demand unserved | energy within 10 % | largest energy error | cost within 10 % "
        "| largest cost error | Spearman energy | Spearman cost | separated pairs ordered as replayed: energy "
        "| cost | guard off: largest energy / cost error | guard off: Spearman energy / cost | guard's chip-h "
        "beyond the plan, largest: expected / replayed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        (ne, oe, _), (nc, oc, _) = s["separated_energy"], s["separated_cost"]
        head.append(
            f"| {s['case']} | {s['plans']} | {s['short_plans']} | {s['within_energy']}/{s['plans']} | "
            f"{s['max_energy_error']:.1%} | {s['within_cost']}/{s['plans']} | {s['max_cost_error']:.1%} | "
            f"{s['spearman_energy']:.3f} | {s['spearman_cost']:.3f} | {oe}/{ne} | {oc}/{nc} | "
            f"{s['alone_max_energy_error']:.1%} / {s['alone_max_cost_error']:.1%} | "
            f"{s['alone_spearman_energy']:.3f} / {s['alone_spearman_cost']:.3f} | "
            f"{s['guard_chip_hours_max']:.3g} / {s['surge_chip_hours_max']:.3g} |"
        )
    head.append(
        "\n*Separated pairs*: pairs of plans whose planned values differ by more than twice the "
        "scenario's largest planned-vs-replayed error, i.e. pairs the model can order at its accuracy; "
        "the pairs closer than that are ties at that accuracy, and where most plans of a scenario tie "
        "(every plan holding the whole fleet) they decide Spearman's rank correlation. *Guard off*: the same "
        "plans replayed without the run-time surge guard (`ReplayOptions(surge=False)`), each plan's own vPods "
        "alone, against the evaluator's totals of those vPods alone: the model's part of an error, apart from "
        "the vPods the guard adds where the demand came in above the plan's forecast and the evaluator's "
        "estimate of them (the criterion is the replay with the guard, as plans run).\n"
    )
    return "\n".join(head + lines) + "\n", summary


def _pairs(sep: tuple[int, int, int]) -> str:
    n, same, other = sep
    return f"{n}, {same} ordered as replayed, {other} the other way"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=None, help="plan only the first N epochs")
    ap.add_argument("--no-pooled", action="store_true", help="skip the pooled MILP plans (the slow ones)")
    ap.add_argument("--only", default=None, help="comma-separated scenario labels to run (default: all)")
    ap.add_argument("--quick", action="store_true", help="2 epochs, no pooled pair (a smoke run)")
    ap.add_argument(
        "--extra",
        action="store_true",
        help="run the scenarios outside the shipped ones (headline.EXTRA) instead; "
        "default --out consistency_extra_results.md",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.out is None:
        name = "consistency_extra_results.md" if args.extra else "consistency_results.md"
        args.out = str(ROOT / "benchmarks" / name)
    if args.quick:
        args.epochs = args.epochs or 2
        args.no_pooled = True
    start = time.perf_counter()
    rows: list[Row] = []
    loads: list[tuple[str, float, float, float]] = []  # scenario, load before, load after, seconds
    only = {s.strip() for s in args.only.split(",")} if args.only else None
    scope = f"first {args.epochs} epochs of each scenario" if args.epochs else "every epoch of each scenario"
    for case in cases(True, args.epochs, extra=args.extra):
        if only is not None and case.label not in only:
            continue
        t0 = time.perf_counter()
        l0 = load()
        print(f"{case.label} (load {l0:.2f})", flush=True)
        rows.extend(run_case(case, not args.no_pooled))
        loads.append((case.label, l0, load(), time.perf_counter() - t0))
        print(f"{case.label}: {loads[-1][3]:.1f} s (load {loads[-1][2]:.2f})", flush=True)
        write(rows, args.out, time.perf_counter() - start, scope, loads)  # partial runs keep theirs
    body = write(rows, args.out, time.perf_counter() - start, scope, loads)
    print(body)
    print(f"written {args.out} in {time.perf_counter() - start:.1f} s")
    return 0


def write(rows: list[Row], out: str, total: float, scope: str, loads: list[tuple[str, float, float, float]]) -> str:
    """Write the results file of ``rows``; returns the tables."""
    body, _ = table(rows)
    Path(out).with_suffix(".json").write_text(
        json.dumps([r.__dict__ for r in rows], indent=1, sort_keys=True, default=float) + "\n", encoding="utf-8"
    )
    ran = "; ".join(f"{label}: {sec:.0f} s, load {a:.2f} -> {b:.2f}" for label, a, b, sec in loads)
    header = (
        "# Planned against replayed energy and money\n\n"
        "Generated by `benchmarks/consistency.py` (see its docstring for the plans). Planned = the "
        "independent evaluator's totals of the plan (`Solution.totals`, energy model of "
        '`formulations/allocation.md`, "Load-dependent energy"): its own vPods plus the surge guard\'s the '
        'evaluator expects on the demand that came (`formulations/horizon.md`, "The guard, as run", G1-G4; '
        "its chip-hours in the summary's last column); replayed = `neuscale_opt.replay` "
        "(30-s creation delay, warm start, each class split over its groups as the plan says, `admission = "
        '"plan"`: the demand a plan leaves unserved is rejected at arrival, `formulations/allocation.md`, '
        '"Unserved demand"). Errors are planned / '
        "replayed - 1; energy at the facility (PUE applied), its parts (static, busy = weight streaming, "
        "dynamic = busy + marginal) before PUE; tokens = input + output of the served requests. "
        f"Targets: |error| <= {TARGET_REL:.0%}, Spearman >= {TARGET_RHO}. Scope: {scope}. Total run time "
        f"{total:.0f} s on 2 shared cores (1-min load average before -> after each scenario: {ran}).\n"
    )
    Path(out).write_text(header + body, encoding="utf-8")
    return body


if __name__ == "__main__":
    raise SystemExit(main())
