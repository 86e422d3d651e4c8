"""The multi-epoch horizon model (``formulations/horizon.md``) as a Pyomo model.

One builder ``add_<ID>`` per constraint family, each creating the Pyomo component ``<ID>`` named in
the formulation document (a test checks the two sets agree) and returning early when its index set
is empty. Every builder reads one frozen :class:`~neuscale_opt.horizon.context.WindowContext`.
Solving goes through :func:`neuscale_opt.alloc.solve.solve_model`, the package's one solver door.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pyomo.environ as pyo
from pyomo.common.gc_manager import PauseGC

from neuscale_opt.alloc.model import component_ids as alloc_component_ids
from neuscale_opt.horizon.context import WindowContext
from neuscale_opt.horizon.params import FLOOR_EPS
from neuscale_opt.topology.milp import add_placement_constraints

EPS = 1e-9
#: rho: the price of a request per second of guard reserve the plan cannot keep, as a share of the
#: unserved penalty (``formulations/horizon.md``, "Guard reserve"): below 1, so that the plan never
#: leaves forecast demand unserved to keep room, and the default penalty being ten times the dearest
#: request, 0.1 makes a reserve request worth the dearest request: the plan takes any configuration
#: that keeps the room before it gives the room up.
RESERVE_SHARE = 0.1


def _members(ctx: WindowContext) -> dict[str, list[tuple[str, str, str, float]]]:
    """Configurations of each group: (config_id, bucket, phase, c_k) (``WindowContext.members``)."""
    return ctx.members


def placed_members(ctx: WindowContext) -> dict[tuple[str, str], list[str]]:
    """(generation, canonical shape) -> the groups of that generation and shape, for the placed
    generations (empty when nothing is placed)."""
    if not ctx.placement or ctx.options.placement == "none":
        return {}
    out: dict[tuple[str, str], list[str]] = {}
    gr = ctx.groups
    for g, chip, shape in zip(gr["group"], gr["chip"], gr["placed_shape"], strict=True):
        if str(chip) in ctx.placement:
            out.setdefault((str(chip), str(shape)), []).append(str(g))
    return {k: sorted(v) for k, v in sorted(out.items())}


def placement_block_name(t: int) -> str:
    """Name of epoch t's sub-block inside the ``placement`` block."""
    return f"e{int(t)}"


def group_bounds(ctx: WindowContext) -> dict[str, int]:
    """Upper bound of n_{g,t}: the inventory bound, and max(n carried in, ceil(peak load / (1 - delta)))
    (holding more never helps: clipping a plan to it keeps every constraint, see the document)."""
    members = _members(ctx)
    inv_max: dict[str, float] = {}
    for (c, _t), h in ctx.inventory.items():
        inv_max[c] = max(inv_max.get(c, 0.0), h)
    carried = ctx.state.n if ctx.state is not None else {}
    out: dict[str, int] = {}
    gr = ctx.groups
    for g, chip, chips_per_vpod in zip(gr["group"], gr["chip"], gr["chips_per_vpod"], strict=True):
        peak = 0.0
        for t in ctx.epochs:
            load = sum(ctx.demand.get((b, t), 0.0) / c for _k, b, _p, c in members[g])
            peak = max(peak, load)
        need = math.ceil(peak / max(1.0 - ctx.delta, EPS) - 1e-9)
        ub = max(need, int(carried.get(g, 0)))
        inv = inv_max.get(str(chip), math.inf)
        if not math.isinf(inv):
            ub = min(ub, int(math.floor(inv / float(chips_per_vpod) + 1e-9)))
        out[g] = max(ub, 0)
    return out


def cover_set(ctx: WindowContext) -> list[tuple[str, str, int]]:
    """COVER: (class b, phase p, epoch t) with d_{b,t} > 0, in build order."""
    return [(b, p, t) for t in ctx.epochs for b in ctx.buckets for p in ctx.phases if ctx.demand.get((b, t), 0) > 0]


