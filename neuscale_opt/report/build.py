"""Capacity-planning report: ``report.md``, a self-contained ``report.html``, ``plan.json``,
``replays.json`` and tidy CSVs.

:func:`build_report` turns a plan (any method's :class:`~neuscale_opt.alloc.solution.Solution`),
its independent evaluation, the baselines that were run, their replays and the candidate set into
a :class:`Report` (file name -> bytes, nothing written yet); the command writes them all into a
directory or nothing (:meth:`neuscale_opt.io.Outputs.add_folder`).

The report opens with the decision (what to deploy, what it costs, how it compares with the
alternatives at their replayed SLO attainment, what is unused and what could go wrong), each claim
linking to the table or figure behind it. Numbers are rounded for people (:mod:`.fmt`); the exact
values are in ``plan.json`` and ``replays.json``, from which every number of the report is derived.
The Markdown and the HTML are rendered from the same list of sections.
"""

from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from neuscale_opt.alloc.solution import STOPPED_BY
from neuscale_opt.catalog import energy_spec, get_chip
from neuscale_opt.io import frame_to_csv_text, to_json
from neuscale_opt.report import plots
from neuscale_opt.report.fmt import clock, fmt, kwh, pct
from neuscale_opt.roofline import chip_rooflines
from neuscale_opt.traces.demand import mean_clump

BOUND_WHY = {
    "compute": "compute-bound: the step's FLOPs take longer than moving its bytes (long prompts, large batches)",
    "hbm": "HBM-bound: every step streams the weights and the KV cache from HBM (decode at moderate batch)",
    "ici": "ICI-bound: tensor-parallel all-reduces over the slice's links dominate (wide TP, short steps)",
}

#: objective -> (key of the totals, per-request column of the candidates, unit)
OBJECTIVE_KEYS = {
    "energy": ("energy_j", "energy_j_per_req", "J"),
    "cost": ("cost_usd", "cost_usd_per_req", "USD"),
    "carbon": ("carbon_kg", None, "kgCO2e"),
}


def num(x: Any) -> str:
    """A number at the JSON's precision (10 significant digits); the bench table's format."""
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
    anchor: str | None = None


@dataclass(frozen=True)
class Section:
    title: str
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    images: list[tuple[str, str]] = field(default_factory=list)  # (file name, caption)
    anchor: str | None = None
    after: list[str] = field(default_factory=list)  # paragraphs after the tables


@dataclass(frozen=True)
class Report:
    files: dict[str, bytes]


def fig_anchor(name: str) -> str:
    return "fig-" + name.rsplit(".", 1)[0].replace("_", "-")


# -- rendering: paragraphs use **bold**, `code` and [label](#anchor) -----------------------------


def _md_table(t: Table) -> str:
    head = "| " + " | ".join(t.columns) + " |"
    sep = "|" + "|".join("---" for _ in t.columns) + "|"
    body = ["| " + " | ".join(fmt(v) for v in r) + " |" for r in t.rows]
    lines = [head, sep, *body]
    if t.anchor:
        lines = [f'<a id="{t.anchor}"></a>', "", *lines]
    return "\n".join(lines)


_LINK = re.compile(r"\[([^\]]+)\]\((#[A-Za-z0-9_-]+|[A-Za-z0-9_./-]+)\)")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_CODE = re.compile(r"`([^`]+)`")


def inline_html(text: str) -> str:
    out = html.escape(text, quote=False)
    out = _CODE.sub(r"<code>\1</code>", out)
    out = _BOLD.sub(r"<strong>\1</strong>", out)
    return _LINK.sub(r'<a href="\2">\1</a>', out)


def _html_table(t: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(v))}</td>" for v in r) + "</tr>" for r in t.rows)
    ident = f' id="{t.anchor}"' if t.anchor else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_markdown(title: str, sections: list[Section]) -> str:
    out = [f"# {title}", ""]
    for s in sections:
        if s.anchor:
            out += [f'<a id="{s.anchor}"></a>', ""]
        out += [f"## {s.title}", ""]
        for p in s.text:
            out += [p, ""]
        for t in s.tables:
            out += [_md_table(t), ""]
        for p in s.after:
            out += [p, ""]
        for name, cap in s.images:
            out += [f'<a id="{fig_anchor(name)}"></a>', "", f"![{cap}](figures/{name})", ""]
    return "\n".join(out)


CSS = (
    "body{font-family:sans-serif;max-width:1150px;margin:1.5em auto;color:#222;line-height:1.4}"
    "h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}"
    "table{border-collapse:collapse;margin:.8em 0;font-size:13px}"
    "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f3f3f3}"
    "td:first-child,th:first-child{text-align:left}"
    "img{max-width:100%;border:1px solid #eee}figcaption{font-size:12px;color:#555}"
    "#decision{background:#f7faff;border:1px solid #c9d8ef;padding:.2em 1em;border-radius:6px}"
    "#decision h2{border:none;margin-top:.4em}code{background:#f3f3f3;padding:0 3px}"
)


def render_html(title: str, sections: list[Section], images: dict[str, bytes]) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for s in sections:
        if s.anchor == "decision":
            out.append('<section id="decision">')
            out.append(f"<h2>{html.escape(s.title)}</h2>")
        else:
            ident = f' id="{s.anchor}"' if s.anchor else ""
            out.append(f"<h2{ident}>{html.escape(s.title)}</h2>")
        out += [f"<p>{inline_html(p)}</p>" for p in s.text]
        out += [_html_table(t) for t in s.tables]
        out += [f"<p>{inline_html(p)}</p>" for p in s.after]
        for name, cap in s.images:
            b64 = base64.b64encode(images[name]).decode("ascii")
            out.append(
                f'<figure id="{fig_anchor(name)}"><img alt="{html.escape(cap)}" src="data:image/png;base64,{b64}">'
                f"<figcaption>{html.escape(cap)}</figcaption></figure>"
            )
        if s.anchor == "decision":
            out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _obj_key(objective: str) -> str:
    return OBJECTIVE_KEYS[objective][0]


# -- the plan's numbers ---------------------------------------------------------------------------


def groups_of(alloc: pd.DataFrame) -> pd.DataFrame:
    """One row per (epoch, vPod group): chip, shape, chips per vPod, vPods and chips held."""
    cols = ["epoch", "vpod_group", "chip", "shape", "chips_per_vpod", "n_vpods", "chips"]
    if alloc.empty:
        return pd.DataFrame(columns=cols)
    g = alloc.drop_duplicates(["epoch", "vpod_group"])[cols[:-1]]
    return g.assign(chips=g["chips_per_vpod"] * g["n_vpods"])


