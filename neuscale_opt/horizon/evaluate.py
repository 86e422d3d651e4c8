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
from neuscale_opt.coefficients import J_PER_KWH, Coefficients
from neuscale_opt.horizon.context import inventory_dropped
from neuscale_opt.horizon.params import FLOOR_EPS, HorizonParams

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


def group_table(allocations: pd.DataFrame, coeffs: Coefficients, options: PlanOptions) -> pd.DataFrame:
    """One row per (epoch, vpod_group): ``n`` vPods, ``load`` = sum of rate / (u_k mu_k) of its rows
    (u_k from ``alloc.attainment.row_shares``), ``chip``, ``chips_per_vpod``, ``vpod_type``."""
    cols = ["epoch", "vpod_group", "n", "load", "chip", "chips_per_vpod", "vpod_type"]
    if allocations.empty:
        return pd.DataFrame(columns=cols)
    cfg = coeffs.configs.set_index("config_id")
    rows = allocations.copy()
    ref = cfg.loc[rows["config_id"]].reset_index()
    cap = row_shares(ref, coeffs, options) * ref["max_rate_rps"].astype(float).to_numpy()
    rows["_load"] = rows["rate_rps"].astype(float).to_numpy() / cap
    out = (
        rows.groupby(["epoch", "vpod_group"], sort=True)
        .agg(
            n=("n_vpods", "max"),
            load=("_load", "sum"),
            chip=("chip", "first"),
            chips_per_vpod=("chips_per_vpod", "first"),
            vpod_type=("vpod_type", "first"),
        )
        .reset_index()
    )
    return out[cols]


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


def evaluate_schedule(
    solution: Any,
    coeffs: Coefficients,
    params: HorizonParams,
    demand: pd.DataFrame | None = None,
    inventory: dict[tuple[str, int], float] | None = None,
) -> ScheduleEvaluation:
    """Re-check ``solution`` as a schedule and account for it.

    ``demand``: the demand the plan claims to cover (default ``coeffs.demand``; a rolling plan
    covers its forecasts). ``inventory``: H_{c,t} (default: ``coeffs`` inventory in every epoch).
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
    totals = dict(ev.totals)
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
