"""Independent evaluator of a schedule (a plan over several epochs), without Pyomo or the model code.

:func:`evaluate_schedule` re-checks any horizon plan (MILP, rolling, reactive policies) from its
allocation rows and the coefficient tables only:

* per epoch, everything :func:`neuscale_opt.alloc.evaluate.evaluate` checks (rows against the
  coefficient table, SLO, capacity, coverage of the *planned* demand) and its accounting (energy,
  money, carbon, tokens);
* inventory over time: chips held per generation and epoch <= H_{c,t} (``inventory_events``);
* coupling between consecutive epochs, group by group (a group is a ``vpod_group`` key, absent =
  0 vPods): growth n_t <= gamma n_{t-1} + a; derated capacity u_t <= n_t - delta y_t with
  y_t = max(n_t - n_{t-1}, 0); scale-down n_t >= max(floor(sigma n_{t-1}), max_{tau in t-K..t-1}
  u_tau) (tau after the generation's last failure), except for vPods lost to failed chips (at
  most the chips the generation lost at t); a key never changes its vPod type;
* reconfiguration accounting: vPods created y and deleted z per epoch, their extra energy;
* placement (plans made with ``placement`` other than ``none``): the per-epoch evaluation checks
  the placement rows against the pods (``alloc.evaluate``: aligned, healthy, disjoint, counts per
  epoch, generation, shape and group), and reports a plan that holds vPods of placed generations
  without placement rows as ``unplaced``.

* the run-time surge guard on the demand that came (:func:`guard_as_run`, ``formulations/horizon.md``,
  "The guard, as run", G1-G4): the vPods it will add where a plan sized on a forecast meets more
  demand than its groups and the overflow to other groups can take, and their energy and money
  (``guard_*`` in the totals and per epoch), apart from the plan's own.

The objective recomputed here equals the horizon MILP's (relative 1e-6): the tests check it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from neuscale_opt.alloc.attainment import row_shares
from neuscale_opt.alloc.evaluate import evaluate
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.coefficients import J_PER_KWH, Coefficients, serving_rows
from neuscale_opt.energy import arrival_ratio, busy_energy_rate_w, static_energy_j
from neuscale_opt.horizon.context import inventory_dropped
from neuscale_opt.horizon.params import FLOOR_EPS, HorizonParams
from neuscale_opt.replay.surge import StandIns

RTOL = 1e-6


@dataclass(frozen=True)
class ScheduleEvaluation:
    """Verdict, violations (one line each), totals, the objective recomputed (penalty and
    reconfiguration included) and a per-epoch table (``epoch``, ``energy_j``, ``cost_usd``,
    ``carbon_kg``, ``unserved_rps``, ``tokens``, ``created_vpods``, ``deleted_vpods``,
    ``reconfig_energy_j``, ``chips_<generation>``...)."""

    feasible: bool
    violations: tuple[str, ...]
    totals: dict[str, Any]
    objective_value: float
    by_epoch: pd.DataFrame
    groups: pd.DataFrame


def _ok(lhs: float, rhs: float) -> bool:
    return lhs <= rhs + RTOL * max(1.0, abs(rhs))


def _row_loads(
    allocations: pd.DataFrame, coeffs: Coefficients, options: PlanOptions
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the allocation rows with ``_load`` = rate / (u_k mu_k) in vPods, their configuration rows)."""
    cfg = coeffs.configs.set_index("config_id")
    rows = allocations.reset_index(drop=True).copy()
    ref = cfg.loc[rows["config_id"]].reset_index()
    rows["_full"] = ref["max_rate_rps"].astype(float).to_numpy()
    rows["_cap"] = row_shares(ref, coeffs, options) * rows["_full"].to_numpy()
    rows["_load"] = rows["rate_rps"].astype(float).to_numpy() / rows["_cap"].to_numpy()
    return rows, ref


