"""A plan that leaves a known share of its demand unserved, replayed with ``admission = "plan"``:
the replay rejects that share at arrival (``formulations/allocation.md``, "Unserved demand"), so
it does the work the evaluator accounts. Expected values are worked by hand: which requests are
admitted (floor((k + 1) a) > floor(k a)), the roofline energy of each admitted request
(:func:`neuscale_opt.roofline.step_cost`, one request at a time on one vPod), static power and
price of the one chip held; the evaluator's totals of the same plan are then within the
consistency benchmark's 10 % of the replay's, and its money and tokens equal them.
"""

from __future__ import annotations

import numpy as np
import pytest
from replay_builders import plan_of, row, tiny_instance, trace_of

from neuscale_opt.alloc.evaluate import evaluate
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.solution import solution_from_dict
from neuscale_opt.candidates import build_coefficients, chip_context, effective_model
from neuscale_opt.catalog import get_chip
from neuscale_opt.coefficients import meets_slo
from neuscale_opt.errors import InputError
from neuscale_opt.replay import ReplayOptions, replay
from neuscale_opt.roofline import for_slice, step_cost

S_IN, S_OUT = 512, 128  # class a of the tiny instance
T = 100.0
PUE = 1.1
PLAN = ReplayOptions(admission="plan")


def _instance(rate: float):
    return tiny_instance(rates={"a": rate}, length_s=T)


INST = _instance(0.4)
MODEL = effective_model(INST)


def _config(inst):
    """The colocated v6e configuration of class a without pipeline stages, of the fewest chips and
    then the smallest batch, that meets the class's SLO."""
    coeffs = build_coefficients(inst)
    cfg = coeffs.configs
    cfg = cfg[(cfg["bucket"] == "a") & (cfg["chip"] == "tpu-v6e") & (cfg["pp"] == 1) & (cfg["phase"] == "colocated")]
    cfg = cfg[meets_slo(cfg, coeffs.buckets).to_numpy()]
    return coeffs, cfg.sort_values(["chips_per_vpod", "batch", "config_id"]).iloc[0]


def _request_j(r) -> float:
    """Dynamic energy of one request served alone on a vPod of ``r``'s type: the prefill of the
    prompt, then S_OUT decode rounds of one sequence at mean past context S_IN + (S_OUT - 1) / 2
    (the replay's segment rule, exact: the roofline is affine in the context)."""
    shape = tuple(int(x) for x in str(r["shape"]).split("x"))
    hw = for_slice(chip_context(INST, "tpu-v6e").hw, get_chip("tpu-v6e"), shape, int(r.tp))
    tp, pp, ep = float(r.tp), float(r.pp), float(r.ep)
    pre = step_cost(MODEL, hw, tp, pp, ep, 1.0, float(S_IN), 0.0)
    dec = step_cost(MODEL, hw, tp, pp, ep, 1.0, 1.0, S_IN + (S_OUT - 1) / 2)
    return float(pre.energy_dyn_j) + S_OUT * float(dec.energy_dyn_j)


def _plan(r, served: float, unserved: float) -> dict:
    """One vPod of ``r``'s type serving ``served`` req/s of class a; ``unserved`` req/s left."""
    rw = row(
        0,
        "a",
        1,
        shape=str(r["shape"]),
        chips_per_vpod=int(r.chips_per_vpod),
        tp=int(r.tp),
        pp=int(r.pp),
        ep=int(r.ep),
        batch=int(r.batch),
        rate_rps=served,
        vpod_type=str(r.vpod_type),
        config_id=str(r.config_id),
        vpod_group=str(r.config_id),
    )
    plan = plan_of([rw])
    plan["unserved"] = [{"epoch": 0, "bucket": "a", "unserved_rps": unserved}] if unserved else []
    return plan


def _trace(n: int):
    """``n`` requests of class a, evenly spaced over the epoch (one at a time: each is done long
    before the next arrives)."""
    gap = T / n
    return trace_of([(i * gap, S_IN, S_OUT, "a") for i in range(n)])


