"""Independent check of a plan's placements (spec: ``formulations/placement.md`` section 6).

Reads only the placement rows, the pods and the allocation counts; shares the geometric rules of
:mod:`~neuscale_opt.topology.slices` but none of the pattern machinery, so a pattern or realisation bug
shows up here.

Two implementations of the same rules:

* :func:`check_placements` decides every vPod with numpy arrays over all placed chips at once (linear
  in the placed chips): a non-cube vPod is valid iff its chips are exactly the box of its oriented shape
  at its aligned origin (offsets from the origin modulo the pod dimensions, one linear index per offset,
  every index once), a cube-built vPod iff its chips are exactly the chips of its listed distinct whole
  cubes; a box of unit grid steps, and whole cubes joined in their logical arrangement, are connected,
  so that is the connectivity test. Failed chips and disjointness are array look-ups (one global chip id
  per pod and chip). The rows it rejects get their messages from the per-vPod rules
  (:func:`~neuscale_opt.topology.slices.check_placement`, networkx connectivity included);
* :func:`check_placements_graph` applies those per-vPod rules to every row (the reference the tests
  compare with).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from functools import cache

import numpy as np
import pandas as pd

from neuscale_opt.catalog import get_chip
from neuscale_opt.instance import Instance
from neuscale_opt.topology.pods import CUBE, PodState, StateGroup, pod_map
from neuscale_opt.topology.slices import (
    Placement,
    canonical,
    check_placement,
    cubes_of,
    is_cube_shape,
    is_fine,
    orientations,
    shape_str,
    slice_wraps_in_pod,
)

PLACEMENT_COLUMNS = ("epoch", "pod", "chip", "shape", "origin", "chips")


class _Malformed(ValueError):
    """Chip or origin coordinates of the wrong length or type."""


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


@cache
def _shape_info(chip_name: str, text: str, ndim: int):
    """(oriented shape, canonical name, cube-built, orientation allowed) of a shape text on a
    generation, or None when the generation does not allow it with ``ndim`` axes."""
    shape = _shape_tuple(text)
    if not shape or len(shape) != ndim:
        return None
    chip = get_chip(chip_name)
    can = canonical(chip, shape)
    if can is None:
        return None
    cube = is_cube_shape(chip, shape)
    return shape, shape_str(can), cube, cube or shape in orientations(chip, can)


def _row_cubes(value) -> tuple[int, ...]:
    return tuple(int(x) for x in value) if isinstance(value, list | tuple | np.ndarray) else ()


def _placement(st: PodState, shape, origin, chips, cubes) -> Placement:
    p = Placement(st.chip, shape, tuple(int(x) for x in origin), chips, cubes, False)
    return Placement(p.chip, p.shape, p.origin, p.chips, p.cubes, slice_wraps_in_pod(st, p))


def _count_problems(got, alloc, placeable) -> list[str]:
    want = {k: n for k, n in _counts(alloc).items() if k[1] in placeable and n}
    out = []
    for k in sorted(set(want) | set(got)):
        if want.get(k, 0) != got.get(k, 0):
            out.append(f"epoch {k[0]} {k[1]} {k[2]}: {got.get(k, 0)} placed vPods, the allocation has {want.get(k, 0)}")
    return out


def check_placements_graph(
    placements_df: pd.DataFrame,
    pods: Instance | Mapping[str, PodState] | Iterable[StateGroup],
    allocation_counts: pd.DataFrame | Mapping[tuple[int, str, str], int],
) -> list[str]:
    """:func:`check_placements` vPod by vPod: :func:`~neuscale_opt.topology.slices.check_placement`
    (networkx connectivity of the slice graph) on every row, disjointness by a dictionary of used chips.
    Same problems, in the same order; the reference of the tests (slow on large fleets)."""
    states = _pods(pods)
    placeable = {s.chip for s in states.values()}
    missing = [c for c in PLACEMENT_COLUMNS if c not in placements_df.columns]
    if missing:
        return [f"placements: missing column(s) {', '.join(missing)}"]
    probs: list[str] = []
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
        p = _placement(st, shape, r.origin, chips, _row_cubes(r.cubes) if has_cubes else ())
        probs.extend(f"{where}: {msg}" for msg in check_placement(st, p))
        mine = [(int(r.epoch), str(r.pod), c) for c in dict.fromkeys(chips)]
        clash = next((k for k in mine if k in owner), None)
        if clash is not None:
            probs.append(f"{where}: chip {list(clash[2])} also used by placements[{owner[clash]}]")
        for k in mine:
            owner.setdefault(k, i)
        k = (int(r.epoch), st.chip, shape_str(can))
        got[k] = got.get(k, 0) + 1
    return probs + _count_problems(got, allocation_counts, placeable)


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

    Decided with arrays over all placed chips (module docstring); the same problems, in the same order,
    as :func:`check_placements_graph`.
    """
    states = _pods(pods)
    placeable = {s.chip for s in states.values()}
    missing = [c for c in PLACEMENT_COLUMNS if c not in placements_df.columns]
    if missing:
        return [f"placements: missing column(s) {', '.join(missing)}"]
    n = len(placements_df)
    epochs = placements_df["epoch"].tolist()
    pod_col = placements_df["pod"].tolist()
    chip_col = placements_df["chip"].tolist()
    shape_col = placements_df["shape"].tolist()
    origin_col = placements_df["origin"].tolist()
    chips_col = placements_df["chips"].tolist()
    cubes_col = placements_df["cubes"].tolist() if "cubes" in placements_df.columns else [()] * n

    pod_ids = list(states)
    pindex = {pid: i for i, pid in enumerate(pod_ids)}
    dims3 = np.array([tuple(s.dims) + (1,) * (3 - len(s.dims)) for s in states.values()], dtype=np.int64).reshape(-1, 3)
    sizes = dims3.prod(axis=1)
    base = np.concatenate([[0], np.cumsum(sizes)])
    failed = np.zeros(int(base[-1]), dtype=bool)
    for i, s in enumerate(states.values()):
        if s.failed:
            f = np.array([tuple(c) + (0,) * (3 - len(c)) for c in s.failed], dtype=np.int64)
            failed[base[i] + np.ravel_multi_index(f.T, tuple(dims3[i]))] = True

    early: dict[int, list[str]] = {}  # rows refused before the geometry (no chip arrays)
    got: dict[tuple[int, str, str], int] = {}
    rows: list[int] = []  # rows whose geometry is checked with arrays
    info: list[tuple] = []
    for i in range(n):
        where = f"placements[{i}] (epoch {epochs[i]}, pod {pod_col[i]})"
        st = states.get(str(pod_col[i]))
        if st is None:
            early[i] = [f"{where}: unknown pod"]
            continue
        if str(chip_col[i]) != st.chip:
            early[i] = [f"{where}: chip {chip_col[i]} on a {st.chip} pod"]
            continue
        si = _shape_info(st.chip, str(shape_col[i]), len(st.dims))
        if si is None:
            early[i] = [f"{where}: shape {shape_col[i]} is not allowed on {st.chip}"]
            continue
        k = (int(epochs[i]), st.chip, si[1])
        got[k] = got.get(k, 0) + 1
        rows.append(i)
        info.append((pindex[str(pod_col[i])], si, st))

    bad = np.zeros(n, dtype=bool)
    clash_msg: dict[int, str] = {}
    if rows:
        try:
            bad, clash_msg = _array_check(rows, info, chips_col, origin_col, cubes_col, epochs, dims3, base, failed, n)
        except _Malformed:  # coordinates of the wrong length or type: the per-vPod rules say which
            return check_placements_graph(placements_df, states, allocation_counts)

    probs: list[str] = []
    by_row = {i: j for j, i in enumerate(rows)}
    for i in range(n):
        if i in early:
            probs.extend(early[i])
            continue
        where = f"placements[{i}] (epoch {epochs[i]}, pod {pod_col[i]})"
        if bad[i]:
            _, si, st = info[by_row[i]]
            chips = tuple(sorted(tuple(int(x) for x in c) for c in chips_col[i]))
            msgs = check_placement(st, _placement(st, si[0], origin_col[i], chips, _row_cubes(cubes_col[i])))
            probs.extend(f"{where}: {m}" for m in msgs or ["chips are not the slice of its shape at its origin"])
        if i in clash_msg:
            probs.append(f"{where}: {clash_msg[i]}")
    return probs + _count_problems(got, allocation_counts, placeable)


