"""The numbers one epoch's allocation problem reads, precomputed outside any solver.

:func:`build_context` turns :class:`~neuscale_opt.coefficients.Coefficients` and
:class:`~neuscale_opt.alloc.options.PlanOptions` into a frozen :class:`EpochContext`: the usable
configurations with their derived parameters (capacity under the utilisation cap, per-request and
per-vPod objective coefficients), the vPod groups of the chosen variant, the demand to cover and the
inventory, and - for generations given as pods - the packing data of the placement layer
(:func:`placement_data`). The Pyomo model, the greedy heuristic and the baselines all read this one
object; the symbols match ``formulations/allocation.md``. No Pyomo in here.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd

from neuscale_opt.alloc.attainment import row_shares
from neuscale_opt.alloc.options import DEFAULT_PENALTY_FACTOR, PlanOptions
from neuscale_opt.alloc.table import Table, configs_table, floats, texts
from neuscale_opt.coefficients import J_PER_KWH, Coefficients, slo_ok
from neuscale_opt.energy import expected_energy_j_per_planned_req
from neuscale_opt.errors import InputError
from neuscale_opt.topology.patterns import GenPlacementData, fleet_placement_data
from neuscale_opt.topology.pods import StateGroup, pod_states_from_frame
from neuscale_opt.topology.slices import check_shape, shape_str

SERVING_PHASES: dict[str, tuple[str, ...]] = {
    "colocated": ("colocated",),
    "disaggregated": ("prefill", "decode"),
}

#: The variant registry: how the vPod group g(k) that serves k is formed.
#: ``dedicated`` - every (vPod type, class) pair has its own group (NeuScale's vPod groups);
#: ``pooled`` - the classes of one vPod type share its vPods in fractional loads (Mélange), split
#: into clusters that can share without breaking each other's SLO (:func:`shared_groups`).
GROUPING: dict[str, str] = {
    "dedicated": "config_id",
    "pooled": "vpod_type",
}

#: Columns a vPod group shares by definition (they describe the vPod, not the class it serves).
GROUP_COLUMNS: tuple[str, ...] = (
    "chip",
    "shape",
    "chips_per_vpod",
    "static_power_w",
    "price_usd_per_hour",
    "embodied_kg_per_hour",
)


class _TableField:
    """A table field of :class:`EpochContext` and :class:`Prepared`: set to a DataFrame or a
    :class:`Table`, read as a DataFrame (a table's frame is built at the first read; the hot path
    reads the table itself, ``EpochContext.table(name)``, ``Prepared.table``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}_table"

    def __get__(self, obj: Any, objtype: type | None = None) -> pd.DataFrame:
        if obj is None:
            raise AttributeError("no default")  # a field without a default
        return obj.__dict__[self.slot].frame()

    def __set__(self, obj: Any, value: pd.DataFrame | Table) -> None:
        obj.__dict__[self.slot] = value if isinstance(value, Table) else Table(value)


@dataclass(frozen=True)
class EpochContext:
    """Everything one epoch's allocation problem needs (symbols of ``formulations/allocation.md``).

    ``configs`` holds the usable configurations K with the derived columns

    * ``group`` - the vPod group g(k) whose vPods serve k (config id when dedicated, vPod type when
      pooled);
    * ``cap_rps`` - c_k = u * mu'_k, req/s one vPod may carry for this class;
    * ``var_obj_per_req`` - a_k, objective units per request served (dynamic energy + KV transfer);
    * ``dcn_j_per_req`` - KV-transfer energy per request at the chip (0 when colocated).

    ``groups`` holds the groups G with ``held_obj_per_vpod`` - h_g, objective units per vPod held
    over the epoch, and ``placed_shape`` - the canonical slice shape s(g) when the group's generation
    is placed (else ``None``). ``demand`` maps each covered (class, phase) pair to its rate d_b (req/s);
    pairs with zero demand are left out, with their configurations. ``placement`` maps each placed
    generation (pods given, finite inventory, ``options.placement != "none"``) to its packing data;
    empty when nothing is placed.
    """

    epoch: int
    options: PlanOptions
    epoch_s: float
    util_cap: float
    pue: float
    carbon_kg_per_kwh: float
    penalty_per_req: float
    configs: pd.DataFrame = _TableField()  # type: ignore[assignment]
    groups: pd.DataFrame = _TableField()  # type: ignore[assignment]
    demand: dict[tuple[str, str], float]
    inventory: dict[str, float]
    bucket_rate: dict[str, float]
    placement: Mapping[str, GenPlacementData] = field(default_factory=dict)
    input_tokens: dict[str, float] = field(default_factory=dict)

    def table(self, name: str) -> Table:
        """``configs`` or ``groups`` as a :class:`Table` (columns read as arrays, no DataFrame built)."""
        return self.__dict__[f"_{name}_table"]

    def replace(self, **changes: Any) -> EpochContext:
        """A copy with some fields changed (the tables shared, never modified, their frames unbuilt)."""
        now = {
            f.name: self.table(f.name) if f.name in ("configs", "groups") else getattr(self, f.name)
            for f in fields(self)
        }
        return EpochContext(**{**now, **changes})

    @property
    def cover(self) -> list[tuple[str, str]]:
        """Covered (class, phase) pairs, sorted."""
        return sorted(self.demand)

    @property
    def buckets(self) -> list[str]:
        return sorted(self.bucket_rate)


