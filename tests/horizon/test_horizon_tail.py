"""Tail classes in the auto-scalers (``neuscale_opt.horizon.autoscaler`` rule 5): a class below the
tail rate rides on the spare capacity of the nearest held group, as in the epoch planners; when the
spare capacity cannot hold it, it is an ordinary class."""

from __future__ import annotations

import pytest

from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.horizon import HorizonParams, evaluate_schedule, homogeneous_each, neuscale_autoscaler

OPTS = PlanOptions(objective="energy", variant="dedicated", time_limit_s=30.0)


def _coeffs(big: float):
    """Two 300-s epochs. 'big' at ``big`` req/s on type v (10 req/s per vPod, 100 W); 'tiny' at
    0.1 req/s (below the 0.2 req/s default tail rate): on v 2 req/s per vPod, on its own type w
    0.2 req/s per vPod at 5 W. By the auto-scaler's efficiency e_k = static x T / (cap x T) per
    request, w (5 / 0.2 = 25 J/req) beats v (100 / 2 = 50 J/req) for tiny, and 0.1 req/s is not
    below theta x cap = 0.5 x 0.2, so without the tail rule tiny gets a w vPod of its own."""
    rows = [
        vpod("g", "big", rate=10, static_w=100, name="v"),
        vpod("g", "tiny", rate=2, static_w=100, name="v"),
        vpod("h", "tiny", rate=0.2, static_w=5, name="w"),
    ]
    dem = {(t, b): r for t in (0, 1) for b, r in (("big", big), ("tiny", 0.1))}
    return make_coefficients(rows, dem, tokens={"big": (500, 50), "tiny": (600, 50)}, epoch_s=300.0)


def _rows(sol):
    """(epoch, class) -> (vPod type, serving group, rate) of the rows that serve something."""
    return {
        (r.epoch, r.bucket): (r.vpod_type, r.vpod_group, r.rate_rps)
        for r in sol.allocations.itertuples()
        if r.rate_rps > 0
    }


def test_tail_class_rides_on_the_held_group():
    # epoch 0 creates big's vPod, which serves 1 - delta = 0.9 of the epoch (30-s creation delay of
    # 300 s): big at 8 req/s loads it to 0.8, leaving 0.1 vPods = 0.2 req/s of tiny's v rate, enough
    # for its 0.1 req/s (load 0.05); epoch 1 keeps the vPod (capacity 1, room 0.2)
    c = _coeffs(8.0)
    sol = neuscale_autoscaler(c, OPTS, HorizonParams())
    rows = _rows(sol)
    for t in (0, 1):
        assert rows[(t, "tiny")][0] == "v"
        assert rows[(t, "tiny")][1] == rows[(t, "big")][1]
        assert rows[(t, "tiny")][2] == pytest.approx(0.1)
    assert "w" not in set(sol.allocations["vpod_type"])
    assert evaluate_schedule(sol, c, HorizonParams()).feasible
    # the rule off: tiny's best configuration is w, and it gets a vPod of its own
    off = neuscale_autoscaler(c, OPTS.replace(tail_rate_rps=0.0), HorizonParams())
    assert {_rows(off)[(t, "tiny")][0] for t in (0, 1)} == {"w"}


def test_tail_class_without_room_is_ordinary():
    # created at the boundary (not pre-warmed). Epoch 0: big at 8.98 req/s on a new vPod of
    # capacity 0.9 leaves 0.002 vPods x 2 req/s = 0.004 req/s of room, less than tiny's 0.1: tiny
    # gets its own w vPod (best efficiency)
    c = _coeffs(8.98)
    rows = _rows(neuscale_autoscaler(c, OPTS, HorizonParams(prewarm=False)))
    assert rows[(0, "tiny")][0] == "w"
    # epoch 1: big's kept vPod would have room (0.102 x 2 = 0.204 req/s), but tiny's own w vPod is
    # held anyway (halving only after 30 min below need): capacity held anyway comes first (rule i)
    assert rows[(1, "tiny")][1] == "w|tiny"


