"""Capacity-planning report: ``report.md``, a self-contained ``report.html``, ``plan.json`` and tidy CSVs.

:func:`build_report` turns a plan (any method's :class:`~neuscale_opt.alloc.solution.Solution`),
its independent evaluation, the baselines that were run and the candidate set into a
:class:`Report` (file name -> bytes, nothing written yet); the command writes them all into a
directory or nothing (:meth:`neuscale_opt.io.Outputs.add_folder`).

The Markdown and the HTML are rendered from the same list of sections, so their tables carry the
same numbers as ``plan.json`` (numbers are printed with 10 significant digits, as in the JSON).
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from neuscale_opt.catalog import energy_spec, get_chip
from neuscale_opt.io import frame_to_csv_text, to_json
from neuscale_opt.report import plots
from neuscale_opt.roofline import chip_rooflines

BOUND_WHY = {
    "compute": "compute-bound: the step's FLOPs take longer than moving its bytes (long prompts, large batches)",
    "hbm": "HBM-bound: every step streams the weights and the KV cache from HBM (decode at moderate batch)",
    "ici": "ICI-bound: tensor-parallel all-reduces over the slice's links dominate (wide TP, short steps)",
}


def num(x: Any) -> str:
    """A number as the report prints it: 10 significant digits (the JSON's precision)."""
    if x is None:
        return ""
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return str(x)
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(f):
        return ""
    if math.isinf(f):
        return "inf"
    return format(f, ".10g")


@dataclass(frozen=True)
class Table:
    columns: list[str]
    rows: list[list[Any]]


@dataclass(frozen=True)
class Section:
    title: str
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    images: list[tuple[str, str]] = field(default_factory=list)  # (file name, caption)


@dataclass(frozen=True)
class Report:
    files: dict[str, bytes]


def _md_table(t: Table) -> str:
    head = "| " + " | ".join(t.columns) + " |"
    sep = "|" + "|".join("---" for _ in t.columns) + "|"
    body = ["| " + " | ".join(num(v) for v in r) + " |" for r in t.rows]
    return "\n".join([head, sep, *body])


def _html_table(t: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(num(v))}</td>" for v in r) + "</tr>" for r in t.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_markdown(title: str, sections: list[Section]) -> str:
    out = [f"# {title}", ""]
    for s in sections:
        out += [f"## {s.title}", ""]
        for p in s.text:
            out += [p, ""]
        for t in s.tables:
            out += [_md_table(t), ""]
        for name, cap in s.images:
            out += [f"![{cap}](figures/{name})", ""]
    return "\n".join(out)


CSS = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
    "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f3f3f3}"
    "img{max-width:100%;border:1px solid #eee}figcaption{font-size:12px;color:#555}"
)


def render_html(title: str, sections: list[Section], images: dict[str, bytes]) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for s in sections:
        out.append(f"<h2>{html.escape(s.title)}</h2>")
        out += [f"<p>{html.escape(p)}</p>" for p in s.text]
        out += [_html_table(t) for t in s.tables]
        for name, cap in s.images:
            b64 = base64.b64encode(images[name]).decode("ascii")
            out.append(
                f'<figure><img alt="{html.escape(cap)}" src="data:image/png;base64,{b64}">'
                f"<figcaption>{html.escape(cap)}</figcaption></figure>"
            )
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _obj_key(objective: str) -> str:
    return {"energy": "energy_j", "cost": "cost_usd", "carbon": "carbon_kg"}[objective]


