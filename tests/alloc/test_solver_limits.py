"""The deterministic work limit (branch-and-bound nodes) and the wall-clock safety net.

The MILP whose node limit binds is a market-split instance (Cornuejols and Dawande): binary x with
``sum_j a_ij x_j + p_i - q_i = b_i`` and ``sum_i p_i + q_i`` minimised. Its LP relaxation is 0, and
an instance without an exact split (checked by brute force over all 2^n points) cannot be proven
optimal at the root: a search of a few nodes must stop at the limit. The brute-forced optimum is
the reference for the incumbent and the bound.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pyomo.environ as pyo
import pytest

from neuscale_opt.alloc.options import MAX_NODE_LIMIT, PlanOptions
from neuscale_opt.alloc.solution import JSON_STATUSES, STOPPED_BY, worst_status
from neuscale_opt.alloc.solve import STATUSES, solve_model
from neuscale_opt.errors import InputError

N, M = 16, 3


def market_split(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A market-split instance without an exact split (its brute-forced optimum is > 0)."""
    rng = np.random.default_rng(seed)
    while True:
        a = rng.integers(0, 100, size=(M, N))
        b = a.sum(axis=1) // 2
        if brute_force(a, b) > 0:
            return a, b


def brute_force(a: np.ndarray, b: np.ndarray) -> float:
    """min over x in {0,1}^n of sum_i |a_i x - b_i|, by enumeration (two halves, 2^(n/2) each)."""
    h = N // 2
    half = np.array(list(itertools.product((0, 1), repeat=h)))
    left = half @ a[:, :h].T  # (2^h, M)
    right = half @ a[:, h:].T
    return float(np.abs(left[:, None, :] + right[None, :, :] - b).sum(axis=2).min())


def model(a: np.ndarray, b: np.ndarray) -> pyo.ConcreteModel:
    m = pyo.ConcreteModel()
    m.J = pyo.RangeSet(0, a.shape[1] - 1)
    m.I = pyo.RangeSet(0, a.shape[0] - 1)
    m.x = pyo.Var(m.J, domain=pyo.Binary)
    m.p = pyo.Var(m.I, domain=pyo.NonNegativeReals)
    m.q = pyo.Var(m.I, domain=pyo.NonNegativeReals)
    m.split = pyo.Constraint(
        m.I, rule=lambda m, i: sum(int(a[i, j]) * m.x[j] for j in m.J) + m.p[i] - m.q[i] == int(b[i])
    )
    m.total_objective = pyo.Objective(expr=sum(m.p[i] + m.q[i] for i in m.I), sense=pyo.minimize)
    return m


@pytest.fixture(scope="module")
def instance():
    a, b = market_split(7)
    return a, b, brute_force(a, b)


def incumbent_value(res, a, b) -> float:
    """The objective of the returned x, recomputed from the data (the slacks are implied by x)."""
    x = np.array([round(res.values["x"][j]) for j in range(N)])
    assert all(abs(res.values["x"][j] - x[j]) < 1e-6 for j in range(N))  # integral
    return float(np.abs(a @ x - b).sum())


@pytest.mark.parametrize("backend", ["highs", "ortools"])
def test_node_limit_stops_with_a_valid_incumbent_and_the_right_gap(instance, backend):
    a, b, best = instance
    res = solve_model(model(a, b), PlanOptions(backend=backend, node_limit=5, time_limit_s=120.0))
    assert res.status == "work_limit" and res.stopped_by == "work_limit" and res.has_plan
    assert res.nodes >= 5
    # a valid incumbent: its own objective recomputed from x, never better than the brute-forced optimum
    assert res.objective == pytest.approx(incumbent_value(res, a, b), abs=1e-6)
    assert res.bound <= best + 1e-6 <= res.objective + 2e-6
    assert res.gap == pytest.approx((res.objective - res.bound) / abs(res.objective))
    assert res.gap > 0


def test_without_the_node_limit_the_search_proves_the_brute_forced_optimum(instance):
    a, b, best = instance
    res = solve_model(model(a, b), PlanOptions(node_limit=None, time_limit_s=120.0))
    assert res.status == "optimal" and res.stopped_by is None
    assert res.objective == pytest.approx(best, abs=1e-6)
    assert res.nodes > 5  # the limit of the test above did bind


def test_work_limit_is_deterministic_and_independent_of_the_clock(instance):
    a, b, _ = instance
    runs = [solve_model(model(a, b), PlanOptions(node_limit=40, time_limit_s=t)) for t in (1e6, 30.0, 1e6)]
    first = runs[0]
    assert first.status == "work_limit"
    for r in runs[1:]:
        assert (r.status, r.objective, r.bound, r.nodes, r.values) == (
            first.status,
            first.objective,
            first.bound,
            first.nodes,
            first.values,
        )


