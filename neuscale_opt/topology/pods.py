"""Pods as graphs and as hashable states (spec: ``formulations/placement.md`` section 1).

Physical model (``hardware.md`` section 2.1, sources ``SB-tpus``, ``GCP-v5e``, ``GCP-v6e``, ``GCP-v4``,
``GCP-v5p``):

* ``torus2d`` (v5e, v6e): one 16x16 2-D torus per pod; hosts of 2x4 chips (catalog ``host_shape``);
  wraparound links only on an axis whose full length is 16 (section 2.3).
* ``torus3d_cubes`` (v4, v5p): 4x4x4 cubes of chips (a rack, 16 hosts of 2x2x1) joined by optical
  circuit switches (OCS); the pod dimensions are multiples of 4.

Graph model (:func:`pod_graph`): one node per chip, keyed by its coordinate tuple, with attribute
``failed``. Edges carry ``kind``:

* ``ici``: neighbouring chips (distance 1 on one axis) inside the pod (2-D) or inside one cube (3-D);
* ``wrap``: the wraparound link of a 2-D axis of length 16 (first and last chip of the line);
* ``ocs``: 3-D only, the optical links of the default wiring: face-neighbouring chips of neighbouring
  cubes, and the pod-level wraparound between the outer faces. The OCS can rewire any cube face to any
  other, so a cube-built slice is not bound to these edges: its own graph joins its cubes in their
  logical arrangement (:func:`neuscale_opt.topology.slices.slice_graph`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import cache, cached_property

import networkx as nx

from neuscale_opt.catalog import ChipSpec, get_chip
from neuscale_opt.instance import Instance

CUBE = 4  # chips per cube edge on OCS systems (hardware.md section 2.1)
WRAP_LEN_2D = 16  # a 2-D axis has wraparound only at its full length 16 (hardware.md section 2.3)
PLACEABLE = ("torus2d", "torus3d_cubes")

Coord = tuple[int, ...]


@dataclass(frozen=True)
class PodState:
    """One pod as the placement layer sees it: generation, dimensions and failed chips.

    Two pods with the same ``signature`` are interchangeable, so the pattern formulation counts them
    with one integer per pattern instead of one binary per pod.
    """

    chip: str
    dims: tuple[int, ...]
    failed: frozenset[Coord] = field(default_factory=frozenset)

    @property
    def spec(self) -> ChipSpec:
        return get_chip(self.chip)

    @property
    def topology(self) -> str:
        return self.spec.topology

    @property
    def signature(self) -> tuple:
        return (self.chip, self.dims, tuple(sorted(self.failed)))

    @property
    def n_chips(self) -> int:
        return math.prod(self.dims)

    @property
    def healthy_chips(self) -> int:
        return self.n_chips - len(self.failed)

    def inside(self, c: Coord) -> bool:
        return len(c) == len(self.dims) and all(0 <= x < d for x, d in zip(c, self.dims, strict=True))

    # ---- hosts (torus2d) -------------------------------------------------------------------
    @cached_property
    def host_shape(self) -> tuple[int, ...]:
        return tuple(self.spec.host_shape)

    @cached_property
    def host_grid(self) -> tuple[int, ...]:
        """Number of hosts along each axis (2-D: the pod; 3-D: one cube)."""
        box = self.dims if self.topology == "torus2d" else (CUBE, CUBE, CUBE)
        return tuple(d // h for d, h in zip(box, self.host_shape, strict=True))

    def host_of(self, c: Coord) -> Coord:
        """Host coordinate of a chip (2-D: in the pod; 3-D: in its cube)."""
        if self.topology == "torus2d":
            return tuple(x // h for x, h in zip(c, self.host_shape, strict=True))
        return tuple((x % CUBE) // h for x, h in zip(c, self.host_shape, strict=True))

    @cached_property
    def damaged_hosts(self) -> frozenset[Coord]:
        """2-D hosts holding at least one failed chip."""
        return frozenset(self.host_of(c) for c in self.failed)

    # ---- cubes (torus3d_cubes) -------------------------------------------------------------
    @cached_property
    def cube_grid(self) -> tuple[int, ...]:
        return tuple(d // CUBE for d in self.dims)

    @cached_property
    def n_cubes(self) -> int:
        return math.prod(self.cube_grid)

    def cube_coord(self, cube_id: int) -> Coord:
        """Cube coordinate of a cube id (row-major over the cube grid)."""
        out = []
        for g in reversed(self.cube_grid):
            out.append(cube_id % g)
            cube_id //= g
        return tuple(reversed(out))

    def cube_id(self, c: Coord) -> int:
        """Id of the cube holding chip ``c`` (row-major over the cube grid)."""
        idx = 0
        for x, g in zip(c, self.cube_grid, strict=True):
            idx = idx * g + x // CUBE
        return idx

    def cube_chips(self, cube_id: int) -> list[Coord]:
        base = [x * CUBE for x in self.cube_coord(cube_id)]
        return list(itertools.product(*(range(b, b + CUBE) for b in base)))

    @cached_property
    def cube_failed_hosts(self) -> dict[int, frozenset[Coord]]:
        """Damaged cubes: id -> hosts (2x2x1, in cube-local host coordinates) holding a failed chip."""
        out: dict[int, set[Coord]] = {}
        for c in self.failed:
            out.setdefault(self.cube_id(c), set()).add(self.host_of(c))
        return {k: frozenset(v) for k, v in sorted(out.items())}

    @cached_property
    def healthy_cubes(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.n_cubes) if i not in self.cube_failed_hosts)


def state_of(chip: str, dims, failed=(), failed_hosts=()) -> PodState:
    """A pod state; ``failed_hosts`` (host coordinates, 2-D in the pod, 3-D as chip coordinates of
    the host's first chip) mark every chip of those hosts failed."""
    dims_t = tuple(int(d) for d in dims)
    bad = {tuple(int(x) for x in c) for c in failed}
    if failed_hosts:
        hs = get_chip(chip).host_shape
        for h in failed_hosts:
            if get_chip(chip).topology == "torus2d":
                base = [x * s for x, s in zip(h, hs, strict=True)]
            else:
                base = [x - x % s for x, s in zip(h, hs, strict=True)]
            for off in itertools.product(*(range(s) for s in hs)):
                bad.add(tuple(b + o for b, o in zip(base, off, strict=True)))
    return PodState(chip, dims_t, frozenset(bad))


@cache
def _graph(chip_name: str, topology: str, dims: tuple[int, ...]) -> nx.Graph:
    g = nx.Graph()
    nodes = list(itertools.product(*(range(d) for d in dims)))
    g.add_nodes_from(nodes, failed=False)
    for c in nodes:
        for ax, d in enumerate(dims):
            if c[ax] + 1 < d:
                n = c[:ax] + (c[ax] + 1,) + c[ax + 1 :]
                same_cube = topology != "torus3d_cubes" or c[ax] // CUBE == n[ax] // CUBE
                g.add_edge(c, n, kind="ici" if same_cube else "ocs")
            elif d > 2 and (topology == "torus3d_cubes" or d == WRAP_LEN_2D):
                n = c[:ax] + (0,) + c[ax + 1 :]
                g.add_edge(c, n, kind="ocs" if topology == "torus3d_cubes" else "wrap")
    return g


def pod_graph(chip: ChipSpec, dims, failed=()) -> nx.Graph:
    """The chip graph of one pod (model in the module docstring); ``failed`` chips get ``failed=True``.

    Returns a new graph (the cached skeleton is copied), so callers may change it.
    """
    g = _graph(chip.name, chip.topology, tuple(int(d) for d in dims)).copy()
    for c in failed:
        g.nodes[tuple(c)]["failed"] = True
    return g


@dataclass(frozen=True)
class StateGroup:
    """Identical pods of one generation: their state, how many there are and their ids."""

    state: PodState
    multiplicity: int
    pod_ids: tuple[str, ...]


def pod_id(chip: str, index: int) -> str:
    return f"{chip}/{index}"


def pod_states(inst: Instance) -> list[StateGroup]:
    """Distinct pod states of every placeable generation (TPU pods given as ``pods``), in fleet order
    and, inside a generation, in order of first appearance. Pod ids are ``f"{chip}/{i}"``.

    Generations given as a plain chip count, and switched GPU nodes, keep the chip-count constraint only.
    """
    out: list[StateGroup] = []
    for entry in inst.fleet:
        spec = get_chip(entry.chip)
        if spec.topology not in PLACEABLE or not entry.pods:
            continue
        groups: dict[PodState, list[str]] = {}
        for i, pod in enumerate(entry.pods):
            st = state_of(entry.chip, pod.dims, pod.failed_chips)
            groups.setdefault(st, []).append(pod_id(entry.chip, i))
        out.extend(StateGroup(s, len(ids), tuple(ids)) for s, ids in groups.items())
    return out


def pod_map(inst: Instance) -> dict[str, PodState]:
    """Pod id -> state, for every placeable pod."""
    return {pid: g.state for g in pod_states(inst) for pid in g.pod_ids}


def pod_states_from_frame(pods) -> list[StateGroup]:
    """Distinct pod states from a pods table (``Coefficients.pods``: columns ``pod``, ``chip``, ``dims``,
    ``failed``), like :func:`pod_states`: rows in fleet order, identical pods of a generation grouped in
    order of first appearance, pod ids taken from the table. Rows of non-placeable generations (switched
    GPU nodes) are left out."""
    out: list[StateGroup] = []
    if pods is None or len(pods) == 0:
        return out
    by_chip: dict[str, dict[PodState, list[str]]] = {}
    for r in pods.itertuples(index=False):
        chip = str(r.chip)
        if get_chip(chip).topology not in PLACEABLE:
            continue
        st = state_of(chip, r.dims, r.failed)
        by_chip.setdefault(chip, {}).setdefault(st, []).append(str(r.pod))
    for groups in by_chip.values():
        out.extend(StateGroup(s, len(ids), tuple(ids)) for s, ids in groups.items())
    return out
