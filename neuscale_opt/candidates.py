"""Design-space exploration: every candidate vPod configuration of an instance, its roofline
latency, throughput, energy, money and carbon per request, the SLO and memory checks, and the
Pareto fronts. Then :func:`build_coefficients` hands the feasible ones to the planners.

Spec: ``formulations/roofline.md`` sections 4-6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import pandas as pd

from neuscale_opt.alloc.attainment import prompt_reach
from neuscale_opt.calibrate import chip_calibration
from neuscale_opt.catalog import ChipSpec, ModelSpec, energy_spec, energy_spec_with, get_chip, get_model
from neuscale_opt.coefficients import Coefficients, slo_within
from neuscale_opt.energy import fixed_step_energy_j, weight_step_energy_j
from neuscale_opt.errors import InputError
from neuscale_opt.instance import Instance
from neuscale_opt.roofline import (
    BOUNDS,
    HwRows,
    StepCost,
    for_slice,
    hw_rows_for,
    routed_miss_per_seq,
    slice_wraps,
    step_cost,
    tp_group,
    vpod_nodes,
)

HOURS_PER_YEAR = 8766.0  # 365.25 days
#: pandas 3 copies on write: a shallow copy of a table is then as safe to hand out as a deep one
#: (changing either copies the changed column first).
_COPY_ON_WRITE = int(pd.__version__.split(".")[0]) >= 3


@dataclass(frozen=True)
class VpodKind:
    """A vPod structure before batch size and phase: chip, slice shape, parallelism."""

    chip: str
    shape: tuple[int, ...]
    tp: int
    pp: int
    ep: int
    coll_bw: float
    a2a_dist: float
    wrap: bool
    nodes: int = 1
    ar_hops: float = 0.0
    a2a_hops: float = 0.0
    attn_dp: bool = False  # MLA data-parallel attention layout (R5b)

    @property
    def chips(self) -> int:
        return self.tp * self.pp

    @property
    def shape_str(self) -> str:
        return "x".join(str(s) for s in self.shape)

    @property
    def key(self) -> str:
        return f"{self.chip}:{self.shape_str}:tp{self.tp}pp{self.pp}ep{self.ep}" + (":dpa" if self.attn_dp else "")


# --------------------------------------------------------------------------------------------
# Enumeration of slices and parallelisms


def slice_shapes(chip: ChipSpec, max_chips: int) -> list[tuple[int, ...]]:
    """Allowed slice shapes of ``chip`` with at most ``max_chips`` chips (one orientation each).

    ``cubes`` in the catalog stands for every AxBxC with A <= B <= C multiples of 4 that fits the
    pod (hardware.md section 2.2, XPK's generator)."""
    out: list[tuple[int, ...]] = []
    for s in chip.slice_shapes:
        if s == "cubes":
            pod = sorted(chip.pod_dims)
            for a in range(4, pod[0] + 1, 4):
                for b in range(a, pod[1] + 1, 4):
                    for c in range(b, pod[2] + 1, 4):
                        if a * b * c <= max_chips:
                            out.append((a, b, c))
        else:
            shape = tuple(int(x) for x in s.split("x"))
            if math.prod(shape) <= max_chips:
                out.append(shape)
    return sorted(set(out), key=lambda t: (math.prod(t), t))


def parallelisms(model: ModelSpec, chips: int) -> list[tuple[int, int, int]]:
    """(tp, pp, ep) with tp * pp = chips, tp a power of two dividing the heads, pp <= layers; for MoE
    models ep in {1, tp} (experts tensor-sharded, or whole experts spread over the TP group)."""
    out = []
    tp = 1
    while tp <= chips:
        if chips % tp == 0 and model.n_heads % tp == 0:
            pp = chips // tp
            if pp <= model.n_layers:
                out.append((tp, pp, 1))
                if model.is_moe and tp > 1 and model.n_experts % tp == 0:
                    out.append((tp, pp, tp))
        tp *= 2
    return out


def vpod_kinds(model: ModelSpec, chip: ChipSpec, max_chips: int) -> list[VpodKind]:
    """Every (slice, parallelism) of ``chip``. A GPU vPod larger than one 8-GPU node keeps tensor
    parallelism inside a node and pipelines across nodes (pp a multiple of the node count). MLA
    models with experts spread (ep = tp > 1) also get the data-parallel attention layout (R5b).
    The kinds of the last few (model, chip, max_chips) are kept (the specs are frozen)."""
    return list(_vpod_kinds(model, chip, max_chips))


@lru_cache(maxsize=64)
def _vpod_kinds(model: ModelSpec, chip: ChipSpec, max_chips: int) -> tuple[VpodKind, ...]:
    kinds = []
    for shape in slice_shapes(chip, max_chips):
        n = math.prod(shape)
        nodes = vpod_nodes(chip, n)
        for tp, pp, ep in parallelisms(model, n):
            if nodes > 1 and (tp > chip.pod_chips or pp % nodes):
                continue
            g = tp_group(chip, shape, tp)
            wrap = slice_wraps(chip, shape)
            layouts = (False, True) if model.is_mla and ep > 1 else (False,)
            for dpa in layouts:
                kinds.append(
                    VpodKind(
                        chip.name, shape, tp, pp, ep, g.coll_bw, g.a2a_dist, wrap, nodes, g.ar_hops, g.a2a_hops, dpa
                    )
                )
    return tuple(kinds)


# --------------------------------------------------------------------------------------------
# Per-chip settings of an instance


@dataclass(frozen=True)
class ChipContext:
    chip: ChipSpec
    hw: HwRows  # scalars; slice-dependent fields filled per kind
    price_usd_per_chip_hour: float
    embodied_kg_per_chip_hour: float
    energy_profile: str


def chip_context(inst: Instance, name: str) -> ChipContext:
    chip = get_chip(name)
    entry = next((f for f in inst.fleet if f.chip == name), None)
    cal = chip_calibration(inst.search.calibration, chip, str(inst.base_dir), inst.search.hop_latency_s)
    eff, hop_s, layer_s = cal.eff, cal.hop_latency_s, cal.layer_overhead_s
    price = chip.price_3y_usd_per_chip_hour if inst.energy.price == "commit_3y" else chip.price_usd_per_chip_hour
    embodied = chip.embodied_kgco2_per_chip
    if entry is not None:
        eff = (entry.eff_compute or eff[0], entry.eff_hbm or eff[1], entry.eff_ici or eff[2])
        if entry.price_usd_per_chip_hour is not None:
            price = entry.price_usd_per_chip_hour
        if entry.embodied_kgco2_per_chip is not None:
            embodied = entry.embodied_kgco2_per_chip
    # deliverable speed: the thermal derate of the fleet entry slows compute and HBM (instance.Derate)
    if entry is not None:
        th = inst.derate(name).thermal
        eff = (eff[0] * th, eff[1] * th, eff[2])
    ov = next((o for o in inst.energy.chip_overrides if o.chip == name), None)
    if ov is None:
        es = energy_spec(chip, inst.energy.profile)
    else:  # a sweep's TFLOP/J or HBM GB/J, read as the profile reads its own figures
        es = energy_spec_with(chip, inst.energy.profile, ov.tflop_per_j, ov.hbm_gb_per_j)
    hw = hw_rows_for(chip, es, 0.0, 1.0, inst.search.hbm_usable_fraction, hop_s, eff, layer_s, cal.ici_serial)
    emb_h = embodied / (inst.energy.embodied_lifetime_years * HOURS_PER_YEAR) if not math.isnan(embodied) else math.nan
    return ChipContext(chip, hw, price, emb_h, es.profile)


def _check_chip_numbers(inst: Instance, ctxs: dict[str, ChipContext]) -> None:
    """A fleet chip whose catalog lacks a number the objective needs is bad input, not a NaN plan."""
    for name, c in ctxs.items():
        if name not in inst.chip_names:
            continue
        idx = inst.chip_names.index(name)
        if math.isnan(c.price_usd_per_chip_hour):
            raise InputError(
                f"chip {name} has no public price ({inst.energy.price}); set price_usd_per_chip_hour",
                where=f"fleet[{idx}]",
            )
        if inst.objective == "carbon" and math.isnan(c.embodied_kg_per_chip_hour):
            raise InputError(
                f"chip {name} has no embodied-carbon figure; set embodied_kgco2_per_chip",
                where=f"fleet[{idx}]",
            )


# --------------------------------------------------------------------------------------------
# The grid


def _kinds_arrays(kinds: list[VpodKind]) -> dict[str, np.ndarray]:
    """The kinds' fields as columns (numpy arrays, text as objects; ``key`` the kinds' keys), one
    row per kind. Read-only: the columns of the last few kind lists are kept."""
    return _kinds_columns(tuple(kinds))


@lru_cache(maxsize=16)
def _kinds_columns(kinds: tuple[VpodKind, ...]) -> dict[str, np.ndarray]:
    out = {
        "chip": np.array([k.chip for k in kinds], dtype=object),
        "shape": np.array([k.shape_str for k in kinds], dtype=object),
        "chips_per_vpod": np.array([k.chips for k in kinds], dtype=np.int64),
        "tp": np.array([k.tp for k in kinds], dtype=np.int64),
        "pp": np.array([k.pp for k in kinds], dtype=np.int64),
        "ep": np.array([k.ep for k in kinds], dtype=np.int64),
        "wraparound": np.array([k.wrap for k in kinds], dtype=bool),
        "coll_bw": np.array([k.coll_bw for k in kinds], dtype=float),
        "a2a_dist": np.array([k.a2a_dist for k in kinds], dtype=float),
        "nodes": np.array([k.nodes for k in kinds], dtype=float),
        "ar_hops": np.array([k.ar_hops for k in kinds], dtype=float),
        "a2a_hops": np.array([k.a2a_hops for k in kinds], dtype=float),
        "attn_dp": np.array([k.attn_dp for k in kinds], dtype=bool),
        "key": np.array([k.key for k in kinds], dtype=object),
    }
    for v in out.values():
        v.flags.writeable = False
    return out


@lru_cache(maxsize=4)
def _config_keys(
    kind_keys: tuple[str, ...], phases: tuple[str, ...], batch_sizes: tuple[int, ...], bucket_keys: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """``vpod_type`` (phase, kind, 1, batch) and ``config_id`` (phase, kind, class, batch) of the
    grid: ``kind:b<batch>:<phase>`` and that followed by ``|<class>`` (``bucket_keys``). Built once
    per (kind, batch, phase) and per class, then broadcast; the last few grids' are kept
    (read-only)."""
    nf, nk, nb, nB = len(phases), len(kind_keys), len(bucket_keys), len(batch_sizes)
    suffixes = [f":b{b}:{ph}" for ph in phases for b in batch_sizes]
    type_keys = np.array(
        [kk + s for p in range(nf) for kk in kind_keys for s in suffixes[p * nB : (p + 1) * nB]], dtype=object
    ).reshape(nf, nk, 1, nB)
    config_id = np.add(type_keys, np.array(bucket_keys, dtype=object).reshape(1, 1, nb, 1))
    type_keys.flags.writeable = False
    config_id.flags.writeable = False
    return type_keys, config_id


def evaluate_grid(
    model: ModelSpec,
    ctxs: dict[str, ChipContext],
    kinds: list[VpodKind],
    buckets: pd.DataFrame,
    batch_sizes: tuple[int, ...],
    phases: tuple[str, ...],
) -> pd.DataFrame:
    """Evaluate every (kind x bucket x batch x phase) with numpy; one row per candidate.

    Columns: see :data:`neuscale_opt.coefficients.CONFIG_COLUMNS`, plus ``memory_ok``,
    ``mem_bytes_per_chip``, ``wraparound``, per-request ``flops``/``hbm_bytes``/``ici_bytes`` and
    ``tokens_per_s`` (output tokens/s of one vPod at full load), ``latency_s`` (the phase's
    latency: e2e, TTFT or TPOT).
    """
    grid = _grid_columns(model, ctxs, kinds, buckets, batch_sizes, phases)
    return pd.DataFrame() if grid is None else _frame(grid.columns, grid.blocks)


#: The fields of :class:`HwRows` that depend on the slice and the TP group (columns of the kinds).
_SLICE_FIELDS = ("coll_bw", "a2a_dist", "ar_hops", "a2a_hops")


#: 2-D arrays whose rows are columns of a table: (array, the columns' names, the rows as arrays).
Blocks = tuple[tuple[np.ndarray, tuple[str, ...], tuple[np.ndarray, ...]], ...]


@dataclass(frozen=True)
class _Grid:
    """The grid's columns (in table order) and each row's integer codes: its class (position in
    the buckets), its phase (position in ``phases``) and its chip (position in ``chips``)."""

    columns: dict[str, np.ndarray]
    bucket: np.ndarray
    phase: np.ndarray
    phases: tuple[str, ...]
    chip: np.ndarray
    chips: tuple[str, ...]
    chip_rows: tuple[int, ...]  # rows of each chip in a phase (a phase's rows are grouped by chip)
    blocks: Blocks = ()  # the columns' arrays by dtype, see :func:`_frame`


#: pandas 3's constructor of a table from its blocks (``None`` on pandas 2, which lacks it).
_FROM_BLOCKS = getattr(getattr(pd.api, "internals", None), "create_dataframe_from_blocks", None)


def _frame(columns: dict[str, np.ndarray], blocks: Blocks = ()) -> pd.DataFrame:
    """The table of ``columns``. Text columns stay numpy object arrays: converting 10^5 strings to
    Arrow costs more than the roofline itself, and object columns compare and group the same. The
    columns are fresh arrays of the call: no consolidating copy.

    ``blocks``: 2-D arrays whose rows are columns of ``columns`` (the row arrays themselves). Where
    pandas can (3.x), the table is made of them, one block per array instead of one per column:
    the same table as the constructor's. A column that is no longer its array's row (replaced),
    or in no array, is a block of its own."""
    if _FROM_BLOCKS is None:
        return pd.DataFrame(
            {
                k: (pd.Series(v, dtype=object, copy=False) if isinstance(v, np.ndarray) and v.dtype.kind == "O" else v)
                for k, v in columns.items()
            },
            copy=False,
        )
    names = list(columns)
    pos = {k: i for i, k in enumerate(names)}
    parts, done = [], set()
    for arr, cols, rows in blocks:
        if all(columns.get(c) is r for c, r in zip(cols, rows, strict=True)):
            parts.append((arr, np.array([pos[c] for c in cols], dtype=np.intp)))
            done.update(cols)
    for k, v in columns.items():
        if k not in done:
            parts.append((v.reshape(1, -1) if isinstance(v, np.ndarray) else v, np.array([pos[k]], dtype=np.intp)))
    n = len(next(iter(columns.values()))) if columns else 0
    return _FROM_BLOCKS(parts, index=pd.RangeIndex(n), columns=pd.Index(names))


def _grid_columns(
    model: ModelSpec,
    ctxs: dict[str, ChipContext],
    kinds: list[VpodKind],
    buckets: pd.DataFrame | dict[str, np.ndarray],
    batch_sizes: tuple[int, ...],
    phases: tuple[str, ...],
) -> _Grid | None:
    """The columns of :func:`evaluate_grid` with the rows' codes; ``None`` for an empty grid.
    ``buckets`` the classes' table or its columns.

    The roofline is evaluated on a broadcast grid: kinds on axis 0, classes on axis 1, batch sizes
    on axis 2 (C order is the rows' order within a phase), so that what depends on fewer axes is
    computed at its own size. Every column is written once into its place in the table (phase
    axis first); the batch-1 steps (colocated prefill, the energy model's small-batch end) are the
    batch-1 column of the same evaluation."""
    bucket_names = np.asarray(buckets["bucket"])
    nk, nb, nB = len(kinds), len(bucket_names), len(batch_sizes)
    if nk == 0 or nb == 0:
        return None
    # kinds grouped by chip (in order of first appearance), hardware per kind row
    chip_order = list(dict.fromkeys(k.chip for k in kinds))
    kinds_sorted = [k for c in chip_order for k in kinds if k.chip == c]
    counts = [sum(1 for k in kinds if k.chip == c) for c in chip_order]
    kf = _kinds_arrays(kinds_sorted)
    kind_chip = np.repeat(np.arange(len(chip_order)), counts)  # position of each kind's chip in chip_order
    # hardware per kind as (nk, 1, 1): the chip's numbers, the kind's slice-dependent ones
    per_kind = (nk, 1, 1)
    chip_hw = [ctxs[c].hw for c in chip_order]
    hw = HwRows(
        **{
            f: (kf[f] if f in _SLICE_FIELDS else np.array([float(getattr(h, f)) for h in chip_hw])[kind_chip]).reshape(
                per_kind
            )
            for f in HwRows.__dataclass_fields__
        }
    )
    tp = kf["tp"].astype(float).reshape(per_kind)
    pp = kf["pp"].astype(float).reshape(per_kind)
    ep = kf["ep"].astype(float).reshape(per_kind)
    nodes = kf["nodes"].reshape(per_kind)
    dpa = kf["attn_dp"].reshape(per_kind)
    so = np.asarray(buckets["output_tokens"], dtype=float).reshape(1, nb, 1)
    si = np.asarray(buckets["input_tokens"], dtype=float).reshape(1, nb, 1)
    B = np.asarray(batch_sizes, dtype=float).reshape(1, 1, nB)
    # the batch sizes with batch 1 first when it is not searched
    with_one = tuple(batch_sizes) if 1 in batch_sizes else (1, *batch_sizes)
    one = slice(with_one.index(1), with_one.index(1) + 1)
    searched = slice(None) if 1 in batch_sizes else slice(1, None)
    B_one = np.asarray(with_one, dtype=float).reshape(1, 1, -1)

    def cut(sc: StepCost, s: slice) -> StepCost:
        return StepCost(**{f: getattr(sc, f)[:, :, s] for f in StepCost.__dataclass_fields__})

    want = set(phases)
    if "colocated" in want or "decode" in want:
        dec_all = step_cost(
            model, hw, tp, pp, ep, B_one, 1.0, si + so / 2.0, mem_context=si + so, nodes=nodes, attn_dp=dpa
        )
        # one sequence per decode step: the load-dependent energy model's small-batch end (E4, E5)
        dec, dec1 = cut(dec_all, searched), cut(dec_all, one)
    if "colocated" in want:
        # AT0: the prefill of the class's longest prompt node (``alloc.attainment.prefill_time``)
        hi = buckets["prompt_hi_tokens"] if "prompt_hi_tokens" in buckets else buckets["input_tokens"]
        si_hi = np.asarray(hi, dtype=float).reshape(1, nb, 1)
        pre_hi = step_cost(model, hw, tp, pp, ep, np.ones((1, 1, 1)), si_hi, 0.0, nodes=nodes, attn_dp=dpa)
    if "colocated" in want or "prefill" in want:
        B_pre = B_one if "prefill" in want else np.ones((1, 1, 1))
        pre_all = step_cost(model, hw, tp, pp, ep, B_pre, si, 0.0, nodes=nodes, attn_dp=dpa)
        pre1 = cut(pre_all, one if "prefill" in want else slice(0, 1))
        if "prefill" in want:
            pre = cut(pre_all, searched)

    base = {
        "chip": kf["chip"].reshape(per_kind),
        "shape": kf["shape"].reshape(per_kind),
        "chips_per_vpod": kf["chips_per_vpod"].reshape(per_kind),
        "tp": kf["tp"].reshape(per_kind),
        "pp": kf["pp"].reshape(per_kind),
        "ep": kf["ep"].reshape(per_kind),
        "wraparound": kf["wraparound"].reshape(per_kind),
        "batch": B.astype(np.int64),
        "bucket": bucket_names.reshape(1, nb, 1),
        "kv_bytes_per_req": si * model.kv_bytes_per_token,
    }
    frames: dict[str, dict] = {}
    if "colocated" in want:
        p1_stage = pre1.t_stage_s
        dec_s = so * dec.t_stage_s  # decode time of a request's batch
        dec_per_req = dec_s / B
        busy = p1_stage + dec_per_req  # vPod time per request (pipelined), R12
        rho = B * p1_stage / dec_s
        tpot = dec.latency_s * (1.0 + rho)
        ttft = pre1.latency_s
        dominant_prefill = p1_stage > dec_per_req
        e2e = ttft + so * tpot
        frames["colocated"] = dict(
            ttft_s=ttft,
            ttft_hi_s=pre_hi.latency_s,
            tpot_s=tpot,
            e2e_s=e2e,
            latency_s=e2e,
            max_rate_rps=1.0 / busy,
            dyn_energy_j_per_req=pre1.energy_dyn_j + so * dec.energy_dyn_j / B,
            flops=pre1.flops + so * dec.flops / B,
            hbm_bytes=pre1.hbm_bytes + so * dec.hbm_bytes / B,
            ici_bytes=pre1.ici_bytes + so * dec.ici_bytes / B,
            dcn_bytes=pre1.dcn_bytes + so * dec.dcn_bytes / B,
            bound=np.where(dominant_prefill, pre1.bound, dec.bound),
            mem_bytes_per_chip=np.maximum(dec.mem_bytes_per_chip, pre1.mem_bytes_per_chip),
            busy_s_per_req=busy,
            **_energy_columns(
                dec1.energy_dyn_j,
                dec.energy_dyn_j,
                dec1.t_stage_s,
                dec.t_stage_s,
                B,
                so,
                pre1.energy_dyn_j,
                p1_stage,
                dec.routed_j,
                routed_miss_per_seq(model, 1.0),
                dec.routed_s,
            ),
        )
    if "prefill" in want:
        frames["prefill"] = dict(
            ttft_s=pre.latency_s,
            ttft_hi_s=np.nan,
            tpot_s=np.nan,
            e2e_s=np.nan,
            latency_s=pre.latency_s,
            max_rate_rps=B / pre.t_stage_s,
            dyn_energy_j_per_req=pre.energy_dyn_j / B,
            flops=pre.flops / B,
            hbm_bytes=pre.hbm_bytes / B,
            ici_bytes=pre.ici_bytes / B,
            dcn_bytes=pre.dcn_bytes / B,
            bound=pre.bound,
            mem_bytes_per_chip=pre.mem_bytes_per_chip,
            busy_s_per_req=pre.t_stage_s / B,
            **_energy_columns(
                pre1.energy_dyn_j,
                pre.energy_dyn_j,
                pre1.t_stage_s,
                pre.t_stage_s,
                B,
                1.0,
                routed_j=pre.routed_j,
                miss_per_seq=routed_miss_per_seq(model, si),
                routed_s=pre.routed_s,
            ),
        )
    if "decode" in want:
        dec_s = so * dec.t_stage_s
        frames["decode"] = dict(
            ttft_s=np.nan,
            ttft_hi_s=np.nan,
            tpot_s=dec.latency_s,
            e2e_s=np.nan,
            latency_s=dec.latency_s,
            max_rate_rps=B / dec_s,
            dyn_energy_j_per_req=so * dec.energy_dyn_j / B,
            flops=so * dec.flops / B,
            hbm_bytes=so * dec.hbm_bytes / B,
            ici_bytes=so * dec.ici_bytes / B,
            dcn_bytes=so * dec.dcn_bytes / B,
            bound=dec.bound,
            mem_bytes_per_chip=dec.mem_bytes_per_chip,
            busy_s_per_req=dec_s / B,
            **_energy_columns(
                dec1.energy_dyn_j,
                dec.energy_dyn_j,
                dec1.t_stage_s,
                dec.t_stage_s,
                B,
                so,
                routed_j=dec.routed_j,
                miss_per_seq=routed_miss_per_seq(model, 1.0),
                routed_s=dec.routed_s,
            ),
        )
    phase_names = list(frames)
    nf = len(phase_names)
    shape = (nf, nk, nb, nB)
    first = frames[phase_names[0]]
    extra_float = (
        "static_power_w",
        "price_usd_per_hour",
        "embodied_kg_per_hour",
        "energy_j_per_req",
        "cost_usd_per_req",
        "embodied_kg_per_req",
        "tokens_per_s",
    )
    dtypes = {name: v.dtype for name, v in base.items()}
    dtypes.update({name: np.result_type(*(np.asarray(f[name]) for f in frames.values())) for name in first})
    dtypes.update({name: np.dtype(float) for name in extra_float})
    dtypes.update(vpod_type=np.dtype(object), config_id=np.dtype(object))
    # The columns of one dtype are the rows of one array (a large allocation: fewer page faults)
    out: dict[str, np.ndarray] = {"bound": np.empty(shape, dtype=dtypes.pop("bound"))}
    blocks = []
    for dt in dict.fromkeys(dtypes.values()):
        names = tuple(n for n, d in dtypes.items() if d == dt)
        block = np.empty((len(names), *shape), dtype=dt)
        out.update(zip(names, block, strict=True))
        flat = block.reshape(len(names), -1)
        blocks.append((flat, names, tuple(flat)))
    for name, v in base.items():
        out[name][...] = v
    for p, frame in enumerate(frames.values()):
        for name, v in frame.items():
            out[name][p] = v
    # per-kind numbers as (phase, kind, class, batch)
    kind4 = (1, nk, 1, 1)
    chips = (tp * pp).reshape(kind4)
    price = np.array([ctxs[c].price_usd_per_chip_hour for c in chip_order])[kind_chip].reshape(kind4)
    emb = np.array([ctxs[c].embodied_kg_per_chip_hour for c in chip_order])[kind_chip].reshape(kind4)
    memory_ok = out["mem_bytes_per_chip"] <= hw.hbm_cap.reshape(kind4)
    out["static_power_w"][...] = chips * hw.static_w.reshape(kind4)
    out["price_usd_per_hour"][...] = chips * price
    out["embodied_kg_per_hour"][...] = chips * emb
    busy = out["busy_s_per_req"]
    np.add(out["dyn_energy_j_per_req"], out["static_power_w"] * busy, out=out["energy_j_per_req"])
    np.multiply(out["price_usd_per_hour"] / 3600.0, busy, out=out["cost_usd_per_req"])
    np.multiply(out["embodied_kg_per_hour"] / 3600.0, busy, out=out["embodied_kg_per_req"])
    np.multiply(out["max_rate_rps"], so.reshape(1, 1, nb, 1), out=out["tokens_per_s"])
    type_keys, config_id = _config_keys(
        tuple(kf["key"]), tuple(phase_names), tuple(batch_sizes), tuple(f"|{b}" for b in bucket_names)
    )
    out["vpod_type"][...] = type_keys
    out["config_id"][...] = config_id
    cols = {k: v.reshape(-1) for k, v in out.items()}
    cols.update((n, r) for _, names, rows in blocks for n, r in zip(names, rows, strict=True))
    phase = np.repeat(np.arange(nf), nk * nb * nB)
    cols["phase"] = text_runs(np.array(phase_names), (nk * nb * nB,) * nf)
    cols["bound"] = text_column(BOUNDS, cols["bound"])
    cols["memory_ok"] = memory_ok.reshape(-1)
    order = [*base, "phase", *first, "memory_ok", *extra_float, "vpod_type", "config_id"]
    return _Grid(
        {k: cols[k] for k in order},
        bucket=np.broadcast_to(np.arange(nb).reshape(1, 1, nb, 1), shape).reshape(-1),
        phase=phase,
        phases=tuple(phase_names),
        chip=np.broadcast_to(kind_chip.reshape(kind4), shape).reshape(-1),
        chips=tuple(chip_order),
        chip_rows=tuple(c * nb * nB for c in counts),
        blocks=tuple(blocks),
    )


def text_column(values: np.ndarray, codes: np.ndarray):
    """``values[codes]`` as the text column pandas makes of an array of those strings (Arrow-backed
    strings on pandas 3, objects on pandas 2), built by a take of the few distinct values instead
    of converting every string of the grid."""
    dtype, distinct = _text_values(tuple((type(v), v) for v in values))
    if isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow":
        import pyarrow as pa

        return pd.array(distinct.take(pa.array(codes)), dtype=dtype)
    return distinct[codes]


def text_runs(values: np.ndarray, counts: tuple[int, ...]):
    """:func:`text_column` of ``values[i]`` repeated ``counts[i]`` times, in order: the column of
    the last few (values, counts) is kept and handed out as a new column each call (an Arrow array
    cannot be changed, so the column wraps the kept one; an object column is a copy)."""
    dtype, col = _text_runs(tuple((type(v), v) for v in values), tuple(int(c) for c in counts))
    if isinstance(col, np.ndarray):
        return col.copy()
    return pd.array(col, dtype=dtype)


@lru_cache(maxsize=16)
def _text_runs(typed_values: tuple[tuple[type, object], ...], counts: tuple[int, ...]) -> tuple[object, object]:
    """The kept column of :func:`text_runs`: (its pandas dtype and Arrow array) or (``None`` and a
    read-only object array)."""
    values = np.array([v for _, v in typed_values], dtype=object)
    col = text_column(values, np.repeat(np.arange(len(values)), counts))
    if isinstance(col, np.ndarray):
        col.flags.writeable = False
        return None, col
    return col.dtype, _arrow(col)


@lru_cache(maxsize=64)
def _text_values(typed_values: tuple[tuple[type, object], ...]) -> tuple[object, object]:
    """The dtype pandas gives a column of these values and the values in it (one Arrow array, or a
    read-only object array); keyed with each value's type (pandas 2 keeps the objects)."""
    probe = pd.Series([v for _, v in typed_values])
    dtype = probe.dtype
    if isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow":
        return dtype, _arrow(probe.array)
    arr = probe.to_numpy(dtype=object)
    arr.flags.writeable = False
    return dtype, arr


def _arrow(array):
    """The one Arrow array of a pandas Arrow-backed array."""
    import pyarrow as pa

    return pa.chunked_array(array.__arrow_array__()).combine_chunks()


def _energy_columns(
    e_step_b1: np.ndarray,
    e_step: np.ndarray,
    t_step_b1: np.ndarray,
    t_step: np.ndarray,
    batch: np.ndarray,
    steps_per_req: np.ndarray | float,
    unbatched_j: np.ndarray | float = 0.0,
    stall_s: np.ndarray | float = 0.0,
    routed_j: np.ndarray | float = 0.0,
    miss_per_seq: np.ndarray | float = 1.0,
    routed_s: np.ndarray | float = 0.0,
) -> dict[str, np.ndarray | float]:
    """The load-dependent energy columns (``neuscale_opt.energy.ENERGY_COLUMNS`` and, for an MoE
    model, ``ROUTED_COLUMNS``) of a phase whose batched step costs ``e_step`` J at ``batch`` and
    ``e_step_b1`` J with one sequence, done ``steps_per_req`` times per request; ``unbatched_j`` is
    per-request energy outside the batched steps (the colocated batch-1 prefill) and ``stall_s`` the
    time it stalls the batch; ``routed_j``, ``routed_s`` and ``miss_per_seq`` the routed experts'
    terms of E4 and E5 (0, 0 and 1 for a dense model). Values broadcast against the grid (the caller
    writes them into the columns)."""
    fixed = fixed_step_energy_j(e_step_b1, e_step, 1.0, batch, routed_j, miss_per_seq)
    weights = weight_step_energy_j(fixed, routed_j, miss_per_seq, batch)
    cols = {
        "step_fixed_energy_j": fixed,
        "marginal_energy_j_per_req": unbatched_j + steps_per_req * (e_step - weights) / batch,
        "steps_per_req": steps_per_req,
        "step_s_b1": t_step_b1,
        "step_s": t_step,
        "stall_s_per_req": stall_s,
    }
    if np.any(np.asarray(routed_j) > 0):
        cols.update(step_routed_energy_j=routed_j, step_routed_s=routed_s, routed_miss_per_seq=miss_per_seq)
    return cols


def pareto_mask(df: pd.DataFrame, metric: str, by: tuple[str, ...] = ("bucket", "phase")) -> np.ndarray:
    """Rows on the (latency_s, ``metric``) Pareto front within each group (both minimised).

    Rows are sorted by group, latency, metric and row position; a row is on the front when its
    metric is strictly below the metric of every row before it in its group. Done with integer
    ranks and one cumulative minimum (no Python loop, no float tolerance): ranks are offset by
    ``-group * (n + 1)`` so that the running minimum restarts at every group.
    """
    n = len(df)
    if n == 0:
        return np.zeros(0, dtype=bool)
    g = np.zeros(n, dtype=np.int64)
    for col in by:
        codes, uniq = pd.factorize(df[col], sort=True)
        g = g * (len(uniq) + 1) + codes
    return pareto_front(g, df["latency_s"].to_numpy(dtype=float), df[metric].to_numpy(dtype=float))


def _dense_rank(x: np.ndarray) -> np.ndarray:
    """0-based dense ranks of ``x`` (equal values, NaNs among them, share a rank; NaN ranks last)."""
    o = np.argsort(x)
    xs = x[o]
    new = xs[1:] != xs[:-1]
    new &= ~(np.isnan(xs[1:]) & np.isnan(xs[:-1]))
    r = np.empty(len(x), dtype=np.int64)
    r[o] = np.concatenate(([0], np.cumsum(new)))
    return r


def _order_key(x: np.ndarray) -> np.ndarray:
    """int64 keys that order and tie as :func:`_dense_rank` ranks floats: ``-0.0`` and ``0.0`` one
    key, every NaN one key after ``+inf`` (the IEEE bits, negative values' magnitude bits flipped)."""
    x = np.asarray(x, dtype=float) + 0.0  # -0.0 + 0.0 = 0.0
    bits = x.view(np.int64)
    key = np.where(bits < 0, bits ^ np.int64(0x7FFFFFFFFFFFFFFF), bits)
    key[np.isnan(x)] = np.iinfo(np.int64).max
    return key


def pareto_front(group: np.ndarray, latency: np.ndarray, *metrics: np.ndarray) -> np.ndarray:
    """The rule of :func:`pareto_mask` on arrays: ``group`` the rows' integer group codes (any
    numbering: the front of a group does not depend on the others); one mask per metric (a tuple
    when several are given, sharing the group and latency order).

    In the rule's order - group, latency, metric, position - only the first row of a run of equal
    (group, latency) can be on the front: the one of least metric, the first in position among
    equals; it is when its metric is below the least metric of the group's earlier runs (the
    group's first run always is). So the rows are sorted once by (group, latency) (values as
    integer keys, :func:`_order_key`: equal values tie exactly) and each metric needs only
    per-run minima."""
    n = len(group)
    if n == 0:
        empty = np.zeros(0, dtype=bool)
        return empty if len(metrics) == 1 else tuple(empty for _ in metrics)
    group = np.asarray(group, dtype=np.int64)
    g = group - group.min()
    if int(g.max()) + 1 > n:  # sparse codes: renumber densely
        g = _dense_rank(group.astype(float))
    lat = _order_key(latency)
    order = np.argsort(lat)
    by_group = g[order].astype(np.int16) if int(g.max()) < 2**15 else g[order]  # int16: a radix sort
    order = order[np.argsort(by_group, kind="stable")]
    gs, ls = g[order], lat[order]
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = (gs[1:] != gs[:-1]) | (ls[1:] != ls[:-1])
    starts = np.flatnonzero(new_run)
    run_of_row = np.cumsum(new_run) - 1 if len(starts) < n else None
    run_group = gs[starts]
    group_starts = np.flatnonzero(np.concatenate(([True], run_group[1:] != run_group[:-1])))
    group_ends = np.append(group_starts[1:], len(starts))
    masks = []
    for metric in metrics:
        ms = _order_key(metric)[order]
        if len(starts) == n:  # no two rows of a group share a latency: every run one row
            run_min, first = ms, order
        else:
            run_min = np.minimum.reduceat(ms, starts)
            first = np.minimum.reduceat(np.where(ms == run_min[run_of_row], order, n), starts)
        on = np.ones(len(starts), dtype=bool)
        for a, b in zip(group_starts, group_ends, strict=True):
            r = run_min[a:b]
            on[a + 1 : b] = r[1:] < np.minimum.accumulate(r)[:-1]
        mask = np.zeros(n, dtype=bool)
        mask[first[on]] = True
        masks.append(mask)
    return masks[0] if len(masks) == 1 else tuple(masks)


# --------------------------------------------------------------------------------------------
# Buckets, demand and SLO targets of an instance


def instance_buckets_and_demand(inst: Instance) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Request classes (bucket, input_tokens, output_tokens, optional per-class SLOs) and the
    per-epoch demand the planner provisions for (epoch, bucket, rate_rps)."""
    w = inst.workload
    if w.classes:
        buckets = pd.DataFrame(
            {
                "bucket": [c.name for c in w.classes],
                "input_tokens": [c.input_tokens for c in w.classes],
                "output_tokens": [c.output_tokens for c in w.classes],
                "ttft_slo_s": [c.ttft_slo_s if c.ttft_slo_s is not None else np.nan for c in w.classes],
                "tpot_slo_s": [c.tpot_slo_s if c.tpot_slo_s is not None else np.nan for c in w.classes],
                "e2e_slo_s": [c.e2e_slo_s if c.e2e_slo_s is not None else np.nan for c in w.classes],
            }
        )
        epochs = sorted({d.epoch for d in w.demand})
        if inst.epochs.horizon is not None:
            epochs = [e for e in range(inst.epochs.horizon)]
        rates = {(d.epoch, d.bucket): d.rate_rps for d in w.demand}
        demand = pd.DataFrame(
            [(e, b, rates.get((e, b), 0.0)) for e in epochs for b in buckets["bucket"]],
            columns=["epoch", "bucket", "rate_rps"],
        )
        if w.rate_scale != 1.0:
            demand = demand.assign(rate_rps=demand["rate_rps"] * w.rate_scale)
        return buckets, demand
    return _trace_buckets_and_demand(inst)


def instance_trace(inst: Instance) -> pd.DataFrame:
    """The instance's per-request trace, scaled by ``workload.rate_scale`` (one loader for the
    planner and the replay, so both see the same requests; the copies rotate within each epoch,
    ``traces.scale``)."""
    from neuscale_opt.traces.loaders import load_trace
    from neuscale_opt.traces.scale import scale_trace

    w = inst.workload
    if w.trace is None:
        raise InputError("the instance has explicit classes and no trace", where="workload.trace")
    trace = scale_trace(load_trace(w.trace, inst.base_dir), w.rate_scale, period_s=float(inst.epochs.length_s))
    return cut_to_horizon(trace, inst)


def cut_to_horizon(trace: pd.DataFrame, inst: Instance) -> pd.DataFrame:
    """The requests inside the planned epochs: with ``epochs.horizon`` = E, those arriving before
    ``E x length_s`` (planning, evaluation and replay then all cover epochs 0 .. E-1). The rows
    left out are counted in ``attrs["rows_beyond_horizon"]``."""
    horizon = inst.epochs.horizon
    keep = np.ones(len(trace), dtype=bool)
    if horizon is not None:
        end_s = horizon * inst.epochs.length_s
        keep = trace["arrival_s"].to_numpy(np.float64) < end_s
    out = trace if keep.all() else trace.loc[keep].reset_index(drop=True)
    out.attrs = dict(trace.attrs)
    if horizon is not None and not keep.all():
        out.attrs["horizon_s"] = min(float(trace.attrs.get("horizon_s", end_s)), end_s)
    out.attrs["rows_beyond_horizon"] = int((~keep).sum())
    return out


#: Classes and demand of the last few traces read (:func:`_trace_buckets_and_demand`), keyed by the
#: trace file's SHA-256 and every setting they depend on; at most ``_TRACE_CACHE_SIZE`` entries.
_TRACE_CACHE: dict[tuple, tuple[pd.DataFrame, pd.DataFrame]] = {}
_TRACE_CACHE_SIZE = 8
#: SHA-256 of the trace files hashed last, keyed by path and ``os.stat`` identity (device, inode,
#: size, modification and change times in ns): a file written again is hashed again.
_TRACE_DIGESTS: dict[tuple, str] = {}
#: A file changed less than this long before it is hashed is hashed again on every call: the
#: kernel's file times are coarse (a clock tick), so two writes inside one tick could share them.
_TRACE_DIGEST_SETTLED_NS = 2_000_000_000


def _trace_digest(path) -> str:
    """The SHA-256 of the file at ``path``, read through the one reader; kept per (path, device,
    inode, size, mtime_ns, ctime_ns) once the file has not changed for
    ``_TRACE_DIGEST_SETTLED_NS``."""
    import hashlib
    import os
    import time

    from neuscale_opt.readers import read_bytes

    try:
        st = os.stat(path)
    except OSError:  # the reader says what is wrong
        st = None
    key = None if st is None else (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    digest = _TRACE_DIGESTS.get(key) if key is not None else None
    if digest is None:
        digest = hashlib.sha256(read_bytes(path, str(path))).hexdigest()
        if key is not None and time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > _TRACE_DIGEST_SETTLED_NS:
            if len(_TRACE_DIGESTS) >= _TRACE_CACHE_SIZE:
                _TRACE_DIGESTS.pop(next(iter(_TRACE_DIGESTS)))
            _TRACE_DIGESTS[key] = digest
    return digest


def _trace_key(inst: Instance) -> tuple:
    """What the classes and demand of a trace instance are a function of: the trace file's bytes
    (their hash, :func:`_trace_digest`: a changed file is a new key) and the workload and epoch
    settings, and the pre-warm lead (the observed history, D11)."""
    from neuscale_opt.traces.loaders import resolve_path

    w = inst.workload
    path = resolve_path(w.trace.path, inst.base_dir)
    return (str(path), _trace_digest(path), w.model_dump_json(), inst.epochs.model_dump_json(), _prewarm_lead(inst))


def _trace_buckets_and_demand(inst: Instance) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The classes and demand of a trace instance; the trace is read and bucketed once per
    distinct (file content, settings) and the cached tables handed out as copies."""
    import copy

    key = _trace_key(inst)
    hit = _TRACE_CACHE.get(key)
    if hit is None:
        hit = _read_trace_buckets_and_demand(inst)
        if len(_TRACE_CACHE) >= _TRACE_CACHE_SIZE:
            _TRACE_CACHE.pop(next(iter(_TRACE_CACHE)))
        _TRACE_CACHE[key] = hit
    out = []
    for df in hit:
        c = df.copy(deep=not _COPY_ON_WRITE)
        c.attrs = copy.deepcopy(df.attrs)
        out.append(c)
    return out[0], out[1]


def _read_trace_buckets_and_demand(inst: Instance) -> tuple[pd.DataFrame, pd.DataFrame]:
    from neuscale_opt.traces.buckets import DEFAULT_BUCKETS, bucket_names, bucket_table, length_nodes
    from neuscale_opt.traces.demand import (
        burst_demand,
        clump_sizes,
        clumped,
        epoch_demand,
        observed_demand,
        rate_modulation,
    )

    w = inst.workload
    spec = w.buckets or DEFAULT_BUCKETS
    trace = instance_trace(inst)
    table = bucket_table(trace, spec)
    buckets = pd.DataFrame(
        {
            "bucket": table["bucket"].astype(str).to_numpy(),
            "input_tokens": table["input_tokens"].astype(np.int64).to_numpy(),
            "output_tokens": table["output_tokens"].astype(np.int64).to_numpy(),
        }
    )
    for c in ("ttft_slo_s", "tpot_slo_s", "e2e_slo_s"):
        buckets[c] = np.nan
    # the class's prompt and answer lengths at quantile nodes: the TTFT of its longer prompts (AT0)
    # and the TPOT tail under prefill stalls (AT3)
    buckets["input_nodes"] = length_nodes(trace, spec, "input_tokens")
    buckets["prompt_hi_tokens"] = [
        max(v) if len(v) else float(rep) for v, rep in zip(buckets["input_nodes"], buckets["input_tokens"], strict=True)
    ]
    buckets["output_nodes"] = length_nodes(trace, spec, "output_tokens")
    horizon_s = inst.epochs.horizon * inst.epochs.length_s if inst.epochs.horizon else None
    if w.provision_for == "burst":
        dem = burst_demand(
            trace,
            spec,
            epoch_s=inst.epochs.length_s,
            base_s=w.subwindow_s,
            headroom=w.burst_headroom,
            horizon_s=horizon_s,
        )
    else:
        dem = epoch_demand(trace, spec, epoch_s=inst.epochs.length_s, subwindow_s=w.subwindow_s, horizon_s=horizon_s)
    col = {"peak": "peak_rps", "mean": "mean_rps", "burst": "burst_rps"}[w.provision_for]
    # phi_b = mean arrival rate / provisioned rate over the horizon: the share of a provisioned
    # request that arrives on average (the energy accounting's expected traffic, E7)
    sums = dem.groupby(dem["bucket"].astype(str))[list(dict.fromkeys(["mean_rps", col]))].sum()
    phi = (sums["mean_rps"] / sums[col].where(sums[col] > 0)).fillna(1.0).clip(upper=1.0)
    buckets["mean_rate_ratio"] = buckets["bucket"].map(phi).astype(float).fillna(1.0).to_numpy()
    # the class's slow rate movement inside the window whose mean rate is planned (D12):
    # the safe loads' AT4. A plan for each class's busiest sub-window (peak) sits above that
    # movement already (formulations/allocation.md, AT4)
    if w.arrivals == "modulated" and w.provision_for in ("burst", "mean"):
        window = inst.epochs.length_s
        if w.provision_for == "burst":
            window = dem.attrs.get("sizing_window", {}).get("window_s", window)
        c2 = rate_modulation(trace, spec, float(window), horizon_s=horizon_s)
        buckets["rate_cv2"] = buckets["bucket"].map(c2).astype(float).fillna(0.0).to_numpy()
    # the class's clumps of requests recorded at one instant (D13): the safe loads' AT5, with the
    # class's planned rate (its mean over the epochs that plan some) for the vPods a clump is
    # split over. Only where the trace has clumps (otherwise AT0-AT4 unchanged)
    if w.arrivals == "modulated":
        laws = clump_sizes(trace, spec, horizon_s=horizon_s)
        if any(clumped(v) for v in laws):
            planned = dem[dem[col] > 0].groupby(dem["bucket"].astype(str))[col].mean()
            buckets["clump_sizes"] = [tuple(laws.get(b, ())) for b in buckets["bucket"]]
            buckets["clump_rate_rps"] = buckets["bucket"].map(planned).astype(float).fillna(0.0).to_numpy()
    demand = dem[["epoch", "bucket", col]].rename(columns={col: "rate_rps"})
    demand["mean_rps"] = dem["mean_rps"].to_numpy()  # the traffic that arrives (energy accounting)
    demand["bucket"] = demand["bucket"].astype(str)
    demand["epoch"] = demand["epoch"].astype(np.int64)
    demand = demand.reset_index(drop=True)
    # the history a pre-warmed rolling plan reads: each epoch as seen L before it ends (D11)
    lead = _prewarm_lead(inst)
    if lead > 0:
        n_ep = int(demand["epoch"].max()) + 1 if len(demand) else 0
        window = dem.attrs.get("sizing_window", {}).get("window_s")
        obs = observed_demand(trace, spec, n_ep, inst.epochs.length_s, lead, w.provision_for, w.subwindow_s, window)
        order = {b: i for i, b in enumerate(bucket_names(spec))}
        demand["observed_rps"] = obs[demand["epoch"].to_numpy(), demand["bucket"].map(order).to_numpy()]
    demand.attrs = {"rows_beyond_horizon": int(trace.attrs.get("rows_beyond_horizon", 0)), "observed_lead_s": lead}
    if "sizing_window" in dem.attrs:
        demand.attrs["sizing_window"] = dem.attrs["sizing_window"]
    return buckets, demand


def _prewarm_lead(inst: Instance) -> float:
    """The pre-warm lead L of ``inst``'s horizon plans (its ``[horizon]`` table, else the defaults;
    ``traces.demand.prewarm_lead_s``)."""
    from neuscale_opt.instance import Horizon
    from neuscale_opt.traces.demand import prewarm_lead_s

    h = inst.horizon if inst.horizon is not None else Horizon()
    return prewarm_lead_s(float(h.create_delay_s), bool(h.prewarm), float(inst.epochs.length_s))


def reference_latencies(inst: Instance, model: ModelSpec, buckets: pd.DataFrame) -> pd.DataFrame:
    """Single-request (batch 1) TTFT, TPOT and e2e of each class on the SLO reference configuration:
    the named ``reference_shape`` of ``reference_chip``, or its smallest slice that holds the model
    at the longest class context, with tp = all its chips and pp = 1 (a GPU vPod of several nodes:
    tp = one node, pp = the nodes)."""
    ref, name = _reference(inst, model, buckets)
    out = pd.DataFrame({"bucket": buckets["bucket"].to_numpy(), **ref})
    out.attrs["reference"] = name
    return out


def _reference(
    inst: Instance, model: ModelSpec, buckets: pd.DataFrame, ctxs: dict[str, ChipContext] | None = None
) -> tuple[dict[str, np.ndarray], str]:
    """The columns ``ref_ttft_s``, ``ref_tpot_s``, ``ref_e2e_s`` of :func:`reference_latencies` (one
    value per class) and the reference configuration's name. ``ctxs`` the chip settings already
    made for the fleet (the reference chip's is made here when it is not among them)."""
    chip = get_chip(inst.slo.reference_chip, where="slo.reference_chip")
    ctx = ctxs[chip.name] if ctxs is not None and chip.name in ctxs else chip_context(inst, chip.name)
    s_in = buckets["input_tokens"].to_numpy(dtype=float)
    s_out = buckets["output_tokens"].to_numpy(dtype=float)
    # the reference is a function of these alone: the chip's settings (calibration, derate, energy
    # profile, usable HBM) all enter through its hardware numbers
    hw_bits = np.array([getattr(ctx.hw, f) for f in HwRows.__dataclass_fields__], dtype=float).tobytes()
    ref, name = _reference_of(model, chip, inst.slo.reference_shape, hw_bits, s_in.tobytes(), s_out.tobytes())
    return {k: v.copy() for k, v in ref.items()}, name


@lru_cache(maxsize=32)
def _reference_of(
    model: ModelSpec, chip: ChipSpec, reference_shape: str | None, hw_bits: bytes, s_in_bits: bytes, s_out_bits: bytes
) -> tuple[dict[str, np.ndarray], str]:
    """:func:`_reference` on its inputs (the hardware numbers of :class:`HwRows` and the classes'
    token counts as float64 bytes); the last few are kept."""
    hw0 = HwRows(**dict(zip(HwRows.__dataclass_fields__, np.frombuffer(hw_bits), strict=True)))
    s_in, s_out = np.frombuffer(s_in_bits).copy(), np.frombuffer(s_out_bits).copy()
    if reference_shape is not None:
        shapes = [tuple(int(x) for x in reference_shape.split("x"))]
    else:
        shapes = slice_shapes(chip, chip.pod_chips * (4 if chip.topology == "switched" else 1))
    max_ctx = float((s_in + s_out).max())
    for shape in shapes:
        n = math.prod(shape)
        nodes = vpod_nodes(chip, n)
        par = [p for p in parallelisms(model, n) if p[1] == nodes and p[2] == 1 and p[0] * nodes == n]
        if not par:
            continue
        tp, pp = par[-1][0], nodes
        hw = for_slice(hw0, chip, shape, tp)
        dec = step_cost(
            model, hw, tp, pp, 1, 1.0, 1.0, s_in + s_out / 2.0, mem_context=np.full_like(s_in, max_ctx), nodes=nodes
        )
        if not bool(np.all(dec.mem_bytes_per_chip <= hw.hbm_cap)):
            continue
        pre = step_cost(model, hw, tp, pp, 1, 1.0, s_in, 0.0, nodes=nodes)
        ref = {
            "ref_ttft_s": pre.latency_s,
            "ref_tpot_s": dec.latency_s,
            "ref_e2e_s": pre.latency_s + s_out * dec.latency_s,
        }
        for v in ref.values():
            v.flags.writeable = False
        return ref, f"{chip.name}:{'x'.join(map(str, shape))}:tp{tp}" + (f"pp{pp}" if pp > 1 else "")
    raise InputError(
        f"no slice of {chip.name} holds {model.name} for the SLO reference; choose another reference_chip",
        where="slo.reference_chip",
    )


def apply_slo(
    inst: Instance, model: ModelSpec, buckets: pd.DataFrame, ctxs: dict[str, ChipContext] | None = None
) -> tuple[pd.DataFrame, str]:
    """Fill the buckets' SLO targets (per-class values given in the file win); ``ctxs`` as for
    :func:`_reference`."""
    b = buckets.copy(deep=not _COPY_ON_WRITE)
    if inst.slo.mode == "absolute":
        targets = {"ttft": inst.slo.ttft_s, "tpot": inst.slo.tpot_s, "e2e": inst.slo.e2e_s}
        for m, v in targets.items():
            col = f"{m}_slo_s"
            if v is not None:
                b[col] = b[col].fillna(v)
        return b, "absolute"
    ref, name = _reference(inst, model, buckets, ctxs)
    for m in inst.slo.metrics:
        col = f"{m}_slo_s"
        given = b[col].to_numpy(dtype=float)
        b[col] = np.where(np.isnan(given), inst.slo.multiplier * ref[f"ref_{m}_s"], given)
    return b, f"{inst.slo.multiplier:g}x single-request latency on {name}"


def effective_model(inst: Instance) -> ModelSpec:
    m = get_model(inst.model.name, where="model.name")
    upd = {}
    if inst.model.weight_dtype:
        upd["weight_dtype"] = inst.model.weight_dtype
    if inst.model.kv_dtype:
        upd["kv_dtype"] = inst.model.kv_dtype
    if inst.model.moe_imbalance is not None:
        upd["moe_imbalance"] = inst.model.moe_imbalance
    return replace(m, **upd) if upd else m


@dataclass(frozen=True)
class CandidateSet:
    """All candidates of an instance with the inputs that produced them."""

    table: pd.DataFrame  # every candidate, feasible or not, with pareto flags
    buckets: pd.DataFrame
    demand: pd.DataFrame
    slo_note: str
    model: ModelSpec
    notes: tuple[str, ...] = ()


def context_notes(model: ModelSpec, buckets: pd.DataFrame | dict[str, np.ndarray]) -> tuple[str, ...]:
    """Warnings about classes longer than the model's context window (still evaluated: the
    roofline does not depend on the position encoding, but the served model may refuse them).
    ``buckets`` the classes' table or its columns."""
    total = np.asarray(buckets["input_tokens"]) + np.asarray(buckets["output_tokens"])
    names = np.asarray(buckets["bucket"])
    long = [str(names[i]) for i in np.flatnonzero(total > model.max_context)]
    if not long:
        return ()
    return (
        f"class(es) {', '.join(long)} exceed {model.name}'s {model.max_context}-token context; "
        "they are planned as if the model accepted them",
    )


#: The columns of the classes' table that the grid, the SLO check and the notes read.
_CLASS_COLUMNS = ("bucket", "input_tokens", "output_tokens", "ttft_slo_s", "tpot_slo_s", "e2e_slo_s")
#: Optional columns the grid reads when the classes' table has them (AT0's longest prompt node).
_CLASS_OPTIONAL = ("prompt_hi_tokens",)


def candidates(inst: Instance) -> CandidateSet:
    """Enumerate, evaluate, check and rank every candidate vPod configuration of ``inst``."""
    model = effective_model(inst)
    ctxs = {c: chip_context(inst, c) for c in inst.chip_names}
    _check_chip_numbers(inst, ctxs)
    buckets, demand = instance_buckets_and_demand(inst)
    buckets, slo_note = apply_slo(inst, model, buckets, ctxs)
    # the classes' columns, read out of the table once for the grid, the SLO check and the notes
    classes = {c: np.asarray(buckets[c]) for c in _CLASS_COLUMNS + _CLASS_OPTIONAL if c in buckets.columns}
    kinds = [k for c in inst.chip_names for k in vpod_kinds(model, ctxs[c].chip, inst.search.max_chips_per_vpod)]
    grid = _grid_columns(model, ctxs, kinds, classes, inst.search.batch_sizes, inst.search.phases)
    if grid is None:
        raise InputError("no candidate configuration (check fleet, search and workload)", where="search")
    names = classes["bucket"]
    if len(set(names.tolist())) < len(names):
        raise ValueError("buckets: a class is listed twice")
    cols = grid.columns
    is_phase = {
        p: grid.phase == (grid.phases.index(p) if p in grid.phases else -1) for p in ("colocated", "prefill", "decode")
    }
    slo_ok = slo_within(cols, classes, grid.bucket, is_phase["decode"], is_phase["prefill"], is_phase["colocated"])
    cols["slo_ok"] = slo_ok
    cols["feasible"] = cols["memory_ok"] & slo_ok & (cols["max_rate_rps"] > 0)
    profiles = np.array([ctxs[c].energy_profile for c in grid.chips], dtype=object)
    cols["energy_profile"] = text_runs(np.tile(profiles, len(grid.phases)), grid.chip_rows * len(grid.phases))
    rows = np.flatnonzero(cols["feasible"])
    group = grid.phase[rows] * len(names) + grid.bucket[rows]  # (class, phase), as pareto_mask groups
    metrics = [cols["energy_j_per_req"][rows], cols["cost_usd_per_req"][rows]]
    fronts = pareto_front(group, cols["latency_s"][rows], *metrics)
    for flag, front in zip(("pareto_energy", "pareto_cost"), fronts, strict=True):
        on = np.zeros(len(slo_ok), dtype=bool)
        on[rows] = front
        cols[flag] = on
    df = _frame(cols, grid.blocks)
    notes = context_notes(model, classes) + horizon_notes(inst, demand) + sizing_notes(demand)
    return CandidateSet(df, buckets, demand, slo_note, model, notes)


def sizing_notes(demand: pd.DataFrame) -> tuple[str, ...]:
    """The sizing window and its reason, when the workload provisions for ``burst``."""
    sw = demand.attrs.get("sizing_window")
    if not sw:
        return ()
    return (f"capacity sized over {sw['window_s']:g}-s windows of the pooled arrivals: {sw['why']}",)


def horizon_notes(inst: Instance, demand: pd.DataFrame) -> tuple[str, ...]:
    """A note when ``epochs.horizon`` is shorter than the trace (see :func:`cut_to_horizon`)."""
    cut = int(demand.attrs.get("rows_beyond_horizon", 0))
    if not cut or inst.epochs.horizon is None:
        return ()
    end_s = inst.epochs.horizon * inst.epochs.length_s
    return (
        f"the trace is cut to epochs.horizon = {inst.epochs.horizon} epochs ({end_s:g} s): {cut} later requests "
        "are neither planned nor replayed",
    )


def pods_frame(inst: Instance) -> pd.DataFrame:
    """The pods of every generation given with geometry (see ``Coefficients.pods``)."""
    rows = [
        {
            "pod": f"{f.chip}/{i}",
            "chip": f.chip,
            "dims": tuple(p.dims),
            "failed": tuple(tuple(c) for c in p.failed_chips),
        }
        for f in inst.fleet
        for i, p in enumerate(f.pods)
    ]
    return pd.DataFrame(rows, columns=["pod", "chip", "dims", "failed"])


def build_coefficients(inst: Instance, cset: CandidateSet | None = None) -> Coefficients:
    """The planners' input: feasible configurations of every phase searched, demand, classes with
    their SLOs, and per-generation inventory and prices."""
    cset = candidates(inst) if cset is None else cset
    # every feasible phase: the planner keeps those of its serving mode (colocated, or prefill and
    # decode), so that the mode can be chosen per plan without rebuilding the coefficients
    configs = cset.table[cset.table["feasible"]].reset_index(drop=True)
    ctxs = {c: chip_context(inst, c) for c in inst.chip_names}
    dcn_pj = inst.energy.dcn_pj_per_byte
    chips = pd.DataFrame(
        {
            "chip": inst.chip_names,
            # deliverable inventory: healthy chips x availability x load (thermal is in the rates)
            "healthy_chips": [
                float(f.healthy_chips) * inst.derate(f.chip).availability * inst.derate(f.chip).load for f in inst.fleet
            ],
            "dcn_bytes_per_s": [ctxs[c].chip.dcn_bytes_per_s for c in inst.chip_names],
            "dcn_energy_j_per_byte": [
                (dcn_pj * 1e-12) if dcn_pj is not None else float(ctxs[c].hw.j_ici) for c in inst.chip_names
            ],
            "price_usd_per_chip_hour": [ctxs[c].price_usd_per_chip_hour for c in inst.chip_names],
            "static_power_w_per_chip": [float(ctxs[c].hw.static_w) for c in inst.chip_names],
            "embodied_kg_per_chip_hour": [ctxs[c].embodied_kg_per_chip_hour for c in inst.chip_names],
        }
    )
    # the share of each class's prompts its best configuration prefills within the target (AT0)
    reach = prompt_reach(configs, cset.buckets)
    buckets = cset.buckets.assign(prompt_reach=cset.buckets["bucket"].map(reach).fillna(1.0).to_numpy(float))
    return Coefficients(
        configs=configs,
        demand=cset.demand,
        buckets=buckets,
        chips=chips,
        epoch_s=inst.epochs.length_s,
        pue=inst.energy.pue,
        carbon_kg_per_kwh=inst.energy.carbon_kg_per_kwh,
        util_cap=inst.planning.util_cap,
        source="roofline",
        meta={
            "instance": inst.name,
            "model": cset.model.name,
            "slo": cset.slo_note,
            "energy_profile": inst.energy.profile,
            **({"sizing_window": cset.demand.attrs["sizing_window"]} if "sizing_window" in cset.demand.attrs else {}),
        },
        pods=pods_frame(inst),
    )
