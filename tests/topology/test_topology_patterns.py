from __future__ import annotations

import random

import pandas as pd
import pytest
from topo_builders import groups_of, random_state

from neuscale_opt.topology.check import check_placements
from neuscale_opt.topology.patterns import (
    NotPlaceable,
    _block_boxes,
    _packer,
    brute_force_feasible,
    canonical_mask,
    feasible,
    healthy_positions,
    knapsack_patterns,
    max_count,
    pareto_max,
    placement_data,
    realize,
    realize_generation,
)
from neuscale_opt.topology.pods import state_of
from neuscale_opt.topology.slices import allowed_shapes, check_shape, placements, shape_str

V5E, V4 = "tpu-v5e", "tpu-v4"


def test_sixteen_4x4_in_a_healthy_pod():
    assert max_count(state_of(V5E, (16, 16)), "4x4") == 16


@pytest.mark.parametrize("failed", [(0, 0), (5, 9), (15, 15), (8, 3)])
def test_one_failed_chip_removes_exactly_one_4x4(failed):
    st = state_of(V5E, (16, 16), [failed])
    assert max_count(st, "4x4") == 15
    assert feasible(st, {"4x4": 15}) and not feasible(st, {"4x4": 16})


def test_max_counts_of_a_pod():
    st = state_of(V5E, (16, 16), [(0, 0), (4, 0)])  # two damaged hosts in the first host column
    assert max_count(st, "4x4") == 14  # the column keeps only rows 3-4 and 5-6 of hosts
    assert max_count(st, "16x16") == 0
    assert max_count(st, "8x16") == 1
    assert max_count(st, "1x1") == 254
    assert max_count(st, "2x2") == 62
    assert max_count(st, "2x4") == 30


def test_pareto_and_knapsack():
    assert pareto_max([(1, 0), (0, 1), (1, 1), (0, 0)]) == ((1, 1),)
    # cube kinds of 1, 2 and 4 cubes on 4 healthy cubes
    assert set(knapsack_patterns(4, (1, 2, 4))) == {(4, 0, 0), (2, 1, 0), (0, 2, 0), (0, 0, 1)}


def test_healthy_pod_patterns_mix_shapes():
    data = placement_data(groups_of(state_of(V5E, (16, 16))), ["4x4", "8x8", "16x16"])
    assert data.kinds == ((16, 16), (8, 8), (4, 4))  # largest first
    pats = set(data.patterns[0])
    assert pats == {(1, 0, 0), (0, 4, 0), (0, 3, 4), (0, 2, 8), (0, 1, 12), (0, 0, 16)}


