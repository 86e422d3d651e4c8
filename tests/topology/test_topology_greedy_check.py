from __future__ import annotations

import pandas as pd
from topo_builders import groups_of, instance

from neuscale_opt.topology.check import check_placements
from neuscale_opt.topology.greedy import FirstFitPlacer, first_fit
from neuscale_opt.topology.pods import pod_states, state_of

V5E, V4 = "tpu-v5e", "tpu-v4"


def _rows(pl, epoch: int = 0) -> pd.DataFrame:
    return pd.DataFrame([{"epoch": epoch, "pod": pp.pod, **pp.placement.row()} for pp in pl])


def test_first_fit_fills_a_pod_with_4x4():
    groups = groups_of(state_of(V5E, (16, 16)))
    placed, left = first_fit(groups, {(V5E, "4x4"): 16})
    assert len(placed) == 16 and left == {}
    assert placed[0].placement.origin == (0, 0) and placed[1].placement.origin == (0, 4)  # row-major
    assert check_placements(_rows(placed), groups, {(0, V5E, "4x4"): 16}) == []


def test_first_fit_reports_what_does_not_fit_though_chips_remain():
    groups = groups_of(state_of(V5E, (16, 16), [(6, 4), (8, 8)]))
    placed, left = first_fit(groups, {(V5E, "8x16"): 1, (V5E, "2x2"): 3})
    assert left == {(V5E, "8x16"): 1} and len(placed) == 3
    # the small slices go to the healthy halves of the damaged hosts first, then row-major
    assert [pp.placement.origin for pp in placed] == [(6, 6), (8, 10), (0, 0)]


def test_first_fit_largest_first_and_lowest_pod():
    groups = groups_of(state_of(V5E, (16, 16), [(0, 0)]), state_of(V5E, (16, 16)))
    placed, left = first_fit(groups, {(V5E, "1x1"): 1, (V5E, "16x16"): 1})
    assert left == {}
    assert [(pp.pod, pp.placement.name) for pp in placed] == [("tpu-v5e/1", "16x16"), ("tpu-v5e/0", "1x1")]


def test_first_fit_3d_cubes_and_subcubes():
    groups = groups_of(state_of(V4, (4, 4, 8), [(0, 0, 0)]))
    placer = FirstFitPlacer.from_groups(groups)
    a = placer.place(V4, "2x2x4")
    assert a is not None and a.placement.origin[2] < 4  # the damaged cube 0 first
    b = placer.place(V4, "4x4x4")
    assert b is not None and b.placement.cubes == (1,)
    assert placer.place(V4, "4x4x4") is None


def test_check_flags_every_violation():
    inst = instance([{"chip": V5E, "pods": [{"dims": [16, 16], "failed_chips": [[0, 0]]}]}])
    groups = pod_states(inst)
    placed, _ = first_fit(groups, {(V5E, "4x4"): 2, (V5E, "2x2"): 1})
    df = _rows(placed)
    alloc = {(0, V5E, "4x4"): 2, (0, V5E, "2x2"): 1}
    assert check_placements(df, inst, alloc) == []
    bad = pd.concat([df, df.iloc[[0]]], ignore_index=True)  # the same slice twice
    msgs = check_placements(bad, inst, alloc)
    assert any("also used by" in m for m in msgs) and any("3 placed vPods" in m for m in msgs)
    moved = df.copy()
    moved.at[0, "origin"] = [0, 0]
    moved.at[0, "chips"] = [[r, c] for r in range(4) for c in range(4)]
    assert any("failed chip" in m for m in check_placements(moved, inst, alloc))
    shifted = df.copy()
    shifted.at[0, "origin"] = [1, 4]
    shifted.at[0, "chips"] = [[r, c] for r in range(1, 5) for c in range(4, 8)]
    assert any("not aligned" in m for m in check_placements(shifted, inst, alloc))
    odd = df.copy()
    odd.at[0, "shape"] = "3x3"
    assert any("not allowed" in m for m in check_placements(odd, inst, alloc))
    other = df.copy()
    other.at[0, "pod"] = "tpu-v5e/9"
    assert any("unknown pod" in m for m in check_placements(other, inst, alloc))
    assert any("the allocation has 3" in m for m in check_placements(df, inst, {**alloc, (0, V5E, "4x4"): 3}))
    outside = df.copy()
    outside.at[0, "origin"] = [14, 4]
    outside.at[0, "chips"] = [[r, c] for r in range(14, 18) for c in range(4, 8)]
    assert any("outside" in m for m in check_placements(outside, inst, alloc))


def test_check_cube_built_rows():
    groups = groups_of(state_of(V4, (4, 4, 8)))
    placed, _ = first_fit(groups, {(V4, "4x4x8"): 1})
    df = _rows(placed)
    assert df.at[0, "cubes"] == [0, 1]
    assert check_placements(df, groups, {(0, V4, "4x4x8"): 1}) == []
    df.at[0, "cubes"] = [0, 0]
    assert any("distinct cubes" in m for m in check_placements(df, groups, {(0, V4, "4x4x8"): 1}))
