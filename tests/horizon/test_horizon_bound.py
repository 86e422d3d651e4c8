"""The proven bound of a rolling plan: the LP relaxation of the full-horizon model on the planned
demand (``formulations/horizon.md``, "Status, bound and gap"), checked against hand-solved values
and against the full-horizon MILP optimum on the same demand."""

from __future__ import annotations

import pytest
from horizon_support import OPTS, one_class, two_class

from neuscale_opt.horizon import HorizonParams, plan_full, plan_rolling
from neuscale_opt.horizon.rolling import RELAXATION_BOUND

PARAMS = HorizonParams()


def test_bound_is_the_coupled_relaxation_by_hand():
    # one vPod type: 10 req/s, 30 kJ per vPod-epoch, no dynamic energy. Demand 25, 25, 5 req/s.
    # Integer plan (any window, oracle): 3 vPods in epochs 0 and 1; epoch 2 must keep the 2.5 vPods'
    # worth of load of epoch 1 (30-minute hold), so 3 again: 9 x 30 kJ = 270 kJ.
    # LP relaxation: 2.5 vPods in every epoch (the hold keeps epoch 2 at 2.5): 7.5 x 30 kJ = 225 kJ.
    # (The independent epoch MILPs would give only 3 + 3 + 1 = 7 vPods: 210 kJ.)
    coeffs = one_class([25.0, 25.0, 5.0])
    roll = plan_rolling(coeffs, OPTS, PARAMS, "oracle", window=1, bound=True)
    assert roll.objective_value == pytest.approx(270e3, rel=1e-9)
    assert roll.bound == pytest.approx(225e3, rel=1e-9)
    assert roll.gap == pytest.approx(45.0 / 270.0, rel=1e-9)
    assert roll.meta["bound"] == RELAXATION_BOUND
    assert roll.status == "feasible"


def test_a_lightly_loaded_group_is_bounded_by_whole_vpods():
    # 2 req/s on 10-req/s vPods (30 kJ per vPod-epoch, unserved demand 100 J/req = 30 kJ per req/s
    # over an epoch): the plan holds one vPod per epoch, 2 x 30 kJ = 60 kJ. The plain relaxation
    # would hold 0.2 vPods (12 kJ); with held_if_used (n >= r / d) serving r req/s costs
    # 30 kJ x r / 2 held + 30 kJ x (2 - r) unserved, least at r = 2: the bound is the plan's 60 kJ.
    coeffs = one_class([2.0, 2.0])
    roll = plan_rolling(coeffs, OPTS, PARAMS, "oracle", window=1, bound=True)
    assert roll.objective_value == pytest.approx(60e3, rel=1e-9)
    assert roll.bound == pytest.approx(60e3, rel=1e-9)
    assert roll.gap == pytest.approx(0.0, abs=1e-9)


def test_without_bound_the_plan_is_the_same_and_unbounded():
    coeffs = one_class([25.0, 25.0, 5.0])
    a = plan_rolling(coeffs, OPTS, PARAMS, "oracle", window=1, bound=True)
    b = plan_rolling(coeffs, OPTS, PARAMS, "oracle", window=1)
    assert b.bound != b.bound  # NaN: no bound asked
    assert a.allocations.equals(b.allocations) and a.objective_value == b.objective_value


@pytest.mark.parametrize("window", [1, 2])
def test_bound_is_below_the_full_horizon_optimum_on_the_planned_demand(window):
    coeffs = two_class([10.0, 12.0, 60.0, 20.0, 55.0], [4.0, 20.0, 6.0, 6.0, 18.0])
    params = HorizonParams(shrink_after_s=600.0)
    roll = plan_rolling(coeffs, OPTS, params, "last-peak", window=window, bound=True)
    planned = {(b, int(e["epoch"])): v for e in roll.epochs for b, v in e["forecast_rps"].items()}
    full = plan_full(coeffs, OPTS, params, demand=planned)
    assert full.status == "optimal"
    # every schedule covering the planned demand (the rolling one included) costs at least the
    # full-horizon MILP optimum, and the relaxation is below that optimum
    assert 0 < roll.bound <= full.objective_value * (1 + 1e-9)
    assert full.objective_value <= roll.objective_value * (1 + 1e-9)
