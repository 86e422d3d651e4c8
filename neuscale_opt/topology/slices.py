"""Slice shapes, aligned placements and their checks (spec: ``formulations/placement.md`` section 2).

Rules (``hardware.md`` section 2.2-2.3; sources ``GCP-v5e``, ``GCP-v6e``, ``GCP-v4``, ``GCP-v5p``, ``XPK``,
``SB-tpus``; the alignment details marked [inferred] in the spec):

* ``torus2d`` (v5e, v6e): shapes 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16 and, where not square, the
  other orientation when it is still made of whole hosts (8x4, 16x8; a 4x2 is not: it would take half of
  two 2x4 hosts). A slice is an axis-aligned rectangle of the pod (no placement across the edge).
  *Sub-host* slices (1x1, 2x2, 2x4) lie in one host at an origin that is a multiple of their own extent
  (2x2 = half a host, 2x4 = the host) [inferred from the 1/2/1-host VM types]. *Multi-host* slices are
  made of whole hosts: extent and origin multiples of the 2x4 host. Wraparound only on an axis whose
  extent is the full pod length 16.
* ``torus3d_cubes`` (v4, v5p): sub-cube shapes 2x2x1, 2x2x2, 2x2x4, 2x4x4 in every orientation made of
  whole 2x2x1 hosts (x and y extents even), inside one 4x4x4 cube, origin on the host grid; no
  wraparound. *Cube-built* shapes AxBxC (A <= B <= C multiples of 4, fitting the pod) take A*B*C/64
  whole healthy cubes, any cubes of the pod (the OCS joins them), with wraparound on every axis.
* No slice contains a failed chip.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cache

import networkx as nx

from neuscale_opt.catalog import ChipSpec, get_chip
from neuscale_opt.errors import InputError
from neuscale_opt.topology.pods import CUBE, WRAP_LEN_2D, Coord, PodState, _graph

Shape = tuple[int, ...]
MAX_CUBE_COMBINATIONS = 50_000  # guard of the exact per-placement enumeration of cube-built slices


def shape_str(shape: Shape) -> str:
    return "x".join(map(str, shape))


def parse_shape(text: str, where: str | None = "shape") -> Shape:
    """``"4x8"`` -> ``(4, 8)``; raises :class:`InputError` naming ``where`` when malformed."""
    try:
        shape = tuple(int(x) for x in str(text).lower().strip().split("x"))
    except ValueError:
        raise InputError(f"{text!r} is not a shape AxB or AxBxC", where=where) from None
    if not shape or any(s <= 0 for s in shape):
        raise InputError(f"{text!r} is not a shape of positive integers", where=where)
    return shape


def _catalog_shapes(chip: ChipSpec) -> list[Shape]:
    return [tuple(int(x) for x in s.split("x")) for s in chip.slice_shapes if s != "cubes"]


def cube_shapes(chip: ChipSpec, dims: tuple[int, ...] | None = None) -> list[Shape]:
    """Cube-built shapes A <= B <= C, multiples of 4, fitting the (sorted) pod dimensions (the ``cubes``
    token of the catalog; same rule as :func:`neuscale_opt.candidates.slice_shapes`)."""
    if chip.topology != "torus3d_cubes" or "cubes" not in chip.slice_shapes:
        return []
    pod = sorted(dims if dims is not None else chip.pod_dims)
    out = []
    for a in range(CUBE, pod[0] + 1, CUBE):
        for b in range(a, pod[1] + 1, CUBE):
            for c in range(b, pod[2] + 1, CUBE):
                out.append((a, b, c))
    return out


def is_cube_shape(chip: ChipSpec, shape: Shape) -> bool:
    return chip.topology == "torus3d_cubes" and len(shape) == 3 and all(s % CUBE == 0 for s in shape)


def is_fine(chip: ChipSpec, shape: Shape) -> bool:
    """Sub-host (2-D) or sub-cube (3-D) shape: placed inside one host or one cube."""
    if chip.topology == "torus2d":
        return all(s <= h for s, h in zip(sorted(shape), sorted(chip.host_shape), strict=True))
    return not is_cube_shape(chip, shape)


def _whole_hosts(chip: ChipSpec, shape: Shape) -> bool:
    return all(s % h == 0 for s, h in zip(shape, chip.host_shape, strict=True))


def _orientation_ok(chip: ChipSpec, shape: Shape) -> bool:
    if chip.topology == "torus2d":
        if is_fine(chip, shape):
            return all(s <= h for s, h in zip(shape, chip.host_shape, strict=True))
        return _whole_hosts(chip, shape) and all(s <= d for s, d in zip(shape, chip.pod_dims, strict=True))
    return _whole_hosts(chip, shape) and all(s <= CUBE for s in shape)


@cache
def allowed_shapes(chip_name: str) -> tuple[Shape, ...]:
    """Every placeable oriented shape of a generation: catalog shapes in all orientations the alignment
    rule allows, then (3-D) the cube-built shapes in canonical A <= B <= C order."""
    chip = get_chip(chip_name)
    out: list[Shape] = []
    for s in _catalog_shapes(chip):
        for p in sorted(set(itertools.permutations(s)), key=lambda t: (t != s, t)):
            if _orientation_ok(chip, p) and p not in out:
                out.append(p)
    out.extend(cube_shapes(chip))
    return tuple(out)


def canonical(chip: ChipSpec, shape: Shape) -> Shape | None:
    """The name the allocation uses for a shape: the catalog orientation (``8x4`` -> ``4x8``,
    ``1x2x2`` -> ``2x2x1``) or, cube-built, A <= B <= C; ``None`` when no orientation is allowed."""
    return _canonical(chip, tuple(shape))


@cache
def _canonical(chip: ChipSpec, shape: Shape) -> Shape | None:
    key = tuple(sorted(shape))
    for s in _catalog_shapes(chip):
        if tuple(sorted(s)) == key:
            return s if any(tuple(sorted(p)) == key for p in allowed_shapes(chip.name)) else None
    if is_cube_shape(chip, shape) and key in cube_shapes(chip):
        return key
    return None


def check_shape(chip: ChipSpec | str, shape: Shape | str, where: str | None = "shape") -> Shape:
    """Canonical form of ``shape`` on ``chip``; :class:`InputError` naming ``where`` when the
    generation does not allow it (in any orientation)."""
    spec = get_chip(chip) if isinstance(chip, str) else chip
    s = parse_shape(shape, where) if isinstance(shape, str) else tuple(shape)
    can = canonical(spec, s)
    if can is None:
        allowed = " ".join(shape_str(x) for x in allowed_shapes(spec.name) if not is_cube_shape(spec, x))
        extra = " and AxBxC of whole 4x4x4 cubes" if spec.topology == "torus3d_cubes" else ""
        raise InputError(f"shape {shape_str(s)} is not allowed on {spec.name}; allowed: {allowed}{extra}", where=where)
    return can


def orientations(chip: ChipSpec, shape: Shape) -> list[Shape]:
    """Allowed orientations of a canonical shape (cube-built: the canonical one only, orientation is
    logical)."""
    if is_cube_shape(chip, shape):
        return [tuple(sorted(shape))]
    key = tuple(sorted(shape))
    return [s for s in allowed_shapes(chip.name) if tuple(sorted(s)) == key]


def cubes_of(shape: Shape) -> int:
    return math.prod(shape) // CUBE**3


@dataclass(frozen=True)
class Placement:
    """One vPod at its place: generation, oriented shape, origin, chips (sorted coordinates), the cube
    ids of a cube-built slice (in logical row-major order) and whether every axis longer than 1 wraps."""

    chip: str
    shape: Shape
    origin: Coord
    chips: tuple[Coord, ...]
    cubes: tuple[int, ...] = ()
    wraps: bool = False

    @property
    def name(self) -> str:
        """Canonical shape name (what the allocation counts)."""
        return shape_str(canonical(get_chip(self.chip), self.shape) or self.shape)

    def row(self) -> dict:
        return {
            "chip": self.chip,
            "shape": shape_str(self.shape),
            "origin": list(self.origin),
            "chips": [list(c) for c in self.chips],
            "cubes": list(self.cubes),
        }


def _box(origin: Coord, shape: Shape) -> tuple[Coord, ...]:
    """The chips of the box, row-major (sorted)."""
    return tuple(itertools.product(*(range(o, o + s) for o, s in zip(origin, shape, strict=True))))


def _wraps_box(state: PodState, shape: Shape) -> bool:
    if state.topology == "torus2d":
        return all(s == d == WRAP_LEN_2D for s, d in zip(shape, state.dims, strict=True) if s > 1)
    return is_cube_shape(state.spec, shape)


def slice_wraps_in_pod(state: PodState, placement: Placement) -> bool:
    """Wraparound of a placed slice (hardware.md section 2.3): 2-D, every axis longer than 1 spans the
    full pod length 16; 3-D, cube-built slices wrap on every axis (OCS), sub-cube slices never. Agrees
    with :func:`neuscale_opt.roofline.slice_wraps` on the catalog pods."""
    return _wraps_box(state, placement.shape)


def _aligned_origins(state: PodState, shape: Shape) -> list[Coord]:
    """Origins allowed by the alignment rule for an oriented non-cube shape (row-major order)."""
    chip = state.spec
    if state.topology == "torus2d":
        step = shape if is_fine(chip, shape) else chip.host_shape
        return list(
            itertools.product(*(range(0, d - s + 1, st) for d, s, st in zip(state.dims, shape, step, strict=True)))
        )
    # sub-cube: on the host grid, inside one cube
    out = []
    for base in itertools.product(*(range(0, d, CUBE) for d in state.dims)):
        for off in itertools.product(*(range(0, CUBE - s + 1, h) for s, h in zip(shape, chip.host_shape, strict=True))):
            out.append(tuple(b + o for b, o in zip(base, off, strict=True)))
    return sorted(out)


def is_aligned_origin(state: PodState, shape: Shape, origin: Coord) -> bool:
    """Whether ``origin`` is among :func:`_aligned_origins` of the oriented non-cube ``shape``, decided
    arithmetically (the independent check calls it once per placed vPod)."""
    if len(origin) != len(state.dims):
        return False
    chip = state.spec
    if state.topology == "torus2d":
        step = shape if is_fine(chip, shape) else chip.host_shape
        return all(
            o >= 0 and o % st == 0 and o + s <= d for o, s, st, d in zip(origin, shape, step, state.dims, strict=True)
        )
    return all(
        0 <= o < d and (o % CUBE) % h == 0 and (o % CUBE) + s <= CUBE
        for o, s, h, d in zip(origin, shape, chip.host_shape, state.dims, strict=True)
    )


def placements(state: PodState, shape: Shape, limit: int = MAX_CUBE_COMBINATIONS) -> list[Placement]:
    """Every aligned placement of ``shape`` (any allowed orientation) in the pod that avoids failed chips.

    Order: orientations as in :func:`allowed_shapes`, then origins in row-major order; cube-built
    shapes: combinations of healthy cubes in lexicographic order (``ValueError`` past ``limit``; the
    pattern formulation never enumerates them).
    """
    chip = state.spec
    can = check_shape(chip, shape)
    out: list[Placement] = []
    if is_cube_shape(chip, can):
        k = cubes_of(can)
        healthy = state.healthy_cubes
        if math.comb(len(healthy), k) > limit:
            raise ValueError(f"{math.comb(len(healthy), k)} placements of {shape_str(can)}: more than {limit}")
        for combo in itertools.combinations(healthy, k):
            out.append(cube_placement(state, can, combo))
        return out
    for s in orientations(chip, can):
        for o in _aligned_origins(state, s):
            chips = _box(o, s)
            if state.failed.isdisjoint(chips):
                out.append(Placement(state.chip, s, o, chips, (), _wraps_box(state, s)))
    return out


def cube_placement(state: PodState, shape: Shape, cubes: tuple[int, ...]) -> Placement:
    """A cube-built slice of canonical ``shape`` on the given cube ids (logical row-major order)."""
    chips = tuple(sorted(c for i in cubes for c in state.cube_chips(i)))
    origin = tuple(x * CUBE for x in state.cube_coord(cubes[0]))
    return Placement(state.chip, tuple(sorted(shape)), origin, chips, tuple(cubes), True)


def slice_graph(state: PodState, placement: Placement) -> nx.Graph:
    """The ICI graph of a placed slice. Non-cube slices: the subgraph of the pod graph induced by its
    chips. Cube-built slices: each cube's internal grid, plus OCS links joining face-neighbouring chips of
    logically adjacent cubes (cubes laid out row-major over the logical cube grid ``shape / 4``) and the
    wraparound between the outer faces."""
    base = _graph(state.chip, state.topology, state.dims)
    if not placement.cubes:
        return base.subgraph(placement.chips).copy()
    g = nx.Graph()
    for i in placement.cubes:
        g.add_edges_from(base.subgraph(state.cube_chips(i)).edges)
    logical = tuple(s // CUBE for s in placement.shape)
    if math.prod(logical) != len(placement.cubes):
        return g
    where = dict(zip(itertools.product(*(range(n) for n in logical)), placement.cubes, strict=True))
    for pos, cid in where.items():
        for ax, n in enumerate(logical):
            nxt = where[pos[:ax] + ((pos[ax] + 1) % n,) + pos[ax + 1 :]]
            a0 = [x * CUBE for x in state.cube_coord(cid)]
            b0 = [x * CUBE for x in state.cube_coord(nxt)]
            for off in itertools.product(range(CUBE), repeat=2):
                la = list(off[:ax]) + [CUBE - 1] + list(off[ax:])
                lb = list(off[:ax]) + [0] + list(off[ax:])
                g.add_edge(
                    tuple(a + x for a, x in zip(a0, la, strict=True)), tuple(b + x for b, x in zip(b0, lb, strict=True))
                )
    return g


def check_placement(state: PodState, p: Placement) -> list[str]:
    """Every problem of one placement: allowed shape, inside the pod, aligned, no failed chip, connected
    subgraph, wraparound flag. Empty when the placement is valid."""
    chip = state.spec
    probs: list[str] = []
    if p.chip != state.chip:
        return [f"chip {p.chip} placed on a {state.chip} pod"]
    if len(p.shape) != len(state.dims) or canonical(chip, p.shape) is None:
        return [f"shape {shape_str(p.shape)} is not allowed on {state.chip}"]
    outside = [c for c in p.chips if not state.inside(c)]
    if outside:
        return [f"chip {list(outside[0])} lies outside the pod {list(state.dims)}"]
    if len(set(p.chips)) != len(p.chips) or len(p.chips) != math.prod(p.shape):
        probs.append(f"{len(set(p.chips))} distinct chips for a {shape_str(p.shape)} slice")
    if is_cube_shape(chip, p.shape):
        if len(set(p.cubes)) != cubes_of(p.shape) or any(not 0 <= i < state.n_cubes for i in p.cubes):
            probs.append(f"cube ids {list(p.cubes)} are not {cubes_of(p.shape)} distinct cubes of the pod")
        elif set(p.chips) != {c for i in p.cubes for c in state.cube_chips(i)}:
            probs.append("chips are not the chips of the listed whole cubes")
    else:
        if p.cubes:
            probs.append("cube ids given for a slice that is not cube-built")
        if p.shape not in orientations(chip, canonical(chip, p.shape)):
            probs.append(f"orientation {shape_str(p.shape)} is not made of whole hosts")
        elif not is_aligned_origin(state, p.shape, p.origin):
            probs.append(f"origin {list(p.origin)} is not aligned for {shape_str(p.shape)}")
        elif set(p.chips) != set(_box(p.origin, p.shape)):
            probs.append("chips are not the aligned box at the origin")
    bad = sorted(state.failed.intersection(p.chips))
    if bad:
        probs.append(f"contains failed chip {list(bad[0])}")
    if not probs and not nx.is_connected(slice_graph(state, p)):
        probs.append("chips do not form a connected subgraph")
    if not probs and p.wraps != slice_wraps_in_pod(state, p):
        probs.append(f"wraparound flag {p.wraps} disagrees with the pod ({not p.wraps})")
    return probs
