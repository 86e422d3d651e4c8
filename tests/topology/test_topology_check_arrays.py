"""The array check of placements (``check_placements``) against the per-vPod networkx rules
(``check_placements_graph``) on hand-made good and bad rows and on random perturbed rows."""

from __future__ import annotations

import itertools
import random

import pandas as pd
import pytest

from neuscale_opt.topology.check import check_placements, check_placements_graph
from neuscale_opt.topology.pods import state_of

V5E, V4 = "tpu-v5e", "tpu-v4"
PODS = {
    "tpu-v5e/0": state_of(V5E, (16, 16), [(0, 0), (9, 9)]),
    "tpu-v5e/1": state_of(V5E, (16, 16)),
    "tpu-v4/0": state_of(V4, (4, 4, 8), [(1, 1, 5)]),
    "tpu-v4/1": state_of(V4, (8, 8, 8)),
    "tpu-v5e/2": state_of(V5E, (16, 16)),
}


def box(origin, shape):
    return [
        list(o + d for o, d in zip(origin, off, strict=True)) for off in itertools.product(*(range(s) for s in shape))
    ]


def row(pod, shape, origin, chips=None, cubes=(), epoch=0):
    dims = tuple(int(x) for x in shape.split("x"))
    chip = pod.split("/")[0]
    return {
        "epoch": epoch,
        "pod": pod,
        "chip": chip,
        "shape": shape,
        "origin": list(origin),
        "chips": box(origin, dims) if chips is None else chips,
        "cubes": list(cubes),
    }


def cube_chips(pod, ids):
    st = PODS[pod]
    return sorted([list(c) for i in ids for c in st.cube_chips(i)])


GOOD = [
    row("tpu-v5e/0", "4x4", (0, 4)),
    row("tpu-v5e/0", "2x2", (0, 2)),  # the healthy half of the damaged host at (0, 0)
    row("tpu-v5e/0", "1x1", (1, 1)),
    row("tpu-v5e/0", "8x4", (8, 0)),  # the other orientation of 4x8
    row("tpu-v5e/2", "16x16", (0, 0)),
    row("tpu-v4/0", "2x2x4", (0, 0, 0)),
    row("tpu-v4/0", "2x2x1", (2, 0, 0)),
    row("tpu-v4/1", "4x4x8", (4, 0, 0), cube_chips("tpu-v4/1", [5, 6]), cubes=(5, 6)),  # any cubes (OCS)
    row("tpu-v4/1", "4x4x4", (4, 4, 4), cube_chips("tpu-v4/1", [7]), cubes=(7,)),
    row("tpu-v5e/0", "4x4", (0, 4), epoch=1),  # same chips, another epoch
]
GOOD_COUNTS = {
    (0, V5E, "4x4"): 1,
    (0, V5E, "2x2"): 1,
    (0, V5E, "1x1"): 1,
    (0, V5E, "4x8"): 1,
    (0, V5E, "16x16"): 1,
    (0, V4, "2x2x4"): 1,
    (0, V4, "2x2x1"): 1,
    (0, V4, "4x4x8"): 1,
    (0, V4, "4x4x4"): 1,
    (1, V5E, "4x4"): 1,
}

non_contiguous = box((0, 8), (4, 4))
non_contiguous[-1] = [6, 14]
wrapped = [[x % 16, y] for x in range(14, 18) for y in range(8, 12)]  # connected through the wrap link
BAD = {  # case -> row, words of the expected message
    "overlap": row("tpu-v5e/0", "2x2", (2, 4)),  # inside GOOD[0]
    "failed chip": row("tpu-v5e/0", "2x2", (8, 8)),
    "out of pod": row("tpu-v5e/1", "4x4", (14, 4)),
    "non-contiguous": row("tpu-v5e/1", "4x4", (0, 8), non_contiguous),
    "wrap-around": row("tpu-v5e/1", "4x4", (14, 8), wrapped),
    "not aligned": row("tpu-v5e/1", "4x4", (4, 2)),  # y not on the 2x4 host grid
    "half hosts": row("tpu-v5e/1", "4x2", (4, 0)),
    "duplicate chip": row("tpu-v5e/1", "2x2", (4, 4), box((4, 4), (2, 1)) * 2),
    "too few chips": row("tpu-v5e/1", "2x4", (6, 4), box((6, 4), (2, 2))),
    "sub-cube across cubes": row("tpu-v4/1", "2x2x4", (0, 0, 2)),
    "failed host in cube": row("tpu-v4/0", "2x2x4", (0, 0, 4)),
    "cube listed twice": row("tpu-v4/1", "4x4x8", (0, 0, 0), cube_chips("tpu-v4/1", [0, 3]), cubes=(0, 0)),
    "chips of other cubes": row("tpu-v4/1", "4x4x4", (0, 0, 0), cube_chips("tpu-v4/1", [3]), cubes=(4,)),
    "damaged cube": row("tpu-v4/0", "4x4x4", (0, 0, 4), cube_chips("tpu-v4/0", [1]), cubes=(1,)),
    "cubes on a box": row("tpu-v4/1", "2x2x1", (0, 0, 0), cubes=(0,)),
    "unknown pod": row("tpu-v5e/7", "4x4", (0, 0)),
    "wrong generation": {**row("tpu-v5e/1", "4x4", (0, 0)), "chip": "tpu-v6e"},
    "bad shape": row("tpu-v5e/1", "3x3", (0, 0)),
}


