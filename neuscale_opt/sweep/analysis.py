"""What a sweep says: each parameter's effect, how stable the decision is, what the nominal plan
risks, and which plan is safe.

* :func:`tornado` - per parameter, the mean of a metric (the MILP objective, or a baseline's
  ratio to it) at the parameter's lowest and highest value. One-at-a-time designs use the scenarios
  that move that parameter alone (plus the nominal one); other designs average over the rest;
  sampled designs (lhs, mc) with more than ``max_levels`` distinct values are cut into terciles.
* :func:`stability` - the chip mix per generation (peak chips held) of every scenario optimum,
  and per parameter the values at which it differs from the nominal mix.
* regret of the nominal plan - computed in each task (``run.run_scenario``): the nominal optimum's
  vPods held in the scenario, demand re-routed over them, minus the scenario's optimum.
* :func:`robust_plans` - candidate plans (the distinct scenario optima and the scenario-based MILP's
  plan, :mod:`neuscale_opt.sweep.robust`) held in every scenario; the plan of least worst-case regret
  and the one of least expected regret.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from neuscale_opt.alloc.solution import STOPPED_BY
from neuscale_opt.sweep.designs import NOMINAL
from neuscale_opt.sweep.run import Prepared, cross_rows, execute, job_of, vpods_json

#: Statuses of a scenario whose MILP produced a plan (optimal, or stopped by a limit with an incumbent).
PLAN_STATUSES = ("optimal", *STOPPED_BY)


def solved(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows whose MILP produced a plan."""
    return rows[rows["status"].isin(PLAN_STATUSES)]


def tornado(rows: pd.DataFrame, prepared: Prepared, metric: str = "objective", max_levels: int = 6) -> pd.DataFrame:
    """One line per parameter: its low and high value, the metric's mean there, and the swing."""
    ok = solved(rows)
    ok = ok[np.isfinite(ok[metric].astype(float))] if metric in ok else ok.iloc[0:0]
    nominal = ok.loc[ok["scenario_id"] == NOMINAL, metric]
    nom = float(nominal.iloc[0]) if len(nominal) else math.nan
    out = []
    for p in prepared.spec.parameter:
        col = f"p:{p.label}"
        sub = ok
        if prepared.spec.design == "oat":
            sub = ok[(ok["varied"] == p.label) | (ok["scenario_id"] == NOMINAL)]
        if sub.empty:
            continue
        x = sub[col].astype(float)
        if prepared.spec.design in ("lhs", "mc") and x.nunique() > max_levels:
            key = pd.qcut(x.rank(method="first"), 3, labels=False)
            means = sub.groupby(key).agg(value=(col, "mean"), m=(metric, "mean"))
        else:
            means = sub.groupby(col).agg(m=(metric, "mean")).reset_index().rename(columns={col: "value"})
        means = means.sort_values("value")
        lo, hi = means.iloc[0], means.iloc[-1]
        out.append(
            {
                "parameter": p.label,
                "low_value": float(lo["value"]),
                "high_value": float(hi["value"]),
                f"{metric}_at_low": float(lo["m"]),
                f"{metric}_at_high": float(hi["m"]),
                f"{metric}_nominal": nom,
                "swing": float(means["m"].max() - means["m"].min()),
            }
        )
    df = pd.DataFrame(out)
    return df.sort_values("swing", ascending=False, kind="stable").reset_index(drop=True) if len(df) else df


def chip_mix(rows: pd.DataFrame) -> pd.Series:
    """``tpu-v5p 52, tpu-v6e 32`` per row (generations holding chips, in fleet order)."""
    cols = [c for c in rows.columns if c.startswith("chips:")]

    def mix(r: pd.Series) -> str:
        parts = [f"{c[6:]} {int(r[c])}" for c in cols if np.isfinite(r[c]) and r[c] > 0]
        return ", ".join(parts) if parts else "none"

    return rows.apply(mix, axis=1) if len(rows) else pd.Series(dtype=str)


@dataclass(frozen=True)
class Stability:
    nominal_mix: str
    mixes: pd.DataFrame  # mix, scenarios, share
    by_parameter: pd.DataFrame  # parameter, value, scenarios, same_as_nominal (share)
    changes: pd.DataFrame  # parameter, below, above: the nearest values to nominal where the mix changes


