"""The epoch allocation MILP as a Pyomo model (spec: ``formulations/allocation.md``).

Every Pyomo component carries the ID the formulation document gives it; one builder
``add_<id>(model, ctx)`` per constraint family, each returning early when its index set is empty.
The model is built from an :class:`~neuscale_opt.alloc.context.EpochContext` only; solving happens
in :mod:`neuscale_opt.alloc.solve`, the one module that talks to solvers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pyomo.environ as pyo
from pyomo.core.expr.numeric_expr import LinearExpression, MonomialTermExpression

from neuscale_opt.alloc.context import EpochContext
from neuscale_opt.topology.milp import add_placement_constraints


class _Rows:
    """The context's configuration and group columns as plain lists (read once per model: the
    builders then index dicts, not data frames)."""

    def __init__(self, ctx: EpochContext) -> None:
        cfg, grp = ctx.table("configs"), ctx.table("groups")
        self.ids = [str(k) for k in cfg["config_id"].tolist()]
        self.bucket = [str(b) for b in cfg["bucket"].tolist()]
        self.phase = [str(p) for p in cfg["phase"].tolist()]
        self.group = [str(g) for g in cfg["group"].tolist()]
        self.cap = [float(c) for c in cfg["cap_rps"].tolist()]
        self.a = dict(zip(self.ids, (float(x) for x in cfg["var_obj_per_req"].tolist()), strict=True))
        self.groups = [str(g) for g in grp["group"].tolist()]
        self.g_chip = dict(zip(self.groups, (str(c) for c in grp["chip"].tolist()), strict=True))
        self.g_chips = dict(zip(self.groups, (float(c) for c in grp["chips_per_vpod"].tolist()), strict=True))
        self.h = dict(zip(self.groups, (float(x) for x in grp["held_obj_per_vpod"].tolist()), strict=True))
        self.bucket_of = dict(zip(self.ids, self.bucket, strict=True))


#: The plain view of the last context a model was built from (each builder reads it).
_LAST_ROWS: list[tuple[EpochContext, _Rows]] = []


def _rows(m: pyo.ConcreteModel, ctx: EpochContext) -> _Rows:
    if not _LAST_ROWS or _LAST_ROWS[0][0] is not ctx:
        _LAST_ROWS[:] = [(ctx, _Rows(ctx))]
    return _LAST_ROWS[0][1]


def _linear(coefs: list[float], variables: list) -> LinearExpression | float:
    """``sum_i coefs[i] * variables[i]`` built directly as one linear expression node of monomial
    terms (no operator overloading per term, and not the keyword form, which checks its lists);
    0.0 when there are no terms."""
    if not variables:
        return 0.0
    return LinearExpression(list(map(MonomialTermExpression, zip(coefs, variables, strict=True))))


#: Attribute of a model built here holding its rows as the builders made them (see
#: :func:`neuscale_opt.alloc.solve.recorded_form`): ``{"rows": {family: [(variables, coefs, lo,
#: hi), ...]}, "objective": (component, [(variable, coef), ...])}``, rows in construction order.
ROWS_ATTR = "_built_rows"


def _family(m: pyo.ConcreteModel, name: str) -> list:
    """The recorded rows of constraint family ``name`` (a fresh list, filled by its rule)."""
    if ROWS_ATTR not in m.__dict__:
        m.__dict__[ROWS_ATTR] = {"rows": {}, "objective": None}
    rec = m.__dict__[ROWS_ATTR]
    out: list = []
    if rec is not None:
        rec["rows"][name] = out
    return out


def _eq(rec: list, coefs: list[float], variables: list, rhs: float):
    """The row ``sum coefs * variables == rhs``, recorded in ``rec``."""
    rec.append((variables, coefs, rhs, rhs))
    return _linear(coefs, variables) == rhs


def _le(rec: list, coefs: list[float], variables: list, ub: float):
    """The row ``sum coefs * variables <= ub``, recorded in ``rec``."""
    rec.append((variables, coefs, None, ub))
    return _linear(coefs, variables) <= ub


def _unrecorded(m: pyo.ConcreteModel) -> None:
    """Void the record (a family made a row it could not record: the model is compiled instead)."""
    m.__dict__[ROWS_ATTR] = None


def add_sets(m: pyo.ConcreteModel, ctx: EpochContext) -> None:
    """Index sets, all sorted so that the model (and the plan) is the same run to run.

    * ``CONFIGS`` (K): usable configurations (vPod type x class) of demanded classes;
    * ``GROUPS`` (G): vPod groups (a configuration when dedicated, a vPod type when pooled);
    * ``COVER`` (B x P): demanded (class, phase) pairs;
    * ``BUCKETS`` (B): demanded classes;
    * ``CHIPS`` (C): generations with a finite inventory and at least one usable configuration;
    * ``PLACED_SHAPES`` (C^pl x S): (generation, canonical shape) pairs of the groups of the placed
      generations (only when something is placed).
    """
    rows = _rows(m, ctx)
    m.CONFIGS = pyo.Set(initialize=sorted(rows.ids), ordered=True)
    m.GROUPS = pyo.Set(initialize=sorted(rows.groups), ordered=True)
    m.COVER = pyo.Set(initialize=ctx.cover, dimen=2, ordered=True)
    m.BUCKETS = pyo.Set(initialize=ctx.buckets, ordered=True)
    finite = sorted(c for c in set(rows.g_chip.values()) if not math.isinf(ctx.inventory.get(c, math.inf)))
    m.CHIPS = pyo.Set(initialize=finite, ordered=True)
    if ctx.options.bounds:
        m.BOUNDS = pyo.Set(initialize=[metric for metric, _ in ctx.options.bounds], ordered=True)
    placed = _placed_members(ctx)
    if placed:
        m.PLACED_SHAPES = pyo.Set(initialize=sorted(placed), dimen=2, ordered=True)


def _placed_members(ctx: EpochContext) -> dict[tuple[str, str], list[str]]:
    """(generation, canonical shape) -> the groups of that generation and shape, for the placed
    generations (empty when nothing is placed)."""
    if not ctx.placement or ctx.options.placement == "none":
        return {}
    out: dict[tuple[str, str], list[str]] = {}
    for r in ctx.groups.itertuples():
        if str(r.chip) in ctx.placement:
            out.setdefault((str(r.chip), str(r.placed_shape)), []).append(str(r.group))
    return {k: sorted(v) for k, v in out.items()}


def add_variables(m: pyo.ConcreteModel, ctx: EpochContext) -> None:
    """``n_vpods`` (integer vPods per group), ``rate`` (req/s per configuration) and, when enabled,
    ``unserved`` (req/s per class) and ``slices`` (integer slices per configuration).

    Bounds (valid, they cut no optimal plan): r_k <= d_b(k); n_g <= ceil(sum_{k in g} d_b(k) / c_k)
    and n_g <= floor(H_c / chips_g) for a finite inventory.
    """
    rows = _rows(m, ctx)
    rate_ub = {k: ctx.bucket_rate[b] for k, b in zip(rows.ids, rows.bucket, strict=True)}
    load_ub: dict[str, float] = {}
    for g, b, cap in zip(rows.group, rows.bucket, rows.cap, strict=True):
        load_ub[g] = load_ub.get(g, 0.0) + ctx.bucket_rate[b] / cap
    n_ub: dict[str, float] = {}
    for g in m.GROUPS:
        ub = math.ceil(load_ub[g] - 1e-9)
        inv = ctx.inventory.get(rows.g_chip[g], math.inf)
        if not math.isinf(inv):
            ub = min(ub, math.floor(inv / rows.g_chips[g] + 1e-9))
        n_ub[g] = max(ub, 0)
    m.n_vpods = pyo.Var(m.GROUPS, domain=pyo.NonNegativeIntegers, bounds={g: (0, n_ub[g]) for g in m.GROUPS})
    m.rate = pyo.Var(m.CONFIGS, domain=pyo.NonNegativeReals, bounds={k: (0, rate_ub[k]) for k in m.CONFIGS})
    if ctx.options.allow_unserved:
        bounds = {b: (0, ctx.bucket_rate[b]) for b in m.BUCKETS}
        m.unserved = pyo.Var(m.BUCKETS, domain=pyo.NonNegativeReals, bounds=bounds)
    if ctx.options.slice_factor is not None:
        s = int(ctx.options.slice_factor)
        m.slices = pyo.Var(m.CONFIGS, domain=pyo.NonNegativeIntegers, bounds=(0, s))
        if ctx.options.allow_unserved:
            m.unserved_slices = pyo.Var(m.BUCKETS, domain=pyo.NonNegativeIntegers, bounds=(0, s))


def add_demand_coverage(m: pyo.ConcreteModel, ctx: EpochContext) -> None:
    """**Constraint Name**: demand_coverage

    **Enforced Over**: COVER (class b, phase p)

    Every demanded class is served in every phase of the serving mode, or declared unserved:

        sum_{k in K: b(k)=b, p(k)=p} r_k + s_b = d_b

    (``s_b`` is absent unless unserved demand is allowed). When disaggregated, the prefill and the
    decode phase of a class are each covered and share the same unserved rate.
    """
    if len(m.COVER) == 0:
        return
    rows = _rows(m, ctx)
    members: dict[tuple[str, str], list[str]] = {bp: [] for bp in ctx.cover}
    for k, b, p in zip(rows.ids, rows.bucket, rows.phase, strict=True):
        members[(b, p)].append(k)
    rate = dict(m.rate.items())
    unserved = dict(m.unserved.items()) if hasattr(m, "unserved") else None
    rec = _family(m, "demand_coverage")
    infeasible = []

    def rule(_m: pyo.ConcreteModel, b: str, p: str):
        terms = [rate[k] for k in members[(b, p)]]
        if unserved is not None:
            terms.append(unserved[b])
        if not terms:
            infeasible.append((b, p))
            return pyo.Constraint.Infeasible
        return _eq(rec, [1.0] * len(terms), terms, ctx.demand[(b, p)])

    m.demand_coverage = pyo.Constraint(m.COVER, rule=rule)
    if infeasible:
        _unrecorded(m)


def add_vpod_capacity(m: pyo.ConcreteModel, ctx: EpochContext) -> None:
    """**Constraint Name**: vpod_capacity

    **Enforced Over**: GROUPS

    A group's vPods carry their classes' rates at most up to the capped sustainable rate:

        sum_{k in K: g(k)=g} r_k / c_k <= n_g,   c_k = u * mu'_k

    Dedicated: one term (r_k <= c_k n_k). Pooled: the fractional loads of all classes on the vPod
    type add up (Mélange's load model).
    """
    if len(m.GROUPS) == 0:
        return
    rows = _rows(m, ctx)
    members: dict[str, list[tuple[str, float]]] = {g: [] for g in m.GROUPS}
    for k, g, c in zip(rows.ids, rows.group, rows.cap, strict=True):
        members[g].append((k, c))
    rate = dict(m.rate.items())
    n = dict(m.n_vpods.items())
    rec = _family(m, "vpod_capacity")

    def rule(_m: pyo.ConcreteModel, g: str):
        terms = members[g]
        return _le(rec, [1.0 / c for _k, c in terms] + [-1.0], [rate[k] for k, _c in terms] + [n[g]], 0.0)

    m.vpod_capacity = pyo.Constraint(m.GROUPS, rule=rule)


def add_chip_inventory(m: pyo.ConcreteModel, ctx: EpochContext) -> None:
    """**Constraint Name**: chip_inventory

    **Enforced Over**: CHIPS (generations with a finite inventory)

    The vPods held of a generation fit in its healthy chips:

        sum_{g in G: chip(g)=c} chips_g * n_g <= H_c
    """
    if len(m.CHIPS) == 0:
        return
    rows = _rows(m, ctx)
    members: dict[str, list[tuple[str, float]]] = {c: [] for c in m.CHIPS}
    for g in rows.groups:
        if rows.g_chip[g] in members:
            members[rows.g_chip[g]].append((g, rows.g_chips[g]))
    n = dict(m.n_vpods.items())
    rec = _family(m, "chip_inventory")

    def rule(_m: pyo.ConcreteModel, c: str):
        if not members[c]:
            return 0.0 <= ctx.inventory[c]
        return _le(rec, [w for _g, w in members[c]], [n[g] for g, _w in members[c]], ctx.inventory[c])

    m.chip_inventory = pyo.Constraint(m.CHIPS, rule=rule)


def add_placement(m: pyo.ConcreteModel, ctx: EpochContext) -> None:
    """**Constraint Name**: placement

    **Enforced Over**: PLACED_SHAPES (generations given as pods, with a finite inventory)

    The vPods chosen per generation c and canonical slice shape s must fit the pods at aligned,
    disjoint, healthy positions. The count

        placed_vpods[c, s] = N[c, s] = sum_{g in G: chip(g)=c, s(g)=s} n_g

    feeds the block ``placement`` built by
    :func:`neuscale_opt.topology.milp.add_placement_constraints` with the variant
    ``options.placement``: ``pattern`` (integer pods per packing pattern of each distinct pod state,
    symmetry-free) or ``exact`` (a binary per aligned position, small fleets). The block's components
    are specified in ``formulations/placement.md`` section 4. ``chip_inventory`` stays: it is implied
    for placed generations but keeps the LP relaxation tight and the counting rows readable.
    """
    if not hasattr(m, "PLACED_SHAPES"):
        return
    members = _placed_members(ctx)
    m.placed_vpods = pyo.Expression(m.PLACED_SHAPES, rule=lambda _m, c, s: sum(_m.n_vpods[g] for g in members[c, s]))
    counts = {k: m.placed_vpods[k] for k in m.PLACED_SHAPES}
    data = {c: d for c, d in ctx.placement.items() if any(k[0] == c for k in counts)}
    add_placement_constraints(m, counts, data, variant=ctx.options.placement, name="placement")


def add_slice_assignment(m: pyo.ConcreteModel, ctx: EpochContext) -> None:
    """**Constraint Name**: slice_assignment

    **Enforced Over**: CONFIGS (and BUCKETS for unserved slices), only when a slice factor S is set

    A class's rate is cut in S equal slices, each served by one group (Mélange's slices):

        r_k = (d_b(k) / S) * z_k,   z_k in {0..S};   s_b = (d_b / S) * z^s_b
    """
    if not hasattr(m, "slices"):
        return
    s = int(ctx.options.slice_factor or 1)
    bucket_of = _rows(m, ctx).bucket_of
    rate, slices = dict(m.rate.items()), dict(m.slices.items())
    rec = _family(m, "slice_assignment")

    def rule(_m: pyo.ConcreteModel, k: str):
        return _eq(rec, [1.0, -(ctx.bucket_rate[bucket_of[k]] / s)], [rate[k], slices[k]], 0.0)

    m.slice_assignment = pyo.Constraint(m.CONFIGS, rule=rule)
    if hasattr(m, "unserved_slices"):
        unserved, unserved_slices = dict(m.unserved.items()), dict(m.unserved_slices.items())
        rec_u = _family(m, "unserved_slice_assignment")

        def rule_u(_m: pyo.ConcreteModel, b: str):
            return _eq(rec_u, [1.0, -(ctx.bucket_rate[b] / s)], [unserved[b], unserved_slices[b]], 0.0)

        m.unserved_slice_assignment = pyo.Constraint(m.BUCKETS, rule=rule_u)


def add_slice_linking(m: pyo.ConcreteModel, ctx: EpochContext) -> None:
    """**Constraint Name**: slice_linking

    **Enforced Over**: CONFIGS with c_k > d_b(k), only when a slice factor S >= 2 is set

    A group without vPods takes no slice of any class (the disaggregated linking rows of facility
    location, a valid inequality):

        r_k <= d_b(k) * n_g(k)

    Every plan satisfies it (r_k <= d_b(k), and r_k > 0 needs n_g(k) >= 1 by ``vpod_capacity``),
    so the feasible plans and the optimum are those without it; it only tightens the LP relaxation,
    where a group could otherwise be opened by a sliver per class. Where c_k <= d_b(k) it is implied
    by ``vpod_capacity`` (r_k <= c_k n_g) and left out. With S = 1 (binary slices) the rows are
    not added: the plans of S = 1 stay those of the model without them (among equal-cost optima
    HiGHS may return another one with them, e.g. on the shipped Mélange example).
    """
    if not hasattr(m, "slices") or int(ctx.options.slice_factor or 1) < 2:
        return
    rows = _rows(m, ctx)
    rate, n = dict(m.rate.items()), dict(m.n_vpods.items())
    link = {
        k: (g, ctx.bucket_rate[b])
        for k, b, g, c in zip(rows.ids, rows.bucket, rows.group, rows.cap, strict=True)
        if c > ctx.bucket_rate[b]
    }
    if not link:
        return
    rec = _family(m, "slice_linking")

    def rule(_m: pyo.ConcreteModel, k: str):
        if k not in link:
            return pyo.Constraint.Skip
        g, d = link[k]
        return _le(rec, [1.0, -d], [rate[k], n[g]], 0.0)

    m.slice_linking = pyo.Constraint(m.CONFIGS, rule=rule)


def add_objective_bound(m: pyo.ConcreteModel, ctx: EpochContext) -> None:
    """**Constraint Name**: objective_bound

    **Enforced Over**: BOUNDS (metrics bounded by ``options.bounds``, an epsilon constraint)

    Another objective's total of the epoch stays within its limit eps_m while ``total_objective``
    is minimised (objective units of metric m: J, USD or kgCO2e):

        T * sum_k a^m_k r_k + sum_g h^m_g n_g <= eps_m
    """
    if not hasattr(m, "BOUNDS"):
        return
    t = ctx.epoch_s
    limit = dict(ctx.options.bounds)
    cfg, grp = ctx.configs, ctx.groups

    def rule(_m: pyo.ConcreteModel, metric: str):
        a = dict(zip(cfg["config_id"], cfg[f"bound_{metric}_per_req"], strict=True))
        h = dict(zip(grp["group"], grp[f"bound_{metric}_held"], strict=True))
        served = sum(t * float(a[k]) * _m.rate[k] for k in _m.CONFIGS if float(a[k]) != 0.0)
        held = sum(float(h[g]) * _m.n_vpods[g] for g in _m.GROUPS if float(h[g]) != 0.0)
        expr = served + held
        if isinstance(expr, (int, float)):
            return pyo.Constraint.Feasible if expr <= limit[metric] else pyo.Constraint.Infeasible
        return expr <= limit[metric]

    m.objective_bound = pyo.Constraint(m.BOUNDS, rule=rule)


def add_objective(m: pyo.ConcreteModel, ctx: EpochContext) -> None:
    """Expressions ``served_term``, ``held_term``, ``unserved_term`` and the Objective
    ``total_objective`` (their sum, minimised), in objective units over the epoch of T seconds:

        served_term   = T * sum_k a_k r_k
        held_term     = sum_g h_g n_g
        unserved_term = T * pen * sum_b s_b

    a_k and h_g depend on the objective (energy, cost, carbon); see the formulation.
    """
    t = ctx.epoch_s
    rows = _rows(m, ctx)
    a, h = rows.a, rows.h
    rate, n = dict(m.rate.items()), dict(m.n_vpods.items())
    served = [k for k in m.CONFIGS if a[k] != 0.0]
    held = [g for g in m.GROUPS if h[g] != 0.0]
    m.served_term = pyo.Expression(expr=_linear([t * a[k] for k in served], [rate[k] for k in served]))
    m.held_term = pyo.Expression(expr=_linear([h[g] for g in held], [n[g] for g in held]))
    if hasattr(m, "unserved"):
        uns = dict(m.unserved.items())
        pen = t * ctx.penalty_per_req
        m.unserved_term = pyo.Expression(expr=_linear([pen] * len(m.BUCKETS), [uns[b] for b in m.BUCKETS]))
    else:
        m.unserved_term = pyo.Expression(expr=0.0)
    m.total_objective = pyo.Objective(expr=m.served_term + m.held_term + m.unserved_term, sense=pyo.minimize)
    rec = m.__dict__.get(ROWS_ATTR)
    if rec is not None:
        terms = [(rate[k], t * a[k]) for k in served] + [(n[g], h[g]) for g in held]
        if hasattr(m, "unserved"):
            terms += [(uns[b], pen) for b in m.BUCKETS]
        rec["objective"] = (m.total_objective, terms)


#: Constraint-family builders in build order (each ``add_<ID>`` creates the component ``<ID>``).
CONSTRAINT_BUILDERS: tuple[Callable[[pyo.ConcreteModel, EpochContext], None], ...] = (
    add_demand_coverage,
    add_vpod_capacity,
    add_chip_inventory,
    add_slice_assignment,
    add_slice_linking,
    add_placement,
    add_objective_bound,
)


def build_model(ctx: EpochContext) -> pyo.ConcreteModel:
    """The Pyomo model of one epoch: sets, variables, constraint families, objective."""
    m = pyo.ConcreteModel(name=f"allocation_epoch_{ctx.epoch}")
    add_sets(m, ctx)
    add_variables(m, ctx)
    for builder in CONSTRAINT_BUILDERS:
        builder(m, ctx)
    add_objective(m, ctx)
    return m


def component_ids(m: pyo.ConcreteModel) -> dict[str, set[str]]:
    """Names of the model's top-level components by kind (``set``, ``variable``, ``constraint``,
    ``expression``, ``objective``, ``block``), for checking them against the formulation document.
    The components inside the ``placement`` block are those of ``formulations/placement.md``."""
    kinds = {
        "set": pyo.Set,
        "variable": pyo.Var,
        "constraint": pyo.Constraint,
        "expression": pyo.Expression,
        "objective": pyo.Objective,
        "block": pyo.Block,
    }
    out: dict[str, set[str]] = {}
    for kind, ctype in kinds.items():
        out[kind] = {c.local_name for c in m.component_objects(ctype, descend_into=False)}
    return out
