"""Canonical instances against their hand-computed optima (``instances/alloc/expected.json``),
on both backends, with the independent evaluator's totals; the Mélange example against an
enumeration of its own formulation."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from alloc_support import EXPECTED, INSTANCES, case_inputs

from neuscale_opt.alloc.evaluate import evaluate
from neuscale_opt.alloc.melange import bucket_name, load_melange, melange_coefficients
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import plan

CASES = EXPECTED["cases"]
RTOL = EXPECTED["rtol"]

_PARAMS = [pytest.param(c, id=c["id"]) for c in CASES]


@pytest.mark.parametrize("backend", ["highs", "ortools"])
@pytest.mark.parametrize("case", _PARAMS)
def test_canonical_optimum(case, backend):
    coeffs, opts = case_inputs(case)
    sol = plan(coeffs, opts.replace(backend=backend), case["method"])
    assert sol.status == case["status"]
    if case["status"] == "infeasible":
        assert sol.diagnosis and "\n" not in sol.diagnosis
        return
    assert sol.objective_value == pytest.approx(case["objective_value"], rel=RTOL)
    assert sol.totals["chips_by_version"] == case["chips_by_version"]
    assert sol.totals["unserved_rps"] == pytest.approx(case["unserved_rps"], abs=1e-6)
    ref = coeffs.with_unlimited_inventory() if case["method"] == "unlimited" else coeffs
    ev = evaluate(sol, ref)
    assert ev.feasible, ev.violations
    # tables with the load-dependent energy columns: the evaluator charges weight streaming at each
    # group's own load (formulation E8), never below the MILP's design-load objective
    assert ev.objective_value == pytest.approx(case.get("evaluated_objective_value", case["objective_value"]), rel=RTOL)
    assert ev.objective_value >= sol.objective_value * (1 - RTOL)
    if sol.bound == sol.bound:  # MILP: the proven bound closes the gap
        assert sol.bound == pytest.approx(case["objective_value"], rel=RTOL)


def test_strict_oversubscribed_diagnosis_names_class_generation_and_shortfall():
    case = next(c for c in CASES if c["id"] == "oversubscribed/milp/strict")
    coeffs, opts = case_inputs(case)
    sol = plan(coeffs, opts, "milp")
    assert "'chat'" in sol.diagnosis and "gen1 40" in sol.diagnosis and "short by 10 req/s" in sol.diagnosis


def _melange_enumeration(cfg) -> float:
    """Mélange's ILP (melange/solver.py): each slice to one GPU type, integer GPU counts covering
    the summed loads; minimised by enumerating every assignment of the slices."""
    rows, cols = len(cfg.workload_distribution), len(cfg.workload_distribution[0])
    gpus = list(cfg.gpu_info)
    slices = []
    for i in range(rows):
        for j in range(cols):
            rate = cfg.workload_distribution[i][j] * cfg.total_request_rate
            slices.extend([(i, j, rate / cfg.slice_factor)] * cfg.slice_factor)
    best = math.inf
    for assign in itertools.product(range(len(gpus)), repeat=len(slices)):
        load = [0.0] * len(gpus)
        ok = True
        for (i, j, r), g in zip(slices, assign, strict=True):
            tput = cfg.gpu_info[gpus[g]].tputs[i][j]
            if r > 0 and tput <= 0:
                ok = False
                break
            load[g] += r / tput if r > 0 else 0.0
        if ok:
            best = min(best, sum(math.ceil(x - 1e-9) * cfg.gpu_info[gpus[g]].cost for g, x in enumerate(load)))
    return best


def test_melange_shipped_example_matches_enumeration():
    cfg = load_melange(INSTANCES / "melange_example.json")
    coeffs = melange_coefficients(cfg)
    opts = PlanOptions(objective="cost", variant="pooled", util_cap=1.0, slice_factor=cfg.slice_factor)
    sol = plan(coeffs, opts, "milp")
    assert sol.objective_value == pytest.approx(_melange_enumeration(cfg), rel=1e-9)
    assert sol.objective_value == pytest.approx(6.70, rel=1e-9)


@pytest.mark.parametrize("slice_factor", [1, 2])
def test_melange_random_configs_match_enumeration(slice_factor):
    import random

    rng = random.Random(7 + slice_factor)
    for _ in range(4):
        data = {
            "gpu_info": {
                g: {"cost": round(rng.uniform(0.5, 4), 2), "tputs": [[rng.choice([1, 2, 5, 10, 20]) for _ in range(2)]]}
                for g in ("X", "Y")
            },
            "workload_distribution": [[0.4, 0.6]],
            "total_request_rate": rng.choice([7.0, 13.0, 30.0]),
            "slice_factor": slice_factor,
        }
        from neuscale_opt.alloc.melange import MelangeConfig

        cfg = MelangeConfig.model_validate(data)
        opts = PlanOptions(objective="cost", variant="pooled", util_cap=1.0, slice_factor=slice_factor)
        for backend in ("highs", "ortools"):
            sol = plan(melange_coefficients(cfg), opts.replace(backend=backend), "milp")
            assert sol.objective_value == pytest.approx(_melange_enumeration(cfg), rel=1e-9), json.dumps(data)


def test_melange_bucket_names_and_demand():
    cfg = load_melange(INSTANCES / "melange_example.json")
    c = melange_coefficients(cfg)
    dem = dict(zip(c.demand["bucket"], c.demand["rate_rps"], strict=True))
    assert dem == pytest.approx(
        {bucket_name(0, 0): 6.0, bucket_name(0, 1): 3.0, bucket_name(1, 0): 15.0, bucket_name(1, 1): 6.0}
    )
    assert set(c.chips["healthy_chips"]) == {math.inf}