def _random_counts(rng: random.Random, shapes, pod_chips: int) -> dict[str, int]:
    out: dict[str, int] = {}
    budget = pod_chips
    for s in rng.sample(shapes, k=min(len(shapes), rng.randint(1, 4))):
        size = 1
        for x in s:
            size *= x
        n = rng.randint(0, max(0, budget // size + 1))
        if n:
            out[shape_str(s)] = n
            budget -= n * size
    return out


@pytest.mark.parametrize(("chip", "dims", "max_failed"), [(V5E, (8, 8), 4), (V5E, (4, 16), 3), (V4, (4, 4, 8), 3)])
def test_feasibility_agrees_with_brute_force(chip, dims, max_failed):
    rng = random.Random(sum(dims) * 31 + len(chip))
    shapes = [s for s in allowed_shapes(chip) if all(x <= d for x, d in zip(sorted(s), sorted(dims), strict=True))]
    agree = {True: 0, False: 0}
    for _ in range(60):
        st = random_state(rng, chip, dims, max_failed)
        counts = _random_counts(rng, shapes, st.healthy_chips)
        ok = feasible(st, counts)
        assert ok == brute_force_feasible(st, counts), (st.failed, counts)
        agree[ok] += 1
        if ok:
            rows = [{"epoch": 0, "pod": "p", **p.row()} for p in realize(st, counts)]
            df = pd.DataFrame(rows, columns=["epoch", "pod", "chip", "shape", "origin", "chips", "cubes"])
            alloc: dict = {}
            for k, n in counts.items():
                key = (0, chip, shape_str(check_shape(chip, k)))
                alloc[key] = alloc.get(key, 0) + n
            assert check_placements(df, {"p": st}, alloc) == []
    assert agree[True] > 5 and agree[False] > 5


def test_max_count_agrees_with_brute_force_small_pods():
    rng = random.Random(7)
    for _ in range(15):
        st = random_state(rng, V5E, (8, 8), 3)
        for s in ["2x2", "2x4", "4x4", "4x8", "8x4"]:
            n = max_count(st, s)
            assert brute_force_feasible(st, {s: n}) and not brute_force_feasible(st, {s: n + 1})


def test_3d_cube_rules():
    st = state_of(V4, (16, 16, 16), [(1, 1, 1), (5, 5, 5)])  # two damaged cubes, one failed host each
    assert max_count(st, "4x4x8") == 31  # 62 healthy cubes, two per slice
    assert max_count(st, "2x2x4") == 62 * 4 + 2 * 3
    assert max_count(st, "2x2x1") == 62 * 16 + 2 * 15
    assert max_count(st, "16x16x16") == 0
    small = state_of(V4, (4, 4, 8), [(0, 0, 0)])
    assert max_count(small, "4x4x8") == 0 and max_count(small, "4x4x4") == 1
    assert feasible(small, {"4x4x4": 1, "2x4x4": 1, "2x2x4": 1, "2x2x2": 1})  # 8 + 4 + 2 of 15 hosts
    assert not feasible(small, {"4x4x4": 1, "2x4x4": 2})


def test_realize_generation_over_several_pods_is_valid():
    rng = random.Random(11)
    states = [random_state(rng, V5E, (16, 16), 6) for _ in range(3)]
    groups = groups_of(*states)
    data = placement_data(groups, ["1x1", "2x2", "2x4", "4x4", "8x8", "8x16"])
    counts = {"8x16": 1, "8x8": 3, "4x4": 10, "2x4": 9, "2x2": 11, "1x1": 17}
    pl = realize_generation(data, counts)
    df = pd.DataFrame([{"epoch": 0, "pod": pp.pod, **pp.placement.row()} for pp in pl])
    assert check_placements(df, groups, {(0, V5E, s): n for s, n in counts.items()}) == []
    with pytest.raises(NotPlaceable):
        realize_generation(data, {"8x16": 7})


def test_reflected_pods_share_a_pattern_class_with_the_patterns_of_their_own_mask():
    rng = random.Random(5)
    kinds = ((16, 16), (8, 16), (8, 8), (4, 8), (4, 4))
    packer = _packer((8, 4), _block_boxes(V5E, kinds), len(kinds))
    for _ in range(12):
        st = random_state(rng, V5E, (16, 16), 3)
        mirrored = state_of(V5E, (16, 16), [(15 - x, 15 - y) for x, y in st.failed])  # both axes reversed
        flipped = state_of(V5E, (16, 16), [(15 - x, y) for x, y in st.failed])
        raw = sum(1 << (h[0] * 4 + h[1]) for h in st.damaged_hosts)
        data = placement_data(groups_of(st, mirrored, flipped), [shape_str(k) for k in kinds])
        assert len(data.classes) == 1  # one pattern class for the three pods
        # the class's patterns are those of the DP on each pod's own, unreflected mask
        for g in data.groups:
            own = sum(1 << (h[0] * 4 + h[1]) for h in g.state.damaged_hosts)
            assert set(data.patterns[0]) == set(packer.pareto(own))
        assert canonical_mask((8, 4), st.damaged_hosts)[0] <= raw
        counts = {"8x8": 1, "4x8": 2, "4x4": 5}
        pl = realize_generation(data, counts)
        df = pd.DataFrame([{"epoch": 0, "pod": pp.pod, **pp.placement.row()} for pp in pl])
        assert check_placements(df, data.groups, {(0, V5E, s): n for s, n in counts.items()}) == []


def test_different_damage_makes_different_classes():
    corner = state_of(V5E, (16, 16), [(0, 0)])  # host (0, 0): a corner of the host grid
    middle = state_of(V5E, (16, 16), [(6, 4)])  # host (3, 1): inside
    data = placement_data(groups_of(corner, middle, state_of(V5E, (16, 16))), ["4x4", "8x8", "16x16"])
    assert len(data.classes) == 3
    assert max(p[1] for p in data.patterns[0]) == 3 and max(p[2] for p in data.patterns[0]) == 15


def test_counted_sub_host_positions_equal_the_listed_ones():
    rng = random.Random(9)
    for _ in range(10):
        st = random_state(rng, V5E, (16, 16), 8)
        for s in ["1x1", "2x2", "2x4"]:
            assert healthy_positions(st, check_shape(V5E, s)) == len(placements(st, s))


def test_3d_patterns_leave_single_cubes_to_the_capacity_row():
    data = placement_data(groups_of(state_of(V4, (8, 8, 8), [(0, 0, 0)])), ["4x4x4", "4x4x8", "4x8x8"])
    assert data.kinds == (1, 2, 4) and data.free_kinds == (0,)
    assert set(data.patterns[0]) == {(0, 3, 0), (0, 1, 1)}  # 7 healthy cubes: 2-cube and 4-cube slices
    assert max_count(state_of(V4, (8, 8, 8), [(0, 0, 0)]), "4x4x4") == 7
    pl = realize_generation(data, {"4x4x4": 3, "4x8x8": 1})
    assert sorted(len(pp.placement.cubes) for pp in pl) == [1, 1, 1, 4]
    with pytest.raises(NotPlaceable):
        realize_generation(data, {"4x4x4": 4, "4x8x8": 1})
