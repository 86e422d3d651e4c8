"""Placement in the allocation: the MILP refuses plans that chip counts accept but pods cannot hold,
the pattern and exact variants agree, every planner's placements pass the independent check, the
evaluator catches tampered placements, the greedy heuristic fails over on fragmentation, and plans
with placements are deterministic."""

from __future__ import annotations

import json
import math
import random

import pandas as pd
import pytest
from alloc_support import ROOT

from neuscale_opt.alloc.evaluate import evaluate
from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import greedy, homogeneous, plan, solve_milp, unlimited
from neuscale_opt.alloc.solution import PLACEMENT_COLUMNS
from neuscale_opt.candidates import build_coefficients
from neuscale_opt.instance import load_instance, parse_instance
from neuscale_opt.planning import load_plan_input
from neuscale_opt.topology.check import check_placements
from neuscale_opt.topology.patterns import brute_force_feasible, max_count
from neuscale_opt.topology.pods import state_of

UNPLACEABLE = ROOT / "instances" / "placement" / "unplaceable.toml"
V5E, V6E, V4 = "tpu-v5e", "tpu-v6e", "tpu-v4"
T = 300.0


def _shape_counts(sol) -> dict[tuple[str, str], int]:
    g = sol.allocations.drop_duplicates(["epoch", "vpod_group"])
    return {(str(c), str(s)): int(n) for (c, s), n in g.groupby(["chip", "shape"])["n_vpods"].sum().items()}


def _alloc_counts(sol) -> dict[tuple[int, str, str], int]:
    g = sol.allocations.drop_duplicates(["epoch", "vpod_group"])
    sums = g.groupby(["epoch", "chip", "shape"])["n_vpods"].sum()
    return {(int(e), str(c), str(s)): int(n) for (e, c, s), n in sums.items()}


def _pods_of(coeffs) -> dict:
    return {str(r.pod): state_of(r.chip, r.dims, r.failed) for r in coeffs.pods.itertuples()}


# -- the must-show instance -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def unplaceable():
    coeffs, inst = load_plan_input(str(UNPLACEABLE))
    return coeffs, inst


def _v6e_counts(sol) -> dict[str, int]:
    return {s: n for (c, s), n in _shape_counts(sol).items() if c == V6E}


def _grown(counts: dict[str, int], shape: str) -> dict[str, int]:
    return {**counts, shape: counts.get(shape, 0) + 1}


@pytest.fixture(scope="module")
def count_only(unplaceable):
    coeffs, inst = unplaceable
    return solve_milp(coeffs, PlanOptions.from_instance(inst, placement="none"))


def test_counting_chips_accepts_a_plan_the_pods_cannot_hold(unplaceable, count_only):
    """The count-only optimum puts all 480 req/s on the fragmented v6e pod (its most efficient
    generation) with fewer chips than the pod's healthy ones, in slices the exact search proves the
    pod cannot hold at once; OR-Tools reaches the same optimum; the evaluator flags it unplaced."""
    coeffs, inst = unplaceable
    assert count_only.status == "optimal"
    counts = _v6e_counts(count_only)
    assert set(_shape_counts(count_only)) == {(V6E, s) for s in counts}  # v6e only
    pod = _pods_of(coeffs)["tpu-v6e/0"]
    assert pod.healthy_chips == 244
    chips = sum(n * math.prod(int(d) for d in s.split("x")) for s, n in counts.items())
    assert chips <= pod.healthy_chips
    assert not brute_force_feasible(pod, counts)
    # the 12 damaged hosts (one failed chip each): 20 whole hosts, so at most 20 2x4 and 8 4x4
    assert max_count(pod, "2x4") == 20 and max_count(pod, "4x4") == 8
    assert brute_force_feasible(pod, {"4x4": 8}) and not brute_force_feasible(pod, {"4x4": 9})
    other = solve_milp(coeffs, PlanOptions.from_instance(inst, placement="none", backend="ortools"))
    assert other.objective_value == pytest.approx(count_only.objective_value, rel=1e-6)
    ev = evaluate(count_only, coeffs)
    assert ev.feasible and ev.unplaced == (V6E,) and ev.totals["placement"] == "unplaced"
    assert count_only.to_dict()["placements"] == []


