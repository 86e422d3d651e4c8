"""Replay a trace against a plan and account for every request, vPod and joule.

:func:`replay` is the library door: trace + plan + instance -> :class:`ReplayResult`. The event
engine is :mod:`neuscale_opt.replay.engine`; the roofline step tables are
:mod:`neuscale_opt.replay.tables`. The model and its choices are documented in
``neuscale_opt/replay/README.md``.

Per request
-----------
``ttft_s = first token - arrival`` (queueing included), ``tpot_s = (finish - first token) /
output_tokens`` (the roofline's convention, ``e2e = TTFT + S_out TPOT``; NaN for a request with no
output token), ``e2e_s = finish - arrival``. A request meets its SLO when it was served and each of
its class's targets (``ttft_slo_s``, ``tpot_slo_s``, ``e2e_slo_s`` of
``build_coefficients(instance).buckets``; NaN = no target) holds (relative tolerance ``slo_rtol``).
A request never served (its class has no vPod before the horizon ends) misses its SLO.

Totals
------
* ``energy_j = PUE x (dynamic + static)``: dynamic = roofline energy of every prefill and decode
  round executed (R10), plus, for disaggregated plans, the DCN energy of every KV hand-off on
  both sides (``energy_kv_j``, README section 6); static = static power of the vPod's chips x
  time held;
* ``cost_usd = sum chip-hours held x price per chip-hour``;
* ``carbon_kg = energy_j / 3.6e6 x carbon intensity + chip-hours x embodied kg per chip-hour``;
* ``tokens_per_joule`` and ``tokens_per_usd`` count **output** tokens of served requests;
* ``busy_fraction`` of a generation = chip-seconds executing (prefill or decode) / chip-seconds
  held; with continuous batching a vPod decoding one sequence is "busy", so the capacity measure is
  ``utilisation`` = chip-seconds of slot-weighted work / chip-seconds held, where a prefill counts
  in full and a decode round of ``n`` sequences on ``slots`` counts ``n / slots`` of its time (the
  time-averaged share of the vPod's batch in use).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from neuscale_opt.coefficients import J_PER_KWH, Coefficients, serving_rows
from neuscale_opt.energy import static_energy_j
from neuscale_opt.errors import InputError
from neuscale_opt.instance import Horizon, Instance
from neuscale_opt.replay.engine import EngineResult, EpochGroup, run
from neuscale_opt.replay.plan import Plan, VpodType, arrival_epochs, instance_bucket_names, load_plan
from neuscale_opt.replay.surge import StandIns, StandInTypes, SurgeRoom
from neuscale_opt.replay.tables import StepTable
from neuscale_opt.traces.demand import prewarm_lead_s

SECONDS_PER_HOUR = 3600.0
DEFAULT_CREATE_DELAY_S = 30.0
#: ``ReplayOptions.admission``: admit every arrival, or only the share of its class the plan serves
ADMISSIONS: tuple[str, ...] = ("all", "plan")
#: How a class served by several groups is split over them (ReplayOptions.routing).
ROUTINGS: tuple[str, ...] = ("plan", "load")
#: Where the surge guard may take a stand-in vPod (ReplayOptions.standins): the generations the plan
#: deploys, any generation of the fleet, or nowhere (its own type only).
STANDINS: tuple[str, ...] = ("plan", "fleet", "off")
#: slack of the admission counts floor(k s): a share that is a ratio of small integers admits exactly
_ADMIT_EPS = 1e-9


@dataclass(frozen=True)
class ReplayOptions:
    """Knobs of the replay.

    ``create_delay_s`` (default 30 s): time from an epoch boundary at which the plan adds a vPod to
    the moment it admits requests. It is dominated by loading the weights: Llama-3-70B in bf16 is
    141 GB, about 20 s from local NVMe at 7 GB/s, plus runtime start-up and compilation from a
    warm cache; published cold starts of 70B-class servers run 30-60 s and more from object
    storage. The vPod is held (paid, static power) during the delay. ``prewarm`` (default None: the
    instance's ``[horizon] prewarm``, True without the table): the vPods an epoch ``e >= 1`` adds
    are created ``create_delay_s`` before its boundary (held from then) and are ready at it, as a
    plan made that long ahead (``HorizonParams.prewarm``, the same rule:
    ``traces.demand.prewarm_lead_s``; only when ``0 < create_delay_s < T``); False: created at the
    boundary, ready ``create_delay_s`` after it. ``warm_start`` (default True):
    the vPods of epoch 0 exist before the horizon starts (ready and held from t = 0), so the replay
    judges the plan, not the cold start of an empty cluster. ``slo_rtol``: relative tolerance of
    the SLO comparisons (as ``coefficients.meets_slo``). ``idle_fleet_power`` (default False):
    also charge the static power of the fleet's healthy chips that no vPod holds, over the horizon
    (``energy_idle_fleet_j``, always reported, is then part of ``energy_j``); off by default because
    idle chips can be powered down or lent to other work, and the planner does not own them.
    ``admission`` (default ``"all"``): every arrival of a class is queued for its groups, also the
    traffic the plan leaves unserved, which the vPods then serve late (in later epochs, or past the
    horizon while they drain). ``"plan"``: the plan's unserved demand is rejected at arrival, so
    that the replay does the work the plan accounts: of the arrivals of class ``b`` in epoch ``e``
    the share :func:`admission_share` is admitted, evenly spread (README section 3,
    ``formulations/allocation.md``, "Unserved demand"). ``routing`` (default ``"plan"``): a class
    served by several groups has its requests split over them in the proportions of the plan's
    rates (``rate_rps`` of its rows; equal shares where the plan gives none), each then to the best
    vPod of its group (spilling over to another group only when every vPod of the chosen one has a
    prompt waiting), so the replay runs the split the plan accounts; ``"load"``: each request to
    the best vPod of all the class's groups, whatever the plan's split (README section 2).
    ``overflow`` (default True): an arrival whose own groups' vPod would give its first token after
    its TTFT target (a burst, or a class mix that moved from the plan's) goes to the vPod of another
    class's colocated group that gives it soonest, if that vPod has no prompt waiting, meets the
    target and its configuration serves the class within its SLO and memory (a feasible row of the
    candidate table), as a router that coalesces at run time would; False keeps every class on its
    planned groups (README section 2, "Overflow"). ``surge`` (default True): the surge guard, a
    run-time scale-up under the plan (README section 2, "Surge guard"): a request is late when on
    arrival it would get its first token after its TTFT target on its group's vPods and no overflow
    host takes it, when its prefill starts too late for its TTFT target, or when it finishes past
    its TPOT or end-to-end target, where alone on its vPod it would have met them; once the late
    requests of a group's last ``surge_window_s`` (default 60 s) are more than the instance's
    SLO-attainment target explains among its arrivals (late at a rate ``1 - slo.attainment``, a
    one-sided binomial test at level ``surge_alpha``, default 0.01: one late among ten arrivals is
    chance, two are not), the group gets the vPods the window's arrival
    rate asks for at the plan's rate per vPod (``surge_to_rate``, default True; False: one), ready
    ``create_delay_s`` later, none while one is being created, at most ``surge_growth`` times the
    group's planned vPods (NeuScale's growth bound), only where the fleet still has room
    (:mod:`neuscale_opt.replay.surge`). ``standins`` (default ``"plan"``): where the fleet has no
    room for a colocated group's own type, the guard's vPod is of the first stand-in type with room:
    a configuration of another slice, on a generation the plan deploys (``"fleet"``: any of the
    fleet's; ``"off"``: none, the group's own type only), on at most the chips of one of the
    group's vPods, that serves all the group's classes
    within their SLO, as strong as the group's own on its mix fewest chips first
    (:class:`~neuscale_opt.replay.surge.StandIns`); it drains at the next boundary and counts
    beyond the plan all its life.
    A plan on one generation (a homogeneous auto-scaler's) stays on it under the default.
    ``surge_retire`` (default True): a guard vPod ready for
    ``surge_window_s`` is drained once the surge is over (no late request and no prompt waiting in
    its group, and no more than the plan's rate for the group arrived in the window); False holds
    it to the next boundary, which takes every group back to the plan. Its vPods are held, paid and
    counted as any other (``surge_vpods``, ``surge_chip_hours`` beyond the plan).
    """

    create_delay_s: float = DEFAULT_CREATE_DELAY_S
    warm_start: bool = True
    prewarm: bool | None = None
    slo_rtol: float = 1e-9
    idle_fleet_power: bool = False
    admission: str = "all"
    routing: str = "plan"
    overflow: bool = True
    surge: bool = True
    surge_growth: float = 2.0
    surge_window_s: float = 60.0
    surge_alpha: float = 0.01
    surge_retire: bool = True
    surge_to_rate: bool = True
    standins: str = "plan"

    def __post_init__(self) -> None:
        if not (self.create_delay_s >= 0 and math.isfinite(self.create_delay_s)):
            raise InputError(f"create_delay_s must be a finite number >= 0, got {self.create_delay_s}", where="replay")
        if self.admission not in ADMISSIONS:
            raise InputError(
                f"admission must be one of {', '.join(ADMISSIONS)}, got {self.admission!r}", where="replay"
            )
        if self.standins not in STANDINS:
            raise InputError(f"standins must be one of {', '.join(STANDINS)}, got {self.standins!r}", where="replay")
        if self.routing not in ROUTINGS:
            raise InputError(f"routing must be one of {', '.join(ROUTINGS)}, got {self.routing!r}", where="replay")
        if not (self.surge_growth >= 1 and math.isfinite(self.surge_growth)):
            raise InputError(f"surge_growth must be a finite number >= 1, got {self.surge_growth}", where="replay")
        if not (self.surge_window_s > 0 and math.isfinite(self.surge_window_s)):
            raise InputError(f"surge_window_s must be a finite number > 0, got {self.surge_window_s}", where="replay")
        if not (0 < self.surge_alpha < 1):
            raise InputError(f"surge_alpha must be in (0, 1), got {self.surge_alpha}", where="replay")


@dataclass(frozen=True)
class ReplayResult:
    """Outcome of a replay: per-request and per-vPod tables, summaries and totals (units in names)."""

    requests: pd.DataFrame
    vpods: pd.DataFrame
    by_generation: pd.DataFrame
    by_bucket: pd.DataFrame
    by_epoch: pd.DataFrame
    totals: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no per-request rows; see ``requests`` for those). Deterministic."""
        return {
            **self.totals,
            "by_generation": _records(self.by_generation),
            "by_bucket": _records(self.by_bucket),
            "by_epoch": _records(self.by_epoch),
            "meta": self.meta,
        }


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in df.to_dict(orient="records")]


# ----------------------------------------------------------------------------------------------
# inputs


def instance_trace(inst: Instance) -> pd.DataFrame:
    """The per-request trace the instance names (``workload.trace``)."""
    if inst.workload.trace is None:
        raise InputError("the instance has explicit classes and no trace; give --trace", where="workload.trace")
    from neuscale_opt.candidates import instance_trace as planner_trace

    return planner_trace(inst)


def request_buckets(trace: pd.DataFrame, inst: Instance) -> np.ndarray:
    """Class code (position in :func:`instance_bucket_names`) of every request.

    A ``bucket`` column in the trace wins (names of the instance's classes); otherwise the
    instance's bucket spec (``workload.buckets``, default ``DEFAULT_BUCKETS``) assigns them.
    """
    names = instance_bucket_names(inst)
    where = str(trace.attrs.get("source", "trace"))
    if "bucket" in trace.columns:
        codes = pd.Categorical(trace["bucket"].astype(str), categories=names).codes.astype(np.int64)
        if (codes < 0).any():
            i = int(np.flatnonzero(codes < 0)[0])
            raise InputError(
                f"row {i + 1}, column 'bucket': unknown class {trace['bucket'].iloc[i]!r} ({', '.join(names)})",
                where=where,
            )
        return codes
    if inst.workload.classes:
        raise InputError(
            "the instance defines explicit classes: the trace needs a 'bucket' column naming them", where=where
        )
    from neuscale_opt.traces.buckets import DEFAULT_BUCKETS, assign_buckets

    cat = assign_buckets(trace, inst.workload.buckets or DEFAULT_BUCKETS)
    return pd.Categorical(cat.astype(str), categories=names).codes.astype(np.int64)


def offered_by_class(trace: pd.DataFrame, inst: Instance) -> tuple[dict[tuple[str, int], float], dict]:
    """The trace's offered output tokens and requests per (class, epoch), as the replay counts them
    (classes by :func:`request_buckets`, epochs by :func:`arrival_epochs`): the numbers a
    ceiling over the served share (``horizon.rolling.ratio_bound``) credits."""
    names = instance_bucket_names(inst)
    code = request_buckets(trace, inst)
    epoch = arrival_epochs(trace["arrival_s"].to_numpy(np.float64), inst.epochs.length_s)
    frame = pd.DataFrame({"b": code, "t": epoch, "out": trace["output_tokens"].to_numpy(np.float64)})
    agg = frame.groupby(["b", "t"], sort=True)["out"].agg(["sum", "size"])
    tokens = {(names[int(b)], int(t)): float(v) for (b, t), v in agg["sum"].items()}
    requests = {(names[int(b)], int(t)): float(v) for (b, t), v in agg["size"].items()}
    return tokens, requests


def admission_share(plan: Plan) -> dict[tuple[int, str], float]:
    """``admission_share`` (``formulations/allocation.md``, "Unserved demand"): the share of the
    arrivals of class ``b`` in epoch ``e`` the plan serves, ``a_{b,e} = r_{b,e} / (r_{b,e} +
    s_{b,e})``, with ``r`` the rate of the class's rows (``rate_rps`` summed; disaggregated: of its
    prefill rows, where its arrivals enter) and ``s`` its ``unserved_rps``; 0 when the rows carry no
    rate (a class with no row in the epoch is absent: 0 as well). A class whose rows lack
    ``rate_rps`` is served in full (1) unless the plan lists unserved demand for it, which then is
    an :class:`InputError` (the share cannot be known)."""
    uns = {
        (int(e), str(b)): float(v)
        for e, b, v in zip(
            plan.unserved["epoch"].tolist(),
            plan.unserved["bucket"].tolist(),
            plan.unserved["unserved_rps"].tolist(),
            strict=True,
        )
    }
    rows = plan.rows
    if rows.empty:
        return {}
    entry = rows[rows["phase"] != "decode"]
    rate = entry["rate_rps"] if "rate_rps" in entry.columns else pd.Series(np.nan, index=entry.index)
    out: dict[tuple[int, str], float] = {}
    for (e, b), r in rate.groupby([entry["epoch"].astype(int), entry["bucket"].astype(str)], sort=True):
        s_b = uns.get((int(e), str(b)), 0.0)
        if r.isna().any():
            if s_b > 0:
                raise InputError(
                    f"epoch {e}, class {b!r}: the plan leaves {s_b:.6g} req/s unserved but its rows lack rate_rps, "
                    "so the share to admit is unknown",
                    where=plan.source,
                )
            out[(int(e), str(b))] = 1.0
            continue
        served = float(r.sum())
        out[(int(e), str(b))] = served / (served + s_b) if served > 0 else 0.0
    return out


def admitted_mask(
    arrival: np.ndarray, bcode: np.ndarray, names: list[str], share: dict[tuple[int, str], float], epoch_s: float
) -> np.ndarray:
    """Which requests (sorted by arrival) are admitted: the ``k``-th arrival (0-based) of class ``b``
    in epoch ``e`` when ``floor((k + 1) a) > floor(k a)``, ``a`` = ``share[(e, b)]`` (0 when
    absent), so that after ``n`` arrivals ``floor(n a)`` are admitted, evenly spread
    (deterministic: no random draw)."""
    n = len(arrival)
    if n == 0:
        return np.zeros(0, dtype=bool)
    ep = arrival_epochs(arrival, epoch_s)
    nb = len(names)
    key = ep * nb + bcode
    code = {b: i for i, b in enumerate(names)}
    dense = np.zeros((int(ep.max()) + 1, nb))
    for (e, b), x in share.items():
        if e <= ep.max() and b in code:
            dense[e, code[b]] = x
    a = dense[ep, bcode]
    order = np.argsort(key, kind="stable")
    k_sorted = key[order]
    first = np.r_[0, np.flatnonzero(np.diff(k_sorted)) + 1]
    start = np.repeat(first, np.diff(np.r_[first, n]))
    rank = np.empty(n, dtype=np.float64)
    rank[order] = np.arange(n) - start
    return np.floor((rank + 1.0) * a + _ADMIT_EPS) > np.floor(rank * a + _ADMIT_EPS)


def _expand(res: EngineResult, keep: np.ndarray) -> EngineResult:
    """Per-request arrays of an engine run over the admitted requests ``keep`` (a mask over all
    requests) laid back over all of them: a rejected request is never served (NaN times, vPod -1)."""
    n = len(keep)

    def put(x: np.ndarray, fill: float | int) -> np.ndarray:
        out = np.full(n, fill, dtype=x.dtype)
        out[keep] = x
        return out

    return replace(
        res,
        start_s=put(res.start_s, math.nan),
        first_token_s=put(res.first_token_s, math.nan),
        finish_s=put(res.finish_s, math.nan),
        vpod=put(res.vpod, -1),
        decode_vpod=put(res.decode_vpod, -1),
        kv_transfer_s=put(res.kv_transfer_s, math.nan),
    )


def _schedule(plan: Plan, codes: dict[str, int]) -> list[list[EpochGroup]]:
    sched: list[list[EpochGroup]] = [[] for _ in range(plan.n_epochs)]
    for r in plan.groups.itertuples(index=False):
        sched[int(r.epoch)].append(
            EpochGroup(
                str(r.vpod_group),
                int(r.type_index),
                int(r.n_vpods),
                tuple(codes[b] for b in r.buckets),
                tuple(float(x) for x in r.rates),
            )
        )
    return sched


# ----------------------------------------------------------------------------------------------
# the door


def _prewarm(opts: ReplayOptions, instance: Instance) -> bool:
    """Pre-warm or not: the option, else the instance's ``[horizon] prewarm`` (True without it)."""
    if opts.prewarm is not None:
        return bool(opts.prewarm)
    return bool((instance.horizon or Horizon()).prewarm)


def replay(
    plan: Plan | str | Path | dict,
    instance: Instance,
    trace: pd.DataFrame | None = None,
    options: ReplayOptions | None = None,
    coeffs: Coefficients | None = None,
    progress: Callable[[int], object] | None = None,
) -> ReplayResult:
    """Replay ``trace`` (default: the instance's) against ``plan`` on ``instance``'s fleet.

    ``plan`` is a :class:`Plan` or anything :func:`load_plan` reads (checked against the instance
    and the trace's epochs). ``coeffs`` (default ``build_coefficients(instance)``) gives the
    classes' SLO targets.
    """
    opts = options or ReplayOptions()
    if trace is None:
        trace = instance_trace(instance)
    for c in ("arrival_s", "input_tokens", "output_tokens"):
        if c not in trace.columns:
            raise InputError(f"trace lacks column {c!r}", where=str(trace.attrs.get("source", "trace")))
    if not isinstance(plan, Plan):
        plan = load_plan(plan, instance, trace)
    if coeffs is None:
        from neuscale_opt.candidates import build_coefficients

        coeffs = build_coefficients(instance)
    names = instance_bucket_names(instance)
    codes = {b: i for i, b in enumerate(names)}

    order = np.argsort(trace["arrival_s"].to_numpy(np.float64), kind="stable")
    tr = trace.iloc[order].reset_index(drop=True)
    arrival = tr["arrival_s"].to_numpy(np.float64)
    if len(arrival) and arrival[0] < 0:
        raise InputError("negative arrival_s", where=str(trace.attrs.get("source", "trace")))
    s_in = tr["input_tokens"].to_numpy(np.int64)
    s_out = tr["output_tokens"].to_numpy(np.int64)
    bcode = request_buckets(tr, instance)
    max_in = int(s_in.max()) if len(s_in) else 0
    serves = overflow_classes(plan.types, coeffs, codes)
    standins = None
    if opts.surge and opts.standins != "off":
        chips = {vt.chip for vt in plan.types} if opts.standins == "plan" else set(instance.healthy_chips())
        standins = StandIns(coeffs.configs, coeffs.buckets, coeffs.util_cap, instance.slo.attainment, sorted(chips))
    kinds = StandInTypes(instance, plan.types, serves, standins, names, max_in)
    tables = kinds.tables
    if opts.admission == "plan":
        keep = admitted_mask(arrival, bcode, names, admission_share(plan), instance.epochs.length_s)
    else:
        keep = np.ones(len(arrival), dtype=bool)
    schedule = _schedule(plan, codes)
    res = run(
        arrival[keep].tolist(),
        s_in[keep].tolist(),
        s_out[keep].tolist(),
        bcode[keep].tolist(),
        len(names),
        schedule,
        instance.epochs.length_s,
        tables,
        opts.create_delay_s,
        opts.warm_start,
        on_epoch=progress,
        lead_s=prewarm_lead_s(opts.create_delay_s, _prewarm(opts, instance), instance.epochs.length_s),
        routing=opts.routing,
        overflow=kinds.serves if opts.overflow else None,
        ttft_target=_targets(coeffs, names, "ttft_slo_s"),
        tpot_target=_targets(coeffs, names, "tpot_slo_s"),
        e2e_target=_targets(coeffs, names, "e2e_slo_s"),
        surge=SurgeRoom(instance, kinds.types, schedule) if opts.surge else None,
        surge_growth=opts.surge_growth,
        surge_window_s=opts.surge_window_s,
        surge_tolerance=1.0 - instance.slo.attainment,
        surge_alpha=opts.surge_alpha,
        surge_retire=opts.surge_retire,
        surge_to_rate=opts.surge_to_rate,
        standin=kinds if standins is not None else None,
    )
    if not keep.all():
        res = _expand(res, keep)
    return _account(res, tr, bcode, names, plan, tables, instance, coeffs, opts, keep)


def _targets(coeffs: Coefficients, names: list[str], column: str) -> list[float]:
    """Each class's target in ``column`` (``ttft_slo_s``, ``tpot_slo_s``, ``e2e_slo_s``; infinite
    where it has none)."""
    v = coeffs.buckets.set_index("bucket")[column].reindex(names).to_numpy(np.float64)
    return np.where(np.isfinite(v), v, np.inf).tolist()


def overflow_classes(types: tuple[VpodType, ...], coeffs: Coefficients, codes: dict[str, int]) -> list[frozenset[int]]:
    """Per vPod type, the codes of the classes its configuration serves within their SLO and
    memory (the candidate table's feasible rows): the classes whose overflow it may take."""
    ok = serving_rows(coeffs.configs)
    serves: dict[str, set[int]] = {}
    for key, b in zip(ok["vpod_type"].astype(str), ok["bucket"].astype(str), strict=True):
        if b in codes:
            serves.setdefault(key, set()).add(codes[b])
    return [frozenset(serves.get(vt.key, ())) for vt in types]


# ----------------------------------------------------------------------------------------------
# accounting


def _pct(x: np.ndarray, q: float) -> float:
    x = x[~np.isnan(x)]
    return float(np.percentile(x, q)) if len(x) else math.nan


def _ok(value: np.ndarray, target: np.ndarray, rtol: float) -> np.ndarray:
    """Target NaN = no target; a NaN value (not applicable, e.g. TPOT of a 0-token answer) passes."""
    with np.errstate(invalid="ignore"):
        return np.isnan(target) | np.isnan(value) | (value <= target * (1.0 + rtol))


def _peak_chips(start: np.ndarray, end: np.ndarray, chips: np.ndarray) -> int:
    """Largest number of chips held at once (releases at a time counted before acquisitions)."""
    if len(start) == 0:
        return 0
    t = np.concatenate([end, start])
    d = np.concatenate([-chips, chips])
    order = np.lexsort((d, t))
    return int(max(np.cumsum(d[order]).max(), 0))


def _idle_fleet_static_j(
    inst: Instance,
    horizon_s: float,
    vp_chip: np.ndarray,
    vp_chips: np.ndarray,
    held_s: np.ndarray,
) -> float:
    """Static energy (J, before PUE; E1) of the healthy chips of each generation that no vPod holds,
    over the horizon: static W per chip x (healthy chips x horizon - chip-seconds held), >= 0."""
    from neuscale_opt.candidates import chip_context

    total = 0.0
    for chip, healthy in inst.healthy_chips().items():
        if not math.isfinite(float(healthy)):
            continue
        m = vp_chip == chip
        idle_chip_s = max(float(healthy) * horizon_s - float((held_s[m] * vp_chips[m]).sum()), 0.0)
        total += float(static_energy_j(float(chip_context(inst, chip).hw.static_w), idle_chip_s))
    return total


def _account(
    res: EngineResult,
    tr: pd.DataFrame,
    bcode: np.ndarray,
    names: list[str],
    plan: Plan,
    tables: list[StepTable],
    inst: Instance,
    coeffs: Coefficients,
    opts: ReplayOptions,
    admitted: np.ndarray,
) -> ReplayResult:
    arrival = tr["arrival_s"].to_numpy(np.float64)
    s_in = tr["input_tokens"].to_numpy(np.int64)
    s_out = tr["output_tokens"].to_numpy(np.int64)
    served = (res.vpod >= 0) & ~np.isnan(res.finish_s)  # disaggregated: prefilled and decoded
    disagg = any(vt.phase != "colocated" for vt in plan.types)
    ttft = res.first_token_s - arrival
    e2e = res.finish_s - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(s_out > 0, (res.finish_s - res.first_token_s) / np.maximum(s_out, 1), np.nan)
    slo = coeffs.buckets.set_index("bucket").reindex(names)
    t_ttft = slo["ttft_slo_s"].to_numpy(np.float64)[bcode]
    t_tpot = slo["tpot_slo_s"].to_numpy(np.float64)[bcode]
    t_e2e = slo["e2e_slo_s"].to_numpy(np.float64)[bcode]
    rt = opts.slo_rtol
    ttft_ok = served & _ok(ttft, t_ttft, rt)
    tpot_ok = served & _ok(tpot, t_tpot, rt)
    e2e_ok = served & _ok(e2e, t_e2e, rt)
    met = ttft_ok & tpot_ok & e2e_ok

    vtype = [tables[i].vtype for i in res.vpod_type_index]
    vp_chip = np.array([v.chip for v in vtype], dtype=object)
    vp_chips = np.array([v.chips for v in vtype], dtype=np.int64)
    held_s = res.held_to_s - res.held_from_s
    static_w = np.array([tables[i].static_w for i in res.vpod_type_index], dtype=np.float64)
    price_h = np.array([tables[i].price_usd_per_hour for i in res.vpod_type_index], dtype=np.float64)
    emb_h = np.array([tables[i].embodied_kg_per_hour for i in res.vpod_type_index], dtype=np.float64)
    pue = inst.energy.pue
    intensity = inst.energy.carbon_kg_per_kwh
    vpods = pd.DataFrame(
        {
            "vpod": np.arange(len(vtype), dtype=np.int64),
            "vpod_group": res.vpod_group,
            "vpod_type": [v.key for v in vtype],
            "chip": vp_chip,
            "chips": vp_chips,
            "held_from_s": res.held_from_s,
            "held_to_s": res.held_to_s,
            "held_s": held_s,
            "busy_s": res.busy_s,
            "work_s": res.work_s,
            "energy_dynamic_j": res.energy_dyn_j,
            "energy_busy_j": res.energy_busy_j,
            "energy_marginal_j": res.energy_dyn_j - res.energy_busy_j,
            "energy_static_j": static_energy_j(static_w, held_s),
            "cost_usd": price_h * held_s / SECONDS_PER_HOUR,
            "embodied_kg": emb_h * held_s / SECONDS_PER_HOUR,
            "surge": res.vpod_surge,
            "surge_held_s": res.vpod_surge_s,
            "standin": res.vpod_standin,
        }
    )
    if disagg:
        vpods["phase"] = [v.phase for v in vtype]
        vpods["energy_kv_j"] = res.energy_kv_j
    vpods.attrs["unit"] = {"held_s": "s", "energy_dynamic_j": "J (before PUE)", "cost_usd": "USD"}

    req_chip = np.where(served, vp_chip[np.maximum(res.vpod, 0)] if len(vtype) else "", "")
    requests = pd.DataFrame(
        {
            "arrival_s": arrival,
            "bucket": np.asarray(names, dtype=object)[bcode],
            "input_tokens": s_in,
            "output_tokens": s_out,
            "vpod": res.vpod,
            "chip": req_chip,
            "queue_s": res.start_s - arrival,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2e_s": e2e,
            "ttft_ok": ttft_ok,
            "tpot_ok": tpot_ok,
            "e2e_ok": e2e_ok,
            "slo_met": met,
        }
    )
    if opts.admission != "all":
        requests["admitted"] = admitted
    if disagg:
        dec_ok = res.decode_vpod >= 0
        requests["decode_vpod"] = res.decode_vpod
        requests["decode_chip"] = np.where(dec_ok, vp_chip[np.maximum(res.decode_vpod, 0)] if len(vtype) else "", "")
        requests["kv_transfer_s"] = res.kv_transfer_s
    requests.attrs["unit"] = {"arrival_s": "s", "ttft_s": "s", "tpot_s": "s/token", "e2e_s": "s"}

    # per generation
    gen_rows = []
    for chip in inst.chip_names:
        m = vp_chip == chip
        chip_s = float((held_s[m] * vp_chips[m]).sum())
        busy_chip_s = float((res.busy_s[m] * vp_chips[m]).sum())
        work_chip_s = float((res.work_s[m] * vp_chips[m]).sum())
        dyn = float(res.energy_dyn_j[m].sum())
        stat = float((static_w[m] * held_s[m]).sum())
        emb_kg = float(vpods["embodied_kg"].to_numpy()[m].sum())
        gen_rows.append(
            {
                "chip": chip,
                "vpods": int(m.sum()),
                "chip_hours": chip_s / SECONDS_PER_HOUR,
                "busy_chip_hours": busy_chip_s / SECONDS_PER_HOUR,
                "busy_fraction": busy_chip_s / chip_s if chip_s > 0 else math.nan,
                "utilisation": work_chip_s / chip_s if chip_s > 0 else math.nan,
                "peak_chips_held": _peak_chips(res.held_from_s[m], res.held_to_s[m], vp_chips[m]),
                "healthy_chips": int(inst.healthy_chips()[chip]),
                "energy_dynamic_j": dyn,
                "energy_static_j": stat,
                "energy_j": pue * (dyn + stat),
                "cost_usd": float(vpods["cost_usd"].to_numpy()[m].sum()),
                "carbon_kg": pue * (dyn + stat) / J_PER_KWH * intensity + emb_kg,
                "requests": int((requests["chip"].to_numpy() == chip).sum()),
            }
        )
    by_generation = pd.DataFrame(gen_rows)

    # per bucket
    b_rows = []
    for i, b in enumerate(names):
        m = bcode == i
        b_rows.append(
            {
                "bucket": b,
                "requests": int(m.sum()),
                **({"rejected": int((~admitted & m).sum())} if opts.admission != "all" else {}),
                "served": int((served & m).sum()),
                "slo_attainment": float(met[m].mean()) if m.any() else math.nan,
                "ttft_attainment": float(ttft_ok[m].mean()) if m.any() else math.nan,
                "tpot_attainment": float(tpot_ok[m].mean()) if m.any() else math.nan,
                "ttft_slo_s": float(slo["ttft_slo_s"].iloc[i]),
                "tpot_slo_s": float(slo["tpot_slo_s"].iloc[i]),
                "e2e_slo_s": float(slo["e2e_slo_s"].iloc[i]),
                "p50_ttft_s": _pct(ttft[m], 50),
                "p99_ttft_s": _pct(ttft[m], 99),
                "p50_tpot_s": _pct(tpot[m], 50),
                "p99_tpot_s": _pct(tpot[m], 99),
            }
        )
    by_bucket = pd.DataFrame(b_rows)

    # per epoch of arrival
    length = inst.epochs.length_s
    ep = arrival_epochs(arrival, length)
    n_ep = max(plan.n_epochs, int(ep.max()) + 1 if len(ep) else 0)
    cnt = np.bincount(ep, minlength=n_ep)
    good = np.bincount(ep, weights=met.astype(np.float64), minlength=n_ep)
    planned = plan.groups.groupby("epoch")["n_vpods"].sum().reindex(range(n_ep), fill_value=0).to_numpy()
    plan_chips = (
        (plan.groups["n_vpods"] * plan.groups["chips_per_vpod"])
        .groupby(plan.groups["epoch"])
        .sum()
        .reindex(range(n_ep), fill_value=0)
        .to_numpy()
    )
    by_epoch = pd.DataFrame(
        {
            "epoch": np.arange(n_ep, dtype=np.int64),
            "requests": cnt.astype(np.int64),
            "slo_attainment": np.where(cnt > 0, good / np.maximum(cnt, 1), np.nan),
            "planned_vpods": planned.astype(np.int64),
            "planned_chips": plan_chips.astype(np.int64),
        }
    )

    dyn = float(res.energy_dyn_j.sum())
    stat = float(static_energy_j(static_w, held_s).sum())
    idle = _idle_fleet_static_j(inst, plan.n_epochs * inst.epochs.length_s, vp_chip, vp_chips, held_s)
    energy = pue * (dyn + stat + (idle if opts.idle_fleet_power else 0.0))
    cost = float(vpods["cost_usd"].sum())
    chip_h = float((held_s * vp_chips).sum()) / SECONDS_PER_HOUR
    embodied = float(vpods["embodied_kg"].sum())
    carbon_op = energy / J_PER_KWH * intensity
    tokens_out = int(s_out[served].sum())
    goodput = int(s_out[met].sum())
    n = len(arrival)
    totals: dict[str, Any] = {
        "requests": n,
        "served": int(served.sum()),
        "unserved": int(n - served.sum()),
        "rejected": int(n - admitted.sum()),
        "slo_met": int(met.sum()),
        "slo_attainment": float(met.mean()) if n else math.nan,
        "ttft_attainment": float(ttft_ok.mean()) if n else math.nan,
        "tpot_attainment": float(tpot_ok.mean()) if n else math.nan,
        "tokens_in": int(s_in[served].sum()),
        "tokens_out": tokens_out,
        "tokens_out_offered": int(s_out.sum()),
        "energy_j": energy,
        "energy_dynamic_j": dyn,
        "energy_static_j": stat,
        "energy_busy_j": float(res.energy_busy_j.sum()),
        "energy_marginal_j": dyn - float(res.energy_busy_j.sum()),
        "energy_idle_fleet_j": idle,
        "idle_fleet_power": opts.idle_fleet_power,
        "pue": pue,
        "cost_usd": cost,
        "carbon_kg": carbon_op + embodied,
        "carbon_operational_kg": carbon_op,
        "carbon_embodied_kg": embodied,
        "chip_hours": chip_h,
        "vpods_created": len(vtype),
        "surge_vpods": int(res.vpod_surge.sum()),
        "surge_standin_vpods": int(res.vpod_standin.sum()),
        "surge_chip_hours": float((res.vpod_surge_s * vp_chips).sum()) / SECONDS_PER_HOUR,
        "tokens_per_joule": tokens_out / energy if energy > 0 else math.nan,
        "tokens_per_usd": tokens_out / cost if cost > 0 else math.nan,
        "goodput_tokens_out": goodput,
        "goodput_tokens_per_joule": goodput / energy if energy > 0 else math.nan,
        "goodput_tokens_per_usd": goodput / cost if cost > 0 else math.nan,
        "p50_ttft_s": _pct(ttft, 50),
        "p99_ttft_s": _pct(ttft, 99),
        "p50_tpot_s": _pct(tpot, 50),
        "p99_tpot_s": _pct(tpot, 99),
        "p50_e2e_s": _pct(e2e, 50),
        "p99_e2e_s": _pct(e2e, 99),
        "horizon_s": plan.n_epochs * length,
        "events": res.events,
    }
    if opts.admission != "all":
        n_adm = int(admitted.sum())
        totals["slo_attainment_admitted"] = float(met[admitted].mean()) if n_adm else math.nan
    if disagg:
        totals["energy_kv_j"] = float(res.energy_kv_j.sum())
        totals["p50_kv_transfer_s"] = _pct(res.kv_transfer_s, 50)
        totals["p99_kv_transfer_s"] = _pct(res.kv_transfer_s, 99)
    meta = {
        "instance": inst.name,
        "plan": plan.source,
        "plan_meta": plan.meta,
        "trace": str(tr.attrs.get("label") or tr.attrs.get("source", "")),
        "model": coeffs.meta.get("model"),
        "slo": coeffs.meta.get("slo"),
        "options": {
            "create_delay_s": opts.create_delay_s,
            "warm_start": opts.warm_start,
            "prewarm": _prewarm(opts, inst),
            "slo_rtol": opts.slo_rtol,
            "idle_fleet_power": opts.idle_fleet_power,
            "admission": opts.admission,
            "routing": opts.routing,
            "overflow": opts.overflow,
            "surge": opts.surge,
            "surge_growth": opts.surge_growth,
            "surge_window_s": opts.surge_window_s,
            "surge_alpha": opts.surge_alpha,
            "surge_retire": opts.surge_retire,
            "surge_to_rate": opts.surge_to_rate,
            "standins": opts.standins,
        },
        "units": {
            "energy_j": "J at the facility (PUE applied)",
            "energy_dynamic_j": "J at the chips, before PUE",
            "energy_static_j": "J at the chips, before PUE",
            "energy_busy_j": "J at the chips, before PUE: weight streaming of the batched steps (part of dynamic)",
            "energy_marginal_j": "J at the chips, before PUE: dynamic less busy",
            "energy_idle_fleet_j": "J at the chips, before PUE: static power of healthy chips no vPod holds",
            "goodput_tokens_out": "output tokens of requests that met their SLO",
            "tokens_out_offered": "output tokens of every request of the trace in the horizon, served or not",
            "goodput_tokens_per_joule": "goodput_tokens_out / energy_j",
            "goodput_tokens_per_usd": "goodput_tokens_out / cost_usd",
            "cost_usd": "USD (chip-hours held x price)",
            "carbon_kg": "kgCO2e (operational + embodied)",
            "tokens_per_joule": "output tokens / energy_j",
            "tokens_per_usd": "output tokens / cost_usd",
            "ttft_s": "s",
            "tpot_s": "s per output token",
        },
    }
    return ReplayResult(
        requests=requests,
        vpods=vpods,
        by_generation=by_generation,
        by_bucket=by_bucket,
        by_epoch=by_epoch,
        totals=totals,
        meta=meta,
    )
