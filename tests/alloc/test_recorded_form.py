"""The rows the model builders record are the model Pyomo's own compiler reads: the solver door's
arrays (``solve.recorded_form``) equal ``solve.linear_form`` on every variant combination, and the
door compiles the model instead whenever it is no longer exactly as built."""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
import pytest
from test_alloc_formulation import MODELS, _coeffs

from neuscale_opt.alloc import solve as solve_mod
from neuscale_opt.alloc.context import build_context
from neuscale_opt.alloc.model import build_model
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import plan
from neuscale_opt.alloc.solve import linear_form, recorded_form


def _same(r, f) -> None:
    assert [id(v) for v in r.columns] == [id(v) for v in f.columns]
    for name in ("col_lo", "col_hi", "integer", "row_lo", "row_hi", "cost"):
        np.testing.assert_array_equal(getattr(r, name), getattr(f, name), err_msg=name)
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(r.a, name), getattr(f.a, name), err_msg=name)
    assert r.offset == f.offset


def test_recorded_rows_equal_the_compiled_model_for_every_variant():
    compared = 0
    for opts, m in MODELS:
        r = recorded_form(m)
        # rows the builders do not make (the placement block, epsilon bounds) leave it to the compiler
        assert (r is None) == (hasattr(m, "placement") or bool(opts.bounds))
        if r is not None:
            _same(r, linear_form(m))
            compared += 1
    assert compared == 16  # {dedicated, pooled} x {colocated, disaggregated} x unserved x slices


def _model(**opts):
    c = _coeffs().with_unlimited_inventory()  # no placement block
    return build_model(build_context(c, PlanOptions(slice_factor=2, allow_unserved=True, **opts), 0))


def test_a_changed_model_is_compiled_instead():
    m = _model()
    assert recorded_form(m) is not None
    next(iter(m.n_vpods.values())).fix(1)
    assert recorded_form(m) is None
    m = _model()
    next(iter(m.slice_assignment.values())).deactivate()
    assert recorded_form(m) is None
    m = _model()
    m.total_objective.deactivate()
    m.other = pyo.Objective(expr=sum(m.unserved[b] for b in m.BUCKETS))
    assert recorded_form(m) is None
    m = _model()
    m.extra = pyo.Constraint(expr=sum(m.n_vpods[g] for g in m.GROUPS) <= 3)
    assert recorded_form(m) is None
    # a relaxed copy keeps its rows: bounds and integrality are read from the variables
    m = _model(variant="pooled")
    pyo.TransformationFactory("core.relax_integer_vars").apply_to(m)
    r = recorded_form(m)
    assert r is not None and not r.integer.any()
    _same(r, linear_form(m))


def test_the_solver_door_solves_the_recorded_rows(monkeypatch):
    c = _coeffs().with_unlimited_inventory()
    opts = PlanOptions(variant="pooled", slice_factor=2)
    expected = plan(c, opts, "milp")

    def refuse(_m):
        raise AssertionError("compiled although the recorded rows were usable")

    monkeypatch.setattr(solve_mod, "linear_form", refuse)
    got = plan(c, opts, "milp")
    assert got.status == expected.status == "optimal"
    assert got.objective_value == pytest.approx(expected.objective_value, rel=1e-12)
    assert got.allocations.equals(expected.allocations)
