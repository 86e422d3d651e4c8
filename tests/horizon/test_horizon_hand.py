"""Hand-solved schedules: the growth limit with the creation delay (vPods created at the boundary,
``prewarm = False``) and with pre-warmed vPods (created L = 30 s before it), the 30-minute hold then
halving, failover after chips fail; the independent evaluator agrees with the solver."""

from __future__ import annotations

import pytest
from horizon_support import OPTS, one_class

from neuscale_opt.horizon import HorizonParams, evaluate_schedule, plan_full, plan_rolling
from neuscale_opt.horizon.rolling import instance_inventory
from neuscale_opt.instance import InventoryEvent

#: the creation delay's model: vPods created at the boundary serve 90 % of their first epoch
DELAYED = HorizonParams(prewarm=False)
X = "x:1:tp1:b1:colocated|A"
Y = "y:1:tp1:b1:colocated|A"


def counts(sol, group: str) -> list[int]:
    rows = sol.allocations[sol.allocations["vpod_group"] == group]
    by = dict(zip(rows["epoch"], rows["n_vpods"], strict=False))
    return [int(by.get(t, 0)) for t in range(len(sol.epochs))]


def test_growth_limit_and_creation_delay_myopic():
    # Window of one epoch (no look-ahead). Epoch 0: 10 req/s -> 1 vPod. Epoch 1: 45 req/s, but
    # n <= 2 x 1 + 1 = 3 and the 2 created vPods serve 90 % of the epoch: capacity 3 - 0.1 x 2 = 2.8
    # vPods = 28 req/s, 17 req/s unserved.
    # Objective: 4 vPod-epochs x 30 kJ + 17 req/s x 300 s x 100 J/req = 120 kJ + 510 kJ.
    coeffs = one_class([10.0, 45.0])
    sol = plan_rolling(coeffs, OPTS, DELAYED, "oracle", window=1)
    assert counts(sol, X) == [1, 3]
    assert sol.unserved["unserved_rps"].tolist() == pytest.approx([17.0])
    assert sol.objective_value == pytest.approx(630_000.0, rel=1e-6)
    assert sol.epochs[1]["created_vpods"] == 2


def test_look_ahead_grows_before_the_peak():
    # The whole horizon in view: 2 vPods at epoch 0 let epoch 1 reach 5 (capacity 5 - 0.3 = 4.7 >= 4.5).
    # 7 vPod-epochs x 30 kJ; 3 vPods at epoch 0 would cost 8.
    coeffs = one_class([10.0, 45.0])
    sol = plan_full(coeffs, OPTS, DELAYED)
    assert counts(sol, X) == [2, 5]
    assert len(sol.unserved) == 0
    assert sol.objective_value == pytest.approx(210_000.0, rel=1e-6)
    assert sol.epochs[1]["created_vpods"] == 3


def test_prewarmed_growth_serves_the_whole_epoch_myopic():
    # Pre-warmed (L = 30 s, the default): the 2 vPods epoch 1 adds are created 30 s before it and
    # serve all of it: capacity 3 vPods = 30 req/s, 15 req/s unserved. Each is held L more: 30 kJ x
    # 30 / 300 = 3 kJ. Objective: 4 vPod-epochs x 30 kJ + 2 x 3 kJ + 15 x 300 x 100 J = 576 kJ.
    coeffs = one_class([10.0, 45.0])
    sol = plan_rolling(coeffs, OPTS, HorizonParams(), "oracle", window=1)
    assert counts(sol, X) == [1, 3]
    assert sol.unserved["unserved_rps"].tolist() == pytest.approx([15.0])
    assert sol.objective_value == pytest.approx(576_000.0, rel=1e-6)
    assert sol.totals["prewarm_energy_j"] == pytest.approx(6_000.0)
    # a table that carries the instance's lead (as a trace instance's does) is charged the hold once,
    # not once by the per-epoch evaluation and again by the schedule's
    coeffs.demand.attrs["observed_lead_s"] = 30.0
    ev = evaluate_schedule(sol, coeffs, HorizonParams())
    assert ev.totals["prewarm_energy_j"] == pytest.approx(6_000.0)
    assert ev.objective_value == pytest.approx(576_000.0, rel=1e-6)