def reserve_set(ctx: WindowContext) -> list[tuple[str, str, int]]:
    """RESERVE: every (class b, phase p, epoch t) of the window, in build order (a row per triple
    whatever the reserve's value, so that every window of a rolling plan has the same rows)."""
    return [(b, p, t) for t in ctx.epochs for b in ctx.buckets for p in ctx.phases]


def chips_t_set(ctx: WindowContext) -> list[tuple[str, int]]:
    """CHIPS_T: (generation c, epoch t) with a finite inventory H_{c,t}, in build order."""
    chips = sorted({str(c) for c in ctx.groups["chip"]})
    return [(c, t) for c in chips for t in ctx.epochs if not math.isinf(ctx.inventory.get((c, t), math.inf))]


def hold_set(ctx: WindowContext) -> list[tuple[str, int, int]]:
    """HOLD: (g, t, tau) with t - K <= tau <= t - 1, t with a previous epoch, no failure of chip(g)
    in (tau, t], and a load that may bind: some member's class has demand at tau (tau in the
    window) or the carried load u_{g,tau} is positive (tau before it), in build order."""
    ts = list(ctx.epochs)
    coupled = ctx.params.coupling
    hold = []
    if coupled and ctx.hold_epochs > 0:
        members = _members(ctx)
        first = ts[0]
        chip_of_g = dict(zip(ctx.groups["group"], ctx.groups["chip"], strict=True))
        # generations losing chips somewhere in the hold windows of the window's epochs (the others
        # never restart a hold window)
        failing = {c for c in map(str, chip_of_g.values()) if ctx.dropped_between(c, first - ctx.hold_epochs, ts[-1])}
        for g in ctx.groups["group"]:
            for t in ts:
                if ctx.previous(t) is None:
                    continue
                for tau in range(t - ctx.hold_epochs, t):
                    # tau < 0 (before the horizon) has neither demand nor a carried load, except in
                    # a compiled window's superset (horizon.persistent.superset_context), which
                    # gives every hold row a window may have, so that the windows cut at epoch 0
                    # share the compile of the full ones
                    if str(chip_of_g[g]) in failing and ctx.dropped_between(str(chip_of_g[g]), tau, t):
                        continue
                    if tau >= first:
                        if any(ctx.demand.get((b, tau), 0.0) > 0 for _k, b, _p, _c in members[g]):
                            hold.append((g, t, tau))
                    elif ctx.state is not None and ctx.state.loads.get((g, tau), 0.0) > EPS:
                        hold.append((g, t, tau))
    return hold