def test_the_clock_is_reported_as_the_wall_clock_limit():
    # 32 columns (the instance twice over) and a 1-ms clock: no search ends within it
    a, b = market_split(11)
    wide = np.concatenate([a, a], axis=1)
    res = solve_model(model(wide, wide.sum(axis=1) // 2 + 1), PlanOptions(node_limit=None, time_limit_s=1e-3))
    assert res.stopped_by == "time_limit"
    assert res.status in ("time_limit", "no_incumbent")


def test_statuses_are_one_list_everywhere():
    from neuscale_opt.sweep.analysis import PLAN_STATUSES

    assert set(STOPPED_BY) == {"work_limit", "time_limit"}
    assert set(STOPPED_BY) <= set(JSON_STATUSES) <= set(STATUSES)
    assert set(PLAN_STATUSES) == {"optimal", *STOPPED_BY}
    # the clock's verdict is worse than the work limit's (it may differ between machines)
    assert worst_status(["optimal", "work_limit", "feasible"]) == "work_limit"
    assert worst_status(["work_limit", "time_limit"]) == "time_limit"
    assert STOPPED_BY["work_limit"] == "stopped by the work limit (deterministic)"
    assert STOPPED_BY["time_limit"] == "stopped by the wall-clock limit (may differ between machines)"


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "10", MAX_NODE_LIMIT + 1, math.inf])
def test_bad_node_limits_are_refused(bad):
    with pytest.raises(InputError, match=r"^plan options: node_limit must be an integer in \[1, 2147483647\]"):
        PlanOptions(node_limit=bad)


# ----------------------------------------------------------------------------------------------
# where the limit that stopped a plan is visible: plan.json, the report
# ----------------------------------------------------------------------------------------------
def _rolling_plan(statuses: list[str], nodes: list[int]) -> dict:
    eps = [
        {"epoch": t, "status": s, "window_gap": 0.0 if s == "optimal" else 0.01, "window_nodes": n}
        for t, (s, n) in enumerate(zip(statuses, nodes, strict=True))
    ]
    return {
        "method": "milp",
        "status": worst_status(statuses),
        "objective": "cost",
        "objective_value": 10.0,
        "bound": 9.0,
        "gap": 0.1,
        "epochs": eps,
    }


def test_the_report_names_the_limit_of_each_window():
    from types import SimpleNamespace

    from neuscale_opt.report.build import _solved_section

    plan = _rolling_plan(["optimal", "work_limit", "work_limit", "time_limit"], [3, 100, 100, 57])
    meta = {"window": 2, "forecast": "last-peak", "bound": "LP relaxation"}
    ev = SimpleNamespace(feasible=True, violations=[])
    sec = _solved_section(plan, None, meta, True, {}, 300.0, ev, None)
    text = " ".join(sec.text)
    assert "2 windows stopped by the work limit (deterministic)" in text
    assert "1 window stopped by the wall-clock limit (may differ between machines)" in text
    table = next(t for t in sec.tables if "window nodes" in t.columns)
    assert [r[table.columns.index("window nodes")] for r in table.rows] == [3, 100, 100, 57]
    assert [r[table.columns.index("window status")] for r in table.rows] == [e["status"] for e in plan["epochs"]]
    # independent epochs with the solver's bound: the plan's own status is named
    plan = {**_rolling_plan(["work_limit"], [100]), "method": "milp"}
    sec = _solved_section(plan, None, {}, False, {}, 300.0, ev, None)
    assert "Status `work_limit` (stopped by the work limit (deterministic))" in " ".join(sec.text)


# ----------------------------------------------------------------------------------------------
# a whole plan stopped by the work limit: the allocation MILP of a random instance whose search needs
# more than 5 nodes (37 with HiGHS 1.16), planned with slices of a quarter class (Mélange's slices)
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sliced():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from alloc_random import random_instance

    coeffs = random_instance(21, n_types=12, n_classes=6)
    opts = PlanOptions(allow_unserved=True, slice_factor=4, node_limit=None)
    from neuscale_opt.alloc.plan import solve_milp

    return coeffs, opts, solve_milp(coeffs, opts)


def test_a_plan_stopped_by_the_work_limit_is_valid_and_bounded(sliced):
    from neuscale_opt.alloc.plan import solve_milp

    coeffs, opts, full = sliced
    assert full.status == "optimal" and full.epochs[0]["nodes"] > 5  # the search without a limit
    sol = solve_milp(coeffs, opts.replace(node_limit=5))
    # the independent evaluator accepts the incumbent (else the status would read infeasible)
    assert sol.status == "work_limit" and sol.epochs[0]["nodes"] >= 5
    assert sol.bound <= full.objective_value * (1 + 1e-9) and full.objective_value <= sol.objective_value * (1 + 1e-9)
    assert sol.gap == pytest.approx((sol.objective_value - sol.bound) / abs(sol.objective_value))
    d = sol.to_dict(timing=False)
    assert (d["status"], d["status_note"]) == ("work_limit", "stopped by the work limit (deterministic)")
    assert full.to_dict(timing=False)["status_note"] is None