def test_half_unserved_admits_every_second_arrival_and_matches_the_evaluator():
    coeffs, r = _config(INST)
    plan = _plan(r, 0.2, 0.2)  # demand 0.4 req/s: half served
    trace = _trace(40)  # 0.4 req/s over 100 s
    res = replay(plan, INST, trace, PLAN, coeffs=coeffs)
    # a = 0.2 / (0.2 + 0.2) = 1/2: arrival k is admitted when floor((k+1)/2) > floor(k/2), i.e. k odd
    assert list(np.flatnonzero(res.requests["admitted"].to_numpy())) == list(range(1, 40, 2))
    t = res.totals
    assert t["rejected"] == 20 and t["served"] == 20 and t["unserved"] == 20
    assert t["tokens_out"] == 20 * S_OUT and t["tokens_out_offered"] == 40 * S_OUT  # the rejected half too
    assert t["slo_attainment"] == pytest.approx(0.5)  # the rejected half misses its SLO
    assert t["slo_attainment_admitted"] == 1.0
    assert res.by_bucket.set_index("bucket").loc["a", "rejected"] == 20
    # one vPod held for the epoch; 20 requests of 640 tokens, each alone on the vPod
    e_req = _request_j(r)
    static_w = int(r.chips_per_vpod) * float(chip_context(INST, "tpu-v6e").hw.static_w)
    assert t["energy_dynamic_j"] == pytest.approx(20 * e_req, rel=1e-9)
    assert t["energy_static_j"] == pytest.approx(static_w * T, rel=1e-12)
    assert t["energy_j"] == pytest.approx(PUE * (20 * e_req + static_w * T), rel=1e-9)
    assert t["cost_usd"] == pytest.approx(float(r.price_usd_per_hour) * T / 3600.0, rel=1e-12)
    assert t["tokens_in"] + t["tokens_out"] == 20 * (S_IN + S_OUT)

    # the evaluator's account of the same plan: the served share of the traffic, 0.2 req/s x 100 s
    sol = solution_from_dict(plan, PlanOptions(allow_unserved=True), coeffs=coeffs)
    ev = evaluate(sol, coeffs).totals
    assert ev["tokens"] == pytest.approx(20 * (S_IN + S_OUT), rel=1e-9)
    assert ev["cost_usd"] == pytest.approx(t["cost_usd"], rel=1e-9)
    assert ev["energy_static_j"] == pytest.approx(t["energy_static_j"], rel=1e-9)
    assert ev["energy_j"] == pytest.approx(t["energy_j"], rel=0.10)
    assert ev["energy_dynamic_j"] == pytest.approx(t["energy_dynamic_j"], rel=0.10)

    # admitting every arrival (the default) serves the unserved half too: twice the dynamic energy
    every = replay(plan, INST, trace, coeffs=coeffs).totals
    assert every["rejected"] == 0 and every["served"] == 40
    assert every["energy_dynamic_j"] == pytest.approx(40 * e_req, rel=1e-9)
    assert abs(ev["energy_dynamic_j"] / every["energy_dynamic_j"] - 1.0) > 0.4


def test_a_third_served_admits_every_third_arrival():
    inst = _instance(0.3)
    coeffs, r = _config(inst)
    plan = _plan(r, 0.1, 0.2)  # a = 1/3
    res = replay(plan, inst, _trace(30), PLAN, coeffs=coeffs)
    # floor((k+1)/3) > floor(k/3) for k = 2, 5, 8, ...
    assert list(np.flatnonzero(res.requests["admitted"].to_numpy())) == list(range(2, 30, 3))
    assert res.totals["energy_dynamic_j"] == pytest.approx(10 * _request_j(r), rel=1e-9)


def test_nothing_unserved_admits_everything_and_a_class_without_rows_nothing():
    coeffs, r = _config(INST)
    trace = trace_of([(1.0, S_IN, S_OUT, "a"), (2.0, 100, 4, "b"), (3.0, S_IN, S_OUT, "a")])
    res = replay(_plan(r, 0.4, 0.0), INST, trace, PLAN, coeffs=coeffs)
    assert list(res.requests["admitted"]) == [True, False, True]  # b has no row: nothing planned for it
    default = replay(_plan(r, 0.4, 0.0), INST, trace, coeffs=coeffs)
    assert "admitted" not in default.requests.columns and default.totals["rejected"] == 0
    assert default.meta["options"]["admission"] == "all"


def test_unserved_beside_rows_without_a_rate_is_refused():
    coeffs, r = _config(INST)
    plan = _plan(r, 0.2, 0.2)
    del plan["allocations"][0]["rate_rps"]
    with pytest.raises(InputError, match="lack rate_rps"):
        replay(plan, INST, _trace(4), PLAN, coeffs=coeffs)
    replay(plan, INST, _trace(4), coeffs=coeffs)  # the default admission does not need the share


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"epoch": 0, "bucket": "zz", "unserved_rps": 0.1}, "unserved[0].bucket: unknown class 'zz'"),
        ({"epoch": 0, "bucket": "a", "unserved_rps": -1.0}, "unserved[0].unserved_rps: -1.0 is not a finite number"),
        ({"epoch": 0, "unserved_rps": 0.1}, "unserved[0]: missing bucket"),
    ],
)
def test_bad_unserved_rows_are_named(entry, needle):
    coeffs, r = _config(INST)
    plan = _plan(r, 0.2, 0.0)
    plan["unserved"] = [entry]
    with pytest.raises(InputError) as err:
        replay(plan, INST, _trace(4), PLAN, coeffs=coeffs)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_unknown_admission_is_refused():
    with pytest.raises(InputError, match="admission must be one of all, plan"):
        ReplayOptions(admission="some")
