"""The formulation document and the Pyomo model name the same components, and every builder
creates the component it is named after."""

from __future__ import annotations

import re

import pyomo.environ as pyo
import pytest
from horizon_support import OPTS, ROOT, one_class
from pyomo.repn import generate_standard_repn

from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.horizon.context import State, build_window
from neuscale_opt.horizon.model import CONSTRAINT_BUILDERS, build_model, component_ids
from neuscale_opt.horizon.params import HorizonParams
from neuscale_opt.horizon.rolling import actual_demand

DOC = (ROOT / "formulations" / "horizon.md").read_text()
DOC_IDS: dict[str, set[str]] = {}
for name, kind in re.findall(r"^#### `(\w+)` \((\w+)\)", DOC, flags=re.M):
    DOC_IDS.setdefault(kind, set()).add(name)
#: Components built only when something is placed.
PLACEMENT_ONLY = {"set": {"PLACED_SHAPES"}, "expression": {"placed_vpods"}, "block": {"placement"}}
#: Components built only with a reserve forecaster (``HorizonParams.reserve_forecast``).
RESERVE_ONLY = {
    "set": {"RESERVE"},
    "variable": {"reserve_rate", "reserve_vpods", "reserve_short"},
    "constraint": {"reserve_coverage", "reserve_capacity", "reserve_growth", "reserve_inventory"},
    "expression": {"reserve_term"},
}
#: Components built only by the relaxation bound of a rolling plan (``rolling.relaxation_bound``).
BOUND_ONLY = {"set": {"USED"}, "constraint": {"held_if_used"}}
#: Built only by the ratio ceiling (``rolling.ratio_bound``), on top of the bound's components.
CEILING_ONLY = {"constraint": {"served_share"}}


def _not_in_windows(kind: str) -> set[str]:
    """Documented components a window MILP never builds (the bounds' own)."""
    return BOUND_ONLY.get(kind, set()) | CEILING_ONLY.get(kind, set())


PLACEMENT_DOC = (ROOT / "formulations" / "placement.md").read_text()
_SECTION4 = PLACEMENT_DOC.split("## 4.", 1)[1].split("\n## ", 1)[0]
PLACEMENT_IDS = set(re.findall(r"^\| `(\w+)` \|", _SECTION4, flags=re.M))
KINDS = ("set", "variable", "constraint", "expression", "objective", "block")
V5E, V4 = "tpu-v5e", "tpu-v4"


def _full_model(reserve: bool = True):
    """A window with a carried state, a hold window, a failure and (``reserve``) a reserve
    forecaster, so that every family is built."""
    coeffs = one_class([20.0, 20.0, 20.0], inventory={"x": 5, "y": 10}, second=True)
    params = HorizonParams(
        create_energy_j_per_chip=10.0,
        delete_energy_j_per_chip=5.0,
        reserve_forecast="last-peak" if reserve else None,
    )
    inv = {("x", 1): 5.0, ("x", 2): 3.0, ("y", 1): 10.0, ("y", 2): 10.0}
    state = State(
        epoch=0,
        n={"x:1:tp1:b1:colocated|A": 2},
        loads={("x:1:tp1:b1:colocated|A", 0): 2.0},
        inventory={"x": 5.0, "y": 10.0},
    )
    ctx = build_window(coeffs, OPTS, params, [1, 2], actual_demand(coeffs), inv, state)
    return build_model(ctx)


def _placed_coeffs():
    """One class on a damaged v5e pod (2-D shapes 4x4 and 2x4) and a v4 pod of two cubes (3-D), plus
    the counted chip ``x``."""
    rows = [
        vpod("x", "A", rate=10, static_w=100, chips=1),
        vpod(V5E, "A", rate=9, static_w=30, chips=16, shape="4x4", name="e16"),
        vpod(V5E, "A", rate=4, static_w=20, chips=8, shape="2x4", name="e8"),
        vpod(V4, "A", rate=2, static_w=10, chips=4, shape="2x2x1", name="c4"),
    ]
    pods = {V5E: [((16, 16), [(3, 3)])], V4: [((4, 4, 8), [(0, 0, 0)])]}
    return make_coefficients(
        rows, {(t, "A"): 30.0 for t in range(3)}, inventory={"x": 2}, epoch_s=300.0, util_cap=1.0, pods=pods
    )


def _placed_model(placement: str):
    coeffs = _placed_coeffs()
    params = HorizonParams(create_energy_j_per_chip=10.0)
    state = State(epoch=0, n={}, loads={}, inventory={"x": 2.0, V5E: 255.0, V4: 127.0})
    inv = {(c, t): h for c, h in state.inventory.items() for t in (1, 2)}
    ctx = build_window(coeffs, OPTS.replace(placement=placement), params, [1, 2], actual_demand(coeffs), inv, state)
    return build_model(ctx)


def test_document_and_model_name_the_same_components():
    ids = component_ids(_full_model())
    plain = component_ids(_full_model(reserve=False))
    for kind in KINDS:
        assert ids[kind] == DOC_IDS.get(kind, set()) - PLACEMENT_ONLY.get(kind, set()) - _not_in_windows(kind), kind
        assert plain[kind] == ids[kind] - RESERVE_ONLY.get(kind, set()), kind


