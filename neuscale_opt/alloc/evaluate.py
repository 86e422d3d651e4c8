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
from neuscale_opt.catalog import get_chip
from neuscale_opt.coefficients import J_PER_KWH, Coefficients, meets_slo
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


def evaluate(solution: Any, coeffs: Coefficients) -> Evaluation:
    """Re-check ``solution`` against ``coeffs`` and account energy, money, carbon and chips.

    Reads from the solution only its rows, its unserved table and the options that define the
    problem it claims to solve (objective, serving mode, utilisation cap, whether unserved demand
    is allowed and at which penalty).
    """
    opts = solution.options
    t = float(coeffs.epoch_s)
    rows = solution.allocations.copy()
    violations: list[str] = []
    cfg = coeffs.configs.set_index("config_id")
    chips = coeffs.chips.set_index("chip")

    # -- rows against the coefficient table ------------------------------------------------
    known = rows["config_id"].isin(cfg.index)
    for cid in rows.loc[~known, "config_id"]:
        violations.append(f"row config {cid!r} is not in the coefficient table")
    rows = rows[known].reset_index(drop=True)
    ref = cfg.loc[rows["config_id"]].reset_index()
    for col in ("bucket", "phase", "chip", "shape", "chips_per_vpod", "vpod_type"):
        diff = rows[col].astype(str).to_numpy() != ref[col].astype(str).to_numpy()
        for cid in rows.loc[diff, "config_id"]:
            violations.append(f"row {cid!r}: column {col} disagrees with the coefficient table")
    bad_phase = ~ref["phase"].isin(_PHASES[opts.serving])
    for cid in ref.loc[bad_phase, "config_id"]:
        violations.append(f"row {cid!r}: phase not used by serving mode {opts.serving!r}")
    slo_ok = meets_slo(ref, coeffs.buckets).to_numpy()
    for cid in ref.loc[~slo_ok, "config_id"]:
        violations.append(f"row {cid!r}: configuration misses its class's SLO")
    if (rows["rate_rps"].astype(float) < -1e-9).any() or (rows["n_vpods"].astype(float) < 0).any():
        violations.append("negative rate or vPod count")

    # -- effective capacity per row (KV transfer bandwidth when disaggregated) ---------------
    mu = ref["max_rate_rps"].astype(float).to_numpy()
    dcn_j = np.zeros(len(ref))
    if opts.serving == "disaggregated" and len(ref):
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
    rows["_load"] = rows["rate_rps"].astype(float).to_numpy() / (u * mu)
    # load-dependent energy (formulation E1-E8) on the traffic that arrives on average (the
    # arrival ratio x the provisioned rate): marginal energy per request, weight streaming at each
    # group's own load
    rate = rows["rate_rps"].astype(float).to_numpy()
    _, marg_j = request_energy_split_j(ref, u * mu)
    arriving = arrival_ratio(rows, coeffs.demand, coeffs.buckets) * rate
    keys = rows["epoch"].astype(str) + "|" + rows["vpod_group"].astype(str)
    rows["_busy_j"] = busy_energy_rate_w(ref, arriving, rows["n_vpods"].astype(float).to_numpy(), keys)
    rows["_dyn_j"] = rows["_busy_j"] + (marg_j + dcn_j) * arriving
    for col in ("static_power_w", "price_usd_per_hour", "embodied_kg_per_hour"):
        rows["_" + col] = ref[col].astype(float).fillna(0.0).to_numpy()

    # -- groups: one count per (epoch, vpod_group), capacity ---------------------------------
    grp = rows.groupby(["epoch", "vpod_group"], sort=True)
    groups = grp.agg(
        n=("n_vpods", "max"),
        n_min=("n_vpods", "min"),
        load=("_load", "sum"),
        chip=("chip", "first"),
        shape=("shape", "first"),
        chips_per_vpod=("chips_per_vpod", "first"),
        static_w=("_static_power_w", "first"),
        price=("_price_usd_per_hour", "first"),
        emb=("_embodied_kg_per_hour", "first"),
    ).reset_index()
    for g in groups.itertuples():
        if g.n != g.n_min:
            violations.append(f"epoch {g.epoch} group {g.vpod_group!r}: rows disagree on n_vpods")
        if not _rel_ok(g.load, g.n):
            violations.append(
                f"epoch {g.epoch} group {g.vpod_group!r}: load {g.load:.6g} vPods exceeds {int(g.n)} held"
            )
    groups["chips"] = groups["n"].astype(float) * groups["chips_per_vpod"].astype(float)
    chips_used = groups.groupby(["epoch", "chip"])["chips"].sum()
    inventory = coeffs.inventory()
    for (e, c), used in chips_used.items():
        cap = inventory.get(str(c), 0.0)
        if not math.isinf(cap) and not _rel_ok(used, cap):
            violations.append(f"epoch {e}: {c} uses {used:.0f} chips of {cap:.0f} healthy")

    # -- placement ----------------------------------------------------------------------------
    placement_status, unplaced, problems = _check_placement(solution, coeffs, groups)
    violations.extend(problems)

    # -- coverage ---------------------------------------------------------------------------
    uns = solution.unserved
    uns_map = {(int(r.epoch), str(r.bucket)): float(r.unserved_rps) for r in uns.itertuples()}
    if uns_map and not opts.allow_unserved and any(v > 0 for v in uns_map.values()):
        short = sorted({e for (e, _b), v in uns_map.items() if v > 0})
        shown = ", ".join(map(str, short[:8])) + (" ..." if len(short) > 8 else "")
        violations.append(
            f"plan leaves {sum(uns_map.values()):.4g} req/s unserved in epoch(s) {shown} but unserved demand "
            "is not allowed"
        )
    served = rows.groupby(["epoch", "bucket", "phase"])["rate_rps"].sum()
    for d in coeffs.demand.itertuples():
        rate = float(d.rate_rps)
        e, b = int(d.epoch), str(d.bucket)
        for p in sorted(_PHASES[opts.serving]):
            got = float(served.get((e, b, p), 0.0)) + uns_map.get((e, b), 0.0)
            if abs(got - rate) > RTOL * max(1.0, rate):
                violations.append(
                    f"epoch {e} class {b!r} ({p}): served + unserved = {got:.6g} req/s, demand {rate:.6g}"
                )

    # -- accounting ---------------------------------------------------------------------------
    tokens = coeffs.buckets.set_index("bucket")
    # tokens of the requests that arrive on average: served share of the provisioned rate x the
    # arrival ratio (formulation, "Accounting")
    tok_per_req = (tokens["input_tokens"].astype(float) + tokens["output_tokens"].astype(float)).to_dict()
    dem_all = coeffs.demand.assign(arrival_ratio=arrival_ratio(coeffs.demand, coeffs.demand, coeffs.buckets))
    kg_per_j = coeffs.carbon_kg_per_kwh / J_PER_KWH
    per_epoch = []
    for e in coeffs.epochs:
        ge = groups[groups["epoch"] == e]
        re_ = rows[rows["epoch"] == e]
        dyn_j = float(re_["_dyn_j"].sum()) * t
        busy_j = float(re_["_busy_j"].sum()) * t
        static_j = float(static_energy_j(ge["static_w"], ge["n"].astype(float) * t).sum())
        energy = coeffs.pue * (dyn_j + static_j)
        cost = float((ge["price"] * ge["n"].astype(float)).sum()) * t / 3600.0
        carbon = energy * kg_per_j + float((ge["emb"] * ge["n"].astype(float)).sum()) * t / 3600.0
        unserved_rps = sum(v for (ee, _), v in uns_map.items() if ee == e)
        dem_e = dem_all[dem_all["epoch"] == e]
        tok = (
            sum(
                max(float(r.rate_rps) - uns_map.get((e, str(r.bucket)), 0.0), 0.0)
                * float(r.arrival_ratio)
                * tok_per_req.get(r.bucket, 0.0)
                for r in dem_e.itertuples()
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
                "energy_static_j": static_j,
                "energy_busy_j": busy_j,
                "energy_dynamic_j": dyn_j,
            }
        )
    by_epoch = pd.DataFrame(per_epoch, columns=["epoch", "energy_j", "cost_usd", "carbon_kg", "unserved_rps", "tokens"])
    parts = pd.DataFrame(per_epoch, columns=["energy_static_j", "energy_busy_j", "energy_dynamic_j"])
    peak = chips_used.groupby(level="chip").max() if len(chips_used) else pd.Series(dtype=float)
    energy = float(by_epoch["energy_j"].sum())
    cost = float(by_epoch["cost_usd"].sum())
    tokens_total = float(by_epoch["tokens"].sum())
    totals: dict[str, Any] = {
        "energy_j": energy,
        "cost_usd": cost,
        "carbon_kg": float(by_epoch["carbon_kg"].sum()),
        "chips_by_version": {str(c): int(round(v)) for c, v in sorted(peak.items())},
        "unserved_rps": float(by_epoch["unserved_rps"].max()) if len(by_epoch) else 0.0,
        "tokens": tokens_total,
        "tokens_per_j": tokens_total / energy if energy > 0 else math.nan,
        "tokens_per_usd": tokens_total / cost if cost > 0 else math.nan,
        # components before PUE (E1 static, E2 busy; dynamic = busy + marginal), as the replay's
        **{c: float(parts[c].sum()) for c in parts.columns},
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