def stability(rows: pd.DataFrame, prepared: Prepared) -> Stability:
    ok = solved(rows).copy()
    ok["mix"] = chip_mix(ok)
    nom = ok.loc[ok["scenario_id"] == NOMINAL, "mix"]
    nominal_mix = str(nom.iloc[0]) if len(nom) else "none"
    counts = ok["mix"].value_counts()
    mixes = pd.DataFrame({"mix": counts.index, "scenarios": counts.to_numpy()})
    mixes["share"] = mixes["scenarios"] / max(len(ok), 1)
    mixes = mixes.sort_values(["scenarios", "mix"], ascending=[False, True], kind="stable").reset_index(drop=True)
    per, changes = [], []
    for p in prepared.spec.parameter:
        col = f"p:{p.label}"
        sub = ok if prepared.spec.design != "oat" else ok[(ok["varied"] == p.label) | (ok["scenario_id"] == NOMINAL)]
        g = sub.groupby(col)["mix"].agg(lambda s: float((s == nominal_mix).mean()))
        n = sub.groupby(col)["mix"].size()
        for v in sorted(g.index):
            per.append({"parameter": p.label, "value": float(v), "scenarios": int(n[v]), "same_as_nominal": g[v]})
        nominal_value = float(prepared.scenarios[0].values[p.label])
        below = [float(v) for v in g.index if v < nominal_value and g[v] < 1.0]
        above = [float(v) for v in g.index if v > nominal_value and g[v] < 1.0]
        changes.append(
            {
                "parameter": p.label,
                "nominal_value": nominal_value,
                "changes_below_at": max(below) if below else math.nan,
                "changes_above_at": min(above) if above else math.nan,
            }
        )
    return Stability(nominal_mix, mixes, pd.DataFrame(per), pd.DataFrame(changes))


@dataclass(frozen=True)
class RobustPlans:
    """``objectives``: candidate x scenario objective of holding the candidate's vPods (``inf`` =
    cannot carry the scenario's demand); ``summary``: per candidate its worst-case and expected
    regret, expected objective and the scenarios it is infeasible in. With no solved scenario
    there is no candidate: the frames are empty and ``minimax`` / ``min_expected`` are ``None``."""

    candidates: pd.DataFrame  # candidate, vpods, optimum_in
    objectives: pd.DataFrame
    summary: pd.DataFrame
    minimax: str | None
    min_expected: str | None
    milp: Any  # RobustResult or None
    milp_scenarios: tuple[str, ...]


def candidate_plans(rows: pd.DataFrame, limit: int) -> pd.DataFrame:
    """The distinct scenario optima, most frequent first (ties: first scenario id), at most
    ``limit`` plus the nominal optimum."""
    ok = solved(rows)
    ok = ok[ok["vpods"].astype(str) != ""]
    first: dict[str, str] = {}
    holders: dict[str, list[str]] = {}
    for sid, v in zip(ok["scenario_id"], ok["vpods"], strict=True):
        first.setdefault(v, sid)
        holders.setdefault(v, []).append(str(sid))
    freq = Counter(ok["vpods"])
    order = sorted(freq, key=lambda v: (-freq[v], first[v]))
    keep = order[:limit]
    nom = ok.loc[ok["scenario_id"] == NOMINAL, "vpods"]
    if len(nom) and nom.iloc[0] not in keep:
        keep.append(nom.iloc[0])
    return pd.DataFrame(
        {
            "candidate": [f"optimum of {first[v]}" for v in keep],
            "vpods": keep,
            "optimum_in": [" ".join(holders[v]) for v in keep],
        }
    )


SUMMARY_COLUMNS = ("worst_regret", "expected_regret", "expected_objective", "infeasible_in")


