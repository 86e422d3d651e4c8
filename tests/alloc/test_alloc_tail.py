"""Tail classes (``formulations/allocation.md``, "Tail classes"): below the tail rate a class rides
on the spare capacity of the nearest held group meeting its SLO; every planner follows the rule;
the replay sends its requests to that group."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from neuscale_opt.alloc.evaluate import evaluate
from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import greedy, homogeneous, solve_milp
from neuscale_opt.candidates import build_coefficients
from neuscale_opt.replay import replay

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replay"))
from replay_builders import poisson_trace, tiny_instance  # noqa: E402

T = 100.0


def _coeffs(tiny_on_big: bool = True):
    """'big' 9 req/s on type v (10 req/s per vPod, 100 W): one vPod with 0.1 of spare load.
    'tiny' 0.1 req/s (a tail class), 2 req/s per vPod of v (load 0.05) when ``tiny_on_big``, and on
    its own type w (50 W) either way."""
    rows = [
        vpod("g", "big", rate=10, static_w=100, name="v"),
        vpod("g", "tiny", rate=1, static_w=50, name="w"),
    ]
    if tiny_on_big:
        rows.append(vpod("g", "tiny", rate=2, static_w=100, name="v"))
    return make_coefficients(rows, {"big": 9.0, "tiny": 0.1}, tokens={"big": (500, 50), "tiny": (600, 50)}, epoch_s=T)


@pytest.mark.parametrize("variant", ["dedicated", "pooled"])
def test_tail_class_rides_on_spare_capacity(variant):
    c = _coeffs()
    opts = PlanOptions(variant=variant)
    sol = solve_milp(c, opts)
    # one vPod of v carries big (0.9) and tiny (0.1 / 2 = 0.05): 100 W x 100 s
    assert sol.objective_value == pytest.approx(100 * T)
    rows = {r.bucket: (r.vpod_type, r.vpod_group, r.rate_rps) for r in sol.allocations.itertuples()}
    assert rows["tiny"][0] == "v" and rows["tiny"][1] == rows["big"][1]
    assert rows["tiny"][2] == pytest.approx(0.1)
    assert sol.epochs[0]["tail_classes"] == ["tiny"]
    assert evaluate(sol, c).feasible
    # without the rule the dedicated MILP gives tiny a vPod of its own (w, 50 W)
    own = solve_milp(c, opts.replace(variant="dedicated", tail_rate_rps=0.0))
    assert own.objective_value == pytest.approx(150 * T)


def test_baselines_follow_the_same_rule():
    c = _coeffs()
    for sol in (greedy(c, PlanOptions()), homogeneous(c, PlanOptions())):
        assert sol.has_plan
        assert set(sol.allocations["vpod_type"]) == {"v"}, sol.method
        assert evaluate(sol, c).feasible


def test_tail_class_without_a_fitting_group_gets_its_own():
    c = _coeffs(tiny_on_big=False)  # v cannot serve tiny: w is held for it
    sol = solve_milp(c, PlanOptions())
    assert sol.objective_value == pytest.approx(150 * T)
    assert "tail_classes" not in sol.epochs[0]
    assert evaluate(sol, c).feasible


def test_replay_sends_the_tail_class_to_its_route():
    rates = {"a": 0.1, "b": 10.0}  # a is the tail class
    inst = tiny_instance(rates, epochs=1, length_s=120.0, v6e_chips=16, v5e_chips=16)
    coeffs = build_coefficients(inst)
    sol = solve_milp(coeffs, PlanOptions())
    assert sol.epochs[0]["tail_classes"] == ["a"]
    groups = dict(zip(sol.allocations["bucket"], sol.allocations["vpod_group"], strict=False))
    lengths = coeffs.buckets.set_index("bucket")
    spec = {b: (r, int(lengths.at[b, "input_tokens"]), int(lengths.at[b, "output_tokens"])) for b, r in rates.items()}
    res = replay(sol.to_dict(), inst, trace=poisson_trace(spec, 120.0, seed=2), coeffs=coeffs)
    req = res.requests
    vp = res.vpods.set_index("vpod") if "vpod" in res.vpods.columns else res.vpods
    a_req = req[req["bucket"] == "a"]
    assert len(a_req) > 0 and (a_req["vpod"] >= 0).all()  # every tail request was served ...
    assert set(vp.loc[a_req["vpod"], "vpod_group"]) == {groups["a"]} == {groups["b"]}  # ... on b's group


@pytest.mark.parametrize("planner", ["milp", "greedy"])
def test_a_tail_class_is_not_split_over_two_groups_with_one_configuration(planner):
    # dedicated groups of type v for 'a' and 'b' (9 req/s each on 10 per vPod: 0.1 vPod spare each);
    # 'tiny' (0.3 req/s, 2 per vPod of v: 0.15 vPod) fits only over both. Its configuration of v is
    # one plan row, on one group: routing it over both would put 0.3 req/s on one (load 1.05 > 1), so
    # it takes the nearest group's room, finds the rest no room and is planned as an ordinary class
    rows = [
        vpod("g", "a", rate=10, static_w=100, name="v"),
        vpod("g", "b", rate=10, static_w=100, name="v"),
        vpod("g", "tiny", rate=2, static_w=100, name="v"),
        vpod("g", "tiny", rate=1, static_w=50, name="w"),
    ]
    c = make_coefficients(
        rows, {"a": 9.0, "b": 9.0, "tiny": 0.3}, tokens={"a": (500, 50), "b": (700, 50), "tiny": (600, 50)}, epoch_s=T
    )
    opts = PlanOptions(variant="dedicated", tail_rate_rps=1.0)
    sol = solve_milp(c, opts) if planner == "milp" else greedy(c, opts)
    ev = evaluate(sol, c)
    assert ev.feasible, ev.violations
    tiny = sol.allocations[sol.allocations["bucket"] == "tiny"]
    assert tiny["rate_rps"].sum() == pytest.approx(0.3)
    assert tiny["config_id"].is_unique
    assert "tail_classes" not in sol.epochs[0]  # planned as an ordinary class
