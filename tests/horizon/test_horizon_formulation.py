"""The formulation document and the Pyomo model name the same components, and every builder
creates the component it is named after."""

from __future__ import annotations

import re

from horizon_support import OPTS, ROOT, one_class

from neuscale_opt.horizon.context import State, build_window
from neuscale_opt.horizon.model import CONSTRAINT_BUILDERS, build_model, component_ids
from neuscale_opt.horizon.params import HorizonParams
from neuscale_opt.horizon.rolling import actual_demand

DOC = (ROOT / "formulations" / "horizon.md").read_text()
DOC_IDS: dict[str, set[str]] = {}
for name, kind in re.findall(r"^#### `(\w+)` \((\w+)\)", DOC, flags=re.M):
    DOC_IDS.setdefault(kind, set()).add(name)


def _full_model():
    """A window with a carried state, a hold window and a failure, so that every family is built."""
    coeffs = one_class([20.0, 20.0, 20.0], inventory={"x": 5, "y": 10}, second=True)
    params = HorizonParams(create_energy_j_per_chip=10.0, delete_energy_j_per_chip=5.0)
    inv = {("x", 1): 5.0, ("x", 2): 3.0, ("y", 1): 10.0, ("y", 2): 10.0}
    state = State(
        epoch=0,
        n={"x:1:tp1:b1:colocated|A": 2},
        loads={("x:1:tp1:b1:colocated|A", 0): 2.0},
        inventory={"x": 5.0, "y": 10.0},
    )
    ctx = build_window(coeffs, OPTS, params, [1, 2], actual_demand(coeffs), inv, state)
    return build_model(ctx)


def test_document_and_model_name_the_same_components():
    ids = component_ids(_full_model())
    for kind in ("set", "variable", "constraint", "expression", "objective"):
        assert ids[kind] == DOC_IDS.get(kind, set()), kind


def test_every_builder_creates_its_component():
    names = {b.__name__.removeprefix("add_") for b in CONSTRAINT_BUILDERS}
    assert names == DOC_IDS["constraint"]
    ids = component_ids(_full_model())
    assert names <= ids["constraint"]


def test_without_coupling_only_the_epoch_families_remain():
    coeffs = one_class([20.0, 20.0])
    ctx = build_window(coeffs, OPTS, HorizonParams(coupling=False), [0, 1], actual_demand(coeffs), {})
    ids = component_ids(build_model(ctx))
    assert ids["constraint"] == {"demand_coverage", "vpod_capacity"}
