from __future__ import annotations

import itertools

import networkx as nx
import pytest

from neuscale_opt.catalog import get_chip
from neuscale_opt.errors import InputError
from neuscale_opt.roofline import slice_wraps
from neuscale_opt.topology.pods import pod_graph, state_of
from neuscale_opt.topology.slices import (
    Placement,
    allowed_shapes,
    check_placement,
    check_shape,
    cube_placement,
    parse_shape,
    placements,
    slice_graph,
    slice_wraps_in_pod,
)

V5E, V4, V5P = "tpu-v5e", "tpu-v4", "tpu-v5p"


def test_allowed_shapes_2d_orientations():
    # 4x2 would take half of two 2x4 hosts: not allowed; 8x4 and 16x8 are whole hosts.
    assert allowed_shapes(V5E) == ((1, 1), (2, 2), (2, 4), (4, 4), (4, 8), (8, 4), (8, 8), (8, 16), (16, 8), (16, 16))
    assert allowed_shapes("tpu-v6e") == allowed_shapes(V5E)


def test_allowed_shapes_3d():
    sub = [s for s in allowed_shapes(V4) if not all(x % 4 == 0 for x in s)]
    assert sub == [(2, 2, 1), (2, 2, 2), (2, 2, 4), (2, 4, 2), (4, 2, 2), (2, 4, 4), (4, 2, 4), (4, 4, 2)]
    cubes = [s for s in allowed_shapes(V4) if all(x % 4 == 0 for x in s)]
    assert (4, 4, 4) in cubes and (16, 16, 16) in cubes and (4, 4, 20) not in cubes
    assert (16, 20, 28) in allowed_shapes(V5P)


@pytest.mark.parametrize(
    ("chip", "text", "canon"),
    [(V5E, "8x4", (4, 8)), (V5E, "16x16", (16, 16)), (V4, "4x2x2", (2, 2, 4)), (V4, "8x4x4", (4, 4, 8))],
)
def test_check_shape_canonical(chip, text, canon):
    assert check_shape(chip, text) == canon


@pytest.mark.parametrize(
    ("chip", "text"), [(V5E, "3x3"), (V5E, "2x8"), (V5E, "32x32"), (V4, "2x2x3"), (V4, "4x4x6"), (V4, "4x4")]
)
def test_check_shape_refuses(chip, text):
    with pytest.raises(InputError) as exc:
        check_shape(chip, text, where="fleet[0].shape")
    assert "fleet[0].shape" in str(exc.value) and "not allowed" in str(exc.value)


def test_parse_shape_malformed():
    with pytest.raises(InputError, match="shape"):
        parse_shape("4by4")


def test_pod_graph_2d_torus_and_3d_cubes():
    g = pod_graph(get_chip(V5E), (16, 16))
    assert g.number_of_nodes() == 256 and g.number_of_edges() == 512
    assert sum(1 for *_, k in g.edges(data="kind") if k == "wrap") == 32
    g3 = pod_graph(get_chip(V4), (4, 4, 8), failed=[(0, 0, 0)])
    kinds = [k for *_, k in g3.edges(data="kind")]
    assert g3.number_of_nodes() == 128 and g3.nodes[(0, 0, 0)]["failed"]
    # 2 x 144 edges inside the cubes; through the OCS 16 links between them and the wraparounds of the
    # 32 lines along x, the 32 along y and the 16 along z
    assert kinds.count("ici") == 288 and kinds.count("ocs") == 16 + 32 + 32 + 16