def _array_check(rows, info, chips_col, origin_col, cubes_col, epochs, dims3, base, failed, n):
    """(rows with a geometric problem, overlap message per row) for the pre-checked ``rows``."""
    m = len(rows)
    rows_a = np.array(rows, dtype=np.int64)
    pod = np.array([t[0] for t in info], dtype=np.int64)
    nd = np.array([len(t[2].dims) for t in info], dtype=np.int64)
    shape = np.array([t[1][0] + (1,) * (3 - len(t[1][0])) for t in info], dtype=np.int64)
    cube = np.array([t[1][2] for t in info], dtype=bool)
    bad = ~np.array([t[1][3] for t in info], dtype=bool)  # orientation not made of whole hosts
    # ---- chips as one array: (chip, 3) coordinates, the row of every chip
    lists = [chips_col[i] for i in rows]
    count = np.fromiter((len(c) for c in lists), dtype=np.int64, count=m)
    total = int(count.sum())
    try:
        flat_chips = list(itertools.chain.from_iterable(lists))
        clen = np.fromiter((len(c) for c in flat_chips), dtype=np.int64, count=total)
        owner_row = np.repeat(np.arange(m), count)
        if not np.array_equal(clen, nd[owner_row]):
            raise ValueError
        vals = np.fromiter(itertools.chain.from_iterable(flat_chips), dtype=np.int64, count=int(clen.sum()))
        origins = [origin_col[i] for i in rows]
        olen = np.fromiter((len(o) for o in origins), dtype=np.int64, count=m)
        if not np.array_equal(olen, nd):
            raise ValueError
        ovals = np.fromiter(itertools.chain.from_iterable(origins), dtype=np.int64, count=int(olen.sum()))
    except (TypeError, ValueError, OverflowError):
        raise _Malformed from None
    coords = np.zeros((total, 3), dtype=np.int64)
    origin = np.zeros((m, 3), dtype=np.int64)
    for d in (2, 3):
        sel = nd[owner_row] == d
        coords[sel, :d] = vals[np.repeat(nd[owner_row] == d, nd[owner_row])].reshape(-1, d)
        origin[nd == d, :d] = ovals[np.repeat(nd == d, nd)].reshape(-1, d)
    dims = dims3[pod]
    cdims = dims[owner_row]
    inside = np.all((coords >= 0) & (coords < cdims), axis=1)
    bad |= np.bincount(owner_row, weights=~inside, minlength=m) > 0
    size = shape.prod(axis=1)
    bad |= count != size
    # ---- local index of every chip in its slice, each at most once per row
    local = np.full(total, -1, dtype=np.int64)
    box = ~cube[owner_row]
    off = np.mod(coords - origin[owner_row], cdims)  # offsets modulo the torus
    cshape = shape[owner_row]
    in_box = box & np.all(off < cshape, axis=1)
    local[in_box] = ((off[in_box, 0] * cshape[in_box, 1]) + off[in_box, 1]) * cshape[in_box, 2] + off[in_box, 2]
    bad |= np.bincount(owner_row, weights=box & ~in_box, minlength=m) > 0
    # alignment of the box rows: 2-D multi-host on the host grid, sub-host at multiples of the own
    # extent, inside the pod without crossing the edge; 3-D sub-cube inside one cube on the host grid
    step = np.ones((m, 3), dtype=np.int64)
    for j, (_, si, st) in enumerate(info):
        if si[2]:
            continue
        spec = st.spec
        h = tuple(spec.host_shape) + (1,) * (3 - len(spec.host_shape))
        if st.topology == "torus2d":
            step[j] = si[0] + (1,) if is_fine(spec, si[0]) else h
        else:
            step[j] = h
    flat2d = np.array([t[2].topology == "torus2d" for t in info], dtype=bool)
    ok2 = np.all((origin >= 0) & (origin % step == 0) & (origin + shape <= dims), axis=1)
    oc = origin % CUBE
    ok3 = np.all((origin >= 0) & (origin < dims) & (oc % step == 0) & (oc + shape <= CUBE), axis=1)
    bad |= ~cube & np.where(flat2d, ~ok2, ~ok3)
    # cube ids only on cube-built rows; those: distinct listed cubes of the pod, every chip in one of them
    listed = np.fromiter((len(_row_cubes(cubes_col[i])) for i in rows), dtype=np.int64, count=m)
    bad |= ~cube & (listed > 0)
    if cube.any():
        for j in np.flatnonzero(cube):
            cl = _row_cubes(cubes_col[rows[j]])
            st = info[j][2]
            k = cubes_of(info[j][1][0])
            if len(cl) != k or len(set(cl)) != k or any(not 0 <= c < st.n_cubes for c in cl):
                bad[j] = True
        sel = cube[owner_row] & inside & ~bad[owner_row]
        if sel.any():
            cgrid = cdims[sel] // CUBE
            cc = coords[sel] // CUBE
            cid = (cc[:, 0] * cgrid[:, 1] + cc[:, 1]) * cgrid[:, 2] + cc[:, 2]
            r = owner_row[sel]
            pos = np.full(len(cid), -1, dtype=np.int64)
            for j in np.unique(r):
                cl = np.array(_row_cubes(cubes_col[rows[j]]), dtype=np.int64)
                mine = r == j
                order = np.argsort(cl)
                at = np.searchsorted(cl[order], cid[mine])
                at = np.minimum(at, len(cl) - 1)
                hit = cl[order][at] == cid[mine]
                pos[mine] = np.where(hit, order[at], -1)
            within = coords[sel] % CUBE
            lin = (within[:, 0] * CUBE + within[:, 1]) * CUBE + within[:, 2]
            loc = np.where(pos >= 0, pos * CUBE**3 + lin, -1)
            local[np.flatnonzero(sel)] = loc
            bad |= np.bincount(r, weights=pos < 0, minlength=m) > 0
    # every local index at most once per row (with the count, the chips are exactly the slice)
    have = local >= 0
    row_base = np.concatenate([[0], np.cumsum(size)])
    slot = row_base[owner_row[have]] + local[have]
    dup = np.bincount(slot, minlength=int(row_base[-1])) > 1
    bad |= np.bincount(owner_row[have], weights=dup[slot], minlength=m) > 0
    # failed chips
    gid = np.full(total, -1, dtype=np.int64)
    lin_in = (coords[inside, 0] * cdims[inside, 1] + coords[inside, 1]) * cdims[inside, 2] + coords[inside, 2]
    gid[inside] = base[pod[owner_row[inside]]] + lin_in
    bad |= np.bincount(owner_row[inside], weights=failed[gid[inside]], minlength=m) > 0
    out = np.zeros(n, dtype=bool)
    out[rows_a[bad]] = True
    return out, _clashes(rows, epochs, pod, nd, owner_row, coords)


def _clashes(rows, epochs, pod, nd, owner_row, coords) -> dict[int, str]:
    """Row -> "chip [..] also used by placements[j]": the row's first chip (in sorted order) that an
    earlier row of the same epoch and pod holds, with the earliest such row."""
    ep = np.array([int(epochs[i]) for i in rows], dtype=np.int64)
    keys = np.column_stack([ep[owner_row], pod[owner_row], coords, owner_row])
    order = np.lexsort(keys.T[::-1])
    k = keys[order]
    start = np.concatenate([[True], np.any(k[1:, :5] != k[:-1, :5], axis=1)])
    first = np.maximum.accumulate(np.where(start, np.arange(len(k)), 0))
    later = np.flatnonzero(~start & (k[:, 5] != k[first, 5]))
    found: dict[int, tuple[tuple[int, ...], int]] = {}
    for t in later:  # sorted by chip within a pod: the first hit of a row is its smallest chip
        r = int(k[t, 5])
        chip = tuple(int(x) for x in k[t, 2 : 2 + nd[r]])
        if r not in found or chip < found[r][0]:
            found[r] = (chip, int(k[first[t], 5]))
    return {rows[r]: f"chip {list(c)} also used by placements[{rows[o]}]" for r, (c, o) in found.items()}
