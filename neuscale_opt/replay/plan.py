"""Read a plan (the allocation planner's JSON contract) and check it against an instance.

A plan is ``{"status", "method", "objective", ..., "allocations": [row, ...]}`` with one row per
(epoch, class, phase, vPod type) (see ``neuscale_opt/alloc/solution.py``). Each row names the vPod
type (``chip``, ``shape``, ``chips_per_vpod``, ``tp``, ``pp``, ``ep``, ``batch``, ``phase``), the
class it serves (``bucket``), the vPods its **group** holds in that epoch (``n_vpods``) and
optionally ``vpod_type``, ``config_id``, ``vpod_group`` and ``rate_rps``. In the pooled variant
several rows share one ``vpod_group`` and repeat its ``n_vpods``; the group's vPods serve every
class listed for it. Without ``vpod_group`` a row is its own (dedicated) group, keyed by its
``config_id`` (``vpod_type|bucket``).

Checks (all problems collected, then one :class:`~neuscale_opt.errors.InputError`, exit code 2,
one line naming the file and the field):

* malformed JSON, a top level that is not an object, no ``allocations`` list;
* a row without a required field, a count that is not an integer, a negative count, a zero
  ``chips_per_vpod``/``tp``/``pp``/``ep``/``batch``;
* an unknown chip (not in the instance's fleet), an unknown class, an unknown phase;
* a shape that is not ``AxB[xC]``, not allowed on the chip, or whose chips differ from
  ``chips_per_vpod`` or ``tp x pp``; ``ep`` not 1 or ``tp``;
* rows of one (epoch, group) that disagree on ``n_vpods`` or on the vPod type;
* more chips of a generation in an epoch than the fleet's healthy chips (each group counted once);
* an epoch that holds arrivals of the trace but has no allocation row (missing epochs), unless
  the plan's ``unserved`` rows name that epoch (it plans to serve nothing there);
* phases mixed wrongly for a class in an epoch: prefill rows without decode rows (or decode without
  prefill), or colocated rows beside prefill/decode rows (disaggregated serving needs both halves,
  and a class is served one way per epoch); rows that plan a rate of 0 for the class (vPods held
  by the scaling rules, serving nothing of it) are not counted;
* ``unserved`` (optional list of ``{epoch, bucket, unserved_rps}``, the evaluator's reader
  ``alloc.solution.unserved_from_dict``): a row missing a field, an epoch that is not a count, a
  rate that is not a finite number >= 0, an unknown class.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from neuscale_opt.alloc.solution import PLAN_ROW_FIELDS, empty_unserved, plan_row_numbers, unserved_from_dict
from neuscale_opt.catalog import get_chip
from neuscale_opt.errors import InputError
from neuscale_opt.instance import Instance
from neuscale_opt.readers import read_json

REQUIRED_FIELDS: tuple[str, ...] = tuple(f for f in PLAN_ROW_FIELDS if f != "rate_rps")
TYPE_FIELDS: tuple[str, ...] = ("chip", "shape", "tp", "pp", "ep", "batch", "phase")
PHASES: tuple[str, ...] = ("colocated", "prefill", "decode")
MAX_LISTED = 5  # problems spelled out in the one-line message; the rest are counted


@dataclass(frozen=True)
class VpodType:
    """The structure of a vPod: chip, slice shape, parallelism, batch and phase."""

    chip: str
    shape: tuple[int, ...]
    tp: int
    pp: int
    ep: int
    batch: int
    phase: str
    attn_dp: bool = False  # MLA data-parallel attention (roofline R5b; ``:dpa`` in the type key)

    @property
    def chips(self) -> int:
        return self.tp * self.pp

    @property
    def slots(self) -> int:
        """Sequences a vPod holds: ``batch`` per micro-batch, ``pp`` micro-batches in flight."""
        return self.batch * self.pp

    @property
    def key(self) -> str:
        """Same key format as ``candidates.evaluate_grid`` (``vpod_type`` column)."""
        shape = "x".join(str(s) for s in self.shape)
        dpa = ":dpa" if self.attn_dp else ""
        return f"{self.chip}:{shape}:tp{self.tp}pp{self.pp}ep{self.ep}{dpa}:b{self.batch}:{self.phase}"


@dataclass(frozen=True)
class Plan:
    """A validated plan: allocation rows plus the group table the replay runs.

    ``groups``: one row per (epoch, vpod_group) with ``type_index`` (into ``types``), ``n_vpods``
    and ``buckets`` (tuple of the classes it serves, sorted). ``n_epochs``: epochs the replay
    covers (the plan's last epoch or the trace's, whichever is later, plus one). ``unserved``: the
    plan's ``unserved`` rows (``epoch, bucket, unserved_rps``; empty when it lists none), which the
    replay reads only with ``ReplayOptions.admission = "plan"``.
    """

    rows: pd.DataFrame
    groups: pd.DataFrame
    types: tuple[VpodType, ...]
    n_epochs: int
    source: str
    meta: dict[str, Any] = field(default_factory=dict)
    unserved: pd.DataFrame = field(default_factory=empty_unserved)


def _fail(problems: list[str], where: str) -> None:
    if not problems:
        return
    shown = problems[:MAX_LISTED]
    more = len(problems) - len(shown)
    msg = "; ".join(shown) + (f"; and {more} more" if more else "")
    raise InputError(msg, where=where)


def _read(src: str | Path | dict) -> tuple[dict, str]:
    if isinstance(src, dict):
        return src, "<plan>"
    where = str(src)
    data = read_json(src, where)  # regular file, size cap, strict UTF-8, bounded nesting
    if not isinstance(data, dict):
        raise InputError("the plan must be a JSON object with an 'allocations' list", where=where)
    return data, where


def _parse_shape(s: Any) -> tuple[int, ...] | None:
    if isinstance(s, int) and not isinstance(s, bool):
        s = str(s)
    if not isinstance(s, str) or not s:
        return None
    try:
        dims = tuple(int(x) for x in s.lower().split("x"))
    except ValueError:
        return None
    return dims if all(d > 0 for d in dims) else None


def _shape_allowed(chip_name: str, shape: tuple[int, ...]) -> bool:
    chip = get_chip(chip_name)
    dims = tuple(sorted(shape))
    for s in chip.slice_shapes:
        if s == "cubes":
            pod = sorted(chip.pod_dims)
            if len(dims) == 3 and all(d % 4 == 0 for d in dims) and all(a <= b for a, b in zip(dims, pod, strict=True)):
                return True
        elif tuple(sorted(int(x) for x in s.split("x"))) == dims:
            return True
    return False


def instance_bucket_names(inst: Instance) -> list[str]:
    """Class names of the instance: explicit classes, or the buckets of its bucket spec."""
    if inst.workload.classes:
        return [c.name for c in inst.workload.classes]
    from neuscale_opt.traces.buckets import DEFAULT_BUCKETS, bucket_names

    return list(bucket_names(inst.workload.buckets or DEFAULT_BUCKETS))


def _check_row(i: int, r: Any, inst: Instance, buckets: set[str], mla: bool) -> tuple[list[str], dict | None]:
    at = f"allocations[{i}]"
    if not isinstance(r, dict):
        return [f"{at}: not an object"], None
    missing = [f for f in REQUIRED_FIELDS if f not in r]
    if missing:
        return [f"{at}: missing {', '.join(missing)}"], None
    probs, row = plan_row_numbers(at, r)
    if r["phase"] not in PHASES:
        probs.append(f"{at}.phase: unknown phase {r['phase']!r} (colocated, prefill or decode)")
    if r["chip"] not in inst.chip_names:
        probs.append(f"{at}.chip: unknown chip {r['chip']!r} (fleet: {', '.join(inst.chip_names)})")
    if str(r["bucket"]) not in buckets:
        probs.append(f"{at}.bucket: unknown class {r['bucket']!r} (instance: {', '.join(sorted(buckets))})")
    shape = _parse_shape(r["shape"])
    if shape is None:
        probs.append(f"{at}.shape: {r['shape']!r} is not AxB or AxBxC")
    if probs:
        return probs, None
    chips = math.prod(shape)
    if chips != row["chips_per_vpod"] or row["tp"] * row["pp"] != chips:
        probs.append(
            f"{at}.shape: {r['shape']} has {chips} chips but chips_per_vpod = {row['chips_per_vpod']}, "
            f"tp x pp = {row['tp'] * row['pp']}"
        )
    elif not _shape_allowed(r["chip"], shape):
        probs.append(f"{at}.shape: {r['shape']} is not a slice shape of {r['chip']}")
    if row["ep"] not in (1, row["tp"]):
        probs.append(f"{at}.ep: {row['ep']} must be 1 or tp ({row['tp']})")
    # the planner names the MLA data-parallel attention layout in the type key (candidates.Kind.key)
    row["attn_dp"] = ":dpa:" in str(r.get("vpod_type") or "")
    if row["attn_dp"] and not (mla and row["ep"] == row["tp"] > 1):
        probs.append(f"{at}.vpod_type: the :dpa layout needs an MLA model and ep = tp > 1, got {r['vpod_type']!r}")
    row["shape_t"] = shape
    row["bucket"] = str(r["bucket"])
    return probs, row


def arrival_epochs(arrival: np.ndarray, epoch_s: float) -> np.ndarray:
    """The epoch of each arrival time, ``floor(arrival / epoch_s)``: how the replay assigns requests
    to epochs everywhere (the epochs a plan must cover, admission, the per-epoch tables, the offered
    counts)."""
    return np.floor(np.asarray(arrival, dtype=np.float64) / float(epoch_s)).astype(np.int64)


def _phase_mix(rows: list[dict]) -> list[str]:
    """Problems of (epoch, class) pairs whose phases do not form one serving mode. A row that gives
    the class a planned rate of 0 (a held vPod the class may use but is not planned onto: the
    scaling rules keep a group of a class without demand) serves nothing, so it needs no other half."""
    phases: dict[tuple[int, str], set[str]] = {}
    for row in rows:
        rate = row.get("rate_rps")
        if rate is not None and float(rate) == 0.0:
            continue
        phases.setdefault((row["epoch"], row["bucket"]), set()).add(row["phase"])
    out: list[str] = []
    for (e, b), ph in sorted(phases.items()):
        if "colocated" in ph and len(ph) > 1:
            out.append(f"epoch {e}, class {b!r}: colocated and disaggregated (prefill/decode) rows for the same class")
        elif ph == {"prefill"}:
            out.append(f"epoch {e}, class {b!r}: prefill rows but no decode rows (disaggregated serving needs both)")
        elif ph == {"decode"}:
            out.append(f"epoch {e}, class {b!r}: decode rows but no prefill rows (disaggregated serving needs both)")
    return out


def load_plan(
    src: str | Path | dict,
    instance: Instance,
    trace: pd.DataFrame | None = None,
) -> Plan:
    """Read and validate a plan against ``instance`` (and the arrivals of ``trace``, if given).

    ``trace`` (canonical per-request table) sets which epochs must be present: every epoch
    ``floor(arrival_s / epochs.length_s)`` that holds an arrival. Without it no epoch is required.
    """
    data, where = _read(src)
    allocs = data.get("allocations")
    if not isinstance(allocs, list):
        raise InputError("'allocations' is missing or not a list", where=where)
    buckets = set(instance_bucket_names(instance))
    problems: list[str] = []
    rows: list[dict] = []
    from neuscale_opt.candidates import effective_model

    mla = bool(effective_model(instance).is_mla)  # the :dpa layout is MLA's (roofline R5b)
    for i, r in enumerate(allocs):
        p, row = _check_row(i, r, instance, buckets, mla)
        problems.extend(p)
        if row is not None and not p:
            row["_row"] = i
            rows.append(row)
    _fail(problems, where)
    _fail(_phase_mix(rows), where)
    unserved = unserved_from_dict(data, where)
    known = ", ".join(sorted(buckets))
    for i, u in enumerate(data.get("unserved") or []):
        if str(u["bucket"]) not in buckets:
            problems.append(f"unserved[{i}].bucket: unknown class {u['bucket']!r} (instance: {known})")
    _fail(problems, where)

    types: list[VpodType] = []
    type_index: dict[VpodType, int] = {}
    # (epoch, group) -> (type, n, first row, buckets)
    groups: dict[tuple[int, str], dict] = {}
    for row in rows:
        vt = VpodType(
            row["chip"], row["shape_t"], row["tp"], row["pp"], row["ep"], row["batch"], row["phase"], row["attn_dp"]
        )
        if vt not in type_index:
            type_index[vt] = len(types)
            types.append(vt)
        gid = row.get("vpod_group") or row.get("config_id") or f"{vt.key}|{row['bucket']}"
        gid = str(gid)
        row["group"] = gid
        key = (row["epoch"], gid)
        g = groups.get(key)
        at = f"allocations[{row['_row']}]"
        if g is None:
            groups[key] = {"type": vt, "n": row["n_vpods"], "row": row["_row"], "buckets": {row["bucket"]}, "rates": {}}
            _add_rate(groups[key], row)
            continue
        if g["type"] != vt:
            problems.append(f"{at}: group {gid!r} of epoch {row['epoch']} mixes vPod types ({g['type'].key}, {vt.key})")
        if g["n"] != row["n_vpods"]:
            problems.append(
                f"{at}.n_vpods: {row['n_vpods']} but allocations[{g['row']}] gives group {gid!r} "
                f"{g['n']} vPods in epoch {row['epoch']}"
            )
        g["buckets"].add(row["bucket"])
        _add_rate(g, row)
    _fail(problems, where)

    # Inventory: chips held per (epoch, generation), each group once.
    healthy = instance.healthy_chips()
    held: dict[tuple[int, str], int] = {}
    for (e, _gid), g in groups.items():
        k = (e, g["type"].chip)
        held[k] = held.get(k, 0) + g["n"] * g["type"].chips
    over: dict[str, list[tuple[int, int]]] = {}
    for (e, chip), n in sorted(held.items()):
        if n > healthy[chip]:
            over.setdefault(chip, []).append((e, n))
    for chip in sorted(over):
        (e, n), rest = over[chip][0], len(over[chip]) - 1
        also = f" (and in {rest} more epoch{'s' if rest > 1 else ''})" if rest else ""
        problems.append(f"epoch {e}: {n} {chip} chips planned, the fleet has {healthy[chip]} healthy{also}")
    _fail(problems, where)

    length = instance.epochs.length_s
    plan_epochs = {e for e, _ in groups}
    last = max(plan_epochs) if plan_epochs else -1
    if trace is not None and len(trace):
        need = np.unique(arrival_epochs(trace["arrival_s"].to_numpy(np.float64), length))
        # an epoch the plan leaves unserved (its ``unserved`` rows name it) may hold no vPods at all:
        # a fleet, or one generation of it, that can serve nothing of that epoch's demand
        declared = {int(e) for e in unserved["epoch"]}
        missing = [int(e) for e in need if int(e) not in plan_epochs and int(e) not in declared]
        if missing:
            shown = ", ".join(str(e) for e in missing[:8]) + (" ..." if len(missing) > 8 else "")
            raise InputError(
                f"missing epochs: the trace has arrivals in epoch(s) {shown} but the plan has no allocation "
                f"for them ({len(missing)} of {len(need)} epochs of {length:g} s)",
                where=where,
            )
        last = max(last, int(need[-1]))
    n_epochs = last + 1

    group_rows = [
        {
            "epoch": e,
            "vpod_group": gid,
            "type_index": type_index[g["type"]],
            "vpod_type": g["type"].key,
            "chip": g["type"].chip,
            "chips_per_vpod": g["type"].chips,
            "n_vpods": g["n"],
            "buckets": tuple(sorted(g["buckets"])),
            "rates": tuple(g["rates"].get(b, math.nan) for b in sorted(g["buckets"])),
        }
        for (e, gid), g in sorted(groups.items())
    ]
    gdf = pd.DataFrame(
        group_rows,
        columns=[
            "epoch",
            "vpod_group",
            "type_index",
            "vpod_type",
            "chip",
            "chips_per_vpod",
            "n_vpods",
            "buckets",
            "rates",
        ],
    )
    rdf = pd.DataFrame([{k: v for k, v in r.items() if k not in ("shape_t", "_row", "attn_dp")} for r in rows])
    meta = {k: data[k] for k in ("status", "method", "objective", "variant", "serving") if k in data}
    return Plan(rows=rdf, groups=gdf, types=tuple(types), n_epochs=n_epochs, source=where, meta=meta, unserved=unserved)


def _add_rate(group: dict, row: dict) -> None:
    """Add the row's planned ``rate_rps`` to its class's rate on the group (NaN when rows give none)."""
    r = row.get("rate_rps")
    r = math.nan if r is None else float(r)
    b = row["bucket"]
    group["rates"][b] = group["rates"].get(b, 0.0) + r