def add_sets(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """Sets ``EPOCHS`` (T), ``GROUPS`` (G), ``CONFIGS`` (K), ``BUCKETS`` (B), ``COVER`` (B x P x T),
    ``CHIPS_T`` (finite inventories), ``COUPLED`` ((g, t) with a previous epoch), ``HOLD``
    ((g, t, tau) with tau in the hold window of t and no failure of chip(g) in (tau, t]), ``LOSS``
    ((g, t) whose generation loses chips at t) and, when something is placed, ``PLACED_SHAPES``
    ((generation, canonical shape, epoch) of the placed generations' groups)."""
    ts = list(ctx.epochs)
    m.EPOCHS = pyo.Set(initialize=ts, ordered=True)
    m.GROUPS = pyo.Set(initialize=list(ctx.groups["group"]), ordered=True)
    m.CONFIGS = pyo.Set(initialize=list(ctx.configs["config_id"]), ordered=True)
    m.BUCKETS = pyo.Set(initialize=list(ctx.buckets), ordered=True)
    m.COVER = pyo.Set(initialize=cover_set(ctx), dimen=3, ordered=True)
    m.CHIPS_T = pyo.Set(initialize=chips_t_set(ctx), dimen=2, ordered=True)
    coupled = ctx.params.coupling
    m.COUPLED = pyo.Set(
        initialize=[(g, t) for g in ctx.groups["group"] for t in ts if coupled and ctx.previous(t) is not None],
        dimen=2,
        ordered=True,
    )
    m.HOLD = pyo.Set(initialize=hold_set(ctx), dimen=3, ordered=True)
    chip_of = dict(zip(ctx.groups["group"], ctx.groups["chip"], strict=True))
    m.LOSS = pyo.Set(
        initialize=[
            (g, t) for g in ctx.groups["group"] for t in ts if coupled and ctx.inventory_drop(str(chip_of[g]), t) > 0
        ],
        dimen=2,
        ordered=True,
    )
    if ctx.reserved:
        m.RESERVE = pyo.Set(initialize=reserve_set(ctx), dimen=3, ordered=True)
    placed = placed_members(ctx)
    if placed:
        m.PLACED_SHAPES = pyo.Set(initialize=[(c, s, t) for c, s in placed for t in ts], dimen=3, ordered=True)


def window_data(ctx: WindowContext, hold: list[tuple[str, int, int]] | None = None) -> dict[str, dict]:
    """Values of the mutable parameters of the window's model (the numbers that change from one
    rolling window to the next; the structure does not): ``demand_rps`` d_{b,t} (0 where absent),
    ``n_upper`` the bound of n_{g,t} (:func:`group_bounds`), ``n_carried`` n_{g,t0-1} (0 without a
    state), ``hold_load`` the carried load u_{g,tau} of a HOLD row (tau before the window; 0 for tau
    inside it, where the load is the model's own) and ``inventory_chips`` H_{c,t} over CHIPS_T."""
    first = ctx.epochs[0]
    carried_n = ctx.state.n if ctx.state is not None else {}
    loads = ctx.state.loads if ctx.state is not None else {}
    hold = hold_set(ctx) if hold is None else hold
    return {
        "demand_rps": {(b, t): ctx.demand.get((b, t), 0.0) for b in ctx.buckets for t in ctx.epochs},
        "n_upper": group_bounds(ctx),
        "n_carried": {g: float(carried_n.get(g, 0)) for g in ctx.groups["group"]},
        "hold_load": {(g, t, tau): (loads.get((g, tau), 0.0) if tau < first else 0.0) for g, t, tau in hold},
        "inventory_chips": {(c, t): ctx.inventory[(c, t)] for c, t in chips_t_set(ctx)},
        "reserve_rps": {(b, t): ctx.reserve.get((b, t), 0.0) for b in ctx.buckets for t in ctx.epochs},
    }


#: The model's mutable parameters and their index sets (``window_data`` gives their values).
PARAMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("demand_rps", ("BUCKETS", "EPOCHS")),
    ("n_upper", ("GROUPS",)),
    ("n_carried", ("GROUPS",)),
    ("hold_load", ("HOLD",)),
    ("inventory_chips", ("CHIPS_T",)),
    ("reserve_rps", ("BUCKETS", "EPOCHS")),
)


