"""Planning methods, all returning a :class:`~neuscale_opt.alloc.solution.Solution`.

* :func:`solve_milp` - the epoch allocation MILP (``formulations/allocation.md``), one independent
  MILP per epoch;
* :func:`unlimited` - the same MILP with every inventory set to infinity (the reference plans are
  normalised against);
* :func:`greedy` - NeuScale's best-fit rule with fail-over;
* :func:`homogeneous` - one chip generation only (a given one, or the best of all);
* :func:`plan` - dispatch by method name.

Statuses: ``optimal`` (MILP proven within the gap), ``work_limit`` / ``time_limit`` (MILP stopped
by the work limit, deterministic, or by the wall-clock limit, with an incumbent, its gap reported),
``feasible`` (heuristic plan), ``infeasible`` (with a one-line diagnosis). A MILP stopped without
any incumbent raises :class:`~neuscale_opt.errors.TimeLimitError`.
Over several epochs the worst status wins, objective and bound are summed; a plan the independent
evaluator finds infeasible is ``infeasible`` whatever the solver said (:func:`verdict_status`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd
from pyomo.common.gc_manager import PauseGC

from neuscale_opt.alloc.context import EpochContext, build_context, diagnose, prepare, resolve_options
from neuscale_opt.alloc.evaluate import evaluate
from neuscale_opt.alloc.heuristics import EpochPlan, greedy_epoch, homogeneous_epoch
from neuscale_opt.alloc.model import build_model
from neuscale_opt.alloc.options import METHODS, PlanOptions
from neuscale_opt.alloc.placement import milp_placements, placed_counts, placement_rows, unplaceable_reason
from neuscale_opt.alloc.solution import (
    ALLOC_COLUMNS,
    Solution,
    allocations_table,
    empty_allocations,
    empty_unserved,
    tidy_placements,
    tidy_unserved,
    verdict_status,
    worst_status,
)
from neuscale_opt.alloc.solve import solve_model
from neuscale_opt.alloc.tail import plan_with_tail
from neuscale_opt.coefficients import Coefficients
from neuscale_opt.errors import InputError, TimeLimitError

# the configuration columns of a plan row (ALLOC_COLUMNS from bucket to config_id), then its group
_ROW_COLUMNS = (*ALLOC_COLUMNS[ALLOC_COLUMNS.index("bucket") : ALLOC_COLUMNS.index("config_id") + 1], "group")


def _rows(ctx: EpochContext, ep: EpochPlan) -> list[dict[str, Any]]:
    if not any(v > 0 for v in ep.x.values()) and not any(v > 0 for v in ep.n.values()):
        return []
    cfg = ctx.table("configs")
    records = list(zip(*(cfg[c].tolist() for c in _ROW_COLUMNS), strict=True))
    by_id = {r[10]: r for r in records}
    first_of_group: dict[Any, tuple[Any, ...]] = {}
    for r in records:
        first_of_group.setdefault(r[11], r)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for k in sorted(ep.x):
        if ep.x[k] <= 0:
            continue
        r = by_id[k]
        g = ep.groups.get(k, r[11])
        seen.add(g)
        rows.append({**_row(ctx.epoch, r, ep.n.get(g, 0), ep.x[k]), "vpod_group": g})
    for g in sorted(ep.n):
        if ep.n[g] > 0 and g not in seen:
            rows.append(_row(ctx.epoch, first_of_group[g], ep.n[g], 0.0))
    return rows


def _row(epoch: int, r: tuple[Any, ...], n: int, rate: float) -> dict[str, Any]:
    bucket, phase, chip, shape, chips, tp, pp, ep, batch, vtype, cid, group = r
    return {
        "epoch": epoch,
        "bucket": bucket,
        "phase": phase,
        "chip": chip,
        "shape": shape,
        "chips_per_vpod": int(chips),
        "tp": int(tp),
        "pp": int(pp),
        "ep": int(ep),
        "batch": int(batch),
        "vpod_type": vtype,
        "config_id": cid,
        "vpod_group": group,
        "n_vpods": int(n),
        "rate_rps": float(rate),
    }


def _assemble(
    method: str,
    coeffs: Coefficients,
    options: PlanOptions,
    per_epoch: list[tuple[EpochContext, EpochPlan, dict[str, Any]]],
    backend: str | None,
    use_solver_objective: bool,
    meta: dict[str, Any] | None = None,
) -> Solution:
    rows: list[dict[str, Any]] = []
    uns: list[dict[str, Any]] = []
    placed: list[dict[str, Any]] = []
    epochs: list[dict[str, Any]] = []
    diagnosis = None
    for ctx, ep, info in per_epoch:
        if ep.status != "infeasible":
            rows.extend(_rows(ctx, ep))
            placed.extend(placement_rows(ctx, ep.placements, ep.x))
            uns.extend({"epoch": ctx.epoch, "bucket": b, "unserved_rps": v} for b, v in sorted(ep.s.items()))
        elif diagnosis is None:
            diagnosis = ep.diagnosis
        epochs.append({"epoch": ctx.epoch, "status": ep.status, **info})
    status = worst_status(e["status"] for e in epochs)
    alloc = allocations_table(rows)
    unserved = empty_unserved()
    if uns:
        unserved = tidy_unserved(pd.DataFrame(uns, columns=["epoch", "bucket", "unserved_rps"]))
    seconds = float(sum(e.get("solve_seconds", 0.0) for e in epochs))
    draft = Solution(
        method=method,
        status=status,
        objective=options.objective,
        objective_value=math.nan,
        bound=math.nan,
        gap=math.nan,
        solve_seconds=seconds,
        allocations=alloc,
        unserved=unserved,
        totals={},
        options=options,
        penalty_per_req=float(options.unserved_penalty or 0.0),
        backend=backend,
        diagnosis=diagnosis,
        epochs=tuple(epochs),
        meta=dict(meta or {}),
        placements=tidy_placements(placed),
    )
    if status == "infeasible":
        return draft
    ev = evaluate(draft, coeffs)
    if not ev.feasible:  # a plan is feasible/optimal only if the independent evaluator agrees
        return Solution(**{**draft.__dict__, **verdict_status(draft, ev.violations), "totals": ev.totals})
    if use_solver_objective:
        obj = float(sum(e["objective_value"] for e in epochs))
        bound = float(sum(e["bound"] for e in epochs))
        gap = max(0.0, obj - bound) / max(abs(obj), 1e-9)
    else:
        obj, bound, gap = ev.objective_value, math.nan, math.nan
    return Solution(**{**draft.__dict__, "objective_value": obj, "bound": bound, "gap": gap, "totals": ev.totals})


def _milp_epoch(ctx: EpochContext, fixed: dict[str, int] | None = None) -> tuple[EpochPlan, dict[str, Any]]:
    opts = ctx.options
    if not opts.allow_unserved:
        reason = diagnose(ctx)
        if reason is not None:
            return EpochPlan({}, {}, {}, status="infeasible", diagnosis=reason), {"solve_seconds": 0.0}
    with PauseGC():  # the model's many small objects would trigger full collections while built and solved
        return _milp_solve(ctx, fixed)


def _milp_solve(ctx: EpochContext, fixed: dict[str, int] | None) -> tuple[EpochPlan, dict[str, Any]]:
    opts = ctx.options
    m = build_model(ctx)
    if fixed is not None:
        unusable = sorted(g for g, v in fixed.items() if v > 0 and g not in m.GROUPS)
        if unusable:
            reason = f"epoch {ctx.epoch}: the fixed vPods of group {unusable[0]!r} have no usable configuration"
            return EpochPlan({}, {}, {}, status="infeasible", diagnosis=reason), {"solve_seconds": 0.0}
        for g in m.GROUPS:
            m.n_vpods[g].setub(None)
            m.n_vpods[g].fix(int(fixed.get(g, 0)))
    res = solve_model(m, opts)
    info = res.info()
    if res.status == "no_incumbent":
        raise TimeLimitError(f"epoch {ctx.epoch}: {opts.no_plan_text(res.stopped_by)}")
    if res.status == "infeasible" and fixed is not None:
        reason = f"epoch {ctx.epoch}: the fixed vPods cannot carry the demand (or cannot be placed)"
        return EpochPlan({}, {}, {}, status="infeasible", diagnosis=reason), info
    if res.status == "infeasible":
        reason = _placement_diagnosis(ctx) if ctx.placement else None
        return EpochPlan({}, {}, {}, status="infeasible", diagnosis=reason or _joint_diagnosis(ctx)), info
    vals = res.values
    n = {str(g): int(round(v)) for g, v in vals.get("n_vpods", {}).items() if round(v) > 0}
    x = {str(k): max(v, 0.0) for k, v in vals.get("rate", {}).items() if v > 1e-9}
    s = {str(b): v for b, v in vals.get("unserved", {}).items() if v > 1e-9}
    placements = milp_placements(m, ctx, n) if ctx.placement else ()
    return EpochPlan(n=n, x=x, s=s, status=res.status, placements=placements), info


def _placement_diagnosis(ctx: EpochContext) -> str | None:
    """When counting chips alone would cover the demand, say which slices cannot be placed, and what
    the best placeable partial plan leaves unserved; ``None`` when the chip counts already fall short."""
    count_only = build_context_like(ctx, placement="none")
    res = solve_model(build_model(count_only), count_only.options)
    if not res.has_plan:
        return None
    n = {str(g): int(round(v)) for g, v in res.values.get("n_vpods", {}).items() if round(v) > 0}
    counts = placed_counts(ctx, n)
    held = ", ".join(f"{c} {k} x {s}" for (c, s), k in sorted(counts.items()))
    partial = _joint_diagnosis(ctx).split("; the best partial plan ", 1)
    tail = f"; the best placeable partial plan {partial[1]}" if len(partial) == 2 else ""
    return (
        f"epoch {ctx.epoch}: counting chips alone the inventory covers all classes "
        f"(with {held or 'no placed slices'}), but the slices cannot be placed: {unplaceable_reason(ctx, counts)}{tail}"
    )


#: Branch-and-bound nodes the joint-shortage diagnosis searches for its best partial plan (at most
#: the run's own ``node_limit``): its stop rule, a count and not a clock, so the diagnosis line is
#: the same on any machine at any load. Set by measurement (``benchmarks/bench_diagnosis.py``,
#: ``formulations/allocation.md``, "Solver limits"): the over-subscribed 36-class searches prove
#: their optimum in 121-378 nodes where that takes under 5 s, and the ones needing 1,083-2,055
#: nodes (9-11 s) are cut at this count with the LP bound reported.
DIAGNOSIS_NODE_LIMIT = 500

#: Wall-clock safety net of the diagnosis search (s; at most the run's own time limit): far above
#: what ``DIAGNOSIS_NODE_LIMIT`` nodes take on the measured cases, so that the node count binds
#: first. A search this clock stops is reported as such (the line may then differ between machines).
DIAGNOSIS_TIME_LIMIT_S = 60.0


def shortfall_bound(ctx: EpochContext) -> dict[str, float]:
    """The LP relaxation's least unserved rate per class (req/s; classes with none left out): the
    allocation model with unserved demand allowed, integer vPods and slices relaxed to reals and
    ``sum_b s_b`` minimised. Its total is a proven lower bound on what any plan leaves unserved
    (a positive total proves the epoch infeasible); its split over classes is one LP optimum."""
    import pyomo.environ as pyo

    relaxed = build_context_like(ctx, allow_unserved=True)
    m = build_model(relaxed)
    pyo.TransformationFactory("core.relax_integer_vars").apply_to(m)
    m.total_objective.deactivate()
    m.shortfall = pyo.Objective(expr=sum(m.unserved[b] for b in m.BUCKETS), sense=pyo.minimize)
    res = solve_model(m, relaxed.options)
    return {str(b): v for b, v in sorted(res.values.get("unserved", {}).items()) if v > 1e-9}


def diagnosis_limits(options: PlanOptions) -> tuple[int, float]:
    """(node limit, wall-clock safety net in s) of the joint-shortage diagnosis search under the
    run's ``options``: ``DIAGNOSIS_NODE_LIMIT`` and ``DIAGNOSIS_TIME_LIMIT_S``, each at most the
    run's own limit."""
    nodes = DIAGNOSIS_NODE_LIMIT if options.node_limit is None else min(DIAGNOSIS_NODE_LIMIT, options.node_limit)
    clock = DIAGNOSIS_TIME_LIMIT_S
    if options.time_limit_s is not None:
        clock = min(clock, float(options.time_limit_s))
    return nodes, clock