def deployment(alloc: pd.DataFrame, epochs: list[int]) -> pd.DataFrame:
    """vPods per (generation, slice shape) per epoch (columns = epochs), with the chips per slice."""
    g = groups_of(alloc)
    if g.empty:
        return pd.DataFrame(columns=["chip", "shape", "chips_per_vpod", *epochs])
    piv = g.pivot_table(
        index=["chip", "shape", "chips_per_vpod"], columns="epoch", values="n_vpods", aggfunc="sum", fill_value=0
    )
    piv = piv.reindex(columns=epochs, fill_value=0).astype(int)
    return piv.reset_index().sort_values(["chip", "chips_per_vpod", "shape"], kind="mergesort")


def chips_per_epoch(alloc: pd.DataFrame, epochs: list[int], chips: list[str]) -> pd.DataFrame:
    """Chips held per generation (columns) per epoch (rows)."""
    g = groups_of(alloc)
    if g.empty:
        return pd.DataFrame(0, index=epochs, columns=chips)
    t = g.pivot_table(index="epoch", columns="chip", values="chips", aggfunc="sum", fill_value=0)
    return t.reindex(index=epochs, columns=chips, fill_value=0).astype(int)


def demand_per_epoch(coeffs, plan: dict) -> pd.DataFrame:
    """Demand per epoch (req/s, summed over classes): ``planned`` is what the plan was sized for
    (the forecast of a rolling plan, else the provisioned rate), ``actual`` the provisioned rate of
    the trace (``workload.provision_for``), ``mean`` its mean rate when known."""
    d = coeffs.demand
    actual = d.groupby("epoch")["rate_rps"].sum()
    mean = d.groupby("epoch")["mean_rps"].sum() if "mean_rps" in d.columns else None
    fc = {
        int(e["epoch"]): float(sum(e["forecast_rps"].values()))
        for e in plan.get("epochs") or []
        if isinstance(e, dict) and "forecast_rps" in e
    }
    rows = []
    for t in coeffs.epochs:
        a = float(actual.get(t, 0.0))
        rows.append(
            {
                "epoch": t,
                "planned": fc.get(t, a),
                "actual": a,
                "mean": float(mean.get(t, 0.0)) if mean is not None else math.nan,
            }
        )
    return pd.DataFrame(rows)


def forecast_errors(plan: dict) -> pd.DataFrame:
    """Per (epoch, class) of a rolling plan: forecast and actual rate (req/s) and the shortfall."""
    rows = []
    for e in plan.get("epochs") or []:
        if not (isinstance(e, dict) and "forecast_rps" in e and "actual_rps" in e):
            continue
        for b, f in sorted(e["forecast_rps"].items()):
            a = float(e["actual_rps"].get(b, 0.0))
            rows.append({"epoch": int(e["epoch"]), "bucket": b, "forecast": float(f), "actual": a})
    df = pd.DataFrame(rows, columns=["epoch", "bucket", "forecast", "actual"])
    return df.assign(short=(df["actual"] - df["forecast"]).clip(lower=0.0))


def _chip_hours(alloc: pd.DataFrame, coeffs) -> dict[str, float]:
    if alloc.empty:
        return {}
    g = alloc.drop_duplicates(["epoch", "vpod_group"])
    hours = g["chips_per_vpod"] * g["n_vpods"] * coeffs.epoch_s / 3600.0
    return {str(k): float(v) for k, v in hours.groupby(g["chip"]).sum().items()}


def chip_equivalents(inst) -> dict[str, dict[str, float]]:
    """Nominal and deliverable chip-equivalents per generation (the instance's own rule, the one
    ``validate --json`` prints); empty for inputs without a fleet (profile or Mélange instances)."""
    try:
        return inst.normalised()["derived"]["chip_equivalents"]
    except AttributeError:
        return {}


def calibration_origins(inst) -> dict[str, str]:
    """Per generation: where its roofline parameters come from (``fit``, ``family prior (tpu)``,
    ``none``) under the instance's calibration profile."""
    from neuscale_opt.calibrate import chip_calibration

    search = getattr(inst, "search", None)
    if search is None or not hasattr(inst, "fleet"):
        return {}
    out = {}
    for f in inst.fleet:
        note = chip_calibration(search.calibration, get_chip(f.chip), str(inst.base_dir)).note
        out[f.chip] = note.split(": ", 1)[1] if ": " in note else note
    return out


def unused_reason(chip: str, used: int, cset, alloc: pd.DataFrame, objective: str, phase: str) -> str:
    """Why a generation's healthy chips sit unused at the plan's peak."""
    if used > 0:
        return "partly used: the plan needs no more of it at its peak"
    if cset is None:
        return "not chosen by the planner"
    t = cset.table
    t = t[t["phase"] == phase]
    mine = t[(t["chip"] == chip) & t["feasible"]]
    if mine.empty:
        return "no configuration of it meets the SLO with the model in memory"
    col = OBJECTIVE_KEYS[objective][1] or "energy_j_per_req"
    what = {"energy_j_per_req": "energy", "cost_usd_per_req": "cost"}[col]
    if alloc.empty:
        return "not needed"
    rate = alloc.groupby("bucket")["rate_rps"].sum().sort_values(ascending=False, kind="mergesort")
    chosen = set(alloc["config_id"])
    for b in rate.index:
        here = t[(t["bucket"] == b) & t["feasible"]]
        own = here[here["chip"] == chip]
        planned = here[here["config_id"].isin(chosen)]
        if own.empty or planned.empty:
            continue
        ratio = float(own[col].min()) / float(planned[col].min())
        if ratio > 1:
            return (
                f"its best configuration for {b} (the busiest class it can serve) needs {fmt(ratio)} x "
                f"the {what} per request of the plan's"
            )
        return (
            f"as efficient per request for {b} as the plan's choice ({fmt(ratio)} x its {what}), "
            "but not needed: the chosen generations cover the demand within the coupling and placement rules"
        )
    return "it serves none of the planned classes within the SLO"


# -- the report ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """The report's figures: PNG bytes by file name, and (file name, caption) in report order."""

    images: dict[str, bytes]
    captions: list[tuple[str, str]]


def _plan_why(cset, coeffs, alloc: pd.DataFrame) -> list:
    """:func:`_why_rows` of the plan's configurations (from the candidate table when there is one)."""
    if cset is not None:
        return _why_rows(cset.table, alloc)
    return _why_rows(coeffs.configs.assign(flops=math.nan, hbm_bytes=math.nan), alloc)


@dataclass(frozen=True)
class FigureJob:
    """One figure of the report still to draw: ``draw(*args)`` (a function of :mod:`plots`, its
    arguments plain tables and values, so that the job can be drawn in another process) gives the
    PNG bytes of ``name``."""

    name: str
    caption: str
    draw: Any
    args: tuple

    def png(self) -> bytes:
        return self.draw(*self.args)