def phases_for(serving: str) -> tuple[str, ...]:
    return SERVING_PHASES[serving]


def usable_configs(coeffs: Coefficients, options: PlanOptions) -> pd.DataFrame:
    """The configurations a plan may use, with derived parameters (all epochs alike).

    Keeps rows of the serving mode's phases that meet their class's SLO. When disaggregated, a
    prefill row must also meet the TTFT target once the KV transfer is added (see the formulation,
    "KV transfer"), and every row's rate is capped by its vPod's DCN bandwidth.
    """
    return usable_table(coeffs, options).frame()


def usable_table(coeffs: Coefficients, options: PlanOptions) -> Table:
    """:func:`usable_configs` as a :class:`Table` (its DataFrame not built)."""
    src = configs_table(coeffs)
    phases = phases_for(options.serving)
    have = src["phase"].tolist()
    missing = [p for p in phases if p not in set(have)] if have else []
    if missing:  # e.g. a coefficient profile (colocated accelerators only) planned disaggregated
        raise InputError(
            f"serving = {options.serving!r} needs {' and '.join(missing)} configurations, but the "
            f"instance's configurations are {' and '.join(sorted(set(map(str, have))))} only",
            where="planning.serving",
        )
    keep = np.array([p in phases for p in have], dtype=bool) & slo_ok(src, coeffs.buckets)
    if options.serving == "disaggregated":
        cfg = coeffs.configs.iloc[np.flatnonzero(keep)].copy()
        chips = coeffs.chips.set_index("chip")
        bw = cfg["chip"].map(chips["dcn_bytes_per_s"]).astype(float) * cfg["chips_per_vpod"].astype(float)
        e_byte = cfg["chip"].map(chips["dcn_energy_j_per_byte"]).astype(float).fillna(0.0)
        kv = cfg["kv_bytes_per_req"].astype(float).fillna(0.0)
        mu = cfg["max_rate_rps"].astype(float)
        cfg["dcn_j_per_req"] = kv * e_byte
        link_rate = np.where(kv > 0, bw / kv.where(kv > 0, 1.0), np.inf)
        mu = np.minimum(mu, link_rate)
        # conservative transfer time: the slower of this vPod's DCN and the slowest decode vPod's
        dec = cfg["phase"] == "decode"
        slowest_decode_bw = bw[dec].groupby(cfg.loc[dec, "bucket"]).min()
        pre = cfg["phase"] == "prefill"
        peer_bw = cfg["bucket"].map(slowest_decode_bw).astype(float).fillna(np.inf)
        eff_bw = np.minimum(bw, peer_bw)
        xfer_s = np.where(kv > 0, kv / eff_bw, 0.0)
        slo = coeffs.buckets.set_index("bucket")["ttft_slo_s"].astype(float)
        target = cfg["bucket"].map(slo).astype(float)  # float also when no row is left
        ttft = cfg["ttft_s"].astype(float).fillna(0.0)
        late = pre & target.notna() & (ttft + xfer_s > target * (1 + 1e-9))
        cfg["kv_transfer_s"] = np.where(pre, xfer_s, 0.0)
        cfg["util"] = row_shares(cfg, coeffs, options)
        cfg["cap_rps"] = cfg["util"] * mu
        cfg = Table(cfg[~late])
        cap = np.asarray(cfg["cap_rps"], dtype=float)
        derived = {}
    else:  # colocated: the derived columns are added once, to the final rows (one take of the table)
        cfg = src if keep.all() else src.take(np.flatnonzero(keep))
        util = np.asarray(row_shares(cfg, coeffs, options), dtype=float)
        cap = util * np.asarray(cfg["max_rate_rps"], dtype=float)
        zero = np.zeros(len(cfg))
        derived = {"dcn_j_per_req": zero, "kv_transfer_s": zero.copy(), "util": util, "cap_rps": cap}
    rows = np.flatnonzero(cap > 0)
    ids = np.asarray(cfg["config_id"], dtype=object)[rows]
    order = rows[np.argsort(ids, kind="stable")]  # by config id, ties in table order (a stable sort)
    return Table(cfg, order, {c: v[order] for c, v in derived.items()})


