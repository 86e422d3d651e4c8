"""The plan every method returns: a frozen :class:`Solution` with tidy tables and totals.

The MILP, its ``unlimited`` reference, the greedy heuristic and the homogeneous baseline all
return this type, so :func:`neuscale_opt.alloc.evaluate.evaluate`, the CLI and the benchmarks never
care who produced a plan.

Allocation rows
---------------
One row per (epoch, configuration) that carries traffic, i.e. per (epoch, class, phase, vPod type):

==============  =====  ==========================================================================
column          unit   meaning
==============  =====  ==========================================================================
epoch           -      epoch index
bucket          -      request class
phase           -      ``colocated``, ``prefill`` or ``decode``
chip, shape     -      chip generation and slice shape of the vPod type
chips_per_vpod  chips  chips of one vPod
tp, pp, ep      -      parallelism of the vPod type
batch           -      batch of the vPod type
vpod_type       -      vPod type key
config_id       -      ``vpod_type|bucket`` row of ``Coefficients.configs``
vpod_group      -      the group whose vPods serve the row (= config_id when dedicated, = vpod_type
                       when pooled)
n_vpods         vPods  vPods held by the row's **group** in that epoch
rate_rps        req/s  rate of the class served by the group
==============  =====  ==========================================================================

In the pooled variant several rows (one per class) share one group, and ``n_vpods`` repeats the
group's count on each of them: chips are counted once per (epoch, ``vpod_group``), never per row
(that is what :func:`~neuscale_opt.alloc.evaluate.evaluate` does). In the dedicated variant each
group has exactly one row. A group holding vPods but carrying no rate gets one row with rate 0.

Placement rows
--------------
One row per placed vPod of a generation given as pods (empty when nothing is placed: placement
``none``, no pods, unlimited inventory):

==============  ======  =========================================================================
column          unit    meaning
==============  ======  =========================================================================
epoch           -       epoch index
pod             -       pod id ``chip/i`` (i = position in the instance's fleet entry)
chip            -       chip generation
shape           -       slice shape **as placed** (orientation, e.g. ``8x4``; cube-built A<=B<=C)
origin          coords  lowest chip coordinate of the slice (first cube's corner when cube-built)
chips           coords  list of the slice's chip coordinates, sorted
cubes           -       cube ids of a cube-built slice (row-major over the pod's cube grid), else []
vpod_group      -       the allocation group the vPod belongs to (= config_id when dedicated)
vpod_type       -       its vPod type
bucket          -       classes the group carries in the epoch, ``+``-joined
vpod            -       index of the vPod within its group in the epoch (0-based)
==============  ======  =========================================================================

Per (epoch, ``vpod_group``) there are exactly ``n_vpods`` rows. Sorted by (epoch, vpod_group, vpod).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.io import to_json

ALLOC_COLUMNS: tuple[str, ...] = (
    "epoch",
    "bucket",
    "phase",
    "chip",
    "shape",
    "chips_per_vpod",
    "tp",
    "pp",
    "ep",
    "batch",
    "vpod_type",
    "config_id",
    "vpod_group",
    "n_vpods",
    "rate_rps",
)
#: Allocation columns a plan file must give; ``vpod_type``, ``config_id`` and ``vpod_group`` can be
#: derived from them (:func:`solution_from_dict`).
PLAN_ROW_FIELDS: tuple[str, ...] = tuple(c for c in ALLOC_COLUMNS if c not in ("vpod_type", "config_id", "vpod_group"))
UNSERVED_COLUMNS: tuple[str, ...] = ("epoch", "bucket", "unserved_rps")
ALLOC_SORT: list[str] = ["epoch", "vpod_group", "bucket", "phase", "config_id"]
PLACEMENT_COLUMNS: tuple[str, ...] = (
    "epoch",
    "pod",
    "chip",
    "shape",
    "origin",
    "chips",
    "cubes",
    "vpod_group",
    "vpod_type",
    "bucket",
    "vpod",
)
PLACEMENT_SORT: list[str] = ["epoch", "vpod_group", "vpod"]
#: Statuses of a plan, best first (the worst of several solves is the plan's, :func:`worst_status`):
#: ``work_limit`` - a MILP stopped by the work limit (node count) with its incumbent, the same on any
#: machine; ``time_limit`` - stopped by the wall-clock limit, which may differ between machines.
JSON_STATUSES: tuple[str, ...] = ("optimal", "feasible", "work_limit", "time_limit", "infeasible")
_STATUS_RANK = {s: i for i, s in enumerate(JSON_STATUSES)}

#: What a limit status means, in the words plan.json (``status_note``), the terminal summary and
#: the report use.
STOPPED_BY: dict[str, str] = {
    "work_limit": "stopped by the work limit (deterministic)",
    "time_limit": "stopped by the wall-clock limit (may differ between machines)",
}


def status_note(status: str) -> str | None:
    """:data:`STOPPED_BY` of a limit status, None for any other."""
    return STOPPED_BY.get(status)


def worst_status(statuses) -> str:
    """The status of a plan made of several solves: the worst of theirs (``optimal`` when none)."""
    return max(statuses, key=_STATUS_RANK.__getitem__, default="optimal")


#: Integer fields of a plan row, and those of them that must be at least 1.
PLAN_INT_FIELDS: tuple[str, ...] = ("epoch", "chips_per_vpod", "tp", "pp", "ep", "batch", "n_vpods")
PLAN_POSITIVE_FIELDS: tuple[str, ...] = ("chips_per_vpod", "tp", "pp", "ep", "batch")


def as_count(v: Any) -> int | None:
    """``v`` as an int when it is an integer (``3`` or ``3.0``), else None (``1.5``, ``inf``,
    strings and booleans are not counts)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return int(v)
    return None


