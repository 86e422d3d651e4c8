"""Hand-computable replays: one vPod, a few requests at known times, checked against the roofline.

The expected numbers are built from :func:`neuscale_opt.roofline.step_cost` directly (batch-1
prefill of the prompt; decode round of ``n`` sequences at the batch's mean past context over the
segment), following the event rules of ``neuscale_opt/replay/README.md``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from replay_builders import plan_of, row, tiny_instance, trace_of

from neuscale_opt.candidates import chip_context, effective_model
from neuscale_opt.replay import ReplayOptions, replay
from neuscale_opt.roofline import step_cost

INST = tiny_instance()
MODEL = effective_model(INST)
CTX = chip_context(INST, "tpu-v6e")
HW = replace(CTX.hw, coll_bw=np.float64(1.0), a2a_dist=np.float64(1.0))
STATIC_W = float(CTX.hw.static_w)


def pre(s: int) -> tuple[float, float]:
    """(latency s, dynamic J) of a batch-1 prefill of ``s`` tokens on one v6e chip."""
    c = step_cost(MODEL, HW, 1.0, 1.0, 1.0, 1.0, float(s), 0.0)
    return float(c.latency_s), float(c.energy_dyn_j)


def dec(n: int, p: float) -> tuple[float, float]:
    """(latency s, dynamic J) of a decode step of ``n`` sequences at mean past context ``p``."""
    c = step_cost(MODEL, HW, 1.0, 1.0, 1.0, float(n), 1.0, float(p))
    return float(c.latency_s), float(c.energy_dyn_j)


def run(rows, plan_rows=None, **opts):
    plan = plan_of(plan_rows or [row(0, "a", 1)])
    return replay(plan, INST, trace_of(rows), ReplayOptions(**opts))


def test_single_request_matches_roofline():
    res = run([(0.0, 100, 3, "a")])
    p, e_p = pre(100)
    tau, e_d = dec(1, 101.0)  # contexts 100, 101, 102: mean 101
    r = res.requests.iloc[0]
    assert r["ttft_s"] == pytest.approx(p, rel=1e-12)
    assert r["tpot_s"] == pytest.approx(tau, rel=1e-12)
    assert r["e2e_s"] == pytest.approx(p + 3 * tau, rel=1e-12)
    assert r["queue_s"] == 0.0
    assert res.totals["energy_dynamic_j"] == pytest.approx(e_p + 3 * e_d, rel=1e-12)
    # one vPod of one chip held for the whole 100 s epoch
    assert res.totals["chip_hours"] == pytest.approx(100.0 / 3600.0)
    assert res.totals["energy_static_j"] == pytest.approx(STATIC_W * 100.0)
    assert res.totals["energy_j"] == pytest.approx(1.1 * (e_p + 3 * e_d + STATIC_W * 100.0))
    assert res.totals["tokens_out"] == 3
    assert res.totals["tokens_per_joule"] == pytest.approx(3 / res.totals["energy_j"])


def test_arrival_during_decode_joins_at_the_next_round():
    p1, e_p1 = pre(200)
    tau_a, _ = dec(1, 200.5)  # planned segment: 2 rounds at contexts 200, 201
    t2 = 10.0 + p1 + 0.5 * tau_a  # request 2 arrives half-way through the first round
    res = run([(10.0, 200, 2, "a"), (t2, 300, 3, "a")])
    p2, e_p2 = pre(300)
    b1 = 10.0 + p1 + tau_a  # the round in progress ends, then request 2 is prefilled
    tau_b, e_b = dec(2, 250.5)  # contexts 201 and 300
    b2 = b1 + p2 + tau_b  # request 1 finishes its 2nd token
    tau_c, e_c = dec(1, 301.5)  # request 2 alone: contexts 301, 302
    f2 = b2 + 2 * tau_c
    r1, r2 = res.requests.iloc[0], res.requests.iloc[1]
    assert r1["ttft_s"] == pytest.approx(p1, rel=1e-12)
    assert r1["e2e_s"] == pytest.approx(b2 - 10.0, rel=1e-12)
    assert r1["tpot_s"] == pytest.approx((tau_a + p2 + tau_b) / 2, rel=1e-12)
    assert r2["queue_s"] == pytest.approx(0.5 * tau_a, rel=1e-9)
    assert r2["ttft_s"] == pytest.approx(0.5 * tau_a + p2, rel=1e-9)
    assert r2["e2e_s"] == pytest.approx(f2 - t2, rel=1e-12)
    assert r2["tpot_s"] == pytest.approx((tau_b + 2 * tau_c) / 3, rel=1e-12)
    _, e_a1 = dec(1, 200.0)  # the one round done before the cut, at its own context
    expected = e_p1 + e_a1 + e_p2 + e_b + 2 * e_c
    assert res.totals["energy_dynamic_j"] == pytest.approx(expected, rel=1e-12)


def test_full_batch_queues_fifo():
    # batch 2: the third request waits for a slot
    res = run([(0.0, 100, 2, "a"), (0.0, 100, 5, "a"), (0.0, 100, 1, "a")])
    p, _ = pre(100)
    tau, _ = dec(2, 100.5)  # a and b decode together for 2 rounds (contexts 100, 101)
    fa = 2 * p + 2 * tau
    tau2, _ = dec(2, 101.0)  # b at 102, c at 100
    fc = fa + p + tau2
    tau3, _ = dec(1, 103.5)  # b alone: contexts 103, 104
    fb = fc + 2 * tau3
    a, b, c = (res.requests.iloc[i] for i in range(3))
    assert a["ttft_s"] == pytest.approx(p)
    assert a["e2e_s"] == pytest.approx(fa, rel=1e-12)
    assert b["ttft_s"] == pytest.approx(2 * p)
    assert c["queue_s"] == pytest.approx(fa, rel=1e-12)
    assert c["ttft_s"] == pytest.approx(fa + p, rel=1e-12)
    assert c["e2e_s"] == pytest.approx(fc, rel=1e-12)
    assert b["e2e_s"] == pytest.approx(fb, rel=1e-12)
    assert b["tpot_s"] == pytest.approx((fb - 2 * p) / 5, rel=1e-12)


def test_added_vpod_serves_after_the_creation_delay():
    inst = tiny_instance(epochs=2)
    plan = plan_of([row(0, "b", 1), row(1, "b", 1), row(1, "a", 1)])
    tr = trace_of([(50.0, 100, 2, "a"), (102.0, 100, 2, "a")])
    res = replay(plan, inst, tr, ReplayOptions(create_delay_s=5.0, prewarm=False))
    p, _ = pre(100)
    r1, r2 = res.requests.iloc[0], res.requests.iloc[1]
    # class a has no vPod in epoch 0; its vPod is created at 100 s and serves from 105 s
    assert r1["queue_s"] == pytest.approx(55.0)
    assert r1["ttft_s"] == pytest.approx(55.0 + p)
    assert r2["queue_s"] == pytest.approx(3.0 + p)  # FIFO behind request 1's prefill
    v = res.vpods.set_index("vpod_group")
    a_key = next(k for k in v.index if k.endswith("|a"))
    assert v.loc[a_key, "held_from_s"] == 100.0  # held from creation, not from readiness
    assert v.loc[a_key, "held_to_s"] == 200.0


def test_prewarmed_vpod_is_created_before_the_boundary_and_serves_from_it():
    # the same plan pre-warmed (the default): class a's vPod is created 5 s before the boundary at
    # 100 s (held from 95 s) and ready at 100 s: request 1 waits for the boundary only, request 2
    # arrives after request 1's prefill is done and queues behind nothing
    inst = tiny_instance(epochs=2)
    plan = plan_of([row(0, "b", 1), row(1, "b", 1), row(1, "a", 1)])
    tr = trace_of([(50.0, 100, 2, "a"), (102.0, 100, 2, "a")])
    res = replay(plan, inst, tr, ReplayOptions(create_delay_s=5.0))
    p, _ = pre(100)
    r1, r2 = res.requests.iloc[0], res.requests.iloc[1]
    assert r1["queue_s"] == pytest.approx(50.0)
    assert r1["ttft_s"] == pytest.approx(50.0 + p)
    assert 100.0 + p < 102.0 and r2["queue_s"] == pytest.approx(0.0)
    v = res.vpods.set_index("vpod_group")
    a_key = next(k for k in v.index if k.endswith("|a"))
    assert v.loc[a_key, "held_from_s"] == 95.0  # held from its creation, L = 5 s before the epoch
    assert v.loc[a_key, "held_to_s"] == 200.0
    # the vPod of epoch 0 is not pre-warmed (warm start: it exists at t = 0)
    b_key = next(k for k in v.index if k.endswith("|b"))
    assert v.loc[b_key, "held_from_s"] == 0.0
    # an instance whose [horizon] says prewarm = false is replayed so by default
    from neuscale_opt.instance import Horizon

    off = inst.model_copy(update={"horizon": Horizon(prewarm=False, create_delay_s=5.0)})
    res = replay(plan, off, tr, ReplayOptions(create_delay_s=5.0))
    v = res.vpods.set_index("vpod_group")
    assert v.loc[a_key, "held_from_s"] == 100.0
    assert res.requests.iloc[0]["queue_s"] == pytest.approx(55.0)
    assert res.meta["options"]["prewarm"] is False


def test_removed_vpod_drains_and_is_held_until_done():
    inst = tiny_instance(epochs=2)
    plan = plan_of([row(0, "a", 1), row(1, "b", 1)])
    tr = trace_of([(99.0, 100, 2000, "a"), (150.0, 100, 1, "b")])
    res = replay(plan, inst, tr, ReplayOptions(create_delay_s=0.0))
    a = res.requests.iloc[0]
    finish = 99.0 + a["e2e_s"]
    assert finish > 100.0  # it runs past the boundary where its group is removed
    v = res.vpods.sort_values("vpod")
    assert v["held_to_s"].iloc[0] == pytest.approx(finish, rel=1e-12)
    b = res.requests.iloc[1]
    assert b["queue_s"] == 0.0  # class b's vPod, created at 100 s without delay, was idle
    assert b["ttft_s"] == pytest.approx(pre(100)[0])


def test_class_never_served_counts_as_missed():
    plan = plan_of([row(0, "b", 1)])
    res = replay(plan, INST, trace_of([(1.0, 100, 2, "a"), (2.0, 100, 2, "b")]))
    assert res.totals["unserved"] == 1
    assert res.totals["served"] == 1
    assert not bool(res.requests["slo_met"].iloc[0])
    assert math.isnan(res.requests["ttft_s"].iloc[0])
    assert res.totals["tokens_out"] == 2  # only the served request's tokens
