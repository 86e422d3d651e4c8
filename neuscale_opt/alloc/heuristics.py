"""The greedy best-fit heuristic (NeuScale) and the homogeneous auto-scaler baseline.

Both read the same :class:`~neuscale_opt.alloc.context.EpochContext` as the MILP and return an
:class:`EpochPlan` (vPods per group, rate per configuration, unserved rate per class) that
:mod:`neuscale_opt.alloc.plan` turns into the common :class:`~neuscale_opt.alloc.solution.Solution`.

Greedy best-fit (``greedy``)
    Efficiency of configuration k is its objective cost per request at full capped load,
    ``e_k = h_g(k) / (c_k T) + a_k`` (J, USD or kg per request). Classes are served one
    (class, phase) at a time, in decreasing order of the chips their most efficient configuration
    needs (``ceil(d_b / c_k) * chips_k``; ties by class name, then phase), so the biggest consumers
    claim the best-fit generation first (first-fit decreasing). Each class walks its configurations
    from the most efficient: it first fills spare capacity of the configuration's group, then adds
    ``ceil`` vPods as the inventory allows, and fails over to the next configuration (typically the
    next generation) when the chips run out. What no configuration can take is unserved (or makes
    the heuristic infeasible when unserved demand is not allowed).

Placement (both heuristics, generations given as pods)
    Each vPod is placed when it is bought, by the first-fit rule of
    :class:`~neuscale_opt.topology.greedy.FirstFitPlacer`: the lowest pod in fleet order where it
    fits, at the first free aligned position (orientations as listed, origins row-major); sub-host
    and sub-cube slices go to damaged hosts or cubes first and fill one host or cube before the next
    (best fit, whole hosts and cubes stay free for larger slices); cube-built slices take the
    lowest-numbered free healthy cubes. vPods are placed in the order the heuristic buys them (class
    order above, then configuration rank), never moved. **Fail-over on fragmentation:** when a slice
    of the configuration's shape no longer fits anywhere although the generation still has enough
    healthy chips, the configuration is treated as exhausted and the class moves on to its next
    configuration (another shape of the same generation, or another generation), exactly as when
    the chips run out. vPods a trim releases at the end give back their placement (the last placed
    first).

Homogeneous (``homogeneous``)
    A conventional auto-scaler on one chip generation: for each class its most efficient
    configuration on that generation, ``ceil(d_b / c_k)`` vPods, nothing else. Run on each
    generation; the baseline is the best of them. With placement, a class whose slices stop fitting
    although chips remain fails over to its next configurations of that generation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from neuscale_opt.alloc.context import EpochContext
from neuscale_opt.alloc.placement import GroupPlacements, pod_order
from neuscale_opt.topology.greedy import FirstFitPlacer, place_up_to
from neuscale_opt.topology.patterns import PodPlacement

EPS = 1e-9


@dataclass(frozen=True)
class EpochPlan:
    """One epoch's plan: vPods per group, rate per configuration, unserved rate per class, and the
    placements of the vPods of placed generations as (group, placement) pairs. ``unfit`` lists the
    (generation, shape) slices that stopped fitting although chips remained (heuristics only)."""

    n: dict[str, int]
    x: dict[str, float]
    s: dict[str, float]
    status: str = "feasible"
    diagnosis: str | None = None
    exhausted: tuple[str, ...] = field(default_factory=tuple)
    placements: GroupPlacements = ()
    unfit: tuple[tuple[str, str], ...] = ()
    #: configuration -> the group that serves it when not its own (tail classes, ``alloc.tail``)
    groups: dict[str, str] = field(default_factory=dict)


def make_placer(ctx: EpochContext) -> FirstFitPlacer | None:
    """A first-fit placer over the pods of the placed generations, in fleet order (``None`` when
    nothing is placed)."""
    if not ctx.placement:
        return None
    pods = {pid: g.state for d in ctx.placement.values() for g in d.groups for pid in g.pod_ids}
    return FirstFitPlacer(dict(sorted(pods.items(), key=lambda kv: pod_order(kv[0]))))


def efficiency(ctx: EpochContext) -> dict[str, float]:
    """e_k = h_g(k) / (c_k T) + a_k, objective units per request at full capped load."""
    cfg = ctx.configs
    e = cfg["held_obj_per_vpod"] / (cfg["cap_rps"] * ctx.epoch_s) + cfg["var_obj_per_req"]
    return dict(zip(cfg["config_id"], e.astype(float), strict=True))


def _ranked(ctx: EpochContext, chip: str | None = None) -> dict[tuple[str, str], list]:
    """Configurations of each (class, phase), most efficient first (ties: fewer chips, id)."""
    eff = efficiency(ctx)
    out: dict[tuple[str, str], list] = {bp: [] for bp in ctx.cover}
    for r in ctx.configs.itertuples():
        if chip is not None and r.chip != chip:
            continue
        out[(str(r.bucket), str(r.phase))].append(r)
    for bp, rs in out.items():
        rs.sort(key=lambda r: (eff[r.config_id], int(r.chips_per_vpod), r.config_id))
        out[bp] = rs
    return out


def _class_order(ctx: EpochContext, ranked: dict[tuple[str, str], list]) -> list[tuple[str, str]]:
    phase_rank = {"colocated": 0, "prefill": 0, "decode": 1}

    def chips_needed(bp: tuple[str, str]) -> float:
        rs = ranked[bp]
        if not rs:
            return math.inf
        r = rs[0]
        return math.ceil(ctx.demand[bp] / float(r.cap_rps) - EPS) * float(r.chips_per_vpod)

    return sorted(ctx.cover, key=lambda bp: (-chips_needed(bp), bp[0], phase_rank[bp[1]]))


def _fill(
    ctx: EpochContext,
    ranked: dict[tuple[str, str], list],
    order: list[tuple[str, str]],
    fit_fallback: dict[tuple[str, str], list] | None = None,
) -> EpochPlan:
    """Serve the classes in ``order``, each walking ``ranked[bp]``; ``fit_fallback[bp]`` lists further
    configurations tried only after a slice of the class stopped fitting although chips remained."""
    remaining = dict(ctx.inventory)
    n: dict[str, int] = {}
    load: dict[str, float] = {}
    x: dict[str, float] = {}
    short: dict[tuple[str, str], float] = {}
    trail: dict[tuple[str, str], list[tuple[str, str, float]]] = {}
    exhausted: set[str] = set()
    placer = make_placer(ctx)
    placed: dict[str, list[PodPlacement]] = {}
    unfit: set[tuple[str, str]] = set()
    for bp in order:
        r_left = ctx.demand[bp]
        trail[bp] = []
        blocked = False  # a slice of this class stopped fitting although chips remained
        walk = list(ranked[bp])
        extra = list((fit_fallback or {}).get(bp, []))
        while walk or extra:
            if not walk:
                if not blocked:
                    break
                walk, extra = extra, []
            r = walk.pop(0)
            if r_left <= EPS * max(1.0, ctx.demand[bp]):
                break
            g, c, cpv, chip = r.group, float(r.cap_rps), float(r.chips_per_vpod), str(r.chip)
            n.setdefault(g, 0)
            load.setdefault(g, 0.0)
            need = max(math.ceil(load[g] + r_left / c - EPS) - n[g], 0)
            avail = remaining.get(chip, 0.0)
            afford = need if math.isinf(avail) else min(need, int(math.floor(avail / cpv + EPS)))
            if afford < need:
                exhausted.add(chip)
            if placer is not None and chip in ctx.placement and afford > 0:
                fits = place_up_to(placer, chip, str(r.placed_shape), afford, placed.setdefault(g, []), unfit)
                blocked |= fits < afford
                afford = fits
            n[g] += afford
            if not math.isinf(avail):
                remaining[chip] = avail - afford * cpv
            take = min(r_left, max(n[g] - load[g], 0.0) * c)
            if take <= 0:
                continue
            load[g] += take / c
            x[r.config_id] = x.get(r.config_id, 0.0) + take
            trail[bp].append((r.config_id, g, c))
            r_left -= take
        short[bp] = max(r_left, 0.0) if r_left > EPS * max(1.0, ctx.demand[bp]) else 0.0
    # one unserved rate per class: the largest shortfall over its phases; trim the other phases
    s: dict[str, float] = {}
    for b in ctx.buckets:
        phases = [bp for bp in ctx.cover if bp[0] == b]
        s_b = max(short[bp] for bp in phases)
        if s_b > 0:
            s[b] = s_b
            for bp in phases:
                extra = s_b - short[bp]
                for cid, g, c in reversed(trail[bp]):
                    if extra <= 0:
                        break
                    cut = min(extra, x[cid])
                    x[cid] -= cut
                    load[g] -= cut / c
                    extra -= cut
    # release vPods a trim left idle (never more than the load needs)
    for g in n:
        n[g] = min(n[g], max(math.ceil(load[g] - 1e-7), 0))
        if g in placed:
            del placed[g][n[g] :]
    x = {k: v for k, v in x.items() if v > 0}
    n = {g: v for g, v in n.items() if v > 0}
    status, diagnosis = "feasible", None
    if s and not ctx.options.allow_unserved:
        status = "infeasible"
        worst = max(s, key=lambda b: (s[b], b))
        chips = ", ".join(sorted(exhausted)) or "none"
        diagnosis = (
            f"epoch {ctx.epoch}: class {worst!r} left {s[worst]:.4g} req/s uncovered "
            f"after exhausting generations: {chips}"
        )
        if unfit:
            diagnosis += "; slices that no longer fit although chips remained: " + ", ".join(
                f"{c} {sh}" for c, sh in sorted(unfit)
            )
    pairs = tuple((g, pp) for g in sorted(placed) for pp in placed[g])
    return EpochPlan(
        n=n,
        x=x,
        s=s,
        status=status,
        diagnosis=diagnosis,
        exhausted=tuple(sorted(exhausted)),
        placements=pairs,
        unfit=tuple(sorted(unfit)),
    )


def greedy_epoch(ctx: EpochContext) -> EpochPlan:
    """NeuScale's best-fit rule with fail-over (see the module docstring for the order)."""
    ranked = _ranked(ctx)
    return _fill(ctx, ranked, _class_order(ctx, ranked))


def homogeneous_epoch(ctx: EpochContext, chip: str) -> EpochPlan:
    """One generation only, each class on its most efficient configuration of that generation,
    ``ceil(d_b / c_k)`` vPods (a conventional auto-scaler). With placement, a class whose slices stop
    fitting although chips remain fails over to its next configurations of that generation, in
    efficiency order (only then: without placement the baseline keeps one configuration per class)."""
    full = _ranked(ctx, chip)
    ranked = {bp: rs[:1] for bp, rs in full.items()}
    fallback = {bp: rs[1:] for bp, rs in full.items()} if chip in ctx.placement else None
    return _fill(ctx, ranked, _class_order(ctx, ranked), fallback)
