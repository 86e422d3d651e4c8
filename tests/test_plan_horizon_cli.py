"""``neuscale-opt plan`` dispatches to the horizon planner for horizon methods and windows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuscale_opt.cli import main

INSTANCES = Path(__file__).resolve().parents[1] / "instances"


def test_autoscaler_plan_covers_every_epoch(capsys):
    code = main(
        ["plan", str(INSTANCES / "azure-conv.toml"), "--method", "neuscale-autoscaler", "--json", "-", "--quiet"]
    )
    plan = json.loads(capsys.readouterr().out)
    assert code == 0
    assert plan["method"] == "neuscale-autoscaler" and plan["status"] == "feasible"
    assert sorted({r["epoch"] for r in plan["allocations"]}) == list(range(12))
    assert [e["epoch"] for e in plan["epochs"]] == list(range(12))
    assert {"forecast_rps", "actual_rps", "chips_by_generation", "energy_j", "cost_usd"} <= set(plan["epochs"][0])


def test_rolling_milp_is_feasible_with_the_uncoupled_bound(capsys):
    code = main(["plan", str(INSTANCES / "azure-conv.toml"), "--window", "2", "--json", "-", "--quiet"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0 and plan["status"] == "feasible"
    # the bound is the independent epoch MILPs' optimum on the demand the plan covered: below the plan
    assert 0 < plan["bound"] <= plan["objective_value"] * (1 + 1e-9)
    assert plan["gap"] == pytest.approx((plan["objective_value"] - plan["bound"]) / plan["objective_value"])
    forecast = [(e["epoch"], b, v) for e in plan["epochs"] for b, v in e["forecast_rps"].items()]
    assert forecast
    assert all(abs(e["window_gap"]) <= 1e-6 for e in plan["epochs"] if e["epoch"] > 0)


def test_bad_window_is_exit_2(capsys):
    assert main(["plan", str(INSTANCES / "azure-conv.toml"), "--window", "0", "--quiet"]) == 2
    assert "--window" in capsys.readouterr().err


def test_serving_mode_can_be_chosen_per_plan(capsys):
    code = main(["plan", str(INSTANCES / "small.toml"), "--serving", "disaggregated", "--json", "-", "--quiet"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0 and plan["serving"] == "disaggregated"
    assert {r["phase"] for r in plan["allocations"]} == {"prefill", "decode"}


def test_evaluate_checks_the_coupling_rules_of_a_horizon_plan(tmp_path, capsys):
    inst = str(INSTANCES / "azure-conv.toml")
    plan_path = tmp_path / "h.json"
    assert main(["plan", inst, "--window", "3", "--json", str(plan_path), "--quiet"]) == 0
    assert main(["evaluate", str(plan_path), "--instance", inst]) == 0
    d = json.loads(plan_path.read_text())
    row = next(r for r in d["allocations"] if r["epoch"] == 5)
    row["n_vpods"] *= 6  # six times the vPods of the previous epoch: beyond the 2x growth rule
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    capsys.readouterr()
    assert main(["evaluate", str(bad), "--instance", inst, "--json", "-"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert any("grows from" in v and "limit 2 x" in v for v in out["violations"])


def test_reports_of_horizon_plans_evaluate_them_as_schedules(tmp_path):
    out = tmp_path / "rep"
    assert main(["plan", str(INSTANCES / "azure-conv.toml"), "--window", "3", "--out", str(out), "--quiet"]) == 0
    text = (out / "report.md").read_text()
    assert "Independent evaluation (constraints re-checked, energy and money accounted" in text
    assert "on the planned demand): feasible." in text
    assert json.loads((out / "plan.json").read_text())["epochs"][3]["forecast_rps"]


def test_reserve_forecast_flag_plans_a_schedule_with_the_guard_reserve(capsys, monkeypatch):
    from neuscale_opt.horizon import plan as horizon_plan

    seen = []
    plan_rolling = horizon_plan.plan_rolling

    def spy(coeffs, options, params, *args, **kw):
        seen.append(params.reserve_forecast)
        return plan_rolling(coeffs, options, params, *args, **kw)

    monkeypatch.setattr(horizon_plan, "plan_rolling", spy)
    # azure-conv.toml has no [horizon] table: the flag asks for a horizon plan, as --forecast does
    argv = ["plan", str(INSTANCES / "azure-conv.toml"), "--forecast", "quantile", "--json", "-", "--quiet"]
    code = main([*argv, "--reserve-forecast", "last-peak"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0 and plan["status"] == "feasible"
    assert seen == ["last-peak"]
    assert "--reserve-forecast" in plan["provenance"]["command"]
    assert main([*argv, "--reserve-forecast", "none"]) == 0
    capsys.readouterr()
    assert seen == ["last-peak", None]


def test_reserve_forecast_on_independent_epochs_is_exit_2(capsys):
    code = main(["plan", str(INSTANCES / "default.toml"), "--independent", "--reserve-forecast", "last-peak"])
    err = capsys.readouterr().err
    assert code == 2 and "--independent" in err and "--reserve-forecast" in err and err.count("\n") == 1