def objective_coefficients(cfg: pd.DataFrame | Table, coeffs: Coefficients, objective: str, epoch_s: float):
    """Per-request (a_k) and per-vPod-held-per-epoch (h_k) objective coefficients of each row (arrays).

    The dynamic energy per provisioned request is the load-dependent model's (E7 of the
    formulation, :func:`neuscale_opt.energy.expected_energy_j_per_planned_req`) at the design load
    ``phi_b c_k``."""
    busy, marginal = expected_energy_j_per_planned_req(cfg, coeffs.buckets, cfg["cap_rps"], cfg["dcn_j_per_req"])
    dyn = np.asarray(busy + marginal, dtype=float)

    def col(name: str) -> np.ndarray:  # NaN read as 0
        return np.nan_to_num(np.asarray(cfg[name], dtype=float), nan=0.0, posinf=np.inf, neginf=-np.inf)

    kg_per_j = coeffs.carbon_kg_per_kwh / J_PER_KWH
    if objective == "energy":
        return coeffs.pue * dyn, coeffs.pue * (col("static_power_w") * epoch_s)
    if objective == "cost":
        return 0.0 * dyn, col("price_usd_per_hour") * epoch_s / 3600.0
    static_j = col("static_power_w") * epoch_s
    emb = col("embodied_kg_per_hour") * epoch_s / 3600.0
    return coeffs.pue * dyn * kg_per_j, coeffs.pue * static_j * kg_per_j + emb


def default_penalty(coeffs: Coefficients, options: PlanOptions) -> float:
    """Default penalty per unserved request: ``DEFAULT_PENALTY_FACTOR`` x max_k (h_k/(c_k T) + a_k).

    With it, buying a vPod is cheaper than leaving its load unserved as soon as the vPod would
    carry at least 1/DEFAULT_PENALTY_FACTOR of its capacity. 1.0 objective unit when every
    configuration is free, so that a free fleet still prefers serving.
    """
    cfg = usable_table(coeffs, options)
    if cfg.empty:
        return 1.0
    a, h = objective_coefficients(cfg, coeffs, options.objective, float(coeffs.epoch_s))
    return _penalty_of(cfg, a, h, float(coeffs.epoch_s))


def _penalty_of(cfg: Table, a, h, epoch_s: float) -> float:
    """:func:`default_penalty` from the usable rows and their objective coefficients."""
    if cfg.empty:
        return 1.0
    cap = np.asarray(cfg["cap_rps"], dtype=float)
    per_req = np.asarray(h, dtype=float) / (cap * epoch_s) + np.asarray(a, dtype=float)
    worst = float(per_req.max())
    return DEFAULT_PENALTY_FACTOR * worst if worst > 0 else 1.0


def resolve_options(coeffs: Coefficients, options: PlanOptions) -> PlanOptions:
    """Options with the unserved penalty fixed to a number: the default is computed once from the
    whole coefficient table (all epochs, all generations), so every method and epoch pays the same."""
    if options.unserved_penalty is not None:
        return options
    return options.replace(unserved_penalty=default_penalty(coeffs, options))


@dataclass(frozen=True)
class _Shared:
    """One configuration row as the shared-vPod check reads it (plain floats: the check runs per
    cluster candidate, thousands of times on a large design space)."""

    bucket: str
    input_tokens: float
    output_tokens: float
    ttft_s: float
    tpot_s: float
    ttft_slo_s: float
    tpot_slo_s: float
    e2e_slo_s: float


def shared_slo_ok(rows: list[_Shared], phase: str, rtol: float = 1e-9) -> bool:
    """Can these classes (configurations of one vPod type) share its vPods within every class's
    SLO? (``formulations/allocation.md``, "Shared vPods", rule SH1-SH3.)

    SH1: with L the class of the longest prompt, every other class's first token may wait for one
    prefill of L in progress (colocated and prefill vPods). SH2: every class's tokens come at the
    shared decode step, at worst the slowest class's TPOT (colocated and decode vPods; it covers
    L's longer contexts). SH3: end-to-end = shared TTFT + output tokens x shared TPOT. KV memory
    needs no check: a batch of L's contexts is the largest and L's configuration fits (R11). One
    row is the dedicated check.
    """
    if len(rows) <= 1:
        return True
    longest = max(range(len(rows)), key=lambda i: (rows[i].input_tokens, rows[i].bucket))
    stall = rows[longest].ttft_s if phase != "decode" else 0.0
    tpot = max(r.tpot_s for r in rows) if phase != "prefill" else 0.0

    scale = 1 + rtol  # late: a target is set (not NaN) and the value exceeds it
    first_token, per_token, end_to_end = phase != "decode", phase != "prefill", phase == "colocated"
    for i, r in enumerate(rows):
        ttft = r.ttft_s + (0.0 if i == longest else stall)
        target = r.ttft_slo_s
        if first_token and target == target and ttft > target * scale:
            return False
        target = r.tpot_slo_s
        if per_token and target == target and tpot > target * scale:
            return False
        target = r.e2e_slo_s
        if end_to_end and target == target and ttft + r.output_tokens * tpot > target * scale:
            return False
    return True


