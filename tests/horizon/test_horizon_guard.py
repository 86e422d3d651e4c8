"""The surge guard as run (formulations/horizon.md, "The guard, as run", G1-G4), solved by hand.

Chip ``x``: 1 chip per vPod, 10 req/s at full rate, 100 W static, 2 USD per hour, no dynamic
energy (the fixtures carry no weight-streaming columns), PUE 1, 300-s epochs. A plan sized on one
demand is evaluated on another that came: the guard's vPods are held from the 30-s creation delay
to the epoch's end, 270 s: 27 kJ and 0.15 USD each.
"""

from __future__ import annotations

import pytest

from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.horizon import HorizonParams, evaluate_schedule, plan_full
from neuscale_opt.horizon.evaluate import GUARD_COLUMNS

OPTS = PlanOptions(objective="energy", variant="dedicated", time_limit_s=30.0)
PARAMS = HorizonParams(coupling=False)
HOLD_S = 270.0


def coefficients(rates: list[float], util_cap: float = 1.0, inventory: dict[str, float] | None = None):
    rows = [vpod("x", "A", rate=10, static_w=100, price=2.0, chips=1)]
    return make_coefficients(
        rows, {(t, "A"): r for t, r in enumerate(rates)}, inventory=inventory, epoch_s=300.0, util_cap=util_cap
    )


def run(planned: list[float], came: list[float], util_cap: float = 1.0, inventory: dict[str, float] | None = None):
    """The plan made on ``planned`` (full horizon, no coupling), evaluated on ``came``."""
    sized = coefficients(planned, util_cap, inventory)
    sol = plan_full(sized, OPTS, PARAMS)
    ev = evaluate_schedule(sol, coefficients(came, util_cap, inventory), PARAMS, demand=sized.demand)
    return sol, ev


def test_a_plan_on_the_demand_that_came_calls_for_no_guard():
    sol, ev = run([10.0, 25.0], [10.0, 25.0])
    assert [int(n) for n in sol.allocations.sort_values("epoch")["n_vpods"]] == [1, 3]
    assert all(ev.totals[c] == 0.0 for c in GUARD_COLUMNS)


def test_demand_above_the_plan_gets_guard_vpods_within_the_growth_limit():
    # epoch 1 sized for 10 req/s (1 vPod), 25 came: load 2.5 vPods > 1; ceil(2.5 - 1) = 2 wanted,
    # gamma = 2 allows ceil(2 x 1) - 1 = 1
    _, ev = run([10.0, 10.0], [10.0, 25.0])
    by = ev.by_epoch.set_index("epoch")
    assert by.loc[0, "guard_vpods"] == 0.0
    assert by.loc[1, "guard_vpods"] == 1.0
    assert ev.totals["guard_chip_hours"] == pytest.approx(HOLD_S / 3600.0)
    assert ev.totals["guard_static_j"] == pytest.approx(100.0 * HOLD_S)
    assert ev.totals["guard_energy_j"] == pytest.approx(100.0 * HOLD_S)
    assert ev.totals["guard_cost_usd"] == pytest.approx(2.0 * HOLD_S / 3600.0)
    # the plan's own energy and objective do not include them: 2 vPod-epochs x 30 kJ
    assert ev.totals["energy_j"] == pytest.approx(60_000.0)
    assert ev.objective_value == pytest.approx(60_000.0)


def test_the_wanted_vpods_are_the_excess_at_the_plans_rate_per_vpod():
    # sized for 20 (2 vPods), 35 came: load 3.5, ceil(1.5) = 2 wanted, ceil(2 x 2) - 2 = 2 allowed
    _, ev = run([20.0, 20.0], [20.0, 35.0])
    assert ev.by_epoch.set_index("epoch").loc[1, "guard_vpods"] == 2.0
    # 45 came: 3 wanted, 2 allowed
    _, ev = run([20.0, 20.0], [20.0, 45.0])
    assert ev.by_epoch.set_index("epoch").loc[1, "guard_vpods"] == 2.0
    assert ev.totals["guard_cost_usd"] == pytest.approx(2 * 2.0 * HOLD_S / 3600.0)


def test_only_the_chips_left_free_by_the_plan():
    # 3 chips: epoch 1 holds 2 (no later epoch), 1 free for the 2 the guard wants
    _, ev = run([20.0, 20.0], [20.0, 45.0], inventory={"x": 3})
    assert ev.by_epoch.set_index("epoch").loc[1, "guard_vpods"] == 1.0
    # epoch 0 keeps the room of epoch 1's vPods too (pre-warmed): 2 held of 2, none free
    _, ev = run([20.0, 20.0], [45.0, 20.0], inventory={"x": 2})
    assert ev.totals["guard_vpods"] == 0.0