def _joint_diagnosis(ctx: EpochContext) -> str:
    """Every class fits alone, but not together: search the partial plan to say what is short (at
    most ``DIAGNOSIS_NODE_LIMIT`` nodes, the clock ``DIAGNOSIS_TIME_LIMIT_S`` only a safety net;
    when it stops unproven, the LP bound says how much is short for certain)."""
    nodes, clock = diagnosis_limits(ctx.options)
    relaxed = build_context_like(ctx, allow_unserved=True, node_limit=nodes, time_limit_s=clock)
    res = solve_model(build_model(relaxed), relaxed.options)
    short = {str(b): v for b, v in res.values.get("unserved", {}).items() if v > 1e-9}
    proven = res.status == "optimal"
    if proven:
        found, bound = "the best partial plan", ""
    elif res.stopped_by == "work_limit":
        found = f"the best partial plan found in {nodes} nodes"
        bound = _bound_note(ctx, f"search stopped at the work limit of {nodes} nodes, not proven minimal")
    else:
        found = f"the best partial plan found in {clock:g} s"
        net = f"the wall-clock safety net of {clock:g} s (may differ between machines)"
        bound = _bound_note(ctx, f"search stopped by {net}, not proven minimal")
    if not short:
        return f"epoch {ctx.epoch}: the solver found no plan covering all classes{bound}"
    total = sum(short.values())
    classes = ", ".join(f"{b!r} {v:.4g}" for b, v in sorted(short.items(), key=lambda kv: (-kv[1], kv[0])))
    full = _saturated_chips(relaxed, res.values.get("n_vpods", {}))
    return (
        f"epoch {ctx.epoch}: the inventory cannot cover all classes together; {found} "
        f"leaves {total:.4g} req/s unserved ({classes})" + (f" with {full} fully used" if full else "") + bound
    )


