"""Placements of a plan: which vPod of which group sits where (spec: ``formulations/allocation.md``,
section "Placement", and ``formulations/placement.md``).

The MILP with placement makes the vPod counts N[c, s] of each placed generation c and canonical shape
s placeable; :func:`milp_placements` reads the solved ``placement`` block (pattern or exact variant)
and turns it into concrete, disjoint placements of exactly N[c, s] vPods
(:func:`neuscale_opt.topology.patterns.realize_generation` fed by
:func:`~neuscale_opt.topology.milp.pattern_choice`, or the first N[c, s] selected positions of
:func:`~neuscale_opt.topology.milp.exact_choice`). :func:`assign_to_groups` then hands them to the
groups of (c, s) in a fixed order, so that a plan says which group sits where:

* groups of (c, s) in sorted group key order, each taking ``n_g`` consecutive placements;
* placements of (c, s) in fleet order of their pod (``chip/i`` by i), then by origin.

The greedy heuristic places each vPod itself (first fit, :class:`~neuscale_opt.topology.greedy.FirstFitPlacer`)
and keeps the group it bought the vPod for. :func:`placement_rows` writes the JSON rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyomo.environ as pyo

from neuscale_opt.alloc.context import EpochContext
from neuscale_opt.topology.milp import exact_choice, pattern_choice
from neuscale_opt.topology.patterns import NotPlaceable, PodPlacement, max_count, realize_generation
from neuscale_opt.topology.slices import parse_shape

GroupPlacements = tuple[tuple[str, PodPlacement], ...]


def pod_order(pod: str) -> tuple[str, int, str]:
    """Fleet order of a pod id ``chip/i``: generation, then i (numerically)."""
    chip, _, idx = str(pod).rpartition("/")
    return (chip, int(idx), "") if idx.isdigit() else (chip, -1, str(pod))


def group_shapes(ctx: EpochContext) -> dict[str, tuple[str, str]]:
    """Group -> (generation, canonical shape) for the groups of placed generations."""
    out: dict[str, tuple[str, str]] = {}
    for r in ctx.groups.itertuples():
        if str(r.chip) in ctx.placement:
            out[str(r.group)] = (str(r.chip), str(r.placed_shape))
    return out


def placed_counts(ctx: EpochContext, n: Mapping[str, int]) -> dict[tuple[str, str], int]:
    """N[c, s] = sum of n_g over the groups of placed generation c and canonical shape s."""
    out: dict[tuple[str, str], int] = {}
    for g, key in group_shapes(ctx).items():
        if n.get(g, 0) > 0:
            out[key] = out.get(key, 0) + int(n[g])
    return out


def assign_to_groups(ctx: EpochContext, n: Mapping[str, int], placed: Sequence[PodPlacement]) -> GroupPlacements:
    """Hand the placements of each (generation, canonical shape) to its groups (rule in the module
    docstring). ``placed`` must hold exactly N[c, s] placements per (c, s)."""
    by_key: dict[tuple[str, str], list[PodPlacement]] = {}
    for pp in placed:
        by_key.setdefault((pp.placement.chip, pp.placement.name), []).append(pp)
    for lst in by_key.values():
        lst.sort(key=lambda pp: (pod_order(pp.pod), pp.placement.origin, pp.placement.shape))
    out: list[tuple[str, PodPlacement]] = []
    for g, key in sorted(group_shapes(ctx).items()):
        k = int(n.get(g, 0))
        if k <= 0:
            continue
        lst = by_key.get(key, [])
        if len(lst) < k:
            raise RuntimeError(f"epoch {ctx.epoch}: {len(lst)} placements of {key[0]} {key[1]} for {k} vPods of {g}")
        out.extend((g, pp) for pp in lst[:k])
        del lst[:k]
    return tuple(out)


def milp_placements(m: pyo.ConcreteModel, ctx: EpochContext, n: Mapping[str, int]) -> GroupPlacements:
    """Concrete placements of a solved allocation model with a ``placement`` block (empty tuple when
    nothing is placed). Deterministic: depends only on the solved values."""
    blk = getattr(m, "placement", None)
    counts = placed_counts(ctx, n)
    if blk is None or not counts:
        return ()
    data = {c: d for c, d in ctx.placement.items() if c in {k[0] for k in counts}}
    placed: list[PodPlacement] = []
    if ctx.options.placement == "exact":
        left = dict(counts)
        for pp in exact_choice(blk):
            key = (pp.placement.chip, pp.placement.name)
            if left.get(key, 0) > 0:  # ">=" count rows may select extra positions: keep the first N
                placed.append(pp)
                left[key] -= 1
    else:
        pods, cubes = pattern_choice(blk, data)
        for c, d in data.items():
            want = {parse_shape(s): k for (cc, s), k in counts.items() if cc == c}
            try:
                placed.extend(realize_generation(d, want, pods.get(c), cubes.get(c)))
            except NotPlaceable:  # the solved patterns are exact; keep a fallback for solver tolerances
                placed.extend(realize_generation(d, want))
    return assign_to_groups(ctx, n, placed)


def placement_rows(ctx: EpochContext, assigned: GroupPlacements, x: Mapping[str, float]) -> list[dict[str, Any]]:
    """Rows of ``Solution.placements`` for one epoch: the placement (``Placement.row()``: oriented
    shape, origin, chip coordinates, cube ids of a cube-built slice) and the group it serves, its vPod
    type, the classes it carries in the epoch (``+``-joined) and its index within the group."""
    if not assigned:
        return []
    cfg = ctx.configs
    vtype = dict(zip(cfg["group"].astype(str), cfg["vpod_type"].astype(str), strict=True))
    classes: dict[str, set[str]] = {}
    for r in cfg.itertuples():
        if x.get(r.config_id, 0.0) > 0:
            classes.setdefault(str(r.group), set()).add(str(r.bucket))
    rows: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    for g, pp in assigned:
        i = index.get(g, 0)
        index[g] = i + 1
        rows.append(
            {
                "epoch": ctx.epoch,
                "pod": pp.pod,
                **pp.placement.row(),
                "vpod_group": g,
                "vpod_type": vtype.get(g, g),
                "bucket": "+".join(sorted(classes.get(g, ()))),
                "vpod": i,
            }
        )
    return rows


def unplaceable_reason(ctx: EpochContext, counts: Mapping[tuple[str, str], int]) -> str:
    """Why a count vector that fits the chip inventory cannot be placed: the first (generation, shape)
    whose count alone exceeds what the pods can hold at once, else the joint shortfall."""
    for (c, s), k in sorted(counts.items()):
        d = ctx.placement.get(c)
        if d is None:
            continue
        most = sum(g.multiplicity * max_count(g.state, s) for g in d.groups)
        if k > most:
            return f"{c} needs {k} x {s} slices but its pods hold at most {most} at once"
    parts = ", ".join(f"{c} {k} x {s}" for (c, s), k in sorted(counts.items()) if c in ctx.placement)
    return f"the slices {parts} fit one at a time but not together in the pods"