def robust_plans(prepared: Prepared, rows: pd.DataFrame, workers: int = 1, scheduler: str = "processes") -> RobustPlans:
    """Solve the scenario-based MILP, hold every candidate in every scenario, rank by regret."""
    from neuscale_opt.alloc.options import PlanOptions
    from neuscale_opt.candidates import build_coefficients
    from neuscale_opt.sweep.robust import robust_milp

    spec = prepared.spec
    cands = candidate_plans(rows, spec.robust.max_candidates)
    ok_ids = set(solved(rows)["scenario_id"])
    chosen = [t for t in prepared.tasks if t.scenario_id in ok_ids][: spec.robust.max_scenarios]
    milp = None
    if chosen:
        opts = PlanOptions.from_instance(
            prepared.base, time_limit_s=spec.robust.time_limit_s, mip_gap=spec.mip_gap, threads=1
        )
        milp = robust_milp([build_coefficients(t.instance) for t in chosen], opts)
        if milp.vpods or milp.status in PLAN_STATUSES:
            extra = pd.DataFrame({"candidate": ["robust MILP"], "vpods": [vpods_json(milp.vpods)], "optimum_in": [""]})
            cands = pd.concat([cands, extra], ignore_index=True)
    if not len(cands):
        empty = pd.DataFrame(columns=["candidate", *SUMMARY_COLUMNS])
        return RobustPlans(cands, pd.DataFrame(), empty, None, None, milp, tuple(t.scenario_id for t in chosen))
    plans = tuple(cands["vpods"])
    jobs = [job_of(t) for t in prepared.tasks]
    results = execute(prepared, jobs, cross_rows, plans, workers=workers, scheduler=scheduler)
    by_id = {r["scenario_id"]: r["objectives"] for r in results}
    ids = [t.scenario_id for t in prepared.tasks]
    obj = pd.DataFrame([by_id[i] for i in ids], index=ids, columns=list(cands["candidate"])).T
    optimum = rows.set_index("scenario_id")["objective"].astype(float).reindex(ids)
    valid = [i for i in ids if i in ok_ids]
    reg = obj[valid].sub(optimum[valid], axis=1)
    summary = pd.DataFrame(
        {
            "candidate": list(cands["candidate"]),
            "worst_regret": reg.max(axis=1).to_numpy(),
            "expected_regret": reg.mean(axis=1).to_numpy(),
            "expected_objective": obj[valid].mean(axis=1).to_numpy(),
            "infeasible_in": [int((~np.isfinite(obj.loc[c, valid].astype(float))).sum()) for c in cands["candidate"]],
        }
    )
    minimax = str(summary.sort_values(["worst_regret", "expected_regret"], kind="stable").iloc[0]["candidate"])
    min_exp = str(summary.sort_values(["expected_regret", "worst_regret"], kind="stable").iloc[0]["candidate"])
    return RobustPlans(cands, obj, summary, minimax, min_exp, milp, tuple(t.scenario_id for t in chosen))


def advantage(rows: pd.DataFrame, method: str = "homogeneous") -> dict[str, Any]:
    """The MILP's advantage over a baseline: ratio = baseline objective / MILP objective (> 1: the
    MILP plan is better); scenarios where the baseline has no plan count as surviving."""
    ok = solved(rows)
    col = f"ratio_{method}"
    if col not in ok:
        return {}
    r = ok[col].astype(float)
    finite = r[np.isfinite(r)]
    no_plan = int((ok[f"{method}_status"] == "infeasible").sum())
    return {
        "scenarios": int(len(ok)),
        "compared": int(len(finite)),
        "baseline_infeasible": no_plan,
        "min": float(finite.min()) if len(finite) else math.nan,
        "median": float(finite.median()) if len(finite) else math.nan,
        "max": float(finite.max()) if len(finite) else math.nan,
        "nominal": float(ok.loc[ok["scenario_id"] == NOMINAL, col].iloc[0])
        if (ok["scenario_id"] == NOMINAL).any()
        else math.nan,
        # with no MILP plan at all there is nothing to survive; where only the baseline has none,
        # the MILP's plan is the only one and counts as better
        "survives": bool(len(ok) > 0 and (len(finite) == 0 or finite.min() > 1.0 + 1e-9)),
        "share_better": float(((r > 1.0 + 1e-9) | ~np.isfinite(r)).mean()) if len(r) else math.nan,
    }
