"""The rolling plan's relaxation bound (``horizon.rolling.relaxation_bound``) on hand-solved
instances, with and without ``serve_all`` (the bound over schedules that leave nothing unserved)."""

from __future__ import annotations

import pytest
from horizon_support import OPTS, one_class

from neuscale_opt.horizon import HorizonParams, instance_inventory
from neuscale_opt.horizon.rolling import actual_demand, relaxation_bound

#: one_class: a vPod of chip x serves 10 req/s and costs 100 W x 300 s = 30 kJ per epoch; the
#: unserved penalty is 100 J per request (10 x 30 kJ / 3000 requests)
VPOD_EPOCH_J = 30_000.0
PENALTY_J = 100.0
PARAMS = HorizonParams()


def _bound(rates, inventory, serve_all):
    coeffs = one_class(rates, inventory=inventory)
    return relaxation_bound(
        coeffs, OPTS, PARAMS, actual_demand(coeffs), instance_inventory(coeffs), serve_all=serve_all
    )


def test_when_the_fleet_covers_the_demand_both_bounds_are_the_held_vpods():
    # 20 req/s in both epochs: 2 vPods held twice (the LP cannot do better: r <= 10 n)
    for serve_all in (False, True):
        assert _bound([20.0, 20.0], {"x": 2}, serve_all) == pytest.approx(4 * VPOD_EPOCH_J, rel=1e-9)


def test_serve_all_is_none_when_no_schedule_covers_the_demand():
    # 30 req/s at epoch 1 on two chips: 10 req/s can only be left unserved
    assert _bound([20.0, 30.0], {"x": 2}, serve_all=True) is None
    # without serve_all the bound pays the penalty for it: 4 vPod-epochs + 10 req/s x 300 s x 100 J
    assert _bound([20.0, 30.0], {"x": 2}, serve_all=False) == pytest.approx(
        4 * VPOD_EPOCH_J + 10 * 300 * PENALTY_J, rel=1e-9
    )


def _rolling(jobs, monkeypatch, used):
    from neuscale_opt.horizon import plan_rolling
    from neuscale_opt.horizon.rolling import BoundBeside

    get = BoundBeside.get

    def spy(self, planned):
        value = get(self, planned)
        used.append(value is not BoundBeside.UNUSED)
        return value

    monkeypatch.setattr(BoundBeside, "get", spy)
    coeffs = one_class([20.0, 40.0, 10.0, 30.0], inventory={"x": 6})
    return plan_rolling(coeffs, OPTS.replace(jobs=jobs), PARAMS, "last-peak", window=2, bound=True)


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="the forked bound is Linux only")
def test_the_bound_computed_beside_the_windows_is_the_one_computed_after_them(monkeypatch):
    used: list[bool] = []
    beside = _rolling(2, monkeypatch, used)
    assert used == [True]  # the child's bound was taken
    after = _rolling(1, monkeypatch, used)
    assert used == [True]  # one job: no child
    assert beside.bound == after.bound and beside.gap == after.gap
    assert beside.objective_value == after.objective_value
    # by hand, on the last-peak forecasts (20, 20, 40, 10 req/s planned; 10 req/s per vPod): the
    # vPods planned are a lower bound on what is held, 2 + 2 + 4 + 1 vPod-epochs of 30 kJ at least
    assert 9 * VPOD_EPOCH_J * (1 - 1e-9) <= after.bound <= after.objective_value


def test_a_bound_computed_for_other_demand_is_not_used(monkeypatch):
    import sys

    from neuscale_opt.horizon.rolling import BoundBeside

    if not sys.platform.startswith("linux"):
        pytest.skip("the forked bound is Linux only")
    coeffs = one_class([20.0, 20.0], inventory={"x": 2})
    early = BoundBeside.start(
        coeffs, OPTS.replace(jobs=2), PARAMS, {("A", 0): 20.0, ("A", 1): 20.0}, instance_inventory(coeffs), None
    )
    assert early is not None
    assert early.get({("A", 0): 20.0, ("A", 1): 10.0}) is BoundBeside.UNUSED


@pytest.mark.parametrize(
    "change", [{"jobs": 1}, {"solver_log": True}, {"save_lp": "m.lp"}, {"save_mps": "m.mps"}], ids=str
)
def test_no_child_without_two_jobs_or_with_solver_output(change):
    # the solver's log and the models it writes stay in this process, in their order
    coeffs = one_class([20.0, 20.0], inventory={"x": 2})
    opts = OPTS.replace(**{"jobs": 2, **change})
    from neuscale_opt.horizon.rolling import BoundBeside

    assert BoundBeside.start(coeffs, opts, PARAMS, {("A", 0): 20.0}, instance_inventory(coeffs), None) is None


