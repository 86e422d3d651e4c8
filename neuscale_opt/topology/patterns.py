"""Feasible packing patterns per pod state, and their realisation (spec: ``formulations/placement.md``
section 3). No Pyomo here: the numbers feed :mod:`neuscale_opt.topology.milp`, the greedy placer and
the tests alike.

Shapes split in two families (``slices.is_fine``):

* **block** shapes: 2-D multi-host rectangles (placed on the host grid of a pod), 3-D cube-built slices
  (any healthy cubes of one pod). Which mixes fit depends on the pod's geometry, so they are described by
  *patterns*: the Pareto-maximal count vectors over block kinds (2-D: canonical shape, orientations
  merged; 3-D: number of cubes, since cube-built shapes of equal size are interchangeable). The set of
  feasible block vectors of a pod is downward closed, so "some pattern >= the vector" is exact.
* **fine** shapes: 2-D sub-host (1x1, 2x2, 2x4), 3-D sub-cube. They never straddle a host or a cube, so
  they only need free capacity:

  - 2-D, aligned positions nest (1x1 in a 2x2 half-host in the 2x4 host): a vector fits the hosts left
    by the blocks iff for every fine shape f, ``sum_{g >= f} (|g|/|f|) n_g + (|host|/|f|) U <= cap_f``
    with ``U`` the hosts the blocks use and ``cap_f`` the healthy aligned positions of f (largest first
    greedy proves it);
  - 3-D, a healthy cube holds any sub-cube mix of at most 16 hosts (sizes 1, 2, 4, 8 hosts split along
    its four 2x2x1-host columns) and, the sizes dividing each other and 16, first-fit decreasing packs any
    mix of total at most ``16 x free healthy cubes`` hosts; a damaged cube has its own patterns.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from operator import ge

from neuscale_opt.catalog import get_chip
from neuscale_opt.topology.pods import CUBE, Coord, PodState, StateGroup
from neuscale_opt.topology.slices import (
    Placement,
    Shape,
    _box,
    _wraps_box,
    check_shape,
    cube_placement,
    cubes_of,
    is_cube_shape,
    is_fine,
    orientations,
    placements,
)

MAX_PATTERNS = 50_000
CUBE_HOSTS = 16  # 2x2x1 hosts in a 4x4x4 cube


class NotPlaceable(ValueError):
    """A count vector that no placement realises."""


def pareto_max(vectors: Iterable[tuple[int, ...]]) -> tuple[tuple[int, ...], ...]:
    """The vectors no other vector dominates (>= everywhere), sorted descending (deterministic).

    A vector dominating another distinct one has a larger sum, so one pass in order of decreasing sum
    compares each vector with the kept ones only."""
    kept: list[tuple[int, ...]] = []
    for v in sorted(set(vectors), key=sum, reverse=True):
        for k in kept:
            if all(map(ge, k, v)):
                break
        else:
            kept.append(v)
    return tuple(sorted(kept, reverse=True))


def _covers(v: Sequence[int], t: Sequence[int]) -> bool:
    return all(a >= b for a, b in zip(v, t, strict=True))


class GridPacker:
    """Exact packing of axis-aligned boxes on a small grid of cells (hosts), with a memo shared by every
    pod that has the same grid and the same box set.

    ``pareto(mask)`` is the set of Pareto-maximal count vectors of boxes that fit on the free cells of
    ``mask`` (bit i set = cell i unusable). Recursion: the first free cell is either left empty or is the
    lowest cell (origin) of one box. ``realize(mask, target)`` follows the memo to one packing.
    """

    def __init__(self, grid: tuple[int, ...], boxes: tuple[tuple[int, Shape], ...], n_kinds: int) -> None:
        self.grid = grid
        self.n_kinds = n_kinds
        self.n_cells = math.prod(grid)
        self.full = (1 << self.n_cells) - 1
        self.memo: dict[int, tuple[tuple[int, ...], ...]] = {self.full: ((0,) * n_kinds,)}
        cells = list(itertools.product(*(range(g) for g in grid)))
        index = {c: i for i, c in enumerate(cells)}
        self.cells = cells
        self.anchored: list[list[tuple[int, Shape, int]]] = [[] for _ in cells]
        for kind, ext in boxes:
            for c in cells:
                if all(x + e <= g for x, e, g in zip(c, ext, self.grid, strict=True)):
                    bits = sum(1 << index[b] for b in _box(c, ext))
                    self.anchored[index[c]].append((kind, ext, bits))

    def pareto(self, mask: int) -> tuple[tuple[int, ...], ...]:
        hit = self.memo.get(mask)
        if hit is not None:
            return hit
        pos = (~mask & (mask + 1)).bit_length() - 1  # lowest free cell
        cands = list(self.pareto(mask | (1 << pos)))
        for kind, _ext, bits in self.anchored[pos]:
            if bits & mask == 0:
                for v in self.pareto(mask | bits):
                    cands.append(v[:kind] + (v[kind] + 1,) + v[kind + 1 :])
        res = pareto_max(cands)
        self.memo[mask] = res
        return res

    def feasible(self, mask: int, target: Sequence[int]) -> bool:
        return any(_covers(v, target) for v in self.pareto(mask))

    def realize(self, mask: int, target: Sequence[int]) -> list[tuple[Coord, Shape]]:
        """(origin cell, box extent) of a packing with exactly ``target`` boxes (boxes first, in the
        order given, at the lowest free cell; deterministic)."""
        if not self.feasible(mask, target):
            raise NotPlaceable(f"no packing of {tuple(target)}")
        out: list[tuple[Coord, Shape]] = []
        t = list(target)
        while any(t):
            pos = (~mask & (mask + 1)).bit_length() - 1
            for kind, ext, bits in self.anchored[pos]:
                if t[kind] and bits & mask == 0:
                    t2 = t[:kind] + [t[kind] - 1] + t[kind + 1 :]
                    if self.feasible(mask | bits, t2):
                        out.append((self.cells[pos], ext))
                        mask |= bits
                        t = t2
                        break
            else:
                mask |= 1 << pos
        return out


@cache
def _packer(grid: tuple[int, ...], boxes: tuple[tuple[int, Shape], ...], n_kinds: int) -> GridPacker:
    return GridPacker(grid, boxes, n_kinds)


def _cell_bit(grid: tuple[int, ...], cell: Coord) -> int:
    idx = 0
    for x, g in zip(cell, grid, strict=True):
        idx = idx * g + x
    return 1 << idx


def _mask(grid: tuple[int, ...], cells: Iterable[Coord]) -> int:
    return sum(_cell_bit(grid, c) for c in set(cells))


def _reflect(grid: tuple[int, ...], flips: tuple[bool, ...], cell: Coord, ext: Shape | None = None) -> Coord:
    """The lowest cell of the box (``ext`` cells, default one cell) at ``cell`` after reversing the
    flipped axes of the grid."""
    ext = ext or (1,) * len(grid)
    return tuple(g - x - e if f else x for g, f, x, e in zip(grid, flips, cell, ext, strict=True))


def canonical_mask(grid: tuple[int, ...], cells: Iterable[Coord]) -> tuple[int, tuple[bool, ...]]:
    """(smallest bitmask of the unusable cells over the reflections of the grid, the reflection that
    gives it; ties to the fewest flips in a fixed order). A reflection maps every axis-aligned box of the
    grid to a box of the same extent, so the packings of the reflected mask are the reflected packings:
    same count vectors, same patterns."""
    cells = tuple(cells)
    best = None
    for flips in itertools.product((False, True), repeat=len(grid)):
        m = _mask(grid, (_reflect(grid, flips, c) for c in cells))
        if best is None or m < best[0]:
            best = (m, flips)
    return best


# --------------------------------------------------------------------------------------------
# Per-generation data


@dataclass(frozen=True)
class GenPlacementData:
    """Everything the placement constraints of one generation need (plain numbers, no Pyomo).

    * ``shapes``: canonical shapes of interest; ``block_shapes`` / ``fine_shapes`` split them;
    * ``kinds``: block kinds (2-D canonical shape, 3-D cube count); ``kind_of[shape]`` its index;
    * ``patterns[i]``: Pareto-maximal block-kind vectors of state ``groups[i]``;
    * ``classes``: the states of each *pattern class* (indices into ``groups``): states whose pods have
      the same patterns for a proven reason (2-D: the same damaged hosts up to a reflection of the host
      grid; 3-D: the same number of healthy cubes), so the model counts their pods with one integer per
      pattern; ``free_kinds``: 3-D kinds of one cube, which fit any free healthy cube (capacity row only,
      a zero in every pattern);
    * 2-D: ``fine_cap[f]`` healthy aligned positions of fine shape f over all pods, ``units[f]`` its
      positions per host (``|host| / |f|``), ``kind_hosts[k]`` hosts of block kind k;
    * 3-D: ``healthy_cubes`` over all pods, ``kind_cubes[k]``, ``fine_hosts[f]`` hosts of f,
      ``cube_classes`` (blocked hosts of a damaged cube, number of such cubes) and ``cube_patterns[c]``
      their Pareto-maximal fine vectors.
    """

    chip: str
    topology: str
    groups: tuple[StateGroup, ...]
    shapes: tuple[Shape, ...]
    block_shapes: tuple[Shape, ...]
    fine_shapes: tuple[Shape, ...]
    kinds: tuple
    kind_of: Mapping[Shape, int]
    patterns: tuple[tuple[tuple[int, ...], ...], ...]
    fine_cap: Mapping[Shape, int]
    units: Mapping[Shape, int]
    kind_hosts: tuple[int, ...]
    healthy_cubes: int
    kind_cubes: tuple[int, ...]
    fine_hosts: Mapping[Shape, int]
    cube_classes: tuple[tuple[frozenset, int], ...]
    cube_patterns: tuple[tuple[tuple[int, ...], ...], ...]
    classes: tuple[tuple[int, ...], ...] = ()
    free_kinds: tuple[int, ...] = ()

    @property
    def n_patterns(self) -> int:
        """Pattern columns of the model: block patterns per pattern class, sub-cube patterns per cube
        class."""
        return sum(len(self.patterns[c[0]]) for c in self.classes) + sum(len(p) for p in self.cube_patterns)

    def class_multiplicity(self, j: int) -> int:
        return sum(self.groups[i].multiplicity for i in self.classes[j])

    def class_pods(self, j: int) -> tuple[str, ...]:
        """Pod ids of pattern class ``j``: its states in order, each state's pods in id order."""
        return tuple(pid for i in self.classes[j] for pid in self.groups[i].pod_ids)


