"""Step-time tables of a vPod type, computed once with numpy and read in O(1) by the event loop.

Decode: exact affine form of the roofline in the context
--------------------------------------------------------
For a decode step (``T = 1``) of ``b`` sequences whose past contexts sum to ``b P`` (``P`` the mean),
every term of the roofline (``formulations/roofline.md``, R1-R10) is affine in ``P`` at fixed
``b``: attention FLOPs are ``b L a_pair (P + 1)`` (R1), KV bytes ``b (P + 2) kv_tok`` (R5), while the
weights (R4), activations (R6) and ICI traffic (R7) do not depend on ``P``. So per batch size

    t_compute(P) = c0 + c1 P,   t_hbm(P) = h0 + h1 P,   t_ici = i0,
    t_stage(P)   = max(t_compute, t_hbm, t_ici) + (L/pp) t_layer       (R8)
    step(P)      = pp t_stage(P) + (pp - 1) t_p2p                     (R9)
    E_dyn(P)     = e0 + e1 P                                           (R10)

and the coefficients are read off two evaluations of ``roofline.step_cost`` (``P = 0`` and
``P = 2^16``). The mean context of a batch is therefore *exact*, not an approximation: the roofline
of a batch with mixed contexts equals the roofline at their mean. No context grid, no interpolation.

With ``pp > 1`` a vPod holds ``batch x pp`` sequences in ``pp`` micro-batches; ``n`` sequences in
flight form ``q = ceil(n / b)`` micro-batches of ``b = ceil(n / pp)``; one *round* (every sequence
advances one token) takes the latency of one micro-batch through the pipeline (R9) and costs
``q`` micro-batch steps of energy.

Prefill: one prompt of ``S`` tokens at batch 1 (``P = 0``), tabulated densely for
``S = 0 .. max_input``: the decode stall it causes (``t_stage``, the pipeline occupancy the
planner's busy time uses, section 4 of the spec; equal to the latency when ``pp = 1``), its latency
(first token) and its dynamic energy.

Batched prefill (prefill-phase vPods of disaggregated serving): exact for ragged batches
----------------------------------------------------------------------------------------
A prefill step of ``n`` prompts of lengths ``S_1 .. S_n`` (``P = 0``) costs, term by term, what one
prompt of the total length ``N = sum S_i`` costs, except the causal attention pairs: linear FLOPs,
weights touched (R3, R4), KV written and read (R5, ``B 2 T = 2 N`` tokens), activations (R6), ICI
(R7) and the pipeline hand-offs (R9) all depend on the tokens of the step only, while attention
(R1) counts ``sum S_i (S_i + 1) / 2`` pairs instead of ``N (N + 1) / 2``. So with the single-prompt
roofs tabulated for ``N = 0 .. batch x max_input``

    t_compute = t_compute(N) + a_c (sum S_i (S_i+1)/2 - N (N+1)/2),    a_c = L a_pair / (tp pp peak eff_c)
    E_dyn     = E_dyn(N)     + a_e (same difference),                  a_e = L a_pair e_flop

and ``t_stage``, the latency and the energy follow as R8-R10. For ``n`` prompts of one length this
is ``step_cost(B = n, T = S)`` exactly (tested), the planner's prefill configuration.

DCN: ``dcn_bytes_per_s = chips x ChipSpec.dcn_bytes_per_s`` (the vPod's aggregate, as the
allocation model's ``BW_k``) and ``dcn_j_per_byte`` (the instance's ``energy.dcn_pj_per_byte``,
else the chip's ICI energy per byte: the ``dcn_energy_j_per_byte`` column of
``Coefficients.chips``) price the KV hand-off of disaggregated serving.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from neuscale_opt.candidates import chip_context, effective_model
from neuscale_opt.catalog import get_chip
from neuscale_opt.energy import fixed_step_energy_j, weight_step_energy_j
from neuscale_opt.instance import Instance
from neuscale_opt.replay.plan import VpodType
from neuscale_opt.roofline import for_slice, routed_miss_per_seq, stage_time, step_cost, vpod_nodes

P_PROBE = 65536.0  # second context at which the affine coefficients are read (tokens)


@dataclass(frozen=True)
class StepTable:
    """Per vPod type: decode coefficients indexed by sequences in flight ``n`` (index 0 unused) and
    prefill costs indexed by prompt length. Plain lists: the event loop indexes them per event."""

    vtype: VpodType
    c0: list[float]  # s, compute roof at P = 0 (per stage)
    c1: list[float]  # s per token of mean context
    h0: list[float]  # s, HBM roof at P = 0 (per stage)
    h1: list[float]
    ici: list[float]  # s, ICI roof (independent of P)
    p2p: list[float]  # s, (pp - 1) pipeline hand-offs of a round
    e0: list[float]  # J, dynamic energy of a round at P = 0 (whole vPod)
    e1: list[float]  # J per token of mean context
    pre_stall: list[float]  # s, decode stall of one prefill of S tokens
    pre_lat: list[float]  # s, latency of one prefill of S tokens (first token)
    pre_energy: list[float]  # J, dynamic energy of one prefill of S tokens
    static_w: float  # W, whole vPod
    price_usd_per_hour: float  # whole vPod
    embodied_kg_per_hour: float  # whole vPod
    kv_bytes_per_token: float = 0.0  # B of KV cache per prompt token (handed from prefill to decode)
    dcn_bytes_per_s: float = math.inf  # B/s, the vPod's aggregate DCN bandwidth
    dcn_j_per_byte: float = 0.0  # J per DCN byte (charged on each side of a KV hand-off)
    # batched prefill (prefill-phase types only), indexed by the batch's total prompt tokens N
    bp_c: tuple[float, ...] | list[float] = ()  # s, compute roof of one prompt of N tokens (per stage)
    bp_h: tuple[float, ...] | list[float] = ()  # s, HBM roof
    bp_i: tuple[float, ...] | list[float] = ()  # s, ICI roof
    bp_p2p: tuple[float, ...] | list[float] = ()  # s, pipeline hand-offs (latency - pp t_stage)
    bp_e: tuple[float, ...] | list[float] = ()  # J, dynamic energy
    attn_c: float = 0.0  # s of compute roof per attention pair (a_c)
    attn_e: float = 0.0  # J per attention pair (a_e)
    stage_overhead_s: float = 0.0  # s, fixed per-layer overhead of a stage's L/pp layers (R8)
    ici_serial: float = 0.0  # share of the collective time not hidden under compute / HBM (R8, K8)
    # weight streaming (the step energy that does not scale with the batch, energy.E4): per decode
    # round of n sequences (q micro-batches, each streams the weights), and per batched prefill step
    fixed_j: list[float] = field(default_factory=list)
    pre_fixed_j: float = 0.0

    def decode_step(self, n: int, mean_ctx: float) -> tuple[float, float]:
        """(seconds, dynamic joules) of one decode round of ``n`` sequences at mean past context."""
        pp = self.vtype.pp
        c, h = self.c0[n] + self.c1[n] * mean_ctx, self.h0[n] + self.h1[n] * mean_ctx
        t = stage_time(c, h, self.ici[n], self.ici_serial, self.stage_overhead_s)
        return pp * t + self.p2p[n], self.e0[n] + self.e1[n] * mean_ctx

    def prefill_batch(self, lengths: list[int]) -> tuple[float, float, float]:
        """(pipeline occupancy ``t_stage`` s, latency s, dynamic J) of one prefill step of the prompts
        ``lengths`` (a ragged batch; prefill-phase types only, see the module docstring)."""
        n_tok = 0
        pairs = 0.0
        for s in lengths:
            n_tok += s
            pairs += s * (s + 1) * 0.5
        extra = pairs - n_tok * (n_tok + 1) * 0.5
        c = self.bp_c[n_tok] + self.attn_c * extra
        h = self.bp_h[n_tok]
        i = self.bp_i[n_tok]
        st = stage_time(c, h, i, self.ici_serial, self.stage_overhead_s)
        return st, self.vtype.pp * st + self.bp_p2p[n_tok], self.bp_e[n_tok] + self.attn_e * extra


def build_table(inst: Instance, vt: VpodType, max_input: int) -> StepTable:
    """The :class:`StepTable` of ``vt`` under ``inst`` (model, energy profile, efficiencies, prices)."""
    model = effective_model(inst)
    ctx = chip_context(inst, vt.chip)
    hw = for_slice(ctx.hw, get_chip(vt.chip), vt.shape, vt.tp)
    tp, pp, ep = float(vt.tp), float(vt.pp), float(vt.ep)
    dpa = bool(vt.attn_dp)

    n = np.arange(1, vt.slots + 1, dtype=np.float64)
    b = np.ceil(n / pp)
    q = np.ceil(n / b)
    nodes = vpod_nodes(get_chip(vt.chip), vt.tp * vt.pp)
    lo = step_cost(model, hw, tp, pp, ep, b, 1.0, 0.0, nodes=nodes, attn_dp=dpa)
    hi = step_cost(model, hw, tp, pp, ep, b, 1.0, P_PROBE, nodes=nodes, attn_dp=dpa)

    def pad(a: np.ndarray) -> list[float]:
        return [math.nan, *np.broadcast_to(np.asarray(a, dtype=np.float64), n.shape).tolist()]

    p2p = lo.latency_s - pp * lo.t_stage_s
    # E4 between batch 1 and the type's batch (at least 2), as the planner's coefficients (at P = 0:
    # the intercept does not depend on the context), and the routed experts each micro-batch of b
    # sequences touches (MoE)
    b_probe = float(max(vt.batch, 2))
    d1 = step_cost(model, hw, tp, pp, ep, 1.0, 1.0, 0.0, nodes=nodes, attn_dp=dpa)
    d2 = step_cost(model, hw, tp, pp, ep, b_probe, 1.0, 0.0, nodes=nodes, attn_dp=dpa)
    routed, miss = float(d1.routed_j), float(routed_miss_per_seq(model, 1.0))
    w_fixed = float(fixed_step_energy_j(d1.energy_dyn_j, d2.energy_dyn_j, 1.0, b_probe, routed, miss))
    w_round = q * weight_step_energy_j(w_fixed, routed, miss, b)
    s = np.arange(0, max(int(max_input), 0) + 1, dtype=np.float64)
    pre = step_cost(model, hw, tp, pp, ep, 1.0, s, 0.0, nodes=nodes, attn_dp=dpa)
    chips = float(vt.chips)
    dcn_pj = inst.energy.dcn_pj_per_byte
    batched: dict = {}
    if vt.phase == "prefill":
        tok = np.arange(0, vt.batch * max(int(max_input), 0) + 1, dtype=np.float64)
        one = step_cost(model, hw, tp, pp, ep, 1.0, tok, 0.0, nodes=nodes, attn_dp=dpa)
        a_pair = float(model.n_layers) * float(model.attn_flops_per_pair_per_layer)

        def full(a: np.ndarray) -> list[float]:
            return np.broadcast_to(np.asarray(a, dtype=np.float64), tok.shape).tolist()

        batched = {
            "bp_c": full(one.t_compute_s),
            "bp_h": full(one.t_hbm_s),
            "bp_i": full(one.t_ici_s),
            "bp_p2p": full(one.latency_s - pp * one.t_stage_s),
            "bp_e": full(one.energy_dyn_j),
            "attn_c": a_pair / (chips * float(hw.peak_flops) * float(hw.eff_c)),
            "attn_e": a_pair * float(hw.j_flop),
        }
    return StepTable(
        vtype=vt,
        c0=pad(lo.t_compute_s),
        c1=pad((hi.t_compute_s - lo.t_compute_s) / P_PROBE),
        h0=pad(lo.t_hbm_s),
        h1=pad((hi.t_hbm_s - lo.t_hbm_s) / P_PROBE),
        ici=pad(lo.t_ici_s),
        p2p=pad(p2p),
        e0=pad(q * lo.energy_dyn_j),
        e1=pad(q * (hi.energy_dyn_j - lo.energy_dyn_j) / P_PROBE),
        pre_stall=np.broadcast_to(pre.t_stage_s, s.shape).tolist(),
        pre_lat=np.broadcast_to(pre.latency_s, s.shape).tolist(),
        pre_energy=np.broadcast_to(pre.energy_dyn_j, s.shape).tolist(),
        fixed_j=pad(w_round),
        pre_fixed_j=_prefill_fixed_j(model, hw, tp, pp, ep, nodes, vt, max_input),
        static_w=chips * float(ctx.hw.static_w),
        price_usd_per_hour=chips * ctx.price_usd_per_chip_hour,
        embodied_kg_per_hour=chips * ctx.embodied_kg_per_chip_hour,
        kv_bytes_per_token=float(model.kv_bytes_per_token),
        dcn_bytes_per_s=chips * float(get_chip(vt.chip).dcn_bytes_per_s),
        dcn_j_per_byte=(dcn_pj * 1e-12) if dcn_pj is not None else float(ctx.hw.j_ici),
        stage_overhead_s=float(model.n_layers) / pp * float(hw.layer_s),
        ici_serial=float(hw.ici_serial),
        **batched,
    )


def _prefill_fixed_j(model, hw, tp: float, pp: float, ep: float, nodes: int, vt: VpodType, max_input: int) -> float:
    """Weight streaming of one batched prefill step (E4 between batches 1 and max(batch, 2) at the
    trace's longest prompt; the intercept does not depend on the prompt for dense models), 0 for
    colocated and decode types: their prefill is batch 1 and charged per request."""
    if vt.phase != "prefill":
        return 0.0
    b = float(max(vt.batch, 2))
    s_in = float(max(max_input, 1))
    one = step_cost(model, hw, tp, pp, ep, 1.0, s_in, 0.0, nodes=nodes, attn_dp=vt.attn_dp)
    eb = step_cost(model, hw, tp, pp, ep, b, s_in, 0.0, nodes=nodes, attn_dp=vt.attn_dp).energy_dyn_j
    routed, miss = float(one.routed_j), float(routed_miss_per_seq(model, s_in))
    fixed = fixed_step_energy_j(one.energy_dyn_j, eb, 1.0, b, routed, miss)
    return float(weight_step_energy_j(fixed, routed, miss, b))
