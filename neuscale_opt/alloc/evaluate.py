"""Independent evaluator: re-check any plan and account for it, without Pyomo or the model code.

:func:`evaluate` starts from a :class:`~neuscale_opt.alloc.solution.Solution`'s allocation rows and
the coefficient tables only, and recomputes

* feasibility: every row's configuration exists, matches the row, is of a phase the serving mode
  uses and meets its class's SLO (with the KV transfer added to TTFT when disaggregated); each vPod
  group's load fits its vPods under the utilisation cap; each generation's chips fit its
  inventory; each (epoch, class, phase) is covered (served + unserved = demand), with unserved
  demand only where allowed;
* placement, for the generations given as pods with a finite inventory: when the plan carries
  placement rows, :func:`neuscale_opt.topology.check.check_placements` (allowed shape, aligned, inside
  the pod, no failed chip, connected, chips disjoint across the vPods of an epoch) and, per (epoch,
  generation, canonical shape) and per (epoch, vPod group), as many rows as the allocation holds
  vPods. A plan without any placement row (``placement = "none"``, or a planner that does not place)
  is not infeasible for that: :attr:`Evaluation.unplaced` names the generations whose vPods it leaves
  unplaced and ``totals["placement"]`` says ``unplaced`` (else ``checked``, or ``not applicable``
  when no placed generation is used);
* accounting, per epoch then in total: energy (J, facility level), money (USD), carbon (kgCO2e,
  operational + embodied), chips held per generation (peak over epochs), unserved rate, and the
  efficiencies tokens per joule and per dollar.

For a MILP plan, :attr:`Evaluation.objective_value` equals the solver's objective (relative 1e-6):
the tests check it. This module deliberately shares no code with ``context``/``model``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from neuscale_opt.alloc.attainment import row_shares
from neuscale_opt.alloc.table import Table, configs_table, texts
from neuscale_opt.catalog import get_chip
from neuscale_opt.coefficients import J_PER_KWH, Coefficients, meets_slo, slo_ok
from neuscale_opt.energy import arrival_ratio, busy_energy_rate_w, request_energy_split_j, static_energy_j
from neuscale_opt.topology.check import check_placements
from neuscale_opt.topology.pods import PLACEABLE, PodState, state_of
from neuscale_opt.topology.slices import canonical, shape_str

RTOL = 1e-6
_PHASES = {"colocated": {"colocated"}, "disaggregated": {"prefill", "decode"}}


@dataclass(frozen=True)
class Evaluation:
    """Result of :func:`evaluate`: feasibility verdict, violations (one line each), totals and the
    objective recomputed in the solution's objective units (penalty of unserved demand included).
    ``unplaced``: generations given as pods whose vPods the plan holds without placement rows (a
    count-only plan; reported, not a violation)."""

    feasible: bool
    violations: tuple[str, ...]
    totals: dict[str, Any]
    objective_value: float
    by_epoch: pd.DataFrame
    unplaced: tuple[str, ...] = ()


def _rel_ok(lhs: float, rhs: float, rtol: float = RTOL) -> bool:
    """lhs <= rhs up to a relative tolerance."""
    return lhs <= rhs + rtol * max(1.0, abs(rhs))


def _codes(*cols: list[Any]) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """Codes of the distinct key tuples of the columns (sorted keys), and the keys."""
    keys = list(zip(*cols, strict=True))
    uniq = sorted(set(keys))
    pos = {k: i for i, k in enumerate(uniq)}
    return np.array([pos[k] for k in keys], dtype=np.int64), uniq


def evaluate(solution: Any, coeffs: Coefficients, lead_s: float | None = None) -> Evaluation:
    """Re-check ``solution`` against ``coeffs`` and account energy, money, carbon and chips.

    Reads from the solution only its rows, its unserved table and the options that define the
    problem it claims to solve (objective, serving mode, utilisation cap, whether unserved demand
    is allowed and at which penalty). Vectorised over the rows (numpy; no per-row pandas work).
    """
    opts = solution.options
    t = float(coeffs.epoch_s)
    # the plan's rows and the coefficient table, read column by column as arrays
    alloc = solution.allocations
    rows = Table(alloc)
    violations: list[str] = []
    table = configs_table(coeffs)

    # -- rows against the coefficient table ------------------------------------------------
    where = {cid: i for i, cid in enumerate(texts(table, "config_id"))}
    row_ids = texts(rows, "config_id")
    known = np.array([cid in where for cid in row_ids], dtype=bool)
    for cid, ok in zip(rows["config_id"].tolist(), known, strict=True):
        if not ok:
            violations.append(f"row config {cid!r} is not in the coefficient table")
    if not known.all():
        rows = rows.take(np.flatnonzero(known))
        row_ids = [c for c, ok in zip(row_ids, known, strict=True) if ok]
    ref = table.take(np.array([where[c] for c in row_ids], dtype=np.int64))
    ids = ref["config_id"].tolist()
    for col in ("bucket", "phase", "chip", "shape", "chips_per_vpod", "vpod_type"):
        mine, theirs = texts(rows, col), texts(ref, col)
        if mine == theirs:  # no row to name
            continue
        for cid, a, b in zip(ids, mine, theirs, strict=True):
            if a != b:
                violations.append(f"row {cid!r}: column {col} disagrees with the coefficient table")
    ref_phase = texts(ref, "phase")
    for cid, ph in zip(ids, ref_phase, strict=True):
        if ph not in _PHASES[opts.serving]:
            violations.append(f"row {cid!r}: phase not used by serving mode {opts.serving!r}")
    for cid, ok in zip(ids, slo_ok(ref, coeffs.buckets), strict=True):
        if not ok:
            violations.append(f"row {cid!r}: configuration misses its class's SLO")
    rate = np.asarray(rows["rate_rps"], dtype=float)
    n_v = np.asarray(rows["n_vpods"], dtype=float)
    if (rate < -1e-9).any() or (n_v < 0).any():
        violations.append("negative rate or vPod count")

    # -- effective capacity per row (KV transfer bandwidth when disaggregated) ---------------
    mu = np.asarray(ref["max_rate_rps"], dtype=float)
    dcn_j = np.zeros(len(ref))
    if opts.serving == "disaggregated" and len(ref):
        ref = ref.frame()  # the rows as a DataFrame: the table lookups below are pandas ones
        chips = coeffs.chips.set_index("chip")
        kv = ref["kv_bytes_per_req"].astype(float).fillna(0.0).to_numpy()
        bw = (
            ref["chip"].map(chips["dcn_bytes_per_s"]).astype(float).to_numpy()
            * ref["chips_per_vpod"].astype(float).to_numpy()
        )
        e_b = ref["chip"].map(chips["dcn_energy_j_per_byte"]).astype(float).fillna(0.0).to_numpy()
        dcn_j = kv * e_b
        with np.errstate(divide="ignore"):
            mu = np.where(kv > 0, np.minimum(mu, bw / np.where(kv > 0, kv, 1.0)), mu)
        violations.extend(_kv_ttft_violations(ref, coeffs, bw, kv))
    u = row_shares(ref, coeffs, opts)
    load = rate / (u * mu)
    # load-dependent energy (formulation E1-E8) on the traffic that arrives on average (the
    # arrival ratio x the provisioned rate): marginal energy per request, weight streaming at each
    # group's own load
    _, marg_j = request_energy_split_j(ref, u * mu)
    arriving = arrival_ratio(rows, coeffs.demand, coeffs.buckets) * rate
    epoch_col = np.asarray(rows["epoch"])
    group_col = texts(rows, "vpod_group")
    keys = [f"{e}|{g}" for e, g in zip(texts(rows, "epoch"), group_col, strict=True)]
    busy_j = busy_energy_rate_w(ref, arriving, n_v, keys)
    dyn_j = busy_j + (marg_j + dcn_j) * arriving
    static_w, price_h, emb_h = (
        np.nan_to_num(np.asarray(ref[c], dtype=float), nan=0.0, posinf=np.inf, neginf=-np.inf)
        for c in ("static_power_w", "price_usd_per_hour", "embodied_kg_per_hour")
    )

    # -- groups: one count per (epoch, vpod_group), capacity ---------------------------------
    epochs_int = [int(e) for e in epoch_col.tolist()]
    gcode, gkeys = _codes(epochs_int, group_col)
    ng = len(gkeys)
    first = np.full(ng, -1, dtype=np.int64)
    first[gcode[::-1]] = np.arange(len(gcode))[::-1]
    g_n = np.full(ng, -np.inf)
    np.maximum.at(g_n, gcode, n_v)
    g_nmin = np.full(ng, np.inf)
    np.minimum.at(g_nmin, gcode, n_v)
    g_load = np.zeros(ng)
    np.add.at(g_load, gcode, load)
    row_chip = texts(rows, "chip")
    row_shape = texts(rows, "shape")
    row_cpv = np.asarray(rows["chips_per_vpod"], dtype=float)
    for gi, (e, g) in enumerate(gkeys):
        if g_n[gi] != g_nmin[gi]:
            violations.append(f"epoch {e} group {g!r}: rows disagree on n_vpods")
        if not _rel_ok(g_load[gi], g_n[gi]):
            violations.append(f"epoch {e} group {g!r}: load {g_load[gi]:.6g} vPods exceeds {int(g_n[gi])} held")
    g_chip = [row_chip[i] for i in first]
    g_chips = g_n * row_cpv[first] if ng else np.zeros(0)
    ccode, ckeys = _codes([k[0] for k in gkeys], g_chip)
    used_chips = np.zeros(len(ckeys))
    np.add.at(used_chips, ccode, g_chips)
    inventory = coeffs.inventory()
    for (e, c), used in zip(ckeys, used_chips.tolist(), strict=True):
        cap = inventory.get(str(c), 0.0)
        if not math.isinf(cap) and not _rel_ok(used, cap):
            violations.append(f"epoch {e}: {c} uses {used:.0f} chips of {cap:.0f} healthy")
    # -- placement ----------------------------------------------------------------------------
    if coeffs.pods is None or len(coeffs.pods) == 0:  # nothing to place
        placement_status, unplaced, problems = "not applicable", (), []
    else:
        groups = pd.DataFrame(
            {
                "epoch": [k[0] for k in gkeys],
                "vpod_group": [k[1] for k in gkeys],
                "n": g_n,
                "chip": g_chip,
                "shape": [row_shape[i] for i in first],
            }
        )
        placement_status, unplaced, problems = _check_placement(solution, coeffs, groups)
    violations.extend(problems)

    # -- coverage ---------------------------------------------------------------------------
    uns = solution.unserved
    uns_map = {
        (int(e), str(b)): float(v)
        for e, b, v in zip(uns["epoch"].tolist(), uns["bucket"].tolist(), uns["unserved_rps"].tolist(), strict=True)
    }
    if uns_map and not opts.allow_unserved and any(v > 0 for v in uns_map.values()):
        short = sorted({e for (e, _b), v in uns_map.items() if v > 0})
        shown = ", ".join(map(str, short[:8])) + (" ..." if len(short) > 8 else "")
        violations.append(
            f"plan leaves {sum(uns_map.values()):.4g} req/s unserved in epoch(s) {shown} but unserved demand "
            "is not allowed (planning.allow_unserved = true, or --allow-unserved, plans what fits)"
        )
    scode, skeys = _codes(epochs_int, texts(rows, "bucket"), texts(rows, "phase"))
    served_sum = np.zeros(len(skeys))
    np.add.at(served_sum, scode, rate)
    served = dict(zip(skeys, served_sum.tolist(), strict=True))
    dem = coeffs.demand
    dem_e = [int(e) for e in dem["epoch"].tolist()]
    dem_b = texts(dem, "bucket")
    dem_r = dem["rate_rps"].to_numpy(dtype=float).tolist()
    phases = sorted(_PHASES[opts.serving])
    for e, b, d_rate in zip(dem_e, dem_b, dem_r, strict=True):
        for p in phases:
            got = float(served.get((e, b, p), 0.0)) + uns_map.get((e, b), 0.0)
            if abs(got - d_rate) > RTOL * max(1.0, d_rate):
                violations.append(
                    f"epoch {e} class {b!r} ({p}): served + unserved = {got:.6g} req/s, demand {d_rate:.6g}"
                )

    # -- accounting ---------------------------------------------------------------------------
    tokens = coeffs.buckets
    # tokens of the requests that arrive on average: served share of the provisioned rate x the
    # arrival ratio (formulation, "Accounting")
    tok_per_req = dict(
        zip(
            texts(tokens, "bucket"),
            (tokens["input_tokens"].to_numpy(dtype=float) + tokens["output_tokens"].to_numpy(dtype=float)).tolist(),
            strict=True,
        )
    )
    dem_ratio = arrival_ratio(dem, dem, coeffs.buckets).tolist()
    kg_per_j = coeffs.carbon_kg_per_kwh / J_PER_KWH
    g_epoch = np.array([k[0] for k in gkeys], dtype=np.int64)
    r_epoch = np.array(epochs_int, dtype=np.int64)
    g_static = static_w[first] if ng else np.zeros(0)
    g_price = price_h[first] if ng else np.zeros(0)
    g_emb = emb_h[first] if ng else np.zeros(0)
    # pre-warm hold (formulations/allocation.md, "Pre-warm hold"): the vPods a group adds at an
    # epoch e >= 1 of the plan are held L before it, as the replay creates them
    pre = _prewarm_hold(coeffs, gkeys, g_n, g_static, g_price, g_emb, lead_s)
    per_epoch = []
    for e in coeffs.epochs:
        ge = g_epoch == int(e)
        re_ = r_epoch == int(e)
        n_e = g_n[ge]
        e_dyn = float(np.nansum(dyn_j[re_])) * t
        e_busy = float(np.nansum(busy_j[re_])) * t
        static_j = float(static_energy_j(g_static[ge], n_e * t).sum())
        pre_j, pre_usd, pre_kg = pre.get(int(e), (0.0, 0.0, 0.0))
        energy = coeffs.pue * (e_dyn + static_j + pre_j)
        cost = float(np.nansum(g_price[ge] * n_e)) * t / 3600.0 + pre_usd
        carbon = energy * kg_per_j + float(np.nansum(g_emb[ge] * n_e)) * t / 3600.0 + pre_kg
        unserved_rps = sum(v for (ee, _), v in uns_map.items() if ee == e)
        tok = (
            sum(
                max(d_rate - uns_map.get((e, b), 0.0), 0.0) * ratio * tok_per_req.get(b, 0.0)
                for de, b, d_rate, ratio in zip(dem_e, dem_b, dem_r, dem_ratio, strict=True)
                if de == e
            )
            * t
        )
        per_epoch.append(
            {
                "epoch": e,
                "energy_j": energy,
                "cost_usd": cost,
                "carbon_kg": carbon,
                "unserved_rps": unserved_rps,
                "tokens": tok,
                "energy_static_j": static_j + pre_j,  # the pre-warm hold is static power too
                "energy_busy_j": e_busy,
                "energy_dynamic_j": e_dyn,
                "prewarm_energy_j": coeffs.pue * pre_j,
                "prewarm_cost_usd": pre_usd,
            }
        )
    epoch_cols = ["epoch", "energy_j", "cost_usd", "carbon_kg", "unserved_rps", "tokens"]
    epoch_cols += ["prewarm_energy_j", "prewarm_cost_usd"]
    epoch_arrays = {c: np.array([r[c] for r in per_epoch]) for c in epoch_cols}
    by_epoch = pd.DataFrame(epoch_arrays) if per_epoch else pd.DataFrame(per_epoch, columns=epoch_cols)
    peak: dict[str, float] = {}
    for (_e, c), used in zip(ckeys, used_chips.tolist(), strict=True):
        peak[str(c)] = max(peak.get(str(c), -math.inf), used)

    def total(name: str) -> float:  # NaN-skipping sums over the epochs
        return float(np.nansum(np.array([r[name] for r in per_epoch], dtype=float)))

    energy = total("energy_j")
    cost = total("cost_usd")
    tokens_total = total("tokens")
    totals: dict[str, Any] = {
        "energy_j": energy,
        "cost_usd": cost,
        "carbon_kg": total("carbon_kg"),
        "chips_by_version": {c: int(round(v)) for c, v in sorted(peak.items())},
        "unserved_rps": _peak(epoch_arrays["unserved_rps"]) if per_epoch else 0.0,
        "tokens": tokens_total,
        "tokens_per_j": tokens_total / energy if energy > 0 else math.nan,
        "tokens_per_usd": tokens_total / cost if cost > 0 else math.nan,
        # components before PUE (E1 static, E2 busy; dynamic = busy + marginal), as the replay's
        **{c: total(c) for c in ("energy_static_j", "energy_busy_j", "energy_dynamic_j")},
        # the pre-warm hold (at the facility, resp. USD), part of energy_j and cost_usd
        **{c: total(c) for c in ("prewarm_energy_j", "prewarm_cost_usd")},
    }
    key = {"energy": "energy_j", "cost": "cost_usd", "carbon": "carbon_kg"}[solution.objective]
    penalty = float(solution.penalty_per_req) * t * sum(uns_map.values())
    totals["penalty"] = penalty
    totals["placement"] = placement_status
    objective_value = float(totals[key]) + penalty
    return Evaluation(
        feasible=not violations,
        violations=tuple(violations),
        totals=totals,
        objective_value=objective_value,
        by_epoch=by_epoch,
        unplaced=unplaced,
    )


def _prewarm_hold(
    coeffs: Coefficients,
    gkeys: list[tuple[Any, ...]],
    g_n: np.ndarray,
    g_static: np.ndarray,
    g_price: np.ndarray,
    g_emb: np.ndarray,
    lead_s: float | None,
) -> dict[int, tuple[float, float, float]]:
    """Per epoch ``e >= 1`` of the plan: static J (before PUE), USD and embodied kg of holding the
    vPods each group adds over epoch ``e - 1`` (``max(n_e - n_{e-1}, 0)``, the replay's creations)
    for the pre-warm lead L before the epoch: ``lead_s`` (the horizon schedule evaluator passes
    ``HorizonParams.lead_s``), else ``coeffs.demand.attrs["observed_lead_s"]`` (the instance's
    ``traces.demand.prewarm_lead_s``; 0, nothing, for tables without it)."""
    lead = float(lead_s) if lead_s is not None else float(coeffs.demand.attrs.get("observed_lead_s", 0.0) or 0.0)
    if lead <= 0.0 or not gkeys:
        return {}
    at = {(int(e), str(g)): i for i, (e, g) in enumerate(gkeys)}
    planned = set(coeffs.epochs)
    out: dict[int, tuple[float, float, float]] = {}
    for (e, g), i in at.items():
        j = at.get((e - 1, g))
        prev = g_n[j] if j is not None else (0.0 if (e - 1) in planned else math.nan)
        if not math.isfinite(prev):  # the plan's first epoch: warm start, nothing created
            continue
        y = max(float(g_n[i]) - float(prev), 0.0)
        if y > 0.0:
            j0, usd0, kg0 = out.get(e, (0.0, 0.0, 0.0))
            out[e] = (
                j0 + float(static_energy_j(g_static[i], y * lead)),
                usd0 + float(g_price[i]) * y * lead / 3600.0,
                kg0 + float(g_emb[i]) * y * lead / 3600.0,
            )
    return out


def _peak(values: np.ndarray) -> float:
    """The largest value, NaN skipped (NaN when all are)."""
    values = np.asarray(values, dtype=float)
    ok = ~np.isnan(values)
    return float(values[ok].max()) if ok.any() else math.nan


def placed_pods(coeffs: Coefficients) -> dict[str, PodState]:
    """Pod id -> state of the pods a plan must place: TPU tori given as pods, of generations with a
    finite inventory (read from ``coeffs.pods``)."""
    if coeffs.pods is None or len(coeffs.pods) == 0:
        return {}
    inv = coeffs.inventory()
    out: dict[str, PodState] = {}
    for r in coeffs.pods.itertuples(index=False):
        chip = str(r.chip)
        if get_chip(chip).topology in PLACEABLE and not math.isinf(inv.get(chip, math.inf)):
            out[str(r.pod)] = state_of(chip, r.dims, r.failed)
    return out


def _check_placement(
    solution: Any, coeffs: Coefficients, groups: pd.DataFrame
) -> tuple[str, tuple[str, ...], list[str]]:
    """(status, unplaced generations, violations) of the plan's placements; see the module docstring."""
    pods = placed_pods(coeffs)
    if not pods:
        return "not applicable", (), []
    gens = {st.chip for st in pods.values()}
    held = groups[(groups["n"].astype(float) > 0) & groups["chip"].astype(str).isin(gens)]
    if held.empty:
        return "not applicable", (), []
    rows = getattr(solution, "placements", None)
    if rows is None or len(rows) == 0:
        return "unplaced", tuple(sorted(set(held["chip"].astype(str)))), []
    probs: list[str] = []
    counts: dict[tuple[int, str, str], int] = {}
    for g in held.itertuples():
        parts = str(g.shape).lower().split("x")
        shape = tuple(int(x) for x in parts) if all(x.isdigit() for x in parts) else ()
        can = canonical(get_chip(str(g.chip)), shape) if shape else None
        if can is None:
            probs.append(f"epoch {g.epoch} group {g.vpod_group!r}: shape {g.shape} cannot be placed on {g.chip}")
            continue
        key = (int(g.epoch), str(g.chip), shape_str(can))
        counts[key] = counts.get(key, 0) + int(g.n)
    probs.extend(f"placement: {p}" for p in check_placements(rows, pods, counts))
    if "vpod_group" in rows.columns:
        got = rows.groupby(["epoch", "vpod_group"]).size()
        want = {(int(g.epoch), str(g.vpod_group)): int(g.n) for g in held.itertuples()}
        for (e, g), k in sorted(want.items()):
            if int(got.get((e, g), 0)) != k:
                probs.append(f"placement: epoch {e} group {g!r}: {int(got.get((e, g), 0))} placed vPods, holds {k}")
    return "checked", (), probs


def _kv_ttft_violations(ref: pd.DataFrame, coeffs: Coefficients, bw: np.ndarray, kv: np.ndarray) -> list[str]:
    """Prefill rows whose TTFT plus the KV transfer (at the slower of this vPod's DCN and the
    slowest decode vPod of the class among all candidates) misses the TTFT target."""
    out: list[str] = []
    all_cfg = coeffs.configs
    dec = all_cfg[all_cfg["phase"] == "decode"]
    dec = dec[meets_slo(dec, coeffs.buckets)]
    chips = coeffs.chips.set_index("chip")
    dec_bw = (
        (dec["chip"].map(chips["dcn_bytes_per_s"]).astype(float) * dec["chips_per_vpod"].astype(float))
        .groupby(dec["bucket"])
        .min()
    )
    slo = coeffs.buckets.set_index("bucket")["ttft_slo_s"].astype(float)
    for i, r in enumerate(ref.itertuples()):
        if r.phase != "prefill" or kv[i] <= 0:
            continue
        target = slo.get(r.bucket, math.nan)
        if math.isnan(target):
            continue
        peer = float(dec_bw.get(r.bucket, math.inf))
        xfer = kv[i] / min(bw[i], peer)
        ttft = 0.0 if pd.isna(r.ttft_s) else float(r.ttft_s)
        if ttft + xfer > target * (1 + 1e-9):
            out.append(f"row {r.config_id!r}: TTFT {ttft:.4g} s + KV transfer {xfer:.4g} s exceeds {target:.4g} s")
    return out