def test_prewarmed_look_ahead():
    # The whole horizon in view: epoch 1 needs 5 vPods (45 / 10), reachable from 2 (2 x 2 + 1), and
    # pre-warmed they lose nothing: [2, 5] = 7 x 30 kJ + 3 x 3 kJ = 219 kJ ([3, 5]: 240 + 6 kJ).
    coeffs = one_class([10.0, 45.0])
    sol = plan_full(coeffs, OPTS, HorizonParams())
    assert counts(sol, X) == [2, 5]
    assert len(sol.unserved) == 0
    assert sol.objective_value == pytest.approx(219_000.0, rel=1e-6)
    assert evaluate_schedule(sol, coeffs, HorizonParams()).objective_value == pytest.approx(219_000.0, rel=1e-6)


def test_without_coupling_the_peak_is_served_at_once():
    coeffs = one_class([10.0, 45.0])
    sol = plan_full(coeffs, OPTS, HorizonParams(coupling=False))
    assert counts(sol, X) == [1, 5]
    assert sol.objective_value == pytest.approx(180_000.0, rel=1e-6)
    # the model has no creations without coupling; the evaluator charges the 4 vPods epoch 1 adds
    # their pre-warm hold as the replay holds them (30 kJ per vPod-epoch x 30 s / 300 s = 3 kJ each)
    assert sol.meta["evaluated_objective"] == pytest.approx(180_000.0 + 4 * 3_000.0, rel=1e-6)


@pytest.mark.parametrize("window", [1, 3])
def test_rolling_without_coupling_plans_each_epoch_alone(window):
    # no rule links the epochs: each epoch gets ceil(rate / 10 req/s) vPods (1, 5, 2, 3: 11 vPod-epochs
    # x 30 kJ), whatever the window; the window asked for is reported. The vPods epochs 1 and 3 add
    # (4 + 1) are pre-warmed as the replay does it, each held L = 30 s more (3 kJ): 330 + 15 kJ
    coeffs = one_class([10.0, 45.0, 20.0, 30.0])
    sol = plan_rolling(coeffs, OPTS, HorizonParams(coupling=False), "oracle", window=window)
    assert counts(sol, X) == [1, 5, 2, 3]
    assert len(sol.unserved) == 0
    assert sol.objective_value == pytest.approx(11 * 30_000.0 + 5 * 3_000.0, rel=1e-6)
    assert sol.totals["prewarm_energy_j"] == pytest.approx(15_000.0)
    assert sol.meta["lead_s"] == 30.0
    assert sol.meta["window"] == window


def test_hold_then_halving():
    # K = 600 s / 300 s = 2 epochs. 30 req/s in epoch 0, then nothing: the group keeps the 3 vPods
    # its load needed while epoch 0 is in the last 2 epochs (epochs 1, 2), then halves: 1, then 0.
    coeffs = one_class([30.0, 0.0, 0.0, 0.0, 0.0])
    sol = plan_full(coeffs, OPTS, HorizonParams(shrink_after_s=600.0))
    assert counts(sol, X) == [3, 3, 3, 1, 0]
    assert sol.objective_value == pytest.approx(10 * 30_000.0, rel=1e-6)
    assert [e["deleted_vpods"] for e in sol.epochs] == [0, 0, 0, 2, 1]


def test_paper_defaults_hold_thirty_minutes():
    # default K = 6 epochs: 2 vPods held through epoch 6, halved to 1 at epoch 7, gone at epoch 8
    coeffs = one_class([20.0] + [0.0] * 8)
    sol = plan_full(coeffs, OPTS, HorizonParams())
    assert counts(sol, X) == [2, 2, 2, 2, 2, 2, 2, 1, 0]


