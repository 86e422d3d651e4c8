"""Routing of a class served by several groups: split as the plan's rates say (default), or by load."""

from __future__ import annotations

import numpy as np
import pytest
from replay_builders import plan_of, poisson_trace, row, tiny_instance, trace_of

from neuscale_opt.errors import InputError
from neuscale_opt.replay import ReplayOptions, replay

INST = tiny_instance({"a": 4.0}, v6e_chips=8, v5e_chips=16)


def _two_groups(rate_v6e: float, rate_v5e: float, n_v5e: int = 1) -> dict:
    return plan_of(
        [
            row(0, "a", 1, rate_rps=rate_v6e, batch=8, vpod_group="g6"),
            row(0, "a", n_v5e, rate_rps=rate_v5e, chip="tpu-v5e", batch=8, vpod_group="g5"),
        ]
    )


def _served_on(res, chip: str) -> int:
    return int((res.requests["chip"] == chip).sum())


def test_a_class_is_split_over_its_groups_as_planned():
    trace = poisson_trace({"a": (4.0, 512, 16)}, 100.0, seed=1)
    n = len(trace)
    res = replay(_two_groups(3.0, 1.0), INST, trace)
    # smooth weighted round-robin 3 : 1 over every ready group: exact to one request
    assert abs(_served_on(res, "tpu-v6e") - 0.75 * n) <= 1
    assert _served_on(res, "tpu-v6e") + _served_on(res, "tpu-v5e") == n
    flipped = replay(_two_groups(1.0, 3.0), INST, trace)
    assert abs(_served_on(flipped, "tpu-v5e") - 0.75 * n) <= 1
    # by load the plan's split is not followed: both plans route the same
    by_load = [replay(p, INST, trace, ReplayOptions(routing="load")) for p in (_two_groups(3, 1), _two_groups(1, 3))]
    assert _served_on(by_load[0], "tpu-v6e") == _served_on(by_load[1], "tpu-v6e")
    assert res.meta["options"]["routing"] == "plan" and by_load[0].meta["options"]["routing"] == "load"


def test_vpods_still_being_created_take_no_share():
    # two epochs; in epoch 1 the v5e group grows from 1 to 3 vPods, created at the boundary (not
    # pre-warmed): for the 30-s creation delay only its one old vPod is ready, so it gets 1/3 of its
    # planned share, then all of it
    inst = tiny_instance({"a": 4.0}, epochs=2, length_s=100.0)
    rows = []
    for e, n5 in ((0, 1), (1, 3)):
        rows += [
            row(e, "a", 1, rate_rps=1.0, batch=8, vpod_group="g6"),
            row(e, "a", n5, rate_rps=3.0, chip="tpu-v5e", batch=8, vpod_group="g5"),
        ]
    trace = poisson_trace({"a": (4.0, 512, 16)}, 200.0, seed=2)
    res = replay(plan_of(rows), inst, trace, ReplayOptions(prewarm=False))
    rq = res.requests
    early = rq[(rq["arrival_s"] >= 100.0) & (rq["arrival_s"] < 130.0)]
    late = rq[rq["arrival_s"] >= 130.0]
    # shares 1 : 3 x 1/3 = 1 : 1 while creating, 1 : 3 once ready
    assert np.mean(early["chip"] == "tpu-v5e") == pytest.approx(0.5, abs=1.0 / len(early) + 1e-9)
    assert np.mean(late["chip"] == "tpu-v5e") == pytest.approx(0.75, abs=1.0 / len(late) + 1e-9)
    # pre-warmed (the default), the two new vPods are ready at the boundary: 1 : 3 from its start
    rq = replay(plan_of(rows), inst, trace).requests
    first = rq[(rq["arrival_s"] >= 100.0) & (rq["arrival_s"] < 130.0)]
    assert np.mean(first["chip"] == "tpu-v5e") == pytest.approx(0.75, abs=1.0 / len(first) + 1e-9)


def test_unknown_routing_is_refused():
    with pytest.raises(InputError, match="routing must be one of plan, load"):
        ReplayOptions(routing="random")