def figure_jobs(
    inst,
    cset,
    coeffs,
    solution,
    evaluation,
    placements: pd.DataFrame | None = None,
    pods: list[dict] | None = None,
) -> list[FigureJob]:
    """The report's figures of ``solution`` (evaluated as ``evaluation``), in report order, as
    :class:`FigureJob`; none reads a baseline or a replay. The arguments mean what they mean for
    :func:`build_report`."""
    alloc = solution.allocations
    epochs = list(coeffs.epochs)
    epoch_s = float(coeffs.epoch_s)
    inventory = coeffs.inventory()
    gens = sorted(inventory)
    by_epoch = evaluation.by_epoch.copy()
    phase = "colocated" if solution.options.serving == "colocated" else "decode"
    cpe = chips_per_epoch(alloc, epochs, gens)
    dem = demand_per_epoch(coeffs, solution.to_dict(timing=False))
    classes = sorted(str(b) for b in coeffs.buckets["bucket"])
    jobs = [
        FigureJob(
            "deployment_over_time.png",
            "vPods held per generation (colour) and class (pattern) over the horizon",
            plots.deployment_over_time,
            (alloc, epochs, epoch_s, classes),
        ),
        FigureJob(
            "chips_vs_inventory.png",
            "Chips held per generation against the healthy inventory (dashed)",
            plots.chips_vs_inventory,
            (alloc, epochs, inventory, epoch_s),
        ),
        FigureJob(
            "energy_money_per_epoch.png",
            "Energy (kWh), money (USD/h) and demand (req/s) per epoch",
            plots.energy_money_per_epoch,
            (by_epoch, epoch_s, dem),
        ),
    ]
    chosen = set(alloc["config_id"]) if not alloc.empty else set()
    if cset is not None:
        roofs = [chip_rooflines(get_chip(c), energy_spec(get_chip(c), inst.energy.profile)) for c in inst.chip_names]
        why = _plan_why(cset, coeffs, alloc)
        cls = pd.DataFrame(
            {"bucket": [r[0] for r in why], "chip": [r[2] for r in why], "intensity": [r[9] for r in why]}
        )
        jobs += [
            FigureJob(
                "pareto_candidates.png",
                "Candidates: latency vs energy per request; stars = chosen",
                plots.pareto_candidates,
                (cset.table, chosen, phase),
            ),
            FigureJob(
                "rooflines.png",
                "FLOP/s, FLOP/J and FLOP/$ rooflines; dots = request classes as planned",
                plots.rooflines,
                (roofs, cls),
            ),
        ]
    if pods:
        counted = [c for c in gens if c not in {p["chip"] for p in pods}]
        jobs.append(
            FigureJob(
                "pod_maps.png",
                "Where the vPods sit: each placed pod in each run of epochs with the same occupancy "
                "(at most six per pod, evenly thinned; x = failed chip); generations given as a chip "
                "count are drawn as counts",
                plots.pod_maps,
                (pods, placements, epochs, epoch_s, counted, cpe, inventory, plots.main_class(alloc), classes),
            )
        )
    return jobs