def _bound_note(ctx: EpochContext, stopped: str) -> str:
    lp = shortfall_bound(ctx)
    total = sum(lp.values())
    if total <= 1e-9:
        return f" ({stopped}; the LP relaxation covers every class)"
    worst = max(lp.items(), key=lambda kv: (kv[1], kv[0]))
    return f" ({stopped}; the LP relaxation proves at least {total:.4g} req/s short, e.g. {worst[0]!r} {worst[1]:.4g})"


def _saturated_chips(ctx: EpochContext, n: dict[Any, float]) -> str:
    used: dict[str, float] = {}
    for r in ctx.groups.itertuples():
        used[r.chip] = used.get(r.chip, 0.0) + round(n.get(r.group, 0.0)) * float(r.chips_per_vpod)
    full = []
    for c, u in sorted(used.items()):
        inv = ctx.inventory.get(c, math.inf)
        # saturated: not even the smallest vPod of this generation still fits
        smallest = ctx.groups.loc[ctx.groups["chip"] == c, "chips_per_vpod"].astype(float).min()
        if not math.isinf(inv) and inv - u < smallest:
            full.append(c)
    return " and ".join(full)


def build_context_like(ctx: EpochContext, **changes: Any) -> EpochContext:
    """A copy of ``ctx`` with some option fields changed (data tables shared, never modified)."""
    return ctx.replace(options=ctx.options.replace(**changes))


