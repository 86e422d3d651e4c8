"""The step tables equal the roofline: decode is affine in the mean context (exact), prefill is
tabulated per prompt length."""

from __future__ import annotations

import numpy as np
import pytest

from neuscale_opt.candidates import chip_context, effective_model
from neuscale_opt.catalog import get_chip
from neuscale_opt.instance import parse_instance
from neuscale_opt.replay import VpodType, build_table
from neuscale_opt.roofline import for_slice, step_cost

CASES = [
    ("Llama-3-8B", VpodType("tpu-v6e", (1, 1), 1, 1, 1, 16, "colocated")),
    ("Llama-3-70B", VpodType("tpu-v5p", (2, 2, 4), 16, 1, 1, 64, "colocated")),
    ("Llama-3-70B", VpodType("tpu-v5e", (4, 4), 8, 2, 1, 8, "colocated")),  # pipeline: 2 micro-batches
    ("Mixtral-8x7B", VpodType("tpu-v6e", (2, 4), 8, 1, 8, 32, "colocated")),  # MoE, expert parallel
    # MLA: tensor-parallel heads, and data-parallel attention (R5b, the planner's ":dpa" types)
    ("DeepSeek-V3-671B", VpodType("tpu-v5p", (2, 2, 4), 16, 1, 16, 64, "colocated")),
    ("DeepSeek-V3-671B", VpodType("tpu-v5p", (2, 2, 4), 16, 1, 16, 64, "colocated", attn_dp=True)),
]


def _instance(model: str, chip: str):
    return parse_instance(
        {
            "model": {"name": model},
            "fleet": [{"chip": chip, "chips": 256}],
            "workload": {
                "classes": [{"name": "c", "input_tokens": 100, "output_tokens": 10}],
                "demand": [{"epoch": 0, "bucket": "c", "rate_rps": 1.0}],
            },
        }
    )


@pytest.mark.parametrize(("model", "vt"), CASES, ids=[f"{m}-{v.key}" for m, v in CASES])
def test_decode_and_prefill_equal_step_cost(model, vt):
    inst = _instance(model, vt.chip)
    tab = build_table(inst, vt, max_input=5000)
    m = effective_model(inst)
    hw = for_slice(chip_context(inst, vt.chip).hw, get_chip(vt.chip), vt.shape, vt.tp)
    rng = np.random.default_rng(0)
    ns = sorted({1, vt.slots, *rng.integers(1, vt.slots + 1, size=6).tolist()})
    ctxs = [0.0, 1.5, 777.25, 4096.0, 30000.0, 131072.0]
    for n in ns:
        b = -(-n // vt.pp)  # sequences per micro-batch
        q = -(-n // b)  # micro-batches
        for p in ctxs:
            ref = step_cost(m, hw, vt.tp, vt.pp, vt.ep, float(b), 1.0, p, attn_dp=vt.attn_dp)
            t, e = tab.decode_step(n, p)
            assert t == pytest.approx(float(ref.latency_s), rel=1e-9)
            assert e == pytest.approx(q * float(ref.energy_dyn_j), rel=1e-9)
    s = np.array([0, 1, 17, 512, 4999])
    ref = step_cost(m, hw, vt.tp, vt.pp, vt.ep, 1.0, s.astype(float), 0.0, attn_dp=vt.attn_dp)
    np.testing.assert_allclose(np.array(tab.pre_lat)[s], ref.latency_s, rtol=1e-12)
    np.testing.assert_allclose(np.array(tab.pre_stall)[s], ref.t_stage_s, rtol=1e-12)
    np.testing.assert_allclose(np.array(tab.pre_energy)[s], ref.energy_dyn_j, rtol=1e-12)
    assert tab.static_w == pytest.approx(vt.chips * float(chip_context(inst, vt.chip).hw.static_w))


def test_decode_crosses_roofs_exactly():
    """A very large batch at short context is compute-bound and becomes HBM-bound as the context
    (KV reads) grows; batch 1 is HBM-bound: the max of the affine roofs is evaluated exactly."""
    inst = _instance("Llama-3-8B", "tpu-v6e")
    vt = VpodType("tpu-v6e", (1, 1), 1, 1, 1, 2048, "colocated")
    tab = build_table(inst, vt, max_input=10)
    bounds = set()
    for n, p in ((1, 10.0), (2048, 10.0), (2048, 20000.0)):
        c = tab.c0[n] + tab.c1[n] * p
        h = tab.h0[n] + tab.h1[n] * p
        bounds.add("compute" if c >= h else "hbm")
        ref = step_cost(effective_model(inst), chip_context(inst, "tpu-v6e").hw, 1, 1, 1, float(n), 1.0, p)
        assert tab.decode_step(n, p)[0] == pytest.approx(float(ref.latency_s), rel=1e-9)
    assert bounds == {"compute", "hbm"}


def test_data_parallel_attention_is_its_own_vpod_type():
    # the replay runs a ":dpa" type with the layout it names: every chip streams the whole attention
    # weights (replicated), so a round streams more weights than with tensor-parallel heads
    inst = _instance("DeepSeek-V3-671B", "tpu-v5p")
    heads, dpa = (VpodType("tpu-v5p", (2, 2, 4), 16, 1, 16, 64, "colocated", attn_dp=a) for a in (False, True))
    assert dpa.key == "tpu-v5p:2x2x4:tp16pp1ep16:dpa:b64:colocated" and heads.key.count(":dpa") == 0
    t_heads, t_dpa = build_table(inst, heads, max_input=10), build_table(inst, dpa, max_input=10)
    assert t_dpa.fixed_j[1] > t_heads.fixed_j[1] > 0