def test_the_integer_bound_closes_the_vpod_rounding_the_relaxation_leaves():
    from neuscale_opt.horizon.rolling import integer_bound

    # 15 req/s on 10-req/s vPods in both epochs: the LP holds 1.5 vPods (2 x 1.5 x 30 kJ), the
    # integer model 2 (2 x 2 x 30 kJ; leaving 5 req/s unserved would cost 5 x 300 x 100 J = 150 kJ)
    coeffs = one_class([15.0, 15.0], inventory={"x": 2})
    inv = instance_inventory(coeffs)
    for serve_all in (False, True):
        lp = relaxation_bound(coeffs, OPTS, PARAMS, actual_demand(coeffs), inv, serve_all=serve_all)
        assert lp == pytest.approx(3 * VPOD_EPOCH_J, rel=1e-9)
        got = integer_bound(coeffs, OPTS, PARAMS, actual_demand(coeffs), inv, serve_all=serve_all)
        assert got.status == "optimal"
        assert got.value == pytest.approx(4 * VPOD_EPOCH_J, rel=1e-9)
        assert got.incumbent == pytest.approx(4 * VPOD_EPOCH_J, rel=1e-9) and got.gap == pytest.approx(0.0, abs=1e-9)


def test_the_integer_bound_proves_nothing_when_no_schedule_serves_all():
    from neuscale_opt.horizon.rolling import integer_bound

    coeffs = one_class([15.0, 15.0], inventory={"x": 1})
    got = integer_bound(coeffs, OPTS, PARAMS, actual_demand(coeffs), instance_inventory(coeffs), serve_all=True)
    assert got.value is None and got.status == "infeasible"
    # allowed to leave 5 req/s unserved: one vPod per epoch plus the penalty, 2 x (30 kJ + 150 kJ)
    got = integer_bound(coeffs, OPTS, PARAMS, actual_demand(coeffs), instance_inventory(coeffs))
    assert got.value == pytest.approx(2 * (VPOD_EPOCH_J + 5 * 300 * PENALTY_J), rel=1e-9)


def _ratio(min_served, inventory):
    from neuscale_opt.horizon.rolling import ratio_bound

    # 15 req/s of 100 output tokens in both 300-s epochs: 450,000 tokens and 4,500 requests each
    coeffs = one_class([15.0, 15.0], inventory=inventory, second=True)
    tokens = {("A", t): 450_000.0 for t in (0, 1)}
    requests = {("A", t): 4_500.0 for t in (0, 1)}
    inv = instance_inventory(coeffs)
    return ratio_bound(coeffs, OPTS, PARAMS, actual_demand(coeffs), inv, tokens, requests, min_served)


def test_the_ratio_ceiling_is_the_best_tokens_per_joule_at_the_share_served():
    # chip x: 10 req/s for 30 kJ an epoch (10 tokens/J), chip y: 10 req/s for 60 kJ (5 tokens/J);
    # one x, two y. All served: x 10 req/s + half a y vPod for 5 req/s each epoch (the LP's vPod),
    # 900,000 tokens over 2 x (30 + 30) kJ = 7.5 tokens/J
    assert _ratio(1.0, {"x": 1, "y": 2}).value == pytest.approx(7.5, rel=1e-6)
    # 80 %: 24 of the 30 req/s-epochs served, 20 on x and 4 on y (0.4 of a y vPod-epoch):
    # 720,000 tokens over 60 kJ + 24 kJ
    got = _ratio(0.8, {"x": 1, "y": 2})
    assert got.value == pytest.approx(720_000 / 84_000, rel=1e-6)
    assert got.served_share == pytest.approx(0.8, rel=1e-6) and got.tokens == pytest.approx(720_000, rel=1e-6)
    # two thirds or less: x alone, 10 tokens/J (serving less does not help further)
    assert _ratio(2 / 3, {"x": 1, "y": 2}).value == pytest.approx(10.0, rel=1e-6)
    assert _ratio(0.5, {"x": 1, "y": 2}).value == pytest.approx(10.0, rel=1e-6)


def test_the_ratio_ceiling_proves_nothing_where_no_schedule_serves_the_share():
    # one x vPod serves 10 of the 15 req/s: 70 % is out of reach
    assert _ratio(0.7, {"x": 1, "y": 0}).value is None
    assert _ratio(0.6, {"x": 1, "y": 0}).value == pytest.approx(10.0, rel=1e-6)
