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