def draw_figures(jobs: list[FigureJob], drawn: dict[str, bytes] | None = None) -> Figures:
    """:class:`Figures` of ``jobs``: each drawn here unless ``drawn`` (file name -> PNG bytes,
    drawn elsewhere from the same job) has it already."""
    drawn = drawn or {}
    images = {j.name: drawn[j.name] if j.name in drawn else j.png() for j in jobs}
    return Figures(images, [(j.name, j.caption) for j in jobs])


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
    replay_detail: dict[str, pd.DataFrame] | None = None,
    sweep: dict[str, Any] | None = None,
    *,
    figures: Figures,
) -> Report:
    """Every file of the report, in memory. ``baselines``: name -> (Solution, Evaluation).

    ``figures``: :func:`draw_figures` of :func:`figure_jobs` of the same plan, drawn beforehand
    (none of them reads a baseline or a replay, so a caller may draw them while those are still
    running).

    ``replays``: method -> replay totals (``slo_attainment``, ``goodput_tokens_out``, ...) of the
    plans replayed against the instance's trace; written as ``replays.json``.
    ``replay_detail``: the plan's replay tables ``by_bucket`` and ``by_epoch`` (where SLO misses are).

    ``pods``: for the occupancy maps, dicts with ``pod``, ``chip``, ``dims``, ``failed``.

    ``sweep``: a sweep's ``summary.json`` (``neuscale-opt sweep``); the risks then say which
    parameter changes the chip mix and at which value (:func:`sweep_risk`).

    ``provenance`` goes into ``plan.json`` as is. Every file is the same bytes run to run except
    ``timing.json``, which holds the solve times (:func:`timing`).
    """
    baselines = baselines or {}
    rp = replays or {}
    detail = replay_detail or {}
    inst_name = str(getattr(inst, "name", "instance"))
    plan = solution.to_dict(timing=False)
    if provenance is not None:
        plan["provenance"] = provenance
    alloc = solution.allocations
    epochs = list(coeffs.epochs)
    epoch_s = float(coeffs.epoch_s)
    hours = len(epochs) * epoch_s / 3600.0
    inventory = coeffs.inventory()
    gens = sorted(inventory)
    totals = plan["totals"]
    by_epoch = evaluation.by_epoch.copy()
    key, _, unit = OBJECTIVE_KEYS[plan["objective"]]
    phase = "colocated" if solution.options.serving == "colocated" else "decode"
    meta = dict(getattr(solution, "meta", {}) or {})
    rolling = "window" in meta and "forecast" in meta
    ce = chip_equivalents(inst)
    origin = calibration_origins(inst)
    healthy = {c: int(ce[c]["nominal"]) if c in ce else inventory[c] for c in gens}
    peak = {c: int(totals.get("chips_by_version", {}).get(c, 0)) for c in gens}
    dep = deployment(alloc, epochs)
    cpe = chips_per_epoch(alloc, epochs, gens)
    dem = demand_per_epoch(coeffs, plan)
    target = float(getattr(solution.options, "attainment", math.nan))
    mine = rp.get(plan["method"])

    # -- figures (drawn beforehand: figure_jobs, draw_figures)
    images, captions = dict(figures.images), list(figures.captions)
    why = _plan_why(cset, coeffs, alloc)

    # -- the decision (first screen)
    cost_h = float(totals.get("cost_usd", math.nan)) / hours if hours else math.nan
    energy_kwh = kwh(totals.get("energy_j"))
    carbon = float(totals.get("carbon_kg", math.nan))
    used_gens = [c for c in gens if peak[c] > 0]
    deploy_words = "; ".join(
        f"**{c}** {peak[c]} chips at peak ("
        + " + ".join(f"{int(r[epochs].max())} x {r['shape']}" for _, r in dep[dep["chip"] == c].iterrows())
        + " slices at most)"
        for c in used_gens
    )
    glance = [
        ["chips at peak, all generations", sum(peak.values()), "chips", "plan.json totals.chips_by_version"],
        *[[f"chips at peak, {c}", peak[c], "chips", "plan.json totals.chips_by_version"] for c in used_gens],
        ["cost per hour", cost_h, "USD/h", "plan.json totals.cost_usd / horizon"],
        ["cost per day", cost_h * 24.0, "USD/day", "at the horizon's rate"],
        ["energy over the horizon", energy_kwh, "kWh", "plan.json totals.energy_j (PUE included)"],
        ["energy per day", energy_kwh * 24.0 / hours if hours else math.nan, "kWh/day", "at the horizon's rate"],
        ["carbon over the horizon", carbon, "kgCO2e", "plan.json totals.carbon_kg (operational + embodied)"],
    ]
    if mine is not None:
        glance += [
            ["replayed SLO attainment", pct(mine.get("slo_attainment")), "of requests", "replays.json"],
            ["replayed goodput", mine.get("goodput_tokens_out"), "output tokens", "replays.json"],
            ["replayed goodput per joule", mine.get("goodput_tokens_per_joule"), "tokens/J", "replays.json"],
        ]
    decision_text = [
        f"**Deploy** ({plan['method']}, {solution.options.variant} vPods, {solution.options.serving} serving, "
        f"{len(epochs)} epoch{'s' if len(epochs) != 1 else ''} of {fmt(epoch_s / 60)} min = {fmt(hours)} h): "
        + (deploy_words or "nothing")
        + ". [Deployment per epoch](#deploy), [figure](#fig-deployment-over-time).",
        f"**Costs** {fmt(cost_h)} USD/h ({fmt(cost_h * 24)} USD/day), {fmt(energy_kwh)} kWh and "
        f"{fmt(carbon)} kgCO2e over the horizon{_with_guard(totals, hours)}. [Per epoch](#epochs), "
        "[figure](#fig-energy-money-per-epoch).",
    ]
    comp_rows, comp_words = _comparison(plan, baselines, rp, key, hours)
    if comp_words:
        decision_text.append("**Against the alternatives** " + comp_words + " [Comparison](#compare).")
    unused_rows = []
    for c in gens:
        h = healthy[c]
        free = (h - peak[c]) if math.isfinite(float(h)) else math.inf
        reason = "" if free == 0 else unused_reason(c, peak[c], cset, alloc, plan["objective"], phase)
        unused_rows.append(
            [
                c,
                h,
                *([ce[c]["nominal"], ce[c]["deliverable"]] if ce else []),
                peak[c],
                free,
                origin.get(c, MISSING_ORIGIN),
                reason or "fully used at the peak",
            ]
        )
    unused_words = "; ".join(
        f"{r[0]}: {fmt(r[-3])} of {fmt(r[1])} healthy chips unused ({r[-1]})" for r in unused_rows if r[-3] > 0
    )
    if unused_words:
        decision_text.append("**Unused inventory** at the peak: " + unused_words + ". [Inventory](#inventory).")
    prior = sorted(c for c, o in origin.items() if "family prior" in o)
    if prior:
        decision_text.append(
            "**Calibration**: the roofline of "
            + ", ".join(prior)
            + " uses its family's prior (no measurements of its own), so its latencies and energies are less "
            "certain than those of the fitted generations. [Inventory](#inventory)."
        )
    decision_text.append("**Risks** " + _risks(plan, mine, detail, target, epoch_s, meta, rolling, sweep) + ".")
    decision = Section(
        f"Decision: {inst_name}",
        text=decision_text,
        tables=[Table(["at a glance", "value", "unit", "from"], glance, anchor="glance")],
        anchor="decision",
    )
    if comp_rows:
        decision.tables.append(comp_rows)

    # -- details
    sections = [decision]
    ep_labels = [clock(i * epoch_s) for i in range(len(epochs))]
    dep_rows = [
        [
            r["chip"],
            r["shape"],
            int(r["chips_per_vpod"]),
            *[int(r[t]) for t in epochs],
            int(r[epochs].max()),
            int(r[epochs].max()) * int(r["chips_per_vpod"]),
        ]
        for _, r in dep.iterrows()
    ]
    sections.append(
        Section(
            "What to deploy",
            text=[
                "vPods (slices) per generation and slice shape in each epoch, headed by the epoch's start "
                "(h:mm from the start of the horizon), with the most any epoch holds. A pooled group's vPods "
                "serve several classes; the classes each carries are in [Allocations](#allocations)."
            ],
            tables=[
                Table(
                    ["generation", "slice", "chips/slice", *ep_labels, "max vPods", "max chips"],
                    dep_rows,
                    anchor="deploy-table",
                )
            ],
            anchor="deploy",
        )
    )
    inv_cols = ["generation", "healthy chips"]
    if ce:
        inv_cols += ["nominal chip-eq", "deliverable chip-eq"]
    inv_cols += ["chips at peak", "unused at peak", "roofline calibration", "why"]
    derated = [c for c in ce if abs(ce[c]["deliverable"] - ce[c]["nominal"]) > 1e-9]
    sections.append(
        Section(
            "Inventory",
            text=[
                "Healthy chips per generation, what the plan holds at its peak and why the rest is unused."
                + (
                    " Deliverable chip-equivalents = healthy chips x thermal x availability x load of the "
                    "fleet entry's derate (the planner's inventory; thermal also slows each chip's roofline): "
                    + ", ".join(f"{c} {fmt(ce[c]['deliverable'])} of {fmt(ce[c]['nominal'])}" for c in derated)
                    + "."
                    if derated
                    else ""
                )
                + " Roofline calibration: `fit` = fitted to measurements of that chip, `family prior` = the "
                "family's prior (no measurements of the chip), `none` = the catalog's pure roofline."
            ],
            tables=[Table(inv_cols, unused_rows, anchor="inventory-table")],
            anchor="inventory",
        )
    )
    sections.append(_solved_section(plan, solution, meta, rolling, baselines, epoch_s, evaluation, mine))
    sections.append(_epoch_section(plan, by_epoch, dem, cpe, gens, epoch_s, detail, rolling))
    if rp:
        sections.append(_replay_section(detail, target, _arrivals_words(coeffs)))
    n_zero = int((alloc["rate_rps"] <= 1e-12).sum()) if not alloc.empty else 0
    sections.append(
        Section(
            "Allocations",
            text=[
                "vPods per (epoch, class, configuration) with the rate each serves (req/s)."
                + (
                    f" {n_zero} row(s) serve 0 req/s: vPods the plan holds in an epoch without traffic for "
                    "that configuration (in a pooled group the group's vPods are listed under each of its "
                    "configurations; in a horizon plan the scale-down rule keeps vPods until the shrink "
                    "delay has passed)."
                    if n_zero
                    else ""
                )
            ],
            tables=[
                Table(
                    ["start", "epoch", "class", "phase", "generation", "slice", "tp", "pp", "batch", "vPods", "req/s"],
                    [
                        [
                            clock(epochs.index(r.epoch) * epoch_s),
                            r.epoch,
                            r.bucket,
                            r.phase,
                            r.chip,
                            r.shape,
                            r.tp,
                            r.pp,
                            r.batch,
                            r.n_vpods,
                            r.rate_rps,
                        ]
                        for r in alloc.itertuples()
                    ],
                    anchor="allocations-table",
                )
            ],
            anchor="allocations",
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
                        "class",
                        "config",
                        "generation",
                        "slice",
                        "TTFT (s)",
                        "TPOT (s)",
                        "J/request",
                        "USD/request",
                        "bound",
                        "FLOP/byte",
                    ],
                    [list(r) for r in why],
                    anchor="why-table",
                )
            ],
            anchor="why",
        )
    )
    notes_all = [*(cset.notes if cset is not None else ()), *(notes or ())]
    sections.append(
        Section(
            "Inputs and notes",
            text=[
                f"Instance `{inst_name}`: {getattr(inst, 'description', '') or coeffs.meta.get('model', '')}.",
                (
                    f"Model {cset.model.name}; SLO: {cset.slo_note}; energy profile {inst.energy.profile}."
                    if cset is not None
                    else f"Coefficients from {coeffs.source}."
                ),
                *(f"Note: {n}." for n in notes_all),
                "Exact values: `plan.json` (the plan and its accounting), `replays.json` (the replays), "
                "`allocations.csv`, `epochs.csv`; solve times in `timing.json` (the one file that differs run "
                "to run). Deployable node pools and workloads: `neuscale-opt export plan.json --format gke "
                "--out DIR`.",
            ],
            anchor="inputs",
        )
    )
    sections.append(Section("Figures", images=captions, anchor="figures"))
    title = f"Capacity plan: {inst_name}"
    files: dict[str, bytes] = {
        "report.md": render_markdown(title, sections).encode("utf-8"),
        "report.html": render_html(title, sections, images).encode("utf-8"),
        "plan.json": to_json(plan).encode("utf-8"),
        "timing.json": to_json(timing(solution, baselines)).encode("utf-8"),
        "allocations.csv": frame_to_csv_text(alloc).encode("utf-8"),
        "epochs.csv": frame_to_csv_text(by_epoch).encode("utf-8"),
    }
    if rp:
        files["replays.json"] = to_json({m: rp[m] for m in sorted(rp)}).encode("utf-8")
    if placements is not None:
        files["placements.csv"] = frame_to_csv_text(placements).encode("utf-8")
    for fname, data in images.items():
        files[f"figures/{fname}"] = data
    return Report(files)


