"""The formulation documents and the Pyomo model name the same components (``allocation.md`` for the
top level, ``placement.md`` section 4 for the ``placement`` block), for every variant combination."""

from __future__ import annotations

import itertools
import re

import pyomo.environ as pyo
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
PLACEMENT_DOC = (ROOT / "formulations" / "placement.md").read_text()
_SECTION4 = PLACEMENT_DOC.split("## 4.", 1)[1].split("\n## ", 1)[0]
PLACEMENT_IDS = {m for m in re.findall(r"^\| `(\w+)` \|", _SECTION4, flags=re.M)}
KINDS = ["set", "variable", "constraint", "expression", "objective", "block"]
V5E, V4 = "tpu-v5e", "tpu-v4"


def _coeffs():
    rows = [
        vpod("g1", "a", rate=10, dyn_j=1, static_w=50, price=1, chips=2, name="t1"),
        vpod("g1", "b", rate=4, dyn_j=3, static_w=50, price=1, chips=2, name="t1"),
        vpod("g2", "a", rate=6, dyn_j=2, static_w=20, price=0.5, chips=1, name="t2"),
        vpod("g1", "a", rate=3, dyn_j=1, static_w=10, price=1, chips=1, phase="prefill", kv_bytes=1e6, name="p1"),
        vpod("g2", "a", rate=5, dyn_j=1, static_w=10, price=1, chips=1, phase="decode", kv_bytes=1e6, name="d1"),
        vpod("g1", "b", rate=3, dyn_j=1, static_w=10, price=1, chips=1, phase="prefill", kv_bytes=1e6, name="p1"),
        vpod("g2", "b", rate=5, dyn_j=1, static_w=10, price=1, chips=1, phase="decode", kv_bytes=1e6, name="d1"),
        # placed generations: a v5e pod with a failed chip, a v4 pod of two cubes (2-D and 3-D rows)
        vpod(V5E, "a", rate=9, dyn_j=1, static_w=30, price=1, chips=16, shape="4x4", name="e16"),
        vpod(V5E, "b", rate=3, dyn_j=2, static_w=20, price=1, chips=8, shape="2x4", name="e8"),
        vpod(V5E, "a", rate=4, dyn_j=1, static_w=10, price=1, chips=8, shape="2x4", phase="prefill", name="ep"),
        vpod(V5E, "a", rate=4, dyn_j=1, static_w=10, price=1, chips=8, shape="2x4", phase="decode", name="ed"),
        vpod(V4, "b", rate=5, dyn_j=1, static_w=40, price=1, chips=64, shape="4x4x4", name="c64"),
        vpod(V4, "a", rate=2, dyn_j=1, static_w=10, price=1, chips=4, shape="2x2x1", name="c4"),
    ]
    pods = {V5E: [((16, 16), [(3, 3)])], V4: [((4, 4, 8), [(0, 0, 0)])]}
    return make_coefficients(rows, {"a": 7.0, "b": 2.0}, inventory={"g1": 8}, pods=pods)


def _all_variant_models():
    c = _coeffs()
    for variant, serving, unserved, slices, placement in itertools.product(
        ("dedicated", "pooled"), ("colocated", "disaggregated"), (False, True), (None, 2), ("pattern", "exact", "none")
    ):
        opts = PlanOptions(
            variant=variant, serving=serving, allow_unserved=unserved, slice_factor=slices, placement=placement
        )
        yield opts, build_model(build_context(c, opts, 0))
    for variant in ("dedicated", "pooled"):
        opts = PlanOptions(variant=variant, objective="energy", bounds=(("cost", 1e6),))
        yield opts, build_model(build_context(c, opts, 0))


MODELS = list(_all_variant_models())


