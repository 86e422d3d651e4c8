"""The sweep report, written into the sweep's output folder.

``report.md`` (the findings in words and tables), ``tornado.png`` (each parameter's effect on the
objective and on the MILP-vs-baseline ratios), ``tornado.csv``, ``stability.csv``,
``mixes.csv``, ``regret.csv``, ``robust.csv`` (candidate x scenario objectives),
``robust_summary.csv`` and ``summary.json``. Every number in the text comes from these tables.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from neuscale_opt.io import write_json
from neuscale_opt.sweep.analysis import RobustPlans, advantage, solved, stability, tornado
from neuscale_opt.sweep.designs import NOMINAL
from neuscale_opt.sweep.run import Prepared

UNITS = {"energy": "J", "cost": "USD", "carbon": "kgCO2e"}


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        if math.isnan(x):
            return "n/a"
        if math.isinf(x):
            return "inf"
        return f"{x:.4g}"
    return str(x)


def _table(df: pd.DataFrame) -> str:
    if df is None or df.empty:
        return "(none)\n"
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in df.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v) for v in r) + " |")
    return "\n".join(lines) + "\n"


def tornado_chart(tables: dict[str, pd.DataFrame], path: Path) -> None:
    """One horizontal-bar panel per metric: bars from the value at the low end to the high end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = {k: v for k, v in tables.items() if len(v)}
    if not tables:
        return
    fig, axes = plt.subplots(1, len(tables), figsize=(5.5 * len(tables), 0.6 + 0.5 * max(map(len, tables.values()))))
    axes = [axes] if len(tables) == 1 else list(axes)
    for ax, (metric, df) in zip(axes, tables.items(), strict=True):
        df = df.iloc[::-1]
        nom = float(df[f"{metric}_nominal"].iloc[0])
        lo, hi = df[f"{metric}_at_low"].astype(float), df[f"{metric}_at_high"].astype(float)
        y = range(len(df))
        ax.barh(y, lo - nom, left=nom, color="#4C72B0", label="at low value")
        ax.barh(y, hi - nom, left=nom, color="#DD8452", label="at high value")
        ax.axvline(nom, color="k", lw=0.8)
        ax.set_yticks(
            list(y),
            [f"{p} [{_fmt(a)}, {_fmt(b)}]" for p, a, b in zip(df.parameter, df.low_value, df.high_value, strict=True)],
        )
        ax.set_xlabel(metric)
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _unsolved_lines(rows: pd.DataFrame, ok: pd.DataFrame) -> list[str]:
    """The scenarios without a MILP plan, grouped by the reason their row gives (most frequent first)."""
    rest = rows[~rows["scenario_id"].isin(ok["scenario_id"])]
    if not len(rest):
        return []
    reasons = rest["error"].fillna("").astype(str).where(lambda e: e != "", rest["status"].astype(str))
    counts = reasons.value_counts(sort=False)
    order = sorted(counts.index, key=lambda r: (-int(counts[r]), r))
    lines = [f"Scenarios without a MILP plan: {len(rest)} of {len(rows)}:", ""]
    for r in order:
        ids = " ".join(rest.loc[reasons == r, "scenario_id"].astype(str))
        lines.append(f"* {int(counts[r])} ({ids}): {r}")
    return [*lines, ""]


