"""The guard reserve (``formulations/horizon.md``, "Guard reserve"): a plan made on a lean forecast
keeps room in the fleet for the demand a second forecaster gives, so the replay's surge guard can
grow into it. Optima solved by hand; the rolling plan's reserve read from its own forecasts."""

from __future__ import annotations

import pytest
from horizon_support import OPTS, one_class

from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.alloc.solve import solve_model
from neuscale_opt.errors import InputError
from neuscale_opt.horizon import HorizonParams, plan_rolling
from neuscale_opt.horizon.context import build_window
from neuscale_opt.horizon.model import RESERVE_SHARE, build_model, component_ids
from neuscale_opt.horizon.rolling import actual_demand, forecast_window, reserve_window

RESERVED = HorizonParams(reserve_forecast="last-peak")


def _big_or_small(inventory: float):
    """Class A (10 req/s planned), one generation ``x`` of ``inventory`` chips: ``big`` vPods of 8
    chips serve 10 req/s and hold 100 W (30 kJ an epoch), ``small`` vPods of 2 chips serve 4 req/s
    and hold 40 W (12 kJ). Both cost 10 J per request at full load, so the default unserved penalty
    is 100 J per request and a request per second of reserve not kept costs 300 s x 0.1 x 100 J =
    3 kJ."""
    rows = [
        vpod("x", "A", rate=10, static_w=100, chips=8, name="big"),
        vpod("x", "A", rate=4, static_w=40, chips=2, name="small"),
    ]
    return make_coefficients(rows, {(0, "A"): 10.0}, inventory={"x": inventory}, epoch_s=300.0, util_cap=1.0)


def _solve(coeffs, params, reserve):
    inv = {("x", 0): float(coeffs.inventory()["x"])}
    ctx = build_window(coeffs, OPTS, params, [0], {("A", 0): 10.0}, inv, reserve=reserve)
    m = build_model(ctx)
    res = solve_model(m, ctx.options)
    assert res.status == "optimal"
    n = {g: round(v) for (g, _t), v in res.values["n_vpods"].items() if round(v) > 0}
    return ctx, m, res, n


def test_the_reserve_penalty_is_a_tenth_of_the_unserved_one():
    ctx, *_ = _solve(_big_or_small(12), RESERVED, {("A", 0): 10.0})
    assert ctx.penalty_per_req == pytest.approx(100.0)
    assert RESERVE_SHARE == 0.1


def test_without_a_reserve_the_plan_holds_the_cheapest_vpods():
    # by hand: one big vPod (30 kJ) against three small ones (36 kJ, 12 req/s)
    _ctx, m, res, n = _solve(_big_or_small(12), HorizonParams(), {("A", 0): 10.0})
    assert n == {"big|A": 1}
    assert res.objective == pytest.approx(30_000.0)
    assert not hasattr(m, "reserve_vpods")


def test_the_reserve_moves_the_plan_to_vpods_that_leave_room():
    # planned 10 req/s, reserve 10 more. By hand, 12 chips:
    #   big x1: 8 chips, room for half a big vPod (5 req/s), 5 short: 30 + 15 = 45 kJ
    #   big x1 + small x1: 10 chips, room for one small vPod: 18 of 20, 2 short: 42 + 6 = 48 kJ
    #   small x3: 6 chips, room for three more (the guard's 2x): 24 >= 20, none short: 36 kJ
    _ctx, m, res, n = _solve(_big_or_small(12), RESERVED, {("A", 0): 10.0})
    assert n == {"small|A": 3}
    assert res.objective == pytest.approx(36_000.0)
    assert res.values["reserve_short"][("A", 0)] == pytest.approx(0.0, abs=1e-6)
    # the room kept: at least the 2.5 vPods' worth that 20 req/s needs beyond the 3 held, at most
    # the guard's growth (3) and the chips left (6 chips, 3 small vPods)
    room = sum(v for (_g, _t), v in res.values["reserve_vpods"].items())
    assert 2.0 - 1e-6 <= room <= 3.0 + 1e-6


