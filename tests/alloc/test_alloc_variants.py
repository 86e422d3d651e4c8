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


def _diagnosis_stopped_by(monkeypatch, limit: str):
    """The diagnosis search (unserved allowed, node-limited) ends at ``limit`` with its incumbent."""
    import neuscale_opt.alloc.plan as plan_mod

    real = plan_mod.solve_model

    def stopped(m, options):
        res = real(m, options)
        if options.allow_unserved and options.node_limit is not None and res.status == "optimal":
            return dataclasses.replace(res, status=limit, stopped_by=limit)
        return res

    monkeypatch.setattr(plan_mod, "solve_model", stopped)
    return plan_mod


def test_unproven_joint_diagnosis_says_so_and_gives_the_lp_bound(monkeypatch):
    plan_mod = _diagnosis_stopped_by(monkeypatch, "work_limit")
    sol = solve_milp(_two_chip_vpods_case(), PlanOptions(objective="cost"))
    assert sol.status == "infeasible"
    line = sol.diagnosis
    assert "\n" not in line
    n = plan_mod.DIAGNOSIS_NODE_LIMIT
    assert f"found in {n} nodes" in line and f"work limit of {n} nodes, not proven minimal" in line
    assert "6 req/s unserved" in line and "at least 5.333 req/s short" in line  # 16/3, hand-solved above
    assert "may differ between machines" not in line


def test_joint_diagnosis_stopped_by_the_clock_says_it_may_differ(monkeypatch):
    plan_mod = _diagnosis_stopped_by(monkeypatch, "time_limit")
    line = solve_milp(_two_chip_vpods_case(), PlanOptions(objective="cost")).diagnosis
    assert f"wall-clock safety net of {plan_mod.DIAGNOSIS_TIME_LIMIT_S:g} s (may differ between machines)" in line
    assert "not proven minimal" in line and "at least 5.333 req/s short" in line


def test_diagnosis_limits_are_the_node_count_first_and_never_above_the_run():
    from neuscale_opt.alloc.plan import DIAGNOSIS_NODE_LIMIT, DIAGNOSIS_TIME_LIMIT_S, diagnosis_limits

    assert diagnosis_limits(PlanOptions()) == (DIAGNOSIS_NODE_LIMIT, DIAGNOSIS_TIME_LIMIT_S)
    assert diagnosis_limits(PlanOptions(node_limit=None, time_limit_s=None)) == (
        DIAGNOSIS_NODE_LIMIT,
        DIAGNOSIS_TIME_LIMIT_S,
    )
    assert diagnosis_limits(PlanOptions(node_limit=7, time_limit_s=2.5)) == (7, 2.5)


def test_joint_diagnosis_is_the_same_text_whatever_the_clock(monkeypatch):
    # the same over-subscribed input gives the same line, run again and under a tighter (not binding)
    # clock; the diagnosis search is handed the node limit, the clock only as its safety net
    import neuscale_opt.alloc.plan as plan_mod

    seen = []
    real = plan_mod.solve_model

    def spy(m, options):
        if options.allow_unserved:
            seen.append((options.node_limit, options.time_limit_s))
        return real(m, options)

    monkeypatch.setattr(plan_mod, "solve_model", spy)
    c = _two_chip_vpods_case()
    lines = [solve_milp(c, PlanOptions(objective="cost", time_limit_s=t)).diagnosis for t in (1800.0, 1800.0, 30.0)]
    assert lines[0] == lines[1] == lines[2]
    assert "6 req/s unserved" in lines[0] and "not proven" not in lines[0]
    assert seen == [(plan_mod.DIAGNOSIS_NODE_LIMIT, plan_mod.DIAGNOSIS_TIME_LIMIT_S)] * 2 + [
        (plan_mod.DIAGNOSIS_NODE_LIMIT, 30.0)
    ]


def _melange_oversubscribed():
    # 6 x 6 classes on four GPU types (Melange-sized), slice factor 8, 2-6 GPUs of each type for
    # 600 req/s: every class fits alone, not all together; the diagnosis search needs hundreds of
    # nodes to prove its optimum, so a small node limit stops it for real
    from neuscale_opt.alloc.melange import MelangeConfig, melange_coefficients

    speed = {"L4": (0.7, 1.0, 0.55), "A10G": (1.01, 1.3, 0.6), "A100-80GB": (3.67, 4.0, 0.85)}
    speed["H100"] = (7.516, 7.0, 0.9)  # (USD/h, relative speed, decay per size step)
    tputs = {
        g: [[round(b * 40 * d ** (i + 1.5 * j) / (1 + 0.2 * i), 4) for j in range(6)] for i in range(6)]
        for g, (_, b, d) in speed.items()
    }
    gpu_info = {g: {"cost": p, "tputs": tputs[g]} for g, (p, _, _) in speed.items()}
    w = [[(i + 1) * (6 - j) for j in range(6)] for i in range(6)]
    tot = sum(map(sum, w))
    cfg = MelangeConfig.model_validate(
        {
            "gpu_info": gpu_info,
            "workload_distribution": [[x / tot for x in r] for r in w],
            "total_request_rate": 600.0,
            "slice_factor": 8,
        }
    )
    c = melange_coefficients(cfg)
    chips = c.chips.copy()
    chips["healthy_chips"] = [6.0, 6.0, 6.0, 2.0]
    return dataclasses.replace(c, chips=chips)


def test_joint_diagnosis_cut_by_the_node_limit_is_deterministic_and_bounded(monkeypatch):
    import re

    import neuscale_opt.alloc.plan as plan_mod

    monkeypatch.setattr(plan_mod, "DIAGNOSIS_NODE_LIMIT", 2)
    c = _melange_oversubscribed()
    opts = PlanOptions(objective="cost", util_cap=1.0, slice_factor=8)
    a, b = (solve_milp(c, opts).diagnosis for _ in range(2))
    assert a == b and "\n" not in a
    assert "found in 2 nodes" in a and "work limit of 2 nodes, not proven minimal" in a
    found = float(re.search(r"leaves ([0-9.]+) req/s unserved", a).group(1))
    proven = float(re.search(r"proves at least ([0-9.]+) req/s short", a).group(1))
    # the LP bound, cross-checked by the other solver, is below what the cut search's plan leaves
    ctx = build_context(c, resolve_options(c, opts.replace(backend="ortools")), 0)
    assert sum(shortfall_bound(ctx).values()) == pytest.approx(proven, rel=1e-3)
    assert proven <= found + 1e-3
