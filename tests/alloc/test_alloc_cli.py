"""The ``plan`` and ``import-melange`` commands: JSON contract and exit codes."""

from __future__ import annotations

import json

import pytest
from alloc_support import INSTANCES, ROOT, run_cli

REQUIRED = {
    "status",
    "method",
    "objective",
    "objective_value",
    "bound",
    "gap",
    "solve_seconds",
    "totals",
    "allocations",
}
ROW_KEYS = {"epoch", "bucket", "phase", "chip", "shape", "chips_per_vpod", "n_vpods", "rate_rps"}


def test_plan_json_contract():
    code, out, err = run_cli(["plan", str(INSTANCES / "two_gens.toml"), "--json", "-"])
    assert code == 0, err
    d = json.loads(out)
    assert REQUIRED <= set(d)
    assert {"energy_j", "cost_usd", "carbon_kg", "chips_by_version", "unserved_rps"} <= set(d["totals"])
    assert d["status"] == "optimal" and d["method"] == "milp" and d["objective"] == "energy"
    assert d["objective_value"] == pytest.approx(84600.0)
    assert d["totals"]["energy_j"] == pytest.approx(84600.0)
    assert d["totals"]["chips_by_version"] == {"new": 2, "old": 4}
    assert all(ROW_KEYS <= set(r) for r in d["allocations"])
    assert sum(r["rate_rps"] for r in d["allocations"] if r["bucket"] == "A") == pytest.approx(12.0)


@pytest.mark.parametrize(
    ("method", "objective", "value"),
    [("greedy", "energy", 84800.0), ("unlimited", "energy", 43600.0), ("milp", "cost", 7 / 36)],
)
def test_plan_methods_and_objective_override(method, objective, value, tmp_path):
    dest = tmp_path / "plan.json"
    code, out, err = run_cli(
        [
            "plan",
            str(INSTANCES / "two_gens.toml"),
            "--method",
            method,
            "--objective",
            objective,
            "--time-limit",
            "10",
            "--json",
            str(dest),
        ]
    )
    assert code == 0, err
    d = json.loads(dest.read_text())
    assert d["method"] == method and d["objective_value"] == pytest.approx(value)
    assert "chips by generation" in out


def test_plan_infeasible_exit_1_with_one_line_diagnosis(tmp_path):
    text = (INSTANCES / "oversubscribed.toml").read_text().replace("allow_unserved = true", "allow_unserved = false")
    path = tmp_path / "strict.toml"
    path.write_text(text)
    code, out, err = run_cli(["plan", str(path), "--json", "-"])
    assert code == 1
    assert json.loads(out)["status"] == "infeasible"
    line = err.strip()
    assert "\n" not in line and "'chat'" in line and "short by 10 req/s" in line and "gen1" in line


def test_plan_partial_plan_reports_unserved():
    code, out, _ = run_cli(["plan", str(INSTANCES / "oversubscribed.toml"), "--json", "-"])
    assert code == 0
    d = json.loads(out)
    assert d["totals"]["unserved_rps"] == pytest.approx(10.0)
    assert d["unserved"] == [{"epoch": 0, "bucket": "chat", "unserved_rps": 10.0}]


def test_bad_input_exit_2(tmp_path):
    code, _, err = run_cli(["plan", str(tmp_path / "missing.toml")])
    assert code == 2 and "missing.toml" in err
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "gpu_info": {"X": {"cost": 1, "tputs": [[1]]}},
                "workload_distribution": [[0.5, 0.5]],
                "total_request_rate": 1,
            }
        )
    )
    code, _, err = run_cli(["plan", str(bad)])
    assert code == 2 and "bad.json" in err and "gpu_info.X.tputs" in err
    code, _, err = run_cli(["plan", str(INSTANCES / "two_gens.toml"), "--method", "magic"])
    assert code == 2


def test_import_melange_round_trip(tmp_path):
    out_toml = tmp_path / "m.toml"
    code, _, err = run_cli(["import-melange", str(INSTANCES / "melange_example.json"), "-o", str(out_toml)])
    assert code == 0, err
    assert "[[profile.accelerators]]" in out_toml.read_text()
    code, out, err = run_cli(["plan", str(out_toml), "--json", "-"])
    assert code == 0, err
    d = json.loads(out)
    assert d["objective"] == "cost" and d["variant"] == "pooled"
    # the exact continuous-share optimum (by hand: the A100 alone carries 1.125 vPods of load; 5 req/s
    # of in1_out0 on one A10G (5 req/s) lift 0.125 of it): 3.67 + 1.01; Mélange's S = 1 answer is 6.70
    assert d["objective_value"] == pytest.approx(4.68)
    assert d["totals"]["chips_by_version"] == {"A100-80GB": 1, "A10G": 1}
    code, out2, _ = run_cli(["plan", str(INSTANCES / "melange_example.json"), "--json", "-"])
    assert json.loads(out2)["allocations"] == d["allocations"]


def test_plan_roofline_instance():
    small = ROOT / "instances" / "small.toml"
    if not small.exists():
        pytest.skip("roofline instance not present")
    for method in ("milp", "greedy", "homogeneous"):
        code, out, err = run_cli(["plan", str(small), "--method", method, "--json", "-"])
        assert code == 0, err
        assert json.loads(out)["status"] in ("optimal", "feasible")


@pytest.mark.parametrize("extra", [[], ["--slice-factor", "1"]])
def test_plan_melange_json_solves_each_answer_once(monkeypatch, extra):
    """``plan CONFIG.json`` prints both answers (exact 4.68 USD/h by hand, Mélange's published 6.70
    at slice factor 1) and solves each once: the plan it just made is one of them."""
    from neuscale_opt.alloc import plan as plan_mod

    calls: list[object] = []
    real = plan_mod.solve_milp

    def counting(coeffs, options=None, *a, **k):
        calls.append(options.slice_factor if options is not None else None)
        return real(coeffs, options, *a, **k)

    monkeypatch.setattr(plan_mod, "solve_milp", counting)
    code, out, err = run_cli(["plan", str(INSTANCES / "melange_example.json"), *extra])
    assert code == 0, err
    assert "exact continuous-share optimum: 4.68 USD/h" in out
    assert "Mélange slice factor 1: 6.7 USD/h" in out
    assert sorted(calls, key=str) == sorted([None, 1], key=str)