@pytest.mark.parametrize("placement", ["pattern", "exact"])
def test_document_and_placed_model_name_the_same_components(placement):
    ids = component_ids(_placed_model(placement))
    built = component_ids(_full_model())
    for kind in KINDS:
        assert ids[kind] | built[kind] == DOC_IDS.get(kind, set()) - _not_in_windows(kind), kind
        assert PLACEMENT_ONLY.get(kind, set()) <= ids[kind]


def test_placement_sub_blocks_match_the_placement_document():
    built: set[str] = set()
    for placement in ("pattern", "exact"):
        m = _placed_model(placement)
        subs = [b.local_name for b in m.placement.component_objects(pyo.Block, descend_into=False)]
        assert subs == ["e1", "e2"]
        for name in subs:
            built |= {c.local_name for c in getattr(m.placement, name).component_objects((pyo.Var, pyo.Constraint))}
    assert built == PLACEMENT_IDS


def test_placed_vpods_sum_the_groups_of_a_shape_and_epoch():
    m = _placed_model("pattern")
    assert sorted(m.PLACED_SHAPES) == [
        (V4, "2x2x1", 1),
        (V4, "2x2x1", 2),
        (V5E, "2x4", 1),
        (V5E, "2x4", 2),
        (V5E, "4x4", 1),
        (V5E, "4x4", 2),
    ]
    repn = generate_standard_repn(m.placed_vpods[V5E, "2x4", 2].expr)
    assert [v.name for v in repn.linear_vars] == ["n_vpods[e8|A,2]"]


def test_placement_none_builds_no_placement_component():
    ids = component_ids(_placed_model("none"))
    for kind, names in PLACEMENT_ONLY.items():
        assert not names & ids[kind], kind


def test_every_builder_creates_its_component():
    names = {b.__name__.removeprefix("add_") for b in CONSTRAINT_BUILDERS}
    # placement is a block (of per-epoch sub-blocks), the other families are constraints
    assert names == (DOC_IDS["constraint"] - _not_in_windows("constraint")) | DOC_IDS["block"]
    for b in CONSTRAINT_BUILDERS:
        assert b.__doc__.lstrip().startswith("**Constraint Name**: " + b.__name__.removeprefix("add_"))
        assert f"`{b.__name__}`" in DOC
    ids = component_ids(_full_model())
    assert names - {"placement"} <= ids["constraint"]
    assert "placement" in component_ids(_placed_model("pattern"))["block"]


def test_without_coupling_only_the_epoch_families_remain():
    coeffs = one_class([20.0, 20.0])
    ctx = build_window(coeffs, OPTS, HorizonParams(coupling=False), [0, 1], actual_demand(coeffs), {})
    ids = component_ids(build_model(ctx))
    assert ids["constraint"] == {"demand_coverage", "vpod_capacity"}


def test_the_relaxation_bound_adds_only_its_documented_components():
    from neuscale_opt.horizon.model import add_held_if_used

    m = _full_model()
    before = component_ids(m)
    assert add_held_if_used.__doc__.lstrip().startswith("**Constraint Name**: held_if_used")
    assert "`add_held_if_used`" in DOC
    ctx_coeffs = one_class([20.0, 20.0, 20.0], inventory={"x": 5, "y": 10}, second=True)
    ctx = build_window(ctx_coeffs, OPTS, HorizonParams(), [1, 2], actual_demand(ctx_coeffs), {})
    add_held_if_used(m, ctx)
    after = component_ids(m)
    for kind in KINDS:
        assert after[kind] - before[kind] == BOUND_ONLY.get(kind, set()), kind


def test_the_ratio_ceiling_adds_only_its_documented_components(monkeypatch):
    from neuscale_opt.horizon import instance_inventory, rolling
    from neuscale_opt.horizon.model import add_held_if_used

    seen = []
    solve = rolling.solve_model

    def spy(m, options):
        seen.append(component_ids(m))
        return solve(m, options)

    monkeypatch.setattr(rolling, "solve_model", spy)
    coeffs = one_class([20.0, 20.0, 20.0], inventory={"x": 5, "y": 10}, second=True)
    dem = actual_demand(coeffs)
    tokens = {(b, t): 100.0 * r for (b, t), r in dem.items()}
    got = rolling.ratio_bound(coeffs, OPTS, HorizonParams(), dem, instance_inventory(coeffs), tokens, tokens, 0.5)
    assert got.value is not None and seen
    ctx = build_window(coeffs, OPTS, HorizonParams(), list(coeffs.epochs), dem, instance_inventory(coeffs))
    m = build_model(ctx)
    before = component_ids(m)
    add_held_if_used(m, ctx)
    bound = component_ids(m)
    for ids in seen:
        for kind in KINDS:
            assert ids[kind] - before[kind] == BOUND_ONLY.get(kind, set()) | CEILING_ONLY.get(kind, set()), kind
            assert bound[kind] <= ids[kind], kind
    assert "#### `served_share` (constraint)" in DOC
