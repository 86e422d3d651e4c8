"""Solver options: --save-lp/--save-mps, --solver-log, --threads, --mip-gap and the time-limit scope."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMALL = str(ROOT / "instances" / "small.toml")


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_save_lp_and_mps_write_the_solved_model(tmp_path, capsys):
    lp, mps = tmp_path / "m.lp", tmp_path / "m.mps"
    code, out, err = run(capsys, "plan", SMALL, "--save-lp", lp, "--save-mps", mps, "--json", "-", "--quiet")
    assert code == 0, err
    plan = json.loads(out)
    text = lp.read_text()
    # the LP names the formulation's components (symbolic labels) and minimises the objective
    assert text.startswith("\\* Source Pyomo model name=allocation_epoch_0") and "\nmin \n" in text
    assert "n_vpods" in text and "total_objective" in text
    assert "ROWS" in mps.read_text() and "COLUMNS" in mps.read_text()
    # the small instance is one epoch: one solve, one file each; none left over in the folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.lp", "m.mps"]
    assert plan["status"] == "optimal"


def test_solver_log_goes_to_stderr_and_json_stays_clean(capsys):
    code, out, err = run(capsys, "plan", SMALL, "--solver-log", "--json", "-", "--quiet")
    assert code == 0
    json.loads(out)  # stdout is the JSON alone
    assert "HiGHS" in err


def test_solver_flags_reach_the_options_and_the_provenance(capsys):
    code, out, err = run(
        capsys,
        "plan",
        SMALL,
        "--threads",
        "2",
        "--mip-gap",
        "0.01",
        "--time-limit",
        "7",
        "--time-limit-scope",
        "total",
        "--node-limit",
        "123",
        "--json",
        "-",
        "--quiet",
    )
    assert code == 0, err
    opts = json.loads(out)["provenance"]["options"]
    assert (opts["threads"], opts["mip_gap"], opts["time_limit_s"], opts["time_limit_scope"]) == (2, 0.01, 7.0, "total")
    assert opts["node_limit"] == 123


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--threads", "0"),
        ("--mip-gap", "1.5"),
        ("--time-limit", "inf"),
        ("--time-limit", "-1"),
        ("--node-limit", "0"),
        ("--node-limit", "1.5"),
        ("--node-limit", "2147483648"),
    ],
)
def test_bad_solver_flags_are_one_line_errors(capsys, flag, value):
    code, _, err = run(capsys, "plan", SMALL, flag, value)
    assert code == 2 and err.count("\n") == 1 and flag in err and "(see neuscale-opt plan --help)" in err


# ----------------------------------------------------------------------------------------------
# the time-limit scope, honoured by the epoch and the rolling planners
# ----------------------------------------------------------------------------------------------
def _coeffs(epochs: int):
    rows = [vpod("x", "A", rate=10, static_w=100, chips=1), vpod("y", "A", rate=25, static_w=300, chips=2)]
    return make_coefficients(
        rows, {(t, "A"): 8.0 + 7 * t for t in range(epochs)}, inventory={"x": 6, "y": 8}, epoch_s=300.0, util_cap=1.0
    )


def _record(monkeypatch, module) -> list[tuple[float | None, float | None]]:
    seen: list[tuple[float | None, float | None]] = []
    real = module.solve_model

    def spy(m, options):
        seen.append((options.deadline, options.solve_time_limit()))
        return real(m, options)

    monkeypatch.setattr(module, "solve_model", spy)
    return seen


def _record_forms(monkeypatch, seen: list[tuple[float | None, float | None]]) -> None:
    """Also the windows a rolling plan re-solves from a compiled model (``horizon.persistent``)."""
    import neuscale_opt.horizon.persistent as persistent

    real = persistent.solve_form

    def spy(form, options):
        seen.append((options.deadline, options.solve_time_limit()))
        return real(form, options)

    monkeypatch.setattr(persistent, "solve_form", spy)


@pytest.mark.parametrize("scope", ["per-solve", "per-window", "total"])
def test_rolling_planner_honours_the_scope(monkeypatch, scope):
    import neuscale_opt.horizon.rolling as rolling
    from neuscale_opt.horizon import HorizonParams, plan_rolling

    seen = _record(monkeypatch, rolling)
    _record_forms(monkeypatch, seen)
    opts = PlanOptions(objective="energy", time_limit_s=50.0, time_limit_scope=scope)
    sol = plan_rolling(_coeffs(4), opts.start_budget("total"), HorizonParams(), "oracle", window=2)
    assert sol.has_plan and len(seen) == 4  # one solve per window
    deadlines = [d for d, _ in seen]
    limits = [t for _, t in seen]
    assert all(0 < t <= 50.0 for t in limits)
    if scope == "per-solve":
        assert deadlines == [None] * 4 and limits == [50.0] * 4
    elif scope == "per-window":
        assert None not in deadlines and deadlines == sorted(deadlines) and len(set(deadlines)) == 4
    else:
        assert None not in deadlines and len(set(deadlines)) == 1
        assert limits == sorted(limits, reverse=True)  # each window gets what is left


@pytest.mark.parametrize("scope", ["per-solve", "per-window", "total"])
def test_epoch_planner_honours_the_scope(monkeypatch, scope):
    import neuscale_opt.alloc.plan as alloc_plan

    seen = _record(monkeypatch, alloc_plan)
    opts = PlanOptions(objective="energy", time_limit_s=50.0, time_limit_scope=scope)
    sol = alloc_plan.plan(_coeffs(3), opts.start_budget("total"), "milp")
    assert sol.status == "optimal" and len(seen) == 3
    deadlines = [d for d, _ in seen]
    if scope == "per-solve":
        assert deadlines == [None] * 3
    elif scope == "per-window":
        assert len(set(deadlines)) == 3 and None not in deadlines
    else:
        assert len(set(deadlines)) == 1 and None not in deadlines


def test_a_spent_budget_leaves_a_millisecond():
    opts = PlanOptions(time_limit_s=5.0, time_limit_scope="total")
    spent = opts.start_budget("total").replace(deadline=0.0)  # a deadline long past
    assert spent.solve_time_limit() == pytest.approx(1e-3)
    assert opts.start_budget("per-window") is opts  # another scope's start leaves it alone
    assert spent == opts  # the deadline is a budget, not a setting: options still compare equal
