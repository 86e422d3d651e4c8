"""The roofline coefficient engine (spec: ``formulations/roofline.md``).

One forward *step* of a vPod processes a micro-batch of ``B`` sequences, each adding ``T`` new tokens
to ``P`` tokens of context already cached (prefill: ``T`` = prompt, ``P`` = 0; decode: ``T`` = 1,
``P`` = context). Every quantity is a numpy array over candidate rows, so the whole design space is
evaluated without a Python loop per point. Equation numbers (R1, R2, ...) refer to the spec.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from neuscale_opt.catalog import ChipSpec, EnergySpec, ModelSpec

ACT_BYTES = 2.0  # activations in bf16 (R5)
BOUNDS = np.array(["compute", "hbm", "ici"])
# Serving stacks reserve part of HBM (runtime, compiled programs, fragmentation): vLLM's default
# ``gpu_memory_utilization`` is 0.9, which we take as the default usable fraction (R11).
HBM_USABLE_FRACTION_DEFAULT = 0.9
HOP_LATENCY_S_DEFAULT = 1e-6  # one ICI hop (scaling-book sharding.md, "a note on ICI latency")


@dataclass(frozen=True)
class HwRows:
    """Per-row hardware numbers (arrays broadcastable to the candidate rows).

    The fields from ``coll_bw`` to ``a2a_hops`` depend on the slice and the TP group (see
    :func:`tp_group`); ``eff_*``, ``hop_s`` and ``layer_s`` are the calibrated parameters of
    :mod:`neuscale_opt.calibrate` (per chip, so per row).
    """

    peak_flops: np.ndarray  # FLOP/s per chip
    hbm_bw: np.ndarray  # B/s per chip
    hbm_cap: np.ndarray  # B per chip (usable)
    link_bw: np.ndarray  # B/s, one direction, chip to next pipeline stage (one ICI link; NVLink: all)
    coll_bw: np.ndarray  # B/s per chip available to the TP collective (links x directions)
    a2a_dist: np.ndarray  # mean ring distance factor of an all-to-all (>= 1)
    eff_c: np.ndarray
    eff_h: np.ndarray
    eff_i: np.ndarray
    j_flop: np.ndarray
    j_hbm: np.ndarray
    j_ici: np.ndarray
    static_w: np.ndarray  # W per chip
    dcn_bw: np.ndarray | float = np.inf  # B/s per chip of data-centre network (between nodes/pods)
    j_dcn: np.ndarray | float = 0.0  # J per DCN byte
    hop_s: np.ndarray | float = HOP_LATENCY_S_DEFAULT  # latency of one collective step (alpha)
    ar_hops: np.ndarray | float = 0.0  # steps of one all-reduce (reduce-scatter + all-gather) (R7)
    a2a_hops: np.ndarray | float = 0.0  # steps of one all-to-all: the diameter of the group (R7)
    layer_s: np.ndarray | float = 0.0  # fixed per-layer overhead (kernel launches), s (R8)
    max_dyn_w: np.ndarray | float = np.inf  # TDP - static power, W per chip (R10)
    ici_serial: np.ndarray | float = 0.0  # share of the collective time not hidden under compute / HBM (R8)


@dataclass(frozen=True)
class StepCost:
    """Roofline of one step (per micro-batch) for every row. Units in names."""

    flops: np.ndarray  # whole vPod
    hbm_bytes: np.ndarray  # whole vPod
    ici_bytes: np.ndarray  # whole vPod
    t_compute_s: np.ndarray  # per pipeline stage
    t_hbm_s: np.ndarray
    t_ici_s: np.ndarray
    t_stage_s: np.ndarray  # max of the three roofs + per-layer overhead (R8)
    latency_s: np.ndarray  # pp stages + pipeline hops (R9)
    bound: np.ndarray  # 0 compute, 1 hbm, 2 ici
    energy_dyn_j: np.ndarray  # whole vPod, dynamic (R10)
    mem_bytes_per_chip: np.ndarray  # weights + KV + activation workspace (R11)
    dcn_bytes: np.ndarray  # whole vPod: pipeline hand-offs between nodes (R9)
    routed_j: np.ndarray  # whole vPod: energy of streaming every routed expert once (R3-R4; 0 dense)
    routed_s: np.ndarray  # per stage: HBM time of every routed expert once, each chip its share (0 dense)


def hw_rows_for(
    chip: ChipSpec,
    energy: EnergySpec,
    coll_bw: np.ndarray | float,
    a2a_dist: np.ndarray | float,
    hbm_usable_fraction: float = HBM_USABLE_FRACTION_DEFAULT,
    hop_s: float = HOP_LATENCY_S_DEFAULT,
    eff: tuple[float, float, float] | None = None,
    layer_s: float = 0.0,
    ici_serial: float = 0.0,
) -> HwRows:
    """Hardware rows of one chip generation (scalars broadcast against slice-dependent arrays).

    The collective step counts start at 0; :func:`for_slice` fills them for a slice and TP group.
    """
    ec, eh, ei = eff if eff is not None else (chip.eff_compute, chip.eff_hbm, chip.eff_ici)
    f = np.float64
    tdp = chip.tdp_w if not math.isnan(chip.tdp_w) else math.inf
    return HwRows(
        peak_flops=f(chip.peak_flops),
        hbm_bw=f(chip.hbm_bytes_per_s),
        hbm_cap=f(chip.hbm_bytes * hbm_usable_fraction),
        link_bw=f(chip.ici_link_bytes_per_s * (chip.ici_links if chip.topology == "switched" else 1)),
        coll_bw=np.asarray(coll_bw, dtype=float),
        a2a_dist=np.asarray(a2a_dist, dtype=float),
        eff_c=f(ec),
        eff_h=f(eh),
        eff_i=f(ei),
        j_flop=f(energy.j_per_flop),
        j_hbm=f(energy.j_per_hbm_byte),
        j_ici=f(energy.j_per_ici_byte),
        static_w=f(energy.static_w),
        dcn_bw=f(chip.dcn_bytes_per_s),
        j_dcn=f(energy.j_per_ici_byte),
        hop_s=f(hop_s),
        layer_s=f(layer_s),
        ici_serial=f(ici_serial),
        max_dyn_w=f(max(tdp - energy.static_w, 0.0)),
    )


def for_slice(hw: HwRows, chip: ChipSpec, shape: tuple[int, ...], tp: int) -> HwRows:
    """``hw`` with the slice-dependent fields of a TP group of ``tp`` chips on ``shape``."""
    g = tp_group(chip, shape, tp)
    f = np.float64
    return replace(hw, coll_bw=f(g.coll_bw), a2a_dist=f(g.a2a_dist), ar_hops=f(g.ar_hops), a2a_hops=f(g.a2a_hops))


def stack_hw(rows: list[HwRows], counts: list[int]) -> HwRows:
    """Concatenate per-chip HwRows, each repeated ``counts[i]`` times (broadcast scalars first)."""

    def cat(name: str) -> np.ndarray:
        return np.concatenate(
            [
                np.broadcast_to(np.asarray(getattr(r, name), dtype=float), (n,))
                for r, n in zip(rows, counts, strict=True)
            ]
        )

    return HwRows(**{f: cat(f) for f in HwRows.__dataclass_fields__})


@cache
def _max_std_normal(n: int) -> float:
    """E[max of n independent standard normals], by quadrature of ``1 - Phi^n`` (n >= 1)."""
    from scipy import integrate, stats

    if n <= 1:
        return 0.0
    pos = integrate.quad(lambda x: 1.0 - stats.norm.cdf(x) ** n, 0.0, np.inf)[0]
    neg = integrate.quad(lambda x: stats.norm.cdf(x) ** n, -np.inf, 0.0)[0]
    return pos - neg


def _expected_max_poisson(mean: float, n: int) -> float:
    """E[max of n independent Poisson(mean)] = sum_j (1 - F(j)^n), summed to the far tail."""
    from scipy import stats

    top = int(mean + 12.0 * math.sqrt(mean) + 40.0)
    j = np.arange(top + 1)
    return float(np.sum(1.0 - stats.poisson.cdf(j, mean) ** n))


POISSON_EXACT_MAX_MEAN = 64.0  # above this mean per chip the normal approximation is used


def routed_miss_per_seq(m, tokens_per_seq) -> np.ndarray:
    """R3 per sequence: the probability that one sequence's ``tokens_per_seq`` tokens of a step all
    miss a given routed expert, ``(1 - k/E)^T`` (1 for a dense model), so that a step of ``n``
    sequences touches the share ``1 - q^n`` of the routed experts."""
    t = np.asarray(tokens_per_seq, dtype=float)
    if not m.is_moe:
        return np.ones_like(t)
    return np.power(1.0 - m.experts_per_token / m.n_experts, t)


def moe_chip_imbalance(assignments: np.ndarray, ep: np.ndarray, cap: float) -> np.ndarray:
    """Load of the busiest of ``ep`` expert-parallel chips relative to the mean (R2).

    ``assignments`` token-to-expert assignments of a step (tokens x experts per token), routed
    uniformly: each chip receives a multinomial share with mean ``m = assignments / ep``. The
    chips' loads are approximated as independent Poisson(m) (exact expected maximum for m <= 64,
    else ``m + sqrt(m) E[max of ep standard normals]``); the factor is ``E[max] / m``, at least 1 and
    at most ``cap`` (the configured hot-expert factor, reached at small token counts, where a
    single hot expert dominates). ``ep = 1`` gives 1.
    """
    a = np.asarray(assignments, dtype=float)
    e = np.asarray(ep, dtype=float)
    a, e = np.broadcast_arrays(a, e)
    out = np.ones(a.shape)
    keys = np.stack([a.ravel(), e.ravel()], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    vals = np.ones(len(uniq))
    for i, (ai, ei) in enumerate(uniq):
        n = int(ei)
        if n <= 1 or ai <= 0:
            continue
        m = ai / n
        if m <= POISSON_EXACT_MAX_MEAN:
            mx = _expected_max_poisson(m, n)
        else:
            mx = m + math.sqrt(m) * _max_std_normal(n)
        vals[i] = min(max(mx / m, 1.0), cap)
    out = vals[inv.ravel()].reshape(a.shape)
    return out


def stage_time(t_c, t_h, t_ici, ici_serial, overhead_s):
    """Time of one pipeline stage from its three roofs (R8):
    ``max(t_c, t_h, t_ici) + ici_serial x min(max(t_c, t_h), t_ici) + overhead_s``.

    ``ici_serial = 0`` is the bound (collectives fully hidden under compute / HBM traffic: the pure
    roofline); ``ici_serial = 1`` charges them after the matmuls whose output they reduce, the
    critical path of a tensor-parallel layer (``max(t_c, t_h) + t_ici``). Arrays or Python floats
    (the replay engine calls it per step); with ``ici_serial = 0`` it is exactly the max.
    """
    if isinstance(t_c, float) and isinstance(t_h, float) and isinstance(t_ici, float):
        return stage_time_float(t_c, t_h, t_ici, ici_serial, overhead_s)
    mem = np.maximum(t_c, t_h)
    hidden = np.maximum(mem, t_ici)
    if np.all(np.asarray(ici_serial) == 0.0):
        return hidden + overhead_s
    return hidden + ici_serial * np.minimum(mem, t_ici) + overhead_s


def stage_time_float(t_c: float, t_h: float, t_ici: float, ici_serial: float, overhead_s: float) -> float:
    """:func:`stage_time` of Python floats (R8), for the replay engine's per-step call."""
    mem = t_c if t_c > t_h else t_h
    hi, lo = (mem, t_ici) if mem > t_ici else (t_ici, mem)
    return (hi + ici_serial * lo if ici_serial else hi) + overhead_s