@pytest.mark.parametrize("variant", ["pattern", "exact"])
def test_placement_picks_another_plan(unplaceable, count_only, variant):
    """With placement the plan keeps on the v6e pod only slices the exact search can place, fills
    the pod's whole hosts so that no further 2x4 slice fits, serves the rest on the (counted) v5e
    reservation, and is dearer than the count-only plan; both variants and both backends agree."""
    coeffs, inst = unplaceable
    sol = solve_milp(coeffs, PlanOptions.from_instance(inst, placement=variant))
    assert sol.status == "optimal"
    pod = _pods_of(coeffs)["tpu-v6e/0"]
    counts = _v6e_counts(sol)
    assert brute_force_feasible(pod, counts)
    assert not brute_force_feasible(pod, _grown(counts, "2x4"))  # the undamaged hosts are full
    assert sum(n for (c, _), n in _shape_counts(sol).items() if c == V5E) > 0
    assert sol.objective_value > count_only.objective_value * (1 + 1e-6)
    other = solve_milp(coeffs, PlanOptions.from_instance(inst, placement=variant, backend="ortools"))
    assert other.objective_value == pytest.approx(sol.objective_value, rel=1e-6)
    ev = evaluate(sol, coeffs)
    assert ev.feasible, ev.violations
    assert ev.unplaced == () and ev.totals["placement"] == "checked"
    pl = sol.placements
    assert list(pl.columns) == list(PLACEMENT_COLUMNS)
    assert len(pl) == sum(counts.values()) and set(pl["chip"]) == {V6E}
    assert pl.groupby("shape").size().to_dict() == counts
    # every placement covers whole healthy hosts: origin on the 2x4 host grid
    assert all(o[0] % 2 == 0 and o[1] % 4 == 0 for o in pl["origin"])
    assert check_placements(pl, _pods_of(coeffs), _alloc_counts(sol)) == []


def test_without_a_fallback_the_planner_refuses_with_a_diagnosis():
    raw = load_instance(UNPLACEABLE).model_dump(mode="python", exclude_none=True)
    raw["fleet"] = [f for f in raw["fleet"] if f["chip"] == V6E]
    inst = parse_instance(raw)
    coeffs = build_coefficients(inst)
    assert solve_milp(coeffs, PlanOptions.from_instance(inst, placement="none")).status == "optimal"
    for variant in ("pattern", "exact"):
        sol = solve_milp(coeffs, PlanOptions.from_instance(inst, placement=variant))
        assert sol.status == "infeasible"
        d = sol.diagnosis
        assert "\n" not in d
        assert "counting chips alone the inventory covers all classes (with tpu-v6e 12 x 4x4)" in d
        assert "tpu-v6e needs 12 x 4x4 slices but its pods hold at most 8 at once" in d
        assert "leaves 86.02 req/s unserved ('chat' 86.02)" in d
    g = greedy(coeffs, PlanOptions.from_instance(inst))
    assert g.status == "infeasible"
    assert "no longer fit although chips remained: tpu-v6e 2x4" in g.diagnosis


# -- pattern and exact agree, small fleets -----------------------------------------------------------


def _small_fleet(seed: int):
    """Two identical v5e pods, one damaged v5e pod and a v4 pod of two cubes with a failed chip; one
    class per generation mix, several shapes with slightly different efficiencies."""
    rng = random.Random(seed)
    damaged = sorted({(rng.randrange(16), rng.randrange(16)) for _ in range(3)})
    pods = {
        V5E: [((16, 16), []), ((16, 16), damaged), ((16, 16), [])],
        V4: [((4, 4, 8), [(rng.randrange(4), rng.randrange(4), rng.randrange(8))])],
    }
    rows = []
    for b in ("a", "b"):
        for shape, chips in (("2x4", 8), ("4x4", 16), ("8x8", 64), ("8x16", 128)):
            rate = chips * rng.uniform(0.9, 1.3)
            rows.append(vpod(V5E, b, rate=rate, dyn_j=rng.uniform(1, 2), static_w=10 * chips, chips=chips, shape=shape))
        for shape, chips in (("2x2x2", 8), ("2x4x4", 32), ("4x4x4", 64)):
            rate = chips * rng.uniform(1.0, 1.5)
            rows.append(vpod(V4, b, rate=rate, dyn_j=rng.uniform(1, 2), static_w=12 * chips, chips=chips, shape=shape))
    demand = {"a": rng.uniform(250, 400), "b": rng.uniform(250, 400)}
    return make_coefficients(rows, demand, pods=pods, epoch_s=T)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pattern_and_exact_reach_the_same_allocation_optimum(seed):
    coeffs = _small_fleet(seed)
    objs = {}
    for variant in ("pattern", "exact", "none"):
        sol = solve_milp(coeffs, PlanOptions(placement=variant, mip_gap=0.0))
        assert sol.status == "optimal"
        ev = evaluate(sol, coeffs)
        assert ev.feasible, ev.violations
        assert ev.objective_value == pytest.approx(sol.objective_value, rel=1e-6)
        objs[variant] = sol.objective_value
        if variant != "none":
            assert ev.totals["placement"] == "checked"
            assert len(sol.placements) == sum(_alloc_counts(sol).values())
    assert objs["pattern"] == pytest.approx(objs["exact"], rel=1e-9)
    assert objs["none"] <= objs["pattern"] * (1 + 1e-9)  # placement only restricts


