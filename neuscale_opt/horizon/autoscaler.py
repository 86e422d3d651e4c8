"""The reactive policies the horizon plan is compared with (same :class:`Solution` type).

``neuscale-autoscaler`` - NeuScale's rules (paper section 3.4), epoch by epoch, knowing only the
past:

1. **need**: per class b, R_b(t) = max of the demand over the last W = monitor_window_s / T epochs
   (the peak of the last 30 minutes, FC1 ``last-peak`` of ``formulations/forecast.md``); epoch 0
   is sized on its own demand (warm start, as every method).
2. **floors**: a group keeps lo_g = max(floor(sigma n_{g,t-1}), ceil(max_{tau in t-K..t-1} u_{g,tau}))
   vPods (halving, and only after K epochs below need), at most gamma n_{g,t-1} + a (growth);
   where a generation lost chips, the floors of its least efficient groups give way first.
3. **best fit with fail-over**: classes in decreasing order of the chips their best configuration
   needs (ceil(R_b / c_k) chips_k; ties by name). Each class (i) fills the capacity its groups hold
   anyway (the floors), best configuration first; (ii) **coalesces**: if what is left would load a
   new vPod of its best configuration below theta (0.5), it joins a group of the same vPod type
   (serving another class) that has room for all of it, unless its configuration already serves on
   its own group (a configuration runs on one group per epoch: a plan row); (iii) grows its groups
   in order of efficiency e_k = h_g / (c_k T) + a_k, each up to its growth limit and the chips
   left, failing over to the next configuration (typically the next generation) when either runs
   out. A created vPod serves (1 - delta) of the epoch. What is left is unserved. Disaggregated
   serving: each (class, phase) is a unit of this rule (ordered as the classes, prefill before
   decode at a tie) and walks the configurations of its phase; a class's unserved rate is its
   largest shortfall over the two phases, the other phase gives back what it served beyond that
   (last served first), and vPods that leaves idle are released down to the floors of rule 2 (the
   epoch greedy's rule, ``formulations/allocation.md``).
4. **placement** (generations given as pods, ``placement`` not ``none``): every vPod is placed when it
   is created, first fit (:class:`~neuscale_opt.topology.greedy.FirstFitPlacer`, the greedy
   heuristic's rule), and never moved: a kept vPod keeps its position, a group that shrinks
   releases its last placed vPods first. When a slice of the configuration's shape no longer fits
   although chips remain, the configuration is exhausted and the class fails over to the next
   one, as when the chips run out. A generation whose inventory schedule exceeds what its pods
   hold (the counterfactual fleet of :func:`fleet_total_inventory`) is counted only.

5. **tail classes** (``PlanOptions.tail_rate_rps``, the epoch planners' rule of
   ``formulations/allocation.md``, "Tail classes"): a class whose need R_b(t) is below the tail
   rate is placed after all the others: on the capacity its own groups hold anyway (rule 3 i),
   then on the spare capacity of the other held groups whose vPod type has a configuration for it,
   nearest first (:func:`neuscale_opt.alloc.tail.nearest_first`), when that spare capacity holds
   all of what is left; otherwise it is an ordinary class (rules 3 ii-iii).
   Its rows are routes onto the serving group, so the evaluator and the replay treat it as routed.

``homogeneous-autoscaler`` - the same rules with the configurations of one generation only (the
conventional auto-scaler the paper compares with); run on each generation, the best is the one of
least objective.

Both return schedules that :func:`~neuscale_opt.horizon.evaluate.evaluate_schedule` finds
feasible (the tests check it). Symbols of ``formulations/horizon.md``.
"""

from __future__ import annotations

import math
from typing import Any

from neuscale_opt.alloc.context import Prepared, phases_for, prepare
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.placement import pod_order
from neuscale_opt.alloc.solution import Solution
from neuscale_opt.alloc.tail import nearest_first, prompt_tokens, tail_rate
from neuscale_opt.coefficients import Coefficients
from neuscale_opt.horizon.context import horizon_options, inventory_dropped, serving_capacity
from neuscale_opt.horizon.params import FLOOR_EPS, HorizonParams
from neuscale_opt.horizon.placement import view_placement_rows
from neuscale_opt.horizon.rolling import EpochCommit, actual_demand, assemble, instance_inventory, observed_demand_map
from neuscale_opt.topology.greedy import FirstFitPlacer, place_up_to
from neuscale_opt.topology.patterns import PodPlacement

EPS = 1e-9


