"""Properties on random instances: heuristics never beat the MILP, the MILP never beats its bound
nor the unlimited reference, evaluate agrees with the solver, backends agree, the dominance presolve
is exact, plans are deterministic, pooled is never worse than dedicated."""

from __future__ import annotations

import pytest
from alloc_random import random_instance
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuscale_opt.alloc.evaluate import evaluate
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import greedy, homogeneous, plan, solve_milp, unlimited

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
options_st = st.builds(
    PlanOptions,
    objective=st.sampled_from(["energy", "cost", "carbon"]),
    variant=st.sampled_from(["dedicated", "pooled"]),
    allow_unserved=st.booleans(),
)


@SETTINGS
@given(seed=st.integers(0, 10_000), opts=options_st, epochs=st.integers(1, 2))
def test_plan_properties(seed, opts, epochs):
    c = random_instance(seed, n_types=4, n_classes=3, epochs=epochs)
    milp = solve_milp(c, opts)
    if milp.status == "infeasible":
        assert milp.diagnosis and "\n" not in milp.diagnosis
        assert not opts.allow_unserved
        return
    assert milp.status == "optimal"
    tol = 1e-6 * max(1.0, abs(milp.objective_value))
    assert milp.objective_value >= milp.bound - tol
    ev = evaluate(milp, c)
    assert ev.feasible, ev.violations
    assert ev.objective_value == pytest.approx(milp.objective_value, rel=1e-6, abs=1e-9)
    for heuristic in (greedy(c, opts), homogeneous(c, opts)):
        if heuristic.has_plan:
            assert evaluate(heuristic, c).feasible
            assert heuristic.objective_value >= milp.objective_value - tol
    ref = unlimited(c, opts)
    assert evaluate(ref, c.with_unlimited_inventory()).feasible
    assert ref.objective_value <= milp.objective_value + tol
    other = solve_milp(c, opts.replace(backend="ortools"))
    assert other.objective_value == pytest.approx(milp.objective_value, rel=1e-6, abs=1e-9)
    unpruned = solve_milp(c, opts.replace(prune_dominated=False))
    assert unpruned.objective_value == pytest.approx(milp.objective_value, rel=1e-6, abs=1e-9)
    if opts.variant == "dedicated":
        pooled = solve_milp(c, opts.replace(variant="pooled"))
        assert pooled.objective_value <= milp.objective_value + tol


@pytest.mark.parametrize("method", ["milp", "greedy", "homogeneous", "unlimited"])
def test_plan_is_deterministic(method):
    c = random_instance(3, n_types=5, n_classes=3, epochs=2)
    opts = PlanOptions(objective="energy", variant="pooled", allow_unserved=True)
    a = plan(c, opts, method).to_json(timing=False)
    b = plan(c, opts, method).to_json(timing=False)
    assert a == b
    assert '"allocations"' in a


def test_inputs_are_not_modified():
    c = random_instance(5, n_types=4, n_classes=3)
    before = (c.configs.copy(), c.demand.copy(), c.chips.copy())
    for method in ("milp", "greedy", "homogeneous", "unlimited"):
        plan(c, PlanOptions(allow_unserved=True), method)
    for df, old in zip((c.configs, c.demand, c.chips), before, strict=True):
        assert df.equals(old)