def _sort_shapes(shapes: Iterable[Shape]) -> tuple[Shape, ...]:
    return tuple(sorted(set(shapes), key=lambda s: (-math.prod(s), s)))


def _host_units(state: PodState, ext: Shape) -> Shape:
    return tuple(e // h for e, h in zip(ext, state.host_shape, strict=True))


def _block_boxes(chip_name: str, kinds: tuple[Shape, ...]) -> tuple[tuple[int, Shape], ...]:
    chip = get_chip(chip_name)
    out = []
    for k, s in enumerate(kinds):
        for o in orientations(chip, s):
            out.append((k, tuple(e // h for e, h in zip(o, chip.host_shape, strict=True))))
    return tuple(out)


def _fine_boxes(chip_name: str, fine: tuple[Shape, ...]) -> tuple[tuple[int, Shape], ...]:
    return _block_boxes(chip_name, fine)


def block_patterns_2d(state: PodState, kinds: tuple[Shape, ...]) -> tuple[tuple[int, ...], ...]:
    """Pareto-maximal multi-host count vectors of a 2-D pod (exact DP on its host grid)."""
    if not kinds:
        return ((),)
    packer = _packer(state.host_grid, _block_boxes(state.chip, kinds), len(kinds))
    return packer.pareto(canonical_mask(state.host_grid, state.damaged_hosts)[0])


def knapsack_patterns(capacity: int, sizes: tuple[int, ...], limit: int = MAX_PATTERNS) -> tuple[tuple[int, ...], ...]:
    """Pareto-maximal vectors n >= 0 with ``sum sizes[i] n_i <= capacity`` (cube-built kinds on the
    healthy cubes of a pod: any cubes fit, hardware.md section 2.3)."""
    if not sizes:
        return ((),)
    smallest = min(sizes)
    out: list[tuple[int, ...]] = []

    def rec(i: int, left: int, acc: tuple[int, ...]) -> None:
        if len(out) > limit:
            raise ValueError(f"more than {limit} patterns; restrict the shapes of interest")
        if i == len(sizes):
            if left < smallest:
                out.append(acc)
            return
        for n in range(left // sizes[i], -1, -1):
            rec(i + 1, left - n * sizes[i], acc + (n,))

    rec(0, capacity, ())
    # every vector left with less than the smallest size is maximal: any vector above it needs one
    # more item, which does not fit
    return tuple(sorted(set(out), reverse=True))


def cube_block_patterns(healthy: int, kinds: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Block patterns of a 3-D pod with ``healthy`` healthy cubes for cube-count kinds ``kinds``: the
    knapsack patterns of the kinds of two or more cubes, with a zero for the one-cube kind (it fits any
    free healthy cube of any pod, so the capacity row ``c_cube_hosts`` alone places it)."""
    big = tuple(c for c in kinds if c != 1)
    out = []
    for v in knapsack_patterns(healthy, big):
        it = iter(v)
        out.append(tuple(0 if c == 1 else next(it) for c in kinds))
    return tuple(out)


def healthy_positions(state: PodState, shape: Shape) -> int:
    """Number of aligned placements of a 2-D sub-host ``shape`` (any allowed orientation) that avoid
    the failed chips: all aligned origins minus those whose box holds a failed chip (counted, not
    listed; equals ``len(placements(state, shape))``)."""
    chip = state.spec
    total = 0
    for o in orientations(chip, check_shape(chip, shape)):
        ranges = [range(0, d - e + 1, e) for d, e in zip(state.dims, o, strict=True)]
        bad: set[Coord] = set()
        for c in state.failed:
            axes = [[x for x in r if x <= ci < x + e] for r, ci, e in zip(ranges, c, o, strict=True)]
            bad.update(itertools.product(*axes))
        total += math.prod(len(r) for r in ranges) - len(bad)
    return total


def cube_fine_patterns(
    chip_name: str, blocked_hosts: frozenset, fine: tuple[Shape, ...]
) -> tuple[tuple[int, ...], ...]:
    """Pareto-maximal sub-cube count vectors of one cube with the given unusable hosts (exact DP over
    its 2x2x4 host grid)."""
    if not fine:
        return ((),)
    chip = get_chip(chip_name)
    grid = tuple(CUBE // h for h in chip.host_shape)
    packer = _packer(grid, _fine_boxes(chip_name, fine), len(fine))
    return packer.pareto(sum(_cell_bit(grid, h) for h in blocked_hosts))


def placement_data(groups: Sequence[StateGroup], shapes: Iterable[Shape | str]) -> GenPlacementData:
    """Patterns and capacities of one generation's pod states for the given shapes of interest."""
    if not groups:
        raise ValueError("no pod states")
    chip_name = groups[0].state.chip
    if any(g.state.chip != chip_name for g in groups):
        raise ValueError("placement_data takes the states of one generation")
    chip = get_chip(chip_name)
    can = _sort_shapes(check_shape(chip, s) for s in shapes)
    fine = tuple(s for s in can if is_fine(chip, s))
    block = tuple(s for s in can if not is_fine(chip, s))
    fine_cap: dict[Shape, int] = {}
    units: dict[Shape, int] = {}
    fine_hosts: dict[Shape, int] = {}
    cube_classes: tuple = ()
    cube_pats: tuple = ()
    kind_hosts: tuple[int, ...] = ()
    kind_cubes: tuple[int, ...] = ()
    healthy = 0
    host_chips = math.prod(chip.host_shape)
    free: tuple[int, ...] = ()
    if chip.topology == "torus2d":
        kinds: tuple = block
        kind_of = {s: i for i, s in enumerate(block)}
        kind_hosts = tuple(math.prod(s) // host_chips for s in block)
        keys = [(g.state.dims, canonical_mask(g.state.host_grid, g.state.damaged_hosts)[0]) for g in groups]
        for f in fine:
            fine_cap[f] = sum(g.multiplicity * healthy_positions(g.state, f) for g in groups)
            units[f] = host_chips // math.prod(f)
    else:
        kinds = tuple(sorted({cubes_of(s) for s in block}))
        kind_of = {s: kinds.index(cubes_of(s)) for s in block}
        kind_cubes = kinds
        free = tuple(k for k, c in enumerate(kinds) if c == 1)
        keys = [len(g.state.healthy_cubes) for g in groups]
        healthy = sum(g.multiplicity * len(g.state.healthy_cubes) for g in groups)
        fine_hosts = {f: math.prod(f) // host_chips for f in fine}
        classes: dict[frozenset, int] = {}
        for g in groups:
            for hosts in g.state.cube_failed_hosts.values():
                classes[hosts] = classes.get(hosts, 0) + g.multiplicity
        cube_classes = tuple(sorted(classes.items(), key=lambda kv: sorted(kv[0])))
        cube_pats = tuple(cube_fine_patterns(chip_name, c, fine) for c, _ in cube_classes)
    members: dict = {}
    for i, k in enumerate(keys):
        members.setdefault(k, []).append(i)
    by_key: dict = {}
    for k, idx in members.items():
        st = groups[idx[0]].state
        if chip.topology == "torus2d":
            by_key[k] = block_patterns_2d(st, block)
        else:
            by_key[k] = cube_block_patterns(len(st.healthy_cubes), kinds)
    patterns = tuple(by_key[k] for k in keys)
    return GenPlacementData(
        chip=chip_name,
        topology=chip.topology,
        groups=tuple(groups),
        shapes=can,
        block_shapes=block,
        fine_shapes=fine,
        kinds=kinds,
        kind_of=kind_of,
        patterns=patterns,
        fine_cap=fine_cap,
        units=units,
        kind_hosts=kind_hosts,
        healthy_cubes=healthy,
        kind_cubes=kind_cubes,
        fine_hosts=fine_hosts,
        cube_classes=cube_classes,
        cube_patterns=cube_pats,
        classes=tuple(tuple(v) for v in members.values()),
        free_kinds=free,
    )


def fleet_placement_data(
    groups: Sequence[StateGroup], shapes_by_chip: Mapping[str, Iterable[Shape | str]]
) -> dict[str, GenPlacementData]:
    """:func:`placement_data` of every generation that has pod states and shapes of interest."""
    out: dict[str, GenPlacementData] = {}
    for chip in dict.fromkeys(g.state.chip for g in groups):
        shapes = list(shapes_by_chip.get(chip, ()))
        if shapes:
            out[chip] = placement_data([g for g in groups if g.state.chip == chip], shapes)
    return out


# --------------------------------------------------------------------------------------------
# Realisation


@dataclass(frozen=True)
class PodPlacement:
    """A placement on a named pod."""

    pod: str
    placement: Placement


def canonical_counts(chip_name: str, counts: Mapping[Shape | str, int]) -> dict[Shape, int]:
    """Counts keyed by canonical shape (orientations of one shape add up); zero entries dropped."""
    chip = get_chip(chip_name)
    out: dict[Shape, int] = {}
    for s, n in counts.items():
        if int(n) > 0:
            c = check_shape(chip, s)
            out[c] = out.get(c, 0) + int(n)
    return out


def _counts_vector(shapes: Sequence[Shape], counts: Mapping[Shape, int]) -> list[int]:
    return [int(counts.get(s, 0)) for s in shapes]


def _choose_pattern(pats, need: list[int], weight: list[int]) -> tuple[int, ...]:
    return max(pats, key=lambda p: (sum(w * min(a, b) for a, b, w in zip(p, need, weight, strict=True)), p))


def realize_generation(
    data: GenPlacementData,
    counts: Mapping[Shape | str, int],
    pod_patterns: Mapping[str, Sequence[int]] | None = None,
    cube_patterns: Mapping[int, Sequence[tuple[tuple[int, ...], int]]] | None = None,
) -> list[PodPlacement]:
    """Concrete disjoint placements of exactly ``counts`` vPods (canonical shape -> number) over the
    generation's pods. ``pod_patterns`` (pod id -> block pattern) and ``cube_patterns`` (damaged cube
    class index -> [(pattern, number of cubes)]) come from a solved pattern model; without them the
    blocks go to pods in id order, each taking the pattern that covers most chips of what is left (exact
    for one pod), and the damaged cubes get an exact assignment. Raises :class:`NotPlaceable`.
    """
    want = canonical_counts(data.chip, counts)
    unknown = [s for s in want if s not in data.shapes]
    if unknown:
        raise ValueError(f"shape {unknown[0]} is not among the shapes of interest")
    pods = [(pid, g.state, i) for i, g in enumerate(data.groups) for pid in g.pod_ids]
    used: dict[str, set[Coord]] = {pid: set() for pid, _, _ in pods}
    out: list[PodPlacement] = []
    # --- blocks
    block_left = {s: want.get(s, 0) for s in data.block_shapes}
    kind_need = [0] * len(data.kinds)
    for s, n in block_left.items():
        kind_need[data.kind_of[s]] += n
    weight = list(data.kind_hosts) if data.topology == "torus2d" else list(data.kind_cubes)
    free_cubes: dict[str, list[int]] = {}
    for pid, st, gi in pods:
        if st.topology == "torus3d_cubes":
            free_cubes[pid] = list(st.healthy_cubes)
        if not any(kind_need):
            continue
        pats = data.patterns[gi]
        pat = tuple(pod_patterns[pid]) if pod_patterns is not None and pid in pod_patterns else None
        if pat is None:
            pat = _choose_pattern(pats, kind_need, weight)
        take = [min(a, b) for a, b in zip(pat, kind_need, strict=True)]
        kind_need = [a - b for a, b in zip(kind_need, take, strict=True)]
        for k, n in enumerate(take):
            shapes_k = [s for s in data.block_shapes if data.kind_of[s] == k]
            for _ in range(n):
                s = next(x for x in shapes_k if block_left[x] > 0)
                block_left[s] -= 1
                if st.topology == "torus3d_cubes":
                    c = cubes_of(s)
                    if len(free_cubes[pid]) < c:
                        raise NotPlaceable(f"{pid}: not enough healthy cubes")
                    p = cube_placement(st, s, tuple(free_cubes[pid][:c]))
                    del free_cubes[pid][:c]
                    out.append(PodPlacement(pid, p))
                    used[pid].update(p.chips)
        if st.topology == "torus2d" and any(take):
            out.extend(_realize_blocks_2d(data, pid, st, take, used[pid]))
    for k in data.free_kinds:  # one-cube slices: the lowest free healthy cube, pods in id order
        shapes_k = [s for s in data.block_shapes if data.kind_of[s] == k]
        for pid, st, _ in pods:
            while kind_need[k] and free_cubes[pid]:
                s = next(x for x in shapes_k if block_left[x] > 0)
                block_left[s] -= 1
                kind_need[k] -= 1
                p = cube_placement(st, s, (free_cubes[pid].pop(0),))
                out.append(PodPlacement(pid, p))
                used[pid].update(p.chips)
    if any(kind_need):
        raise NotPlaceable(f"{data.chip}: block slices do not fit: {dict(zip(data.kinds, kind_need, strict=True))}")
    # --- fine
    fine_need = _counts_vector(data.fine_shapes, want)
    if any(fine_need):
        if data.topology == "torus2d":
            out.extend(_realize_fine_2d(data, pods, fine_need, used))
        else:
            out.extend(_realize_fine_3d(data, pods, fine_need, free_cubes, cube_patterns))
    return out


def _realize_blocks_2d(data, pid: str, st: PodState, take: list[int], used: set[Coord]) -> list[PodPlacement]:
    """The packing of the pod's canonical (reflected) mask, reflected back: the memo of the pattern
    class serves every pod of it."""
    grid = st.host_grid
    packer = _packer(grid, _block_boxes(st.chip, data.kinds), len(data.kinds))
    mask, flips = canonical_mask(grid, st.damaged_hosts)
    out = []
    for cell0, ext in packer.realize(mask, take):
        cell = _reflect(grid, flips, cell0, ext)
        origin = tuple(c * h for c, h in zip(cell, st.host_shape, strict=True))
        shape = tuple(e * h for e, h in zip(ext, st.host_shape, strict=True))
        chips = _box(origin, shape)
        used.update(chips)
        out.append(PodPlacement(pid, Placement(st.chip, shape, origin, chips, (), _wraps_box(st, shape))))
    return out


@cache
def _all_chips(dims: tuple[int, ...]) -> frozenset[Coord]:
    return frozenset(itertools.product(*(range(d) for d in dims)))


def _realize_fine_2d(data, pods, need: list[int], used: dict[str, set[Coord]]) -> list[PodPlacement]:
    """Largest fine shape first; positions in damaged or partly used hosts first (best fit, keeps whole
    hosts free), then pod order and row-major origin. Exact by the nesting argument. Only hosts with a
    free healthy chip are looked at, and the positions in whole hosts are generated pod by pod, only as
    far as needed."""
    out = []
    for f, n in zip(data.fine_shapes, need, strict=True):
        if n == 0:
            continue
        part: list[tuple] = []
        open_pods: list[tuple[str, PodState, set[Coord]]] = []
        for order, (pid, st, _) in enumerate(pods):
            free = _all_chips(st.dims) - used[pid] - st.failed
            if not free:
                continue
            hs = st.host_shape
            per_host: dict[Coord, int] = {}
            for c in free:
                h = (c[0] // hs[0], c[1] // hs[1])
                per_host[h] = per_host.get(h, 0) + 1
            size = math.prod(hs)
            whole = {h for h, k in per_host.items() if k == size}
            for p in _host_positions(st, f, [h for h in per_host if h not in whole]):
                if free.issuperset(p.chips):
                    part.append((order, p.origin, pid, p))
            open_pods.append((pid, st, whole))
        part.sort(key=lambda t: t[:2])
        cands = itertools.chain(
            ((pid, p) for _o, _or, pid, p in part),
            itertools.chain.from_iterable(_whole_positions(st, f, whole, pid) for pid, st, whole in open_pods),
        )
        placed = 0
        for pid, p in cands:
            if placed == n:
                break
            if used[pid].isdisjoint(p.chips):
                used[pid].update(p.chips)
                out.append(PodPlacement(pid, p))
                placed += 1
        if placed < n:
            raise NotPlaceable(f"{data.chip}: {n - placed} x {f} do not fit in the free hosts")
    return out


def _fine_at(st: PodState, o: Shape, origin: Coord) -> Placement:
    return Placement(st.chip, o, origin, _box(origin, o), (), _wraps_box(st, o))


def _host_positions(st: PodState, f: Shape, hosts) -> list[Placement]:
    """Aligned positions of the fine shape ``f`` (orientations in order) inside the given hosts."""
    out = []
    hs = st.host_shape
    for o in orientations(st.spec, f):
        for h in sorted(hosts):
            lo = [x * e for x, e in zip(h, hs, strict=True)]
            axes = [
                range(-(-a // e) * e, min(a + s, d) - e + 1, e) for a, s, e, d in zip(lo, hs, o, st.dims, strict=True)
            ]
            out.extend(_fine_at(st, o, origin) for origin in itertools.product(*axes))
    return out


def _whole_positions(st: PodState, f: Shape, whole, pid: str):
    """(pod, placement) of the fine shape in the pod's whole hosts (healthy, unused when the shape's turn
    began), row-major by origin, orientations in order at equal origins."""
    hs = st.host_shape
    cells = []
    for oi, o in enumerate(orientations(st.spec, f)):
        axes = [range(0, d - e + 1, e) for d, e in zip(st.dims, o, strict=True)]
        cells.extend(
            (origin, oi, o) for origin in itertools.product(*axes) if (origin[0] // hs[0], origin[1] // hs[1]) in whole
        )
    cells.sort(key=lambda t: t[:2])
    return ((pid, _fine_at(st, o, origin)) for origin, _oi, o in cells)


def _assign_damaged(data, cubes: list[tuple[str, int, int]], need: list[int]) -> dict[tuple[str, int], tuple]:
    """Exact choice of one pattern per damaged cube leaving the fewest hosts for healthy cubes: a DP over
    the cubes keeping the Pareto-minimal vectors of what is still needed."""
    hosts = [data.fine_hosts[f] for f in data.fine_shapes]
    front: dict[tuple[int, ...], tuple] = {tuple(need): ()}
    for pid, cid, cls in cubes:
        nxt: dict[tuple[int, ...], tuple] = {}
        for r, hist in front.items():
            for p in data.cube_patterns[cls]:
                r2 = tuple(max(a - b, 0) for a, b in zip(r, p, strict=True))
                if r2 not in nxt:
                    nxt[r2] = hist + (((pid, cid), tuple(min(a, b) for a, b in zip(r, p, strict=True))),)
        keys = sorted(nxt, key=lambda v: (sum(v), v))
        kept: list[tuple[int, ...]] = []
        for v in keys:
            if not any(all(a <= b for a, b in zip(k, v, strict=True)) for k in kept):
                kept.append(v)
        front = {k: nxt[k] for k in kept}
    best = min(front, key=lambda v: (sum(h * x for h, x in zip(hosts, v, strict=True)), v))
    return dict(front[best])


def _realize_fine_3d(data, pods, need: list[int], free_cubes, cube_patterns) -> list[PodPlacement]:
    chip = get_chip(data.chip)
    grid = tuple(CUBE // h for h in chip.host_shape)
    packer = _packer(grid, _fine_boxes(data.chip, data.fine_shapes), len(data.fine_shapes))
    cls_index = {c: i for i, (c, _) in enumerate(data.cube_classes)}
    damaged = [(pid, cid, cls_index[h]) for pid, st, _ in pods for cid, h in st.cube_failed_hosts.items()]
    per_cube: dict[tuple[str, int], tuple[int, ...]] = {}
    left = list(need)
    if cube_patterns is not None:
        pool = {cls: [p for p, n in lst for _ in range(int(n))] for cls, lst in cube_patterns.items()}
        for pid, cid, cls in damaged:
            if pool.get(cls):
                p = pool[cls].pop(0)
                take = tuple(min(a, b) for a, b in zip(left, p, strict=True))
                left = [a - b for a, b in zip(left, take, strict=True)]
                per_cube[(pid, cid)] = take
    else:
        per_cube = _assign_damaged(data, damaged, left)
        for take in per_cube.values():
            left = [a - b for a, b in zip(left, take, strict=True)]
    # first-fit decreasing of the rest into free healthy cubes (sizes 1, 2, 4, 8 hosts divide 16)
    order = sorted(range(len(data.fine_shapes)), key=lambda i: -data.fine_hosts[data.fine_shapes[i]])
    bins: list[tuple[str, int, list[int], list[int]]] = []  # pod, cube, counts, hosts left
    healthy_iter = ((pid, cid) for pid, _, _ in pods for cid in free_cubes.get(pid, []))
    for i in order:
        h = data.fine_hosts[data.fine_shapes[i]]
        first = 0  # bins before it have fewer than h hosts left (hosts left only shrink): first fit unchanged
        for _ in range(left[i]):
            while first < len(bins) and bins[first][3][0] < h:
                first += 1
            if first < len(bins):
                b = bins[first]
                b[2][i] += 1
                b[3][0] -= h
            else:
                nxt = next(healthy_iter, None)
                if nxt is None:
                    raise NotPlaceable(f"{data.chip}: sub-cube slices do not fit in the free cubes")
                cnt = [0] * len(data.fine_shapes)
                cnt[i] = 1
                bins.append((nxt[0], nxt[1], cnt, [CUBE_HOSTS - h]))
    states = {pid: st for pid, st, _ in pods}
    for pid, cid, cnt, _ in bins:
        per_cube[(pid, cid)] = tuple(cnt)
    out = []
    for (pid, cid), take in per_cube.items():
        if not any(take):
            continue
        st = states[pid]
        mask = sum(_cell_bit(grid, h) for h in st.cube_failed_hosts.get(cid, ()))
        base = tuple(x * CUBE for x in st.cube_coord(cid))
        for cell, ext in packer.realize(mask, take):
            origin = tuple(b + c * h for b, c, h in zip(base, cell, chip.host_shape, strict=True))
            shape = tuple(e * h for e, h in zip(ext, chip.host_shape, strict=True))
            out.append(PodPlacement(pid, Placement(st.chip, shape, origin, _box(origin, shape), (), False)))
    return out


# --------------------------------------------------------------------------------------------
# One pod


def _single(state: PodState, shapes: Iterable[Shape]) -> GenPlacementData:
    return placement_data([StateGroup(state, 1, ("pod",))], shapes)


def realize(state: PodState, counts: Mapping[Shape | str, int]) -> list[Placement]:
    """Disjoint placements of exactly ``counts`` vPods in one pod (deterministic); raises
    :class:`NotPlaceable` when the vector does not fit."""
    want = canonical_counts(state.chip, counts)
    if not want:
        return []
    data = _single(state, want)
    return [pp.placement for pp in realize_generation(data, want)]


def feasible(state: PodState, counts: Mapping[Shape | str, int]) -> bool:
    """Whether the count vector fits the pod (exact)."""
    try:
        realize(state, counts)
    except NotPlaceable:
        return False
    return True


def max_count(state: PodState, shape: Shape | str) -> int:
    """The largest number of vPods of ``shape`` that fit the pod at once."""
    chip = state.spec
    s = check_shape(chip, shape)
    data = _single(state, [s])
    if not is_fine(chip, s):
        if data.topology == "torus3d_cubes":  # any healthy cubes of the pod
            return len(state.healthy_cubes) // cubes_of(s)
        return max(p[0] for p in data.patterns[0])
    if data.topology == "torus2d":
        return data.fine_cap[s]
    per_class = zip(data.cube_classes, data.cube_patterns, strict=True)
    damaged = sum(max(p[0] for p in pats) * n for (_, n), pats in per_class)
    return damaged + CUBE_HOSTS * data.healthy_cubes // data.fine_hosts[s]


# --------------------------------------------------------------------------------------------
# Brute force (tests)


def brute_force_feasible(state: PodState, counts: Mapping[Shape | str, int]) -> bool:
    """Exact search over placements (backtracking, largest shape first, identical vPods in increasing
    placement order, pruned when the healthy chips left cannot hold what is left). Small pods only."""
    chip = state.spec
    items = sorted(canonical_counts(chip.name, counts).items(), key=lambda t: (-math.prod(t[0]), t[0]))
    seq: list[list[frozenset]] = []
    for s, n in items:
        cands = [frozenset(p.chips) for p in placements(state, s)]
        seq.extend([cands] * n)
    need = [sum(len(c[0]) if c else 1 for c in seq[i:]) for i in range(len(seq))] + [0]
    healthy = state.healthy_chips

    def rec(i: int, used: frozenset, lo: int) -> bool:
        if i == len(seq):
            return True
        if need[i] > healthy - len(used):
            return False
        cands = seq[i]
        first = lo if i > 0 and seq[i] is seq[i - 1] else 0
        for j in range(first, len(cands)):
            if used.isdisjoint(cands[j]) and rec(i + 1, used | cands[j], j + 1):
                return True
        return False

    return rec(0, frozenset(), 0)


def brute_force_max(state: PodState, shape: Shape | str) -> int:
    n = 0
    while brute_force_feasible(state, {shape: n + 1}):
        n += 1
    return n


def is_block(chip_name: str, shape: Shape) -> bool:
    return not is_fine(get_chip(chip_name), shape)


__all__ = [
    "GenPlacementData",
    "GridPacker",
    "NotPlaceable",
    "PodPlacement",
    "brute_force_feasible",
    "brute_force_max",
    "feasible",
    "fleet_placement_data",
    "is_cube_shape",
    "knapsack_patterns",
    "max_count",
    "pareto_max",
    "placement_data",
    "realize",
    "realize_generation",
]