def reactive_need(
    demand: dict[tuple[str, int], float],
    buckets: list[str],
    t: int,
    w: int,
    observed: dict[tuple[str, int], float] | None = None,
) -> dict[str, float]:
    """R_b(t) = max(d_{b,t-W} .. d_{b,t-1}) (epoch 0: d_{b,0}). ``observed`` (pre-warmed plans,
    decided L before t): epoch t - 1 as observed until then (D11)."""
    if t == 0:
        return {b: demand.get((b, 0), 0.0) for b in buckets}
    span = range(max(0, t - w), t)

    def seen(b: str, tau: int) -> float:
        src = observed if observed is not None and tau == t - 1 else demand
        return src.get((b, tau), 0.0)

    return {b: max(seen(b, tau) for tau in span) for b in buckets}


def _count_for(load: float, prev: int, delta: float) -> int:
    """Least n with n - delta max(n - prev, 0) >= load."""
    if load <= prev + 1e-12:
        return max(math.ceil(load - 1e-9), 0)
    return math.ceil((load - delta * prev) / (1.0 - delta) - 1e-9)


def placeable_generations(prep: Prepared, inventory: dict[tuple[str, int], float]) -> set[str]:
    """The placed generations (``Prepared.placement``) whose pods hold their whole inventory
    schedule: max_t H_{c,t} <= healthy chips of the pods."""
    out: set[str] = set()
    for c, d in prep.placement.items():
        healthy = sum(g.multiplicity * g.state.healthy_chips for g in d.groups)
        peak = max((h for (cc, _t), h in inventory.items() if cc == c), default=0.0)
        if peak <= healthy + 1e-9:
            out.add(c)
    return out


class _Epoch:
    """The plan of one epoch under construction: vPods per group, load per group, rate per
    configuration and the group a coalesced configuration runs on."""

    def __init__(self, n: dict[str, int], n_prev: dict[str, int], delta: float) -> None:
        self.n = n
        self.n_prev = n_prev
        self.delta = delta
        self.load: dict[str, float] = {}
        self.x: dict[str, float] = {}
        self.route: dict[str, str] = {}
        self.served: dict[str, set[str]] = {}
        #: (class, phase) -> (configuration, group, c_k) in the order served (:meth:`trim`)
        self.trail: dict[tuple[str, str], list[tuple[str, str, float]]] = {}

    def room(self, g: str) -> float:
        """Spare capacity of group g (vPods' worth)."""
        return serving_capacity(self.n.get(g, 0), self.n_prev.get(g, 0), self.delta) - self.load.get(g, 0.0)

    def free_for(self, k: Any, g: str) -> bool:
        """Can configuration k run on group g this epoch? A configuration runs on one group per epoch
        (a plan row is one configuration on one group): not where it already serves on another."""
        return k.config_id not in self.x or self.route.get(k.config_id, k.group) == g

    def put(self, k: Any, g: str, r_left: float) -> float:
        """Serve as much of r_left (req/s) as fits with configuration k on group g; the rate taken
        (0 where k already serves on another group, :meth:`free_for`)."""
        if not self.free_for(k, g):
            return 0.0
        cap = float(k.cap_rps)
        take = min(r_left, max(self.room(g), 0.0) * cap)
        if take > EPS:
            self.load[g] = self.load.get(g, 0.0) + take / cap
            self.x[k.config_id] = self.x.get(k.config_id, 0.0) + take
            self.served.setdefault(g, set()).add(str(k.bucket))
            self.trail.setdefault((str(k.bucket), str(k.phase)), []).append((k.config_id, g, cap))
            if g != k.group:
                self.route[k.config_id] = g
        return take

    def trim(self, bp: tuple[str, str], extra: float) -> None:
        """Take ``extra`` req/s back from (class, phase) ``bp``, last served first (a request served
        in one phase of disaggregated serving and not in the other is not served)."""
        for cid, g, cap in reversed(self.trail.get(bp, [])):
            if extra <= EPS:
                break
            cut = min(extra, self.x.get(cid, 0.0))
            self.x[cid] -= cut
            self.load[g] -= cut / cap
            extra -= cut
            if self.x[cid] <= EPS:
                del self.x[cid]
                self.route.pop(cid, None)


