from __future__ import annotations

import random
import re
from pathlib import Path

import pandas as pd
import pyomo.environ as pyo
import pytest
from pyomo.opt import TerminationCondition
from topo_builders import groups_of, instance, random_state

from neuscale_opt.topology.check import check_placements
from neuscale_opt.topology.greedy import first_fit
from neuscale_opt.topology.milp import EXACT_IDS, PATTERN_IDS, demo_model, exact_choice, pattern_choice
from neuscale_opt.topology.patterns import fleet_placement_data, placement_data, realize_generation
from neuscale_opt.topology.pods import pod_states, state_of

SPEC = Path(__file__).resolve().parents[2] / "formulations" / "placement.md"
V5E, V4 = "tpu-v5e", "tpu-v4"


def _solve(m: pyo.ConcreteModel):
    res = pyo.SolverFactory("appsi_highs").solve(m, load_solutions=False)
    tc = res.solver.termination_condition
    if tc == TerminationCondition.optimal:
        m.solutions.load_from(res)
    return tc


def _chips(s: str) -> int:
    out = 1
    for x in s.split("x"):
        out *= int(x)
    return out


def _values(chip: str, shapes: list[str], seed: int) -> dict:
    rng = random.Random(seed)
    # mildly super-linear value per chip, so larger slices are worth packing but not always
    return {(chip, s): _chips(s) ** 1.05 * (1.0 + 0.2 * rng.random()) for s in shapes}


def _plan_rows(pl) -> pd.DataFrame:
    return pd.DataFrame([{"epoch": 0, "pod": pp.pod, **pp.placement.row()} for pp in pl])


CASES = [
    (V5E, (16, 16), 3, ["1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"], 6),
    (V4, (4, 4, 8), 2, ["2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8"], 3),
    (V4, (8, 8, 8), 2, ["2x2x1", "4x4x4", "4x4x8", "4x8x8", "8x8x8"], 4),
]


