"""Roofline engine against hand-computed values, and its monotonicity properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuscale_opt.catalog import energy_spec, get_chip, get_model
from neuscale_opt.roofline import BOUNDS, axis_wraps, for_slice, hw_rows_for, slice_collective, step_cost


def hw(chip: str, shape=(1,), tp: int = 1, profile: str = "neuscale"):
    c = get_chip(chip)
    return for_slice(hw_rows_for(c, energy_spec(c, profile), 0.0, 1.0), c, shape, tp)


def test_llama3_8b_decode_batch1_one_v5p_is_hbm_bound_at_weights_over_bandwidth():
    m = get_model("Llama-3-8B")
    sc = step_cost(m, hw("tpu-v5p"), 1, 1, 1, 1, 1, 1)
    assert BOUNDS[int(sc.bound)] == "hbm"
    # Hand: every weight but the input embedding is read once: (8.030e9 - 128256*4096) params x 2 B
    weights = (8_030_261_248 - 128256 * 4096) * 2
    kv = 3 * 131072  # read 1 + 1 token, write 1 token of KV, 128 KiB each
    assert float(sc.t_hbm_s) == pytest.approx((weights + kv) / 2765e9, rel=1e-3)
    # and close to the back-of-envelope 16.1 GB / 2.77 TB/s = 5.8 ms
    assert float(sc.latency_s) == pytest.approx(5.8e-3, rel=0.08)
    assert float(sc.t_ici_s) == 0.0


def test_llama3_70b_bf16_does_not_fit_one_v5p():
    m = get_model("Llama-3-70B")
    h = hw("tpu-v5p")
    sc = step_cost(m, h, 1, 1, 1, 1, 1, 1)
    assert m.weight_bytes == pytest.approx(141.1e9, rel=1e-3)
    assert float(sc.mem_bytes_per_chip) > float(h.hbm_cap) == pytest.approx(0.9 * 95 * 2**30)


def test_prefill_2048_on_v6e_is_compute_bound_with_hand_flops():
    m = get_model("Llama-3-8B")
    sc = step_cost(m, hw("tpu-v6e"), 1, 1, 1, 1, 2048, 0)
    assert BOUNDS[int(sc.bound)] == "compute"
    flops = 2048 * 2 * (8_030_261_248 - 128256 * 4096) + 32 * 4 * 32 * 128 * (2048 * 2049 / 2)
    assert float(sc.flops) == pytest.approx(flops, rel=1e-9)
    assert float(sc.t_compute_s) == pytest.approx(flops / 918e12, rel=1e-9)
    # Llama-3-70B on a 2x4 v6e slice, tp 2 x pp 4: still compute-bound
    m70 = get_model("Llama-3-70B")
    sc70 = step_cost(m70, hw("tpu-v6e", (2, 4), 2), 2, 4, 1, 1, 2048, 0)
    assert BOUNDS[int(sc70.bound)] == "compute"


def test_tensor_parallel_all_reduce_by_hand():
    """Two ring all-reduces of B*T*D bf16 per layer: 2 (n-1)/n V bytes per chip each (R7)."""
    m = get_model("Llama-3-70B")
    h = hw("tpu-v5p", (2, 2, 1), 4)
    sc = step_cost(m, h, 4, 1, 1, 8, 1, 1000)
    v = 8 * 1 * 8192 * 2
    per_chip = 80 * 2 * (2 * 3 / 4 * v)
    assert float(sc.ici_bytes) == pytest.approx(per_chip * 4)
    # 2x2x1 sub-cube slice: no wraparound, TP group spans 2 axes, one direction each (100 GB/s)
    bw, _, axes, wrap = slice_collective(get_chip("tpu-v5p"), (2, 2, 1), 4)
    assert (axes, wrap) == (2, False) and bw == pytest.approx(2 * 100e9)
    # steps: reduce-scatter + all-gather on two lines of 2 chips: 2 x (1 + 1) = 4 steps of 1 us,
    # plus the bytes (summed, not the max of the two)
    t_ar = 4 * 1e-6 + 2 * 3 / 4 * v / bw
    assert float(sc.t_ici_s) == pytest.approx(160 * t_ar)


def test_wraparound_rules():
    v5e, v5p = get_chip("tpu-v5e"), get_chip("tpu-v5p")
    assert not axis_wraps(v5e, (4, 8), 1)
    assert axis_wraps(v5e, (8, 16), 1) and not axis_wraps(v5e, (8, 16), 0)
    assert axis_wraps(v5p, (4, 4, 8), 2) and not axis_wraps(v5p, (2, 2, 4), 2)
    # a wrapped axis doubles the collective bandwidth (bidirectional ring)
    assert slice_collective(v5e, (16, 16), 16)[0] == pytest.approx(2 * slice_collective(v5e, (4, 4), 4)[0] * 1)


def test_moe_imbalance_slows_the_busiest_chip_under_expert_parallelism():
    m = get_model("DeepSeek-V3-671B")
    h = hw("tpu-v5p", (4, 4, 4), 64)
    ep1 = step_cost(m, h, 64, 1, 1, 64, 1, 1000)
    ep64 = step_cost(m, h, 64, 1, 64, 64, 1, 1000)
    even = step_cost(m, h, 64, 1, 64, 64, 1, 1000, moe_imbalance=1.0)
    assert float(ep64.t_compute_s) > float(even.t_compute_s)
    assert float(even.t_compute_s) == pytest.approx(float(ep1.t_compute_s))
    # 64 tokens x 8 experts = 512 assignments over 64 chips, 8 per chip on average: the busiest
    # chip's expected load by Monte Carlo of the multinomial draw (independent of the code's
    # Poisson sum), relative to the mean 8
    rng = np.random.default_rng(0)
    draws = rng.multinomial(512, [1 / 64] * 64, size=20000).max(axis=1).mean() / 8.0
    routed = 64 * 2 * 8 * m.expert_params * m.n_moe_layers / 64
    extra = float(ep64.t_compute_s - even.t_compute_s) * 459e12 / routed  # = factor - 1
    assert 1.0 + extra == pytest.approx(draws, rel=0.03)
    assert 1.5 < 1.0 + extra < 7.0


chips_st = st.sampled_from([1, 2, 4, 8, 16, 32, 64])


@settings(max_examples=60, deadline=None)
@given(
    tp=chips_st,
    pp=st.sampled_from([1, 2, 4]),
    b=st.integers(1, 256),
    ctx=st.integers(1, 8000),
    model=st.sampled_from(["Llama-3-8B", "Llama-3-70B", "Mixtral-8x7B", "Qwen3-32B"]),
)
def test_more_chips_never_increase_the_compute_roof(tp, pp, b, ctx, model):
    m = get_model(model)
    h = hw("tpu-v5p")
    small = step_cost(m, h, tp, pp, 1, b, 1, ctx)
    big = step_cost(m, h, tp * 2, pp, 1, b, 1, ctx)
    assert float(big.t_compute_s) <= float(small.t_compute_s) * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(
    b=st.integers(1, 512),
    ctx=st.integers(1, 30000),
    extra=st.integers(1, 30000),
    model=st.sampled_from(["Llama-3-8B", "Llama-3-70B", "DeepSeek-V3-671B", "Mixtral-8x7B"]),
    chip=st.sampled_from(["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "nvidia-h100"]),
)
def test_latency_grows_with_context(b, ctx, extra, model, chip):
    m = get_model(model)
    h = hw(chip, (2, 2) if chip in ("tpu-v5e", "tpu-v6e") else (2, 2, 1), 4)
    if chip == "nvidia-h100":
        h = hw(chip, (4,), 4)
    a = step_cost(m, h, 4, 1, 1, b, 1, ctx)
    z = step_cost(m, h, 4, 1, 1, b, 1, ctx + extra)
    assert float(z.latency_s) >= float(a.latency_s)
    assert float(z.energy_dyn_j) >= float(a.energy_dyn_j)


def test_vectorised_rows_equal_scalar_rows():
    m = get_model("Llama-3-70B")
    h = hw("tpu-v6e", (4, 4), 16)
    B = np.array([1, 8, 64])
    P = np.array([100, 2000, 7000])
    vec = step_cost(m, h, 16, 1, 1, B, 1, P)
    for i in range(3):
        one = step_cost(m, h, 16, 1, 1, int(B[i]), 1, int(P[i]))
        assert float(vec.latency_s[i]) == pytest.approx(float(one.latency_s), rel=1e-12)
        assert float(vec.energy_dyn_j[i]) == pytest.approx(float(one.energy_dyn_j), rel=1e-12)


def test_three_rooflines_and_ridges_by_hand():
    from neuscale_opt.roofline import chip_rooflines, roofline_curves

    c = get_chip("tpu-v6e")
    r = chip_rooflines(c, energy_spec(c, "neuscale"))
    assert r["ridge_time_flop_per_byte"] == pytest.approx(918e12 / 1638e9)
    # neuscale read all-in: 918/3.50 = 262.29 W at full compute, 1638/13.52 = 121.15 W at full HBM
    # bandwidth, both minus the static power, per FLOP and per byte
    static = energy_spec(c, "neusim").static_w
    j_flop = (918 / 3.50 - static) / 918e12
    j_hbm = (1638 / 13.52 - static) / 1638e9
    assert r["ridge_energy_flop_per_byte"] == pytest.approx(j_hbm / j_flop)
    assert r["peak_flop_per_usd"] == pytest.approx(918e12 * 3600 / 2.70)
    cur = roofline_curves(r, np.array([1.0, r["ridge_time_flop_per_byte"], 1e6]))
    assert cur["flop_per_s"][0] == pytest.approx(1638e9) and cur["flop_per_s"][2] == pytest.approx(918e12)
    # at the energy ridge the two energy terms are equal: half the peak FLOP/J
    e = roofline_curves(r, np.array([r["ridge_energy_flop_per_byte"]]))["flop_per_j"][0]
    assert e == pytest.approx(r["peak_flop_per_j"] / 2)


def test_multi_node_gpu_vpods_hand_off_over_the_dcn():
    from neuscale_opt.roofline import vpod_nodes

    h100 = get_chip("nvidia-h100")
    assert vpod_nodes(h100, 8) == 1 and vpod_nodes(h100, 16) == 2 and vpod_nodes(get_chip("tpu-v5p"), 4096) == 1
    m = get_model("Llama-3.1-405B")
    h = hw("nvidia-h100", (8,), 8)
    one = step_cost(m, h, 8, 2, 1, 8, 1, 4096)
    two = step_cost(m, h, 8, 2, 1, 8, 1, 4096, nodes=2)
    v = 8 * 16384 * 2  # B*T*D bf16 activations handed from stage 1 to stage 2
    assert float(one.dcn_bytes) == 0.0 and float(two.dcn_bytes) == v
    assert float(two.ici_bytes) == pytest.approx(float(one.ici_bytes) - v)
    t_dcn = 1e-6 + v / (400e9 / 8 * 8)  # 400 Gb/s per GPU, 8 GPUs of the stage
    t_ici = 1e-6 + v / (8 * 18 * 25e9)  # NVLink through the switch, 1/8 of the activations per GPU
    assert float(two.latency_s - one.latency_s) == pytest.approx(t_dcn - t_ici)
    # 405B in bf16 (811 GB) does not fit one 8 x 80 GiB node but fits two
    assert float(step_cost(m, h, 8, 1, 1, 1, 1, 1).mem_bytes_per_chip) > float(h.hbm_cap)
    assert float(two.mem_bytes_per_chip) < float(h.hbm_cap)


def test_binding_roof_is_the_argmax_of_the_stacked_roofs():
    """Ties (to the first roof), NaNs (the largest) and broadcasting as ``argmax`` over the roofs."""
    from neuscale_opt.roofline import binding_roof

    rng = np.random.default_rng(7)
    vals = np.array([0.0, 1.0, 2.0, np.inf])  # few values: many ties
    t_c = rng.choice(vals, size=(40, 1, 5))
    t_h = rng.choice(vals, size=(1, 30, 5))
    t_ici = rng.choice(vals, size=(40, 30, 1))
    want = np.stack(np.broadcast_arrays(t_c, t_h, t_ici)).argmax(axis=0)
    assert np.array_equal(binding_roof(t_c, t_h, t_ici), want)
    t_h = t_h.copy()
    t_h[0, :3, 0] = np.nan
    want = np.stack(np.broadcast_arrays(t_c, t_h, t_ici)).argmax(axis=0)
    assert np.array_equal(binding_roof(t_c, t_h, t_ici), want)
    # by hand: compute-bound on a tie with HBM, ICI only when strictly above both
    got = binding_roof(np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 2.0]), np.array([1.0, 2.0, 3.0]))
    assert list(got) == [0, 1, 2]
    assert binding_roof(1.0, 3.0, 2.0) == 1 and np.ndim(binding_roof(1.0, 3.0, 2.0)) == 0