def _route_tail(
    ep: _Epoch,
    bp: tuple[str, str],
    rate: float,
    by_type: dict[tuple[str, str], Any],
    group_type: dict[str, str],
    tokens: dict[str, float],
) -> float:
    """Serve phase ``bp[1]`` of tail class ``bp[0]`` on held groups whose vPod type has a
    configuration for it, in the order of :func:`neuscale_opt.alloc.tail.nearest_first`, if their
    spare capacity holds the whole rate (then the rate, else nothing is placed and 0 is returned)."""
    b, phase = bp
    best: dict[str, tuple[Any, Any]] = {}  # one group per configuration (the nearest), where it is free
    for g in ep.n:
        k = by_type.get((group_type[g], b))
        room = ep.room(g)
        if k is None or str(k.phase) != phase or ep.n[g] <= 0 or room <= EPS or g not in ep.served:
            continue
        if not ep.free_for(k, g):
            continue
        key = nearest_first(tokens, b, ep.served[g], room, g)
        if k.config_id not in best or key < best[k.config_id][0]:
            best[k.config_id] = (key, k)
    options = list(best.values())
    if sum(max(ep.room(key[2]), 0.0) * float(k.cap_rps) for key, k in options) < rate * (1 - EPS):
        return 0.0
    taken = 0.0
    for key, k in sorted(options, key=lambda o: o[0]):
        taken += ep.put(k, key[2], rate - taken)
        if rate - taken <= EPS * max(1.0, rate):
            break
    return taken