def test_the_guard_acts_where_the_queue_grows_not_below_full_rate():
    # util_cap 0.5: 5 req/s per vPod planned, 10 at full rate; sized for 10 -> 2 vPods
    # 15 came: 3 vPods at the plan's rate, but 1.5 at full rate < 2: the vPods keep up, no guard
    sol, ev = run([10.0], [15.0], util_cap=0.5)
    assert int(sol.allocations["n_vpods"].iloc[0]) == 2
    assert ev.totals["guard_vpods"] == 0.0
    # 25 came: 2.5 at full rate > 2; wanted ceil(5 - 2) = 3, allowed ceil(2 x 2) - 2 = 2
    _, ev = run([10.0], [25.0], util_cap=0.5)
    assert ev.totals["guard_vpods"] == 2.0


def two_types(rates_a: list[float], rates_b: list[float]):
    """Class ``A`` on chip ``x``; class ``B`` on chip ``y``, whose vPod type serves ``A`` too (at a
    higher energy, so the plan keeps ``A`` on ``x``). 10 req/s per vPod, util_cap 1."""
    rows = [
        vpod("x", "A", rate=10, static_w=100, price=2.0),
        vpod("y", "B", rate=10, static_w=100, price=2.0),
        vpod("y", "A", rate=10, static_w=100, price=2.0, dyn_j=1.0),
    ]
    dem = {(t, "A"): r for t, r in enumerate(rates_a)} | {(t, "B"): r for t, r in enumerate(rates_b)}
    return make_coefficients(rows, dem, epoch_s=300.0, util_cap=1.0)


def test_other_groups_that_serve_the_class_take_its_excess_first():
    # sized for A = 10 on x (1 vPod) and B = 5 on y (1 vPod, half loaded)
    sized = two_types([10.0], [5.0])
    sol = plan_full(sized, OPTS, PARAMS)
    assert {(r.chip, r.bucket) for r in sol.allocations.itertuples()} == {("x", "A"), ("y", "B")}
    # A = 14 came: x is 0.4 vPods over, y has 0.5 free and serves A (the overflow router): no guard
    ev = evaluate_schedule(sol, two_types([14.0], [5.0]), PARAMS, demand=sized.demand)
    assert ev.totals["guard_vpods"] == 0.0
    # B = 8 came too: y has 0.2 free for x's 0.4 over, so x grows by ceil(1.4 - 1) = 1
    ev = evaluate_schedule(sol, two_types([14.0], [8.0]), PARAMS, demand=sized.demand)
    assert ev.totals["guard_vpods"] == 1.0
    assert ev.totals["guard_cost_usd"] == pytest.approx(2.0 * HOLD_S / 3600.0)


def _step(lo: float, hi: float, seed: int):
    """Llama-3-8B, one class of 512 / 128 tokens, 64 v6e chips, four 300-s epochs at ``lo, lo, hi,
    hi`` req/s (Poisson arrivals), planned by last-peak one epoch at a time: epoch 2 is sized for
    ``lo`` and ``hi`` comes."""
    import pandas as pd
    from horizon_support import poisson_trace

    from neuscale_opt.candidates import build_coefficients
    from neuscale_opt.horizon import plan_rolling
    from neuscale_opt.horizon.rolling import instance_inventory
    from neuscale_opt.instance import parse_instance

    rates = [lo, lo, hi, hi]
    inst = parse_instance(
        {
            "name": "guard-step",
            "model": {"name": "Llama-3-8B"},
            "fleet": [{"chip": "tpu-v6e", "chips": 64}],
            "workload": {
                "classes": [{"name": "a", "input_tokens": 512, "output_tokens": 128}],
                "demand": [{"epoch": e, "bucket": "a", "rate_rps": r} for e, r in enumerate(rates)],
            },
            "epochs": {"length_s": 300.0, "horizon": len(rates)},
            "search": {"max_chips_per_vpod": 8},
            "horizon": {"window": 1, "forecast": "last-peak"},
        }
    )
    coeffs = build_coefficients(inst)
    parts = []
    for e, r in enumerate(rates):
        part = poisson_trace({"a": (r, 512, 128)}, 300.0, seed=seed + e)
        part["arrival_s"] += 300.0 * e
        parts.append(part)
    trace = pd.concat(parts).reset_index(drop=True)
    params = HorizonParams.from_instance(inst)
    sol = plan_rolling(coeffs, PlanOptions.from_instance(inst), params, "last-peak", 1, instance_inventory(coeffs, []))
    return inst, coeffs, trace, sol


