"""Replay metrics of the energy model: the weight-streaming share of the steps (formulation E2/E4),
goodput (output tokens of requests that met their SLO) per joule and per dollar, and the optional
static power of idle fleet chips, each against hand-computed values."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from replay_builders import plan_of, poisson_trace, row, tiny_instance, trace_of

from neuscale_opt.candidates import build_coefficients, chip_context, effective_model
from neuscale_opt.energy import request_energy_split_j
from neuscale_opt.instance import parse_instance
from neuscale_opt.replay import ReplayOptions, replay
from neuscale_opt.roofline import step_cost

INST = tiny_instance()
MODEL = effective_model(INST)
HW = replace(chip_context(INST, "tpu-v6e").hw, coll_bw=np.float64(1.0), a2a_dist=np.float64(1.0))
STATIC_W = {c: float(chip_context(INST, c).hw.static_w) for c in ("tpu-v6e", "tpu-v5e")}


def _decode_j(n: int, p: float) -> float:
    return float(step_cost(MODEL, HW, 1.0, 1.0, 1.0, float(n), 1.0, p).energy_dyn_j)


def _prefill(s: int) -> tuple[float, float]:
    c = step_cost(MODEL, HW, 1.0, 1.0, 1.0, 1.0, float(s), 0.0)
    return float(c.latency_s), float(c.energy_dyn_j)


def test_busy_share_is_the_weights_of_every_decode_round():
    res = replay(plan_of([row(0, "a", 1)]), INST, trace_of([(0.0, 100, 3, "a")]))
    # weights of a round: the intercept of the round energy in the batch (2 E(1) - E(2), dense)
    weights_j = 2.0 * _decode_j(1, 0.0) - _decode_j(2, 0.0)
    assert weights_j > 0
    t = res.totals
    assert t["energy_busy_j"] == pytest.approx(3 * weights_j, rel=1e-9)
    assert t["energy_marginal_j"] == pytest.approx(t["energy_dynamic_j"] - 3 * weights_j, rel=1e-9)
    assert res.vpods["energy_busy_j"].sum() == pytest.approx(t["energy_busy_j"])


def test_goodput_counts_only_requests_that_met_their_slo():
    lat, _ = _prefill(512)
    inst = tiny_instance(slo={"mode": "absolute", "ttft_s": 1.5 * lat})
    # two prompts at once on one vPod: the second waits for the first's prefill and misses TTFT
    trace = trace_of([(0.0, 512, 7, "a"), (0.0, 512, 5, "a"), (50.0, 512, 11, "a")])
    res = replay(plan_of([row(0, "a", 1)]), inst, trace)
    t = res.totals
    assert list(res.requests["slo_met"]) == [True, False, True]
    assert t["tokens_out"] == 7 + 5 + 11
    assert t["goodput_tokens_out"] == 7 + 11
    assert t["tokens_out_offered"] == 7 + 5 + 11
    assert t["goodput_tokens_per_joule"] == pytest.approx(18 / t["energy_j"])
    assert t["goodput_tokens_per_usd"] == pytest.approx(18 / t["cost_usd"])
    assert t["tokens_per_joule"] == pytest.approx(23 / t["energy_j"])  # old field kept


def test_idle_fleet_power_is_optional_and_hand_computed():
    plan = plan_of([row(0, "a", 1)])  # one v6e chip held for the 100-s epoch
    trace = trace_of([(0.0, 100, 3, "a")])
    off = replay(plan, INST, trace)
    on = replay(plan, INST, trace, ReplayOptions(idle_fleet_power=True))
    # fleet: 8 v6e chips (1 held) and 16 v5e chips (none held), over 100 s
    idle_j = (8 * 100.0 - 100.0) * STATIC_W["tpu-v6e"] + 16 * 100.0 * STATIC_W["tpu-v5e"]
    assert off.totals["energy_idle_fleet_j"] == pytest.approx(idle_j)
    assert on.totals["energy_idle_fleet_j"] == pytest.approx(idle_j)
    assert off.totals["idle_fleet_power"] is False and on.totals["idle_fleet_power"] is True
    assert on.totals["energy_j"] == pytest.approx(off.totals["energy_j"] + 1.1 * idle_j)
    assert on.totals["cost_usd"] == off.totals["cost_usd"]
    assert on.meta["options"]["idle_fleet_power"] is True


@pytest.mark.parametrize("load", [0.2, 0.8])
def test_moe_weight_streaming_per_request_matches_a_one_vpod_replay(load):
    # DeepSeek-V3 on a v6e 4x8 vPod under Poisson arrivals of one class: the planner's weight
    # streaming per request (E4-E7 with the touched routed experts) against the replay's steps, each
    # at its actual batch; the chord of the touched-expert curve (the dense rule) gave 0.6x (load 0.2)
    # and 0.2x (load 0.8) of the replay's here
    inst = parse_instance(
        {
            "name": "moe",
            "model": {"name": "DeepSeek-V3-671B"},
            "fleet": [{"chip": "tpu-v6e", "chips": 32}],
            "workload": {
                "classes": [{"name": "a", "input_tokens": 1000, "output_tokens": 200}],
                "demand": [{"epoch": 0, "bucket": "a", "rate_rps": 1.0}],
            },
            "epochs": {"length_s": 300.0, "horizon": 1},
            "slo": {"mode": "absolute", "ttft_s": 1000.0, "tpot_s": 100.0},
            "search": {"max_chips_per_vpod": 32, "batch_sizes": [64]},
        }
    )
    cfg = build_coefficients(inst).configs
    one = cfg[(cfg["phase"] == "colocated") & (cfg["shape"] == "4x8") & (cfg["tp"] == 2) & (cfg["ep"] == 1)]
    assert len(one) == 1
    r = one.iloc[0]
    lam = load / float(r["busy_s_per_req"])
    trace = poisson_trace({"a": (lam, 1000, 200)}, 300.0, seed=3)
    kw = {"chip": "tpu-v6e", "shape": "4x8", "chips_per_vpod": 32, "tp": 2, "pp": int(r["pp"]), "batch": 64}
    res = replay(plan_of([row(0, "a", 1, rate_rps=lam, **kw)]), inst, trace)
    busy, marginal = request_energy_split_j(one, np.array([lam]))
    n = len(trace)
    assert busy[0] == pytest.approx(res.totals["energy_busy_j"] / n, rel=0.12)
    assert marginal[0] == pytest.approx(res.totals["energy_marginal_j"] / n, rel=0.03)


def test_offered_by_class_counts_each_class_and_epoch_as_the_replay_does():
    from replay_builders import tiny_instance, trace_of

    from neuscale_opt.replay.simulate import offered_by_class

    inst = tiny_instance(epochs=2, length_s=100.0)
    trace = trace_of(
        [
            (5.0, 512, 100, "a"),
            (99.9, 512, 30, "a"),
            (100.0, 512, 7, "a"),
            (40.0, 2048, 256, "b"),
            (150.0, 2048, 1, "b"),
        ]
    )
    tokens, requests = offered_by_class(trace, inst)
    # epoch = arrival // 100 s: a request at exactly 100 s opens epoch 1
    assert tokens == {("a", 0): 130.0, ("a", 1): 7.0, ("b", 0): 256.0, ("b", 1): 1.0}
    assert requests == {("a", 0): 2.0, ("a", 1): 1.0, ("b", 0): 1.0, ("b", 1): 1.0}