def test_placement_makes_a_difference_on_some_small_fleet():
    # not vacuous: on at least one of the seeds above the count-only optimum is not placeable
    diffs = []
    for seed in (0, 1, 2):
        c = _small_fleet(seed)
        a = solve_milp(c, PlanOptions(placement="none", mip_gap=0.0)).objective_value
        b = solve_milp(c, PlanOptions(placement="pattern", mip_gap=0.0)).objective_value
        diffs.append(b - a)
    assert max(diffs) > 0


def test_highs_and_ortools_agree_with_placement():
    coeffs = _small_fleet(1)
    objs = [
        solve_milp(coeffs, PlanOptions(placement=p, backend=b, mip_gap=0.0)).objective_value
        for p in ("pattern", "exact")
        for b in ("highs", "ortools")
    ]
    assert max(objs) == pytest.approx(min(objs), rel=1e-6)


# -- heuristics ---------------------------------------------------------------------------------------


def _fragmented():
    """One v5e pod with two failed chips: 254 healthy chips (room for three 8x8 by count) but only two
    aligned 8x8 slices fit. 8x8 carries 10 req/s at 100 W, 4x4 2 req/s at 40 W."""
    rows = [
        vpod(V5E, "a", rate=10, static_w=100, chips=64, shape="8x8", name="big"),
        vpod(V5E, "a", rate=2, static_w=40, chips=16, shape="4x4", name="small"),
    ]
    return make_coefficients(rows, {"a": 30.0}, pods={V5E: [((16, 16), [(4, 4), (12, 12)])]}, epoch_s=T)


def test_fragmented_pod_counts():
    pod = state_of(V5E, (16, 16), [(4, 4), (12, 12)])
    assert pod.healthy_chips == 254 and max_count(pod, "8x8") == 2


@pytest.mark.parametrize("method", ["greedy", "homogeneous"])
def test_heuristics_fail_over_when_a_shape_no_longer_fits(method):
    coeffs = _fragmented()
    count_only = plan(coeffs, PlanOptions(placement="none"), method)
    assert _shape_counts(count_only) == {(V5E, "8x8"): 3}
    sol = plan(coeffs, PlanOptions(), method)
    assert sol.status == "feasible"
    # the third 8x8 does not fit although 126 chips remain: 10 req/s fail over to five 4x4 vPods
    assert _shape_counts(sol) == {(V5E, "8x8"): 2, (V5E, "4x4"): 5}
    assert sol.objective_value == pytest.approx(T * (2 * 100 + 5 * 40))
    ev = evaluate(sol, coeffs)
    assert ev.feasible, ev.violations
    assert ev.totals["placement"] == "checked"
    # first fit: the 8x8 slices at the first free aligned origins, row-major
    big = sol.placements[sol.placements["shape"] == "8x8"]
    assert sorted(map(tuple, big["origin"])) == [(0, 8), (6, 0)]  # (0, 0), (0, 4), (2, 0)... hold (4, 4)


def test_milp_on_the_fragmented_pod():
    coeffs = _fragmented()
    assert solve_milp(coeffs, PlanOptions(placement="none")).objective_value == pytest.approx(T * 300)
    sol = solve_milp(coeffs, PlanOptions())
    assert _shape_counts(sol) == {(V5E, "8x8"): 2, (V5E, "4x4"): 5}
    assert sol.objective_value == pytest.approx(T * 400)


def test_unlimited_places_nothing():
    coeffs = _fragmented()
    sol = unlimited(coeffs, PlanOptions())
    assert sol.placements.empty and sol.to_dict()["placements"] == []
    ev = evaluate(sol, coeffs.with_unlimited_inventory())
    assert ev.feasible and ev.totals["placement"] == "not applicable"


# -- the evaluator catches tampered placements --------------------------------------------------------


@pytest.fixture(scope="module")
def placed_plan():
    coeffs = _fragmented()
    sol = solve_milp(coeffs, PlanOptions())
    assert evaluate(sol, coeffs).feasible
    return coeffs, sol


def _tampered(sol, pl: pd.DataFrame):
    return type(sol)(**{**sol.__dict__, "placements": pl.reset_index(drop=True)})