MISSING_ORIGIN = "–"


def _comparison(plan: dict, baselines: dict, rp: dict, key: str, hours: float) -> tuple[Table | None, str]:
    """The comparison table (plan first) and the sentence of the first screen."""
    if not baselines:
        return None, ""
    ref = float(plan["totals"].get(key) or math.nan)
    what = {"energy_j": "energy", "cost_usd": "cost", "carbon_kg": "carbon"}[key]

    def per_good(r: dict | None) -> float:
        if r is None or not r.get("goodput_tokens_out"):
            return math.nan
        return float(r[key]) / float(r["goodput_tokens_out"])

    mine = per_good(rp.get(plan["method"]))
    rows = []
    words = []
    for name, status, tot in [(plan["method"], plan["status"], plan["totals"])] + [
        (b, sol.status, (ev.totals if (sol.runnable and ev is not None) else None))
        for b, (sol, ev) in baselines.items()
    ]:
        r = rp.get(name)
        planned = float(tot.get(key)) if tot is not None and tot.get(key) is not None else math.nan
        ratio = planned / ref if ref and math.isfinite(ref) and math.isfinite(planned) else math.nan
        good_ratio = per_good(r) / mine if math.isfinite(mine) and mine > 0 else math.nan
        cost_h = float(tot["cost_usd"]) / hours if tot is not None and hours else math.nan
        rows.append(
            [
                name,
                status,
                cost_h,
                kwh(tot.get("energy_j")) if tot is not None else math.nan,
                ratio,
                pct(r.get("slo_attainment")) if r else None,
                r.get("goodput_tokens_out") if r else None,
                r.get("goodput_tokens_per_joule") if r else None,
                r.get("goodput_tokens_per_usd") if r else None,
                good_ratio,
            ]
        )
        if name == plan["method"]:
            continue
        if r is not None and math.isfinite(good_ratio):
            # a plan the evaluator rejects (a reactive auto-scaler whose capacity lags demand) still
            # ran; the words say both
            judged = ""
            if status == "infeasible":
                short = float(tot.get("unserved_rps") or 0.0) if tot is not None else 0.0
                judged = (
                    f" (the evaluator finds it infeasible: it plans {fmt(short)} req/s unserved at its worst epoch)"
                    if short > 0
                    else " (the evaluator finds it infeasible)"
                )
            words.append(
                f"{name}{judged} needs {fmt(good_ratio)} x the {what} per goodput token at "
                f"{pct(r.get('slo_attainment'))} SLO attainment"
            )
        elif math.isfinite(ratio):
            words.append(f"{name} plans {fmt(ratio)} x the {what} (not replayed)")
        else:
            words.append(f"{name}: {status}")
    head = (
        f"(replayed, {plan['method']} at {pct(rp[plan['method']].get('slo_attainment'))} SLO attainment): "
        if plan["method"] in rp
        else "(planned): "
    )
    cols = [
        "method",
        "status",
        "USD/h",
        "kWh",
        f"planned {what} vs plan",
        "replayed SLO",
        "goodput tokens",
        "goodput tokens/J",
        "goodput tokens/USD",
        f"{what} per goodput token vs plan",
    ]
    if not rp:  # nothing replayed (no trace): the planned columns only
        cols, rows = cols[:5], [r[:5] for r in rows]
    table = Table(cols, rows, anchor="compare")
    return table, head + "; ".join(words) + "."


