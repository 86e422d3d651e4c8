"""The roofline coefficient engine (spec: ``formulations/roofline.md``).

One forward *step* of a vPod processes a micro-batch of ``B`` sequences, each adding ``T`` new tokens
to ``P`` tokens of context already cached (prefill: ``T`` = prompt, ``P`` = 0; decode: ``T`` = 1,
``P`` = context). Every quantity is a numpy array over candidate rows, so the whole design space is
evaluated without a Python loop per point. Equation numbers (R1, R2, ...) refer to the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuscale_opt.catalog import ChipSpec, EnergySpec, ModelSpec

ACT_BYTES = 2.0  # activations in bf16 (R5)
BOUNDS = np.array(["compute", "hbm", "ici"])


@dataclass(frozen=True)
class HwRows:
    """Per-row hardware numbers (arrays broadcastable to the candidate rows)."""

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
    hop_s: float = 1e-6


@dataclass(frozen=True)
class StepCost:
    """Roofline of one step (per micro-batch) for every row. Units in names."""

    flops: np.ndarray  # whole vPod
    hbm_bytes: np.ndarray  # whole vPod
    ici_bytes: np.ndarray  # whole vPod
    t_compute_s: np.ndarray  # per pipeline stage
    t_hbm_s: np.ndarray
    t_ici_s: np.ndarray
    t_stage_s: np.ndarray  # max of the three roofs (R8)
    latency_s: np.ndarray  # pp stages + pipeline hops (R9)
    bound: np.ndarray  # 0 compute, 1 hbm, 2 ici
    energy_dyn_j: np.ndarray  # whole vPod, dynamic (R10)
    mem_bytes_per_chip: np.ndarray  # weights + KV + activation workspace (R11)
    dcn_bytes: np.ndarray  # whole vPod: pipeline hand-offs between nodes (R9)


def hw_rows_for(
    chip: ChipSpec,
    energy: EnergySpec,
    coll_bw: np.ndarray | float,
    a2a_dist: np.ndarray | float,
    hbm_usable_fraction: float = 1.0,
    hop_s: float = 1e-6,
    eff: tuple[float, float, float] | None = None,
) -> HwRows:
    """Hardware rows of one chip generation (scalars broadcast against slice-dependent arrays)."""
    ec, eh, ei = eff if eff is not None else (chip.eff_compute, chip.eff_hbm, chip.eff_ici)
    f = np.float64
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
        hop_s=hop_s,
    )


def stack_hw(rows: list[HwRows], counts: list[int]) -> HwRows:
    """Concatenate per-chip HwRows, each repeated ``counts[i]`` times (broadcast scalars first)."""

    def cat(name: str) -> np.ndarray:
        return np.concatenate(
            [
                np.broadcast_to(np.asarray(getattr(r, name), dtype=float), (n,))
                for r, n in zip(rows, counts, strict=True)
            ]
        )

    fields = [f for f in HwRows.__dataclass_fields__ if f != "hop_s"]
    return HwRows(**{f: cat(f) for f in fields}, hop_s=rows[0].hop_s if rows else 1e-6)


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
) -> StepCost:
    """Roofline cost of one step for every row (equations R1-R11 of the spec).

    ``mem_context`` is the context length the KV cache must hold for the memory check (defaults to
    ``past_tokens + new_tokens``). ``nodes`` is the number of ICI/NVLink domains the vPod spans
    (switched GPU vPods of several 8-GPU nodes): tensor parallelism stays inside a node and
    ``nodes - 1`` of the pipeline hand-offs cross the data-centre network. Arrays broadcast.
    """
    tp = np.asarray(tp, dtype=float)
    pp = np.asarray(pp, dtype=float)
    ep = np.asarray(ep, dtype=float)
    B = np.asarray(batch, dtype=float)
    T = np.asarray(new_tokens, dtype=float)
    P = np.asarray(past_tokens, dtype=float)
    chips = tp * pp
    L = float(m.n_layers)
    D = float(m.d_model)
    bw = m.bytes_per_weight
    tokens = B * T
    imb = m.moe_imbalance if moe_imbalance is None else moe_imbalance

    # R1 FLOPs: linear layers (2 per MAC, LM head included) + causal attention pairs.
    lin_flops = tokens * m.linear_flops_per_token
    pairs = T * P + T * (T + 1.0) / 2.0
    attn_flops = B * L * m.attn_flops_per_pair_per_layer * pairs
    flops = lin_flops + attn_flops
    if m.is_moe:
        expert_flops = tokens * 2.0 * m.experts_per_token * m.expert_params * m.n_moe_layers
        # R2 busiest chip under expert parallelism: one expert carries imb x the mean load.
        e_per_chip = np.maximum(m.n_experts / ep, 1.0)
        chip_factor = np.where(ep > 1, np.minimum((imb + e_per_chip - 1.0) / e_per_chip, imb), 1.0)
        flops_chip = (flops - expert_flops) / chips + expert_flops / chips * chip_factor
        # R3 routed experts touched by the step (balls in bins), per MoE layer.
        k_over_e = m.experts_per_token / m.n_experts
        touched = 1.0 - np.power(1.0 - k_over_e, tokens)
    else:
        flops_chip = flops / chips
        touched = np.zeros_like(tokens)

    # R4 weights read once per step (each chip its shard).
    w_bytes = (m.always_loaded_params + touched * m.routed_expert_params_total) * bw
    # R5 KV cache: read P + T, write T tokens per sequence; tensor parallelism splits it at most
    # kv_shard_max ways (KV heads; MLA's latent is replicated).
    kv_shard = np.minimum(tp, float(m.kv_shard_max))
    kv_total = B * (P + 2.0 * T) * m.kv_bytes_per_token
    kv_replication = tp / kv_shard
    # R6 activations: input + output of every matmul of a layer; D-wide tensors replicated on the
    # TP group, the rest split.
    H, d = float(m.n_heads), float(m.head_dim or m.v_head_dim)
    kv_width = float(m.kv_lora_rank + m.qk_rope_head_dim) if m.is_mla else 2.0 * m.n_kv_heads * d
    split_width = 2.0 * H * d + kv_width + 3.0 * m.ffn_active_width
    act_chip = tokens * ACT_BYTES * (L / pp) * (4.0 * D + split_width / tp)
    hbm_chip = w_bytes / chips + kv_total / (pp * kv_shard) + act_chip
    hbm_total = w_bytes + kv_total * kv_replication + act_chip * chips

    # R7 ICI: two all-reduces of B*T*D activations per layer under TP (one when expert parallelism
    # replaces the MLP's with an all-to-all dispatch + combine).
    v_ar = tokens * D * ACT_BYTES
    n_moe = float(m.n_moe_layers)
    use_a2a = (ep > 1) & (m.is_moe)
    n_ar = np.where(use_a2a, 2.0 * L - n_moe, 2.0 * L) / pp
    ar_bytes_chip = 2.0 * (tp - 1.0) / np.maximum(tp, 1.0) * v_ar
    with np.errstate(divide="ignore", invalid="ignore"):
        t_ar = np.where(tp > 1, np.maximum(hw.hop_s * tp, ar_bytes_chip / (hw.coll_bw * hw.eff_i)), 0.0)
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
            use_a2a, np.maximum(hw.hop_s * ep / 2.0, a2a_bytes_chip * hw.a2a_dist / (hw.coll_bw * hw.eff_i)), 0.0
        )
    ici_chip = n_ar * ar_bytes_chip + n_a2a * a2a_bytes_chip
    t_ici = n_ar * t_ar + n_a2a * t_a2a
    # Pipeline hand-offs between stages: B*T*D activations, each of the stage's tp chips sending its
    # 1/tp share over one link to its peer; the hand-offs between nodes go over the DCN (one NIC
    # per chip).
    p2p_bytes = v_ar
    dcn_hops = np.minimum(np.maximum(np.asarray(nodes, dtype=float) - 1.0, 0.0), np.maximum(pp - 1.0, 0.0))
    ici_hops = np.maximum(pp - 1.0 - dcn_hops, 0.0)
    t_p2p = np.where(pp > 1, np.maximum(hw.hop_s, p2p_bytes / (hw.link_bw * tp * hw.eff_i)), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_dcn = np.where(dcn_hops > 0, np.maximum(hw.hop_s, p2p_bytes / (np.asarray(hw.dcn_bw) * tp)), 0.0)
    ici_total = ici_chip * chips + ici_hops * p2p_bytes
    dcn_total = dcn_hops * p2p_bytes

    # R8 roofs per stage and the binding one.
    t_c = flops_chip / (hw.peak_flops * hw.eff_c)
    t_h = hbm_chip / (hw.hbm_bw * hw.eff_h)
    roofs = np.stack(np.broadcast_arrays(t_c, t_h, t_ici))
    t_stage = roofs.max(axis=0)
    bound = roofs.argmax(axis=0)
    # R9 latency of the step through all pp stages.
    latency = pp * t_stage + ici_hops * t_p2p + dcn_hops * t_dcn
    # R10 dynamic energy of the step, whole vPod.
    e_dyn = flops * hw.j_flop + hbm_total * hw.j_hbm + ici_total * hw.j_ici + dcn_total * hw.j_dcn
    # R11 memory per chip: stored weights + KV of all B*pp sequences in flight at mem_context + the
    # live activations of one layer.
    ctx = (P + T) if mem_context is None else np.asarray(mem_context, dtype=float)
    w_store = m.weight_bytes / chips
    kv_store = B * ctx * m.kv_bytes_per_token / kv_shard
    act_store = 2.0 * tokens * ACT_BYTES * (D + split_width / tp)
    mem = w_store + kv_store + act_store
    return StepCost(
        flops=np.broadcast_to(flops, t_stage.shape),
        hbm_bytes=np.broadcast_to(hbm_total, t_stage.shape),
        ici_bytes=np.broadcast_to(ici_total, t_stage.shape),
        t_compute_s=np.broadcast_to(t_c, t_stage.shape),
        t_hbm_s=np.broadcast_to(t_h, t_stage.shape),
        t_ici_s=np.broadcast_to(t_ici, t_stage.shape),
        t_stage_s=t_stage,
        latency_s=np.broadcast_to(latency, t_stage.shape),
        bound=bound,
        energy_dyn_j=np.broadcast_to(e_dyn, t_stage.shape),
        mem_bytes_per_chip=np.broadcast_to(mem, t_stage.shape),
        dcn_bytes=np.broadcast_to(dcn_total, t_stage.shape),
    )


# --------------------------------------------------------------------------------------------
# Slice geometry -> collective bandwidth


def slice_collective(chip: ChipSpec, shape: tuple[int, ...], tp: int) -> tuple[float, float, int, bool]:
    """Per-chip bandwidth a TP group of ``tp`` chips gets on a slice of ``shape``.

    The TP group takes the slice's axes largest first until it holds ``tp`` chips. Each axis it uses
    contributes one link per direction; an axis with wraparound runs a bidirectional ring (2
    directions), an axis without it the one-way rate (hardware.md section 2.3: "a slice without
    wraparound gets the one-way rate"). Returns ``(coll_bw B/s, a2a distance factor, axes, wrap)``.
    Switched GPU nodes: all NVLink links, one direction's worth, distance 1.
    """
    link = chip.ici_link_bytes_per_s
    if chip.topology == "switched":
        return chip.ici_links * link, 1.0, 1, True
    if tp <= 1:
        return chip.ici_links * link, 1.0, 0, False
    axes_sorted = sorted(range(len(shape)), key=lambda i: (-shape[i], i))
    used, prod = [], 1
    for i in axes_sorted:
        if prod >= tp:
            break
        if shape[i] > 1:
            used.append(i)
            prod *= shape[i]
    wrap = all(axis_wraps(chip, shape, i) for i in used)
    dirs = 2.0 if wrap else 1.0
    ring = max(shape[i] for i in used)
    a2a = max(1.0, ring / (4.0 if wrap else 2.0))
    return link * len(used) * dirs, a2a, len(used), wrap


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