def add_params(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """The mutable parameters of :func:`window_data` (``formulations/horizon.md``, "Parameters"):
    every number of the window that a later window changes enters the rows and bounds through them,
    so that a compiled window can be re-solved for another window of the same structure
    (:mod:`neuscale_opt.horizon.persistent`)."""
    data = window_data(ctx, list(m.HOLD))
    for name, sets in PARAMS:
        index = [getattr(m, s) for s in sets]
        setattr(m, name, pyo.Param(*index, mutable=True, initialize=data[name], default=0.0))


def add_variables(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """``n_vpods`` (Z>=0), ``rate`` (req/s), ``unserved`` (req/s), ``created``, ``deleted``, ``lost`` (vPods);
    with a reserve forecaster also ``reserve_rate`` (req/s), ``reserve_vpods`` (vPods, continuous) and
    ``reserve_short`` (req/s)."""
    bucket_of = dict(zip(ctx.configs["config_id"], ctx.configs["bucket"], strict=True))
    m.n_vpods = pyo.Var(m.GROUPS, m.EPOCHS, domain=pyo.NonNegativeIntegers, bounds=lambda _m, g, t: (0, _m.n_upper[g]))
    m.rate = pyo.Var(
        m.CONFIGS,
        m.EPOCHS,
        domain=pyo.NonNegativeReals,
        bounds=lambda _m, k, t: (0, _m.demand_rps[str(bucket_of[k]), t]),
    )
    m.unserved = pyo.Var(
        m.BUCKETS, m.EPOCHS, domain=pyo.NonNegativeReals, bounds=lambda _m, b, t: (0, _m.demand_rps[b, t])
    )
    m.created = pyo.Var(m.COUPLED, domain=pyo.NonNegativeReals)
    m.deleted = pyo.Var(m.COUPLED, domain=pyo.NonNegativeReals)
    m.lost = pyo.Var(m.LOSS, domain=pyo.NonNegativeReals)
    if ctx.reserved:
        m.reserve_rate = pyo.Var(
            m.CONFIGS,
            m.EPOCHS,
            domain=pyo.NonNegativeReals,
            bounds=lambda _m, k, t: (0, _m.reserve_rps[str(bucket_of[k]), t]),
        )
        m.reserve_vpods = pyo.Var(m.GROUPS, m.EPOCHS, domain=pyo.NonNegativeReals)
        m.reserve_short = pyo.Var(
            m.BUCKETS, m.EPOCHS, domain=pyo.NonNegativeReals, bounds=lambda _m, b, t: (0, _m.reserve_rps[b, t])
        )


def _n_prev(m: pyo.ConcreteModel, ctx: WindowContext, g: str, t: int):
    """n_{g, t-1}: a variable inside the window, the carried count for the window's first epoch."""
    if t == ctx.epochs[0]:
        return m.n_carried[g]
    return m.n_vpods[g, t - 1]


def _load(m: pyo.ConcreteModel, ctx: WindowContext, members: list[tuple[str, str, str, float]], t: int):
    """u_{g,t} = sum_{k in g} r_{k,t} / c_k (vPods' worth of traffic)."""
    return sum(m.rate[k, t] * (1.0 / c) for k, _b, _p, c in members)


def _serving(m: pyo.ConcreteModel, ctx: WindowContext, coupled: set, g: str, t: int):
    """n_{g,t} - delta y_{g,t}: the vPods' worth of serving capacity group g holds in epoch t (the
    vPods created at t serve 1 - delta of it; the y-term only on COUPLED)."""
    if (g, t) in coupled and ctx.delta > 0:
        return m.n_vpods[g, t] - ctx.delta * m.created[g, t]
    return m.n_vpods[g, t]


def _by_chip(ctx: WindowContext) -> dict[str, list[tuple[str, float]]]:
    """Generation -> its groups and their chips per vPod: (g, chips_g)."""
    out: dict[str, list[tuple[str, float]]] = {}
    for g, chip, w in zip(ctx.groups["group"], ctx.groups["chip"], ctx.groups["chips_per_vpod"], strict=True):
        out.setdefault(str(chip), []).append((g, float(w)))
    return out


def _class_members(ctx: WindowContext) -> dict[tuple[str, str], list[str]]:
    """(class b, phase p) -> the configurations serving b in phase p (the sums of ``demand_coverage``
    and ``reserve_coverage``)."""
    out: dict[tuple[str, str], list[str]] = {}
    for k, b, p in zip(ctx.configs["config_id"], ctx.configs["bucket"], ctx.configs["phase"], strict=True):
        out.setdefault((str(b), str(p)), []).append(k)
    return out


def add_demand_coverage(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: demand_coverage

    **Enforced Over**: COVER (class b, phase p, epoch t with d_{b,t} > 0)

        sum_{k: b(k)=b, p(k)=p} r_{k,t} + s_{b,t} = d_{b,t}
    """
    if len(m.COVER) == 0:
        return
    members = _class_members(ctx)

    def rule(_m: pyo.ConcreteModel, b: str, p: str, t: int):
        return sum(_m.rate[k, t] for k in members.get((b, p), [])) + _m.unserved[b, t] == _m.demand_rps[b, t]

    m.demand_coverage = pyo.Constraint(m.COVER, rule=rule)


def add_vpod_capacity(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: vpod_capacity

    **Enforced Over**: GROUPS x EPOCHS

    A group's load fits its vPods, the vPods created at t serving only (1 - delta) of the epoch:

        sum_{k in g} r_{k,t} / c_k <= n_{g,t} - delta * y_{g,t}     (y = 0 without a previous epoch)
    """
    if len(m.GROUPS) == 0:
        return
    members = _members(ctx)
    coupled = set(m.COUPLED)

    def rule(_m: pyo.ConcreteModel, g: str, t: int):
        lhs = _load(_m, ctx, members[g], t)
        if isinstance(lhs, (int, float)):
            return pyo.Constraint.Skip
        return lhs <= _serving(_m, ctx, coupled, g, t)

    m.vpod_capacity = pyo.Constraint(m.GROUPS, m.EPOCHS, rule=rule)


def add_chip_inventory(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: chip_inventory

    **Enforced Over**: CHIPS_T (generation c, epoch t with a finite inventory)

        sum_{g: chip(g)=c} chips_g n_{g,t} <= H_{c,t}
    """
    if len(m.CHIPS_T) == 0:
        return
    by_chip = _by_chip(ctx)

    def rule(_m: pyo.ConcreteModel, c: str, t: int):
        return sum(w * _m.n_vpods[g, t] for g, w in by_chip.get(c, [])) <= _m.inventory_chips[c, t]

    m.chip_inventory = pyo.Constraint(m.CHIPS_T, rule=rule)


def add_growth_limit(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: growth_limit

    **Enforced Over**: COUPLED (g, t with a previous epoch)

        n_{g,t} <= gamma * n_{g,t-1} + a
    """
    if len(m.COUPLED) == 0:
        return
    gamma, a = ctx.params.growth_max, float(ctx.params.new_group_vpods)

    def rule(_m: pyo.ConcreteModel, g: str, t: int):
        return _m.n_vpods[g, t] <= gamma * _n_prev(_m, ctx, g, t) + a

    m.growth_limit = pyo.Constraint(m.COUPLED, rule=rule)


def add_creation(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: creation

    **Enforced Over**: COUPLED

        y_{g,t} >= n_{g,t} - n_{g,t-1}      (y >= 0: vPods created at the start of t)
    """
    if len(m.COUPLED) == 0:
        return

    def rule(_m: pyo.ConcreteModel, g: str, t: int):
        return _m.created[g, t] >= _m.n_vpods[g, t] - _n_prev(_m, ctx, g, t)

    m.creation = pyo.Constraint(m.COUPLED, rule=rule)


def add_deletion(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: deletion

    **Enforced Over**: COUPLED

        z_{g,t} >= n_{g,t-1} - n_{g,t}      (z >= 0: vPods deleted at the start of t)
    """
    if len(m.COUPLED) == 0:
        return

    def rule(_m: pyo.ConcreteModel, g: str, t: int):
        return _m.deleted[g, t] >= _n_prev(_m, ctx, g, t) - _m.n_vpods[g, t]

    m.deletion = pyo.Constraint(m.COUPLED, rule=rule)


def add_shrink_limit(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: shrink_limit

    **Enforced Over**: COUPLED

    At most halving per epoch, i.e. n_{g,t} >= floor(sigma n_{g,t-1}), linearised for integer n as

        n_{g,t} + l_{g,t} >= sigma * n_{g,t-1} - (1 - eps)

    (exact when the fractional part of sigma n is 0 or >= eps; sigma = 0.5 gives fractions 0 and
    0.5). l_{g,t} (vPods lost to failed chips) exists only where the generation loses chips.
    """
    if len(m.COUPLED) == 0:
        return
    sigma = ctx.params.shrink_factor
    loss = set(m.LOSS)

    def rule(_m: pyo.ConcreteModel, g: str, t: int):
        lhs = _m.n_vpods[g, t] + (_m.lost[g, t] if (g, t) in loss else 0.0)
        return lhs >= sigma * _n_prev(_m, ctx, g, t) - (1.0 - FLOOR_EPS)

    m.shrink_limit = pyo.Constraint(m.COUPLED, rule=rule)


def add_shrink_hold(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: shrink_hold

    **Enforced Over**: HOLD (g, t, tau) with t - K <= tau <= t - 1

    A group keeps what its load needed in each of the last K epochs (scale down only after
    shrink_after_s below need):

        n_{g,t} + l_{g,t} >= u_{g,tau} = sum_{k in g} r_{k,tau} / c_k

    (u of committed epochs before the window is a constant carried in the state).
    """
    if len(m.HOLD) == 0:
        return
    members = _members(ctx)
    loss = set(m.LOSS)
    first = ctx.epochs[0]

    def rule(_m: pyo.ConcreteModel, g: str, t: int, tau: int):
        lhs = _m.n_vpods[g, t] + (_m.lost[g, t] if (g, t) in loss else 0.0)
        if tau >= first:
            return lhs >= _load(_m, ctx, members[g], tau)
        return lhs >= _m.hold_load[g, t, tau]

    m.shrink_hold = pyo.Constraint(m.HOLD, rule=rule)


def add_failure_loss(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: failure_loss

    **Enforced Over**: generations c and epochs t with a drop of inventory (LOSS projected on (c, t))

    The vPods released past the scale-down rules fit in the chips that failed:

        sum_{g: chip(g)=c} chips_g l_{g,t} <= H_{c,t-1} - H_{c,t}
    """
    if len(m.LOSS) == 0:
        return
    chip_of = dict(zip(ctx.groups["group"], ctx.groups["chip"], strict=True))
    w = dict(zip(ctx.groups["group"], ctx.groups["chips_per_vpod"].astype(float), strict=True))
    pairs = sorted({(str(chip_of[g]), t) for g, t in m.LOSS})
    m.LOSS_CHIPS = pyo.Set(initialize=pairs, dimen=2, ordered=True)

    def rule(_m: pyo.ConcreteModel, c: str, t: int):
        lhs = sum(w[g] * _m.lost[g, tt] for g, tt in _m.LOSS if tt == t and str(chip_of[g]) == c)
        return lhs <= ctx.inventory_drop(c, t)

    m.failure_loss = pyo.Constraint(m.LOSS_CHIPS, rule=rule)


def add_placement(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: placement

    **Enforced Over**: PLACED_SHAPES (placed generation c, canonical shape s, epoch t)

    In every epoch the vPods held per placed generation and canonical slice shape fit the pods at
    aligned, disjoint, healthy positions. The count

        placed_vpods[c, s, t] = N_{c,s,t} = sum_{g: chip(g)=c, s(g)=s} n_{g,t}

    of epoch t feeds the sub-block ``placement.e<t>`` built by
    :func:`neuscale_opt.topology.milp.add_placement_constraints` with the variant
    ``options.placement`` (``pattern`` or ``exact``), exactly as the epoch MILP's ``add_placement``
    does for its one epoch; the sub-blocks' components are those of ``formulations/placement.md``
    section 4. The epochs are independent: a vPod kept from one epoch to the next may be placed
    elsewhere (the plan does not pin positions across epochs).
    """
    if not hasattr(m, "PLACED_SHAPES"):
        return
    members = placed_members(ctx)
    m.placed_vpods = pyo.Expression(
        m.PLACED_SHAPES, rule=lambda _m, c, s, t: sum(_m.n_vpods[g, t] for g in members[c, s])
    )
    m.placement = pyo.Block()
    chips = {c for c, _s in members}
    data = {c: d for c, d in ctx.placement.items() if c in chips}
    for t in ctx.epochs:
        counts = {(c, s): m.placed_vpods[c, s, t] for c, s in members}
        add_placement_constraints(
            m.placement, counts, data, variant=ctx.options.placement, name=placement_block_name(t)
        )


def add_reserve_coverage(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: reserve_coverage

    **Enforced Over**: RESERVE (every class b, phase p, epoch t; with a reserve forecaster)

        sum_{k: b(k)=b, p(k)=p} q_{k,t} + v_{b,t} = d^R_{b,t}
    """
    if not ctx.reserved or len(m.RESERVE) == 0:
        return
    members = _class_members(ctx)

    def rule(_m: pyo.ConcreteModel, b: str, p: str, t: int):
        served = sum(_m.reserve_rate[k, t] for k in members.get((b, p), []))
        return served + _m.reserve_short[b, t] == _m.reserve_rps[b, t]

    m.reserve_coverage = pyo.Constraint(m.RESERVE, rule=rule)


def add_reserve_capacity(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: reserve_capacity

    **Enforced Over**: GROUPS x EPOCHS (with a reserve forecaster)

    The planned load and the reserve load fit the group's vPods and its reserve vPods:

        sum_{k in g} (r_{k,t} + q_{k,t}) / c_k <= n_{g,t} + m_{g,t} - delta * y_{g,t}
    """
    if not ctx.reserved or len(m.GROUPS) == 0:
        return
    members = _members(ctx)
    coupled = set(m.COUPLED)

    def rule(_m: pyo.ConcreteModel, g: str, t: int):
        lhs = _load(_m, ctx, members[g], t) + sum(_m.reserve_rate[k, t] * (1.0 / c) for k, _b, _p, c in members[g])
        return lhs <= _serving(_m, ctx, coupled, g, t) + _m.reserve_vpods[g, t]

    m.reserve_capacity = pyo.Constraint(m.GROUPS, m.EPOCHS, rule=rule)


def add_reserve_growth(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: reserve_growth

    **Enforced Over**: GROUPS x EPOCHS (with a reserve forecaster)

    The guard grows a group to at most gamma times its planned vPods:

        m_{g,t} <= (gamma - 1) n_{g,t}
    """
    if not ctx.reserved or len(m.GROUPS) == 0:
        return
    extra = ctx.params.growth_max - 1.0

    def rule(_m: pyo.ConcreteModel, g: str, t: int):
        return _m.reserve_vpods[g, t] <= extra * _m.n_vpods[g, t]

    m.reserve_growth = pyo.Constraint(m.GROUPS, m.EPOCHS, rule=rule)


def add_reserve_inventory(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: reserve_inventory

    **Enforced Over**: CHIPS_T (with a reserve forecaster)

    The planned vPods and the reserve vPods fit the generation's chips:

        sum_{g: chip(g)=c} chips_g (n_{g,t} + m_{g,t}) <= H_{c,t}
    """
    if not ctx.reserved or len(m.CHIPS_T) == 0:
        return
    by_chip = _by_chip(ctx)

    def rule(_m: pyo.ConcreteModel, c: str, t: int):
        held = sum(w * (_m.n_vpods[g, t] + _m.reserve_vpods[g, t]) for g, w in by_chip.get(c, []))
        return held <= _m.inventory_chips[c, t]

    m.reserve_inventory = pyo.Constraint(m.CHIPS_T, rule=rule)


def add_held_if_used(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """**Constraint Name**: held_if_used

    **Enforced Over**: USED (group g, member configuration k of g, epoch t with d_{b(k),t} > 0)

    A group that carries any traffic holds at least one vPod:

        n_{g,t} >= r_{k,t} / d_{b(k),t}

    (the right side is at most 1 and positive only when k carries traffic). Implied by
    ``vpod_capacity`` and the integrality of n, so the MILP never needs it; only the relaxation
    bound (:func:`neuscale_opt.horizon.rolling.relaxation_bound`) adds it, where it closes the
    fractional vPods of lightly loaded groups.
    """
    members = _members(ctx)
    used = [
        (g, k, t) for g in m.GROUPS for k, b, _p, _c in members[g] for t in m.EPOCHS if ctx.demand.get((b, t), 0.0) > 0
    ]
    m.USED = pyo.Set(initialize=used, dimen=3, ordered=True)
    if len(m.USED) == 0:
        return
    bucket_of = dict(zip(ctx.configs["config_id"], ctx.configs["bucket"].astype(str), strict=True))

    def rule(_m: pyo.ConcreteModel, g: str, k: str, t: int):
        return _m.n_vpods[g, t] >= _m.rate[k, t] * (1.0 / ctx.demand[(bucket_of[k], t)])

    m.held_if_used = pyo.Constraint(m.USED, rule=rule)


def add_objective(m: pyo.ConcreteModel, ctx: WindowContext) -> None:
    """Expressions ``served_term``, ``held_term``, ``unserved_term``, ``reconfig_term`` and the
    objective ``total_objective`` (their sum, minimised), in objective units over the window:

        served_term   = T sum_{k,t} a_k r_{k,t}
        held_term     = sum_{g,t} h_g n_{g,t}
        unserved_term = T pen sum_{b,t} s_{b,t}
        reconfig_term = sum_{(g,t) coupled} (kappa+_g y_{g,t} + kappa-_g z_{g,t})
        reserve_term  = T rho pen sum_{b,t} v_{b,t}      (with a reserve forecaster; rho = RESERVE_SHARE)
    """
    t_s = ctx.epoch_s
    a = dict(zip(ctx.configs["config_id"], ctx.configs["var_obj_per_req"].astype(float), strict=True))
    h = dict(zip(ctx.groups["group"], ctx.groups["held_obj_per_vpod"].astype(float), strict=True))
    kc = dict(zip(ctx.groups["group"], ctx.groups["create_obj"].astype(float), strict=True))
    kd = dict(zip(ctx.groups["group"], ctx.groups["delete_obj"].astype(float), strict=True))
    m.served_term = pyo.Expression(
        expr=sum(t_s * a[k] * m.rate[k, t] for k in m.CONFIGS for t in m.EPOCHS if a[k] != 0.0)
    )
    m.held_term = pyo.Expression(expr=sum(h[g] * m.n_vpods[g, t] for g in m.GROUPS for t in m.EPOCHS if h[g] != 0.0))
    m.unserved_term = pyo.Expression(
        expr=sum(t_s * ctx.penalty_per_req * m.unserved[b, t] for b in m.BUCKETS for t in m.EPOCHS)
    )
    m.reconfig_term = pyo.Expression(
        expr=sum(kc[g] * m.created[g, t] + kd[g] * m.deleted[g, t] for g, t in m.COUPLED if kc[g] or kd[g])
    )
    total = m.served_term + m.held_term + m.unserved_term + m.reconfig_term
    if ctx.reserved:
        rho = t_s * RESERVE_SHARE * ctx.penalty_per_req
        m.reserve_term = pyo.Expression(expr=sum(rho * m.reserve_short[b, t] for b in m.BUCKETS for t in m.EPOCHS))
        total = total + m.reserve_term
    m.total_objective = pyo.Objective(expr=total, sense=pyo.minimize)


#: Constraint-family builders in build order (each ``add_<ID>`` creates the component ``<ID>``).
CONSTRAINT_BUILDERS: tuple[Callable[[pyo.ConcreteModel, WindowContext], None], ...] = (
    add_demand_coverage,
    add_vpod_capacity,
    add_chip_inventory,
    add_growth_limit,
    add_creation,
    add_deletion,
    add_shrink_limit,
    add_shrink_hold,
    add_failure_loss,
    add_placement,
    add_reserve_coverage,
    add_reserve_capacity,
    add_reserve_growth,
    add_reserve_inventory,
)


def build_model(ctx: WindowContext) -> pyo.ConcreteModel:
    """The Pyomo model of one window: sets, variables, constraint families, objective."""
    # the collector paused while the model's many small objects are made: they would trigger
    # collections of the whole heap (as the epoch MILP does, alloc.plan._milp_epoch)
    with PauseGC():
        m = pyo.ConcreteModel(name=f"horizon_{ctx.epochs[0]}_{ctx.epochs[-1]}")
        add_sets(m, ctx)
        add_params(m, ctx)
        add_variables(m, ctx)
        for builder in CONSTRAINT_BUILDERS:
            builder(m, ctx)
        add_objective(m, ctx)
    return m


def component_ids(m: pyo.ConcreteModel) -> dict[str, set[str]]:
    """Names of the model's components by kind, for checking them against the document (the same
    listing as the single-epoch model's)."""
    return alloc_component_ids(m)