def _check(coeffs: Coefficients) -> None:
    if not isinstance(coeffs, Coefficients):
        raise InputError(f"expected Coefficients, got {type(coeffs).__name__}", where="plan")


def solve_milp(
    coeffs: Coefficients,
    options: PlanOptions | None = None,
    method: str = "milp",
    progress: Callable[[int], Any] | None = None,
    fixed_vpods: dict[int, dict[str, int]] | None = None,
) -> Solution:
    """The epoch allocation MILP, one independent solve per epoch (``progress(1)`` after each).

    ``fixed_vpods`` ({epoch: {group: vPods}}) holds the vPods of every group at the given counts
    (absent groups at 0) and only routes the demand over them: how a plan made for one scenario
    fares under another scenario's coefficients (a group the coefficients cannot use makes the
    epoch infeasible). Give it with ``prune_dominated=False`` so that no held group is pruned."""
    _check(coeffs)
    # the collector paused over the whole plan, not only each epoch's model (_milp_epoch): the
    # preparation, contexts and evaluation allocate enough to trigger collections of the whole
    # heap too; what is left (a few thousand cyclic objects per epoch) is collected after it
    with PauseGC():
        prep = prepare(coeffs, options or PlanOptions())  # resolves the default penalty on the way
        opts = prep.options
        per_epoch = []
        for e in coeffs.epochs:
            ctx = build_context(coeffs, opts.start_budget("per-window"), e, prep)
            if fixed_vpods is not None:  # the given vPods held fixed, demand routed over them (no tail rule)
                ep, info = _milp_epoch(ctx, dict(fixed_vpods.get(e, {})))
            else:
                ep, info = plan_with_tail(ctx, _milp_epoch)
            per_epoch.append((ctx, ep, info))
            if progress is not None:
                progress(1)
        return _assemble(method, coeffs, opts, per_epoch, opts.backend, use_solver_objective=True)


