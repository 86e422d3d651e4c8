"""The report's first screen decides, with numbers equal to ``plan.json`` and ``replays.json``.

Every expected value here is derived from the JSON files written beside the report (or from the
instance's own figures), never from the report's code: chips at peak from the allocation rows,
cost per hour from the per-epoch costs and the three one-minute epochs, replayed figures from the
replay totals. The report rounds to three significant digits, so values are compared within half
a unit of the third digit.
"""

from __future__ import annotations

import json
import tomllib
from collections import defaultdict

import pytest
from conftest import ROOT, html_tables, md_tables, run_plan

from neuscale_opt.report.fmt import parse

HOURS = 3 * 60.0 / 3600.0  # three one-minute epochs
REL = 5e-3  # half a unit of the third significant digit


def close(cell: str, value: float) -> bool:
    got = parse(cell)
    if cell.endswith("%"):
        return abs(got - value) <= 1.01e-4 if value >= 0.99 else abs(got - value) <= REL * abs(value)
    return got == pytest.approx(value, rel=REL, abs=1e-12)


@pytest.fixture(scope="module")
def files(tiny_report):
    out, stdout, _ = tiny_report
    return {
        "plan": json.loads((out / "plan.json").read_text()),
        "replays": json.loads((out / "replays.json").read_text()),
        "md": (out / "report.md").read_text(),
        "html": (out / "report.html").read_text(),
        "stdout": stdout,
        "out": out,
    }


def peak_chips(plan: dict) -> dict[str, int]:
    """Per generation: the most chips any epoch holds (vPod groups counted once per epoch)."""
    held: dict[tuple[int, str], int] = defaultdict(int)
    seen = set()
    for r in plan["allocations"]:
        k = (r["epoch"], r["vpod_group"])
        if k not in seen:
            seen.add(k)
            held[(r["epoch"], r["chip"])] += r["chips_per_vpod"] * r["n_vpods"]
    out: dict[str, int] = defaultdict(int)
    for (_, c), n in held.items():
        out[c] = max(out[c], n)
    return dict(out)


def glance(tables) -> dict[str, dict[str, str]]:
    t = next(t for t in tables if t and "at a glance" in t[0])
    return {r["at a glance"]: r for r in t}


def test_title_names_the_instance_not_a_figure(files):
    assert files["md"].startswith("# Capacity plan: tiny-horizon\n")
    assert "<title>Capacity plan: tiny-horizon</title>" in files["html"]
    assert ".png" not in files["md"].splitlines()[0]


def test_glance_numbers_equal_plan_json_and_replay(files):
    plan, rp = files["plan"], files["replays"]
    g = glance(md_tables(files["md"]))
    peak = peak_chips(plan)
    assert peak == {c: n for c, n in plan["totals"]["chips_by_version"].items() if n}
    assert int(g["chips at peak, all generations"]["value"]) == sum(peak.values())
    for c, n in peak.items():
        assert int(g[f"chips at peak, {c}"]["value"]) == n
    cost = sum(e["cost_usd"] for e in plan["epochs"])
    assert close(g["cost per hour"]["value"], cost / HOURS) and g["cost per hour"]["unit"] == "USD/h"
    assert close(g["cost per day"]["value"], cost / HOURS * 24)
    assert close(g["energy over the horizon"]["value"], plan["totals"]["energy_j"] / 3.6e6)
    assert g["energy over the horizon"]["unit"] == "kWh"
    assert close(g["carbon over the horizon"]["value"], plan["totals"]["carbon_kg"])
    mine = rp["milp"]
    assert close(g["replayed SLO attainment"]["value"], mine["slo_met"] / mine["requests"])
    assert int(g["replayed goodput"]["value"].replace(",", "")) == mine["goodput_tokens_out"]
    assert close(g["replayed goodput per joule"]["value"], mine["goodput_tokens_out"] / mine["energy_j"])


def test_comparison_is_on_replayed_goodput_at_each_slo(files):
    plan, rp = files["plan"], files["replays"]
    comp = next(t for t in md_tables(files["md"]) if t and "goodput tokens/J" in t[0])
    assert [r["method"] for r in comp] == ["milp", "neuscale-autoscaler", "homogeneous-autoscaler", "oracle"]
    assert set(rp) == {r["method"] for r in comp}
    ref = rp["milp"]["energy_j"] / rp["milp"]["goodput_tokens_out"]
    for r in comp:
        x = rp[r["method"]]
        assert close(r["replayed SLO"], x["slo_met"] / x["requests"])
        assert int(r["goodput tokens"].replace(",", "")) == x["goodput_tokens_out"]
        assert close(r["goodput tokens/J"], x["goodput_tokens_out"] / x["energy_j"])
        assert close(r["goodput tokens/USD"], x["goodput_tokens_out"] / x["cost_usd"])
        assert close(r["energy per goodput token vs plan"], x["energy_j"] / x["goodput_tokens_out"] / ref)
    assert close(comp[0]["USD/h"], plan["totals"]["cost_usd"] / HOURS)
    # the words of the first screen name each alternative with its ratio and attainment
    first = files["md"].split("## What to deploy")[0]
    for r in comp[1:]:
        assert f"{r['method']} needs {r['energy per goodput token vs plan']} x the energy per goodput token" in first
        assert f"at {r['replayed SLO']} SLO attainment" in first