def write_sweep_report(prepared: Prepared, rows: pd.DataFrame, out: str | Path, robust: RobustPlans | None) -> Path:
    """Analyse ``rows`` and write the report files into ``out``; returns the Markdown path."""
    out = Path(out)
    spec = prepared.spec
    unit = UNITS[prepared.base.objective]
    metrics = ["objective"] + [f"ratio_{m}" for m in spec.methods if m != "milp"]
    torn = {m: tornado(rows, prepared, m) for m in metrics}
    pd.concat([t.assign(metric=m) for m, t in torn.items() if len(t)] or [pd.DataFrame()]).to_csv(
        out / "tornado.csv", index=False
    )
    tornado_chart(torn, out / "tornado.png")
    st = stability(rows, prepared)
    st.by_parameter.to_csv(out / "stability.csv", index=False)
    st.mixes.to_csv(out / "mixes.csv", index=False)
    ok = solved(rows)
    nominal_solved = bool((ok["scenario_id"] == NOMINAL).any())
    regret = ok[["scenario_id", *(f"p:{p.label}" for p in spec.parameter), "objective", "nominal_objective", "regret"]]
    regret = regret.assign(relative_regret=regret["regret"] / regret["objective"])
    regret.to_csv(out / "regret.csv", index=False)
    adv = {m: advantage(rows, m) for m in spec.methods if m not in ("milp", "unlimited")}
    summary: dict[str, Any] = {
        "sweep": spec.name,
        "scenarios": int(len(rows)),
        "solved": int(len(ok)),
        "statuses": {str(k): int(v) for k, v in rows["status"].value_counts().sort_index().items()},
        "objective": prepared.base.objective,
        "nominal_mix": st.nominal_mix,
        "mixes": int(len(st.mixes)),
        "nominal_mix_share": float(st.mixes.loc[st.mixes["mix"] == st.nominal_mix, "share"].sum()),
        "nominal_regret_max": float(regret["regret"].max()) if len(regret) else math.nan,
        "nominal_regret_mean": float(regret["regret"].replace(math.inf, math.nan).mean()) if len(regret) else math.nan,
        "nominal_infeasible_in": int((~regret["regret"].astype(float).apply(math.isfinite)).sum()),
        # per parameter, the nearest values below / above its nominal one where the chip mix differs
        "flips": [
            {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in st.changes.to_dict("records")
        ],
        "advantage": adv,
    }
    lines = [f"# Sweep `{spec.name}`", "", spec.description, ""]
    lines += [
        f"{len(rows)} scenarios ({spec.design} design, seed {spec.seed}), {len(ok)} with a MILP plan; "
        f"base instance `{prepared.base.name}`, objective {prepared.base.objective} ({unit}); "
        f"methods {', '.join(spec.methods)}.",
        "",
        *_unsolved_lines(rows, ok),
        "## Parameters",
        "",
        _table(
            pd.DataFrame(
                {
                    "parameter": [p.label for p in spec.parameter],
                    "paths": [" ".join(p.targets) for p in spec.parameter],
                    "scale": [p.scale for p in spec.parameter],
                    "nominal": [prepared.scenarios[0].values[p.label] for p in spec.parameter],
                }
            )
        ),
        "## Tornado",
        "",
        "Mean of each metric at the lowest and the highest value of each parameter "
        f"(`tornado.png`, `tornado.csv`; objective in {unit}, ratios = baseline objective / MILP objective).",
        "",
        "![tornado](tornado.png)",
        "",
    ]
    for m, t in torn.items():
        lines += [f"### {m}", "", _table(t)]
    lines += [
        "## Decision stability",
        "",
        (
            f"The nominal optimum holds **{st.nominal_mix}** (peak chips per generation); "
            f"{len(st.mixes)} distinct mixes over the solved scenarios, the nominal one in "
            f"{summary['nominal_mix_share']:.0%} of them."
            if nominal_solved
            else f"The nominal scenario has no MILP plan; {len(st.mixes)} distinct mixes over the solved scenarios."
        ),
        "",
        _table(st.mixes),
        "Nearest values to nominal at which the mix changes (n/a: it does not change on that side):",
        "",
        _table(st.changes),
        "## Regret of the nominal plan",
        "",
        (
            "The nominal optimum's vPods held in each scenario, demand re-routed over them, minus that "
            "scenario's optimum (`regret.csv`; inf: the nominal vPods cannot carry the scenario's demand "
            f"within its SLO). Largest regret {_fmt(summary['nominal_regret_max'])} {unit}, mean over the "
            f"scenarios it can serve {_fmt(summary['nominal_regret_mean'])} {unit}; it cannot serve "
            f"{summary['nominal_infeasible_in']} scenario(s)."
            if nominal_solved
            else "Not measured: the nominal scenario has no MILP plan to hold in the others."
        ),
        "",
    ]
    if robust is not None:
        rb = robust.milp
        robust.objectives.to_csv(out / "robust.csv")
        robust.summary.to_csv(out / "robust_summary.csv", index=False)
        summary["robust"] = {
            "minimax_regret": robust.minimax,
            "min_expected_regret": robust.min_expected,
            "milp_status": None if rb is None else rb.status,
            "milp_expected_objective": None if rb is None else rb.objective,
            "milp_scenarios": len(robust.milp_scenarios),
            "candidates": robust.summary.to_dict("records"),
        }
        lines += [
            "## Robust plans",
            "",
            "Candidates: the distinct scenario optima and the scenario-based MILP's plan (one set of "
            f"vPods for the {len(robust.milp_scenarios)} solved scenarios"
            + (" listed first by id" if len(robust.milp_scenarios) < len(ok) else "")
            + ", minimum expected objective). Each is held in every scenario with the demand re-routed "
            "(`robust.csv`).",
            "",
            _table(robust.summary) if len(robust.summary) else "No scenario has a MILP plan: there is no candidate.\n",
            (
                f"Least worst-case regret: **{robust.minimax}**; least expected regret: **{robust.min_expected}**."
                if robust.minimax is not None
                else "No robust plan: no scenario optimum to hold and none found by the scenario MILP."
            )
            + (
                ""
                if rb is None
                else f" The scenario MILP ended {rb.status}"
                + (f" with expected objective {_fmt(rb.objective)} {unit}" if math.isfinite(rb.objective) else "")
                + (f" ({rb.diagnosis})" if rb.diagnosis else "")
                + "."
            ),
            "",
        ]
    if adv:
        lines += ["## Does the MILP's advantage survive?", ""]
        for m, a in adv.items():
            if not a:
                continue
            if not a["scenarios"]:
                lines.append(f"* over **{m}**: not measured: no scenario has a MILP plan.")
                continue
            verdict = "survives across the whole sweep" if a["survives"] else "does not survive everywhere"
            lines.append(
                f"* over **{m}**: {m}/MILP objective ratio {_fmt(a['min'])} to {_fmt(a['max'])} "
                f"(median {_fmt(a['median'])}, nominal {_fmt(a['nominal'])}) in {a['compared']} scenarios where "
                f"both plan; {m} has no plan in {a['baseline_infeasible']}; the MILP is strictly better in "
                f"{a['share_better']:.0%} of the scenarios: the advantage {verdict}."
            )
        lines.append("")
    md = out / "report.md"
    md.write_text("\n".join(lines), encoding="utf-8")
    write_json(summary, str(out / "summary.json"))
    return md
