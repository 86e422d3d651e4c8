"""The ``slice_linking`` rows (``formulations/allocation.md``): present exactly where they are not
implied, a hand-solved tightening of the LP relaxation, and the same optimum as an enumeration of
Mélange's own ILP."""

from __future__ import annotations

import json
import random

import pyomo.environ as pyo
import pytest
from pyomo.repn import generate_standard_repn
from test_alloc_expected import _melange_enumeration

from neuscale_opt.alloc.context import build_context
from neuscale_opt.alloc.melange import MelangeConfig, melange_coefficients
from neuscale_opt.alloc.model import build_model
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import plan
from neuscale_opt.alloc.solve import solve_model


def _cfg(tputs: dict[str, tuple[float, list[list[float]]]], dist, rate: float, s: int = 1) -> MelangeConfig:
    return MelangeConfig.model_validate(
        {
            "gpu_info": {g: {"cost": c, "tputs": t} for g, (c, t) in tputs.items()},
            "workload_distribution": dist,
            "total_request_rate": rate,
            "slice_factor": s,
        }
    )


def _opts(s: int | None) -> PlanOptions:
    return PlanOptions(objective="cost", variant="pooled", util_cap=1.0, slice_factor=s)


def test_rows_only_where_capacity_does_not_imply_them():
    # bucket in0_out0: 2 req/s; in0_out1: 8 req/s. X serves 5 and 5, Y serves 1 and 20.
    cfg = _cfg({"X": (1.0, [[5, 5]]), "Y": (2.0, [[1, 20]])}, [[0.2, 0.8]], 10.0)
    ctx = build_context(melange_coefficients(cfg), _opts(2), 0)
    m = build_model(ctx)
    rows = {}
    for k, con in m.slice_linking.items():
        repn = generate_standard_repn(con.body)
        terms = zip(repn.linear_vars, repn.linear_coefs, strict=True)
        rows[k] = {(v.parent_component().local_name, v.index()): c for v, c in terms}
        assert con.upper == 0.0 and con.lower is None
    # c_k > d_b: X on in0_out0 (5 > 2) and Y on in0_out1 (20 > 8); X on in0_out1 (5 <= 8) and
    # Y on in0_out0 (1 <= 2) are implied by vpod_capacity
    assert rows == {
        "X:colocated|in0_out0": {("rate", "X:colocated|in0_out0"): 1.0, ("n_vpods", "X:colocated"): -2.0},
        "Y:colocated|in0_out1": {("rate", "Y:colocated|in0_out1"): 1.0, ("n_vpods", "Y:colocated"): -8.0},
    }
    for s in (None, 1):
        assert not hasattr(build_model(build_context(melange_coefficients(cfg), _opts(s), 0)), "slice_linking")


def _lp_bound(s: int, linked: bool) -> float:
    cfg = _cfg({"X": (1.0, [[10]])}, [[1.0]], 1.0, s)
    ctx = build_context(melange_coefficients(cfg), _opts(s), 0)
    m = build_model(ctx)
    pyo.TransformationFactory("core.relax_integer_vars").apply_to(m)
    if not linked:
        m.slice_linking.deactivate()
    return solve_model(m, ctx.options).objective


def test_rows_tighten_the_lp_relaxation_by_hand():
    # one class of 1 req/s, one type of capacity 10 at 1 USD/h: the relaxation holds n = 1/10 of a
    # vPod without the rows (0.1 USD/h), a whole one with r <= 1 * n (1 USD/h, the integer optimum)
    assert _lp_bound(2, linked=False) == pytest.approx(0.1)
    assert _lp_bound(2, linked=True) == pytest.approx(1.0)


@pytest.mark.parametrize("slice_factor", [2, 3])
def test_linked_model_matches_enumeration(slice_factor):
    rng = random.Random(11 * slice_factor)
    shape = (2, 2) if slice_factor == 2 else (1, 2)
    for _ in range(3):
        gpus = {
            g: (
                round(rng.uniform(0.5, 4), 2),
                [[rng.choice([1, 2, 5, 10, 20, 40]) for _ in range(shape[1])] for _ in range(shape[0])],
            )
            for g in ("X", "Y", "Z")
        }
        w = [[rng.choice([1, 2, 3]) for _ in range(shape[1])] for _ in range(shape[0])]
        tot = sum(map(sum, w))
        cfg = _cfg(gpus, [[v / tot for v in row] for row in w], rng.choice([3.0, 7.0, 13.0]), slice_factor)
        sol = plan(melange_coefficients(cfg), _opts(slice_factor), "milp")
        assert sol.status == "optimal"
        assert sol.objective_value == pytest.approx(_melange_enumeration(cfg), rel=1e-9), json.dumps(gpus)