def unlimited(coeffs: Coefficients, options: PlanOptions | None = None) -> Solution:
    """The MILP without inventory limits: the reference the paper normalises against.

    Evaluate it against ``coeffs.with_unlimited_inventory()``: it may hold more chips than exist.
    """
    _check(coeffs)
    opts = resolve_options(coeffs, options or PlanOptions())
    return solve_milp(coeffs.with_unlimited_inventory(), opts, method="unlimited")


def greedy(coeffs: Coefficients, options: PlanOptions | None = None) -> Solution:
    """NeuScale's best-fit heuristic (see :mod:`neuscale_opt.alloc.heuristics`)."""
    _check(coeffs)
    prep = prepare(coeffs, options or PlanOptions())  # resolves the default penalty on the way
    opts = prep.options
    per_epoch = []
    for e in coeffs.epochs:
        ctx = build_context(coeffs, opts, e, prep)
        ep, info = plan_with_tail(ctx, lambda c: (greedy_epoch(c), {}))
        per_epoch.append((ctx, ep, info))
    return _assemble("greedy", coeffs, opts, per_epoch, None, use_solver_objective=False)


def homogeneous_one(coeffs: Coefficients, chip: str, options: PlanOptions | None = None) -> Solution:
    """The homogeneous baseline on generation ``chip`` only."""
    _check(coeffs)
    prep = prepare(coeffs, options or PlanOptions())  # resolves the default penalty on the way
    opts = prep.options
    per_epoch = []
    for e in coeffs.epochs:
        ctx = build_context(coeffs, opts, e, prep)
        ep, info = plan_with_tail(ctx, lambda c: (homogeneous_epoch(c, chip), {}))
        per_epoch.append((ctx, ep, info))
    return _assemble("homogeneous", coeffs, opts, per_epoch, None, use_solver_objective=False, meta={"chip": chip})


def homogeneous_all(coeffs: Coefficients, options: PlanOptions | None = None) -> dict[str, Solution]:
    """The homogeneous baseline on each generation that has configurations, by generation name."""
    chips = sorted(set(coeffs.configs["chip"].astype(str)))
    return {c: homogeneous_one(coeffs, c, options) for c in chips}


def homogeneous(coeffs: Coefficients, options: PlanOptions | None = None, chip: str | None = None) -> Solution:
    """The best single-generation plan (lowest objective, ties by name), or the one of ``chip``."""
    if chip is not None:
        return homogeneous_one(coeffs, chip, options)
    each = homogeneous_all(coeffs, options)
    ok = [(s.objective_value, c) for c, s in each.items() if s.has_plan]
    if ok:
        best = min(ok)[1]
        sol = each[best]
        return Solution(**{**sol.__dict__, "meta": {**sol.meta, "chip": best, "each": _summary(each)}})
    reasons = "; ".join(f"{c}: {s.diagnosis}" for c, s in sorted(each.items()))
    opts = resolve_options(coeffs, options or PlanOptions())
    return Solution(
        method="homogeneous",
        status="infeasible",
        objective=opts.objective,
        objective_value=math.nan,
        bound=math.nan,
        gap=math.nan,
        solve_seconds=0.0,
        allocations=empty_allocations(),
        unserved=tidy_unserved(pd.DataFrame()),
        totals={},
        options=opts,
        penalty_per_req=float(opts.unserved_penalty or 0.0),
        diagnosis=f"no single generation covers the demand ({reasons})" if each else "no configurations",
        meta={"each": _summary(each)},
    )


def _summary(each: dict[str, Solution]) -> dict[str, Any]:
    return {c: {"status": s.status, "objective_value": s.objective_value} for c, s in sorted(each.items())}


def plan(
    coeffs: Coefficients,
    options: PlanOptions | None = None,
    method: str = "milp",
    progress: Callable[[int], Any] | None = None,
) -> Solution:
    """Plan with ``method`` in ``milp``, ``greedy``, ``homogeneous``, ``unlimited``.

    ``progress`` (e.g. a progress bar's ``update``) is called once per solved epoch of the MILP."""
    if method not in METHODS:
        raise InputError(f"method must be one of {list(METHODS)}, got {method!r}", where="plan")
    if method == "milp":
        return solve_milp(coeffs, options, progress=progress)
    return {"greedy": greedy, "homogeneous": homogeneous, "unlimited": unlimited}[method](coeffs, options)
