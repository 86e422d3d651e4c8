"""The scenario-based robust allocation MILP: one set of vPods feasible in all K scenarios.

Per epoch, the model holds one block per scenario s, built by the allocation model's own builders
(:mod:`neuscale_opt.alloc.model`: sets, variables, every constraint family of
``formulations/allocation.md``, objective terms) from that scenario's coefficients, and links them
through the first-stage decision, the vPods held per group:

    n_vpods^s_g = N_g                 for every scenario s and group g usable in s  (link)
    N_g = 0                           for a group some scenario cannot use          (link)
    min  sum_s w_s * total_objective^s      (w_s = 1/K: the expected objective)

The second stage (the rates r^s_k, the unserved demand, the placements) is each scenario's own, so
demand is re-routed over the held vPods in every scenario. Solved through the one solver door
(:func:`neuscale_opt.alloc.solve.solve_model`). The per-scenario load bound on ``n_vpods`` (a
valid bound for one scenario's optimum only) is lifted; the inventory rows bound N. The groups are
those some scenario's dominance presolve keeps (:func:`_restricted`).
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
from neuscale_opt.alloc.solve import solve_model
from neuscale_opt.coefficients import Coefficients
from neuscale_opt.errors import InputError


@dataclass(frozen=True)
class RobustResult:
    """``vpods``: {epoch: {group: N_g}}; objective / bound: the expected objective summed over the
    epochs; ``status`` the worst epoch's (``infeasible`` with ``diagnosis`` when no one plan fits)."""

    status: str
    objective: float
    bound: float
    gap: float
    seconds: float
    vpods: dict[int, dict[str, int]] = field(default_factory=dict)
    diagnosis: str = ""
    scenarios: int = 0


def build_robust_model(ctxs: list, weights: list[float]) -> pyo.ConcreteModel:
    """The scenario-based model of one epoch from the scenarios' epoch contexts."""
    m = pyo.ConcreteModel(name=f"robust_allocation_epoch_{ctxs[0].epoch}")
    groups = sorted(set().union(*(set(map(str, c.groups["group"])) for c in ctxs)))
    m.ALL_GROUPS = pyo.Set(initialize=groups, ordered=True)
    m.n_shared = pyo.Var(m.ALL_GROUPS, domain=pyo.NonNegativeIntegers)
    m.scenario = pyo.Block(range(len(ctxs)))
    for s, ctx in enumerate(ctxs):
        b = m.scenario[s]
        add_sets(b, ctx)
        add_variables(b, ctx)
        for g in b.GROUPS:
            b.n_vpods[g].setub(None)
        for builder in CONSTRAINT_BUILDERS:
            builder(b, ctx)
        add_objective(b, ctx)
        b.total_objective.deactivate()
    pairs = [(s, g) for s in range(len(ctxs)) for g in groups]

    def link(_m: pyo.ConcreteModel, s: int, g: str):
        b = _m.scenario[s]
        return (b.n_vpods[g] if g in b.GROUPS else 0) == _m.n_shared[g]

    m.LINK = pyo.Set(initialize=pairs, dimen=2, ordered=True)
    m.link = pyo.Constraint(m.LINK, rule=link)
    m.total_objective = pyo.Objective(
        expr=sum(w * m.scenario[s].total_objective.expr for s, w in enumerate(weights)), sense=pyo.minimize
    )
    return m


def _restricted(coeffs: list[Coefficients], opts: list[PlanOptions]) -> list[Prepared]:
    """Each scenario's configurations limited to the groups undominated in at least one scenario.

    Pruning dominated groups is exact for one scenario, not for all at once, so the blocks keep every
    group some scenario's own presolve keeps (in every scenario where it is usable). Each scenario's
    optimum (planned with the presolve) uses only such groups, so it stays a feasible point of this
    model wherever it is feasible in all scenarios: the robust optimum is no worse than any of them.
    """
    keep: set[str] = set()
    for c, o in zip(coeffs, opts, strict=True):
        keep |= set(map(str, prepare(c, o.replace(prune_dominated=True)).configs["group"]))
    out = []
    for c, o in zip(coeffs, opts, strict=True):
        full = prepare(c, o)
        cfg = full.configs[full.configs["group"].astype(str).isin(keep)].reset_index(drop=True)
        pods = placed_pods(c, o)
        out.append(replace(full, configs=cfg, placement=placement_data(pods, cfg) if pods and not cfg.empty else {}))
    return out


def robust_milp(coeffs: list[Coefficients], options: PlanOptions, weights: list[float] | None = None) -> RobustResult:
    """Minimum expected objective over the scenarios ``coeffs`` with one allocation for all."""
    if not coeffs:
        raise InputError("no scenarios", where="robust")
    k = len(coeffs)
    w = [1.0 / k] * k if weights is None else list(weights)
    epochs = coeffs[0].epochs
    if any(c.epochs != epochs for c in coeffs):
        raise InputError("the scenarios plan different epochs", where="robust")
    opts = [resolve_options(c, options.replace(prune_dominated=False)) for c in coeffs]
    preps = _restricted(coeffs, opts)
    vpods: dict[int, dict[str, int]] = {}
    obj = bound = seconds = 0.0
    status = "optimal"
    for e in epochs:
        ctxs = [build_context(c, o, e, p) for c, o, p in zip(coeffs, opts, preps, strict=True)]
        for s, ctx in enumerate(ctxs):
            reason = None if ctx.options.allow_unserved else diagnose(ctx)
            if reason is not None:
                return RobustResult(
                    "infeasible", math.nan, math.nan, math.inf, seconds, {}, f"scenario {s}: {reason}", k
                )
        res = solve_model(build_robust_model(ctxs, w), opts[0])
        seconds += res.seconds
        if not res.has_plan:
            why = "no incumbent within the time limit" if res.status == "no_incumbent" else "no one plan fits all"
            return RobustResult(res.status, math.nan, math.nan, math.inf, seconds, {}, f"epoch {e}: {why}", k)
        if res.status != "optimal":
            status = res.status
        obj += res.objective
        bound += res.bound
        n = {str(g): int(round(v)) for g, v in res.values.get("n_shared", {}).items() if round(v) > 0}
        if n:
            vpods[int(e)] = dict(sorted(n.items()))
    gap = max(0.0, obj - bound) / max(abs(obj), 1e-9)
    return RobustResult(status, obj, bound, gap, seconds, vpods, "", k)