def plan_row_numbers(at: str, r: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The number rules of one plan row (``at`` names it, e.g. ``allocations[3]``): counts are
    integers (no fractions, no booleans), non-negative, the structural ones at least 1, the epoch
    below :data:`~neuscale_opt.schema.MAX_EPOCHS`; ``rate_rps`` a finite number >= 0. Returns the
    problems (one per field) and the row with counts as ``int`` and the rate as ``float``."""
    from neuscale_opt.schema import MAX_EPOCHS

    probs: list[str] = []
    row = dict(r)
    for f in PLAN_INT_FIELDS:
        if f not in r:
            continue
        v = as_count(r[f])
        if v is None:
            probs.append(f"{at}.{f}: {r[f]!r} is not an integer")
        elif v < 0:
            probs.append(f"{at}.{f}: negative ({v})")
        elif f in PLAN_POSITIVE_FIELDS and v == 0:
            probs.append(f"{at}.{f}: must be >= 1")
        elif f == "epoch" and v >= MAX_EPOCHS:
            probs.append(f"{at}.epoch: {v} is beyond the {MAX_EPOCHS} epochs a plan may have")
        else:
            row[f] = v
    if "rate_rps" in r:
        rate = r["rate_rps"]
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate):
            probs.append(f"{at}.rate_rps: {rate!r} is not a finite number")
        elif rate < 0:
            probs.append(f"{at}.rate_rps: negative ({rate})")
        else:
            row["rate_rps"] = float(rate)
    return probs, row


def _unknown_names(at: str, r: dict[str, Any], coeffs: Any) -> list[str]:
    """Problems of a plan row naming a chip, class or phase ``coeffs`` do not have."""
    out = []
    chips = [str(c) for c in coeffs.chips["chip"]]
    if str(r["chip"]) not in chips:
        out.append(f"{at}.chip: unknown chip {r['chip']!r} (fleet: {', '.join(chips)})")
    if str(r["bucket"]) not in coeffs.bucket_names:
        out.append(f"{at}.bucket: unknown class {r['bucket']!r} ({', '.join(coeffs.bucket_names)})")
    if r["phase"] not in ("colocated", "prefill", "decode"):
        out.append(f"{at}.phase: unknown phase {r['phase']!r} (colocated, prefill or decode)")
    return out


def verdict_status(solution: Any, violations: Any) -> dict[str, Any]:
    """Status and diagnosis of a plan once the independent evaluator has checked it: the worst of
    the solver's status and the evaluator's verdict (``infeasible`` when it found violations),
    the violations as the one-line diagnosis when the plan had none."""
    found = [str(v) for v in violations]
    if not found:
        return {"status": solution.status, "diagnosis": solution.diagnosis}
    shown = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
    return {
        "status": worst_status((solution.status, "infeasible")),
        "diagnosis": solution.diagnosis or f"the independent evaluation finds the plan infeasible: {shown}",
    }


def stable_float(x: float, digits: int = 10) -> float:
    """``x`` rounded to ``digits`` significant digits (solver noise below that is dropped), and
    ``-0.0`` folded to ``0.0``, so that the same plan prints the same bytes."""
    if x is None or not math.isfinite(x):
        return x
    y = float(f"{x:.{digits}g}")
    return 0.0 if y == 0 else y


_EMPTY: dict[tuple[str, ...], pd.DataFrame] = {}


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    """An empty table of object columns (a fresh copy of one built once per column set)."""
    if columns not in _EMPTY:
        _EMPTY[columns] = pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    return _EMPTY[columns].copy()


def empty_allocations() -> pd.DataFrame:
    return _empty(ALLOC_COLUMNS)


def empty_unserved() -> pd.DataFrame:
    return _empty(UNSERVED_COLUMNS)


def tidy_allocations(df: pd.DataFrame) -> pd.DataFrame:
    """Columns in contract order, integer counts, stable floats, rows sorted (:func:`allocations_table`
    on the frame's rows)."""
    if df.empty:
        return empty_allocations()
    cols = [df[c].tolist() for c in ALLOC_COLUMNS]
    return allocations_table([dict(zip(ALLOC_COLUMNS, r, strict=True)) for r in zip(*cols, strict=True)])


_INT_COLUMNS = ("epoch", "chips_per_vpod", "tp", "pp", "ep", "batch", "n_vpods")


def allocations_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The allocations table of plan rows (dicts with the ``ALLOC_COLUMNS``): columns in contract
    order, integer counts, stable floats, rows sorted by ``ALLOC_SORT`` (ties in row order), built
    as one frame."""
    if not rows:
        return empty_allocations()
    cols = {c: [r[c] for r in rows] for c in ALLOC_COLUMNS}
    for c in _INT_COLUMNS:
        v = cols[c]
        if not all(type(x) is int for x in v):
            cols[c] = [int(x) for x in v]
    cols["rate_rps"] = [stable_float(float(x)) for x in cols["rate_rps"]]
    # a stable sort of the key tuples: the order of a stable multi-column sort_values, without
    # factorising every text column
    keys = list(zip(*(cols[c] for c in ALLOC_SORT), strict=True))
    order = sorted(range(len(keys)), key=keys.__getitem__)
    if order != list(range(len(keys))):
        cols = {c: [v[i] for i in order] for c, v in cols.items()}
    out = pd.DataFrame(cols)
    out.attrs["unit"] = {"rate_rps": "req/s", "n_vpods": "vPods", "chips_per_vpod": "chips"}
    return out


def empty_placements() -> pd.DataFrame:
    return _empty(PLACEMENT_COLUMNS)


def tidy_placements(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The placements table: contract columns, sorted by (epoch, vpod_group, vpod)."""
    if not rows:
        return empty_placements()
    df = pd.DataFrame(rows, columns=list(PLACEMENT_COLUMNS))
    df["epoch"] = df["epoch"].astype(int)
    df["vpod"] = df["vpod"].astype(int)
    return df.sort_values(PLACEMENT_SORT, kind="mergesort").reset_index(drop=True)


def tidy_unserved(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return empty_unserved()
    out = df[list(UNSERVED_COLUMNS)].copy()
    out["epoch"] = out["epoch"].astype(int)
    out["unserved_rps"] = [stable_float(float(x)) for x in out["unserved_rps"].tolist()]
    out = out[out["unserved_rps"] > 0]
    return out.sort_values(["epoch", "bucket"], kind="mergesort").reset_index(drop=True)


@dataclass(frozen=True)
class Solution:
    """A plan for every epoch of the horizon, with how it was found and what it costs.

    ``objective_value`` is the objective actually minimised (the chosen total plus the penalty of
    unserved demand), summed over epochs; ``bound`` the proven lower bound (NaN for heuristics);
    ``gap`` = (objective_value - bound)/|objective_value|. ``totals`` is filled by the independent
    accounting of :mod:`neuscale_opt.alloc.evaluate`: ``energy_j``, ``cost_usd``, ``carbon_kg``
    (summed over epochs), ``chips_by_version`` (peak chips held per generation over epochs),
    ``unserved_rps`` (peak over epochs of the total unserved rate) and efficiency ratios.
    ``placements`` holds one row per placed vPod (module docstring; empty when nothing is placed).
    """

    method: str
    status: str
    objective: str
    objective_value: float
    bound: float
    gap: float
    solve_seconds: float
    allocations: pd.DataFrame
    unserved: pd.DataFrame
    totals: dict[str, Any]
    options: PlanOptions
    penalty_per_req: float
    backend: str | None = None
    diagnosis: str | None = None
    epochs: tuple[dict[str, Any], ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    placements: pd.DataFrame = field(default_factory=empty_placements)

    @property
    def has_plan(self) -> bool:
        return self.status in ("optimal", "feasible", *STOPPED_BY)

    @property
    def runnable(self) -> bool:
        """Allocations that can be deployed and replayed: a plan, or one the independent evaluator
        rejects (a reactive auto-scaler lags the demand it planned for, and still runs: its replay
        says what the lag costs)."""
        return self.has_plan or len(self.allocations) > 0

    def to_dict(self, timing: bool = True) -> dict[str, Any]:
        """The JSON contract (see the module docstring and ``formulations/allocation.md``).

        ``solve_seconds`` is the only field that varies between identical runs; ``timing=False``
        leaves it (and the per-epoch times) out, for byte-for-byte comparisons.
        """
        rows = [
            {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
            for r in self.allocations.to_dict(orient="records")
        ]
        unserved = [
            {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
            for r in self.unserved.to_dict(orient="records")
        ]
        placements = [_placement_record(r) for r in self.placements.to_dict(orient="records")]
        epochs = [dict(e) for e in self.epochs]
        if not timing:
            for e in epochs:
                e.pop("solve_seconds", None)
        out: dict[str, Any] = {
            "status": self.status,
            "status_note": status_note(self.status),
            "method": self.method,
            "objective": self.objective,
            "objective_value": stable_float(self.objective_value),
            "bound": stable_float(self.bound),
            "gap": stable_float(self.gap),
            "variant": self.options.variant,
            "serving": self.options.serving,
            "placement": getattr(self.options, "placement", "none"),
            "backend": self.backend,
            "unserved_penalty_per_req": stable_float(self.penalty_per_req),
            "totals": _stable(self.totals),
            "allocations": rows,
            "unserved": unserved,
            "placements": placements,
            "epochs": _stable(epochs),
            "diagnosis": self.diagnosis,
        }
        if timing:
            out["solve_seconds"] = round(self.solve_seconds, 6)
        return out

    def to_json(self, timing: bool = True) -> str:
        return to_json(self.to_dict(timing=timing))


def _plain(v: Any) -> Any:
    """numpy scalars and tuples (also nested) as plain JSON values."""
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v.item() if hasattr(v, "item") else v


def _placement_record(r: dict[str, Any]) -> dict[str, Any]:
    return {k: _plain(v) for k, v in r.items()}


def _stable(obj: Any) -> Any:
    if isinstance(obj, float):
        return stable_float(obj)
    if isinstance(obj, dict):
        return {k: _stable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_stable(v) for v in obj]
    return obj


def unserved_from_dict(d: dict[str, Any], where: str = "plan") -> pd.DataFrame:
    """The ``unserved`` rows of a plan JSON (absent = none) as a tidy table (``epoch, bucket,
    unserved_rps``; rows of rate 0 dropped). A list that is not of ``{epoch, bucket, unserved_rps}``
    rows, a missing field, an epoch that is not a count or a rate that is not a finite number >= 0
    is an :class:`~neuscale_opt.errors.InputError` naming the row and the field. The evaluator's
    reader (:func:`solution_from_dict`) and the replay's (``neuscale_opt.replay.plan``) share it."""
    from neuscale_opt.errors import InputError

    uns = d.get("unserved") or []
    if not isinstance(uns, list) or not all(isinstance(u, dict) for u in uns):
        raise InputError("unserved: must be a list of {epoch, bucket, unserved_rps} rows", where=where)
    for i, u in enumerate(uns):
        probs = [f"unserved[{i}]: missing {k}" for k in UNSERVED_COLUMNS if k not in u]
        if probs:
            raise InputError("; ".join(probs), where=where)
        probs, _ = plan_row_numbers(f"unserved[{i}]", {"epoch": u["epoch"]})
        rate = u["unserved_rps"]
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate < 0:
            probs.append(f"unserved[{i}].unserved_rps: {rate!r} is not a finite number >= 0")
        if probs:
            raise InputError("; ".join(probs), where=where)
    if not uns:
        return empty_unserved()
    df = pd.DataFrame([{k: u[k] for k in UNSERVED_COLUMNS} for u in uns], columns=list(UNSERVED_COLUMNS))
    df["bucket"] = df["bucket"].astype(str)
    return tidy_unserved(df)


def solution_from_dict(d: dict[str, Any], options: PlanOptions, where: str = "plan", coeffs: Any = None) -> Solution:
    """A :class:`Solution` read back from a plan JSON (this package's, or any producer's that
    follows the contract), for the independent evaluator.

    Required per allocation row: ``epoch, bucket, phase, chip, shape, chips_per_vpod, tp, pp, ep,
    batch, n_vpods, rate_rps``; ``vpod_type``, ``config_id`` and ``vpod_group`` are derived when
    absent (``vpod_group`` = ``config_id`` for dedicated plans, ``vpod_type`` for pooled ones). The
    plan's ``objective``, ``variant`` and ``serving`` override ``options``.

    A row that is not well formed is an :class:`~neuscale_opt.errors.InputError` (exit code 2):
    the numbers of :func:`plan_row_numbers`, and with ``coeffs`` given, a chip, class or phase the
    coefficients do not know (the replay's reader refuses the same rows). Well-formed rows that
    break a constraint are for the evaluator (exit code 1).
    """
    from dataclasses import replace

    from neuscale_opt.errors import InputError

    if not isinstance(d, dict) or not isinstance(d.get("allocations"), list):
        raise InputError("not a plan: no 'allocations' list", where=where)
    over = {k: d[k] for k in ("objective", "variant", "serving") if isinstance(d.get(k), str)}
    try:
        opts = replace(options, **over)
    except (TypeError, ValueError) as exc:
        raise InputError(str(exc), where=where) from None
    need = PLAN_ROW_FIELDS
    rows = []
    problems: list[str] = []
    for i, r in enumerate(d["allocations"]):
        miss = [k for k in need if not isinstance(r, dict) or k not in r]
        if miss:
            problems.append(f"allocations[{i}]: missing {', '.join(miss)}")
            continue
        probs, checked = plan_row_numbers(f"allocations[{i}]", {k: r[k] for k in need})
        if coeffs is not None:
            probs.extend(_unknown_names(f"allocations[{i}]", r, coeffs))
        problems.extend(probs)
        if probs:
            continue
        row = checked
        vt = r.get("vpod_type") or (
            f"{row['chip']}:{row['shape']}:tp{row['tp']}pp{row['pp']}ep{row['ep']}:b{row['batch']}:{row['phase']}"
        )
        cid = r.get("config_id") or f"{vt}|{row['bucket']}"
        row.update(
            vpod_type=vt, config_id=cid, vpod_group=r.get("vpod_group") or (vt if opts.variant == "pooled" else cid)
        )
        rows.append(row)
    if problems:
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise InputError("; ".join(problems[:5]) + more, where=where)
    alloc = tidy_allocations(pd.DataFrame(rows, columns=list(ALLOC_COLUMNS))) if rows else empty_allocations()
    unserved = unserved_from_dict(d, where)
    try:
        placements = tidy_placements(list(d.get("placements") or []))
    except (KeyError, TypeError, ValueError):
        raise InputError("placements: rows do not follow the contract", where=where) from None
    status = d.get("status", "feasible")
    if status not in JSON_STATUSES:
        raise InputError(f"status: {status!r} is not one of {', '.join(JSON_STATUSES)}", where=where)

    def number(key: str, default: float) -> float:
        v = d.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise InputError(f"{key}: {v!r} is not a number", where=where)
        return float(v)

    penalty = number("unserved_penalty_per_req", float(opts.unserved_penalty or 0.0))
    return Solution(
        method=str(d.get("method", "external")),
        status=str(status),
        objective=opts.objective,
        objective_value=number("objective_value", math.nan),
        bound=number("bound", math.nan),
        gap=number("gap", math.nan),
        solve_seconds=number("solve_seconds", 0.0),
        allocations=alloc,
        unserved=unserved,
        totals={},
        options=opts,
        penalty_per_req=penalty,
        placements=placements,
    )