def test_planned_vs_replayed_counts_the_same_tokens_on_both_sides(files):
    plan, mine = files["plan"], files["replays"]["milp"]
    t = next(t for t in md_tables(files["md"]) if t and "planned (evaluator, provisioned demand)" in t[0])
    rows = {r[""]: r for r in t}
    both = rows["tokens (input + output) per joule"]
    assert close(both["planned (evaluator, provisioned demand)"], plan["totals"]["tokens"] / plan["totals"]["energy_j"])
    served = mine["tokens_in"] + mine["tokens_out"]
    assert served > mine["tokens_out"] > 0  # input tokens counted: not the output-only tokens_per_joule
    assert close(both["replayed (trace, request by request)"], served / mine["energy_j"])
    assert close(rows["energy (kWh)"]["replayed (trace, request by request)"], mine["energy_j"] / 3.6e6)


def test_deployment_per_epoch_equals_the_allocation_rows(files):
    plan = files["plan"]
    dep = next(t for t in md_tables(files["md"]) if t and "chips/slice" in t[0])
    want: dict[tuple[str, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    seen = set()
    for r in plan["allocations"]:
        if (r["epoch"], r["vpod_group"]) not in seen:
            seen.add((r["epoch"], r["vpod_group"]))
            want[(r["chip"], r["shape"])][r["epoch"]] += r["n_vpods"]
    assert {(r["generation"], r["slice"]) for r in dep} == set(want)
    for r in dep:
        per = want[(r["generation"], r["slice"])]
        # columns headed by the epochs' clock times: three one-minute epochs
        assert [int(r[h]) for h in ("0:00", "0:01", "0:02")] == [per.get(t, 0) for t in range(3)]
        assert int(r["max vPods"]) == max(per.values())


def test_inventory_shows_nominal_and_deliverable_and_the_calibration_origin(files, tiny_report):
    inst = tomllib.loads(tiny_report[2].read_text())
    inv = {r["generation"]: r for r in next(t for t in md_tables(files["md"]) if t and "deliverable chip-eq" in t[0])}
    # healthy = pod chips less failed ones; deliverable = healthy x availability (the TOML's derate)
    assert int(inv["tpu-v5p"]["healthy chips"]) == 4 * 4 * 4 - 1
    assert parse(inv["tpu-v6e"]["nominal chip-eq"]) == 16
    assert parse(inv["tpu-v6e"]["deliverable chip-eq"]) == 16 * inst["fleet"][1]["derate"]["availability"]
    assert parse(inv["tpu-v5p"]["deliverable chip-eq"]) == 63
    peak = peak_chips(files["plan"])
    for c, r in inv.items():
        assert int(r["chips at peak"]) == peak.get(c, 0)
        assert int(r["unused at peak"]) == int(r["healthy chips"]) - peak.get(c, 0)
        if int(r["unused at peak"]) > 0:
            assert r["why"] and r["why"] != "fully used at the peak"
    shipped = tomllib.loads((ROOT / "neuscale_opt" / "data" / "calibration" / "default.toml").read_text())
    for c, r in inv.items():
        assert r["roofline calibration"] == shipped["chips"][c].get("from", "fit")
    prior = sorted(c for c in inv if "family prior" in shipped["chips"][c].get("from", "fit"))
    if prior:
        assert "**Calibration**: the roofline of " + ", ".join(prior) in files["md"]


def test_what_was_solved_names_the_window_the_forecaster_and_the_bound(files):
    md, plan = files["md"], files["plan"]
    solved = md.split("## What was solved")[1].split("\n## ")[0]
    assert "2-epoch window" in solved and "`last-peak` forecast" in solved
    assert "**bound**" in solved and "not a solver gap" in solved
    assert "LP relaxation of the full-horizon model" in solved
    windows = next(t for t in md_tables(solved) if t and "window status" in t[0])
    assert [r["window status"] for r in windows] == [e["status"] for e in plan["epochs"]]
    assert "oracle" in solved and "what forecasting costs" in solved


def test_risks_carry_numbers_from_the_replay_and_the_forecast(files):
    plan, mine = files["plan"], files["replays"]["milp"]
    risks = next(p for p in files["md"].split("\n\n") if p.startswith("**Risks**"))
    missed = mine["requests"] - mine["slo_met"]
    assert f"{missed:,} of {mine['requests']:,} replayed requests" in risks
    # mean absolute error of the epochs' total forecast against the actual demand, by hand
    errs = []
    for e in plan["epochs"]:
        f, a = sum(e["forecast_rps"].values()), sum(e["actual_rps"].values())
        errs.append(abs(f - a) / a)
    cell = risks.split("total demand by ")[1].split(" on average")[0]
    assert close(cell, sum(errs) / len(errs))
    assert "[replay](#replay)" in risks and "[what was solved](#solved)" in risks


def test_every_link_of_the_html_has_a_target_and_md_equals_html(files):
    h = html_tables(files["html"])
    assert h.links and set(h.links) <= h.ids
    first = files["html"].split('<section id="decision">')[1].split("</section>")[0]
    assert first.count('href="#') >= 8  # every claim of the first screen links to its evidence
    md = glance(md_tables(files["md"]))
    assert {r["at a glance"]: r for r in h.tables["glance"]} == md
    assert h.tables["compare"] == next(t for t in md_tables(files["md"]) if t and "goodput tokens/J" in t[0])


def test_terminal_summary_is_short_and_ends_with_the_report_path(files):
    lines = files["stdout"].splitlines()
    assert lines[0].startswith("plan milp (pooled, colocated): feasible; rolling 2-epoch window on last-peak")
    assert "LP-relaxation bound" in lines[0]
    assert any(line.startswith("replayed: SLO attainment ") for line in lines)
    assert any("USD/h" in line for line in lines) and any("chips by generation" in line for line in lines)
    assert lines[-1] == f"report: {files['out'] / 'report.html'}"
    assert len(lines) <= 8 and not any("rate_rps" in line for line in lines)


def test_verbose_prints_the_allocation_table_and_quiet_only_the_status(tmp_path):
    small = str(ROOT / "instances" / "small.toml")
    code, verbose = run_plan(["plan", small, "--verbose"])
    assert code == 0 and "rate_rps" in verbose and "n_vpods" in verbose
    code, quiet = run_plan(["plan", small, "--quiet"])
    assert code == 0 and quiet.splitlines() == [
        "plan milp (pooled, colocated): optimal, gap 0 % against the solver's bound"
    ]


def test_a_baseline_the_evaluator_rejects_is_still_replayed(tiny_report, tmp_path, monkeypatch):
    # a reactive auto-scaler's capacity lags the demand it reacts to, so the evaluator may reject
    # its plan; it still runs, and the report must show what its replay measured (here the
    # auto-scaler's own plan, marked rejected as the evaluator would)
    import dataclasses

    from neuscale_opt import planning

    real = planning.plan_any

    def rejected(inst, coeffs, method, *a, **k):
        sol = real(inst, coeffs, method, *a, **k)
        if method == "neuscale-autoscaler":
            assert len(sol.allocations) > 0
            return dataclasses.replace(sol, status="infeasible", diagnosis="load exceeds held")
        return sol

    monkeypatch.setattr(planning, "plan_any", rejected)
    out = tmp_path / "report"
    code, _ = run_plan(["plan", str(tiny_report[2]), "--out", str(out), "--quiet"])
    assert code == 0
    rp = json.loads((out / "replays.json").read_text())
    before = json.loads((tiny_report[0] / "replays.json").read_text())
    # the same allocations replayed give the same totals as when the plan was not rejected
    assert rp["neuscale-autoscaler"] == before["neuscale-autoscaler"]
    md = (out / "report.md").read_text()
    comp = next(t for t in md_tables(md) if t and "goodput tokens/J" in t[0])
    row = next(r for r in comp if r["method"] == "neuscale-autoscaler")
    assert row["status"] == "infeasible" and row["replayed SLO"] not in ("", "–")
    assert "neuscale-autoscaler (the evaluator finds it infeasible) needs" in md.split("## What to deploy")[0]


def test_a_baseline_rejected_for_unserved_demand_says_how_much():
    # the first screen's sentence on a baseline the evaluator rejects because it plans demand
    # unserved (a generation too small for the traffic): the worst epoch's unserved rate, from the
    # evaluator's totals
    from types import SimpleNamespace

    from neuscale_opt.report.build import _comparison

    plan = {"method": "milp", "status": "optimal", "totals": {"energy_j": 100.0, "cost_usd": 1.0}}
    rp = {
        "milp": {"energy_j": 100.0, "goodput_tokens_out": 1000.0, "slo_attainment": 0.99},
        "homogeneous-autoscaler": {"energy_j": 150.0, "goodput_tokens_out": 900.0, "slo_attainment": 0.8},
        "neuscale-autoscaler": {"energy_j": 120.0, "goodput_tokens_out": 1000.0, "slo_attainment": 1.0},
    }
    short = SimpleNamespace(status="infeasible", runnable=True)
    lagging = SimpleNamespace(status="infeasible", runnable=True)
    baselines = {
        "homogeneous-autoscaler": (
            short,
            SimpleNamespace(totals={"energy_j": 140.0, "cost_usd": 1, "unserved_rps": 2.5}),
        ),
        "neuscale-autoscaler": (
            lagging,
            SimpleNamespace(totals={"energy_j": 120.0, "cost_usd": 1.0, "unserved_rps": 0}),
        ),
    }
    _table, words = _comparison(plan, baselines, rp, "energy_j", 1.0)
    rejected = (
        "homogeneous-autoscaler (the evaluator finds it infeasible: it plans 2.50 req/s unserved at its worst epoch)"
    )
    assert rejected in words
    # 150 J / 900 tokens against 100 J / 1000 tokens
    assert "needs 1.67 x the energy per goodput token at 80" in words
    assert "neuscale-autoscaler (the evaluator finds it infeasible) needs 1.20 x" in words


def test_risks_name_the_surge_guards_vpods():
    # the replay's surge guard added capacity: the risks say how much, from the replay totals
    from neuscale_opt.report.build import _risks

    plan = {"method": "milp", "epochs": [], "totals": {"unserved_rps": 0.0}}
    mine = {"requests": 1000, "slo_met": 990, "unserved": 0, "surge_vpods": 3, "surge_chip_hours": 17.6}
    text = _risks(plan, mine, {}, 0.99, 300.0, {}, rolling=False)
    assert "10 of 1,000 replayed requests" in text
    assert "surge guard added 3 vPods (17.6 chip-hours beyond the plan" in text
    assert "stand-in" not in text
    mine["surge_standin_vpods"] = 2  # two of them on another configuration: said so
    assert "where arrivals outran the plan, 2 of them stand-ins of another configuration" in _risks(
        plan, mine, {}, 0.99, 300.0, {}, rolling=False
    )
    mine.update(surge_vpods=0, surge_chip_hours=0.0, surge_standin_vpods=0)
    assert "surge guard" not in _risks(plan, mine, {}, 0.99, 300.0, {}, rolling=False)


def test_risks_set_the_evaluators_guard_estimate_beside_the_replays():
    # a schedule's totals carry the evaluator's estimate of the guard on the demand that came
    # (formulations/horizon.md, "The guard, as run"): the risks quote it beside what the guard did
    from neuscale_opt.report.build import _risks

    plan = {"method": "milp", "epochs": [], "totals": {"unserved_rps": 0.0, "guard_chip_hours": 4.8}}
    mine = {"requests": 1000, "slo_met": 990, "unserved": 0, "surge_vpods": 3, "surge_chip_hours": 4.95}
    text = _risks(plan, mine, {}, 0.99, 300.0, {}, rolling=True)
    assert "surge guard added 3 vPods (4.95 chip-hours" in text
    assert "the evaluator expected 4.80 guard chip-hours on the demand that came" in text
    # neither the guard nor the estimate: nothing said; a plan without the estimate: nothing said
    plan["totals"]["guard_chip_hours"] = 0.0
    mine.update(surge_vpods=0, surge_chip_hours=0.0)
    assert "evaluator expected" not in _risks(plan, mine, {}, 0.99, 300.0, {}, rolling=True)
    # the estimate without the guard in the replay: said so
    plan["totals"]["guard_chip_hours"] = 1.5
    assert "surge guard added no vPod (the evaluator expected 1.50 guard chip-hours" in _risks(
        plan, mine, {}, 0.99, 300.0, {}, rolling=True
    )
    del plan["totals"]["guard_chip_hours"]
    mine.update(surge_vpods=2, surge_chip_hours=1.0)
    assert "evaluator expected" not in _risks(plan, mine, {}, 0.99, 300.0, {}, rolling=True)


def test_costs_with_the_guard_the_evaluator_expects():
    # 100 USD and 36 MJ (10 kWh) of the plan over 2 h, 20 USD and 3.6 MJ (1 kWh) of expected guard
    from neuscale_opt.report.build import _with_guard

    totals = {"cost_usd": 100.0, "energy_j": 36e6, "guard_cost_usd": 20.0, "guard_energy_j": 3.6e6}
    text = _with_guard(totals, 2.0)
    assert "the evaluator expects on the demand that came: 60 USD/h, 11 kWh" in text
    assert _with_guard({**totals, "guard_cost_usd": 0.0}, 2.0) == ""
    assert _with_guard({"cost_usd": 100.0, "energy_j": 36e6}, 2.0) == ""