def test_document_lists_every_kind():
    assert set(DOC_IDS) == set(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_model_components_match_document(kind):
    built: set[str] = set()
    for _, m in MODELS:
        built |= component_ids(m)[kind]
    assert built == DOC_IDS[kind]


def test_placement_block_matches_placement_document():
    built: set[str] = set()
    for opts, m in MODELS:
        blk = getattr(m, "placement", None)
        assert (blk is None) == (opts.placement == "none")
        if blk is not None:
            built |= {c.local_name for c in blk.component_objects((pyo.Var, pyo.Constraint))}
            assert set(m.PLACED_SHAPES) <= {(V5E, "2x4"), (V5E, "4x4"), (V4, "2x2x1"), (V4, "4x4x4")}
    assert PLACEMENT_IDS == built
    assert len(PLACEMENT_IDS) == 14  # 11 pattern ids (with the 3-D knapsack pair x_cube_pod, c_cube_pod), 3 exact


def test_placed_vpods_sum_the_groups_of_a_shape():
    c = _coeffs()
    m = build_model(build_context(c, PlanOptions(variant="dedicated"), 0))
    assert sorted(m.PLACED_SHAPES) == [(V4, "2x2x1"), (V4, "4x4x4"), (V5E, "2x4"), (V5E, "4x4")]
    repn = generate_standard_repn(m.placed_vpods[V5E, "2x4"].expr)
    assert sorted(v.name for v in repn.linear_vars) == ["n_vpods[e8|b]"]
    # no placement for unlimited generations or with placement "none"
    assert not hasattr(build_model(build_context(c.with_unlimited_inventory(), PlanOptions(), 0)), "placement")
    assert not hasattr(build_model(build_context(c, PlanOptions(placement="none"), 0)), "PLACED_SHAPES")


def test_each_constraint_builder_is_named_after_its_component():
    names = {b.__name__.removeprefix("add_") for b in CONSTRAINT_BUILDERS}
    # unserved_slice_assignment is built by add_slice_assignment (documented there); placement is a block
    assert names == DOC_IDS["constraint"] - {"unserved_slice_assignment"} | DOC_IDS["block"]
    for b in CONSTRAINT_BUILDERS:
        assert b.__doc__.lstrip().startswith("**Constraint Name**: " + b.__name__.removeprefix("add_"))
        assert f"`{b.__name__}`" in DOC
    assert hasattr(model_mod, "add_objective")


def test_builders_skip_empty_families():
    c = _coeffs()  # g2 is unlimited: chip_inventory rows for g1 and the two placed generations
    m = build_model(build_context(c.with_unlimited_inventory(), PlanOptions(), 0))
    assert "chip_inventory" not in component_ids(m)["constraint"]
    assert "placement" not in component_ids(m)["block"]
    m = build_model(build_context(c, PlanOptions(), 0))
    assert list(m.chip_inventory.keys()) == ["g1", V4, V5E]


def test_capacity_row_pooled_sums_fractional_loads():
    c = _coeffs()
    m = build_model(build_context(c, PlanOptions(variant="pooled"), 0))
    repn = generate_standard_repn(m.vpod_capacity["t1"].body)
    coefs = {v.name: round(k, 9) for v, k in zip(repn.linear_vars, repn.linear_coefs, strict=True)}
    # u = 1: 1/10 for class a, 1/4 for class b, -1 for the vPod count
    assert coefs == {"rate[t1|a]": 0.1, "rate[t1|b]": 0.25, "n_vpods[t1]": -1.0}


def test_working_table_rows_keep_every_value():
    import numpy as np
    import pandas as pd

    from neuscale_opt.alloc.table import Table

    df = pd.DataFrame(
        {
            "k": pd.Series(["x", "y", "z"], dtype="string"),
            "o": pd.Series(["p", None, "r"], dtype=object),
            "n": [1, 2, 3],
            "f": [0.5, np.nan, 2.5],
            "b": [True, False, True],
        }
    )
    out = Table(df, np.array([2, 0]), {"f": np.array([9.0, 8.0]), "extra": np.array([1.0, 2.0])}).frame()
    assert list(out.columns) == ["k", "o", "n", "f", "b", "extra"]  # same-named extra in place
    assert out["k"].tolist() == ["z", "x"] and out["k"].dtype == object
    assert out["o"].tolist() == ["r", "p"] and out["o"].dtype == object
    assert out["n"].tolist() == [3, 1] and out["n"].dtype == np.int64
    assert out["f"].tolist() == [9.0, 8.0] and out["b"].tolist() == [True, True]
    assert list(out.index) == [0, 1]


def test_working_table_rows_of_chosen_columns():
    import numpy as np
    import pandas as pd

    from neuscale_opt.alloc.table import Table

    df = pd.DataFrame({"k": pd.Series(["x", "y", "z"], dtype="string"), "n": [1, 2, 3], "f": [0.5, 1.5, 2.5]})
    out = Table(df, np.array([1, 2]), columns=["f", "k"]).frame()
    assert list(out.columns) == ["f", "k"]
    assert out["f"].tolist() == [1.5, 2.5] and out["k"].tolist() == ["y", "z"] and out["k"].dtype == object


def test_epoch_rates_add_up_a_class_rows_and_skip_empty_classes():
    import dataclasses

    import pandas as pd

    c = make_coefficients([vpod("g1", "a", rate=10, name="t1"), vpod("g1", "b", rate=10, name="t1")], {"a": 1.0})
    rows = [(0, "a", 2.0), (0, "b", 0.0), (1, "b", 5.0), (0, "a", 1.5)]
    twice = dataclasses.replace(c, demand=pd.DataFrame(rows, columns=["epoch", "bucket", "rate_rps"]))
    assert build_context(twice, PlanOptions(), 0).bucket_rate == {"a": 3.5}  # 2.0 + 1.5; b has no demand
    assert build_context(twice, PlanOptions(), 1).bucket_rate == {"b": 5.0}
    once = dataclasses.replace(c, demand=pd.DataFrame(rows[:3], columns=["epoch", "bucket", "rate_rps"]))
    ctx = build_context(once, PlanOptions(), 0)
    assert ctx.bucket_rate == {"a": 2.0} and ctx.demand == {("a", "colocated"): 2.0}