def group_table(allocations: pd.DataFrame, coeffs: Coefficients, options: PlanOptions) -> pd.DataFrame:
    """One row per (epoch, vpod_group): ``n`` vPods, ``load`` = sum of rate / (u_k mu_k) of its rows
    (u_k from ``alloc.attainment.row_shares``), ``chip``, ``chips_per_vpod``, ``vpod_type``."""
    cols = ["epoch", "vpod_group", "n", "load", "chip", "chips_per_vpod", "vpod_type"]
    if allocations.empty:
        return pd.DataFrame(columns=cols)
    rows, _ = _row_loads(allocations, coeffs, options)
    return _groups_of(rows)[cols]


def _groups_of(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (epoch, vpod_group) of :func:`_row_loads`'s rows: ``n``, ``load``, ``chip``,
    ``chips_per_vpod``, ``vpod_type`` and ``first`` (the position of one of its rows)."""
    return (
        rows.groupby(["epoch", "vpod_group"], sort=True)
        .agg(
            n=("n_vpods", "max"),
            load=("_load", "sum"),
            chip=("chip", "first"),
            chips_per_vpod=("chips_per_vpod", "first"),
            vpod_type=("vpod_type", "first"),
            first=("_load", lambda x: x.index[0]),
        )
        .reset_index()
    )


def _flat_inventory(solution: Any, coeffs: Coefficients, chip: str, inv: dict[tuple[str, int], float]) -> float:
    """Inventory of ``chip`` for the per-epoch evaluation: unlimited (the schedule check below reads
    H_{c,t}), except for a generation given as pods in a plan made with placement, which keeps a
    finite inventory (its largest H_{c,t}) so that its placement rows are checked."""
    if getattr(solution.options, "placement", "none") == "none" or coeffs.pods is None or len(coeffs.pods) == 0:
        return math.inf
    base = coeffs.inventory().get(chip, math.inf)
    if math.isinf(base) or chip not in set(coeffs.pods["chip"].astype(str)):
        return math.inf
    return max([base, *(h for (c, _t), h in inv.items() if c == chip)])


def _overflow_capacity(coeffs: Coefficients) -> dict[tuple[str, str], float]:
    """(vPod type, class) -> mu (req/s per vPod at full rate) of the candidate table's feasible
    rows: the classes a vPod type serves within their SLO and memory, as the replay's overflow
    router reads them."""
    ok = serving_rows(coeffs.configs)
    if ok.empty:
        return {}
    full = ok["max_rate_rps"].astype(float).to_numpy()
    return {
        (str(v), str(b)): float(c)
        for v, b, c in zip(ok["vpod_type"].astype(str), ok["bucket"].astype(str), full, strict=True)
        if c > 0
    }


def _absorbed(
    groups: pd.DataFrame,
    demand: dict[tuple[str, str], float],
    own_full: dict[tuple[tuple[str, str], int], float],
    full_of: dict,
    hot: np.ndarray,
) -> np.ndarray:
    """Per group, whether the held groups take the demand that came at their full rates, each class
    moved to any group whose vPod type serves it (the replay's overflow router): an LP (HiGHS
    through scipy) that minimises the vPods missing at full rate, missing only in the ``hot``
    groups (the others keep up with their own classes); True where that group misses none."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    n = groups["n"].to_numpy(dtype=float)
    types = groups["vpod_type"].astype(str).tolist()
    ng = len(types)
    classes = sorted(key for key, r in demand.items() if r > 0)
    # the router moves colocated requests only, to colocated groups (a type key names its phase)
    pairs = [
        (k, j, own_full.get((key, j), full_of.get((types[j], key[0]), 0.0) if key[1] == "colocated" else 0.0))
        for k, key in enumerate(classes)
        for j in range(ng)
    ]
    pairs = [p for p in pairs if p[2] > 0]
    nx, nk = len(pairs), len(classes)
    cover = np.zeros((nk, nx + ng))
    load = np.zeros((ng, nx + ng))
    for i, (k, j, c) in enumerate(pairs):
        cover[k, i] = 1.0
        load[j, i] = 1.0 / c
    load[np.arange(ng), nx + np.arange(ng)] = -1.0
    rhs = np.array([demand[b] for b in classes])
    res = milp(
        np.concatenate([np.zeros(nx), np.ones(ng)]),
        constraints=[LinearConstraint(cover, rhs, rhs), LinearConstraint(load, -np.inf, n)],
        bounds=Bounds(np.zeros(nx + ng), np.concatenate([np.full(nx, np.inf), np.where(hot, np.inf, 0.0)])),
    )
    if res.x is None:  # cannot happen: every class fits its own groups, the hot ones with vPods missing
        return np.zeros(ng, dtype=bool)
    return res.x[nx:] <= 1e-6


#: the per-vPod rates of a stand-in type's configuration row that G4 charges (W, USD/h, kg/h)
STAND_IN_RATES = ("static_power_w", "price_usd_per_hour", "embodied_kg_per_hour")


def _guard_vpods(
    groups: pd.DataFrame,
    rows: pd.DataFrame,
    full_of: dict[tuple[str, str], float],
    free: dict[tuple[int, str], float],
    t: int,
    gamma: float,
    standins: StandIns | None = None,
) -> tuple[np.ndarray, list[tuple[int, str, int]]]:
    """G2-G3 of epoch ``t``: the guard's vPods of its own type per group (``groups`` of the epoch,
    ``rows`` its allocation rows with the rate that came, ``_came`` req/s), and those that stand in
    where its generation has no room (group position, type key, vPods)."""
    n = groups["n"].to_numpy(dtype=float)
    w = groups["w"].to_numpy(dtype=float)
    at = {g: i for i, g in enumerate(groups["vpod_group"].astype(str))}
    full_load = np.zeros(len(at))
    safe_load = np.zeros(len(at))
    own_full: dict[tuple[tuple[str, str], int], float] = {}
    demand: dict[tuple[str, str], float] = {}  # (class, phase): a disaggregated class has two halves
    came = rows["_came"].to_numpy(dtype=float)
    phases = rows["phase"].astype(str) if "phase" in rows.columns else pd.Series("colocated", index=rows.index)
    for b, ph, g, r, c, f in zip(
        rows["bucket"].astype(str),
        phases,
        rows["vpod_group"].astype(str),
        came,
        rows["_cap"],
        rows["_full"],
        strict=True,
    ):
        j = at[g]
        demand[(b, ph)] = demand.get((b, ph), 0.0) + float(r)
        own_full[((b, ph), j)] = float(f)
        if r > 0:  # a row the plan holds without a rate adds no load (its shares may be 0)
            full_load[j] += float(r) / float(f) if f > 0 else math.inf
            safe_load[j] += float(r) / float(c) if c > 0 else math.inf
    hot = full_load > n * (1 + RTOL)  # G2: the group's queue grows at the rate that came ...
    if hot.any():
        hot &= ~_absorbed(groups, demand, own_full, full_of, hot)  # ... and the other groups cannot take it
    want = np.where(hot, np.minimum(np.ceil(safe_load - n - RTOL), np.ceil(gamma * n - 1e-9) - n), 0.0)
    chips = groups["chip"].astype(str).tolist()
    types = groups["vpod_type"].astype(str).tolist()
    out = np.zeros(len(at))
    subs: list[tuple[int, str, int]] = []
    for j in np.flatnonzero(want > 0):  # G3, in key order
        room = free.get((t, chips[j]), math.inf)
        fits = want[j] if math.isinf(room) else min(want[j], max(math.floor(room / w[j] + 1e-9), 0))
        if fits > 0:
            out[j] = fits
            free[(t, chips[j])] = room - fits * w[j]
        rest = int(want[j] - fits)
        if rest > 0 and standins is not None and types[j].endswith(":colocated"):
            # the replay's stand-ins: each vPod of the first stand-in type with room
            mine = sorted(
                (b, float(r)) for b, g, r in zip(rows["bucket"].astype(str), rows["vpod_group"].astype(str),
                                                 rows["rate_rps"], strict=True) if at[g] == j
            )  # fmt: skip
            order = standins.order(types[j], int(w[j]), [b for b, _ in mine], [r for _, r in mine])
            for key in order:
                c, ws = str(standins.row[key]["chip"]), standins.chips[key]
                room = free.get((t, c), 0.0)
                k = min(rest, max(math.floor(room / ws + 1e-9), 0))
                if k > 0:
                    subs.append((int(j), key, k))
                    free[(t, c)] = room - k * ws
                    rest -= k
                if rest == 0:
                    break
    return out, subs


#: the guard's columns of :func:`guard_as_run` (per epoch and in the totals)
GUARD_COLUMNS = (
    "guard_vpods",
    "guard_chip_hours",
    "guard_static_j",
    "guard_busy_j",
    "guard_energy_j",
    "guard_cost_usd",
    "guard_carbon_kg",
)


def guard_as_run(
    solution: Any,
    coeffs: Coefficients,
    params: HorizonParams,
    demand: pd.DataFrame,
    inventory: dict[tuple[str, int], float],
    epochs: list[int],
) -> pd.DataFrame:
    """The run-time surge guard's vPods the schedule calls for on the demand that came
    (``formulations/horizon.md``, "The guard, as run", G1-G4), one row per epoch with
    :data:`GUARD_COLUMNS` (energy at the facility, its static and busy parts before PUE).

    ``demand``: the demand the plan was sized for (``rate_rps``; with the actual mean rates
    ``mean_rps``); ``coeffs.demand``'s ``rate_rps`` is the demand that came. G1: a group's load on
    the demand that came, each row's load times its class's actual / planned rate. G2: a group
    whose load at full rate (u = 1) exceeds its ``n`` vPods, where the other held groups cannot take
    the excess either (each class on any group whose vPod type serves it, as the replay's overflow
    router moves it), gets ``ceil(load - n)`` vPods at the plan's rate per vPod, at most
    ``ceil(gamma n) - n``. G3: inside each generation's chips left free by the vPods held during the
    epoch (its own and the next epoch's, as the replay's pre-warm holds them), granted group by
    group in key order. G4: each held from ``create_delay_s`` after the epoch starts to its end, at its static
    power and price, plus the weight streaming its smaller batches add (E2 at ``n + m`` vPods
    against ``n``)."""
    out = pd.DataFrame({"epoch": epochs, **{c: 0.0 for c in GUARD_COLUMNS}})
    alloc = solution.allocations
    hold_s = max(float(coeffs.epoch_s) - float(params.create_delay_s), 0.0)
    if alloc.empty or hold_s <= 0:
        return out
    rows, ref = _row_loads(alloc, coeffs, solution.options)
    key = ["epoch", "bucket"]
    came = coeffs.demand.set_index([coeffs.demand["epoch"].astype(int), coeffs.demand["bucket"].astype(str)])
    sized = demand.set_index([demand["epoch"].astype(int), demand["bucket"].astype(str)])
    at = pd.MultiIndex.from_arrays([rows["epoch"].astype(int), rows["bucket"].astype(str)], names=key)
    actual = came["rate_rps"].astype(float).reindex(at).fillna(0.0).to_numpy()
    planned = sized["rate_rps"].astype(float).reindex(at).fillna(0.0).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(planned > 0, actual / np.where(planned > 0, planned, 1.0), 1.0)
    rows["_came"] = rows["rate_rps"].astype(float).to_numpy() * ratio  # G1: the rate that came, req/s
    rate = rows["rate_rps"].astype(float).to_numpy()
    arriving = arrival_ratio(rows, demand, coeffs.buckets) * rate
    n_row = rows["n_vpods"].astype(float).to_numpy()
    gkey = [f"{e}|{g}" for e, g in zip(rows["epoch"].astype(int), rows["vpod_group"].astype(str), strict=True)]
    groups = _groups_of(rows).rename(columns={"chips_per_vpod": "w"})
    # G3: chips of each generation free during epoch t (its vPods and the next epoch's held)
    held_n: dict[tuple[int, str], float] = {}
    type_chip: dict[str, tuple[str, float]] = {}
    for e, vt, nn, c, w in zip(
        groups["epoch"].astype(int),
        groups["vpod_type"].astype(str),
        groups["n"],
        groups["chip"],
        groups["w"],
        strict=True,
    ):
        held_n[(e, vt)] = held_n.get((e, vt), 0.0) + float(nn)
        type_chip[vt] = (str(c), float(w))
    free: dict[tuple[int, str], float] = {}
    for t in epochs:
        nxt = t + 1 if t + 1 in epochs else t
        for c in sorted({c for c, _ in type_chip.values()} | {c for c, _ in inventory}):
            free[(t, c)] = min(inventory.get((c, t), math.inf), inventory.get((c, nxt), math.inf))
        for vt, (c, w) in sorted(type_chip.items()):
            free[(t, c)] -= max(held_n.get((t, vt), 0.0), held_n.get((t + 1, vt), 0.0)) * w
    # G2 and G3, epoch by epoch
    full_of = _overflow_capacity(coeffs)
    standins = StandIns(
        coeffs.configs,
        coeffs.buckets,
        solution.options.util_cap if solution.options.util_cap is not None else coeffs.util_cap,
        float(solution.options.attainment),
        sorted(set(alloc["chip"].astype(str))),  # the replay's default: generations the plan deploys
    )
    extra = np.zeros(len(groups))
    extra_busy = np.zeros(len(groups))  # stand-ins per group (their weight streaming is the group's, G4)
    # per epoch: the stand-ins' vPods, chips, static W, price and embodied carbon per hour (G3-G4)
    sub = {t: np.zeros(5) for t in epochs}
    for t in epochs:
        gi = np.flatnonzero(groups["epoch"].astype(int).to_numpy() == t)
        mine = rows[rows["epoch"].astype(int) == t]
        if len(gi) and len(mine):
            extra[gi], subs = _guard_vpods(groups.iloc[gi], mine, full_of, free, t, params.growth_max, standins)
            for j, key, k in subs:
                r = standins.row[key]
                sub[t] += k * np.array(
                    [1.0, standins.chips[key], *(float(np.nan_to_num(float(r[c]))) for c in STAND_IN_RATES)]
                )
                extra_busy[gi[j]] += k
    if not (extra.any() or extra_busy.any()):
        return out
    # G4: held hold_s at static power and price; weight streaming at n + m vPods against n
    m_of = dict(
        zip(
            (f"{e}|{g}" for e, g in zip(groups["epoch"], groups["vpod_group"], strict=True)),
            extra + extra_busy,
            strict=True,
        )
    )
    m_row = np.array([m_of[k] for k in gkey])
    busy_w = busy_energy_rate_w(ref, arriving, n_row + m_row, gkey) - busy_energy_rate_w(ref, arriving, n_row, gkey)
    busy_w = np.where(m_row > 0, busy_w, 0.0)
    first = groups["first"].astype(int).to_numpy()
    static_w, price_h, emb_h = (
        np.nan_to_num(ref[c].astype(float).to_numpy()[first], nan=0.0)
        for c in ("static_power_w", "price_usd_per_hour", "embodied_kg_per_hour")
    )
    kg_per_j = coeffs.carbon_kg_per_kwh / J_PER_KWH
    g_epoch = groups["epoch"].astype(int).to_numpy()
    r_epoch = rows["epoch"].astype(int).to_numpy()
    w_g = groups["w"].to_numpy(dtype=float)
    cols: dict[str, list[float]] = {c: [] for c in GUARD_COLUMNS}
    for t in epochs:
        ge, re_ = g_epoch == t, r_epoch == t
        n_sub, chips_sub, static_sub, price_sub, emb_sub = sub[t]
        static_j = float(static_energy_j(static_w[ge], extra[ge] * hold_s).sum())
        static_j += float(static_energy_j(static_sub, hold_s))
        busy_j = float(busy_w[re_].sum()) * hold_s
        energy = coeffs.pue * (static_j + busy_j)
        cols["guard_vpods"].append(float(extra[ge].sum()) + n_sub)
        cols["guard_chip_hours"].append((float((extra[ge] * w_g[ge]).sum()) + chips_sub) * hold_s / 3600.0)
        cols["guard_static_j"].append(static_j)
        cols["guard_busy_j"].append(busy_j)
        cols["guard_energy_j"].append(energy)
        cols["guard_cost_usd"].append((float((price_h[ge] * extra[ge]).sum()) + price_sub) * hold_s / 3600.0)
        emb = float((emb_h[ge] * extra[ge]).sum()) + emb_sub
        cols["guard_carbon_kg"].append(energy * kg_per_j + emb * hold_s / 3600.0)
    return pd.DataFrame({"epoch": epochs, **cols})


def evaluate_schedule(
    solution: Any,
    coeffs: Coefficients,
    params: HorizonParams,
    demand: pd.DataFrame | None = None,
    inventory: dict[tuple[str, int], float] | None = None,
    guard: bool = True,
) -> ScheduleEvaluation:
    """Re-check ``solution`` as a schedule and account for it.

    ``demand``: the demand the plan claims to cover (default ``coeffs.demand``; a rolling plan
    covers its forecasts). ``inventory``: H_{c,t} (default: ``coeffs`` inventory in every epoch).
    ``guard``: estimate the surge guard on the demand that came (:func:`guard_as_run`; False: the
    ``guard_*`` columns are 0, for a verdict alone).
    """
    dem = coeffs.demand if demand is None else demand
    if "mean_rps" in coeffs.demand.columns and "mean_rps" not in dem.columns:
        # energy is accounted on the traffic that arrives: the actual epochs' mean rates
        keys = ["epoch", "bucket"]
        dem = dem.merge(coeffs.demand[[*keys, "mean_rps"]], on=keys, how="left").fillna({"mean_rps": 0.0})
    epochs = sorted(int(e) for e in dem["epoch"].unique())
    base_inv = coeffs.inventory()
    inv = inventory if inventory is not None else {(c, t): h for c, h in base_inv.items() for t in epochs}
    chips = coeffs.chips.copy()
    chips["healthy_chips"] = [_flat_inventory(solution, coeffs, str(c), inv) for c in chips["chip"]]
    flat = replace(coeffs, demand=dem, chips=chips)
    t_s = float(coeffs.epoch_s)
    # the per-epoch evaluation charges the pre-warm hold of the vPods each epoch adds, at this
    # schedule's lead (formulations/allocation.md, "Pre-warm hold")
    ev = evaluate(solution, flat, lead_s=params.lead_s(t_s))
    violations = list(ev.violations)

    opts = solution.options
    groups = group_table(solution.allocations, coeffs, opts)

    # -- inventory over time -------------------------------------------------------------------
    used = (
        (groups["n"].astype(float) * groups["chips_per_vpod"].astype(float))
        .groupby([groups["epoch"], groups["chip"]])
        .sum()
    )
    for (t, c), x in used.items():
        h = inv.get((str(c), int(t)), math.inf)
        if not math.isinf(h) and not _ok(x, h):
            violations.append(f"epoch {t}: {c} holds {x:.0f} chips of {h:.0f} healthy")

    # -- coupling ------------------------------------------------------------------------------
    n_of = {(int(r.epoch), str(r.vpod_group)): int(r.n) for r in groups.itertuples()}
    load_of = {(int(r.epoch), str(r.vpod_group)): float(r.load) for r in groups.itertuples()}
    type_of: dict[str, str] = {}
    chip_of: dict[str, tuple[str, float]] = {}
    for r in groups.itertuples():
        g = str(r.vpod_group)
        if type_of.setdefault(g, str(r.vpod_type)) != str(r.vpod_type):
            violations.append(f"group {g!r} changes vPod type at epoch {r.epoch}")
        chip_of[g] = (str(r.chip), float(r.chips_per_vpod))
    keys = sorted(type_of)
    delta = params.delay_share(t_s) if params.coupling else 0.0
    k_hold = params.hold_epochs(t_s) if params.coupling else 0
    created: dict[int, int] = {}
    deleted: dict[int, int] = {}
    created_chips: dict[int, float] = {}
    deleted_chips: dict[int, float] = {}
    for t in epochs:
        created[t] = deleted[t] = 0
        created_chips[t] = deleted_chips[t] = 0.0
        if t - 1 not in epochs:
            continue
        forced: dict[str, float] = {}
        example: dict[str, str] = {}
        for g in keys:
            n, prev = n_of.get((t, g), 0), n_of.get((t - 1, g), 0)
            c, w = chip_of[g]
            y, z = max(n - prev, 0), max(prev - n, 0)
            created[t] += y
            deleted[t] += z
            created_chips[t] += y * w
            deleted_chips[t] += z * w
            if not params.coupling:
                continue
            if n > params.growth_max * prev + params.new_group_vpods + 1e-9:
                violations.append(
                    f"epoch {t} group {g!r}: grows from {prev} to {n} vPods "
                    f"(limit {params.growth_max:g} x {prev} + {params.new_group_vpods})"
                )
            load = load_of.get((t, g), 0.0)
            if not _ok(load, n - delta * y):
                violations.append(
                    f"epoch {t} group {g!r}: load {load:.6g} vPods exceeds {n} held less {delta:.3g} x {y} created"
                )
            floor_shrink = math.floor(params.shrink_factor * prev + FLOOR_EPS)
            hold = max(
                (
                    load_of.get((tau, g), 0.0)
                    for tau in range(t - k_hold, t)
                    if tau in epochs and not inventory_dropped(inv, c, tau, t)
                ),
                default=0.0,
            )
            floor = max(floor_shrink, math.ceil(hold - RTOL * max(1.0, hold)))
            if n < floor:
                forced[c] = forced.get(c, 0.0) + (floor - n) * w
                example.setdefault(c, g)
        for c, x in forced.items():
            drop = inv.get((c, t - 1), math.inf) - inv.get((c, t), math.inf)
            allowed = 0.0 if math.isnan(drop) or math.isinf(drop) else max(drop, 0.0)
            if not _ok(x, allowed):
                violations.append(
                    f"epoch {t}: {c} groups shrink {x:.0f} chips below the scale-down rules "
                    f"(e.g. {example[c]!r}) with {allowed:.0f} chips failed"
                )

    # -- accounting ----------------------------------------------------------------------------
    by_epoch = ev.by_epoch.copy()
    kg_per_j = coeffs.carbon_kg_per_kwh / J_PER_KWH
    reconfig_j = np.array(
        [
            coeffs.pue
            * (created_chips[t] * params.create_energy_j_per_chip + deleted_chips[t] * params.delete_energy_j_per_chip)
            for t in by_epoch["epoch"]
        ],
        dtype=float,
    )
    by_epoch["created_vpods"] = [created[int(t)] for t in by_epoch["epoch"]]
    by_epoch["deleted_vpods"] = [deleted[int(t)] for t in by_epoch["epoch"]]
    by_epoch["reconfig_energy_j"] = reconfig_j
    by_epoch["energy_j"] = by_epoch["energy_j"] + reconfig_j
    by_epoch["carbon_kg"] = by_epoch["carbon_kg"] + reconfig_j * kg_per_j
    for c in sorted(base_inv):
        by_epoch[f"chips_{c}"] = [float(used.get((int(t), c), 0.0)) for t in by_epoch["epoch"]]
    # the surge guard's vPods on the demand that came (not in energy_j / cost_usd: the plan's own)
    ep = [int(t) for t in by_epoch["epoch"]]
    run = guard_as_run(solution, coeffs, params, dem, inv, ep) if guard else None
    for c in GUARD_COLUMNS:
        by_epoch[c] = run[c].to_numpy() if run is not None else np.zeros(len(ep))
    totals = dict(ev.totals)
    totals.update({c: float(by_epoch[c].sum()) for c in GUARD_COLUMNS})
    energy = float(by_epoch["energy_j"].sum())
    cost = float(by_epoch["cost_usd"].sum())
    totals.update(
        energy_j=energy,
        carbon_kg=float(by_epoch["carbon_kg"].sum()),
        reconfig_energy_j=float(reconfig_j.sum()),
        created_vpods=int(by_epoch["created_vpods"].sum()),
        deleted_vpods=int(by_epoch["deleted_vpods"].sum()),
        tokens_per_j=totals["tokens"] / energy if energy > 0 else math.nan,
        tokens_per_usd=totals["tokens"] / cost if cost > 0 else math.nan,
    )
    key = {"energy": "energy_j", "cost": "cost_usd", "carbon": "carbon_kg"}[solution.objective]
    objective_value = float(totals[key]) + float(totals.get("penalty", 0.0))
    return ScheduleEvaluation(
        feasible=not violations,
        violations=tuple(violations),
        totals=totals,
        objective_value=objective_value,
        by_epoch=by_epoch,
        groups=groups,
    )