def test_a_plan_stopped_by_the_work_limit_is_the_same_whatever_the_clock(sliced):
    from neuscale_opt.alloc.plan import solve_milp

    coeffs, opts, _ = sliced
    plans = [solve_milp(coeffs, opts.replace(node_limit=5, time_limit_s=t)).to_json(timing=False) for t in (1e6, 30.0)]
    plans.append(solve_milp(coeffs, opts.replace(node_limit=5, time_limit_s=1e6)).to_json(timing=False))
    assert '"status": "work_limit"' in plans[0]
    # the options record the time limit: compare everything else byte for byte
    strip = [p.replace('"time_limit_s": 30.0', '"time_limit_s": 1000000.0') for p in plans]
    assert strip[0] == strip[1] == strip[2]


def test_the_summary_says_which_limit_stopped_the_plan(sliced):
    from dataclasses import replace

    from neuscale_opt.cli.plan import summary

    coeffs, opts, full = sliced
    for status, words in STOPPED_BY.items():
        line = summary(replace(full, status=status), coeffs, quiet=True).splitlines()[0]
        assert f": {status} ({words})" in line
    assert "(" not in summary(full, coeffs, quiet=True).split(":", 1)[1].split(";")[0]


def _small_milp() -> pyo.ConcreteModel:
    """min 3x + 2y, x + y >= 3.5, x <= 2, x, y integer >= 0: by hand x = 0, y = 4, objective 8
    (x = 2, y = 2 costs 10; x = 1, y = 3 costs 9)."""
    m = pyo.ConcreteModel()
    m.x = pyo.Var(domain=pyo.NonNegativeIntegers, bounds=(0, 2))
    m.y = pyo.Var(domain=pyo.NonNegativeIntegers, bounds=(0, 10))
    m.c = pyo.Constraint(expr=m.x + m.y >= 3.5)
    m.total_objective = pyo.Objective(expr=3 * m.x + 2 * m.y)
    return m


class _Failed:
    """A HiGHS run that ended in an error status."""

    def getModelStatus(self):  # noqa: N802 - HiGHS's name
        import highspy

        return highspy.HighsModelStatus.kPresolveError

    def modelStatusToString(self, _status):  # noqa: N802
        return "Presolve error"


def test_a_solver_error_is_solved_again_without_presolve_never_read_as_infeasible(monkeypatch):
    from neuscale_opt.alloc import solve as door

    calls = []
    run = door._run_highs

    def failing_presolve(form, options, presolve):
        calls.append(presolve)
        return _Failed() if presolve else run(form, options, presolve)

    monkeypatch.setattr(door, "_run_highs", failing_presolve)
    res = solve_model(_small_milp(), PlanOptions())
    assert calls == [True, False]
    assert res.status == "optimal" and res.objective == pytest.approx(8.0)
    assert res.values["x"][None] == pytest.approx(0.0) and res.values["y"][None] == pytest.approx(4.0)


def test_a_solver_failing_with_and_without_presolve_raises_with_exit_code_4(monkeypatch):
    from neuscale_opt.alloc import solve as door
    from neuscale_opt.errors import SolverError

    monkeypatch.setattr(door, "_run_highs", lambda form, options, presolve: _Failed())
    with pytest.raises(SolverError, match="Presolve error, with and without presolve") as err:
        solve_model(_small_milp(), PlanOptions())
    assert err.value.exit_code == 4


def test_highs_instances_made_in_two_threads_leave_stdout_where_it_was(monkeypatch):
    # the plan and its baselines solve in two threads; making a HiGHS instance must never leave
    # file descriptor 1 on /dev/null (the process's first instance hides HiGHS's banner that way).
    # Each construction here sleeps, so the other thread runs in the middle of it.
    import os
    import threading
    import time

    import highspy

    from neuscale_opt.alloc import solve

    real = highspy.Highs

    def slow():
        time.sleep(0.002)
        return real()

    monkeypatch.setattr(highspy, "Highs", slow)
    monkeypatch.setattr(solve, "_BANNER_SHOWN", [], raising=False)
    before = os.fstat(1)
    start = threading.Barrier(2)
    seen = []  # where file descriptor 1 points after each instance is made, in each thread

    def make():
        start.wait()
        for _ in range(25):
            solve._new_highs()
            now = os.fstat(1)
            seen.append((now.st_dev, now.st_ino))

    threads = [threading.Thread(target=make) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 50 and set(seen) == {(before.st_dev, before.st_ino)}


def test_a_solve_without_a_plan_says_which_limit_and_what_to_try():
    work = PlanOptions(node_limit=200).no_plan_text("work_limit")
    assert work == (
        "the solver hit the work limit of 200 nodes without a plan (a larger --node-limit may find one; "
        "if the inventory is too small, --allow-unserved plans what fits)"
    )
    clock = PlanOptions(time_limit_s=5.0, allow_unserved=True).no_plan_text("time_limit")
    assert clock == "the solver hit the wall-clock limit of 5 s without a plan (a larger --time-limit may find one)"
