"""``neuscale-opt evaluate PLAN.json``: any plan file re-checked independently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuscale_opt.cli import main

INSTANCES = Path(__file__).resolve().parents[2] / "instances"
SMALL = str(INSTANCES / "small.toml")


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("ev") / "plan.json"
    assert main(["plan", SMALL, "--json", str(p), "--quiet"]) == 0
    return p


def test_a_plan_from_the_planner_is_feasible_and_agrees(plan_file, capsys):
    capsys.readouterr()
    assert main(["evaluate", str(plan_file), "--instance", SMALL, "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["feasible"] and out["violations"] == []
    # energy: the evaluator charges weight streaming at each group's own load (formulation E8), the
    # MILP at the design load of a full vPod, so the evaluated objective is never below the claim
    assert out["objective_value"] >= out["claimed_objective_value"] * (1 - 1e-6)


def test_a_cost_plan_agrees_with_its_claim(tmp_path, capsys):
    p = tmp_path / "cost.json"
    assert main(["plan", SMALL, "--objective", "cost", "--json", str(p), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(p), "--instance", SMALL, "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["feasible"]
    assert out["objective_value"] == pytest.approx(out["claimed_objective_value"], rel=1e-6)


def test_a_plan_from_elsewhere_without_derived_keys_is_checked(plan_file, tmp_path, capsys):
    d = json.loads(plan_file.read_text())
    for r in d["allocations"]:
        for k in ("vpod_type", "config_id", "vpod_group"):
            r.pop(k)
    f = tmp_path / "ext.json"
    f.write_text(json.dumps({"allocations": d["allocations"]}))
    assert main(["evaluate", str(f), "--instance", SMALL]) == 0


def test_a_tampered_plan_exits_1_with_its_violations(plan_file, tmp_path, capsys):
    d = json.loads(plan_file.read_text())
    d["allocations"][0]["rate_rps"] *= 100  # far beyond the group's capacity
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    capsys.readouterr()
    assert main(["evaluate", str(f), "--instance", SMALL, "--json", "-"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert not out["feasible"] and any("exceeds" in v for v in out["violations"])


@pytest.mark.parametrize(
    "content, needle",
    [("{", "malformed JSON"), ('{"allocations": [{"epoch": 0}]}', "allocations[0]: missing bucket")],
)
def test_bad_plan_files_are_exit_2(tmp_path, capsys, content, needle):
    f = tmp_path / "p.json"
    f.write_text(content)
    assert main(["evaluate", str(f), "--instance", SMALL]) == 2
    err = capsys.readouterr().err
    assert needle in err and str(f) in err and err.count("\n") == 1
