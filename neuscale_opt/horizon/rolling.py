"""Full-horizon and rolling-window planning with the horizon model, and the common assembly of a
schedule into a :class:`~neuscale_opt.alloc.solution.Solution`.

* :func:`plan_full` - one solve over every epoch with the given demand (the oracle's bound when
  the demand is the actual one);
* :func:`plan_rolling` - at each epoch t: forecast epochs t .. t+H-1 from the epochs before t,
  solve the window with the state committed so far, commit epoch t, move on;
* :func:`forecast_window` - the planned demand of a window (``traces.forecast``);
* :func:`assemble` - committed rows -> Solution, totals and epoch summaries from the independent
  schedule evaluator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from neuscale_opt.alloc.context import prepare
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.solution import (
    ALLOC_COLUMNS,
    Solution,
    empty_allocations,
    tidy_allocations,
    tidy_placements,
    tidy_unserved,
    verdict_status,
    worst_status,
)
from neuscale_opt.alloc.solve import solve_model
from neuscale_opt.alloc.tail import prompt_tokens, route_tail_commit, split_tail, tail_rate
from neuscale_opt.coefficients import Coefficients
from neuscale_opt.errors import TimeLimitError
from neuscale_opt.horizon.context import State, WindowContext, build_window, horizon_options, serving_capacity
from neuscale_opt.horizon.evaluate import evaluate_schedule
from neuscale_opt.horizon.model import add_held_if_used, build_model
from neuscale_opt.horizon.params import HorizonParams
from neuscale_opt.horizon.persistent import CompiledWindows
from neuscale_opt.horizon.placement import epoch_placement_rows, window_placements
from neuscale_opt.instance import inventory_schedule
from neuscale_opt.traces.forecast import forecast

ROW_FIELDS = ("bucket", "phase", "chip", "shape", "chips_per_vpod", "tp", "pp", "ep", "batch", "vpod_type", "config_id")


@dataclass(frozen=True)
class EpochCommit:
    """One committed epoch: vPods per group, rate per configuration, unserved rate per class, the
    demand it was planned for, how it was found, and the placement rows of its vPods of placed
    generations (``Solution.placements`` rows; empty when nothing is placed). ``routes`` maps a
    configuration that runs on another group than its own (a tail class routed onto a held group's
    spare capacity, ``alloc.tail``) to that group. ``reserve`` is the guard reserve asked per class
    (req/s, ``formulations/horizon.md``, "Guard reserve"), ``reserve_short`` what of it the plan
    could not keep room for (both empty without a reserve)."""

    epoch: int
    n: dict[str, int]
    x: dict[str, float]
    s: dict[str, float]
    planned: dict[str, float]
    status: str
    info: dict[str, Any]
    placements: tuple[dict[str, Any], ...] = ()
    routes: dict[str, str] = field(default_factory=dict)
    reserve: dict[str, float] = field(default_factory=dict)
    reserve_short: dict[str, float] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------
# demand


def actual_demand(coeffs: Coefficients) -> dict[tuple[str, int], float]:
    """d_{b,t} of the coefficients (the rate the instance provisions for: peak or mean)."""
    return {(str(r.bucket), int(r.epoch)): float(r.rate_rps) for r in coeffs.demand.itertuples()}


def observed_demand_map(coeffs: Coefficients) -> dict[tuple[str, int], float]:
    """Each epoch's provisioned rate as observed L before it ends (``demand.observed_rps``, D11;
    a demand table without that column, made without a trace, is read as observed: ``rate_rps``)."""
    d = coeffs.demand
    col = "observed_rps" if "observed_rps" in d.columns else "rate_rps"
    return {(str(b), int(e)): float(v) for e, b, v in zip(d["epoch"], d["bucket"], d[col], strict=True)}


def observed_history(coeffs: Coefficients, seen: int, prewarm: bool) -> pd.DataFrame:
    """The demand history of epochs ``< seen`` (``epoch``, ``bucket``, ``peak_rps`` = the provisioned
    rate), as a plan made at ``seen`` T reads it, or with ``prewarm`` at ``seen`` T - L: then epoch
    ``seen - 1`` is its ``observed_rps`` (D11; where the table has it: one made without a trace is
    read as observed)."""
    d = coeffs.demand
    hist = d[d["epoch"] < seen]
    if prewarm and "observed_rps" in d.columns:
        last = hist["epoch"].to_numpy() == seen - 1
        rate = np.where(last, hist["observed_rps"].to_numpy(float), hist["rate_rps"].to_numpy(float))
        hist = hist.assign(rate_rps=rate)
    hist = hist[["epoch", "bucket", "rate_rps"]].rename(columns={"rate_rps": "peak_rps"})
    return hist.sort_values(["epoch", "bucket"], kind="mergesort")


def forecast_window(
    coeffs: Coefficients,
    method: str,
    start: int,
    epochs: list[int],
    actual: dict[tuple[str, int], float] | None = None,
    prewarm: bool = False,
) -> dict[tuple[str, int], float]:
    """Planned demand of ``epochs`` (a window starting at ``start``) made with data before ``start``.

    ``oracle`` returns the actual demand. Otherwise ``traces.forecast(history, method, steps)`` on
    the epochs before ``start``. Warm start: a window starting at 0 treats epoch 0 as observed (the
    cluster exists at t = 0 sized for it), so epoch 0 is planned on its actual demand and later
    epochs from it. Where a method has no value (``seasonal-naive`` within its first period) the
    last observed epoch is used. ``actual``: :func:`actual_demand` of ``coeffs`` when the caller has it.
    ``prewarm`` (a window starting at ``start >= 1`` planned L before it, ``HorizonParams.lead_s``):
    epoch ``start - 1`` is read as observed until then (``demand.observed_rps``, D11 of
    ``formulations/forecast.md``).
    """
    actual = actual_demand(coeffs) if actual is None else actual
    if method == "oracle":
        return {(b, t): actual.get((b, t), 0.0) for t in epochs for b in coeffs.bucket_names}
    out: dict[tuple[str, int], float] = {}
    seen = max(start, 1)
    if start == 0:
        for b in coeffs.bucket_names:
            out[(b, 0)] = actual.get((b, 0), 0.0)
    hist = observed_history(coeffs, seen, prewarm and start >= 1)
    steps = max(t for t in epochs) - seen + 1
    if steps <= 0:
        return out
    fc = forecast(hist.reset_index(drop=True), method, steps=steps, epoch_s=float(coeffs.epoch_s))
    fut = fc[fc["future"].to_numpy()]
    last = {str(r.bucket): float(r.peak_rps) for r in hist[hist["epoch"] == seen - 1].itertuples()}
    last = {b: last.get(b, 0.0) for b in coeffs.bucket_names}
    for r in fut.itertuples():
        t = int(r.epoch)
        if t in epochs and (str(r.bucket), t) not in out:
            v = float(r.rate_rps)
            out[(str(r.bucket), t)] = last[str(r.bucket)] if math.isnan(v) else max(v, 0.0)
    for t in epochs:
        for b in coeffs.bucket_names:
            out.setdefault((b, t), last[b])
    return out


def reserve_window(
    coeffs: Coefficients,
    params: HorizonParams,
    start: int,
    epochs: list[int],
    planned: dict[tuple[str, int], float],
    actual: dict[tuple[str, int], float] | None = None,
    prewarm: bool = False,
) -> dict[tuple[str, int], float]:
    """The guard reserve of a window (``formulations/horizon.md``, "Guard reserve"): the rate
    ``params.reserve_forecast`` gives above ``planned`` (the window's forecast), made from the same
    data; empty without a reserve forecaster."""
    if params.reserve_forecast is None:
        return {}
    hi = forecast_window(coeffs, params.reserve_forecast, start, epochs, actual, prewarm=prewarm)
    return {k: v - planned.get(k, 0.0) for k, v in hi.items() if v > planned.get(k, 0.0)}


def instance_inventory(coeffs: Coefficients, events: Any = ()) -> dict[tuple[str, int], float]:
    """H_{c,t} for every epoch of ``coeffs`` (the fleet's healthy chips plus ``inventory_events``)."""
    return inventory_schedule(coeffs.inventory(), tuple(events), coeffs.epochs)


# ----------------------------------------------------------------------------------------------
# solving a window


def solve_window(
    ctx: WindowContext,
    place: Iterable[int] | None = None,
    tail: dict[int, dict[str, float]] | None = None,
    tokens: dict[str, float] | None = None,
    compiled: CompiledWindows | None = None,
) -> tuple[dict[int, EpochCommit], dict[str, Any], set[str]]:
    """Solve one window; the plan of each of its epochs (not yet committed), solver info and the
    tail classes that found no room. The placements of the epochs in ``place`` (default: every
    epoch) are realised from the solved ``placement`` sub-blocks. ``tail`` (per epoch of ``place``:
    class -> rate, left out of ``ctx.demand``) is routed onto each solved epoch's held groups
    (``alloc.tail.route_tail_commit``, with ``tokens`` the classes' prompt lengths); a class without
    room is returned, and the caller solves again with it as ordinary demand. With ``compiled`` (a
    rolling plan's compiled windows) the window is re-solved from the compiled model of its
    structure where it can be (the same arrays as a fresh build), else built."""
    one = _stationary_epoch(ctx, place)
    if one is not None:  # the window is its first epoch held H times (see _stationary_epoch)
        plans, info, left = solve_window(one, place=place, tail=tail, tokens=tokens, compiled=compiled)
        first = plans[ctx.epochs[0]]
        info = {**info, "objective_value": info["objective_value"] * len(ctx.epochs)}
        info["bound"] = info["bound"] * len(ctx.epochs)
        out = {ctx.epochs[0]: first}
        for t in ctx.epochs[1:]:
            planned = {b: ctx.demand.get((b, t), 0.0) for b in ctx.buckets}
            out[t] = EpochCommit(t, dict(first.n), dict(first.x), dict(first.s), planned, first.status, {})
        return out, info, left
    res, read = _solve_reserved(ctx, compiled)
    info = res.info()
    if res.status == "no_incumbent":
        raise TimeLimitError(f"epochs {ctx.epochs[0]}-{ctx.epochs[-1]}: {ctx.options.no_plan_text(res.stopped_by)}")
    if not res.has_plan:
        raise RuntimeError(f"horizon window {ctx.epochs[0]}-{ctx.epochs[-1]} is {res.status}")  # pragma: no cover
    v = res.values
    realise = set(ctx.epochs if place is None else place) if ctx.placement else set()
    out: dict[int, EpochCommit] = {}
    left: set[str] = set()
    prev: dict[str, int] | None = None if ctx.state is None else dict(ctx.state.n)
    for t in ctx.epochs:
        n = {str(g): int(round(x)) for (g, tt), x in v.get("n_vpods", {}).items() if tt == t and round(x) > 0}
        x = {str(k): max(val, 0.0) for (k, tt), val in v.get("rate", {}).items() if tt == t and val > 1e-9}
        s = {str(b): val for (b, tt), val in v.get("unserved", {}).items() if tt == t and val > 1e-9}
        tail_t = (tail or {}).get(t, {})
        routes: dict[str, str] = {}
        if tail_t:  # room = vpod_capacity's right side: vPods created at t serve 1 - delta of it
            cap = {g: serving_capacity(c, prev.get(g, 0), ctx.delta) if prev is not None else c for g, c in n.items()}
            x, routes, short = route_tail_commit(cap, x, tail_t, ctx.configs, tokens or {})
            left |= short
        prev = n
        planned = {b: ctx.demand.get((b, t), 0.0) + tail_t.get(b, 0.0) for b in ctx.buckets}
        rows: tuple[dict[str, Any], ...] = ()
        if t in realise and read is not None:
            rows = tuple(epoch_placement_rows(ctx, t, read(t, n), x, routes))
        reserve = {b: r for (b, tt), r in sorted(ctx.reserve.items()) if tt == t}
        short = {str(b): val for (b, tt), val in v.get("reserve_short", {}).items() if tt == t and val > 1e-9}
        out[t] = EpochCommit(t, n, x, s, planned, res.status, {}, rows, routes, reserve, short)
    return out, info, left


def _solve_once(
    ctx: WindowContext, compiled: CompiledWindows | None, fixed: dict[str, dict[Any, float]] | None = None
) -> tuple[Any, Callable[[int, dict[str, int]], Any] | None]:
    """The window's model solved (from its compiled structure where it can be, else built), with the
    columns of ``fixed`` (variable -> {index: value}) bounded to their value; the result and the
    reader of its placements."""
    done = compiled.solve(ctx, ctx.options, fixed) if compiled is not None else None
    if done is not None:
        return done
    m = build_model(ctx)
    for name, vals in (fixed or {}).items():
        var = getattr(m, name)
        for idx, v in vals.items():
            var[idx].setlb(v)
            var[idx].setub(v)
    res = solve_model(m, ctx.options)

    def read(t: int, n: dict[str, int], m=m):
        return window_placements(m, ctx, t, n)

    return res, read


#: Reserve (req/s, summed over the window) a plan may leave short and still count as keeping it all.
RESERVE_TOL = 1e-6


def _solve_reserved(
    ctx: WindowContext, compiled: CompiledWindows | None
) -> tuple[Any, Callable[[int, dict[str, int]], Any] | None]:
    """The window solved, its guard reserve lazily (``formulations/horizon.md``, "Guard reserve",
    "Solved lazily"): the window without the reserve rows first; where its plan keeps the whole
    reserve (the reserve model with that plan's vPods and rates fixed leaves none short) that plan
    is optimal for the reserve model too (the same objective, and the plain optimum bounds the
    reserve model's from below) and is the window's; else the reserve model is solved whole."""
    if not ctx.reserved:
        return _solve_once(ctx, compiled)
    plain = replace(ctx, params=ctx.params.replace(reserve_forecast=None), reserve={})
    res, read = _solve_once(plain, compiled)
    if not res.has_plan or not ctx.reserve:
        return res, read
    v = res.values
    fixed = {
        "n_vpods": {k: float(round(x)) for k, x in v.get("n_vpods", {}).items()},
        "rate": {k: max(float(x), 0.0) for k, x in v.get("rate", {}).items()},
    }
    check, _ = _solve_once(ctx, compiled, fixed)
    short = sum(check.values.get("reserve_short", {}).values()) if check.has_plan else math.inf
    if short <= RESERVE_TOL * max(1.0, sum(ctx.reserve.values())):
        return res, read
    return _solve_once(ctx, compiled)


def _stationary_epoch(ctx: WindowContext, place: Iterable[int] | None) -> WindowContext | None:
    """The window's first epoch alone, when the window is that epoch held: no carried state (the
    warm start, no coupling into the first epoch), the same demand and inventory in every epoch,
    and only the first epoch to be placed (``formulations/horizon.md``, "Stationary first
    window"); None otherwise. Such a window's optimum is its first epoch's optimum held in every
    epoch: each epoch of the window is at least the epoch MILP on that demand (the coupling only
    adds rows), and holding one optimal epoch plan keeps every coupling row (no creation, no
    deletion, no shrinking, a load never above the count held)."""
    ts = list(ctx.epochs)
    if ctx.state is not None or len(ts) < 2 or place is None or set(place) - {ts[0]}:  # None: every epoch
        return None
    t0 = ts[0]
    if any(ctx.demand.get((b, t), 0.0) != ctx.demand.get((b, t0), 0.0) for b in ctx.buckets for t in ts[1:]):
        return None
    if any(ctx.reserve.get((b, t), 0.0) != ctx.reserve.get((b, t0), 0.0) for b in ctx.buckets for t in ts[1:]):
        return None
    chips = {c for c, _t in ctx.inventory}
    if any(ctx.inventory.get((c, t)) != ctx.inventory.get((c, t0)) for c in chips for t in ts[1:]):
        return None
    return replace(
        ctx,
        epochs=(t0,),
        demand={(b, t): v for (b, t), v in ctx.demand.items() if t == t0},
        inventory={(c, t): v for (c, t), v in ctx.inventory.items() if t == t0},
        reserve={(b, t): v for (b, t), v in ctx.reserve.items() if t == t0},
    )


def solve_with_tail(
    build: Callable[[dict[tuple[str, int], float]], WindowContext],
    demand: dict[tuple[str, int], float],
    epochs: list[int],
    commit: Iterable[int],
    tail_rate_rps: float | None,
    tokens: dict[str, float],
    compiled: CompiledWindows | None = None,
    ordinary: Iterable[str] = (),
) -> tuple[WindowContext, dict[int, EpochCommit], dict[str, Any], set[str]]:
    """A window solved under the tail rule (``formulations/horizon.md``, "Tail classes"): the
    classes below ``tail_rate_rps`` get no demand in the model in any epoch of the window
    (``alloc.tail.split_tail``) and are routed onto the held groups of the epochs of ``commit``
    (the window's later epochs are solved again before they are committed); the classes that find
    no room are planned as ordinary classes in a new solve (each pass adds at least one, as
    ``alloc.tail.plan_with_tail``). ``build`` makes the window's context for a demand;
    ``compiled`` as in :func:`solve_window`; the classes of ``ordinary`` are planned as ordinary
    demand from the first solve (:func:`kept_ordinary`). Returns the window's context, plans and
    solver info, and the classes planned as ordinary."""
    commit = sorted(set(commit))
    own = set(ordinary)
    while True:
        model_dem, tail = split_tail({k: r for k, r in demand.items() if k[0] not in own}, epochs, tail_rate_rps)
        ctx = build({**demand, **model_dem})
        routed = {t: tail[t] for t in commit if t in tail}
        plans, info, left = solve_window(ctx, place=commit, tail=routed, tokens=tokens, compiled=compiled)
        if not left:
            return ctx, plans, info, own
        own |= left


def kept_ordinary(commit: EpochCommit, own: set[str], configs: pd.DataFrame) -> set[str]:
    """The classes of ``own`` (tail classes planned as ordinary demand for want of room) that the
    committed epoch serves on vPods of their own: the next window plans them as ordinary classes
    from the start, on the capacity they hold anyway (as the auto-scalers' rule i), instead of
    trying a route that found no room and solving again."""
    if not own:
        return set()
    bucket = dict(zip(configs["config_id"], configs["bucket"].astype(str), strict=True))
    return {bucket[k] for k, r in commit.x.items() if r > 0 and k not in commit.routes and bucket[k] in own}


def loads_of(commit: EpochCommit, configs: pd.DataFrame) -> dict[str, float]:
    """u_{g,t} = sum_{k in g} r_k / c_k of a committed epoch (a routed configuration counts on the
    group it runs on)."""
    cap = dict(zip(configs["config_id"], configs["cap_rps"].astype(float), strict=True))
    grp = dict(zip(configs["config_id"], configs["group"], strict=True))
    out: dict[str, float] = {}
    for k, r in commit.x.items():
        g = commit.routes.get(k, grp[k])
        out[g] = out.get(g, 0.0) + r / cap[k]
    return out


def next_state(
    prev: State | None, commit: EpochCommit, configs: pd.DataFrame, inventory: dict[tuple[str, int], float], keep: int
) -> State:
    """The state after committing ``commit``: its counts, the loads of the last ``keep`` epochs."""
    loads = dict(prev.loads) if prev is not None else {}
    for g, u in loads_of(commit, configs).items():
        loads[(g, commit.epoch)] = u
    loads = {(g, t): u for (g, t), u in loads.items() if t > commit.epoch - keep}
    inv = {c: h for (c, t), h in inventory.items() if t == commit.epoch}
    return State(epoch=commit.epoch, n=dict(commit.n), loads=loads, inventory=inv)


def plan_full(
    coeffs: Coefficients,
    options: PlanOptions,
    params: HorizonParams,
    demand: dict[tuple[str, int], float] | None = None,
    inventory: dict[tuple[str, int], float] | None = None,
    method: str = "oracle",
    progress: Callable[[int], Any] | None = None,
) -> Solution:
    """One solve of the horizon model over every epoch (``demand`` default: the actual one)."""
    opts = horizon_options(options)
    epochs = coeffs.epochs
    dem = actual_demand(coeffs) if demand is None else demand
    inv = instance_inventory(coeffs) if inventory is None else inventory
    ctx, plans, info, _own = solve_with_tail(
        lambda d: build_window(coeffs, opts, params, epochs, d, inv),
        dem,
        list(epochs),
        epochs,
        tail_rate(opts),
        prompt_tokens(coeffs.buckets),
    )
    commits = [plans[t] for t in epochs]
    if progress is not None:
        progress(len(epochs))
    meta = {"window": len(epochs), "forecast": "oracle" if demand is None else "given", "solves": 1}
    return assemble(method, coeffs, opts, params, ctx.configs, commits, inv, meta, solver=info, verdict_options=options)


def plan_rolling(
    coeffs: Coefficients,
    options: PlanOptions,
    params: HorizonParams,
    forecast_method: str | None = None,
    window: int | None = None,
    inventory: dict[tuple[str, int], float] | None = None,
    method: str = "milp",
    progress: Callable[[int], Any] | None = None,
    bound: bool = False,
) -> Solution:
    """Rolling plan: for t = 0 .. E-1 solve epochs t .. t+H-1 on the forecast made before t, with
    the counts and loads committed before t as the initial state; commit epoch t. With ``bound``
    the plan carries the proven lower bound of :func:`relaxation_bound` (and its gap)."""
    opts = horizon_options(options)
    fc_method = forecast_method or params.forecast
    epochs = coeffs.epochs
    h = len(epochs) if window is None else int(window)
    inv = instance_inventory(coeffs) if inventory is None else inventory
    prep = prepare(coeffs, opts)
    keep = max(params.hold_epochs(float(coeffs.epoch_s)), 1)
    lim, tokens = tail_rate(opts), prompt_tokens(coeffs.buckets)
    actual = actual_demand(coeffs)
    # without coupling the epochs of a window are independent problems and only the first is
    # committed, so a window is solved as its first epoch alone: the same committed plan, without
    # the H - 1 copies that only make the search harder (formulations/horizon.md, "Rolling window")
    step = h if params.coupling else 1
    # every window's forecast is made from data before it, so all are known before the first solve
    # and the bound on the committed epochs' planned demand can be computed beside the windows
    pre = params.lead_s(float(coeffs.epoch_s)) > 0
    dems = [
        forecast_window(coeffs, fc_method, t, epochs[i : i + step], actual, prewarm=pre) for i, t in enumerate(epochs)
    ]
    # the oracle knows the demand: no room kept for a forecast's miss
    reserves = [
        reserve_window(coeffs, params, t, epochs[i : i + step], dem, actual, pre) if fc_method != "oracle" else {}
        for i, (t, dem) in enumerate(zip(epochs, dems, strict=True))
    ]
    early = None
    if bound:
        expected = {(b, t): v for t, dem in zip(epochs, dems, strict=True) for (b, e), v in dem.items() if e == t}
        early = BoundBeside.start(coeffs, options, params, expected, inv, prep)
    try:
        commits = _solve_windows(
            coeffs, opts, params, epochs, step, dems, inv, prep, keep, lim, tokens, progress, reserves
        )
        meta = {
            "window": h,
            "forecast": fc_method,
            "reserve_forecast": params.reserve_forecast if fc_method != "oracle" else None,
            "solves": len(epochs),
            "lead_s": params.lead_s(float(coeffs.epoch_s)),
        }
        sol = assemble(
            method,
            coeffs,
            opts,
            params,
            commits[-1][1].configs if commits else prep.configs,
            [c for c, _ in commits],
            inv,
            meta,
            penalty_per_req=prep.penalty_per_req,
            verdict_options=options,
        )
        if not bound or not commits or not math.isfinite(sol.objective_value):
            return sol
        planned = {(b, c.epoch): v for c, _ in commits for b, v in c.planned.items()}
        lb = early.get(planned) if early is not None else BoundBeside.UNUSED
    finally:
        if early is not None:  # ends the child whatever happened (after get: it has ended already)
            early.stop()
    if lb is BoundBeside.UNUSED:
        lb = relaxation_bound(coeffs, options, params, planned, inv, prep)
    if lb is None:
        return sol
    gap = max(0.0, sol.objective_value - lb) / max(abs(sol.objective_value), 1e-9)
    return replace(sol, bound=lb, gap=gap, meta={**sol.meta, "bound": RELAXATION_BOUND})


def _solve_windows(
    coeffs: Coefficients,
    opts: PlanOptions,
    params: HorizonParams,
    epochs: list[int],
    step: int,
    dems: list[dict[tuple[str, int], float]],
    inv: dict[tuple[str, int], float],
    prep: Any,
    keep: int,
    lim: float | None,
    tokens: dict[str, float],
    progress: Callable[[int], Any] | None,
    reserves: list[dict[tuple[str, int], float]] | None = None,
) -> list[tuple[EpochCommit, WindowContext]]:
    """The rolling plan's windows solved in turn (window i on the forecast ``dems[i]``); each
    committed epoch with the context of the window that committed it."""
    state: State | None = None
    commits: list[tuple[EpochCommit, WindowContext]] = []
    compiled = CompiledWindows()
    ordinary: set[str] = set()
    for i, t in enumerate(epochs):
        win = epochs[i : i + step]
        dem = dems[i]
        ctx, plans, info, own = solve_with_tail(
            lambda d, win=win, state=state, res=(reserves[i] if reserves else None): build_window(
                coeffs, opts.start_budget("per-window"), params, win, d, inv, state, prep, res
            ),
            dem,
            win,
            [t],
            lim,
            tokens,
            compiled,
            ordinary,
        )
        c = replace(plans[t], info=info)
        ordinary = kept_ordinary(c, own, ctx.configs)
        commits.append((c, ctx))
        state = next_state(state, c, ctx.configs, inv, keep)
        if progress is not None:
            progress(1)
    return commits


class BoundBeside:
    """:func:`relaxation_bound` of the demand a rolling plan will commit, computed in a forked
    process while this one solves the windows (``PlanOptions.jobs`` > 1, Linux, no other thread
    in this process, which is not itself a daemonic worker, no solver log or model file to write).
    The child holds the coefficients by the fork and sends one float back. :meth:`get` returns it
    when the plan committed exactly the demand it was computed for, else :attr:`UNUSED` (the
    caller then computes the bound itself), so the bound is the one the plan would compute
    in-process."""

    UNUSED: Any = object()

    def __init__(self, process: Any, conn: Any, planned: dict[tuple[str, int], float]) -> None:
        self._process, self._conn, self._planned = process, conn, planned

    @classmethod
    def start(
        cls,
        coeffs: Coefficients,
        options: PlanOptions,
        params: HorizonParams,
        planned: dict[tuple[str, int], float],
        inventory: dict[tuple[str, int], float],
        prepared: Any,
    ) -> BoundBeside | None:
        import multiprocessing
        import sys
        import threading

        if (
            int(options.jobs) < 2
            # the solver's log and the models written stay in this process, in their order
            or options.solver_log
            or options.save_lp
            or options.save_mps
            or not sys.platform.startswith("linux")
            or threading.active_count() > 1
            or multiprocessing.current_process().daemon
        ):
            return None
        ctx = multiprocessing.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)

        def child() -> None:
            try:
                out: Any = ("ok", relaxation_bound(coeffs, options, params, planned, inventory, prepared))
            except BaseException:  # the parent computes it again and reports what goes wrong
                out = ("failed", None)
            try:
                send.send(out)
            except OSError:  # the parent is gone
                pass

        sys.stdout.flush()  # the child flushes what it inherited when it ends: nothing must be pending
        sys.stderr.flush()
        proc = ctx.Process(target=child, daemon=True)
        proc.start()
        send.close()
        return cls(proc, recv, planned)

    def get(self, planned: dict[tuple[str, int], float]) -> Any:
        """The bound (a float or None, as :func:`relaxation_bound`), or :attr:`UNUSED`."""
        try:
            status, value = self._conn.recv()
        except (EOFError, OSError):
            status, value = "failed", None
        finally:
            self._conn.close()
            self._process.join()
        return value if status == "ok" and planned == self._planned else self.UNUSED

    def stop(self) -> None:
        """End the child, with or without its result (the plan failed or needs no bound); a second
        call, or one after :meth:`get`, does nothing more."""
        self._process.terminate()
        self._process.join()
        self._conn.close()


#: What the ``bound`` of a rolling plan is (``Solution.meta["bound"]``, ``formulations/horizon.md``).
RELAXATION_BOUND = "LP relaxation of the full-horizon model on the planned demand (with held_if_used)"


def relaxation_bound(
    coeffs: Coefficients,
    options: PlanOptions,
    params: HorizonParams,
    planned: dict[tuple[str, int], float],
    inventory: dict[tuple[str, int], float],
    prepared: Any = None,
    serve_all: bool = False,
) -> float | None:
    """A proven lower bound on the objective of every schedule that covers ``planned`` (the demand a
    rolling plan planned for, epoch by epoch) under the coupling rules: the optimum of the LP
    relaxation of the full-horizon model (every epoch, warm start at the first, the same
    coupling, inventory schedule, placement rows and penalty) on that demand, with the valid
    inequalities ``held_if_used`` (a group carrying traffic holds a vPod) that the integer model
    implies.

    A rolling plan's committed schedule is feasible for that model once each group's count is
    clipped to the model's upper bound (which costs no more, see ``n_vpods`` in the document), so
    the relaxation's optimum bounds its objective from below. One LP, no integer search. None when
    the LP does not solve to optimality (a spent time budget).

    Under the tail rule the LP covers the demand without the tail classes (the plan minus its tail
    routes is feasible for it: routes only add load to held groups) and each tail request adds the
    least it can cost, ``T min(min_k a_k, pen)`` over its class's configurations (served
    somewhere, or unserved).

    ``serve_all``: the bound over the schedules that serve all of ``planned`` (unserved demand fixed
    at 0, a tail request costing ``T min_k a_k``): the least objective of a plan that leaves nothing
    unserved, without the penalty. None also when no such schedule exists (the LP is infeasible:
    the fleet cannot cover the demand under the coupling rules)."""
    built = _full_horizon_model(coeffs, options, params, planned, inventory, prepared, relax=True)
    bound, res = _solved_bound(built, serve_all)
    return bound if res.status == "optimal" else None


@dataclass(frozen=True)
class HorizonBound:
    """What :func:`integer_bound` proved: ``value`` (the full-horizon MILP's proven bound plus the
    tail classes' least cost; None when the solve proved nothing: infeasible, or no bound), the
    solve's ``status``, ``incumbent`` (its best schedule's objective, tail added; NaN without one),
    ``gap`` and ``nodes``."""

    value: float | None
    status: str
    incumbent: float
    gap: float
    nodes: int


def integer_bound(
    coeffs: Coefficients,
    options: PlanOptions,
    params: HorizonParams,
    planned: dict[tuple[str, int], float],
    inventory: dict[tuple[str, int], float],
    serve_all: bool = False,
) -> HorizonBound:
    """The proven lower bound of the full-horizon *integer* model on ``planned`` (the model of
    :func:`relaxation_bound`, ``held_if_used`` included, with n integer), under the options' work
    and time limits: the solver's best bound when it stops, optimal or not, which is at least the
    LP relaxation's optimum and closes the vPod rounding the LP leaves open. ``serve_all`` as in
    :func:`relaxation_bound`. Costs a branch-and-bound search over every epoch at once, so it is
    meant for benchmarks' ceilings, not for the plan's reported bound."""
    built = _full_horizon_model(coeffs, options, params, planned, inventory, None, relax=False)
    bound, res = _solved_bound(built, serve_all)
    extra = 0.0 if bound is None or not math.isfinite(res.bound) else bound - float(res.bound)
    incumbent = float(res.objective) + extra if res.has_plan and math.isfinite(res.objective) else math.nan
    proven = bound is not None and math.isfinite(incumbent)
    gap = (incumbent - bound) / max(abs(incumbent), 1e-9) if proven else math.nan
    return HorizonBound(bound, res.status, incumbent, gap, int(res.nodes))


@dataclass(frozen=True)
class RatioBound:
    """What :func:`ratio_bound` proved: ``value``, an upper bound on output tokens served per
    objective unit (J, USD, kg) of every schedule that serves at least the given share of the
    requests (None: no such schedule), the share of requests and the tokens the maximiser of the
    relaxation serves, and the Dinkelbach iterations (LP solves) it took."""

    value: float | None
    served_share: float
    tokens: float
    iterations: int


def ratio_bound(
    coeffs: Coefficients,
    options: PlanOptions,
    params: HorizonParams,
    planned: dict[tuple[str, int], float],
    inventory: dict[tuple[str, int], float],
    tokens: dict[tuple[str, int], float],
    requests: dict[tuple[str, int], float],
    min_served: float,
    rel_tol: float = 1e-9,
    max_iterations: int = 50,
) -> RatioBound:
    """An upper bound on the output tokens served per objective unit of every schedule under the
    coupling rules that serves at least ``min_served`` of the requests (``formulations/horizon.md``,
    "Ratio ceiling").

    ``planned`` is the demand the model sizes for (req/s per class and epoch); ``tokens`` and
    ``requests`` are the offered output tokens and requests of each (class, epoch) (the trace's).
    A schedule that leaves s_{b,t} of d_{b,t} unserved is credited the share 1 - s/d of that
    class-epoch's tokens and requests (the model's accounting: what it sizes for a class, it
    serves in proportion). The largest ratio over the LP relaxation of the full-horizon model
    (``held_if_used`` added, the penalty replaced by the tokens lost) is found by Dinkelbach's
    iteration, lambda <- N(x)/D(x) with x minimising D - N / lambda, exact for a linear-fractional
    program; since every integer schedule is a point of the relaxation, its ratio is at most that
    value. Tail classes (no group of their own) count as served in the share and add their tokens
    where that raises the ratio, each at its least cost ``T min_k a_k``. Requests of a (class,
    epoch) the model sizes nothing for count as unserved. ``value`` is None when no schedule serves
    the share, an LP does not solve to optimality or the iteration does not converge within
    ``max_iterations``."""
    import pyomo.environ as pyo

    opts, ctx, m, tail = _full_horizon_model(coeffs, options, params, planned, inventory, None, relax=True)
    a_min = _least_cost_per_request(ctx)
    items = {  # tail class-epochs: (tokens, least cost)
        (b, t): (float(tokens.get((b, t), 0.0)), ctx.epoch_s * a_min.get(b, math.inf) * r)
        for t, rates in tail.items()
        for b, r in rates.items()
        if r > 0
    }
    lost = {k: float(tokens.get(k, 0.0)) / d for k, d in ctx.demand.items() if d > 0}
    share = {k: float(requests.get(k, 0.0)) / d for k, d in ctx.demand.items() if d > 0}
    total_req = float(sum(requests.values()))
    never = sum(v for k, v in requests.items() if k not in share and k not in items)  # sized for nothing
    budget = (1.0 - min_served) * total_req - never
    if total_req <= 0 or budget < -1e-9 * max(total_req, 1.0):
        return RatioBound(None, math.nan, math.nan, 0)
    m.served_share = pyo.Constraint(expr=sum(share[k] * m.unserved[k] for k in share) <= max(budget, 0.0))
    offered = sum(float(tokens.get(k, 0.0)) for k in share)
    base = m.served_term + m.held_term + m.reconfig_term
    lam, it, x_tokens, x_unserved = 0.0, 0, math.nan, math.nan
    while it < max_iterations:
        it += 1
        if lam > 0:
            expr = base + (1.0 / lam) * sum(lost[k] * m.unserved[k] for k in lost)
        else:  # the first point: the least objective at the share (lambda = infinity)
            expr = base
        m.total_objective.set_value(expr)
        res = solve_model(m, opts.start_budget("per-window"))
        if res.status != "optimal":
            return RatioBound(None, math.nan, math.nan, it)
        s = res.values.get("unserved", {})
        n_tok = offered - sum(lost[k] * s.get(k, 0.0) for k in lost)
        d_obj = float(pyo.value(base))
        picked = [(tk, c) for tk, c in items.values() if lam > 0 and tk - lam * c > 0]
        n_tok += sum(tk for tk, _c in picked)
        d_obj += sum(c for _tk, c in picked)
        if not d_obj > 0:
            return RatioBound(None, math.nan, math.nan, it)
        new = n_tok / d_obj
        x_tokens, x_unserved = n_tok, sum(share[k] * s.get(k, 0.0) for k in share)
        # F(lam) = min D - N / lam; F(lam) >= 0 (to tolerance) proves lam is the largest ratio
        if lam > 0 and new <= lam * (1.0 + rel_tol):
            break
        lam = new
    else:  # not converged: the last lambda is a ratio reached, not a bound
        return RatioBound(None, math.nan, math.nan, it)
    served = 1.0 - (x_unserved + never) / total_req
    return RatioBound(lam * (1.0 + rel_tol), served, x_tokens, it)


def _full_horizon_model(
    coeffs: Coefficients,
    options: PlanOptions,
    params: HorizonParams,
    planned: dict[tuple[str, int], float],
    inventory: dict[tuple[str, int], float],
    prepared: Any,
    relax: bool,
) -> tuple[PlanOptions, WindowContext, Any, dict]:
    """The full-horizon model of the bounds on ``planned`` without its tail classes (every epoch,
    warm start, ``held_if_used`` added; integrality relaxed when ``relax``): (the horizon options,
    the window context, the model, the tail classes by epoch)."""
    import pyomo.environ as pyo

    opts = horizon_options(options)
    model_dem, tail = split_tail(planned, list(coeffs.epochs), tail_rate(opts))
    ctx = build_window(coeffs, opts, params, list(coeffs.epochs), model_dem, inventory, None, prepared)
    m = build_model(ctx)
    add_held_if_used(m, ctx)
    if relax:
        pyo.TransformationFactory("core.relax_integer_vars").apply_to(m)
    return opts, ctx, m, tail


def _least_cost_per_request(ctx: WindowContext) -> dict[str, float]:
    """min_k a_k per class: the least objective a request of the class adds when served."""
    return ctx.configs.groupby("bucket")["var_obj_per_req"].min().astype(float).to_dict()


def _solved_bound(built: tuple[PlanOptions, WindowContext, Any, dict], serve_all: bool) -> tuple[float | None, Any]:
    """A model of :func:`_full_horizon_model` solved (unserved fixed at 0 when ``serve_all``): (its
    proven bound plus the tail classes' least cost, or None when there is none, and the solve's
    result)."""
    opts, ctx, m, tail = built
    if serve_all:
        for v in m.unserved.values():
            v.fix(0.0)
    res = solve_model(m, opts.start_budget("per-window"))
    if res.status == "infeasible" or not math.isfinite(res.bound):
        return None, res
    a_min = _least_cost_per_request(ctx)
    least = {b: min(a_min.get(b, math.inf), math.inf if serve_all else ctx.penalty_per_req) for b in ctx.buckets}
    if serve_all and any(math.isinf(least[b]) for rates in tail.values() for b, r in rates.items() if r > 0):
        return None, res
    tail_cost = sum(ctx.epoch_s * least[b] * r for rates in tail.values() for b, r in rates.items())
    return float(res.bound) + tail_cost, res


# ----------------------------------------------------------------------------------------------
# assembly


def _row(epoch: int, r: pd.Series, group: str, n: int, rate: float) -> dict[str, Any]:
    out = {"epoch": int(epoch), **{f: r[f] for f in ROW_FIELDS}}
    for f in ("chips_per_vpod", "tp", "pp", "ep", "batch"):
        out[f] = int(out[f])
    out.update(vpod_group=group, n_vpods=int(n), rate_rps=float(rate))
    return out


def commit_rows(commit: EpochCommit, configs: pd.DataFrame, groups_of: dict[str, str] | None = None) -> list[dict]:
    """Allocation rows of a committed epoch: one per configuration carrying traffic, plus one with
    rate 0 for a group that holds vPods without traffic. ``groups_of`` maps a configuration to the
    group key it runs on when that differs from its own (coalesced classes)."""
    cfg = configs.set_index("config_id", drop=False)
    groups_of = groups_of or {}
    rows = []
    seen: set[str] = set()
    for k in sorted(commit.x):
        if commit.x[k] <= 0:
            continue
        r = cfg.loc[k]
        g = groups_of.get(k, str(r["group"]))
        seen.add(g)
        rows.append(_row(commit.epoch, r, g, commit.n.get(g, 0), commit.x[k]))
    for g in sorted(commit.n):
        if commit.n[g] > 0 and g not in seen:
            r = configs[configs["group"] == g].iloc[0]
            rows.append(_row(commit.epoch, r, g, commit.n[g], 0.0))
    return rows


def assemble(
    method: str,
    coeffs: Coefficients,
    options: PlanOptions,
    params: HorizonParams,
    configs: pd.DataFrame,
    commits: list[EpochCommit],
    inventory: dict[tuple[str, int], float],
    meta: dict[str, Any],
    solver: dict[str, Any] | None = None,
    groups_of: dict[int, dict[str, str]] | None = None,
    penalty_per_req: float | None = None,
    verdict_options: PlanOptions | None = None,
) -> Solution:
    """Committed epochs -> :class:`Solution` with totals and epoch summaries from
    :func:`~neuscale_opt.horizon.evaluate.evaluate_schedule` on the planned demand.

    ``verdict_options`` (the user's options, before :func:`horizon_options`) are those the plan is
    judged by: unserved demand the user did not allow makes the plan ``infeasible``."""
    rows: list[dict[str, Any]] = []
    uns: list[dict[str, Any]] = []
    placed: list[dict[str, Any]] = []
    for c in commits:
        rows.extend(commit_rows(c, configs, {**c.routes, **(groups_of or {}).get(c.epoch, {})}))
        placed.extend(c.placements)
        uns.extend({"epoch": c.epoch, "bucket": b, "unserved_rps": v} for b, v in sorted(c.s.items()))
    alloc = tidy_allocations(pd.DataFrame(rows, columns=list(ALLOC_COLUMNS))) if rows else empty_allocations()
    unserved = tidy_unserved(pd.DataFrame(uns, columns=["epoch", "bucket", "unserved_rps"]))
    planned = pd.DataFrame(
        [(c.epoch, b, v) for c in commits for b, v in sorted(c.planned.items())],
        columns=["epoch", "bucket", "rate_rps"],
    )
    if penalty_per_req is None:
        penalty_per_req = prepare(coeffs, options).penalty_per_req
    status = worst_status(c.status for c in commits)
    if solver is None and status == "optimal":
        # every window was solved to optimality, but the committed schedule is not proven optimal
        # for the horizon (later windows see demand the earlier ones did not): no bound, no gap
        status = "feasible"
    draft = Solution(
        method=method,
        status=status,
        objective=options.objective,
        objective_value=math.nan,
        bound=math.nan,
        gap=math.nan,
        solve_seconds=0.0,
        allocations=alloc,
        unserved=unserved,
        placements=tidy_placements(placed),
        totals={},
        options=options,
        penalty_per_req=float(penalty_per_req),
        backend=options.backend if method in ("milp", "oracle") else None,
    )
    ev = evaluate_schedule(draft, coeffs, params, demand=planned, inventory=inventory)
    # the status is the worst of the solver's and the independent evaluator's verdict under the
    # user's options (the horizon model itself always prices unserved demand, see horizon_options)
    verdict = ev
    if verdict_options is not None and verdict_options != options:
        judged = Solution(**{**draft.__dict__, "options": verdict_options})
        verdict = evaluate_schedule(judged, coeffs, params, demand=planned, inventory=inventory, guard=False)
    if not verdict.feasible:
        draft = Solution(**{**draft.__dict__, **verdict_status(draft, verdict.violations)})
    actual = actual_demand(coeffs)
    chip_cols = [c for c in ev.by_epoch.columns if c.startswith("chips_")]
    epochs_out = []
    for c, rec in zip(commits, ev.by_epoch.to_dict(orient="records"), strict=True):
        epochs_out.append(
            {
                "epoch": c.epoch,
                "status": c.status,
                "forecast_rps": {b: float(v) for b, v in sorted(c.planned.items())},
                "actual_rps": {b: actual.get((b, c.epoch), 0.0) for b in sorted(c.planned)},
                "chips_by_generation": {k[len("chips_") :]: int(round(rec[k])) for k in chip_cols},
                "energy_j": float(rec["energy_j"]),
                "cost_usd": float(rec["cost_usd"]),
                "carbon_kg": float(rec["carbon_kg"]),
                "unserved_rps": float(rec["unserved_rps"]),
                "created_vpods": int(rec["created_vpods"]),
                "deleted_vpods": int(rec["deleted_vpods"]),
                **(
                    {
                        "reserve_rps": {b: float(r) for b, r in sorted(c.reserve.items())},
                        "reserve_kept_rps": {
                            b: max(float(r) - c.reserve_short.get(b, 0.0), 0.0) for b, r in sorted(c.reserve.items())
                        },
                    }
                    if c.reserve
                    else {}
                ),
                **({"window_gap": float(c.info["gap"])} if "gap" in c.info else {}),
                **({"window_nodes": int(c.info["nodes"])} if "nodes" in c.info else {}),
                **({"solve_seconds": float(c.info["solve_seconds"])} if "solve_seconds" in c.info else {}),
            }
        )
    if solver is not None:
        obj, bound = float(solver["objective_value"]), float(solver["bound"])
        gap = max(0.0, obj - bound) / max(abs(obj), 1e-9)
        seconds = float(solver["solve_seconds"])
    else:
        obj, bound, gap = ev.objective_value, math.nan, math.nan
        seconds = float(sum(c.info.get("solve_seconds", 0.0) for c in commits))
    totals = dict(ev.totals)
    totals["coupling_violations"] = len(ev.violations)
    full_meta = {
        **meta,
        "horizon": params.to_dict(),
        "evaluated_objective": float(ev.objective_value),
        "violations": list(ev.violations),
        "inventory": {f"{c}@{t}": (None if np.isinf(h) else float(h)) for (c, t), h in sorted(inventory.items())},
    }
    return Solution(
        **{
            **draft.__dict__,
            "objective_value": obj,
            "bound": bound,
            "gap": gap,
            "solve_seconds": seconds,
            "totals": totals,
            "epochs": tuple(epochs_out),
            "meta": full_meta,
        }
    )
