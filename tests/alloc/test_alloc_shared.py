"""Shared vPods (the pooled variant, ``formulations/allocation.md`` "Shared vPods"): interference
between classes keeps them apart by hand-computed cases; pooled is never worse than dedicated, on
random instances with latency targets, cross-checked between HiGHS and OR-Tools."""

from __future__ import annotations

import random

import pytest

from neuscale_opt.alloc.context import prepare, shared_groups
from neuscale_opt.alloc.evaluate import evaluate
from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import solve_milp

T = 100.0


def _two_classes(short_ttft_slo_s: float, long_tpot_s: float = 0.02):
    """One vPod type 'v' (100 W): class 'short' (100-token prompts, 10 req/s per vPod, TTFT 0.05 s)
    and class 'long' (5000-token prompts, 2 req/s per vPod, prefill 0.3 s); each class alone loads
    half a vPod."""
    rows = [
        vpod("g", "short", rate=10, static_w=100, ttft_s=0.05, tpot_s=0.02, name="v"),
        vpod("g", "long", rate=2, static_w=100, ttft_s=0.3, tpot_s=long_tpot_s, name="v"),
    ]
    return make_coefficients(
        rows,
        {"short": 5.0, "long": 1.0},
        slo={
            "short": {"ttft_slo_s": short_ttft_slo_s, "tpot_slo_s": 0.04},
            "long": {"ttft_slo_s": 2.0, "tpot_slo_s": 0.1},
        },
        tokens={"short": (100.0, 50.0), "long": (5000.0, 50.0)},
        epoch_s=T,
    )


def test_long_prompts_that_break_short_ttft_are_kept_apart():
    # sharing: the short prompt may wait for one long prefill, 0.05 + 0.3 = 0.35 s > 0.2 s target
    c = _two_classes(short_ttft_slo_s=0.2)
    sol = solve_milp(c, PlanOptions(variant="pooled"))
    assert sol.status == "optimal"
    # two half-loaded vPods, one per class: 2 x 100 W x 100 s
    assert sol.objective_value == pytest.approx(2 * 100 * T)
    groups = dict(zip(sol.allocations["bucket"], sol.allocations["vpod_group"], strict=True))
    assert groups == {"short": "v", "long": "v/long"}
    assert evaluate(sol, c).feasible


def test_classes_share_when_the_stall_fits():
    # 0.35 s <= 0.5 s: one vPod carries both halves (load 5/10 + 1/2 = 1)
    c = _two_classes(short_ttft_slo_s=0.5)
    sol = solve_milp(c, PlanOptions(variant="pooled"))
    assert sol.objective_value == pytest.approx(1 * 100 * T)
    assert set(sol.allocations["vpod_group"]) == {"v"}
    # dedicated cannot: one vPod per class
    assert solve_milp(c, PlanOptions(variant="dedicated")).objective_value == pytest.approx(2 * 100 * T)


def test_shared_decode_step_breaks_a_tight_tpot():
    # the long class's 0.05 s TPOT (its long contexts) exceeds the short class's 0.04 s target
    c = _two_classes(short_ttft_slo_s=0.5, long_tpot_s=0.05)
    sol = solve_milp(c, PlanOptions(variant="pooled"))
    assert sol.objective_value == pytest.approx(2 * 100 * T)


def test_clusters_are_consecutive_by_prompt_length():
    # s and m share (0.05 + 0.1 <= 0.2); l's 0.5 s prefill breaks s (0.55 > 0.2) -> {s, m}, {l}
    rows = [
        vpod("g", "s", rate=10, ttft_s=0.05, tpot_s=0.01, name="v"),
        vpod("g", "m", rate=5, ttft_s=0.1, tpot_s=0.01, name="v"),
        vpod("g", "l", rate=1, ttft_s=0.5, tpot_s=0.01, name="v"),
    ]
    c = make_coefficients(
        rows,
        {"s": 1.0, "m": 1.0, "l": 1.0},
        slo={b: {"ttft_slo_s": t} for b, t in {"s": 0.2, "m": 0.7, "l": 3.0}.items()},
        tokens={"s": (100.0, 10.0), "m": (1000.0, 10.0), "l": (8000.0, 10.0)},
    )
    got = dict(zip(c.configs["bucket"], shared_groups(c.configs, c.buckets), strict=True))
    assert got == {"s": "v", "m": "v", "l": "v/l"}


def _random_with_slo(seed: int):
    """Random vPod types with per-class rates, prefill times and TPOTs; SLO targets that some
    co-served pairs break."""
    rng = random.Random(seed)
    classes = {"a": (200.0, 0.3), "b": (1500.0, 0.8), "c": (6000.0, 2.5)}  # prompt tokens, TTFT target
    rows = []
    for t in range(4):
        chip = rng.choice(["old", "new"])
        chips = rng.choice([1, 2])
        static = rng.choice([50.0, 100.0, 200.0]) * chips
        speed = rng.choice([0.5, 1.0, 2.0])
        for b, (tokens, _) in classes.items():
            rows.append(
                vpod(
                    chip,
                    b,
                    rate=rng.choice([2.0, 3.0, 5.0, 8.0]) / (1 + tokens / 2000),
                    dyn_j=rng.choice([0.5, 1.0, 4.0]),
                    static_w=static,
                    price=static / 100,
                    chips=chips,
                    ttft_s=tokens / 10000 / speed,
                    tpot_s=rng.choice([0.01, 0.02, 0.03]),
                    name=f"t{t}",
                )
            )
    demand = {b: rng.choice([0.5, 1.5, 4.0, 7.0]) for b in classes}
    return make_coefficients(
        rows,
        demand,
        inventory={"old": 32, "new": rng.choice([4, 8])},
        slo={b: {"ttft_slo_s": s, "tpot_slo_s": 0.025} for b, (_, s) in classes.items()},
        tokens={b: (tok, 100.0) for b, (tok, _) in classes.items()},
        epoch_s=T,
        util_cap=0.9,
    )


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("objective", ["energy", "cost"])
def test_pooled_never_worse_than_dedicated(seed, objective):
    c = _random_with_slo(seed)
    opts = PlanOptions(objective=objective, allow_unserved=True)
    ded = solve_milp(c, opts.replace(variant="dedicated"))
    pooled = solve_milp(c, opts.replace(variant="pooled"))
    assert ded.status == pooled.status == "optimal"
    assert pooled.objective_value <= ded.objective_value * (1 + 1e-9) + 1e-9
    other = solve_milp(c, opts.replace(variant="pooled", backend="ortools"))
    assert other.objective_value == pytest.approx(pooled.objective_value, rel=1e-6, abs=1e-9)
    ev = evaluate(pooled, c)
    assert ev.feasible, ev.violations
    # every shared group keeps the SH rules: no group serves a class whose TTFT the longest
    # co-served prompt would break
    cfg = prepare(c, opts).configs.set_index("config_id")
    slo = c.buckets.set_index("bucket")
    for _g, part in pooled.allocations.groupby("vpod_group"):
        rows = cfg.loc[part["config_id"]]
        longest = rows.loc[rows["bucket"].map(slo["input_tokens"]).idxmax()]
        for cid, r in rows.iterrows():
            wait = 0.0 if cid == longest.name else float(longest["ttft_s"])
            assert float(r["ttft_s"]) + wait <= float(slo.at[r["bucket"], "ttft_slo_s"]) * (1 + 1e-9)
