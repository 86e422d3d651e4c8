"""Disaggregated serving, several epochs, time limits and the infeasibility diagnosis, by hand."""

from __future__ import annotations

import dataclasses
import math

import pytest

from neuscale_opt.alloc.context import build_context, resolve_options
from neuscale_opt.alloc.evaluate import evaluate
from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import greedy, shortfall_bound, solve_milp
from neuscale_opt.errors import InputError

T = 100.0


def _disagg():
    """Class q: prefill fast on 'new', decode cheap on 'old'; KV 1 GB per request over DCN."""
    kv = 1e9
    rows = [
        vpod("new", "q", rate=4, dyn_j=10, static_w=100, chips=1, phase="prefill", kv_bytes=kv, ttft_s=0.1, name="np"),
        vpod("old", "q", rate=2, dyn_j=30, static_w=100, chips=1, phase="prefill", kv_bytes=kv, ttft_s=0.1, name="op"),
        vpod("new", "q", rate=2, dyn_j=20, static_w=100, chips=1, phase="decode", kv_bytes=kv, tpot_s=0.01, name="nd"),
        vpod("old", "q", rate=4, dyn_j=5, static_w=50, chips=1, phase="decode", kv_bytes=kv, tpot_s=0.01, name="od"),
        vpod(
            "new", "q", rate=1, dyn_j=50, static_w=100, chips=1, phase="colocated", ttft_s=0.1, tpot_s=0.01, name="nc"
        ),
    ]
    return make_coefficients(
        rows,
        {"q": 8.0},
        slo={"q": {"ttft_slo_s": 0.5, "tpot_slo_s": 0.05}},
        dcn_bytes_per_s={"new": 10e9, "old": 4e9},
        dcn_energy_j_per_byte={"new": 1e-9, "old": 2e-9},
        epoch_s=T,
        pue=1.0,
    )


def test_disaggregated_hand_solved():
    c = _disagg()
    sol = solve_milp(c, PlanOptions(serving="disaggregated"))
    # prefill 'np' (transfer 1 GB at min(10, 4) GB/s = 0.25 s -> TTFT 0.35 <= 0.5; link rate 10 req/s):
    # 2 vPods; decode 'od' (link 4 req/s caps its rate at 4): 2 vPods.
    # energy = T * [8 * (10 + 1 J send) + 8 * (5 + 2 J receive)] + T * (2 * 100 + 2 * 50) = 44400 J
    assert sol.status == "optimal"
    assert sol.objective_value == pytest.approx(44400.0, rel=1e-9)
    rows = {(r.phase, r.chip): (r.n_vpods, r.rate_rps) for r in sol.allocations.itertuples()}
    assert rows == {("prefill", "new"): (2, 8.0), ("decode", "old"): (2, 8.0)}
    assert evaluate(sol, c).objective_value == pytest.approx(44400.0, rel=1e-9)
    # colocated uses only the colocated vPod: 8 vPods, 8 * 100 * T + 8 * 50 * T
    colo = solve_milp(c, PlanOptions(serving="colocated"))
    assert colo.objective_value == pytest.approx(8 * 100 * T + 8 * 50 * T)


def test_kv_transfer_time_excludes_slow_prefill():
    c = _disagg()
    # with a TTFT target of 0.3 s the 0.25 s transfer (slowest decode link 4 GB/s) makes np miss it
    c2 = make_coefficients(
        c.configs.to_dict("records"),
        {"q": 8.0},
        slo={"q": {"ttft_slo_s": 0.3, "tpot_slo_s": 0.05}},
        dcn_bytes_per_s={"new": 10e9, "old": 4e9},
        epoch_s=T,
        pue=1.0,
    )
    sol = solve_milp(c2, PlanOptions(serving="disaggregated"))
    assert sol.status == "infeasible"
    assert "'q' (prefill)" in sol.diagnosis and "no configuration meeting its SLO" in sol.diagnosis


def test_epochs_are_independent_and_chips_peak():
    rows = [vpod("g", "a", rate=10, static_w=100, chips=2, price=1.0)]
    c = make_coefficients(rows, {(0, "a"): 25.0, (1, "a"): 5.0}, inventory={"g": 8}, epoch_s=T)
    sol = solve_milp(c, PlanOptions(objective="cost"))
    assert sol.status == "optimal"
    n = dict(zip(sol.allocations["epoch"], sol.allocations["n_vpods"], strict=True))
    assert n == {0: 3, 1: 1}
    assert sol.totals["chips_by_version"] == {"g": 6}
    assert sol.objective_value == pytest.approx(4 * T / 3600)
    assert [e["epoch"] for e in sol.epochs] == [0, 1]


def test_joint_shortage_diagnosis():
    rows = [vpod("g", "a", rate=10, chips=1, price=1.0), vpod("g", "b", rate=10, chips=1, price=1.0)]
    c = make_coefficients(rows, {"a": 30.0, "b": 30.0}, inventory={"g": 5})
    sol = solve_milp(c, PlanOptions(objective="cost"))
    assert sol.status == "infeasible"
    assert "together" in sol.diagnosis and "10 req/s unserved" in sol.diagnosis and "g fully used" in sol.diagnosis