def sweep_risk(summary: dict[str, Any]) -> str:
    """What a sweep's ``summary.json`` says of the decision: for each parameter, the values nearest
    its nominal one (below, above) at which the MILP's chip mix per generation differs from the
    nominal mix, or that it never does; the share of scenarios with the nominal mix; the nominal
    plan's largest regret."""
    flips = []
    for f in summary.get("flips") or []:
        lo, hi = f.get("changes_below_at"), f.get("changes_above_at")
        where = [
            w
            for w in (
                f"at {fmt(lo)} and below" if lo is not None else None,
                f"at {fmt(hi)} and above" if hi is not None else None,
            )
            if w
        ]
        nominal = fmt(f.get("nominal_value"))
        flips.append(
            f"{f['parameter']} (nominal {nominal}) changes it " + " and ".join(where)
            if where
            else f"{f['parameter']} (nominal {nominal}) never changes it"
        )
    n, share = int(summary.get("solved", 0)), summary.get("nominal_mix_share")
    s = f"sweep `{summary.get('sweep', '?')}` ({fmt(n)} scenarios with a plan): the chip mix"
    s += (" " + "; ".join(flips)) if flips else " was not analysed per parameter"
    if share is not None:
        s += f"; the nominal mix holds in {pct(float(share))} of the scenarios"
    reg = summary.get("nominal_regret_max")
    if reg is not None and math.isfinite(float(reg)):
        scale, unit = {"energy": (1 / 3.6e6, "kWh"), "cost": (1.0, "USD"), "carbon": (1.0, "kgCO2e")}.get(
            str(summary.get("objective")), (1.0, "")
        )
        s += f", the nominal plan's largest regret is {fmt(float(reg) * scale)} {unit}".rstrip()
    inf = int(summary.get("nominal_infeasible_in") or 0)
    if inf:
        s += f" and it cannot carry {fmt(inf)} scenario(s)"
    return s


def _worst_attainment(frame: pd.DataFrame | None, key: str) -> pd.Series | None:
    """The row with the lowest SLO attainment among those with requests (ties: lowest ``key``)."""
    if frame is None or frame.empty:
        return None
    frame = frame[frame["requests"] > 0].sort_values(["slo_attainment", key], kind="mergesort")
    return None if frame.empty else frame.iloc[0]


def _risks(
    plan: dict,
    mine: dict | None,
    detail: dict,
    target: float,
    epoch_s: float,
    meta: dict,
    rolling: bool,
    sweep: dict[str, Any] | None = None,
) -> str:
    parts = []
    if mine is not None:
        n = int(mine.get("requests", 0))
        missed = n - int(mine.get("slo_met", 0))
        s = f"{fmt(missed)} of {fmt(n)} replayed requests ({pct(missed / n if n else math.nan)}) miss their SLO" + (
            f" (target attainment {pct(target)})" if math.isfinite(target) else ""
        )
        w = _worst_attainment(detail.get("by_bucket"), "bucket")
        if w is not None:
            s += f", worst class {w['bucket']} at {pct(w['slo_attainment'])}"
        w = _worst_attainment(detail.get("by_epoch"), "epoch")
        if w is not None:
            s += f", worst epoch {clock(int(w['epoch']) * epoch_s)} at {pct(w['slo_attainment'])}"
        unserved = int(mine.get("unserved", 0))
        if unserved:
            s += f"; {fmt(unserved)} requests never served"
        surged = int(mine.get("surge_vpods", 0))
        if surged:
            s += (
                f"; the replay's surge guard added {fmt(surged)} vPod{'s' if surged != 1 else ''} "
                f"({fmt(float(mine.get('surge_chip_hours', 0.0)))} chip-hours beyond the plan, in the replayed energy "
                "and cost) "
                "where arrivals outran the plan"
            )
            stood = int(mine.get("surge_standin_vpods", 0))
            if stood:
                s += f", {fmt(stood)} of them stand-ins of another configuration where the group's own had no room"
        s += guard_expected_text((plan.get("totals") or {}).get("guard_chip_hours"), surged)
        parts.append(s + " [replay](#replay)")
    fe = forecast_errors(plan)
    if rolling and not fe.empty:
        short = fe.sort_values(["short", "epoch", "bucket"], ascending=[False, True, True], kind="mergesort").iloc[0]
        tot = fe.groupby("epoch")[["forecast", "actual"]].sum()
        err = (tot["forecast"] - tot["actual"]).abs()
        ape = (err / tot["actual"].where(tot["actual"] > 0)).dropna()
        mape = pct(ape.mean() if len(ape) else math.nan)
        s = f"the {meta.get('forecast')} forecast misses the epochs' total demand by {mape} on average"
        if short["short"] > 0:
            s += (
                f", at worst {fmt(short['short'])} req/s short for {short['bucket']} at "
                f"{clock(int(short['epoch']) * epoch_s)}"
            )
        parts.append(s + " [demand per epoch](#epochs)")
    uns = float(plan["totals"].get("unserved_rps") or 0.0)
    parts.append(
        (f"{fmt(uns)} req/s of planned demand left unserved" if uns > 0 else "no planned demand left unserved")
        + " [per epoch](#epochs)"
    )
    gap = plan.get("gap")
    if gap is not None and math.isfinite(float(gap)):
        against = "the horizon's LP-relaxation bound" if "bound" in meta else "the solver's bound"
        parts.append(f"gap {pct(gap)} against {against} [what was solved](#solved)")
    if sweep:
        parts.append(sweep_risk(sweep))
    else:
        parts.append(
            "no sweep in this report (`neuscale-opt sweep`, then `plan --sweep DIR`, says which parameter "
            "flips the decision)"
        )
    return "; ".join(parts)


def _io_tokens_per_joule(replayed: dict) -> float:
    """Input + output tokens of the requests a replay served per joule: the planned side's
    ``tokens_per_j`` counts both (of the mean demand)."""
    energy = float(replayed.get("energy_j") or 0.0)
    tokens = float(replayed.get("tokens_in", math.nan)) + float(replayed.get("tokens_out", math.nan))
    return tokens / energy if energy > 0 else math.nan


def _stopped_text(statuses: pd.Series, what: str) -> str:
    """Which limit stopped how many solves, in :data:`~neuscale_opt.alloc.solution.STOPPED_BY`'s
    words ("" when none stopped at a limit)."""
    counts = {s: int((statuses == s).sum()) for s in STOPPED_BY}
    return "; ".join(f"{n} {what}{'s' if n != 1 else ''} {STOPPED_BY[s]}" for s, n in counts.items() if n)