def shared_groups(cfg: pd.DataFrame | Table, buckets: pd.DataFrame) -> np.ndarray:
    """The pooled variant's group g(k) of each configuration row: per vPod type, its classes in
    order of prompt length (then name) are cut into consecutive clusters, each grown while
    :func:`shared_slo_ok` holds and closed at the first class that would break it. The first
    cluster's group is the vPod type, the next ones ``<vpod type>/<first class>``. Every class of a
    type is in exactly one cluster, so a dedicated plan is a pooled plan (pooled is never worse)."""
    if cfg.empty:
        return np.array([], dtype=object)
    vtype = texts(cfg, "vpod_type")
    names = [str(x) for x in buckets["bucket"].tolist()]
    classes = texts(cfg, "bucket")
    # a vPod type none of whose classes has an SLO target shares whole: every check of rule SH1-SH3
    # needs a target (profiled tables, e.g. Mélange's, have none)
    targets = [c for c in ("ttft_slo_s", "tpot_slo_s", "e2e_slo_s") if c in buckets]
    no_target = np.ones(len(names), dtype=bool)
    for c in targets:
        no_target &= np.isnan(buckets[c].to_numpy(dtype=float))
    per_class = dict(zip(names, no_target.tolist(), strict=True))
    free = {v: True for v in vtype}
    for v, c in zip(vtype, classes, strict=True):
        if free[v] and not per_class.get(c, True):
            free[v] = False
    if all(free.values()):
        return np.array(vtype, dtype=object)

    def col(values) -> list[float]:  # NaN read as 0
        v = np.asarray(values, dtype=float)
        return np.where(np.isnan(v), 0.0, v).tolist()

    def slo_col(name: str) -> list[float]:
        if name not in buckets:
            return [math.nan] * len(classes)
        by_name = dict(zip(names, buckets[name].astype(float).tolist(), strict=True))
        return [by_name.get(x, math.nan) for x in classes]

    kv_s = cfg["kv_transfer_s"] if "kv_transfer_s" in cfg else np.zeros(len(cfg))
    ttft = np.asarray(col(cfg["ttft_s"])) + np.asarray(col(kv_s))
    rows = [
        _Shared(*vals)
        for vals in zip(
            classes, slo_col("input_tokens"), slo_col("output_tokens"), ttft.tolist(), col(cfg["tpot_s"]),
            slo_col("ttft_slo_s"), slo_col("tpot_slo_s"), slo_col("e2e_slo_s"), strict=True,
        )
    ]  # fmt: skip
    phase = texts(cfg, "phase")
    by_type: dict[str, list[int]] = {}
    for i, v in enumerate(vtype):
        by_type.setdefault(v, []).append(i)
    out = [""] * len(rows)
    for vt, idx in by_type.items():
        if free[vt]:
            for i in idx:
                out[i] = vt
            continue
        idx.sort(key=lambda i: (rows[i].input_tokens, rows[i].bucket))
        start = 0
        for j in range(1, len(idx) + 1):
            if j < len(idx) and shared_slo_ok([rows[i] for i in idx[start : j + 1]], phase[idx[0]]):
                continue
            name = vt if start == 0 else f"{vt}/{rows[idx[start]].bucket}"
            for i in idx[start:j]:
                out[i] = name
            start = j
    return np.array(out, dtype=object)


@dataclass(frozen=True)
class Prepared:
    """Epoch-independent data: usable configurations with their objective coefficients and group
    keys, dominated groups pruned, and the resolved unserved penalty."""

    options: PlanOptions
    configs: pd.DataFrame = _TableField()  # type: ignore[assignment]
    penalty_per_req: float
    placement: Mapping[str, GenPlacementData] = field(default_factory=dict)

    @property
    def table(self) -> Table:
        """``configs`` as a :class:`Table` (columns read as arrays, no DataFrame built)."""
        return self.__dict__["_configs_table"]