def autoscale(
    coeffs: Coefficients,
    options: PlanOptions,
    params: HorizonParams,
    chip: str | None = None,
    inventory: dict[tuple[str, int], float] | None = None,
    method: str = "neuscale-autoscaler",
) -> Solution:
    """Run the reactive rules over every epoch (one generation only when ``chip`` is given).

    The rules act on NeuScale's vPod groups, one per (vPod type, class), whatever variant the MILP
    uses: their own coalescing step (threshold theta) is how they share vPods."""
    opts = horizon_options(options.replace(variant="dedicated"))
    prep = prepare(coeffs, opts)
    cfg = prep.configs
    if chip is not None:
        cfg = cfg[cfg["chip"] == chip].reset_index(drop=True)
    inv = instance_inventory(coeffs) if inventory is None else inventory
    t_s = float(coeffs.epoch_s)
    delta = params.delay_share(t_s) if params.coupling else 0.0
    k_hold = params.hold_epochs(t_s) if params.coupling else 0
    w = params.monitor_epochs(t_s)
    demand = actual_demand(coeffs)
    observed = observed_demand_map(coeffs) if params.lead_s(t_s) > 0 else None
    buckets = coeffs.bucket_names
    tokens = prompt_tokens(coeffs.buckets)
    lim = tail_rate(opts)

    def tail_of(need: dict[str, float]) -> set[str]:
        return {b for b, r in need.items() if lim is not None and 0 < r < lim}

    eff = (cfg["held_obj_per_vpod"] / (cfg["cap_rps"] * t_s) + cfg["var_obj_per_req"]).astype(float)
    cfg = cfg.assign(_eff=eff.to_numpy())
    # each (class, phase) of the serving mode walks its own configurations; disaggregated serving
    # serves a class's rate in both phases (a request served in one only is not served)
    phases = phases_for(opts.serving)
    phase_rank = {p: i for i, p in enumerate(phases)}
    rows_of: dict[tuple[str, str], list[Any]] = {(b, p): [] for b in buckets for p in phases}
    for r in cfg.sort_values(["_eff", "chips_per_vpod", "config_id"], kind="mergesort").itertuples():
        rows_of[(str(r.bucket), str(r.phase))].append(r)
    by_type: dict[tuple[str, str], Any] = {(str(r.vpod_type), str(r.bucket)): r for r in cfg.itertuples()}
    head = cfg.drop_duplicates("group").set_index("group")
    group_chip = head["chip"].astype(str).to_dict()
    group_w = head["chips_per_vpod"].astype(float).to_dict()
    group_eff = cfg.groupby("group")["_eff"].min().to_dict()
    group_type = head["vpod_type"].astype(str).to_dict()
    group_shape = head["placed_shape"].to_dict()
    placed_gens = placeable_generations(prep, inv) & set(group_chip.values())
    pods = {pid: g.state for c in sorted(placed_gens) for g in prep.placement[c].groups for pid in g.pod_ids}
    pods = dict(sorted(pods.items(), key=lambda kv: pod_order(kv[0])))
    where: dict[str, list[PodPlacement]] = {}

    n_prev: dict[str, int] = {}
    load_hist: dict[tuple[str, int], float] = {}
    commits: list[EpochCommit] = []
    groups_of: dict[int, dict[str, str]] = {}
    for t in coeffs.epochs:
        need = reactive_need(demand, buckets, t, w, observed)
        first = t == coeffs.epochs[0]
        # 2. floors and growth limits
        lo: dict[str, int] = {}
        hi: dict[str, float] = {}
        for g, p in n_prev.items():
            if first or not params.coupling:
                continue
            hold = max(
                (
                    load_hist.get((g, tau), 0.0)
                    for tau in range(t - k_hold, t)
                    if not inventory_dropped(inv, group_chip[g], tau, t)
                ),
                default=0.0,
            )
            lo[g] = max(math.floor(params.shrink_factor * p + FLOOR_EPS), math.ceil(hold - 1e-7))
        for g in group_chip:
            p = n_prev.get(g, 0)
            hi[g] = math.inf if (first or not params.coupling) else params.growth_max * p + params.new_group_vpods
        left: dict[str, float] = {}
        for c in {*group_chip.values()}:
            h = inv.get((c, t), math.inf)
            on_c = sorted((g for g in lo if group_chip[g] == c), key=lambda g: (-group_eff[g], g))
            used = sum(lo[g] * group_w[g] for g in on_c)
            for g in on_c:  # failed chips: the least efficient groups give way first
                while used > h + 1e-9 and lo[g] > 0:
                    lo[g] -= 1
                    used -= group_w[g]
            left[c] = h - used
        ep = _Epoch({g: v for g, v in lo.items() if v > 0}, dict(n_prev), delta)
        # 4. kept vPods keep their positions (the last placed are released first)
        placer = FirstFitPlacer(dict(pods)) if placed_gens else None
        held: dict[str, list[PodPlacement]] = {}
        unfit: set[tuple[str, str]] = set()
        if placer is not None:
            kept = [g for g in sorted(ep.n) if group_chip[g] in placed_gens]
            for g in kept:
                held[g] = list(where.get(g, [])[: ep.n[g]])
                for pp in held[g]:
                    placer.used.setdefault(pp.pod, set()).update(pp.placement.chips)
            for g in kept:  # a floor above the vPods held before (not expected): place the rest, or give way
                short = ep.n[g] - len(held[g])
                if short > 0:
                    got = place_up_to(placer, group_chip[g], str(group_shape[g]), short, held[g], unfit)
                    ep.n[g] -= short - got
                    left[group_chip[g]] += (short - got) * group_w[g]

        def best_chips(bp: tuple[str, str], need: dict[str, float] = need) -> float:
            rs = rows_of[bp]
            return math.ceil(need[bp[0]] / float(rs[0].cap_rps) - EPS) * float(rs[0].chips_per_vpod) if rs else -1.0

        short: dict[tuple[str, str], float] = {}
        tail = tail_of(need)
        pairs = [(b, p) for b in buckets if need[b] > 0 for p in phases]
        ordinary = [bp for bp in pairs if bp[0] not in tail]
        order = sorted(ordinary, key=lambda bp: (-best_chips(bp), bp[0], phase_rank[bp[1]]))
        order += sorted((bp for bp in pairs if bp[0] in tail), key=lambda bp: (bp[0], phase_rank[bp[1]]))
        for bp in order:
            b, phase = bp
            r_left = need[b]
            # (i) capacity held anyway
            for k in rows_of[bp]:
                if r_left <= EPS:
                    break
                if ep.n.get(k.group, 0) > 0:
                    r_left -= ep.put(k, k.group, r_left)
            # a tail class then rides on the spare capacity of the other held groups, nearest first,
            # when they hold all of what is left; otherwise it is an ordinary class (rules ii-iii)
            if b in tail and r_left > EPS:
                r_left -= _route_tail(ep, bp, r_left, by_type, group_type, tokens)
            # (ii) coalescing into a group of the same vPod type with room
            # for all of what is left (a configuration runs on one group: one that already serves on
            # its own group grows it in iii instead)
            if r_left > EPS and rows_of[bp] and r_left < params.coalesce_threshold * float(rows_of[bp][0].cap_rps):
                for g in sorted(ep.n, key=lambda g: (group_eff[g], g)):
                    k = by_type.get((group_type[g], b))
                    if k is None or str(k.phase) != phase or r_left <= EPS or ep.n.get(g, 0) <= 0:
                        continue
                    if ep.free_for(k, g) and ep.room(g) * float(k.cap_rps) >= r_left * (1 - EPS):
                        r_left -= ep.put(k, g, r_left)
            # (iii) grow, best fit first, fail over
            for k in rows_of[bp]:
                if r_left <= EPS:
                    break
                g, c = k.group, group_chip[k.group]
                cur, prev = ep.n.get(g, 0), n_prev.get(g, 0)
                want = _count_for(ep.load.get(g, 0.0) + r_left / float(k.cap_rps), prev, delta)
                cap = min(float(want), hi[g])
                if not math.isinf(left[c]):
                    cap = min(cap, cur + math.floor(left[c] / group_w[g] + 1e-9))
                new = max(cur, int(math.floor(cap + 1e-9)))
                if new > cur and placer is not None and c in placed_gens:
                    new = cur + place_up_to(placer, c, str(group_shape[g]), new - cur, held.setdefault(g, []), unfit)
                if new > cur:
                    left[c] -= (new - cur) * group_w[g]
                    ep.n[g] = new
                r_left -= ep.put(k, g, r_left)
            short[bp] = r_left if r_left > EPS * max(1.0, need[b]) else 0.0
        # one unserved rate per class: its largest shortfall over the phases; the other phases
        # give back what they served beyond it, and vPods created for it that are left idle go
        # (never below the floors of rule 2)
        s: dict[str, float] = {}
        trimmed = False
        for b in buckets:
            got = [short[(b, p)] for p in phases if (b, p) in short]
            s_b = max(got, default=0.0)
            if s_b <= 0.0:
                continue
            s[b] = s_b
            for p in phases:
                if s_b - short[(b, p)] > EPS:
                    ep.trim((b, p), s_b - short[(b, p)])
                    trimmed = True
        if trimmed:
            for g in list(ep.n):
                ep.n[g] = max(lo.get(g, 0), min(ep.n[g], math.ceil(ep.load.get(g, 0.0) - 1e-7)))
        n = ep.n
        x, load, route = ep.x, ep.load, ep.route
        n = {g: v for g, v in n.items() if v > 0}
        where = {g: held[g][: n[g]] for g in n if g in held}
        assigned = tuple((g, pp) for g in sorted(where) for pp in where[g])
        rows = view_placement_rows(t, opts, prep, assigned, x, route) if assigned else []
        commits.append(EpochCommit(t, n, x, s, dict(need), "feasible", {}, tuple(rows)))
        groups_of[t] = route
        for g, u in load.items():
            load_hist[(g, t)] = u
        n_prev = n
    meta: dict[str, Any] = {"chip": chip, "monitor_epochs": w}
    return assemble(
        method,
        coeffs,
        opts,
        params,
        prep.configs,
        commits,
        inv,
        meta,
        groups_of=groups_of,
        penalty_per_req=prep.penalty_per_req,
        verdict_options=options,
    )