@pytest.mark.parametrize(("lo", "hi"), [(20.0, 45.0), (10.0, 35.0), (20.0, 20.0)])
def test_the_guard_as_run_agrees_with_the_replays_guard(lo, hi):
    # the replay's guard on a step the forecast misses: the vPods it adds and what they cost, against
    # the evaluator's estimate (G1-G4) on the same plan
    from neuscale_opt.replay import ReplayOptions, replay

    inst, coeffs, trace, sol = _step(lo, hi, seed=1)
    res = replay(sol.to_dict(), inst, trace, ReplayOptions(admission="plan"), coeffs=coeffs)
    assert sol.totals["guard_vpods"] == res.totals["surge_vpods"]
    assert sol.totals["guard_chip_hours"] == pytest.approx(res.totals["surge_chip_hours"], rel=0.25, abs=1e-9)
    run = sol.totals["cost_usd"] + sol.totals["guard_cost_usd"]
    assert run == pytest.approx(res.totals["cost_usd"], rel=0.03)
    if hi > lo:  # the plan's own totals alone miss the guard's vPods
        assert sol.totals["cost_usd"] < 0.92 * res.totals["cost_usd"]


def test_each_half_of_disaggregated_serving_is_guarded_on_its_own():
    # class A prefilled on x and decoded on y, 10 req/s each per vPod; sized for 10, 14 came: each
    # half's vPod is 0.4 over and neither half can take the other's requests, so each grows by one
    rows = [
        vpod("x", "A", rate=10, static_w=100, price=2.0, phase="prefill"),
        vpod("y", "A", rate=10, static_w=100, price=2.0, phase="decode"),
    ]

    def coeffs(rate: float):
        return make_coefficients(rows, {(0, "A"): rate}, epoch_s=300.0, util_cap=1.0)

    opts = OPTS.replace(serving="disaggregated")
    sized = coeffs(10.0)
    sol = plan_full(sized, opts, PARAMS)
    assert sorted(sol.allocations["phase"]) == ["decode", "prefill"]
    ev = evaluate_schedule(sol, coeffs(14.0), PARAMS, demand=sized.demand)
    assert ev.totals["guard_vpods"] == 2.0


def stand_in(came: list[float], y_rate: float = 10.0, y_chips: int = 2, y_inventory: float = 8, b_rate: float = 5.0):
    """Class ``A`` planned on chip ``x`` (2 chips per vPod, the only two), with a stand-in type on chip ``y``
    (``y_chips`` chips, 300 W, 5 USD per hour, serves ``A`` at ``y_rate`` req/s, dearer, so the
    plan keeps ``A`` on ``x``), where the plan holds one vPod for class ``B`` at ``b_rate`` req/s
    (none at 0: then the plan deploys no ``y``): sized for 10 req/s of ``A`` in each epoch, ``came``
    came."""
    rows = [
        vpod("x", "A", rate=10, static_w=100, price=2.0, chips=2),
        vpod("y", "A", rate=y_rate, static_w=300, price=5.0, chips=y_chips),
        vpod("y", "B", rate=10, static_w=300, price=5.0, chips=y_chips),
    ]
    inv = {"x": 2, "y": y_inventory}

    def coeffs(rates):
        dem = {(t, "A"): r for t, r in enumerate(rates)} | {(t, "B"): b_rate for t in range(len(rates))}
        return make_coefficients(rows, dem, inventory=inv, epoch_s=300.0, util_cap=1.0)

    sized = coeffs([10.0] * len(came))
    sol = plan_full(sized, OPTS, PARAMS)
    assert set(sol.allocations[sol.allocations["bucket"] == "A"]["chip"]) == {"x"}
    return evaluate_schedule(sol, coeffs(came), PARAMS, demand=sized.demand)


def test_where_its_generation_is_full_a_stand_in_of_another_takes_the_guards_vpod():
    # epoch 1: 25 came on one x vPod, 1 wanted (the growth bound); x has no chip left, y's type serves
    # A as strongly: one y vPod of 2 chips, 300 W and 5 USD/h for 270 s
    ev = stand_in([10.0, 25.0])
    by = ev.by_epoch.set_index("epoch")
    assert by.loc[0, "guard_vpods"] == 0.0
    assert by.loc[1, "guard_vpods"] == 1.0
    assert ev.totals["guard_chip_hours"] == pytest.approx(2 * HOLD_S / 3600.0)
    assert ev.totals["guard_static_j"] == pytest.approx(300.0 * HOLD_S)
    assert ev.totals["guard_cost_usd"] == pytest.approx(5.0 * HOLD_S / 3600.0)
    # a weaker stand-in is still taken when it is all there is; none when y has no room either (the
    # plan's B vPod holds 2 of 3 chips), or when the plan deploys no y (the replay's default)
    assert stand_in([10.0, 25.0], y_rate=4.0).totals["guard_vpods"] == 1.0
    assert stand_in([10.0, 25.0], y_inventory=3).totals["guard_vpods"] == 0.0
    # nor when y's vPod holds more chips than the x vPod it would stand for
    assert stand_in([10.0, 25.0], y_chips=3, y_inventory=9).totals["guard_vpods"] == 0.0
    assert stand_in([10.0, 25.0], b_rate=0.0).totals["guard_vpods"] == 0.0