def placed_pods(coeffs: Coefficients, options: PlanOptions) -> list[StateGroup]:
    """Distinct pod states of the generations the plan must place: given as pods (TPU tori), with a
    finite inventory (an ``unlimited`` run places nothing), unless ``options.placement`` is ``none``."""
    if options.placement == "none" or coeffs.pods is None or len(coeffs.pods) == 0:
        return []
    inv = coeffs.inventory()
    return [g for g in pod_states_from_frame(coeffs.pods) if not math.isinf(inv.get(g.state.chip, math.inf))]


def placement_data(groups: list[StateGroup], cfg: pd.DataFrame | Table) -> dict[str, GenPlacementData]:
    """Packing data (patterns per distinct pod state, fine-shape capacities) of each placed generation,
    for the canonical shapes of its usable configurations (the shapes of interest)."""
    chips = {g.state.chip for g in groups}
    shapes: dict[str, set] = {}
    chip_col, shape_col = (np.asarray(cfg[c], dtype=object).tolist() for c in ("chip", "placed_shape"))
    for c, shape in zip(chip_col, shape_col, strict=True):
        if c in chips:
            shapes.setdefault(str(c), set()).add(shape)
    return fleet_placement_data(groups, {c: sorted(v) for c, v in sorted(shapes.items())})


def _placed_shapes(cfg: Table, chips: set[str]) -> np.ndarray:
    """Canonical shape string of each row of a placed generation (the name the placement layer counts),
    ``None`` elsewhere; an input error when a shape is not allowed on its generation."""
    out: list[str | None] = []
    if not chips:
        return np.full(len(cfg), None, dtype=object)
    memo: dict[tuple[str, str], str] = {}
    for chip, shape in zip(texts(cfg, "chip"), texts(cfg, "shape"), strict=True):
        if chip not in chips:
            out.append(None)
            continue
        key = (chip, shape)
        if key not in memo:
            memo[key] = shape_str(check_shape(chip, shape, where=f"coefficients.configs ({chip})"))
        out.append(memo[key])
    return np.array(out, dtype=object)


#: The last few :func:`prepare` results, by coefficient bundle (weakly held) and options.
_PREPARED: list[tuple[weakref.ref, PlanOptions, Prepared]] = []
_PREPARED_KEEP = 4


def prepare(coeffs: Coefficients, options: PlanOptions) -> Prepared:
    """The epoch-independent part of :func:`build_context`, computed once per horizon. Its
    ``options`` are ``options`` resolved (:func:`resolve_options`: the default penalty fixed).

    Pruning over all classes (not only those with demand in an epoch) is still exact: a group must
    then dominate on more classes, so fewer groups are dropped.

    It depends on neither the demand nor the epoch, so the result is kept for the last few
    (coefficient bundle, options) pairs and handed out again when the same bundle is planned with
    equal options (repeated plans of one table, e.g. for several demands or methods).
    :class:`~neuscale_opt.coefficients.Coefficients` is frozen and its tables are never modified
    in place; the prepared table is only read downstream.
    """
    for ref, opts, prep in _PREPARED:
        if ref() is coeffs and opts == options:
            return prep
    prep = _prepare(coeffs, options)
    _PREPARED[:] = [e for e in _PREPARED if e[0]() is not None][-(_PREPARED_KEEP - 1) :]
    _PREPARED.append((weakref.ref(coeffs), options, prep))
    return prep


def _prepare(coeffs: Coefficients, options: PlanOptions) -> Prepared:
    """:func:`prepare` itself (uncached)."""
    epoch_s = float(coeffs.epoch_s)
    cfg = usable_table(coeffs, options)
    a, h = objective_coefficients(cfg, coeffs, options.objective, epoch_s)
    derived = {"var_obj_per_req": a, "held_obj_per_vpod": h}
    for metric, _limit in options.bounds:
        derived[f"bound_{metric}_per_req"], derived[f"bound_{metric}_held"] = objective_coefficients(
            cfg, coeffs, metric, epoch_s
        )
    if options.variant == "pooled":
        derived["group"] = shared_groups(cfg, coeffs.buckets)
    else:
        derived["group"] = np.asarray(cfg[GROUPING[options.variant]], dtype=object)
    cfg = cfg.with_columns(**derived)
    if options.unserved_penalty is None:  # the default, from the rows just derived (resolve_options)
        options = options.replace(unserved_penalty=_penalty_of(cfg, a, h, epoch_s))
    penalty = float(options.unserved_penalty or 1.0)
    if options.prune_dominated:
        cfg = prune_dominated(cfg, extra=[(f"bound_{m}_per_req", f"bound_{m}_held") for m, _ in options.bounds])
    groups = placed_pods(coeffs, options)
    cfg = cfg.with_columns(placed_shape=_placed_shapes(cfg, {g.state.chip for g in groups}))
    data = placement_data(groups, cfg) if groups and not cfg.empty else {}
    return Prepared(options=options, configs=cfg, penalty_per_req=penalty, placement=data)