@pytest.mark.parametrize("chip", [V5E, "tpu-v6e", V4, V5P])
def test_wraparound_agrees_with_roofline(chip):
    spec = get_chip(chip)
    st = state_of(chip, spec.pod_dims)
    for s in allowed_shapes(chip):
        if all(x % 4 == 0 for x in s) and len(s) == 3:
            p = cube_placement(st, s, tuple(range(s[0] * s[1] * s[2] // 64)))
        else:
            p = next(q for q in placements(st, s) if q.shape == s)
        assert slice_wraps_in_pod(st, p) == slice_wraps(spec, s) == p.wraps, s


def test_2d_alignment_and_failed_chips():
    st = state_of(V5E, (16, 16), [(5, 5)])
    ps = placements(st, (4, 4))
    # whole-host origins: rows step 2, columns step 4; 7 x 4 = 28 minus those covering (5, 5)
    assert len(ps) == 28 - 2
    assert all(p.origin[0] % 2 == 0 and p.origin[1] % 4 == 0 for p in ps)
    assert all((5, 5) not in p.chips for p in ps)
    assert all(not check_placement(st, p) for p in ps)
    assert len(placements(st, (2, 2))) == 64 - 1
    assert len(placements(st, (16, 16))) == 0


def test_check_placement_reports_each_rule():
    st = state_of(V5E, (16, 16), [(0, 0)])
    box = lambda o, s: tuple(sorted(itertools.product(*(range(a, a + b) for a, b in zip(o, s, strict=True)))))  # noqa: E731
    good = Placement(V5E, (4, 4), (2, 4), box((2, 4), (4, 4)))
    assert check_placement(st, good) == []
    assert "not aligned" in check_placement(st, Placement(V5E, (4, 4), (1, 4), box((1, 4), (4, 4))))[0]
    assert "failed chip" in check_placement(st, Placement(V5E, (4, 4), (0, 0), box((0, 0), (4, 4))))[0]
    assert "whole hosts" in check_placement(st, Placement(V5E, (4, 2), (2, 4), box((2, 4), (4, 2))))[0]
    assert "outside" in check_placement(st, Placement(V5E, (4, 4), (14, 4), box((14, 4), (4, 4))))[0]
    assert "not allowed" in check_placement(st, Placement(V5E, (3, 3), (2, 4), box((2, 4), (3, 3))))[0]
    full = Placement(V5E, (16, 16), (0, 0), box((0, 0), (16, 16)), (), True)
    assert check_placement(state_of(V5E, (16, 16)), full) == []
    assert "wraparound" in check_placement(state_of(V5E, (16, 16)), Placement(V5E, (16, 16), (0, 0), full.chips))[0]


def test_3d_subcube_inside_one_cube_without_wraparound():
    st = state_of(V4, (4, 4, 8))
    ps = placements(st, (2, 2, 4))
    assert ps and all(len({st.cube_id(c) for c in p.chips}) == 1 for p in ps)
    assert not any(p.wraps for p in ps)
    # (2,2,4): 4 columns x 2 cubes; (2,4,2) and (4,2,2): 2 x 3 z-origins x 2 cubes each
    assert len(ps) == 8 + 12 + 12
    straddle = Placement(V4, (2, 2, 4), (0, 0, 2), tuple(sorted(itertools.product(range(2), range(2), range(2, 6)))))
    assert check_placement(st, straddle)


def test_3d_cube_built_from_any_two_cubes():
    st = state_of(V4, (16, 16, 16), [(0, 0, 0)])  # cube 0 is damaged
    assert len(placements(st, (4, 4, 8))) == 63 * 62 // 2
    far = cube_placement(st, (4, 4, 8), (1, 63))  # two cubes far apart in the pod
    assert check_placement(st, far) == [] and far.wraps and len(far.chips) == 128
    assert nx.is_connected(slice_graph(st, far))
    bad = cube_placement(st, (4, 4, 8), (0, 63))
    assert any("failed chip" in m for m in check_placement(st, bad))


@pytest.mark.parametrize(
    ("chip", "dims"), [("tpu-v5e", (16, 16)), ("tpu-v6e", (16, 16)), ("tpu-v4", (4, 8, 12)), ("tpu-v5p", (8, 4, 4))]
)
def test_aligned_origin_test_agrees_with_the_enumeration(chip, dims):
    from neuscale_opt.topology.slices import _aligned_origins, allowed_shapes, is_aligned_origin, is_cube_shape

    st = state_of(chip, dims)
    for shape in allowed_shapes(chip):
        if is_cube_shape(st.spec, shape) or len(shape) != len(dims):
            continue
        if any(s > d for s, d in zip(shape, dims, strict=True)):
            continue
        listed = set(_aligned_origins(st, shape))
        every = itertools.product(*(range(-1, d + 1) for d in dims))
        assert {o for o in every if is_aligned_origin(st, shape, o)} == listed, shape
