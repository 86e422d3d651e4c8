"""Placement constraints for the allocation MILP (spec: ``formulations/placement.md`` section 4).

The only module of :mod:`neuscale_opt.topology` that imports Pyomo; it builds components and never
solves (solving belongs to the solver door of the caller). Two variants, chosen by name:

* ``pattern`` (symmetry-free, Gilmore-Gomory style): integer ``y_pattern`` pods of each distinct state
  per Pareto-maximal block pattern, plus capacity rows for the fine shapes;
* ``exact`` (small fleets): one binary ``x_place`` per (pod, aligned placement), chip-disjointness and
  counts.

Both take the number of vPods the allocation chose per (generation, canonical shape) as Pyomo
expressions ``N[c, s]`` and make them placeable. Component names are the constraint IDs of the spec.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pyomo.environ as pyo

from neuscale_opt.topology.patterns import CUBE_HOSTS, GenPlacementData, PodPlacement
from neuscale_opt.topology.slices import Shape, parse_shape, placements, shape_str

CountMap = Mapping[tuple[str, str], object]  # (chip, canonical shape string) -> Pyomo expression or number

PATTERN_IDS = (
    "y_pattern",
    "c_pattern_pods",
    "x_cube_pod",
    "c_cube_pod",
    "c_pattern_cover",
    "c_fine_capacity",
    "w_cube",
    "r_cube",
    "c_cube_classes",
    "c_cube_cover",
    "c_cube_hosts",
)
EXACT_IDS = ("x_place", "c_exact_disjoint", "c_exact_count")


def _n(counts: CountMap, chip: str, s: Shape):
    return counts.get((chip, shape_str(s)), 0)


def _check_counts(counts: CountMap, data: Mapping[str, GenPlacementData]) -> None:
    for chip, s in counts:
        if chip not in data:
            raise ValueError(f"no placement data for generation {chip}")
        if parse_shape(s) not in data[chip].shapes:
            raise ValueError(f"{chip} shape {s} is not among the shapes of interest")


def cube_pods_by_knapsack(d: GenPlacementData, j: int) -> bool:
    """Whether 3-D pattern class ``j`` gets one knapsack row per pod (``x_cube_pod``, ``c_cube_pod``)
    rather than pattern columns: when that takes fewer integer variables (pods x kinds of two or more
    cubes < patterns). Both are exact: any healthy cubes of a pod hold any mix of cube-built slices
    whose cubes add up to at most its healthy cubes."""
    if d.topology != "torus3d_cubes" or not d.kinds:
        return False
    big = len(d.kinds) - len(d.free_kinds)
    return d.class_multiplicity(j) * big < len(d.patterns[d.classes[j][0]])


def add_pattern_constraints(b: pyo.Block, counts: CountMap, data: Mapping[str, GenPlacementData]) -> None:
    """**Pattern variant.** For every generation c with pod states:

    * ``y_pattern[c, j, p]`` (integer, pods): pods of pattern class j (``GenPlacementData.classes``)
      packed with block pattern p;
    * ``c_pattern_pods[c, j]``: ``sum_p y[c, j, p] <= m_j`` (pods of the class);
    * 3-D classes of few pods (:func:`cube_pods_by_knapsack`) instead: ``x_cube_pod[c, j, t, k]``
      (integer) slices of kind k on pod t of the class, ``c_cube_pod[c, j, t]``:
      ``sum_k cubes_k x[c, j, t, k] <= H_j`` (its healthy cubes);
    * ``c_pattern_cover[c, k]``: ``sum_{j, p} a[p, k] y[c, j, p] + sum_{j, t} x[c, j, t, k]
      >= sum_{s in kind k} N[c, s]``, except the 3-D one-cube kind (``free_kinds``), which
      ``c_cube_hosts`` alone places;
    * 2-D ``c_fine_capacity[c, f]``: ``sum_{g fine, |g| >= |f|} |g|/|f| N[c, g]
      + (|host|/|f|) sum_k hosts_k N_k <= cap_f``;
    * 3-D ``w_cube[c, j, q]`` (integer, cubes): damaged cubes of class j using sub-cube pattern q,
      ``c_cube_classes[c, j]``: ``sum_q w <= cubes of class j``; ``r_cube[c, f] >= 0`` sub-cube slices in
      healthy cubes; ``c_cube_cover[c, f]``: ``sum_{j, q} b[q, f] w[c, j, q] + r[c, f] >= N[c, f]``;
      ``c_cube_hosts[c]``: ``sum_f hosts_f r[c, f] + 16 sum_k cubes_k N_k <= 16 H``.
    """
    pats = {(c, j): d.patterns[cl[0]] for c, d in data.items() for j, cl in enumerate(d.classes)}
    mult = {(c, j): d.class_multiplicity(j) for c, d in data.items() for j in range(len(d.classes))}
    by_pod = {(c, j) for c, d in data.items() for j in range(len(d.classes)) if cube_pods_by_knapsack(d, j)}
    y_idx = [
        (c, j, p)
        for c, d in data.items()
        if d.kinds
        for j in range(len(d.classes))
        if (c, j) not in by_pod
        for p in range(len(pats[c, j]))
    ]
    b.y_pattern = pyo.Var(y_idx, domain=pyo.NonNegativeIntegers, bounds=lambda _b, c, j, p: (0, mult[c, j]))
    pods_idx = sorted({(c, j) for c, j, _ in y_idx})
    b.c_pattern_pods = pyo.Constraint(
        pods_idx, rule=lambda b, c, j: sum(b.y_pattern[c, j, p] for p in range(len(pats[c, j]))) <= mult[c, j]
    )
    # 3-D classes of few pods: one knapsack row per pod instead of the pattern columns
    cap = {(c, j): len(data[c].groups[data[c].classes[j][0]].state.healthy_cubes) for c, j in by_pod}
    big = {c: [k for k in range(len(d.kinds)) if k not in d.free_kinds] for c, d in data.items()}
    x_idx = [(c, j, t, k) for c, j in sorted(by_pod) for t in range(mult[c, j]) for k in big[c]]
    b.x_cube_pod = pyo.Var(
        x_idx,
        domain=pyo.NonNegativeIntegers,
        bounds=lambda _b, c, j, t, k: (0, cap[c, j] // data[c].kind_cubes[k]),
    )
    b.c_cube_pod = pyo.Constraint(
        sorted({(c, j, t) for c, j, t, _ in x_idx}),
        rule=lambda b, c, j, t: sum(data[c].kind_cubes[k] * b.x_cube_pod[c, j, t, k] for k in big[c]) <= cap[c, j],
    )
    # the non-zero entries of each (generation, kind), gathered once
    terms: dict[tuple[str, int], list[tuple[int, object]]] = {}
    for c, j, p in y_idx:
        for k, a in enumerate(pats[c, j][p]):
            if a:
                terms.setdefault((c, k), []).append((a, b.y_pattern[c, j, p]))
    for c, j, t, k in x_idx:
        terms.setdefault((c, k), []).append((1, b.x_cube_pod[c, j, t, k]))

    def cover(b, c, k):
        d = data[c]
        if k in d.free_kinds:  # one-cube slices: c_cube_hosts places them
            return pyo.Constraint.Skip
        rhs = sum(_n(counts, c, s) for s in d.block_shapes if d.kind_of[s] == k)
        if isinstance(rhs, int) and rhs == 0:
            return pyo.Constraint.Skip
        return sum(a * v for a, v in terms.get((c, k), ())) >= rhs

    b.c_pattern_cover = pyo.Constraint([(c, k) for c, d in data.items() for k in range(len(d.kinds))], rule=cover)

    def block_hosts(c):
        d = data[c]
        return sum(d.kind_hosts[d.kind_of[s]] * _n(counts, c, s) for s in d.block_shapes)

    def fine_cap(b, c, fs):
        d, f = data[c], parse_shape(fs)
        size = lambda s: s[0] * s[1]  # noqa: E731
        lhs = sum(size(g) // size(f) * _n(counts, c, g) for g in d.fine_shapes if size(g) >= size(f))
        lhs = lhs + d.units[f] * block_hosts(c)
        if isinstance(lhs, int):
            return pyo.Constraint.Skip
        return lhs <= d.fine_cap[f]

    b.c_fine_capacity = pyo.Constraint(
        [(c, shape_str(f)) for c, d in data.items() if d.topology == "torus2d" for f in d.fine_shapes], rule=fine_cap
    )
    w_idx = [
        (c, j, q)
        for c, d in data.items()
        if d.topology == "torus3d_cubes" and d.fine_shapes
        for j in range(len(d.cube_classes))
        for q in range(len(d.cube_patterns[j]))
    ]
    ncls = {(c, j): n for c, d in data.items() for j, (_, n) in enumerate(d.cube_classes)}
    b.w_cube = pyo.Var(w_idx, domain=pyo.NonNegativeIntegers, bounds=lambda _b, c, j, q: (0, ncls[c, j]))
    b.c_cube_classes = pyo.Constraint(
        sorted({(c, j) for c, j, _ in w_idx}),
        rule=lambda b, c, j: sum(b.w_cube[c, j, q] for q in range(len(data[c].cube_patterns[j]))) <= ncls[c, j],
    )
    r_idx = [(c, f) for c, d in data.items() if d.topology == "torus3d_cubes" for f in range(len(d.fine_shapes))]
    b.r_cube = pyo.Var(r_idx, domain=pyo.NonNegativeReals)

    def cube_cover(b, c, fi):
        d = data[c]
        rhs = _n(counts, c, d.fine_shapes[fi])
        if isinstance(rhs, int) and rhs == 0:
            return pyo.Constraint.Skip
        pats = d.cube_patterns
        lhs = sum(pats[j][q][fi] * b.w_cube[c, j, q] for (cc, j, q) in w_idx if cc == c and pats[j][q][fi])
        return lhs + b.r_cube[c, fi] >= rhs

    b.c_cube_cover = pyo.Constraint(r_idx, rule=cube_cover)

    def cube_hosts(b, c):
        d = data[c]
        lhs = sum(d.fine_hosts[f] * b.r_cube[c, fi] for fi, f in enumerate(d.fine_shapes))
        lhs = lhs + CUBE_HOSTS * sum(d.kind_cubes[d.kind_of[s]] * _n(counts, c, s) for s in d.block_shapes)
        if isinstance(lhs, int):
            return pyo.Constraint.Skip
        return lhs <= CUBE_HOSTS * d.healthy_cubes

    b.c_cube_hosts = pyo.Constraint([c for c, d in data.items() if d.topology == "torus3d_cubes"], rule=cube_hosts)


def add_exact_constraints(b: pyo.Block, counts: CountMap, data: Mapping[str, GenPlacementData]) -> None:
    """**Exact variant** (small fleets). Every pod separately, every aligned placement of every shape of
    interest (``slices.placements``):

    * ``x_place[c, pod, j]`` (binary): placement j of the pod is used;
    * ``c_exact_disjoint[c, pod, chip]``: ``sum_{j covers chip} x <= 1`` (chips covered at least twice);
    * ``c_exact_count[c, s]``: ``sum_{pod, j of shape s} x >= N[c, s]``.
    """
    cand: dict[tuple[str, str], list] = {}
    for c, d in data.items():
        for g in d.groups:
            plist = [p for s in d.shapes for p in placements(g.state, s)]
            for pid in g.pod_ids:
                cand[c, pid] = plist
    b.exact_placements = cand  # plain attribute: the placements behind x_place, for reading a solution
    x_idx = [(c, pid, j) for (c, pid), plist in cand.items() for j in range(len(plist))]
    b.x_place = pyo.Var(x_idx, domain=pyo.Binary)
    cover: dict[tuple, list[int]] = {}
    for (c, pid), plist in cand.items():
        for j, p in enumerate(plist):
            for ch in p.chips:
                cover.setdefault((c, pid, ch), []).append(j)
    dis = {k: v for k, v in cover.items() if len(v) > 1}
    keys = sorted(dis)
    b.c_exact_disjoint = pyo.Constraint(
        range(len(keys)), rule=lambda b, n: sum(b.x_place[keys[n][0], keys[n][1], j] for j in dis[keys[n]]) <= 1
    )

    def count(b, c, s):
        shape = parse_shape(s)
        rhs = _n(counts, c, shape)
        if isinstance(rhs, int) and rhs == 0:
            return pyo.Constraint.Skip
        lhs = sum(
            b.x_place[c, pid, j] for (cc, pid), pl in cand.items() if cc == c for j, p in enumerate(pl) if p.name == s
        )
        return lhs >= rhs

    b.c_exact_count = pyo.Constraint([(c, shape_str(s)) for c, d in data.items() for s in d.shapes], rule=count)


VARIANTS: dict[str, Callable[[pyo.Block, CountMap, Mapping[str, GenPlacementData]], None]] = {
    "pattern": add_pattern_constraints,
    "exact": add_exact_constraints,
}


def add_placement_constraints(
    model: pyo.Block,
    counts: CountMap,
    data: Mapping[str, GenPlacementData],
    variant: str = "pattern",
    name: str = "placement",
) -> pyo.Block:
    """Add a block ``model.<name>`` making the vPod counts placeable.

    ``counts[(chip, "AxB")]`` is the Pyomo expression (or number) of vPods of that generation and
    canonical shape (the allocation's ``shape_str``); ``data`` maps a generation to its
    :class:`~neuscale_opt.topology.patterns.GenPlacementData` (``fleet_placement_data``). Call once per
    epoch with a distinct ``name``. Generations absent from ``data`` are left to the chip-count rows.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown placement variant {variant!r}; known: {', '.join(VARIANTS)}")
    _check_counts(counts, data)
    blk = pyo.Block(concrete=True)
    model.add_component(name, blk)
    VARIANTS[variant](blk, counts, data)
    return blk


# --------------------------------------------------------------------------------------------
# Reading a solved block


def pattern_choice(
    blk: pyo.Block, data: Mapping[str, GenPlacementData]
) -> tuple[dict[str, dict[str, tuple[int, ...]]], dict[str, dict[int, list[tuple[tuple[int, ...], int]]]]]:
    """From a solved pattern block: per generation, pod id -> block pattern (the pods of a pattern
    class, states in order and each state's pods in id order, take the chosen patterns in order; a
    knapsack class gives each pod its ``x_cube_pod`` vector) and damaged cube class -> [(pattern,
    cubes)]; the inputs of :func:`neuscale_opt.topology.patterns.realize_generation`."""
    pods: dict[str, dict[str, tuple[int, ...]]] = {}
    cubes: dict[str, dict[int, list]] = {}
    for c, d in data.items():
        pods[c] = {}
        if d.kinds:
            for j in range(len(d.classes)):
                ids = list(d.class_pods(j))
                if cube_pods_by_knapsack(d, j):
                    free = set(d.free_kinds)
                    for t, pid in enumerate(ids):
                        pods[c][pid] = tuple(
                            0 if k in free else round(pyo.value(blk.x_cube_pod[c, j, t, k]))
                            for k in range(len(d.kinds))
                        )
                    continue
                for p, pat in enumerate(d.patterns[d.classes[j][0]]):
                    n = round(pyo.value(blk.y_pattern[c, j, p]))
                    for _ in range(n):
                        if ids:
                            pods[c][ids.pop(0)] = pat
        cubes[c] = {}
        if d.topology == "torus3d_cubes" and d.fine_shapes:
            for j in range(len(d.cube_classes)):
                cubes[c][j] = [
                    (pat, round(pyo.value(blk.w_cube[c, j, q])))
                    for q, pat in enumerate(d.cube_patterns[j])
                    if round(pyo.value(blk.w_cube[c, j, q])) > 0
                ]
    return pods, cubes


def exact_choice(blk: pyo.Block) -> list[PodPlacement]:
    """Placements selected in a solved exact block (pod order, then placement order)."""
    out = []
    for (c, pid), plist in blk.exact_placements.items():
        for j, p in enumerate(plist):
            if round(pyo.value(blk.x_place[c, pid, j])) == 1:
                out.append(PodPlacement(pid, p))
    return out


def demo_model(
    data: Mapping[str, GenPlacementData],
    value: Mapping[tuple[str, str], float],
    upper: Mapping[tuple[str, str], int] | None = None,
    lower: Mapping[tuple[str, str], int] | None = None,
    variant: str = "pattern",
) -> pyo.ConcreteModel:
    """A standalone placement model for tests and benchmarks: integer ``N[c, s]`` vPods between
    ``lower`` and ``upper``, maximise ``sum value[c, s] N[c, s]`` subject to placement."""
    keys = sorted(value)
    m = pyo.ConcreteModel(name=f"placement_{variant}")
    up = upper or {}
    lo = lower or {}
    m.N = pyo.Var(keys, domain=pyo.NonNegativeIntegers, bounds=lambda _m, c, s: (lo.get((c, s), 0), up.get((c, s))))
    m.obj = pyo.Objective(expr=sum(value[k] * m.N[k] for k in keys), sense=pyo.maximize)
    add_placement_constraints(m, {k: m.N[k] for k in keys}, data, variant)
    return m