def test_the_reserve_never_leaves_forecast_demand_unserved():
    # 8 chips. By hand: big x1 serves 10, no room: 30 + 30 (10 short) = 60 kJ; small x3 serves 10 with
    # room for one more (16 of 20), 4 short: 36 + 12 = 48 kJ; small x4 serves 10 with no room left,
    # 4 short: 48 + 12 = 60 kJ; serving less to keep room costs 100 J per request unserved against
    # 10 J per request of reserve kept, so never
    _ctx, _m, res, n = _solve(_big_or_small(8), RESERVED, {("A", 0): 10.0})
    assert n == {"small|A": 3}
    assert res.objective == pytest.approx(48_000.0)
    assert res.values["unserved"].get(("A", 0), 0.0) == pytest.approx(0.0, abs=1e-6)
    assert res.values["reserve_short"][("A", 0)] == pytest.approx(4.0)


def test_the_reserve_is_kept_only_where_the_model_plans_the_class():
    coeffs = _big_or_small(12)
    inv = {("x", 0): 12.0}
    ctx = build_window(coeffs, OPTS, RESERVED, [0], {("A", 0): 0.0}, inv, reserve={("A", 0): 10.0})
    assert ctx.reserve == {}
    assert "reserve_coverage" in component_ids(build_model(ctx))["constraint"]


def test_the_rolling_reserve_is_the_second_forecast_above_the_first():
    # class A at 10, 30, 20, 10 req/s; quantile (q = 0.9) of the epochs before against their peak
    coeffs = one_class([10.0, 30.0, 20.0, 10.0])
    actual = actual_demand(coeffs)
    for start in (1, 2, 3):
        lean = forecast_window(coeffs, "quantile", start, [start], actual)
        got = reserve_window(coeffs, RESERVED, start, [start], lean, actual)
        peak = max(actual[("A", t)] for t in range(start))
        assert lean[("A", start)] <= peak
        assert got.get(("A", start), 0.0) == pytest.approx(peak - lean[("A", start)])
    assert reserve_window(coeffs, HorizonParams(), 2, [2], lean, actual) == {}


def _rising(inventory: float):
    """Class A at 10, 10, 20, 18 req/s over four 300-s epochs on ``inventory`` chips of x: ``big``
    vPods (8 chips, 10 req/s, 100 W: 30 kJ an epoch) and ``small`` ones (2 chips, 4 req/s, 38 W:
    11.4 kJ); unserved 100 J per request, a request per second of reserve not kept 3 kJ."""
    rows = [
        vpod("x", "A", rate=10, static_w=100, chips=8, name="big"),
        vpod("x", "A", rate=4, static_w=38, chips=2, name="small"),
    ]
    rates = [10.0, 10.0, 20.0, 18.0]
    return make_coefficients(
        rows, {(t, "A"): r for t, r in enumerate(rates)}, inventory={"x": inventory}, epoch_s=300.0, util_cap=1.0
    )


def test_a_rolling_plan_keeps_room_for_the_last_peak():
    # class A at 10, 10, 20, 18 req/s on 12 chips of x (big: 8 chips, 10 req/s, 30 kJ an epoch; small:
    # 2 chips, 4 req/s, 11.4 kJ; unserved 100 J per request, reserve not kept 3 kJ per req/s), epochs
    # planned one by one (no coupling) on the quantile forecast (q = 0.9, numpy's linear
    # interpolation) with last-peak as the reserve forecaster. By hand:
    #   epochs 0, 1: 10 req/s, no reserve: big x1 (30 kJ) against small x3 (34.2 kJ)
    #   epoch 2: history 10, 10: forecast 10, no reserve: big x1
    #   epoch 3: history 10, 10, 20: forecast 18, last peak 20, reserve 2. Without it big x1 + small x2
    #     (18 req/s, 52.8 kJ) against small x5 (57 kJ); with it big x1 + small x2 fills the 12 chips
    #     and keeps no room (2 short: 52.8 + 6 = 58.8 kJ) while small x5 holds 10 chips with room for
    #     one more small vPod (24 >= 20: 57 kJ)
    coeffs = _rising(12)
    lean = HorizonParams(forecast="quantile", coupling=False)

    def held(params):
        sol = plan_rolling(coeffs, OPTS, params)
        by = {
            int(t): dict(zip(d["vpod_group"], d["n_vpods"], strict=True)) for t, d in sol.allocations.groupby("epoch")
        }
        return sol, by

    plain, n_plain = held(lean)
    kept, n_kept = held(lean.replace(reserve_forecast="last-peak"))
    assert plain.meta["reserve_forecast"] is None and kept.meta["reserve_forecast"] == "last-peak"
    for t in (0, 1, 2):
        assert n_plain[t] == n_kept[t] == {"big|A": 1}
    assert n_plain[3] == {"big|A": 1, "small|A": 2}
    assert n_kept[3] == {"small|A": 5}
    # the epochs say what was asked and kept: 2 req/s at epoch 3, all of it; nothing before
    by_epoch = {e["epoch"]: e for e in kept.epochs}
    assert by_epoch[3]["reserve_rps"] == pytest.approx({"A": 2.0})
    assert by_epoch[3]["reserve_kept_rps"] == pytest.approx({"A": 2.0})
    assert not any("reserve_rps" in by_epoch[t] for t in (0, 1, 2))
    assert not any("reserve_rps" in e for e in plain.epochs)