def _solved_section(plan, solution, meta, rolling, baselines, epoch_s, evaluation, mine) -> Section:
    text = []
    eps = [e for e in plan.get("epochs") or [] if isinstance(e, dict) and "epoch" in e]
    statuses = pd.Series([e.get("status", "") for e in eps], dtype=object)
    counts = ", ".join(f"{n} {s}" for s, n in statuses.value_counts().sort_index().items() if s)
    stopped = _stopped_text(statuses, "window" if rolling else "epoch")
    if rolling:
        w = int(meta["window"])
        lead = float(meta.get("lead_s") or 0.0)
        made = (
            f"made {fmt(lead)} s before the epoch from the trace observed until then (its new vPods created then, "
            "ready when it starts: pre-warmed)"
            if lead > 0
            else "made from the epochs before it"
        )
        text.append(
            f"Rolling horizon: at each of the {len(eps)} epochs a {w}-epoch window ({fmt(w * epoch_s / 60)} min) "
            f"was solved on the `{meta['forecast']}` forecast {made}, with the state "
            "committed so far, and only its first epoch was committed; the auto-scaling rules of the horizon "
            f"model couple the epochs. Windows: {counts or 'none'}{'; ' + stopped if stopped else ''} (table below)."
        )
        if meta.get("reserve_forecast"):
            text.append(reserve_sentence(str(meta["reserve_forecast"]), eps, epoch_s))
    elif plan["method"] in ("milp", "greedy", "homogeneous", "unlimited"):
        text.append(
            f"Independent epochs: each of the {len(eps) or len(solution.epochs)} epochs was planned on its own "
            f"by `{plan['method']}`" + (f"; epochs: {counts}" if counts else "") + (f"; {stopped}." if stopped else ".")
        )
    else:
        text.append(f"Method `{plan['method']}` over the horizon; status {plan['status']}.")
    obj, bound, gap = plan.get("objective_value"), plan.get("bound"), plan.get("gap")
    unit = OBJECTIVE_KEYS[plan["objective"]][2]
    scale, shown = (1 / 3.6e6, "kWh") if unit == "J" else (1.0, unit)
    if "bound" in meta and bound is not None and math.isfinite(float(bound)):
        text.append(
            f"Status `{plan['status']}`: "
            + (
                "every window was solved to optimality, but "
                if set(statuses) <= {"optimal"}
                else f"some windows stopped at a limit ({stopped}; their best incumbent was committed), and "
            )
            + "a rolling plan is not proven optimal for "
            f"the horizon. Objective {fmt(float(obj) * scale)} {shown}; **bound** "
            f"{fmt(float(bound) * scale)} {shown} = the {meta['bound']}: one LP over all the epochs with "
            "the coupling rules and the inventory, on the demand the plan was made for; the gap "
            f"{pct(gap)} is what integrality and the window's myopia may cost at most, not a solver gap."
        )
        if float(bound) > float(obj) * (1 + 1e-6):
            text.append(
                f"The bound lies {pct(float(bound) / float(obj) - 1)} above the objective: the windows and the "
                "full-horizon model do not account the planned demand alike, so here the bound proves "
                "nothing and the gap reads 0."
            )
    elif bound is not None and math.isfinite(float(bound)):
        text.append(
            f"Status `{plan['status']}`"
            + (f" ({STOPPED_BY[plan['status']]})" if plan["status"] in STOPPED_BY else "")
            + f": objective {fmt(float(obj) * scale)} {shown}, solver bound "
            f"{fmt(float(bound) * scale)} {shown}, gap {pct(gap)}."
        )
    else:
        text.append(f"Status `{plan['status']}`: objective {fmt(float(obj) * scale)} {shown}; no bound.")
    if "oracle" in baselines:
        text.append(
            "Perfect-forecast reference: the `oracle` row of the [comparison](#compare) is planned the same way "
            "on each epoch's provisioned demand, known in advance; its distance to the plan is what forecasting "
            "costs (or saves, where the forecast sizes below the provisioned peaks and the replay still meets "
            "the SLO)."
        )
    elif rolling:
        text.append("Perfect-forecast reference: not planned (run `--method oracle` for the perfect-forecast plan).")
    verdict = "feasible" if evaluation.feasible else "VIOLATIONS: " + "; ".join(evaluation.violations[:5])
    text.append(
        f"Independent evaluation (constraints re-checked, energy and money accounted on the planned demand): {verdict}."
    )
    tables = []
    if mine is not None:
        t = plan["totals"]
        tables.append(
            Table(
                ["", "planned (evaluator, provisioned demand)", "replayed (trace, request by request)"],
                [
                    ["energy (kWh)", kwh(t.get("energy_j")), kwh(mine.get("energy_j"))],
                    ["cost (USD)", t.get("cost_usd"), mine.get("cost_usd")],
                    ["carbon (kgCO2e)", t.get("carbon_kg"), mine.get("carbon_kg")],
                    ["tokens (input + output) per joule", t.get("tokens_per_j"), _io_tokens_per_joule(mine)],
                    ["SLO attainment", "sized for the target", pct(mine.get("slo_attainment"))],
                ],
                anchor="planned-vs-replayed",
            )
        )
    after = []
    if mine is not None:
        after.append(
            "Planned vs replayed: the plan is sized and accounted for the provisioned demand (each epoch's "
            "rate as `workload.provision_for` says); the replay runs the trace's requests one by one through "
            "the plan's vPods (a new vPod loads its weights for the creation delay, 30 s by default: before "
            "its epoch starts where the instance's `[horizon] prewarm` says so, the default, else after the "
            "boundary; a class served by several vPod groups is split over them as the plan's rates say, and "
            "a request whose first token would come late there moves to another group's vPod that meets its "
            "targets), so it holds the vPods only while they exist and counts what was actually served. "
            "Tokens per joule count input "
            "and output tokens on both sides: planned, those of the mean demand; replayed, those of the "
            "requests served (the comparison below counts output tokens of requests that met their SLO, "
            "goodput)."
        )
    if rolling and eps:
        tables.append(
            Table(
                ["start", "epoch", "window status", "window gap", "window nodes"],
                [
                    [clock(i * epoch_s), e["epoch"], e.get("status"), e.get("window_gap"), e.get("window_nodes")]
                    for i, e in enumerate(eps)
                ],
                anchor="windows",
            )
        )
    return Section("What was solved", text=text, tables=tables, anchor="solved", after=after)