def binding_roof(t_c, t_h, t_ici) -> np.ndarray:
    """0, 1 or 2: the first of the roofs (compute, HBM, ICI) that is largest, as ``argmax`` over
    them stacked (a NaN counts as the largest), broadcast together."""
    t_c, t_h, t_ici = np.broadcast_arrays(t_c, t_h, t_ici)
    if np.isnan(t_c).any() or np.isnan(t_h).any() or np.isnan(t_ici).any():
        return np.stack((t_c, t_h, t_ici)).argmax(axis=0)
    # no NaN: ICI only when above both, else HBM only when above compute (ties go to the first)
    out = np.where(t_ici > np.maximum(t_c, t_h), 2, (t_h > t_c).astype(np.intp))
    return out[()] if out.ndim == 0 else out  # a scalar for scalars, as argmax gives


def step_cost(
    m: ModelSpec,
    hw: HwRows,
    tp: np.ndarray,
    pp: np.ndarray,
    ep: np.ndarray,
    batch: np.ndarray,
    new_tokens: np.ndarray,
    past_tokens: np.ndarray,
    mem_context: np.ndarray | None = None,
    moe_imbalance: float | None = None,
    nodes: np.ndarray | float = 1.0,
    attn_dp: np.ndarray | bool = False,
) -> StepCost:
    """Roofline cost of one step for every row (equations R1-R11 of the spec).

    ``mem_context`` is the context length the KV cache must hold for the memory check (defaults to
    ``past_tokens + new_tokens``). ``nodes`` is the number of ICI/NVLink domains the vPod spans
    (switched GPU vPods of several 8-GPU nodes): tensor parallelism stays inside a node and
    ``nodes - 1`` of the pipeline hand-offs cross the data-centre network. ``attn_dp`` selects the
    data-parallel attention layout of MLA models (R5b): every chip of a stage runs the attention of
    its own ``B / tp`` sequences with replicated attention weights and its own share of the latent
    cache; experts are spread (``ep = tp``). Arrays broadcast.
    """
    tp = np.asarray(tp, dtype=float)
    pp = np.asarray(pp, dtype=float)
    ep = np.asarray(ep, dtype=float)
    B = np.asarray(batch, dtype=float)
    T = np.asarray(new_tokens, dtype=float)
    P = np.asarray(past_tokens, dtype=float)
    dpa = np.asarray(attn_dp, dtype=bool) & bool(m.is_mla)
    any_dpa = bool(dpa.any())

    def by_layout(dp, tp_heads):
        """``tp_heads`` (tensor-parallel heads), replaced by ``dp()`` on the rows of R5b's layout
        (evaluated only when there are any)."""
        return np.where(dpa, dp(), tp_heads) if any_dpa else tp_heads

    chips = tp * pp
    L = float(m.n_layers)
    D = float(m.d_model)
    bw = m.bytes_per_weight
    tokens = B * T
    imb = m.moe_imbalance if moe_imbalance is None else moe_imbalance
    # R5b sequences whose attention one chip runs: all B (tensor-parallel heads) or ceil(B / tp).
    seq_chip = by_layout(lambda: np.ceil(B / tp), B / tp)

    # R1 FLOPs: linear layers (2 per MAC, LM head included) + causal attention pairs. Pairs with the
    # cached context use the decode form (MLA: absorbed, on the latent), pairs inside the step the
    # prefill form (MLA: naive, on up-projected keys and values).
    lin_flops = tokens * m.linear_flops_per_token
    cached_pairs = T * P
    step_pairs = T * (T + 1.0) / 2.0
    attn_per_seq = L * (
        m.attn_flops_per_cached_pair_per_layer * cached_pairs + m.attn_flops_per_pair_per_layer * step_pairs
    )
    attn_flops = B * attn_per_seq
    flops = lin_flops + attn_flops
    # per chip: attention pairs of the sequences it serves, the rest split evenly
    attn_chip = seq_chip * attn_per_seq / pp
    if m.is_moe:
        expert_flops = tokens * 2.0 * m.experts_per_token * m.expert_params * m.n_moe_layers
        # R2 busiest chip under expert parallelism (multinomial routing, capped at imb).
        chip_factor = np.where(ep > 1, moe_chip_imbalance(tokens * m.experts_per_token, ep, imb), 1.0)
        flops_chip = (lin_flops - expert_flops) / chips + expert_flops / chips * chip_factor + attn_chip
        # R3 routed experts touched by the step (balls in bins), per MoE layer.
        k_over_e = m.experts_per_token / m.n_experts
        touched = 1.0 - np.power(1.0 - k_over_e, tokens)
    else:
        flops_chip = lin_flops / chips + attn_chip
        touched = np.zeros_like(tokens)

    # R4 weights read once per step (each chip its shard; R5b: attention weights replicated).
    w_bytes = (m.always_loaded_params + touched * m.routed_expert_params_total) * bw
    attn_w = L * m.attn_params_per_layer * bw
    w_chip = by_layout(lambda: (w_bytes - attn_w) / chips + attn_w / pp, w_bytes / chips)
    w_total = by_layout(lambda: w_bytes + attn_w * (tp - 1.0), w_bytes)
    # R5 KV cache: read P + T, write T tokens per sequence; tensor parallelism splits it at most
    # kv_shard_max ways (KV heads; MLA's latent is replicated); R5b splits it by sequence.
    kv_shard = by_layout(lambda: 1.0, np.minimum(tp, float(m.kv_shard_max)))
    kv_seq = (P + 2.0 * T) * m.kv_bytes_per_token
    kv_chip = by_layout(lambda: seq_chip * kv_seq, B * kv_seq / kv_shard) / pp
    kv_total = by_layout(lambda: B * kv_seq, B * kv_seq * tp / kv_shard)
    # R6 activations: input + output of every matmul of a layer; D-wide tensors replicated on the
    # TP group, the rest split.
    H, d = float(m.n_heads), float(m.head_dim or m.v_head_dim)
    kv_width = float(m.kv_lora_rank + m.qk_rope_head_dim) if m.is_mla else 2.0 * m.n_kv_heads * d
    split_width = 2.0 * H * d + kv_width + 3.0 * m.ffn_active_width
    act_chip = tokens * ACT_BYTES * (L / pp) * (4.0 * D + split_width / tp)
    hbm_chip = w_chip + kv_chip + act_chip
    hbm_total = w_total + kv_total + act_chip * chips

    # R7 ICI: two all-reduces of B*T*D activations per layer under TP (one when expert parallelism
    # replaces the MLP's with an all-to-all dispatch + combine; none for R5b's attention). Every
    # collective costs its steps x alpha plus its bytes over the group's links (summed, not max).
    v_ar = tokens * D * ACT_BYTES
    n_moe = float(m.n_moe_layers)
    use_a2a = (ep > 1) & (m.is_moe)
    n_ar = np.where(use_a2a, 2.0 * L - n_moe, 2.0 * L)
    if any_dpa:  # (x - 0.0 is x: the other rows as without the subtraction)
        n_ar = n_ar - np.where(dpa, L, 0.0)
    n_ar = n_ar / pp
    ar_bytes_chip = 2.0 * (tp - 1.0) / np.maximum(tp, 1.0) * v_ar
    with np.errstate(divide="ignore", invalid="ignore"):
        t_ar = np.where(tp > 1, hw.ar_hops * hw.hop_s + ar_bytes_chip / (hw.coll_bw * hw.eff_i), 0.0)
        a2a_bytes_chip = (
            2.0
            * (tokens / np.maximum(ep, 1.0))
            * m.experts_per_token
            * D
            * ACT_BYTES
            * (ep - 1.0)
            / np.maximum(ep, 1.0)
        )
        n_a2a = np.where(use_a2a, n_moe / pp, 0.0)
        t_a2a = np.where(
            use_a2a, 2.0 * hw.a2a_hops * hw.hop_s + a2a_bytes_chip * hw.a2a_dist / (hw.coll_bw * hw.eff_i), 0.0
        )
    ici_chip = n_ar * ar_bytes_chip + n_a2a * a2a_bytes_chip
    t_ici = n_ar * t_ar + n_a2a * t_a2a
    # Pipeline hand-offs between stages: B*T*D activations, each of the stage's tp chips sending its
    # 1/tp share over one link to its peer; the hand-offs between nodes go over the DCN (one NIC
    # per chip).
    p2p_bytes = v_ar
    dcn_hops = np.minimum(np.maximum(np.asarray(nodes, dtype=float) - 1.0, 0.0), np.maximum(pp - 1.0, 0.0))
    ici_hops = np.maximum(pp - 1.0 - dcn_hops, 0.0)
    t_p2p = np.where(pp > 1, hw.hop_s + p2p_bytes / (hw.link_bw * tp * hw.eff_i), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_dcn = np.where(dcn_hops > 0, hw.hop_s + p2p_bytes / (np.asarray(hw.dcn_bw) * tp), 0.0)
    ici_total = ici_chip * chips + ici_hops * p2p_bytes
    dcn_total = dcn_hops * p2p_bytes

    # R8 roofs per stage and the binding one, plus the unhidden share of the collectives and the
    # fixed per-layer overhead of the stage.
    t_c = flops_chip / (hw.peak_flops * hw.eff_c)
    t_h = hbm_chip / (hw.hbm_bw * hw.eff_h)
    t_stage = stage_time(t_c, t_h, t_ici, hw.ici_serial, (L / pp) * hw.layer_s)
    bound = binding_roof(t_c, t_h, t_ici)
    # R9 latency of the step through all pp stages.
    latency = pp * t_stage + ici_hops * t_p2p + dcn_hops * t_dcn
    # R10 dynamic energy of the step, whole vPod; with static power it never exceeds TDP: every
    # chip is busy for t_stage per micro-batch, so dynamic energy <= (TDP - static) chips t_stage.
    e_dyn = flops * hw.j_flop + hbm_total * hw.j_hbm + ici_total * hw.j_ici + dcn_total * hw.j_dcn
    e_dyn = np.minimum(e_dyn, hw.max_dyn_w * chips * t_stage)
    # R11 memory per chip: stored weights + KV of all B*pp sequences in flight at mem_context + the
    # live activations of one layer.
    ctx = (P + T) if mem_context is None else np.asarray(mem_context, dtype=float)
    attn_store = L * m.attn_params_per_layer * bw
    w_store = by_layout(lambda: (m.weight_bytes - attn_store) / chips + attn_store / pp, m.weight_bytes / chips)
    kv_store = by_layout(lambda: seq_chip, B / kv_shard) * ctx * m.kv_bytes_per_token
    act_store = 2.0 * tokens * ACT_BYTES * (D + split_width / tp)
    mem = w_store + kv_store + act_store
    shp = t_stage.shape
    routed_bytes = m.routed_expert_params_total * bw if m.is_moe else 0.0
    return StepCost(
        flops=np.broadcast_to(flops, shp),
        hbm_bytes=np.broadcast_to(hbm_total, shp),
        ici_bytes=np.broadcast_to(ici_total, shp),
        t_compute_s=np.broadcast_to(t_c, shp),
        t_hbm_s=np.broadcast_to(t_h, shp),
        t_ici_s=np.broadcast_to(t_ici, shp),
        t_stage_s=t_stage,
        latency_s=np.broadcast_to(latency, shp),
        bound=bound,
        energy_dyn_j=np.broadcast_to(e_dyn, shp),
        mem_bytes_per_chip=np.broadcast_to(mem, shp),
        dcn_bytes=np.broadcast_to(dcn_total, shp),
        routed_j=np.broadcast_to(routed_bytes * hw.j_hbm, shp),
        routed_s=np.broadcast_to(routed_bytes / chips / (hw.hbm_bw * hw.eff_h), shp),
    )


def steady_state_energy_j(sc: StepCost, static_w_per_chip: float, chips: int) -> np.ndarray:
    """Energy per micro-batch of work in steady state (R13): dynamic energy plus static power over
    the time the vPod spends per micro-batch. With pp micro-batches in flight a new one completes
    every ``t_stage``, so static power is charged over ``t_stage``, not over one micro-batch's
    pipeline latency ``pp t_stage + hops``."""
    return sc.energy_dyn_j + static_w_per_chip * chips * sc.t_stage_s


# --------------------------------------------------------------------------------------------
# Slice geometry -> collective steps and bandwidth


@dataclass(frozen=True)
class TpGroup:
    """A TP group on a slice: its extent on each axis, whether each ring wraps, and the collective
    numbers the roofline uses (R7)."""

    extents: tuple[int, ...]  # group length on each axis it spans (largest axis first)
    wraps: tuple[bool, ...]  # that axis segment is a ring with wraparound
    coll_bw: float  # B/s per chip over the group's links, one or two directions per axis
    a2a_dist: float  # mean ring distance factor of an all-to-all
    ar_hops: float  # steps of one all-reduce (reduce-scatter + all-gather)
    a2a_hops: float  # diameter of the group: steps of one all-to-all

    @property
    def wrap(self) -> bool:
        return bool(self.wraps) and all(self.wraps)


def ring_hops(n: int, wrap: bool) -> int:
    """Steps of one all-gather (or reduce-scatter) on a ring of ``n`` chips: ``n - 1`` on a line
    (one direction's rate), ``floor(n / 2)`` on a ring with wraparound (both directions at once:
    scaling-book sharding.md, an AllGather "in N/2 hops")."""
    if n <= 1:
        return 0
    return n // 2 if wrap else n - 1


def tp_group(chip: ChipSpec, shape: tuple[int, ...], tp: int) -> TpGroup:
    """The TP group of ``tp`` chips on a slice of ``shape``.

    The group takes the slice's axes largest first, each as far as it needs: its extent on an axis
    is ``min(axis length, chips still to place)``. A segment shorter than its axis is a line, not a
    ring: it has no wraparound even when the full axis has (v5e 8x16 at tp 8; v5p 4x4x4 at tp 2).
    All-reduce = reduce-scatter then all-gather, axis after axis: ``2 sum_i hops_i`` steps
    (``hops = n - 1`` on a line, ``floor(n/2)`` on a wrapped ring, :func:`ring_hops`); the bytes
    move over all the group's axes at once, one link per direction, two directions on a wrapped
    axis. Switched GPU nodes: NCCL's ring of ``2 (tp - 1)`` steps over all NVLink links, one
    direction's worth; an all-to-all is one step through the switch.
    """
    link = chip.ici_link_bytes_per_s
    if chip.topology == "switched":
        steps = 2.0 * max(tp - 1, 0)
        return TpGroup((tp,), (True,), chip.ici_links * link, 1.0, steps, 1.0 if tp > 1 else 0.0)
    if tp <= 1:
        return TpGroup((), (), chip.ici_links * link, 1.0, 0.0, 0.0)
    axes_sorted = sorted(range(len(shape)), key=lambda i: (-shape[i], i))
    extents: list[int] = []
    wraps: list[bool] = []
    left = tp
    for i in axes_sorted:
        if left <= 1:
            break
        if shape[i] <= 1:
            continue
        ext = min(shape[i], left)
        extents.append(ext)
        wraps.append(ext == shape[i] and axis_wraps(chip, shape, i))
        left = -(-left // ext)
    bw = sum(link * (2.0 if w else 1.0) for w in wraps)
    hops = [ring_hops(n, w) for n, w in zip(extents, wraps, strict=True)]
    ring = max(extents)
    wrap_ring = wraps[extents.index(ring)]
    a2a = max(1.0, ring / (4.0 if wrap_ring else 2.0))
    return TpGroup(tuple(extents), tuple(wraps), bw, a2a, 2.0 * sum(hops), float(sum(hops)))


def slice_collective(chip: ChipSpec, shape: tuple[int, ...], tp: int) -> tuple[float, float, int, bool]:
    """``(coll_bw B/s, a2a distance factor, axes spanned, all wrapped)`` of :func:`tp_group`."""
    g = tp_group(chip, shape, tp)
    if chip.topology == "switched":
        return g.coll_bw, g.a2a_dist, 1, True
    return g.coll_bw, g.a2a_dist, len(g.extents), g.wrap


def vpod_nodes(chip: ChipSpec, chips: int) -> int:
    """ICI/NVLink domains a vPod of ``chips`` chips spans: several 8-GPU nodes for switched GPUs
    beyond one node; a TPU slice always lies in one pod."""
    if chip.topology == "switched":
        return max(1, -(-chips // chip.pod_chips))
    return 1


def axis_wraps(chip: ChipSpec, shape: tuple[int, ...], axis: int) -> bool:
    """Wraparound rule of hardware.md section 2.3: v5e/v6e only on axes of the full length 16;
    v4/v5p slices of whole cubes on every axis, sub-cube slices on none."""
    if chip.topology == "torus2d":
        return shape[axis] == chip.pod_dims[axis] or shape[axis] == max(chip.pod_dims)
    if chip.topology == "torus3d_cubes":
        return all(s % 4 == 0 for s in shape)
    return True


def slice_wraps(chip: ChipSpec, shape: tuple[int, ...]) -> bool:
    """True when every axis of the slice longer than 1 has wraparound links."""
    return all(axis_wraps(chip, shape, i) for i in range(len(shape)) if shape[i] > 1)


# --------------------------------------------------------------------------------------------
# The three rooflines of a chip (spec section 8)


def chip_rooflines(chip: ChipSpec, energy: EnergySpec, price_usd_per_chip_hour: float | None = None) -> dict:
    """Peaks and ridge points of the FLOP/s, FLOP/J and FLOP/$ rooflines of one chip.

    * time: attainable FLOP/s = min(peak, I x bw), ridge = peak / bw (FLOP per HBM byte);
    * energy: FLOP/J = 1 / (e_flop + e_hbm / I) (energies add), ridge = e_hbm / e_flop;
    * money: FLOP/$ = FLOP/s x 3600 / price, so its ridge is the time ridge.
    """
    price = chip.price_usd_per_chip_hour if price_usd_per_chip_hour is None else price_usd_per_chip_hour
    peak = chip.peak_flops * chip.eff_compute
    bw = chip.hbm_bytes_per_s * chip.eff_hbm
    return {
        "chip": chip.name,
        "energy_profile": energy.profile,
        "peak_flops": peak,
        "hbm_bytes_per_s": bw,
        "ridge_time_flop_per_byte": peak / bw,
        "peak_flop_per_j": 1.0 / energy.j_per_flop,
        "hbm_byte_per_j": 1.0 / energy.j_per_hbm_byte,
        "ridge_energy_flop_per_byte": energy.j_per_hbm_byte / energy.j_per_flop,
        "peak_flop_per_usd": peak * 3600.0 / price if price and price == price else float("nan"),
        "ridge_cost_flop_per_byte": peak / bw,
    }


def roofline_curves(roof: dict, intensity: np.ndarray) -> dict[str, np.ndarray]:
    """Attainable FLOP/s, FLOP/J and FLOP/$ at arithmetic intensities ``intensity`` (FLOP/B)."""
    i = np.asarray(intensity, dtype=float)
    flops = np.minimum(roof["peak_flops"], i * roof["hbm_bytes_per_s"])
    per_j = 1.0 / (1.0 / roof["peak_flop_per_j"] + 1.0 / (i * roof["hbm_byte_per_j"]))
    per_usd = flops * roof["peak_flop_per_usd"] / roof["peak_flops"]
    return {"flop_per_s": flops, "flop_per_j": per_j, "flop_per_usd": per_usd}