def build_report(
    inst,
    cset,
    coeffs,
    solution,
    evaluation,
    baselines: dict[str, Any] | None = None,
    placements: pd.DataFrame | None = None,
    pods: list[dict] | None = None,
    replays: dict[str, dict] | None = None,
    provenance: dict[str, Any] | None = None,
    notes: list[str] | None = None,
) -> Report:
    """Every file of the report, in memory. ``baselines``: name -> (Solution, Evaluation).

    ``replays``: method -> replay totals (``slo_attainment``, ``tokens_per_joule``, ...) of the
    plans that were replayed against the instance's trace.

    ``pods``: for the occupancy maps, dicts with ``pod``, ``chip``, ``dims``, ``failed``.

    ``provenance`` goes into ``plan.json`` as is. Every file is the same bytes run to run except
    ``timing.json``, which holds the solve times (:func:`timing`).
    """
    baselines = baselines or {}
    name = str(getattr(inst, "name", "instance"))
    plan = solution.to_dict(timing=False)
    if provenance is not None:
        plan["provenance"] = provenance
    alloc = solution.allocations
    epochs = coeffs.epochs
    inventory = coeffs.inventory()
    totals = plan["totals"]
    by_epoch = evaluation.by_epoch.copy()

    images: dict[str, bytes] = {}
    images["vpods_over_epochs.png"] = plots.vpods_over_epochs(alloc, epochs)
    images["chips_vs_inventory.png"] = plots.chips_vs_inventory(alloc, epochs, inventory)
    images["energy_money_per_epoch.png"] = plots.energy_money_per_epoch(by_epoch)
    chosen = set(alloc["config_id"]) if not alloc.empty else set()
    phase = "colocated" if solution.options.serving == "colocated" else "decode"
    figures = [
        ("vpods_over_epochs.png", "vPods per group over epochs (stacked)"),
        ("chips_vs_inventory.png", "Chips held per generation against the healthy inventory"),
        ("energy_money_per_epoch.png", "Energy and money per epoch"),
    ]
    if cset is not None:
        images["pareto_candidates.png"] = plots.pareto_candidates(cset.table, chosen, phase=phase)
        roofs = [chip_rooflines(get_chip(c), energy_spec(get_chip(c), inst.energy.profile)) for c in inst.chip_names]
        why = _why_rows(cset.table, alloc)
        cls = pd.DataFrame(
            {"bucket": [r[0] for r in why], "chip": [r[2] for r in why], "intensity": [r[9] for r in why]}
        )
        images["rooflines.png"] = plots.rooflines(roofs, cls)
        figures += [
            ("pareto_candidates.png", "Candidates: latency vs energy per request; stars = chosen"),
            ("rooflines.png", "FLOP/s, FLOP/J and FLOP/$ rooflines; dots = request classes as planned"),
        ]
    else:
        why = _why_rows(coeffs.configs.assign(flops=math.nan, hbm_bytes=math.nan), alloc)
    occupancy: list[tuple[str, str]] = []
    if placements is not None and not placements.empty and pods:
        first = min(placements["epoch"])
        for pod in pods:
            sl = placements[(placements["epoch"] == first) & (placements["pod"] == pod["pod"])]
            sl = sl.assign(label=sl["shape"].astype(str) + " " + sl.get("bucket", sl["shape"]).astype(str))
            name = f"pod_{pod['pod'].replace('/', '_')}.png"
            images[name] = plots.pod_occupancy(
                tuple(pod["dims"]), list(pod["failed"]), sl, f"{pod['pod']} (epoch {first}), x = failed chip"
            )
            occupancy.append((name, f"Occupancy of {pod['pod']} in epoch {first}"))

    chip_hours = _chip_hours(alloc, coeffs)
    sections = [
        Section(
            "Summary",
            text=[
                f"Instance `{name}`: {getattr(inst, 'description', '') or coeffs.meta.get('model', '')}.",
                (
                    f"Model {cset.model.name}; SLO: {cset.slo_note}; energy profile {inst.energy.profile}; "
                    if cset is not None
                    else f"Coefficients from {coeffs.source}; "
                )
                + f"{len(epochs)} epoch(s) of {num(coeffs.epoch_s)} s; variant {solution.options.variant}, "
                f"{solution.options.serving} serving.",
                *(f"Note: {n}." for n in (*(cset.notes if cset is not None else ()), *(notes or ()))),
                "Solve times are in `timing.json` (the one file of the report that differs run to run).",
                "Independent evaluation: "
                + ("feasible" if evaluation.feasible else "VIOLATIONS: " + "; ".join(evaluation.violations[:5])),
            ],
            tables=[
                Table(
                    ["method", "objective", "status", "objective_value", "bound", "gap"],
                    [
                        [
                            plan["method"],
                            plan["objective"],
                            plan["status"],
                            plan["objective_value"],
                            plan["bound"],
                            plan["gap"],
                        ]
                    ],
                ),
                Table(
                    ["energy_j", "cost_usd", "carbon_kg", "unserved_rps"],
                    [
                        [
                            totals.get("energy_j"),
                            totals.get("cost_usd"),
                            totals.get("carbon_kg"),
                            totals.get("unserved_rps"),
                        ]
                    ],
                ),
                Table(
                    ["chip", "healthy_chips", "peak_chips_used", "chip_hours"],
                    [
                        [c, inventory[c], totals.get("chips_by_version", {}).get(c, 0), chip_hours.get(c, 0.0)]
                        for c in sorted(inventory)
                    ],
                ),
            ],
        )
    ]
    if baselines:
        key = _obj_key(plan["objective"])
        ref = float(totals.get(key) or math.nan)
        rp = replays or {}

        def replayed(method: str) -> list[Any]:
            r = rp.get(method)
            return [None, None] if r is None else [r.get("slo_attainment"), r.get("tokens_per_joule")]

        rows = [[plan["method"], plan["status"], totals.get(key), 1.0, *replayed(plan["method"])]]
        for bname, (sol, ev) in baselines.items():
            val = ev.totals.get(key) if (sol.has_plan and ev is not None) else None
            ratio = (float(val) / ref) if (val is not None and ref and not math.isnan(ref)) else None
            rows.append([bname, sol.status, val, ratio, *replayed(bname)])
        sections.append(
            Section(
                "Comparison with baselines",
                text=[
                    f"Objective {plan['objective']} ({key}) of each method, accounted by the independent "
                    f"evaluator, and its ratio to {plan['method']} (above 1 = worse)."
                    + (
                        " Replayed against the instance's trace (request by request, 30-s vPod creation "
                        "delay): SLO attainment and output tokens per joule"
                        + (
                            "; the unlimited reference holds more chips than the fleet and is not replayed."
                            if "unlimited" in baselines
                            else "."
                        )
                        if rp
                        else ""
                    )
                ],
                tables=[
                    Table(
                        ["method", "status", key, "ratio", "replay_slo_attainment", "replay_tokens_per_joule"],
                        rows,
                    )
                ],
            )
        )
    sections.append(
        Section(
            "Allocations",
            text=["vPods per (epoch, class, configuration) with the rate each serves (req/s)."],
            tables=[
                Table(
                    ["epoch", "bucket", "phase", "chip", "shape", "tp", "pp", "batch", "n_vpods", "rate_rps"],
                    [
                        [r.epoch, r.bucket, r.phase, r.chip, r.shape, r.tp, r.pp, r.batch, r.n_vpods, r.rate_rps]
                        for r in alloc.itertuples()
                    ],
                )
            ],
        )
    )
    sections.append(
        Section(
            "Per epoch",
            tables=[
                Table(
                    ["epoch", "energy_j", "cost_usd", "carbon_kg", "unserved_rps"],
                    [[r.epoch, r.energy_j, r.cost_usd, r.carbon_kg, r.unserved_rps] for r in by_epoch.itertuples()],
                )
            ],
        )
    )
    sections.append(
        Section(
            "Why these configurations",
            text=[
                "For each class, the configuration carrying most of its traffic, its roofline latencies "
                "and the roof that binds its dominant step; arithmetic intensity = FLOPs / HBM bytes "
                "per request."
            ]
            + [f"{r[0]}: {r[1]} on {r[2]} {r[3]}; {BOUND_WHY.get(r[8], r[8])}." for r in why],
            tables=[
                Table(
                    [
                        "bucket",
                        "config",
                        "chip",
                        "shape",
                        "ttft_s",
                        "tpot_s",
                        "energy_j_per_req",
                        "cost_usd_per_req",
                        "bound",
                        "intensity",
                    ],
                    [list(r) for r in why],
                )
            ],
        )
    )
    sections.append(
        Section(
            "Figures",
            images=[*figures, *occupancy],
        )
    )
    title = f"Capacity plan: {name}"
    files: dict[str, bytes] = {
        "report.md": render_markdown(title, sections).encode("utf-8"),
        "report.html": render_html(title, sections, images).encode("utf-8"),
        "plan.json": to_json(plan).encode("utf-8"),
        "timing.json": to_json(timing(solution, baselines)).encode("utf-8"),
        "allocations.csv": frame_to_csv_text(alloc).encode("utf-8"),
        "epochs.csv": frame_to_csv_text(by_epoch).encode("utf-8"),
    }
    if placements is not None:
        files["placements.csv"] = frame_to_csv_text(placements).encode("utf-8")
    for fname, data in images.items():
        files[f"figures/{fname}"] = data
    return Report(files)