def test_homogeneous_autoscaler_follows_the_rule():
    each = homogeneous_each(_coeffs(8.0), OPTS, HorizonParams())
    rows = _rows(each["g"])
    assert rows[(0, "tiny")][1] == rows[(0, "big")][1]


def test_rolling_hook_routes_a_committed_epoch():
    """The hook the rolling planner calls around each window (``alloc.tail.split_tail`` before the
    solve, ``route_tail_commit`` on the committed epoch), on a hand-made commit."""
    import pandas as pd

    from neuscale_opt.alloc.tail import route_tail_commit, split_tail

    dem = {("big", 0): 8.0, ("tiny", 0): 0.1, ("big", 1): 8.0, ("tiny", 1): 0.3}
    model_dem, tail = split_tail(dem, [0, 1], 0.2)
    assert model_dem == {("big", 0): 8.0, ("tiny", 0): 0.0, ("big", 1): 8.0, ("tiny", 1): 0.3}
    assert tail == {0: {"tiny": 0.1}}
    assert split_tail(dem, [0, 1], 0.0) == (dem, {})
    configs = pd.DataFrame(
        {
            "config_id": ["v|big", "v|tiny", "w|tiny"],
            "bucket": ["big", "tiny", "tiny"],
            "vpod_type": ["v", "v", "w"],
            "group": ["v|big", "v|tiny", "w|tiny"],
            "cap_rps": [10.0, 2.0, 0.2],
        }
    )
    tokens = {"big": 500.0, "tiny": 600.0}
    # big loads its one vPod to 0.8: 0.2 vPods x 2 req/s = 0.4 req/s of room for tiny on v
    x, routes, left = route_tail_commit({"v|big": 1}, {"v|big": 8.0}, {"tiny": 0.1}, configs, tokens)
    assert x == {"v|big": 8.0, "v|tiny": pytest.approx(0.1)} and routes == {"v|tiny": "v|big"} and not left
    # at 9.9 req/s the room is 0.01 x 2 = 0.02 req/s < 0.1: no route, tiny is left to plan again
    x, routes, left = route_tail_commit({"v|big": 1}, {"v|big": 9.9}, {"tiny": 0.1}, configs, tokens)
    assert x == {"v|big": 9.9} and routes == {} and left == {"tiny"}


@pytest.mark.parametrize("planner", ["rolling", "full"])
def test_horizon_milp_routes_tail_classes(planner):
    """The rolling MILP and the full-horizon MILP (the oracle) under the same rule: tiny (0.1 req/s,
    below the 0.2 req/s tail rate) gets no group of its own and rides on big's held v vPod, which
    has 0.2 req/s of tiny's rate spare in epoch 0 (worked in ``test_tail_class_rides_on_the_held_group``)
    and 0.4 in epoch 1 (capacity 1, load 0.8). Off, the model's best for tiny is a w vPod of its
    own (5 W held against a second 100-W v vPod)."""
    from neuscale_opt.horizon import plan_full, plan_rolling

    def run(c, opts):
        if planner == "rolling":
            return plan_rolling(c, opts, HorizonParams(), forecast_method="oracle", window=2, bound=True)
        return plan_full(c, opts, HorizonParams())

    c = _coeffs(8.0)
    sol = run(c, OPTS)
    rows = _rows(sol)
    for t in (0, 1):
        assert rows[(t, "tiny")][0] == "v"
        assert rows[(t, "tiny")][1] == rows[(t, "big")][1] == "v|big"
        assert rows[(t, "tiny")][2] == pytest.approx(0.1)
        assert rows[(t, "big")][2] == pytest.approx(8.0)
    assert "w" not in set(sol.allocations["vpod_type"])
    held = sol.allocations.drop_duplicates(["epoch", "vpod_group"])
    assert held["n_vpods"].sum() == 2  # one v vPod in each epoch, nothing else
    assert evaluate_schedule(sol, c, HorizonParams()).feasible
    if planner == "rolling":  # the bound covers the routed tail: never above the plan
        assert sol.bound <= sol.objective_value * (1 + 1e-9)
    off = run(c, OPTS.replace(tail_rate_rps=0.0))
    assert {_rows(off)[(t, "tiny")][0] for t in (0, 1)} == {"w"}
    assert sol.objective_value < off.objective_value  # the routed plan holds 5 W less in both epochs


