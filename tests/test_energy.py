"""The load-dependent energy model (``neuscale_opt.energy``, formulation E1-E8) against hand-computed
values: weight streaming of a Llama-3-70B decode step on a v6e 2x4 slice, Little's law occupancy,
the busy batch, and the per-request energy at batch 1 and at full batch."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from neuscale_opt.candidates import build_coefficients, chip_context, effective_model
from neuscale_opt.catalog import get_chip, neusim_energy
from neuscale_opt.energy import (
    ENERGY_COLUMNS,
    busy_batch,
    busy_energy_rate_w,
    fixed_step_energy_j,
    mean_decode_batch,
    request_energy_split_j,
    static_energy_j,
    weight_step_energy_j,
)
from neuscale_opt.instance import parse_instance
from neuscale_opt.roofline import for_slice, slice_collective, step_cost

# Llama-3-70B (models.csv): 80 layers, d_model 8192, 64 query / 8 KV heads of 128, FFN 28672,
# vocabulary 128256; a step streams per layer Q, O (8192 x 8192) + K, V (8192 x 1024) + SwiGLU
# (3 x 8192 x 28672) + two norms, then the LM head and the final norm (the input embedding is
# looked up, not streamed); bf16 weights; v6e: 13.52 HBM GB/J (NeuScale profile), read all-in
# (catalog.neuscale_energy): 1638 GB/s / 13.52 GB/J = 121.15 W at full HBM bandwidth, of which the
# dynamic share is what is left above NeuSim's static power.
PER_LAYER = 2 * 8192 * 64 * 128 + 2 * 8192 * 8 * 128 + 3 * 8192 * 28672 + 2 * 8192
STREAMED_BYTES = (80 * PER_LAYER + 128256 * 8192 + 8192) * 2.0
V6E_STATIC_W = neusim_energy(get_chip("tpu-v6e")).static_w  # NeuSim's components (catalog input)
V6E_J_PER_HBM_BYTE = (1638e9 / 13.52e9 - V6E_STATIC_W) / 1638e9
WEIGHTS_J = STREAMED_BYTES * V6E_J_PER_HBM_BYTE  # J of dynamic HBM energy per step


def _v6e_2x4():
    inst = parse_instance(
        {
            "name": "e",
            "model": {"name": "Llama-3-70B"},
            "fleet": [{"chip": "tpu-v6e", "chips": 8}],
            "workload": {
                "classes": [{"name": "a", "input_tokens": 1000, "output_tokens": 200}],
                "demand": [{"epoch": 0, "bucket": "a", "rate_rps": 1.0}],
            },
            "slo": {"mode": "absolute", "ttft_s": 100.0, "tpot_s": 10.0},
            "search": {"max_chips_per_vpod": 8, "batch_sizes": [1, 256]},
        }
    )
    model = effective_model(inst)
    bw, a2a, _, _ = slice_collective(get_chip("tpu-v6e"), (2, 4), 8)
    hw = replace(chip_context(inst, "tpu-v6e").hw, coll_bw=np.float64(bw), a2a_dist=np.float64(a2a))
    return inst, model, hw


def test_static_energy_is_power_times_time():
    assert static_energy_j(800.0, 300.0) == pytest.approx(240_000.0)


def test_weight_streaming_of_a_decode_step_v6e_2x4_llama70b():
    _, model, hw = _v6e_2x4()
    e1 = float(step_cost(model, hw, 8.0, 1.0, 1.0, 1.0, 1.0, 1100.0).energy_dyn_j)
    e256 = float(step_cost(model, hw, 8.0, 1.0, 1.0, 256.0, 1.0, 1100.0).energy_dyn_j)
    # a step at batch 1 is nearly all weights; at 256 the tokens' FLOPs and KV reads add to it
    assert 0.0 < V6E_STATIC_W < 1638e9 / 13.52e9
    assert WEIGHTS_J < e1 < 1.05 * WEIGHTS_J and e256 > 1.5 * e1
    # the intercept of the step energy in the batch is exactly the weights streamed (dense model)
    assert fixed_step_energy_j(e1, e256, 1, 256) == pytest.approx(WEIGHTS_J, rel=1e-9)
    # equal batches: the whole step; never negative nor above the small-batch step
    assert fixed_step_energy_j(e1, e1, 1, 1) == pytest.approx(e1)
    assert fixed_step_energy_j(1.0, 5.0, 1, 2) == 0.0


def test_littles_law_occupancy_by_hand():
    # a = 2 x 100 / (1 - 2 x 0.01) = 204.0816; s = (0.02 - 0.01) / 10 = 0.001
    # n = a (tau_1 - s) / (1 - a s) = 204.0816 x 0.009 / 0.795918 = 2.307692
    n = float(mean_decode_batch(2.0, 100.0, 0.01, 0.01, 0.02, 11.0))
    assert n == pytest.approx(2.307692, rel=1e-6)
    a = 2.0 * 100.0 / (1.0 - 0.02)
    assert n == pytest.approx(a * (0.01 + (n - 1.0) * 0.001), rel=1e-12)  # the fixed point n = a tau(n)
    assert float(mean_decode_batch(0.0, 100.0, 0.01, 0.01, 0.02, 11.0)) == 0.0
    assert float(mean_decode_batch(1000.0, 100.0, 0.0, 0.01, 0.02, 11.0)) == 11.0  # saturated
    assert float(mean_decode_batch(200.0, 100.0, 0.01, 0.01, 0.02, 11.0)) == 11.0  # stalls fill it


def test_busy_batch_by_hand():
    assert float(busy_batch(1.0, 64)) == pytest.approx(1.0 / (1.0 - math.exp(-1.0)))  # 1.58198
    assert float(busy_batch(0.0, 64)) == 1.0
    assert float(busy_batch(1e-9, 64)) == pytest.approx(1.0)
    assert float(busy_batch(10.0, 64)) == pytest.approx(10.0 / (1.0 - math.exp(-10.0)))
    assert float(busy_batch(100.0, 64)) == 64.0


def test_request_energy_at_batch_1_and_256_v6e_2x4():
    inst, model, hw = _v6e_2x4()
    cfg = build_coefficients(inst).configs
    row = cfg[(cfg["shape"] == "2x4") & (cfg["tp"] == 8) & (cfg["batch"] == 256) & (cfg["phase"] == "colocated")]
    assert len(row) == 1
    r = row.iloc[0]
    assert r["step_fixed_energy_j"] == pytest.approx(WEIGHTS_J, rel=1e-9)
    # hand: prefill of 1000 tokens at batch 1 + 200 decode steps at context 1100
    pre = step_cost(model, hw, 8.0, 1.0, 1.0, 1.0, 1000.0, 0.0)
    d256 = float(step_cost(model, hw, 8.0, 1.0, 1.0, 256.0, 1.0, 1100.0).energy_dyn_j)
    per_seq_step = (d256 - WEIGHTS_J) / 256.0
    marginal = float(pre.energy_dyn_j) + 200.0 * per_seq_step
    assert r["marginal_energy_j_per_req"] == pytest.approx(marginal, rel=1e-9)
    # nearly idle vPod: every step carries one sequence -> 200 x weights per request
    busy, marg = request_energy_split_j(row, np.array([1e-9]))
    assert busy[0] == pytest.approx(200.0 * WEIGHTS_J, rel=1e-6)
    assert marg[0] == pytest.approx(marginal, rel=1e-12)
    # saturated vPod: 256 sequences share a step -> the planner's full-batch energy
    busy, marg = request_energy_split_j(row, np.array([1e6]))
    assert busy[0] == pytest.approx(200.0 * WEIGHTS_J / 256.0, rel=1e-9)
    assert busy[0] + marg[0] == pytest.approx(r["dyn_energy_j_per_req"], rel=1e-9)
    # static + busy + marginal of one vPod held 300 s at 1 req/s, by hand through E5-E6
    lam = 1.0
    t1, tb, stall = float(r["step_s_b1"]), float(r["step_s"]), float(r["stall_s_per_req"])
    s = (tb - t1) / 255.0
    a = lam * 200.0 / (1.0 - lam * stall)
    n = a * (t1 - s) / (1.0 - a * s)
    nb = n / (1.0 - math.exp(-n))
    w = float(busy_energy_rate_w(row, [lam], [1.0], ["g"])[0])
    assert w == pytest.approx(lam * 200.0 * WEIGHTS_J / nb, rel=1e-9)
    total = static_energy_j(r["static_power_w"], 300.0) + (w + lam * marginal) * 300.0
    static_w_per_chip = float(chip_context(inst, "tpu-v6e").hw.static_w)  # catalog input
    assert total == pytest.approx(8 * static_w_per_chip * 300.0 + 300.0 * (200.0 * WEIGHTS_J / nb + marginal), rel=1e-9)


def test_groups_share_their_steps():
    cols = {c: [1.0, 1.0] for c in ENERGY_COLUMNS}
    cols.update(step_fixed_energy_j=[10.0, 10.0], steps_per_req=[100.0, 100.0], stall_s_per_req=[0.0, 0.0])
    cols.update(step_s_b1=[0.01, 0.01], step_s=[0.01, 0.01], batch=[64.0, 64.0], marginal_energy_j_per_req=[0, 0])
    cfg = pd.DataFrame(cols)
    # each class alone: n = 1 x 100 x 0.01 = 1; together in one group n = 2
    apart = busy_energy_rate_w(cfg, [1.0, 1.0], [1.0, 1.0], ["g1", "g2"])
    shared = busy_energy_rate_w(cfg, [1.0, 1.0], [1.0, 1.0], ["g", "g"])
    assert apart[0] == pytest.approx(100.0 * 10.0 / busy_batch(1.0, 64))
    assert shared[0] == pytest.approx(100.0 * 10.0 / busy_batch(2.0, 64))
    assert shared.sum() < apart.sum()


def test_tables_without_energy_columns_keep_their_dynamic_energy():
    cfg = pd.DataFrame({"dyn_energy_j_per_req": [3.0], "bucket": ["a"]})
    busy, marg = request_energy_split_j(cfg, [5.0])
    assert busy[0] == 0.0 and marg[0] == 3.0
    assert busy_energy_rate_w(cfg, [5.0], [1.0], ["g"])[0] == 0.0


def _deepseek_v5p():
    inst = parse_instance(
        {
            "name": "moe",
            "model": {"name": "DeepSeek-V3-671B"},
            "fleet": [{"chip": "tpu-v5p", "chips": 32}],
            "workload": {
                "classes": [{"name": "a", "input_tokens": 1000, "output_tokens": 200}],
                "demand": [{"epoch": 0, "bucket": "a", "rate_rps": 1.0}],
            },
            "slo": {"mode": "absolute", "ttft_s": 100.0, "tpot_s": 10.0},
            "search": {"max_chips_per_vpod": 32, "batch_sizes": [1, 64]},
        }
    )
    cfg = build_coefficients(inst).configs
    rows = cfg[(cfg["batch"] == 64) & (cfg["phase"] == "colocated")]
    assert len(rows) > 0
    return inst, effective_model(inst), rows


def test_moe_weight_streaming_follows_the_touched_experts():
    inst, model, rows = _deepseek_v5p()
    r = rows.iloc[0]
    hw = chip_context(inst, "tpu-v5p").hw
    # DeepSeek-V3 (models.csv): 58 MoE layers x 256 routed experts x 3 x 7168 x 2048 weights, fp8;
    # a token picks 8 of the 256 experts of a layer
    routed_bytes = 58 * 256 * 3 * 7168 * 2048 * 1.0
    assert r["step_routed_energy_j"] == pytest.approx(routed_bytes * float(hw.j_hbm), rel=1e-12)
    assert r["routed_miss_per_seq"] == pytest.approx(1.0 - 8.0 / 256.0, rel=1e-12)
    # one sequence per step touches 8/256 of the routed experts, 64 sequences 1 - (248/256)^64
    e_w1 = float(weight_step_energy_j(r["step_fixed_energy_j"], r["step_routed_energy_j"], r["routed_miss_per_seq"], 1))
    e_w64 = float(
        weight_step_energy_j(r["step_fixed_energy_j"], r["step_routed_energy_j"], r["routed_miss_per_seq"], 64)
    )
    routed = float(r["step_routed_energy_j"])
    assert e_w1 - r["step_fixed_energy_j"] == pytest.approx(routed * 8.0 / 256.0, rel=1e-12)
    assert e_w64 - r["step_fixed_energy_j"] == pytest.approx(routed * (1.0 - (248.0 / 256.0) ** 64), rel=1e-12)
    # the fixed part is the dense weights only: well below the touched experts of a full batch
    assert 0.0 < r["step_fixed_energy_j"] < e_w64 - r["step_fixed_energy_j"]
    # nearly idle vPod: every step carries one sequence -> 200 steps x (dense + 8/256 of the experts)
    busy, _ = request_energy_split_j(rows.iloc[[0]], np.array([1e-9]))
    assert busy[0] == pytest.approx(200.0 * e_w1, rel=1e-6)
    # saturated: 64 sequences share a step, and busy + marginal is the full-batch energy per request
    busy, marg = request_energy_split_j(rows.iloc[[0]], np.array([1e6]))
    assert busy[0] == pytest.approx(200.0 * e_w64 / 64.0, rel=1e-9)
    assert busy[0] + marg[0] == pytest.approx(r["dyn_energy_j_per_req"], rel=1e-9)


def test_moe_step_energy_is_exact_at_every_batch():
    # E4 + the per-sequence slope reproduce the roofline's decode step (R10) at every batch, not only
    # at the chord's two ends (the dense remainder is linear in the batch, the touched experts not)
    inst, model, rows = _deepseek_v5p()
    r = rows.iloc[0]
    hw = for_slice(
        chip_context(inst, "tpu-v5p").hw,
        get_chip("tpu-v5p"),
        tuple(int(x) for x in str(r["shape"]).split("x")),
        int(r["tp"]),
    )
    args = (float(r["tp"]), float(r["pp"]), float(r["ep"]))
    ctx = 1000.0 + 100.0
    e = {b: float(step_cost(model, hw, *args, float(b), 1.0, ctx).energy_dyn_j) for b in (1, 2, 8, 32, 64)}
    fixed = fixed_step_energy_j(e[1], e[64], 1, 64, r["step_routed_energy_j"], r["routed_miss_per_seq"])
    w = {b: float(weight_step_energy_j(fixed, r["step_routed_energy_j"], r["routed_miss_per_seq"], b)) for b in e}
    slope = (e[64] - w[64]) / 64.0
    for b in (2, 8, 32):
        assert w[b] + b * slope == pytest.approx(e[b], rel=1e-9)
    # the chord through batch 1 and 64 alone (dense rule) misses the middle by far
    chord = fixed_step_energy_j(e[1], e[64], 1, 64)
    assert chord + 8 * (e[64] - chord) / 64.0 < 0.8 * e[8]


def test_moe_littles_law_with_touched_experts_by_hand():
    # tau(n) = tau_1 + (n - 1) s + tr (u(n) - u(1)), u(n) = 1 - q^n; tau_1 = 0.01, tau_B = 0.02 at
    # B = 11, tr = 0.008, q = 0.9: s = (0.01 - 0.008 (u(11) - u(1))) / 10
    q, tr, lam, steps = 0.9, 0.008, 2.0, 100.0
    n = float(mean_decode_batch(lam, steps, 0.0, 0.01, 0.02, 11.0, tr, q))
    u = lambda x: 1.0 - q**x  # noqa: E731
    s = (0.01 - tr * (u(11.0) - u(1.0))) / 10.0
    assert n == pytest.approx(lam * steps * (0.01 + (n - 1.0) * s + tr * (u(n) - u(1.0))), rel=1e-9)
    # the concave step time runs longer than its chord between 1 and B: a larger batch
    assert n > float(mean_decode_batch(lam, steps, 0.0, 0.01, 0.02, 11.0)) + 0.05  # 2.329 vs 2.25
    # saturated and idle ends as the dense rule
    assert float(mean_decode_batch(1000.0, steps, 0.0, 0.01, 0.02, 11.0, tr, q)) == 11.0
    assert float(mean_decode_batch(0.0, steps, 0.0, 0.01, 0.02, 11.0, tr, q)) == 0.0