EXPECT = {
    "overlap": "also used by placements[0]",
    "failed chip": "contains failed chip [9, 9]",
    "out of pod": "outside the pod",
    "non-contiguous": "not the aligned box",
    "wrap-around": "not aligned",
    "not aligned": "not aligned",
    "half hosts": "not made of whole hosts",
    "duplicate chip": "2 distinct chips",
    "too few chips": "4 distinct chips",
    "sub-cube across cubes": "not aligned",
    "failed host in cube": "contains failed chip [1, 1, 5]",
    "cube listed twice": "not 2 distinct cubes",
    "chips of other cubes": "not the chips of the listed whole cubes",
    "damaged cube": "contains failed chip [1, 1, 5]",
    "cubes on a box": "cube ids given",
    "unknown pod": "unknown pod",
    "wrong generation": "on a tpu-v5e pod",
    "bad shape": "not allowed",
}


def both(rows, counts):
    df = pd.DataFrame(rows)
    return check_placements(df, PODS, counts), check_placements_graph(df, PODS, counts)


def test_good_rows_pass_both_checks():
    fast, ref = both(GOOD, GOOD_COUNTS)
    assert fast == ref == []


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_bad_row_is_flagged_by_both_with_the_same_messages(case):
    fast, ref = both([*GOOD, BAD[case]], GOOD_COUNTS)
    mine = [m for m in fast if m.startswith(f"placements[{len(GOOD)}]")]
    assert mine and EXPECT[case] in mine[0], fast  # the bad row itself, for the rule it breaks
    if case != "overlap":
        assert not any("also used" in m for m in mine)
    assert all(not m.startswith(f"placements[{i}]") for m in fast for i in range(len(GOOD)))
    assert fast == ref


def test_overlap_names_the_first_shared_chip_and_the_earlier_row():
    fast, ref = both([*GOOD, BAD["overlap"]], GOOD_COUNTS)
    assert f"placements[{len(GOOD)}] (epoch 0, pod tpu-v5e/0): chip [2, 4] also used by placements[0]" in fast
    assert fast == ref


def test_wrong_counts_and_negative_control():
    fast, ref = both(GOOD, {**GOOD_COUNTS, (0, V5E, "4x4"): 2})
    assert fast == ref == ["epoch 0 tpu-v5e 4x4: 1 placed vPods, the allocation has 2"]


def test_random_perturbed_rows_agree_with_the_graph_check():
    rng = random.Random(7)
    shapes = {V5E: ["1x1", "2x2", "2x4", "4x4", "4x8", "8x4", "8x8"], V4: ["2x2x1", "2x2x2", "2x4x4", "4x2x2"]}
    rows = []
    for _ in range(150):
        pod = rng.choice([p for p in PODS if not p.startswith("tpu-v4/1")])
        st = PODS[pod]
        s = rng.choice(shapes[st.chip])
        dims = tuple(int(x) for x in s.split("x"))
        origin = tuple(rng.randrange(0, d, 2) for d in st.dims)
        chips = box(origin, dims)
        kind = rng.random()
        if kind < 0.2 and len(chips) > 1:
            chips[rng.randrange(len(chips))] = [rng.randrange(d) for d in st.dims]
        elif kind < 0.3:
            chips = chips[1:]
        rows.append(row(pod, s, origin, chips, epoch=rng.randrange(2)))
    counts = {(0, V5E, "4x4"): 3}
    fast, ref = both(rows, counts)
    assert fast == ref
    assert len(fast) > 50  # the random rows do break every rule somewhere (not a vacuous comparison)


def test_valid_rows_are_decided_by_the_arrays_alone(monkeypatch):
    import neuscale_opt.topology.check as check

    def per_vpod(*_a, **_k):
        raise AssertionError("per-vPod rules called on a valid plan")

    monkeypatch.setattr(check, "check_placement", per_vpod)
    monkeypatch.setattr(check, "check_placements_graph", per_vpod)
    assert check.check_placements(pd.DataFrame(GOOD), PODS, GOOD_COUNTS) == []
    with pytest.raises(AssertionError, match="per-vPod"):  # a bad row does go to the per-vPod rules
        check.check_placements(pd.DataFrame([*GOOD, BAD["failed chip"]]), PODS, GOOD_COUNTS)