def test_greedy_fails_over_to_next_generation():
    rows = [
        vpod("new", "a", rate=10, static_w=10, chips=1),
        vpod("old", "a", rate=5, static_w=40, chips=1),
    ]
    c = make_coefficients(rows, {"a": 30.0}, inventory={"new": 2, "old": 10})
    sol = greedy(c, PlanOptions())
    got = {r.chip: (r.n_vpods, r.rate_rps) for r in sol.allocations.itertuples()}
    assert got == {"new": (2, 20.0), "old": (2, 10.0)}


def test_time_limit_returns_incumbent_or_optimum():
    from alloc_random import random_instance

    c = random_instance(11, n_types=6, n_classes=4)
    sol = solve_milp(c, PlanOptions(allow_unserved=True, time_limit_s=5.0))
    assert sol.status in ("optimal", "work_limit", "time_limit")
    assert math.isfinite(sol.gap) and sol.gap >= 0


def test_pooled_rejects_inconsistent_vpod_types():
    rows = [vpod("g", "a", rate=10, static_w=100, name="t"), vpod("g", "b", rate=10, static_w=50, name="t")]
    c = make_coefficients(rows, {"a": 1.0, "b": 1.0})
    with pytest.raises(InputError, match="vPod type 't'"):
        solve_milp(c, PlanOptions(variant="pooled"))


def test_bad_options_are_input_errors():
    with pytest.raises(InputError, match="objective"):
        PlanOptions(objective="speed")
    with pytest.raises(InputError, match="slice_factor"):
        PlanOptions(slice_factor=0)


def test_dominance_presolve_drops_only_dominated_groups():
    from neuscale_opt.alloc.context import build_context

    rows = [
        vpod("g", "a", rate=10, dyn_j=1, static_w=100, chips=2, name="big"),  # kept
        vpod("g", "a", rate=4, dyn_j=1, static_w=100, chips=2, name="weak"),  # dominated by big (m = 1)
        vpod("g", "a", rate=9, dyn_j=1, static_w=150, chips=4, name="fat"),  # dominated by 1 x big
        vpod("g", "a", rate=9, dyn_j=1, static_w=90, chips=4, name="lean"),  # a cheaper vPod: kept
        vpod("g", "a", rate=12, dyn_j=1, static_w=300, chips=4, name="pair"),  # 2 x big: 20 req/s, 200 W
        vpod("g", "a", rate=5, dyn_j=0.5, static_w=60, chips=1, name="small"),  # cheaper per request: kept
    ]
    c = make_coefficients(rows, {"a": 30.0})
    kept = set(build_context(c, PlanOptions(), 0).configs["vpod_type"])
    assert kept == {"big", "lean", "small"}
    full = set(build_context(c, PlanOptions(prune_dominated=False), 0).configs["vpod_type"])
    assert full == {"big", "weak", "fat", "lean", "pair", "small"}


def _two_chip_vpods_case():
    # one generation of 5 chips; vPods of 2 chips serving 10 req/s or of 3 chips serving 14 req/s, of
    # either class; 15 + 15 req/s. Each class fits alone (two 2-chip vPods, 20 req/s). Together whole
    # vPods serve at most 24 req/s (one of each: 5 chips), leaving 6 short; the LP relaxation (n <= 2 and
    # n <= 1 by the inventory bounds) fills 4 chips with 2-chip vPods (5 req/s per chip) and 1/3 of a
    # 3-chip vPod: 20 + 14/3 req/s, so at least 30 - 74/3 = 16/3 req/s are short for certain (hand-solved)
    rows = [vpod("g", b, rate=r, chips=k, price=1.0) for k, r in ((2, 10.0), (3, 14.0)) for b in ("a", "b")]
    return make_coefficients(rows, {"a": 15.0, "b": 15.0}, inventory={"g": 5})


def test_shortfall_lp_bound_hand_solved():
    c = _two_chip_vpods_case()
    ctx = build_context(c, resolve_options(c, PlanOptions(objective="cost")), 0)
    assert sum(shortfall_bound(ctx).values()) == pytest.approx(16 / 3)
    sol = solve_milp(c, PlanOptions(objective="cost"))
    assert sol.status == "infeasible"
    assert "together" in sol.diagnosis and "6 req/s unserved" in sol.diagnosis and "g fully used" in sol.diagnosis
    assert "not proven" not in sol.diagnosis  # solved to optimality within the diagnosis limit


def test_unproven_joint_diagnosis_says_so_and_gives_the_lp_bound(monkeypatch):
    import neuscale_opt.alloc.plan as plan_mod

    real = plan_mod.solve_model

    def stopped(m, options):  # the diagnosis search (time-limited, unserved allowed) ends at its limit
        res = real(m, options)
        if options.allow_unserved and options.time_limit_s is not None and res.status == "optimal":
            return dataclasses.replace(res, status="time_limit")
        return res

    monkeypatch.setattr(plan_mod, "solve_model", stopped)
    sol = solve_milp(_two_chip_vpods_case(), PlanOptions(objective="cost"))
    assert sol.status == "infeasible"
    line = sol.diagnosis
    assert "\n" not in line
    assert f"found in {plan_mod.DIAGNOSIS_TIME_LIMIT_S:g} s" in line and "not proven minimal" in line
    assert "6 req/s unserved" in line and "at least 5.333 req/s short" in line