def _coeffs_by_epoch(big: dict[int, float]):
    """As :func:`_coeffs`, with big's rate per epoch."""
    rows = [
        vpod("g", "big", rate=10, static_w=100, name="v"),
        vpod("g", "tiny", rate=2, static_w=100, name="v"),
        vpod("h", "tiny", rate=0.2, static_w=5, name="w"),
    ]
    dem = {**{(t, "big"): r for t, r in big.items()}, **{(t, "tiny"): 0.1 for t in big}}
    return make_coefficients(rows, dem, tokens={"big": (500, 50), "tiny": (600, 50)}, epoch_s=300.0)


@pytest.mark.parametrize(
    ("big", "tiny_type"),
    [
        # epoch 0 (warm start, no creation delay): big at 9.98 req/s loads its vPod to 0.998, room
        # 0.002 x 2 = 0.004 req/s < 0.1: tiny is planned as an ordinary class and gets its w vPod
        ({0: 9.98, 1: 9.98}, {0: "w", 1: "w"}),
        # epoch 1 grows big to two vPods (18.9 req/s); the new one (created at the boundary, not
        # pre-warmed) serves 1 - delta = 0.9 of the
        # epoch, so the capacity is 1.9 and the load 1.89: room 0.01 x 2 = 0.02 req/s < 0.1 (without
        # the delay it would be 0.22 and the route would overload the group); in epoch 0 tiny rides
        # on v (room 0.4)
        ({0: 8.0, 1: 18.9}, {0: "v", 1: "w"}),
    ],
)
def test_rolling_milp_plans_a_tail_class_without_room(big, tiny_type):
    from neuscale_opt.horizon import plan_rolling

    c = _coeffs_by_epoch(big)
    sol = plan_rolling(c, OPTS, HorizonParams(prewarm=False), forecast_method="oracle", window=2)
    rows = _rows(sol)
    assert {t: rows[(t, "tiny")][0] for t in big} == tiny_type
    assert sol.unserved.empty
    assert evaluate_schedule(sol, c, HorizonParams(prewarm=False)).feasible


def test_a_class_on_vpods_of_its_own_stays_ordinary():
    """``kept_ordinary``: a tail class planned as ordinary (no room) and served on its own vPods in
    the committed epoch is planned as ordinary in the next window; routed, or not in ``own``, not."""
    import pandas as pd

    from neuscale_opt.horizon.rolling import EpochCommit, kept_ordinary

    configs = pd.DataFrame({"config_id": ["v|big", "v|tiny", "w|tiny"], "bucket": ["big", "tiny", "tiny"]})

    def commit(x, routes=None):
        return EpochCommit(0, {"v|big": 1, "w|tiny": 1}, x, {}, {}, "optimal", {}, (), routes or {})

    assert kept_ordinary(commit({"v|big": 9.0, "w|tiny": 0.1}), {"tiny"}, configs) == {"tiny"}
    assert kept_ordinary(commit({"v|big": 9.0, "v|tiny": 0.1}, {"v|tiny": "v|big"}), {"tiny"}, configs) == set()
    assert kept_ordinary(commit({"v|big": 9.0, "w|tiny": 0.1}), set(), configs) == set()
    assert kept_ordinary(commit({"v|big": 9.0}), {"tiny"}, configs) == set()