def test_a_reserve_the_fleet_cannot_hold_is_reported_short():
    # as above on 8 chips: at epoch 3 (forecast 18, reserve 2) four small vPods (16 req/s, every chip)
    # are the most the fleet serves, 2 req/s unserved (60 kJ) against big x1's 8 (240 kJ); no room
    # is left, so none of the reserve is kept
    coeffs = _rising(8)
    sol = plan_rolling(coeffs, OPTS, HorizonParams(forecast="quantile", coupling=False, reserve_forecast="last-peak"))
    e3 = next(e for e in sol.epochs if e["epoch"] == 3)
    held3 = sol.allocations[sol.allocations["epoch"] == 3]
    assert dict(zip(held3["vpod_group"], held3["n_vpods"], strict=True)) == {"small|A": 4}
    assert e3["unserved_rps"] == pytest.approx(2.0)
    assert e3["reserve_rps"] == pytest.approx({"A": 2.0})
    assert e3["reserve_kept_rps"] == pytest.approx({"A": 0.0}, abs=1e-6)


def test_an_unknown_reserve_forecaster_is_refused():
    with pytest.raises(InputError, match="reserve_forecast"):
        HorizonParams(reserve_forecast="crystal-ball")


@pytest.mark.parametrize(
    ("inventory", "planned", "reserve"),
    [(12, 10.0, 10.0), (8, 10.0, 10.0), (24, 10.0, 10.0), (12, 4.0, 2.0), (16, 18.0, 6.0), (10, 6.0, 30.0)],
)
def test_the_lazy_reserve_finds_the_optimum_of_the_whole_reserve_model(inventory, planned, reserve):
    # the window is solved without the reserve first and kept where that plan keeps the whole reserve;
    # either way its objective is the reserve model's optimum, solved whole here
    from neuscale_opt.horizon.rolling import _solve_reserved

    coeffs = _big_or_small(inventory)
    ctx = build_window(
        coeffs, OPTS, RESERVED, [0], {("A", 0): planned}, {("x", 0): float(inventory)}, reserve={("A", 0): reserve}
    )
    whole = solve_model(build_model(ctx), ctx.options)
    lazy, _read = _solve_reserved(ctx, None)
    assert whole.status == lazy.status == "optimal"
    assert lazy.objective == pytest.approx(whole.objective, rel=1e-9)


def test_the_oracle_keeps_no_reserve():
    # the oracle plans on the actual demand: its plan is the same with or without a reserve forecaster
    coeffs = one_class([10.0, 30.0, 10.0, 10.0], inventory={"x": 3, "y": 10}, second=True)
    plain = plan_rolling(coeffs, OPTS, HorizonParams(), "oracle", window=2, method="oracle")
    kept = plan_rolling(coeffs, OPTS, RESERVED, "oracle", window=2, method="oracle")
    assert kept.meta["reserve_forecast"] is None
    assert kept.objective_value == pytest.approx(plain.objective_value)
    assert kept.allocations[["epoch", "vpod_group", "n_vpods"]].equals(
        plain.allocations[["epoch", "vpod_group", "n_vpods"]]
    )