def test_failover_after_chips_fail_myopic():
    # x has 3 chips, y 10; 30 req/s in both epochs; window of one epoch. Two x chips fail at epoch 1:
    # x keeps 1 vPod (the hold would keep 3; 2 are lost with their chips), y starts from 0: at most
    # 1 vPod, serving 90 % of the epoch. Served 10 + 9, unserved 11 req/s at 200 J/req.
    # Objective: 3 x 30 kJ + (30 kJ + 60 kJ) + 11 x 300 x 200 J = 90 + 90 + 660 kJ.
    coeffs, inv = _failing()
    sol = plan_rolling(coeffs, OPTS, DELAYED, "oracle", window=1, inventory=inv)
    assert counts(sol, X) == [3, 1]
    assert counts(sol, Y) == [0, 1]
    assert sol.unserved["unserved_rps"].tolist() == pytest.approx([11.0])
    assert sol.objective_value == pytest.approx(840_000.0, rel=1e-6)
    ev = evaluate_schedule(sol, coeffs, DELAYED, inventory=inv)
    assert ev.feasible, ev.violations


def test_failover_with_look_ahead():
    # Knowing the failure, the plan serves epoch 0 already as epoch 1 must be served: x 1 + y 2 in
    # both epochs, nothing created (2 x (30 + 120) kJ). Epoch 1 needs y >= 2 (x keeps at most 1),
    # and y cannot reach 2 serving vPods from fewer than 2: x 2 + y 1 then x 1 + y 3 costs 330 kJ,
    # x 3 then x 1 + y 1 costs 840 kJ (the myopic plan).
    coeffs, inv = _failing()
    sol = plan_full(coeffs, OPTS, DELAYED, inventory=inv)
    assert counts(sol, X) == [1, 1]
    assert counts(sol, Y) == [2, 2]
    assert sol.objective_value == pytest.approx(300_000.0, rel=1e-6)
    assert evaluate_schedule(sol, coeffs, DELAYED, inventory=inv).feasible


def test_failure_beyond_the_lost_chips_is_flagged():
    coeffs, inv = _failing()
    sol = plan_rolling(coeffs, OPTS, HorizonParams(), "oracle", window=1, inventory=inv)
    # judged against an inventory without the failure, dropping x from 3 to 1 breaks the hold
    ev = evaluate_schedule(sol, coeffs, HorizonParams())
    assert not ev.feasible
    assert any("scale-down" in v for v in ev.violations)


def _failing():
    coeffs = one_class([30.0, 30.0], inventory={"x": 3, "y": 10}, second=True)
    return coeffs, instance_inventory(coeffs, [InventoryEvent(epoch=1, chip="x", delta_chips=-2)])


def test_creation_energy_is_charged():
    # [10, 45] req/s with look-ahead: [2, 5] creates 3 vPods; at 50 J per chip created that adds 150 J
    # (holding 5 from the start would cost 90 kJ more).
    coeffs = one_class([10.0, 45.0])
    sol = plan_full(coeffs, OPTS, HorizonParams(create_energy_j_per_chip=50.0, prewarm=False))
    assert counts(sol, X) == [2, 5]
    assert sol.objective_value == pytest.approx(210_150.0, rel=1e-6)
    assert sol.totals["reconfig_energy_j"] == pytest.approx(150.0)


def test_creation_energy_breaks_a_tie():
    # [10, 30] req/s: [2, 4] and [3, 3] both cost 6 x 30 kJ; a creation cost picks [3, 3]
    coeffs = one_class([10.0, 30.0])
    sol = plan_full(coeffs, OPTS, HorizonParams(create_energy_j_per_chip=50.0, prewarm=False))
    assert counts(sol, X) == [3, 3]
    assert sol.objective_value == pytest.approx(180_000.0, rel=1e-6)


@pytest.mark.parametrize("rates", [[10.0, 45.0], [30.0, 0.0, 0.0, 0.0, 0.0], [12.0, 31.0, 7.0, 55.0]])
def test_evaluator_agrees_with_the_solver(rates):
    coeffs = one_class(rates)
    params = HorizonParams(shrink_after_s=600.0, create_energy_j_per_chip=7.0)
    sol = plan_full(coeffs, OPTS, params)
    ev = evaluate_schedule(sol, coeffs, params)
    assert ev.feasible, ev.violations
    assert ev.objective_value == pytest.approx(sol.objective_value, rel=1e-6)