def _chip_hours(alloc: pd.DataFrame, coeffs) -> dict[str, float]:
    if alloc.empty:
        return {}
    g = alloc.drop_duplicates(["epoch", "vpod_group"])
    hours = g["chips_per_vpod"] * g["n_vpods"] * coeffs.epoch_s / 3600.0
    return {str(k): float(v) for k, v in hours.groupby(g["chip"]).sum().items()}


def _why_rows(table: pd.DataFrame, alloc: pd.DataFrame) -> list[list[Any]]:
    """Per class: the configuration with the largest planned rate (summed over epochs)."""
    if alloc.empty:
        return []
    top = alloc.groupby(["bucket", "config_id"], sort=True)["rate_rps"].sum().reset_index()
    top = top.sort_values(["bucket", "rate_rps", "config_id"], ascending=[True, False, True], kind="mergesort")
    top = top.drop_duplicates("bucket")
    t = table.set_index("config_id")
    rows = []
    for r in top.itertuples():
        if r.config_id not in t.index:
            continue
        c = t.loc[r.config_id]
        intensity = float(c["flops"]) / float(c["hbm_bytes"]) if float(c["hbm_bytes"]) > 0 else math.nan
        rows.append(
            [
                r.bucket,
                str(r.config_id).split("|")[0],
                c["chip"],
                c["shape"],
                c["ttft_s"],
                c["tpot_s"],
                c["energy_j_per_req"],
                c["cost_usd_per_req"],
                c["bound"],
                intensity,
            ]
        )
    return rows


def timing(solution, baselines: dict[str, Any] | None = None) -> dict[str, Any]:
    """``timing.json``: wall-clock solve seconds of the plan (in total and per epoch or window) and
    of each baseline. Kept out of every other file so that those are byte-identical run to run."""
    return {
        "plan": {
            "method": solution.method,
            "solve_seconds": round(float(solution.solve_seconds), 6),
            "epochs": [
                {"epoch": e["epoch"], "solve_seconds": round(float(e["solve_seconds"]), 6)}
                for e in solution.epochs
                if isinstance(e, dict) and "epoch" in e and "solve_seconds" in e
            ],
        },
        "baselines": {name: round(float(sol.solve_seconds), 6) for name, (sol, _) in sorted((baselines or {}).items())},
    }
