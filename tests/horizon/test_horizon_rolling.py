"""Rolling windows against the full-horizon optimum: with the oracle forecast a window covering
the whole horizon reaches the optimum, a shorter one never beats it; the forecast is made from the
past only; the same input gives the same JSON bytes."""

from __future__ import annotations

import pytest
from horizon_support import OPTS, two_class

from neuscale_opt.horizon import HorizonParams, evaluate_schedule, forecast_window, plan_full, plan_rolling

RATES_A = [10.0, 12.0, 60.0, 20.0, 55.0]
RATES_B = [4.0, 20.0, 6.0, 6.0, 18.0]
PARAMS = HorizonParams(shrink_after_s=600.0)


@pytest.fixture(scope="module")
def coeffs():
    return two_class(RATES_A, RATES_B)


@pytest.fixture(scope="module")
def full(coeffs):
    sol = plan_full(coeffs, OPTS, PARAMS)
    assert sol.status == "optimal"
    return sol


def test_whole_window_with_the_oracle_equals_the_full_optimum(coeffs, full):
    roll = plan_rolling(coeffs, OPTS, PARAMS, "oracle", window=len(RATES_A))
    assert roll.objective_value == pytest.approx(full.objective_value, rel=1e-6)
    assert evaluate_schedule(roll, coeffs, PARAMS).feasible


@pytest.mark.parametrize("window", [1, 2, 3, 4])
def test_a_shorter_window_is_never_better(coeffs, full, window):
    roll = plan_rolling(coeffs, OPTS, PARAMS, "oracle", window=window)
    ev = evaluate_schedule(roll, coeffs, PARAMS)
    assert ev.feasible, ev.violations
    assert roll.objective_value >= full.objective_value * (1 - 1e-6)


def test_myopia_costs_here(coeffs, full):
    # the peak at epoch 2 (60 req/s of A) cannot be reached from epoch 1 without looking ahead
    myopic = plan_rolling(coeffs, OPTS, PARAMS, "oracle", window=1)
    assert myopic.objective_value > full.objective_value * 1.01


def test_forecast_reads_only_the_past(coeffs):
    # last-peak over 30 min: at t = 3 every epoch of the window is planned at max(d_0 .. d_2)
    fc = forecast_window(coeffs, "last-peak", 3, [3, 4])
    assert fc[("A", 3)] == fc[("A", 4)] == 60.0
    assert fc[("B", 3)] == 20.0
    # the warm start: a window at 0 plans epoch 0 on its actual demand and holds it
    fc0 = forecast_window(coeffs, "last-peak", 0, [0, 1, 2])
    assert [fc0[("A", t)] for t in (0, 1, 2)] == [10.0, 10.0, 10.0]


def test_rolling_plan_covers_its_forecast_and_reports_both(coeffs):
    sol = plan_rolling(coeffs, OPTS, PARAMS, "last-peak", window=2)
    assert [e["epoch"] for e in sol.epochs] == list(range(len(RATES_A)))
    e3 = sol.epochs[3]
    assert e3["forecast_rps"] == {"A": 60.0, "B": 20.0}
    assert e3["actual_rps"] == {"A": 20.0, "B": 6.0}
    assert set(e3) >= {"chips_by_generation", "energy_j", "cost_usd", "created_vpods", "deleted_vpods"}
    assert sorted(sol.allocations["epoch"].unique().tolist()) == list(range(len(RATES_A)))


def test_same_input_same_bytes(coeffs):
    a = plan_rolling(coeffs, OPTS, PARAMS, "last-peak", window=3).to_json(timing=False)
    b = plan_rolling(coeffs, OPTS, PARAMS, "last-peak", window=3).to_json(timing=False)
    assert a == b