def _epoch_section(plan, by_epoch, dem, cpe, gens, epoch_s, detail, rolling) -> Section:
    be = by_epoch.set_index("epoch")
    rep = detail.get("by_epoch")
    rep = rep.set_index("epoch") if rep is not None and not rep.empty else None
    rows = []
    for i, d in enumerate(dem.itertuples()):
        t = d.epoch
        e = be.loc[t] if t in be.index else None
        rows.append(
            [
                clock(i * epoch_s),
                t,
                d.actual,
                *([d.planned] if rolling else []),
                d.mean,
                *[int(cpe.loc[t, c]) for c in gens],
                kwh(e["energy_j"]) if e is not None else None,
                float(e["cost_usd"]) / (epoch_s / 3600.0) if e is not None else None,
                e["carbon_kg"] if e is not None else None,
                e["unserved_rps"] if e is not None else None,
                *([pct(rep.loc[t, "slo_attainment"]) if t in rep.index else None] if rep is not None else []),
            ]
        )
    cols = [
        "start",
        "epoch",
        "demand req/s (provisioned)",
        *(["forecast req/s"] if rolling else []),
        "mean req/s",
        *[f"{c} chips" for c in gens],
        "kWh",
        "USD/h",
        "kgCO2e",
        "unserved req/s",
        *(["replayed SLO"] if rep is not None else []),
    ]
    return Section(
        "Per epoch",
        text=[
            "Demand, chips held per generation, energy, money (as an hourly rate), carbon and unserved demand "
            "per epoch; provisioned demand is the rate the plan must carry (`workload.provision_for`)"
            + (", forecast the demand the rolling window planned for" if rolling else "")
            + "."
        ],
        tables=[Table(cols, rows, anchor="epochs-table")],
        anchor="epochs",
    )


def _arrivals_words(coeffs: Any) -> str:
    """What arrivals the safe loads assumed: the classes' rate movement (AT4) and clumps of
    simultaneous requests (AT5) when they carry them."""
    b = coeffs.buckets
    if "rate_cv2" not in b.columns:
        words = "Poisson arrivals at the sized rate"
    else:
        c2 = b["rate_cv2"].astype(float)
        if not (c2 > 0).any():
            words = (
                "Poisson arrivals at the sized rate (the trace's rate shows no slow movement inside the sizing window)"
            )
        else:
            top = b.loc[c2.idxmax(), "bucket"]
            words = (
                "arrivals whose rate moves inside the sizing window as the trace's does "
                f"(squared coefficient of variation of its slow movement up to {c2.max():.3g}, class {top}; "
                "formulations/allocation.md AT4)"
            )
    if "clump_sizes" in b.columns:
        means = [mean_clump(law) for law in b["clump_sizes"]]
        i = max(range(len(means)), key=means.__getitem__)
        words += (
            f", in clumps of requests recorded at one instant as the trace's are (mean clump up to {means[i]:.3g} "
            f"requests, class {b['bucket'].iloc[i]}; split over a group's vPods; formulations/allocation.md AT5)"
        )
    return words


def _replay_section(detail: dict, target: float, arrivals: str = "") -> Section:
    tables = []
    bb = detail.get("by_bucket")
    if bb is not None and not bb.empty:
        tables.append(
            Table(
                [
                    "class",
                    "requests",
                    "served",
                    "SLO attainment",
                    "TTFT attainment",
                    "TPOT attainment",
                    "p99 TTFT (s)",
                    "p99 TPOT (s)",
                ],
                [
                    [
                        r["bucket"],
                        int(r["requests"]),
                        int(r["served"]),
                        pct(r["slo_attainment"]),
                        pct(r["ttft_attainment"]),
                        pct(r["tpot_attainment"]),
                        r["p99_ttft_s"],
                        r["p99_tpot_s"],
                    ]
                    for _, r in bb.iterrows()
                ],
                anchor="replay-classes",
            )
        )
    return Section(
        "Replay",
        text=[
            "The plan replayed against the instance's trace, per class (per epoch: [Per epoch](#epochs))"
            + (f"; the safe loads were sized for {pct(target)} attainment" if math.isfinite(target) else "")
            + (f" under {arrivals}" if arrivals and math.isfinite(target) else "")
            + "."
        ],
        tables=tables,
        anchor="replay",
    )


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


def _with_guard(totals: dict, hours: float) -> str:
    """The plan's costs with the surge guard's vPods the evaluator expects on the demand that came
    (``guard_cost_usd``, ``guard_energy_j`` of a schedule's totals; formulations/horizon.md, "The
    guard, as run"); '' where it expects none."""
    usd = float(totals.get("guard_cost_usd", 0.0) or 0.0)
    joules = float(totals.get("guard_energy_j", 0.0) or 0.0)
    if usd <= 0 or not hours:
        return ""
    return (
        f" (with the surge guard's vPods the evaluator expects on the demand that came: "
        f"{fmt((float(totals.get('cost_usd', 0.0)) + usd) / hours)} USD/h, "
        f"{fmt(kwh(float(totals.get('energy_j', 0.0)) + joules))} kWh)"
    )


def guard_expected_text(chip_hours: Any, surged: int) -> str:
    """The evaluator's estimate of the surge guard on the demand that came (a schedule's
    ``guard_chip_hours``, ``formulations/horizon.md``, "The guard, as run"), beside what the replay's
    guard did; '' for a plan without the estimate or where neither added any."""
    if chip_hours is None or not math.isfinite(float(chip_hours)) or (float(chip_hours) <= 0 and not surged):
        return ""
    return (
        ("" if surged else "; the replay's surge guard added no vPod")
        + f" (the evaluator expected {fmt(float(chip_hours))} guard chip-hours on the demand that came: "
        'formulations/horizon.md, "The guard, as run")'
    )


def reserve_sentence(forecaster: str, eps: list[dict], epoch_s: float) -> str:
    """What the guard reserve of a rolling plan asked and kept (the epochs' ``reserve_rps`` and
    ``reserve_kept_rps``, ``formulations/horizon.md``, "Guard reserve")."""
    asked = {int(e["epoch"]): sum(e.get("reserve_rps", {}).values()) for e in eps}
    kept = {int(e["epoch"]): sum(e.get("reserve_kept_rps", {}).values()) for e in eps}
    text = (
        "Guard reserve: beside the vPods planned for that forecast, each window kept room in the fleet for the "
        f"`{forecaster}` forecast (within each held group's growth limit), which the surge guard grows into where "
        'the demand comes in above the plan (formulations/horizon.md, "Guard reserve")'
    )
    total = sum(asked.values())
    if total <= 0:
        return text + f"; the `{forecaster}` forecast was never above the plan's, so no room was asked."
    short = [t for t in sorted(asked) if asked[t] - kept[t] > 1e-6 * max(asked[t], 1.0)]
    text += f": room for {fmt(sum(kept.values()))} of the {fmt(total)} req/s asked, summed over the epochs"
    if short:
        text += "; short, for want of room in the fleet or within the groups' growth limit, at " + ", ".join(
            f"{clock(t * epoch_s)} ({fmt(kept[t])} of {fmt(asked[t])})" for t in short
        )
    return text + "."
