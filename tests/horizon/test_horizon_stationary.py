"""A window without a carried state whose demand and inventory are the same in every epoch (the
first window of a rolling plan on a hold-last forecast) is solved as its first epoch alone, held
(``formulations/horizon.md``, "Stationary first window"): its optimum equals the whole window
MILP's, and the plans are those of the whole window's solves."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from horizon_support import OPTS, two_class

from neuscale_opt.alloc.solve import solve_model
from neuscale_opt.horizon import HorizonParams, plan_rolling, rolling
from neuscale_opt.horizon.model import build_model

RATES_A = [10.0, 12.0, 60.0, 20.0, 55.0, 8.0, 30.0, 30.0]
RATES_B = [4.0, 0.0, 6.0, 0.0, 0.0, 18.0, 0.0, 5.0]
PARAMS = HorizonParams(shrink_after_s=900.0, create_energy_j_per_chip=10.0, delete_energy_j_per_chip=5.0)


def _rows(sol) -> pd.DataFrame:
    return sol.allocations.sort_values(["epoch", "vpod_group", "config_id"], kind="mergesort").reset_index(drop=True)


@pytest.mark.parametrize(("rates_a", "rates_b"), [(RATES_A, RATES_B), ([50.0] * 4, [7.0] * 4), ([3.0] * 3, [30.0] * 3)])
@pytest.mark.parametrize("window", [2, 3, 5])
def test_a_stationary_window_costs_its_first_epoch_held(monkeypatch, rates_a, rates_b, window):
    seen = []
    solve = rolling.solve_window

    def check(ctx, place=None, tail=None, tokens=None, compiled=None):
        out, info, left = solve(ctx, place=place, tail=tail, tokens=tokens, compiled=compiled)
        if rolling._stationary_epoch(ctx, place) is not None:
            whole = solve_model(build_model(ctx), ctx.options)  # the whole window MILP
            assert whole.status == "optimal"
            assert math.isclose(info["objective_value"], whole.objective, rel_tol=1e-6)
            t0 = ctx.epochs[0]
            assert all(out[t].n == out[t0].n and out[t].x == out[t0].x for t in ctx.epochs)
            seen.append(len(ctx.epochs))
        return out, info, left

    monkeypatch.setattr(rolling, "solve_window", check)
    coeffs = two_class(rates_a, rates_b)
    with_it = plan_rolling(coeffs, OPTS, PARAMS, "last-peak", window=window)
    assert seen and seen[0] == min(window, len(rates_a))  # the first window (last-peak: a flat forecast)
    monkeypatch.setattr(rolling, "_stationary_epoch", lambda ctx, place: None)
    without = plan_rolling(coeffs, OPTS, PARAMS, "last-peak", window=window)
    assert with_it.objective_value == pytest.approx(without.objective_value, rel=1e-9)
    pd.testing.assert_frame_equal(_rows(with_it), _rows(without))


def test_only_a_window_without_state_and_with_flat_demand_and_inventory_is_stationary():
    coeffs = two_class(RATES_A, RATES_B)
    made = []
    solve = rolling.solve_window

    def keep(ctx, **kw):
        made.append(ctx)
        return solve(ctx, **kw)

    rolling.solve_window = keep
    try:
        plan_rolling(coeffs, OPTS, PARAMS, "oracle", window=3)  # the actual demand: not flat
    finally:
        rolling.solve_window = solve
    first = made[0]
    assert first.state is None and rolling._stationary_epoch(first, [first.epochs[0]]) is None
    flat = rolling.replace(first, demand={(b, t): first.demand.get((b, first.epochs[0]), 0.0) for b, t in first.demand})
    one = rolling._stationary_epoch(flat, [first.epochs[0]])
    assert one is not None and one.epochs == (first.epochs[0],)
    assert rolling._stationary_epoch(flat, list(first.epochs)) is None  # every epoch to be placed
    assert rolling._stationary_epoch(flat, None) is None  # None: every epoch
    later = [c for c in made if c.state is not None][0]
    assert rolling._stationary_epoch(later, [later.epochs[0]]) is None  # a carried state
    t1 = first.epochs[1]
    fewer = {k: (v - 1 if k[1] == t1 else v) for k, v in flat.inventory.items()}
    assert rolling._stationary_epoch(rolling.replace(flat, inventory=fewer), [first.epochs[0]]) is None