def test_a_burst_spills_over_to_a_group_without_waiting_prompts():
    # all planned on v6e (weights 1 : 0), but two prompts at once: the first takes the v6e vPod, the
    # second would wait behind its prefill there, so it goes to the idle v5e vPod (strictly by the
    # split it would wait)
    plan = _two_groups(1.0, 0.0)
    trace = trace_of([(0.0, 2048, 4, "a")] * 2)
    res = replay(plan, INST, trace)
    assert _served_on(res, "tpu-v6e") == 1 and _served_on(res, "tpu-v5e") == 1


# ---------------------------------------------------------------------------------------------
# overflow: a request its own groups would serve after its TTFT target goes to another class's
# vPod whose type serves its class, when that vPod gives it its first token within the target


def _lone_ttft(inst, plan: dict, s_in: int) -> float:
    """The TTFT of one class-a prompt of ``s_in`` tokens alone on ``plan``'s vPods."""
    res = replay(plan, inst, trace_of([(0.0, s_in, 4, "a")]), ReplayOptions(overflow=False))
    return float(res.requests["ttft_s"].iloc[0])


def _overflow_case(ttft_factor: float, host: dict | None = None):
    """Two prompts of class a at t = 0 on one v6e vPod of batch 2 planned for a, one vPod planned for
    b (``host`` overrides its row); TTFT target = ``ttft_factor`` x a lone prompt's TTFT."""
    probe = plan_of([row(0, "a", 1, vpod_group="ga")])
    base = tiny_instance({"a": 1.0, "b": 1.0})
    p = _lone_ttft(base, probe, 2048)
    inst = tiny_instance({"a": 1.0, "b": 1.0}, slo={"mode": "absolute", "ttft_s": ttft_factor * p, "tpot_s": 1.0})
    plan = plan_of([row(0, "a", 1, vpod_group="ga"), row(0, "b", 1, vpod_group="gb", **(host or {}))])
    trace = trace_of([(0.0, 2048, 4, "a"), (0.0, 2048, 4, "a")])
    return inst, plan, trace, p


def _groups(res) -> list[str]:
    v = res.vpods.set_index("vpod")["vpod_group"]
    return [v[i] for i in res.requests["vpod"]]


def test_overflow_sends_a_late_prompt_to_another_class_vpod_that_meets_its_ttft():
    # on its own vPod the second prompt waits for the first's prefill: TTFT about 2 p > 1.5 p
    inst, plan, trace, p = _overflow_case(1.5)
    off = replay(plan, inst, trace, ReplayOptions(overflow=False))
    assert _groups(off) == ["ga", "ga"]
    assert off.requests["ttft_s"].iloc[1] > 1.5 * p and not off.requests["slo_met"].iloc[1]
    on = replay(plan, inst, trace)  # overflow is the default
    assert on.meta["options"]["overflow"] is True
    assert _groups(on) == ["ga", "gb"]
    assert on.requests["ttft_s"].iloc[1] == pytest.approx(p) and bool(on.requests["slo_met"].all())


def test_overflow_leaves_a_prompt_on_its_own_vpod_when_that_meets_its_ttft():
    # a target of 3 p: waiting behind one prefill still meets it, so nothing moves
    inst, plan, trace, _ = _overflow_case(3.0)
    assert _groups(replay(plan, inst, trace)) == ["ga", "ga"]


def test_overflow_needs_a_host_that_meets_the_target():
    # the b vPod is a v5e chip, slower than the target allows for this prompt: no move
    inst, plan, trace, p = _overflow_case(1.5, host={"chip": "tpu-v5e", "tp": 1, "batch": 2})
    slow = _lone_ttft(inst, plan_of([row(0, "a", 1, vpod_group="ga", chip="tpu-v5e")]), 2048)
    assert slow > 1.5 * p  # the premise: the host would miss too
    assert _groups(replay(plan, inst, trace)) == ["ga", "ga"]


def test_overflow_needs_a_host_type_that_serves_the_class():
    # batch 3 is no configuration of the candidate table, so that vPod serves no class but its own
    inst, plan, trace, _ = _overflow_case(1.5, host={"batch": 3})
    assert _groups(replay(plan, inst, trace)) == ["ga", "ga"]
