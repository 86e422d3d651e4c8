"""First-fit placement for the greedy heuristic (spec: ``formulations/placement.md`` section 5).

Rule (deterministic): vPods are placed largest first (chips descending, then canonical shape); each goes
to the **lowest pod id** (fleet order) where it fits, at the **first free aligned placement** in the order
of :func:`neuscale_opt.topology.slices.placements` (orientations as listed, origins row-major). Fine
shapes try damaged hosts and cubes first (best fit, so whole hosts and cubes stay free for larger
slices) and fill one host or cube before the next. Cube-built slices take the lowest-numbered free
healthy cubes. A vPod that fits nowhere is reported, even when enough healthy chips remain: the
heuristic then fails over to another configuration.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from neuscale_opt.catalog import get_chip
from neuscale_opt.topology.patterns import PodPlacement
from neuscale_opt.topology.pods import Coord, PodState, StateGroup
from neuscale_opt.topology.slices import (
    Placement,
    Shape,
    check_shape,
    cube_placement,
    cubes_of,
    is_cube_shape,
    is_fine,
    placements,
    shape_str,
)


@dataclass
class FirstFitPlacer:
    """Incremental first-fit placer over the pods of one or more generations (it keeps the chips in use)."""

    pods: dict[str, PodState]
    used: dict[str, set[Coord]] = field(default_factory=dict)
    _cache: dict[tuple, list[Placement]] = field(default_factory=dict)

    @classmethod
    def from_groups(cls, groups: Iterable[StateGroup]) -> FirstFitPlacer:
        return cls({pid: g.state for g in groups for pid in g.pod_ids})

    def _cands(self, st: PodState, shape: Shape) -> list[Placement]:
        key = (st, shape)
        if key not in self._cache:
            ps = placements(st, shape)
            if is_fine(st.spec, shape):
                damaged = {st.host_of(c) for c in st.failed}
                if st.topology == "torus2d":
                    ps.sort(key=lambda p: (st.host_of(p.origin) not in damaged, st.host_of(p.origin), p.origin))
                else:
                    bad = set(st.cube_failed_hosts)
                    ps.sort(key=lambda p: (st.cube_id(p.origin) not in bad, st.cube_id(p.origin), p.origin))
            self._cache[key] = ps
        return self._cache[key]

    def place(self, chip: str, shape: Shape | str) -> PodPlacement | None:
        """Place one vPod (first fit); ``None`` when it fits in no pod of the generation."""
        spec = get_chip(chip)
        s = check_shape(spec, shape)
        for pid, st in self.pods.items():
            if st.chip != chip:
                continue
            used = self.used.setdefault(pid, set())
            if is_cube_shape(spec, s):
                free = [i for i in st.healthy_cubes if used.isdisjoint(st.cube_chips(i))]
                if len(free) >= cubes_of(s):
                    p = cube_placement(st, s, tuple(free[: cubes_of(s)]))
                    used.update(p.chips)
                    return PodPlacement(pid, p)
                continue
            for p in self._cands(st, s):
                if used.isdisjoint(p.chips):
                    used.update(p.chips)
                    return PodPlacement(pid, p)
        return None


def first_fit(
    groups: Iterable[StateGroup] | FirstFitPlacer, counts: Mapping[tuple[str, str], int]
) -> tuple[list[PodPlacement], dict[tuple[str, str], int]]:
    """Place ``counts[(chip, shape)]`` vPods by the module's first-fit rule. Returns the placements and
    what did not fit ((chip, canonical shape) -> vPods left over). Given a placer (instead of pod
    states), it places into it and keeps the chips it used."""
    placer = groups if isinstance(groups, FirstFitPlacer) else FirstFitPlacer.from_groups(groups)
    items = sorted(
        ((c, check_shape(c, s), int(n)) for (c, s), n in counts.items() if int(n) > 0),
        key=lambda t: (-math.prod(t[1]), t[0], t[1]),
    )
    out: list[PodPlacement] = []
    left: dict[tuple[str, str], int] = {}
    for chip, s, n in items:
        for i in range(n):
            pp = placer.place(chip, s)
            if pp is None:
                left[(chip, shape_str(s))] = n - i
                break
            out.append(pp)
    return out, left


def place_up_to(
    placer: FirstFitPlacer, chip: str, shape: str, k: int, into: list[PodPlacement], unfit: set[tuple[str, str]]
) -> int:
    """Place up to ``k`` vPods of ``shape`` on ``chip`` one by one (first fit) into ``into``; returns
    how many fit. A shape that failed once is recorded in ``unfit`` and not tried again (nothing is
    freed while a plan is being filled)."""
    if (chip, shape) in unfit:
        return 0
    for i in range(k):
        pp = placer.place(chip, shape)
        if pp is None:
            unfit.add((chip, shape))
            return i
        into.append(pp)
    return k
