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
    # two epochs; in epoch 1 the v5e group grows from 1 to 3 vPods: for the 30-s creation delay
    # only its one old vPod is ready, so it gets 1/3 of its planned share, then all of it
    inst = tiny_instance({"a": 4.0}, epochs=2, length_s=100.0)
    rows = []
    for e, n5 in ((0, 1), (1, 3)):
        rows += [
            row(e, "a", 1, rate_rps=1.0, batch=8, vpod_group="g6"),
            row(e, "a", n5, rate_rps=3.0, chip="tpu-v5e", batch=8, vpod_group="g5"),
        ]
    trace = poisson_trace({"a": (4.0, 512, 16)}, 200.0, seed=2)
    res = replay(plan_of(rows), inst, trace)
    rq = res.requests
    early = rq[(rq["arrival_s"] >= 100.0) & (rq["arrival_s"] < 130.0)]
    late = rq[rq["arrival_s"] >= 130.0]
    # shares 1 : 3 x 1/3 = 1 : 1 while creating, 1 : 3 once ready
    assert np.mean(early["chip"] == "tpu-v5e") == pytest.approx(0.5, abs=1.0 / len(early) + 1e-9)
    assert np.mean(late["chip"] == "tpu-v5e") == pytest.approx(0.75, abs=1.0 / len(late) + 1e-9)


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