def build_context(
    coeffs: Coefficients, options: PlanOptions, epoch: int, prepared: Prepared | None = None
) -> EpochContext:
    """The frozen problem data of one epoch (see :class:`EpochContext`). Pass ``prepared`` (from
    :func:`prepare` with the same options) to share the epoch-independent work across epochs."""
    if prepared is None or prepared.options != options:
        prepared = prepare(coeffs, options)
    bucket_rate = _epoch_rates(coeffs.demand, epoch)
    cfg = prepared.table
    demanded = np.array([b in bucket_rate for b in cfg["bucket"].tolist()], dtype=bool)
    if not demanded.all():  # else every row is demanded: the prepared table itself (never modified)
        cfg = cfg.take(np.flatnonzero(demanded))
    groups = _groups(cfg, options.variant)
    demand = {(b, p): r for b, r in bucket_rate.items() for p in phases_for(options.serving)}
    return EpochContext(
        epoch=int(epoch),
        options=options,
        epoch_s=float(coeffs.epoch_s),
        util_cap=_scalar_cap(options, coeffs),
        pue=float(coeffs.pue),
        carbon_kg_per_kwh=float(coeffs.carbon_kg_per_kwh),
        penalty_per_req=prepared.penalty_per_req,
        configs=cfg,
        groups=groups,
        demand=demand,
        inventory=coeffs.inventory(),
        bucket_rate=bucket_rate,
        placement=prepared.placement,
        input_tokens=dict(
            zip(
                (str(b) for b in coeffs.buckets["bucket"].tolist()),
                coeffs.buckets["input_tokens"].to_numpy(dtype=float).tolist(),
                strict=True,
            )
        ),
    )


def _epoch_rates(demand: pd.DataFrame, epoch: int) -> dict[str, float]:
    """Class -> total demanded rate of ``epoch`` (req/s, classes by name, positive rates only)."""
    at = demand["epoch"].to_numpy() == epoch
    keys = demand["bucket"].to_numpy(dtype=object)[at].tolist()
    if len(set(keys)) < len(keys) or not all(isinstance(k, str) for k in keys):
        # several rows of a class (or a class name that is not text): the table's own grouped sum
        dem = demand[at]
        return {str(b): float(r) for b, r in dem.groupby("bucket")["rate_rps"].sum().items() if r > 0}
    rates = demand["rate_rps"].to_numpy(dtype=float)[at].tolist()
    return {str(b): r for b, r in sorted(zip(keys, rates, strict=True)) if r > 0}


def restrict_classes(ctx: EpochContext, keep: set[str]) -> EpochContext:
    """``ctx`` with the demand of the classes in ``keep`` only (their configurations and groups)."""
    tab = ctx.table("configs")
    cfg = tab.take(np.flatnonzero(np.array([b in keep for b in tab["bucket"].tolist()], dtype=bool)))
    return ctx.replace(
        configs=cfg,
        groups=_groups(cfg, ctx.options.variant),
        demand={bp: r for bp, r in ctx.demand.items() if bp[0] in keep},
        bucket_rate={b: r for b, r in ctx.bucket_rate.items() if b in keep},
    )


def _scalar_cap(options: PlanOptions, coeffs: Coefficients) -> float:
    """The one utilisation cap of the run, NaN when each configuration has its safe load."""
    cap = options.util_cap if options.util_cap is not None else coeffs.util_cap
    return float(cap) if cap is not None else math.nan


