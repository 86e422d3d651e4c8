"""The evaluator's pre-warm hold of epoch-by-epoch plans (``formulations/allocation.md``, "Pre-warm
hold"), by hand: the vPods a group adds at an epoch are held L before it, as the replay creates them."""

from __future__ import annotations

import pytest

from neuscale_opt.alloc.evaluate import evaluate
from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import greedy, solve_milp

RATES = [10.0, 45.0, 20.0, 30.0]  # one class, 10 req/s per vPod: 1, 5, 2, 3 vPods


def _coeffs(lead_s: float | None):
    # 100 W and 3.6 USD/h per vPod (1 chip), PUE 1.2: an epoch of 300 s held is 30 kJ at the chips
    c = make_coefficients(
        [vpod("x", "A", rate=10, static_w=100, price=3.6, chips=1)],
        {(t, "A"): r for t, r in enumerate(RATES)},
        epoch_s=300.0,
        util_cap=1.0,
        pue=1.2,
    )
    if lead_s is not None:
        c.demand.attrs["observed_lead_s"] = lead_s
    return c


@pytest.mark.parametrize("planner", ["milp", "greedy"])
def test_added_vpods_are_held_the_lead_before_their_epoch(planner):
    c = _coeffs(30.0)
    opts = PlanOptions(objective="energy")
    sol = solve_milp(c, opts) if planner == "milp" else greedy(c, opts)
    assert [int(n) for n in sol.allocations.sort_values("epoch")["n_vpods"]] == [1, 5, 2, 3]
    # epoch 1 adds 4 vPods, epoch 3 adds 1 (epoch 2 shrinks; epoch 0 is the warm start):
    # 5 x 100 W x 30 s = 15 kJ at the chips, x PUE 1.2 = 18 kJ; 5 x 3.6 USD/h x 30 s = 0.15 USD
    t = sol.totals
    assert t["prewarm_energy_j"] == pytest.approx(18_000.0)
    assert t["prewarm_cost_usd"] == pytest.approx(0.15)
    # 11 vPod-epochs x 30 kJ x 1.2 + the hold; 11 x 3.6 USD/h x 300 s + the hold
    assert t["energy_j"] == pytest.approx(11 * 36_000.0 + 18_000.0)
    assert t["cost_usd"] == pytest.approx(11 * 0.3 + 0.15)
    ev = evaluate(sol, c)
    by_epoch = [36_000.0, 5 * 36_000.0 + 4 * 3_600.0, 72_000.0, 3 * 36_000.0 + 3_600.0]
    assert list(ev.by_epoch["energy_j"]) == pytest.approx(by_epoch)


def test_no_lead_no_hold():
    # tables without the lead (hand fixtures, profiled tables, an instance with prewarm = false)
    for c in (_coeffs(None), _coeffs(0.0)):
        t = solve_milp(c, PlanOptions(objective="energy")).totals
        assert t["prewarm_energy_j"] == 0.0 and t["energy_j"] == pytest.approx(11 * 36_000.0)
