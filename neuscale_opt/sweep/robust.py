"""The scenario-based robust allocation MILP: one set of vPods feasible in all K scenarios.

Per epoch, the model holds one block per scenario s, built by the allocation model's own builders
(:mod:`neuscale_opt.alloc.model`: sets, variables, every constraint family of
``formulations/allocation.md``, objective terms) from that scenario's coefficients, and links them
through the first-stage decision, the vPods held per vPod type (a generation's slice shape,
parallelism and batch: the hardware and how it is set up):

    sum_{g in G^s: type(g)=v} n^s_g = N_v      for every scenario s and vPod type v   (link)
    N_v = 0                                     for a type no group of some scenario has (link)
    min  sum_s w_s * total_objective^s          (w_s = 1/K: the expected objective)

Which classes share a type's vPods (the groups g of the type: one per class when dedicated, the
SLO-compatible clusters when pooled, which move with the SLO) is second stage, like the rates r^s_k,
the unserved demand and the placements: in every scenario the held vPods are split over its groups
and the demand re-routed over them. Solved through the one solver door
(:func:`neuscale_opt.alloc.solve.solve_model`). The per-scenario load bound on ``n_vpods`` (a
valid bound for one scenario's optimum only) is lifted; the inventory rows bound N. The vPod types
are those of the groups some scenario's dominance presolve keeps (:func:`_restricted`).

With one scenario and N given (``fixed``), the same model is the evaluation of a held plan in that
scenario (:func:`neuscale_opt.sweep.run.held_objective`), so the robust MILP's expected objective is
by construction the mean of its plan's held objectives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pyomo.environ as pyo

from neuscale_opt.alloc.context import (
    Prepared,
    build_context,
    diagnose,
    placed_pods,
    placement_data,
    prepare,
    resolve_options,
)
from neuscale_opt.alloc.model import CONSTRAINT_BUILDERS, add_objective, add_sets, add_variables
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.solution import worst_status
from neuscale_opt.alloc.solve import solve_model
from neuscale_opt.coefficients import Coefficients
from neuscale_opt.errors import InputError


@dataclass(frozen=True)
class RobustResult:
    """``vpods``: {epoch: {vPod type: N_v}}; objective / bound: the expected objective summed over
    the epochs; ``status`` the worst epoch's (``infeasible`` with ``diagnosis`` when no one plan
    fits); ``groups``: {epoch: {group: n_g}} of the first scenario's block (the split of the held
    vPods over its groups)."""

    status: str
    objective: float
    bound: float
    gap: float
    seconds: float
    vpods: dict[int, dict[str, int]] = field(default_factory=dict)
    diagnosis: str = ""
    scenarios: int = 0
    groups: dict[int, dict[str, int]] = field(default_factory=dict)


def group_types(ctx) -> dict[str, str]:
    """{group: its vPod type} of an epoch context."""
    g = ctx.configs[["group", "vpod_type"]].drop_duplicates("group")
    return dict(zip(g["group"].astype(str), g["vpod_type"].astype(str), strict=True))


def build_robust_model(ctxs: list, weights: list[float], fixed: dict[str, int] | None = None) -> pyo.ConcreteModel:
    """The scenario-based model of one epoch from the scenarios' epoch contexts (``fixed``: N_v
    given, absent types at 0)."""
    m = pyo.ConcreteModel(name=f"robust_allocation_epoch_{ctxs[0].epoch}")
    types_of = [group_types(c) for c in ctxs]
    types = sorted(set().union(*(set(t.values()) for t in types_of)) | set(fixed or {}))
    m.ALL_TYPES = pyo.Set(initialize=types, ordered=True)
    m.n_shared = pyo.Var(m.ALL_TYPES, domain=pyo.NonNegativeIntegers)
    if fixed is not None:
        for v in types:
            m.n_shared[v].fix(int(fixed.get(v, 0)))
    m.scenario = pyo.Block(range(len(ctxs)))
    members: dict[tuple[int, str], list[str]] = {}
    for s, ctx in enumerate(ctxs):
        b = m.scenario[s]
        add_sets(b, ctx)
        add_variables(b, ctx)
        for g in b.GROUPS:
            b.n_vpods[g].setub(None)
            members.setdefault((s, types_of[s][g]), []).append(g)
        for builder in CONSTRAINT_BUILDERS:
            builder(b, ctx)
        add_objective(b, ctx)
        b.total_objective.deactivate()
    pairs = [(s, v) for s in range(len(ctxs)) for v in types]

    def link(_m: pyo.ConcreteModel, s: int, v: str):
        b = _m.scenario[s]
        held = sum(b.n_vpods[g] for g in members.get((s, v), []))
        if isinstance(held, int) and _m.n_shared[v].fixed:
            return pyo.Constraint.Feasible if _m.n_shared[v].value == 0 else pyo.Constraint.Infeasible
        return held == _m.n_shared[v]

    m.LINK = pyo.Set(initialize=pairs, dimen=2, ordered=True)
    m.link = pyo.Constraint(m.LINK, rule=link)
    m.total_objective = pyo.Objective(
        expr=sum(w * m.scenario[s].total_objective.expr for s, w in enumerate(weights)), sense=pyo.minimize
    )
    return m


def _restricted(coeffs: list[Coefficients], opts: list[PlanOptions]) -> list[Prepared]:
    """Each scenario's configurations limited to the vPod types of the groups undominated in at
    least one scenario.

    Pruning dominated groups is exact for one scenario, not for all at once, so the blocks keep every
    configuration of a type some scenario's own presolve keeps (in every scenario where it is
    usable). Each scenario's optimum (planned with the presolve) holds only such types, and every
    configuration of them is in every block, so it stays a feasible point of this model wherever it
    is feasible in all scenarios: the robust optimum is no worse than any of them.
    """
    keep: set[str] = set()
    for c, o in zip(coeffs, opts, strict=True):
        keep |= set(map(str, prepare(c, o.replace(prune_dominated=True)).configs["vpod_type"]))
    out = []
    for c, o in zip(coeffs, opts, strict=True):
        full = prepare(c, o)
        cfg = full.configs[full.configs["vpod_type"].astype(str).isin(keep)].reset_index(drop=True)
        pods = placed_pods(c, o)
        out.append(replace(full, configs=cfg, placement=placement_data(pods, cfg) if pods and not cfg.empty else {}))
    return out


def robust_milp(
    coeffs: list[Coefficients],
    options: PlanOptions,
    weights: list[float] | None = None,
    fixed: dict[int, dict[str, int]] | None = None,
) -> RobustResult:
    """Minimum expected objective over the scenarios ``coeffs`` with one allocation for all.

    ``fixed`` ({epoch: {vPod type: N_v}}) holds the first stage at the given counts: the second
    stage alone is solved over every usable configuration (no presolve), the evaluation of a held
    plan."""
    if not coeffs:
        raise InputError("no scenarios", where="robust")
    k = len(coeffs)
    w = [1.0 / k] * k if weights is None else list(weights)
    epochs = coeffs[0].epochs
    if any(c.epochs != epochs for c in coeffs):
        raise InputError("the scenarios plan different epochs", where="robust")
    opts = [resolve_options(c, options.replace(prune_dominated=False)) for c in coeffs]
    preps = _restricted(coeffs, opts) if fixed is None else [prepare(c, o) for c, o in zip(coeffs, opts, strict=True)]
    vpods: dict[int, dict[str, int]] = {}
    groups: dict[int, dict[str, int]] = {}
    obj = bound = seconds = 0.0
    status = "optimal"
    for e in epochs:
        ctxs = [build_context(c, o, e, p) for c, o, p in zip(coeffs, opts, preps, strict=True)]
        for s, ctx in enumerate(ctxs):
            reason = None if ctx.options.allow_unserved else diagnose(ctx)
            if reason is None and fixed is not None:
                usable = set(group_types(ctx).values())
                lost = sorted(v for v, n in fixed.get(e, {}).items() if n > 0 and v not in usable)
                if lost:
                    reason = f"epoch {e}: the held vPods of type {lost[0]!r} have no usable configuration"
            if reason is not None:
                return RobustResult(
                    "infeasible", math.nan, math.nan, math.inf, seconds, {}, f"scenario {s}: {reason}", k
                )
        held = None if fixed is None else dict(fixed.get(e, {}))
        res = solve_model(build_robust_model(ctxs, w, held), opts[0])
        seconds += res.seconds
        if not res.has_plan:
            why = (
                f"no incumbent within {opts[0].limit_text(res.stopped_by)}"
                if res.status == "no_incumbent"
                else "no one plan fits all"
            )
            return RobustResult(res.status, math.nan, math.nan, math.inf, seconds, {}, f"epoch {e}: {why}", k)
        status = worst_status((status, res.status))
        obj += res.objective
        bound += res.bound
        n = {str(v): int(round(x)) for v, x in res.values.get("n_shared", {}).items() if round(x) > 0}
        if n:
            vpods[int(e)] = dict(sorted(n.items()))
        split = {str(g): int(round(x)) for g, x in res.values.get("scenario[0].n_vpods", {}).items() if round(x) > 0}
        if split:
            groups[int(e)] = dict(sorted(split.items()))
    gap = max(0.0, obj - bound) / max(abs(obj), 1e-9)
    return RobustResult(status, obj, bound, gap, seconds, vpods, "", k, groups)