def prune_dominated(cfg: Table, rtol: float = 1e-12, extra: list[tuple[str, str]] | None = None) -> Table:
    """Drop the groups another group of the same generation dominates (an exact presolve).

    Group g is dominated by g' (same chip, same phase) when, for m = the least integer with
    m c_{g',b} >= c_{g,b} for every class b that g serves: g' serves all those classes,
    m chips_g' <= chips_g, m h_g' <= h_g and a_{g',b} <= a_{g,b}. Replacing each vPod of g by m vPods
    of g' then keeps every plan feasible (capacity, chips) and no dearer, so some optimal plan
    avoids g. Exact ties keep the smallest group key. Applies to both variants (a dedicated group
    serves one class). ``extra`` (per-request, per-vPod) column pairs of bounded metrics (epsilon
    constraints): g' must be no worse on those too, m h'_g' <= h'_g and a'_{g',b} <= a'_{g,b}.
    """
    if cfg.empty:
        return cfg

    def text(name: str) -> np.ndarray:  # the column's values as strings (numpy object array)
        return np.array(texts(cfg, name), dtype=object)

    grp = text("group")
    bkt = text("bucket")
    g_names, g_idx = np.unique(grp, return_inverse=True)
    b_names, b_idx = np.unique(bkt, return_inverse=True)
    # g' must serve every class g serves: when each group serves one class (the dedicated variant),
    # only groups of the same class can dominate each other, and comparing class by class keeps the
    # pairwise arrays small (G_b^2 instead of G^2 x B).
    pairs = np.unique(g_idx * len(b_names) + b_idx)
    one_class = bool((np.bincount(pairs // len(b_names), minlength=len(g_names)) == 1).all())
    part_code = np.zeros(len(cfg), dtype=np.int64)
    for col in (text("chip"), text("phase"), *([bkt] if one_class else [])):
        u, inv = np.unique(col, return_inverse=True)
        part_code = part_code * len(u) + inv
    cap_all = floats(cfg, "cap_rps")
    a_all = floats(cfg, "var_obj_per_req")
    chips_all = floats(cfg, "chips_per_vpod")
    h_all = floats(cfg, "held_obj_per_vpod")
    extras = [(floats(cfg, ca), floats(cfg, ch)) for ca, ch in extra or []]
    keep = np.zeros(len(g_names), dtype=bool)
    order = np.argsort(part_code, kind="stable")
    cuts = np.flatnonzero(np.diff(part_code[order])) + 1
    for rows in np.split(order, cuts):
        gi, gl = np.unique(g_idx[rows], return_inverse=True)  # group codes sort as the names do
        if len(gi) == 1:  # nothing of its partition to be dominated by
            keep[gi] = True
            continue
        _, bl = np.unique(b_idx[rows], return_inverse=True)
        shape = (len(gi), int(bl.max()) + 1)

        def table(values: np.ndarray, rows=rows, gl=gl, bl=bl, shape=shape) -> np.ndarray:
            out = np.full(shape, np.nan)
            out[gl, bl] = values[rows]
            return out

        first = np.empty(len(gi), dtype=np.int64)
        first[gl[::-1]] = rows[::-1]  # each group's first row (its per-vPod columns)
        c = table(cap_all)  # NaN where the group does not serve the class
        a = table(a_all)
        chips_g = chips_all[first]
        h = h_all[first]
        serves = ~np.isnan(c)
        c0 = np.where(serves, c, 0.0)
        a_inf = np.where(serves, a, np.inf)
        # ratio[i, j, b] = c_i,b / c_j,b over the classes i serves (j must serve them too)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(serves[:, None, :], c0[:, None, :] / c0[None, :, :], 0.0)
        covers = np.all(~serves[:, None, :] | serves[None, :, :], axis=2)
        m = np.ceil(np.max(ratio, axis=2) * (1 - rtol))
        m = np.where(covers & np.isfinite(m), np.maximum(m, 1.0), np.inf)
        tol_h = rtol * np.maximum(np.abs(h), 1.0)
        with np.errstate(invalid="ignore"):
            a_ok = np.all(~serves[:, None, :] | (a_inf[None, :, :] <= a_inf[:, None, :] + rtol), axis=2)
            chips_ok = m * chips_g[None, :] <= chips_g[:, None]
            h_ok = m * h[None, :] <= h[:, None] + tol_h[:, None]
            strict = (
                (m * chips_g[None, :] < chips_g[:, None])
                | (m * h[None, :] < h[:, None] - tol_h[:, None])
                | np.any(serves[:, None, :] & (a_inf[None, :, :] < a_inf[:, None, :] - rtol), axis=2)
                | np.any(serves[:, None, :] & (m[:, :, None] * c0[None, :, :] > c0[:, None, :] * (1 + rtol)), axis=2)
            )
        for xa_all, xh_all in extras:
            xa_inf = np.where(serves, table(xa_all), np.inf)
            xh = xh_all[first]
            tol_x = rtol * np.maximum(np.abs(xh), 1.0)
            with np.errstate(invalid="ignore"):
                a_ok &= np.all(~serves[:, None, :] | (xa_inf[None, :, :] <= xa_inf[:, None, :] + rtol), axis=2)
                h_ok &= m * xh[None, :] <= xh[:, None] + tol_x[:, None]
        earlier = gi[None, :] < gi[:, None]
        dom = covers & a_ok & chips_ok & h_ok & (strict | earlier)
        np.fill_diagonal(dom, False)
        keep[gi[~dom.any(axis=1)]] = True
    rows = keep[g_idx]
    return cfg if rows.all() else cfg.take(np.flatnonzero(rows))


def _groups(cfg: Table, variant: str) -> Table:
    bound_cols = [c for c in cfg.columns if c.startswith("bound_") and c.endswith("_held")]
    cols = ["group", *GROUP_COLUMNS, "held_obj_per_vpod", "placed_shape", *bound_cols]
    if cfg.empty:
        return Table(pd.DataFrame(columns=cols))
    keys = np.array(texts(cfg, "group"), dtype=object)
    names, first, inverse = np.unique(keys, return_index=True, return_inverse=True)  # sorted keys
    if variant == "pooled":
        # one value per group of each per-vPod column (NaN counts as a value)
        bad_row = np.zeros(len(keys), dtype=bool)
        for c in (*GROUP_COLUMNS[2:], "held_obj_per_vpod"):
            v = np.asarray(cfg[c], dtype=float)
            f = v[first][inverse]
            bad_row |= ~((v == f) | (np.isnan(v) & np.isnan(f)))
        if bad_row.any():
            bad = sorted(set(keys[bad_row].tolist()))
            raise InputError(
                f"vPod type {bad[0]!r} has different per-vPod columns across classes "
                "(chips_per_vpod, static_power_w, price_usd_per_hour, embodied_kg_per_hour must agree "
                "for the pooled variant)",
                where="coefficients.configs",
            )
    return cfg.take(first, columns=cols)


def servable_table(ctx: EpochContext) -> dict[tuple[str, str], dict[str, float]]:
    """Per (class, phase) and chip generation, the most req/s the class could get from the whole
    inventory of that generation alone (best configuration, whole vPods only), for all classes at
    once (one pass over the configurations)."""
    cfg = ctx.table("configs")
    out: dict[tuple[str, str], dict[str, float]] = {}
    for b, p, chip, per_vpod, cap in zip(
        map(str, cfg["bucket"].tolist()), map(str, cfg["phase"].tolist()), map(str, cfg["chip"].tolist()),
        map(float, cfg["chips_per_vpod"].tolist()), map(float, cfg["cap_rps"].tolist()), strict=True,
    ):  # fmt: skip
        inv = ctx.inventory.get(chip, 0.0)
        rate = math.inf if math.isinf(inv) else math.floor(inv / per_vpod + 1e-9) * cap
        best = out.setdefault((b, p), {})
        best[chip] = max(best.get(chip, 0.0), rate)
    return {k: dict(sorted(v.items())) for k, v in out.items()}


def diagnose(ctx: EpochContext) -> str | None:
    """One-line reason why a class cannot be covered even by the whole inventory, or ``None``.

    Checks each (class, phase) alone: no SLO-feasible configuration, or demand above the sum over
    generations of what each generation's whole inventory could serve. ``None`` means every class
    fits alone and the shortage, if any, is joint.
    """
    table = servable_table(ctx)
    for b, p in ctx.cover:
        d = ctx.demand[(b, p)]
        per_chip = table.get((b, p), {})
        if not per_chip:
            return (
                f"epoch {ctx.epoch}: class {b!r} ({p}) has no configuration meeting its SLO "
                f"on any generation; {_fmt(d)} req/s cannot be served"
            )
        total = sum(per_chip.values())
        if total + 1e-9 < d:
            parts = ", ".join(f"{c} {_fmt(v)}" for c, v in per_chip.items())
            return (
                f"epoch {ctx.epoch}: class {b!r} ({p}) needs {_fmt(d)} req/s but the whole inventory "
                f"serves at most {_fmt(total)} req/s ({parts}); short by {_fmt(d - total)} req/s"
                f"{_chip_hint(ctx, b, p, d - total)}"
            )
    return None


def _chip_hint(ctx: EpochContext, bucket: str, phase: str, short_rps: float) -> str:
    """ ", e.g. v5e needs N more chips" for the generation needing the fewest extra chips."""
    rows = ctx.configs[(ctx.configs["bucket"] == bucket) & (ctx.configs["phase"] == phase)]
    best: tuple[float, str] | None = None
    for r in rows.itertuples():
        chips = math.ceil(short_rps / float(r.cap_rps) - 1e-9) * float(r.chips_per_vpod)
        if best is None or (chips, str(r.chip)) < best:
            best = (chips, str(r.chip))
    if best is None:
        return ""
    return f" (e.g. {best[1]} would need {int(best[0])} more chips)"


def _fmt(x: float) -> str:
    return f"{x:.4g}"