def neuscale_autoscaler(
    coeffs: Coefficients,
    options: PlanOptions,
    params: HorizonParams,
    inventory: dict[tuple[str, int], float] | None = None,
) -> Solution:
    """NeuScale's reactive rules over the heterogeneous fleet."""
    return autoscale(coeffs, options, params, None, inventory, "neuscale-autoscaler")


def homogeneous_autoscaler(
    coeffs: Coefficients,
    options: PlanOptions,
    params: HorizonParams,
    chip: str | None = None,
    inventory: dict[tuple[str, int], float] | None = None,
) -> Solution:
    """The reactive rules on one generation: ``chip``, or the best of all (least objective; the
    others' objectives in ``meta['each']``)."""
    if chip is not None:
        return autoscale(coeffs, options, params, chip, inventory, "homogeneous-autoscaler")
    each = homogeneous_each(coeffs, options, params, inventory)
    best = min(each, key=lambda c: (each[c].objective_value, c))
    sol = each[best]
    summary = {
        c: {"objective_value": s.objective_value, "unserved_rps": s.totals["unserved_rps"]} for c, s in each.items()
    }
    return Solution(**{**sol.__dict__, "meta": {**sol.meta, "chip": best, "each": summary}})


def homogeneous_each(
    coeffs: Coefficients,
    options: PlanOptions,
    params: HorizonParams,
    inventory: dict[tuple[str, int], float] | None = None,
) -> dict[str, Solution]:
    """The homogeneous auto-scaler on every generation that has configurations."""
    chips = sorted(set(prepare(coeffs, horizon_options(options)).configs["chip"].astype(str)))
    return {c: autoscale(coeffs, options, params, c, inventory, "homogeneous-autoscaler") for c in chips}


def fleet_total_inventory(coeffs: Coefficients, chip: str, events: Any = ()) -> dict[tuple[str, int], float]:
    """H_{chip,t} of a homogeneous fleet as large as the whole fleet (every healthy chip, and every
    inventory event, counted as ``chip``): the baseline's fleet in the headline experiment."""
    total = sum(h for h in coeffs.inventory().values())
    out = {}
    for t in coeffs.epochs:
        delta = sum(float(ev.delta_chips) for ev in events if ev.epoch <= t)
        for c in coeffs.inventory():
            out[(c, t)] = (total + delta) if c == chip else 0.0
    return out


__all__ = [
    "autoscale",
    "fleet_total_inventory",
    "homogeneous_autoscaler",
    "homogeneous_each",
    "neuscale_autoscaler",
    "reactive_need",
]
