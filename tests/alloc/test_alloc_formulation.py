"""The formulation document and the Pyomo model name the same components."""

from __future__ import annotations

import itertools
import re

import pytest
from alloc_support import ROOT
from pyomo.repn import generate_standard_repn

from neuscale_opt.alloc import model as model_mod
from neuscale_opt.alloc.context import build_context
from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.alloc.model import CONSTRAINT_BUILDERS, build_model, component_ids
from neuscale_opt.alloc.options import PlanOptions

DOC = (ROOT / "formulations" / "allocation.md").read_text()
DOC_IDS: dict[str, set[str]] = {}
for name, kind in re.findall(r"^#### `(\w+)` \((\w+)\)", DOC, flags=re.M):
    DOC_IDS.setdefault(kind, set()).add(name)


def _coeffs():
    rows = [
        vpod("g1", "a", rate=10, dyn_j=1, static_w=50, price=1, chips=2, name="t1"),
        vpod("g1", "b", rate=4, dyn_j=3, static_w=50, price=1, chips=2, name="t1"),
        vpod("g2", "a", rate=6, dyn_j=2, static_w=20, price=0.5, chips=1, name="t2"),
        vpod("g1", "a", rate=3, dyn_j=1, static_w=10, price=1, chips=1, phase="prefill", kv_bytes=1e6, name="p1"),
        vpod("g2", "a", rate=5, dyn_j=1, static_w=10, price=1, chips=1, phase="decode", kv_bytes=1e6, name="d1"),
        vpod("g1", "b", rate=3, dyn_j=1, static_w=10, price=1, chips=1, phase="prefill", kv_bytes=1e6, name="p1"),
        vpod("g2", "b", rate=5, dyn_j=1, static_w=10, price=1, chips=1, phase="decode", kv_bytes=1e6, name="d1"),
    ]
    return make_coefficients(rows, {"a": 7.0, "b": 2.0}, inventory={"g1": 8})


def _all_variant_models():
    c = _coeffs()
    for variant, serving, unserved, slices in itertools.product(
        ("dedicated", "pooled"), ("colocated", "disaggregated"), (False, True), (None, 2)
    ):
        opts = PlanOptions(variant=variant, serving=serving, allow_unserved=unserved, slice_factor=slices)
        yield opts, build_model(build_context(c, opts, 0))


def test_document_lists_every_kind():
    assert set(DOC_IDS) == {"set", "variable", "constraint", "expression", "objective"}


@pytest.mark.parametrize("kind", ["set", "variable", "constraint", "expression", "objective"])
def test_model_components_match_document(kind):
    built: set[str] = set()
    for _, m in _all_variant_models():
        built |= component_ids(m)[kind]
    assert built == DOC_IDS[kind]


def test_each_constraint_builder_is_named_after_its_component():
    names = {b.__name__.removeprefix("add_") for b in CONSTRAINT_BUILDERS}
    # unserved_slice_assignment is built by add_slice_assignment (documented there)
    assert names == DOC_IDS["constraint"] - {"unserved_slice_assignment"}
    for b in CONSTRAINT_BUILDERS:
        assert b.__doc__.lstrip().startswith("**Constraint Name**: " + b.__name__.removeprefix("add_"))
        assert f"`{b.__name__}`" in DOC
    assert hasattr(model_mod, "add_objective")


def test_builders_skip_empty_families():
    c = _coeffs()  # every generation except g1 is unlimited: one chip_inventory row only
    m = build_model(build_context(c.with_unlimited_inventory(), PlanOptions(), 0))
    assert "chip_inventory" not in component_ids(m)["constraint"]
    m = build_model(build_context(c, PlanOptions(), 0))
    assert list(m.chip_inventory.keys()) == ["g1"]


def test_capacity_row_pooled_sums_fractional_loads():
    c = _coeffs()
    m = build_model(build_context(c, PlanOptions(variant="pooled"), 0))
    repn = generate_standard_repn(m.vpod_capacity["t1"].body)
    coefs = {v.name: round(k, 9) for v, k in zip(repn.linear_vars, repn.linear_coefs, strict=True)}
    # u = 1: 1/10 for class a, 1/4 for class b, -1 for the vPod count
    assert coefs == {"rate[t1|a]": 0.1, "rate[t1|b]": 0.25, "n_vpods[t1]": -1.0}