def test_evaluator_catches_overlap(placed_plan):
    coeffs, sol = placed_plan
    pl = sol.placements.copy()
    small = pl.index[pl["shape"] == "4x4"]
    pl.loc[small[1], ["origin", "chips", "pod"]] = pl.loc[small[0], ["origin", "chips", "pod"]].to_numpy()
    ev = evaluate(_tampered(sol, pl), coeffs)
    assert not ev.feasible
    assert any("also used by" in v for v in ev.violations)


def test_evaluator_catches_failed_chip(placed_plan):
    coeffs, sol = placed_plan
    pl = sol.placements.copy()
    i = pl.index[pl["shape"] == "4x4"][0]
    pl.at[i, "origin"] = [4, 4]
    pl.at[i, "chips"] = [[x, y] for x in range(4, 8) for y in range(4, 8)]
    ev = evaluate(_tampered(sol, pl), coeffs)
    assert not ev.feasible
    assert any("failed chip [4, 4]" in v for v in ev.violations)


def test_evaluator_catches_wrong_count(placed_plan):
    coeffs, sol = placed_plan
    pl = sol.placements.iloc[1:]
    ev = evaluate(_tampered(sol, pl), coeffs)
    assert not ev.feasible
    assert any("placed vPods, the allocation has" in v for v in ev.violations)
    assert any("placed vPods, holds" in v for v in ev.violations)


def test_evaluator_catches_misaligned_and_outside(placed_plan):
    coeffs, sol = placed_plan
    pl = sol.placements.copy()
    i = pl.index[pl["shape"] == "4x4"][0]
    pl.at[i, "origin"] = [1, 0]
    pl.at[i, "chips"] = [[x, y] for x in range(1, 5) for y in range(4)]
    j = pl.index[pl["shape"] == "8x8"][0]
    pl.at[j, "shape"] = "16x16x16"
    ev = evaluate(_tampered(sol, pl), coeffs)
    assert any("not aligned" in v for v in ev.violations)
    assert any("shape 16x16x16 is not allowed" in v for v in ev.violations)


# -- contract and determinism -------------------------------------------------------------------------


def test_placement_rows_name_their_group_and_json_is_deterministic():
    coeffs = _small_fleet(0)
    a = solve_milp(coeffs, PlanOptions())
    b = solve_milp(coeffs, PlanOptions())
    assert a.to_json(timing=False) == b.to_json(timing=False)
    d = json.loads(a.to_json(timing=False))
    assert d["placement"] == "pattern" and d["placements"]
    row = d["placements"][0]
    assert set(row) == set(PLACEMENT_COLUMNS)
    assert isinstance(row["origin"], list) and isinstance(row["chips"][0], list)
    # per group: n_vpods rows, indices 0..n-1, the group's chip and shape
    groups = a.allocations.drop_duplicates(["epoch", "vpod_group"]).set_index("vpod_group")
    for g, part in a.placements.groupby("vpod_group"):
        assert sorted(part["vpod"]) == list(range(int(groups.at[g, "n_vpods"])))
        assert set(part["chip"]) == {groups.at[g, "chip"]}
    cube = [r for r in d["placements"] if r["shape"] == "4x4x4"]
    assert all(len(r["cubes"]) == 1 for r in cube)


def test_greedy_plan_json_is_deterministic():
    coeffs = _small_fleet(2)
    a, b = greedy(coeffs, PlanOptions()), greedy(coeffs, PlanOptions())
    assert a.to_json(timing=False) == b.to_json(timing=False)
    assert evaluate(a, coeffs).feasible
    h = homogeneous(coeffs, PlanOptions())
    if h.has_plan:
        assert evaluate(h, coeffs).feasible and not h.placements.empty


def test_default_instance_plans_with_placements():
    inst = load_instance(None)
    coeffs = build_coefficients(inst)
    opts = PlanOptions.from_instance(inst)
    assert opts.placement == "pattern"
    sol = solve_milp(coeffs, opts)
    ref = solve_milp(coeffs, opts.replace(placement="none"))
    assert sol.status == "optimal"
    # placing slices can only restrict the count-only plan (with the calibrated coefficients the
    # default fleet is nearly full and placement binds: the placed plan is dearer)
    assert sol.objective_value >= ref.objective_value * (1 - 1e-6)
    ev = evaluate(sol, coeffs)
    assert ev.feasible and ev.totals["placement"] == "checked"
    assert len(sol.placements) == sum(_alloc_counts(sol).get(k, 0) for k in _alloc_counts(sol) if k[1] != V6E)
