"""Independent check of a plan's placements (spec: ``formulations/placement.md`` section 6).

Reads only the placement rows, the pods and the allocation counts; shares the geometric rules of
:mod:`~neuscale_opt.topology.slices` but none of the pattern machinery, so a pattern or realisation bug
shows up here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from neuscale_opt.catalog import get_chip
from neuscale_opt.instance import Instance
from neuscale_opt.topology.pods import PodState, StateGroup, pod_map
from neuscale_opt.topology.slices import Placement, canonical, check_placement, shape_str, slice_wraps_in_pod

PLACEMENT_COLUMNS = ("epoch", "pod", "chip", "shape", "origin", "chips")


def _pods(source: Instance | Mapping[str, PodState] | Iterable[StateGroup]) -> dict[str, PodState]:
    if isinstance(source, Instance):
        return pod_map(source)
    if isinstance(source, Mapping):
        return dict(source)
    return {pid: g.state for g in source for pid in g.pod_ids}


def _counts(alloc) -> dict[tuple[int, str, str], int]:
    if isinstance(alloc, pd.DataFrame):
        col = next(c for c in ("count", "n_vpods", "vpods") if c in alloc.columns)
        out: dict[tuple[int, str, str], int] = {}
        for r in alloc.itertuples(index=False):
            k = (int(r.epoch), str(r.chip), str(r.shape))
            out[k] = out.get(k, 0) + int(round(getattr(r, col)))
        return out
    return {(int(e), str(c), str(s)): int(n) for (e, c, s), n in alloc.items()}


def _shape_tuple(text) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in str(text).lower().split("x"))
    except ValueError:
        return None


def check_placements(
    placements_df: pd.DataFrame,
    pods: Instance | Mapping[str, PodState] | Iterable[StateGroup],
    allocation_counts: pd.DataFrame | Mapping[tuple[int, str, str], int],
) -> list[str]:
    """Every problem of the placement rows (columns ``epoch, pod, chip, shape, origin, chips`` and, for
    cube-built slices, ``cubes``): known pod of that generation, allowed shape, inside the pod, aligned,
    no failed chip, connected, chips disjoint across the vPods of one epoch, and per (epoch, generation,
    canonical shape) as many rows as the allocation has vPods (``allocation_counts`` rows ``epoch, chip,
    shape, count`` or a mapping). Generations without placeable pods are not counted. Empty when valid.
    """
    states = _pods(pods)
    placeable = {s.chip for s in states.values()}
    probs: list[str] = []
    missing = [c for c in PLACEMENT_COLUMNS if c not in placements_df.columns]
    if missing:
        return [f"placements: missing column(s) {', '.join(missing)}"]
    owner: dict[tuple[int, str, tuple[int, ...]], int] = {}
    got: dict[tuple[int, str, str], int] = {}
    has_cubes = "cubes" in placements_df.columns
    for i, r in enumerate(placements_df.itertuples(index=False)):
        where = f"placements[{i}] (epoch {r.epoch}, pod {r.pod})"
        st = states.get(str(r.pod))
        if st is None:
            probs.append(f"{where}: unknown pod")
            continue
        if str(r.chip) != st.chip:
            probs.append(f"{where}: chip {r.chip} on a {st.chip} pod")
            continue
        shape = _shape_tuple(r.shape)
        can = canonical(get_chip(st.chip), shape) if shape else None
        if can is None or len(shape) != len(st.dims):
            probs.append(f"{where}: shape {r.shape} is not allowed on {st.chip}")
            continue
        chips = tuple(sorted(tuple(int(x) for x in c) for c in r.chips))
        cubes = tuple(int(x) for x in (r.cubes if has_cubes and isinstance(r.cubes, list | tuple) else ()))
        p = Placement(st.chip, shape, tuple(int(x) for x in r.origin), chips, cubes, False)
        p = Placement(p.chip, p.shape, p.origin, p.chips, p.cubes, slice_wraps_in_pod(st, p))
        for msg in check_placement(st, p):
            probs.append(f"{where}: {msg}")
        for c in chips:
            key = (int(r.epoch), str(r.pod), c)
            if key in owner:
                probs.append(f"{where}: chip {list(c)} also used by placements[{owner[key]}]")
                break
            owner[key] = i
        k = (int(r.epoch), st.chip, shape_str(can))
        got[k] = got.get(k, 0) + 1
    want = {k: n for k, n in _counts(allocation_counts).items() if k[1] in placeable and n}
    for k in sorted(set(want) | set(got)):
        if want.get(k, 0) != got.get(k, 0):
            probs.append(
                f"epoch {k[0]} {k[1]} {k[2]}: {got.get(k, 0)} placed vPods, the allocation has {want.get(k, 0)}"
            )
    return probs