@pytest.mark.parametrize(("chip", "dims", "n_pods", "shapes", "max_failed"), CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_pattern_and_exact_reach_the_same_optimum(chip, dims, n_pods, shapes, max_failed, seed):
    rng = random.Random(seed)
    states = [random_state(rng, chip, dims, max_failed) for _ in range(n_pods)]
    states.append(states[0])  # two identical pods share a state
    groups = groups_of(*states)
    data = {chip: placement_data(groups, shapes)}
    value = _values(chip, shapes, seed)
    upper = {k: rng.randint(1, 6) if _chips(k[1]) < 16 else rng.randint(1, 4) for k in value}
    upper[(chip, shapes[0])] = 200
    objs = {}
    for variant in ("pattern", "exact"):
        m = demo_model(data, value, upper, variant=variant)
        assert _solve(m) == TerminationCondition.optimal
        objs[variant] = pyo.value(m.obj)
        counts = {s: round(pyo.value(m.N[c, s])) for c, s in value}
        if variant == "pattern":
            pods, cubes = pattern_choice(m.placement, data)
            pl = realize_generation(data[chip], counts, pods[chip], cubes[chip])
        else:
            pl = exact_choice(m.placement)
        alloc = {(0, chip, s): n for s, n in counts.items()}
        got = {}
        for pp in pl:
            got[pp.placement.name] = got.get(pp.placement.name, 0) + 1
        if variant == "exact":  # ">=" rows may select extra placements: keep exactly the counts
            keep, seen = [], {}
            for pp in pl:
                seen[pp.placement.name] = seen.get(pp.placement.name, 0) + 1
                if seen[pp.placement.name] <= counts.get(pp.placement.name, 0):
                    keep.append(pp)
            pl = keep
        assert check_placements(_plan_rows(pl), groups, alloc) == []
    assert objs["pattern"] == pytest.approx(objs["exact"], rel=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_3d_knapsack_rows_and_pattern_columns_reach_the_exact_optimum(seed):
    # the healthy pod (8 cubes, kinds of 2, 4 and 8 cubes: 4 patterns, 3 knapsack integers) gets a
    # knapsack row, the two pods with 7 healthy cubes (2 patterns) share pattern columns
    states = [
        state_of(V4, (8, 8, 8)),
        state_of(V4, (8, 8, 8), [(0, 0, 0)]),
        state_of(V4, (8, 8, 8), [(5, 5, 5)]),
        state_of(V4, (8, 8, 8), [(1, 1, 1), (6, 6, 6)]),
    ]
    groups = groups_of(*states)
    shapes = ["2x2x1", "4x4x4", "4x4x8", "4x8x8", "8x8x8"]
    data = {V4: placement_data(groups, shapes)}
    rng = random.Random(seed)
    value = _values(V4, shapes, seed)
    upper = {(V4, "2x2x1"): 200, (V4, "4x4x4"): rng.randint(0, 6), (V4, "4x4x8"): rng.randint(1, 8)}
    upper |= {(V4, "4x8x8"): rng.randint(1, 4), (V4, "8x8x8"): rng.randint(0, 2)}
    objs = {}
    for variant in ("pattern", "exact"):
        m = demo_model(data, value, upper, variant=variant)
        assert _solve(m) == TerminationCondition.optimal
        objs[variant] = pyo.value(m.obj)
        if variant == "pattern":
            assert len(m.placement.x_cube_pod) == 3 and len(m.placement.c_cube_pod) == 1
            assert len(m.placement.y_pattern) > 0
            counts = {s: round(pyo.value(m.N[c, s])) for c, s in value}
            pods, cubes = pattern_choice(m.placement, data)
            pl = realize_generation(data[V4], counts, pods[V4], cubes[V4])
            assert check_placements(_plan_rows(pl), groups, {(0, V4, s): n for s, n in counts.items()}) == []
    assert objs["pattern"] == pytest.approx(objs["exact"], rel=1e-9)


def _doc_ids() -> set[str]:
    text = SPEC.read_text(encoding="utf-8")
    return set(re.findall(r"`((?:c|x|y|w|r)_[a-z_]+)`", text))


def test_component_ids_match_the_spec():
    st = state_of(V5E, (16, 16), [(0, 0)])
    cube = state_of(V4, (4, 4, 8), [(0, 0, 0)])
    groups = groups_of(st) + groups_of(cube)
    data = fleet_placement_data(groups, {V5E: ["1x1", "4x4"], V4: ["2x2x1", "4x4x4"]})
    built: set[str] = set()
    for variant in ("pattern", "exact"):
        m = demo_model(
            data, {(V5E, "1x1"): 1.0, (V5E, "4x4"): 20.0, (V4, "2x2x1"): 4.0, (V4, "4x4x4"): 70.0}, variant=variant
        )
        built |= {c.local_name for c in m.placement.component_objects((pyo.Var, pyo.Constraint))}
    assert built == set(PATTERN_IDS) | set(EXACT_IDS)
    assert _doc_ids() == built


def test_refuses_a_plan_that_counting_chips_accepts():
    # Two failed chips in two hosts of the first host column: 254 healthy chips hold 15 x 16 = 240
    # by count, but only 14 aligned 4x4 slices fit; and no 8x16 or 16x8 fits next to rows 0 and 2.
    inst = instance([{"chip": V5E, "pods": [{"dims": [16, 16], "failed_chips": [[0, 0], [4, 0]]}]}])
    groups = pod_states(inst)
    assert inst.healthy_chips()[V5E] == 254 >= 15 * 16
    data = fleet_placement_data(groups, {V5E: ["4x4"]})
    for variant in ("pattern", "exact"):
        m = demo_model(data, {(V5E, "4x4"): 1.0}, lower={(V5E, "4x4"): 15}, variant=variant)
        assert _solve(m) == TerminationCondition.infeasible
        m = demo_model(data, {(V5E, "4x4"): 1.0}, variant=variant)
        assert _solve(m) == TerminationCondition.optimal and round(pyo.value(m.obj)) == 14
    placed, left = first_fit(groups, {(V5E, "4x4"): 15})
    assert len(placed) == 14 and left == {(V5E, "4x4"): 1}
    inst2 = instance([{"chip": V5E, "pods": [{"dims": [16, 16], "failed_chips": [[6, 4], [8, 8]]}]}])
    data2 = fleet_placement_data(pod_states(inst2), {V5E: ["8x16"]})
    m = demo_model(data2, {(V5E, "8x16"): 1.0}, lower={(V5E, "8x16"): 1})
    assert _solve(m) == TerminationCondition.infeasible
