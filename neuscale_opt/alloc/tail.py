"""Tail classes (``formulations/allocation.md``, "Tail classes"): a class whose rate in an epoch is
below ``PlanOptions.tail_rate_rps`` gets no vPod group of its own; it is served best-effort on the
spare capacity of the nearest held group whose vPod type meets its SLO.

Every planner (MILP, greedy, homogeneous) runs through :func:`plan_with_tail`: plan the epoch
without its tail classes, route them (:func:`route_tail`), and when some found no room, plan again
with those as ordinary classes (only then do they get vPods of their own). The routes are plan
rows like any other, on the serving group (``EpochPlan.groups``), so the evaluator counts their
load and the replay sends the class to that group.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from neuscale_opt.alloc.context import EpochContext, phases_for, restrict_classes
from neuscale_opt.alloc.heuristics import EpochPlan

EPS = 1e-9


def tail_rate(options: Any) -> float | None:
    """The tail rate in force under ``options`` (req/s), or None when the rule is off: no
    ``tail_rate_rps`` (or 0), or Mélange's slices (every class is cut into slices the model
    assigns)."""
    lim = options.tail_rate_rps
    if lim is None or lim <= 0 or options.slice_factor is not None:
        return None
    return float(lim)


def prompt_tokens(buckets: Any) -> dict[str, float]:
    """Prompt length of each class (``buckets``: ``bucket``, ``input_tokens``), the distance of
    :func:`nearest_first`."""
    return dict(zip(buckets["bucket"].astype(str), buckets["input_tokens"].astype(float), strict=True))


def tail_classes(ctx: EpochContext) -> dict[str, float]:
    """Classes of the epoch below the tail rate, with their rates (req/s)."""
    lim = tail_rate(ctx.options)
    if lim is None:
        return {}
    return {b: r for b, r in sorted(ctx.bucket_rate.items()) if r < lim}


def nearest_first(
    tokens: dict[str, float], b: str, served: set[str], spare: float, group: str
) -> tuple[float, float, str]:
    """Sort key of a candidate serving group for tail class ``b`` (the rule of
    ``formulations/allocation.md``, "Tail classes"): least distance in prompt length
    ``|ln(in_b / in_c)|`` over the classes ``c`` the group serves, then most spare capacity, then
    name. The one ordering used by the epoch planners (:func:`route_tail`) and the auto-scalers
    (``neuscale_opt.horizon.autoscaler``)."""
    dist = min((abs(math.log(tokens[b] / tokens[c])) for c in served), default=math.inf)
    return (dist, -spare, group)


def _fill(
    rate: float,
    offers: list[tuple[str, str, float]],
    held: dict[str, float],
    x: dict[str, float],
    groups: dict[str, str],
    load: dict[str, float],
) -> float:
    """Route ``rate`` over ``offers`` (group, configuration, rate per vPod) in their order, each up
    to its group's spare vPods ``held[g] - load[g]``; adds to ``x``, ``groups`` and ``load`` and
    returns the rate left. A configuration runs on one group (a plan row is one configuration on
    one group), so an offer of a configuration already routed to another group is passed over."""
    need = rate
    for g, k, cap in offers:
        if groups.get(k, g) != g:
            continue
        take = min(need, max(held[g] - load.get(g, 0.0), 0.0) * cap)
        if take <= EPS:
            continue
        x[k] = x.get(k, 0.0) + take
        groups[k] = g
        load[g] = load.get(g, 0.0) + take / cap
        need -= take
        if need <= EPS * max(1.0, rate):
            break
    return need


def route_tail(ctx: EpochContext, ep: EpochPlan, tail: dict[str, float]) -> tuple[EpochPlan, set[str]]:
    """Put each tail class on held groups' spare capacity, nearest first: groups whose vPod type has
    a usable configuration for the class (``ctx.configs``), ordered by the distance in prompt length
    between the class and the nearest class the group serves, then by spare capacity (most first),
    then by name. A class may be split over several groups, one configuration on each (a plan row is
    one configuration on one group). Returns the plan with the routes and
    the classes that found no (or not enough) room, which are left out of the routes. When
    disaggregated, each phase is routed; a class short in either phase is left out."""
    cfg = ctx.configs
    ids = [str(k) for k in cfg["config_id"].tolist()]
    row_group = [str(g) for g in cfg["group"].tolist()]
    row_cap = [float(c) for c in cfg["cap_rps"].tolist()]
    row_bucket = [str(b) for b in cfg["bucket"].tolist()]
    row_phase = [str(p) for p in cfg["phase"].tolist()]
    row_vtype = [str(v) for v in cfg["vpod_type"].tolist()]
    by_id = {k: i for i, k in enumerate(ids)}
    tokens = ctx.input_tokens
    load: dict[str, float] = {}
    served: dict[str, set[str]] = {}
    groups = dict(ep.groups)
    vtype_of: dict[str, str] = {}
    for k, x in ep.x.items():
        i = by_id[k]
        g = groups.get(k, row_group[i])
        load[g] = load.get(g, 0.0) + x / row_cap[i]
        served.setdefault(g, set()).add(row_bucket[i])
        vtype_of[g] = row_vtype[i]
    x_new = dict(ep.x)
    left: set[str] = set()
    for b, rate in tail.items():
        for phase in phases_for(ctx.options.serving):  # disaggregated: prefill and decode each routed
            options = []
            for i in range(len(ids)):
                if row_bucket[i] != b or row_phase[i] != phase:
                    continue
                for g, vt in vtype_of.items():
                    if vt != row_vtype[i] or ep.n.get(g, 0) <= 0:
                        continue
                    spare = ep.n[g] - load.get(g, 0.0)
                    if spare <= EPS:
                        continue
                    options.append((*nearest_first(tokens, b, served[g], spare, g), ids[i], row_cap[i]))
            offers = [(g, k, cap) for _d, _s, g, k, cap in sorted(options)]
            need = _fill(rate, offers, ep.n, x_new, groups, load)
            if need > EPS * max(1.0, rate):
                left.add(b)
        if b in left:
            for k in [k for k in x_new if k not in ep.x and row_bucket[by_id[k]] == b]:
                g = groups.pop(k)
                load[g] -= x_new.pop(k) / row_cap[by_id[k]]
    return replace(ep, x=x_new, groups=groups), left


def plan_with_tail(
    ctx: EpochContext, planner: Callable[[EpochContext], tuple[EpochPlan, dict[str, Any]]]
) -> tuple[EpochPlan, dict[str, Any]]:
    """``planner`` on the epoch with its tail classes routed (module docstring). The info dict gets
    ``tail_classes`` (routed) when there are any."""
    tail = tail_classes(ctx)
    if not tail:
        return planner(ctx)
    own: set[str] = set()
    while True:  # each pass plans at least one more class as ordinary, so at most len(tail) + 1 passes
        routed = {b: r for b, r in tail.items() if b not in own}
        ep, info = planner(restrict_classes(ctx, set(ctx.bucket_rate) - set(routed)))
        if ep.status == "infeasible":
            return ep, info
        ep, left = route_tail(ctx, ep, routed)
        if not left:
            return ep, ({**info, "tail_classes": sorted(routed)} if routed else info)
        own |= left


# ----------------------------------------------------------------------------------------------
# the horizon planner's hook (the rolling MILP calls these around each window's solve)


def split_tail(
    demand: dict[tuple[str, int], float], epochs: list[int], tail_rate_rps: float | None
) -> tuple[dict[tuple[str, int], float], dict[int, dict[str, float]]]:
    """The window demand handed to the horizon model without its tail classes, and those classes
    per epoch: ``(demand with every (b, t) below the tail rate set to 0, {t: {b: rate}})``. Off
    (``tail_rate_rps`` None or 0) returns the demand unchanged and no tail."""
    if not tail_rate_rps or tail_rate_rps <= 0:
        return dict(demand), {}
    out = dict(demand)
    tail: dict[int, dict[str, float]] = {}
    for (b, t), r in sorted(demand.items()):
        if t in epochs and 0 < r < tail_rate_rps:
            tail.setdefault(t, {})[b] = r
            out[(b, t)] = 0.0
    return out, tail


def route_tail_commit(
    n: dict[str, float],
    x: dict[str, float],
    tail: dict[str, float],
    configs: Any,
    tokens: dict[str, float],
) -> tuple[dict[str, float], dict[str, str], set[str]]:
    """Route one committed epoch's tail classes (rates ``tail``) onto the spare capacity
    ``n_g - u_g`` of its held groups (``n`` the capacity of each group in vPods' worth: its vPods,
    less the share the ones created in the epoch lose to the creation delay; ``x`` rate per
    configuration) whose vPod type has a configuration for the class (``configs``: the window's configurations, with
    ``config_id``, ``bucket``, ``vpod_type``, ``group``, ``cap_rps``), nearest first
    (:func:`nearest_first`); a class may be split over groups. Returns the rates with the routes
    added, the group each routed configuration runs on (``assemble(groups_of=...)``) and the classes
    that found no (or not enough) room, which get no route: the planner solves the window again with
    them as ordinary demand (as :func:`plan_with_tail`)."""
    by_id = configs.set_index("config_id")
    load: dict[str, float] = {}
    served: dict[str, set[str]] = {}
    vtype_of = {str(r.group): str(r.vpod_type) for r in configs.itertuples()}
    for k, r in x.items():
        g = str(by_id.at[k, "group"])
        load[g] = load.get(g, 0.0) + r / float(by_id.at[k, "cap_rps"])
        served.setdefault(g, set()).add(str(by_id.at[k, "bucket"]))
    x_new = dict(x)
    routes: dict[str, str] = {}
    left: set[str] = set()
    for b, rate in sorted(tail.items()):
        options = []
        for r in configs[configs["bucket"] == b].itertuples():
            for g, cnt in sorted(n.items()):
                if cnt <= 0 or vtype_of.get(g) != str(r.vpod_type) or g not in served:
                    continue
                spare = cnt - load.get(g, 0.0)
                if spare > EPS:
                    options.append((nearest_first(tokens, b, served[g], spare, g), str(r.config_id), float(r.cap_rps)))
        # a configuration runs on one group: each is offered on its nearest group only
        first: dict[str, tuple] = {}
        for o in sorted(options):
            first.setdefault(o[1], o)
        room: dict[str, float] = {}
        for key, _k, cap in first.values():
            room[key[2]] = max(room.get(key[2], 0.0), -key[1] * cap)
        if sum(room.values()) < rate * (1 - EPS):
            left.add(b)
            continue
        _fill(rate, [(key[2], k, cap) for key, k, cap in sorted(first.values())], n, x_new, routes, load)
    return x_new, routes, left
