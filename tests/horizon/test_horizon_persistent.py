"""Rolling windows re-solved from a compiled model (``horizon.persistent``): every array handed to
HiGHS equals, entry for entry, the fresh build and compile of that window; where it could not (a
column whose first row is absent), the window is built afresh; the plan is the same either way."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from horizon_support import OPTS, ROOT, one_class, two_class

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.solve import linear_form
from neuscale_opt.horizon import HorizonParams, plan_rolling
from neuscale_opt.horizon.model import build_model
from neuscale_opt.horizon.persistent import CompiledWindows

#: Demand with idle epochs of B (rows of demand_coverage and shrink_hold that come and go) and
#: a peak, on a 3-epoch hold window.
RATES_A = [10.0, 12.0, 60.0, 20.0, 55.0, 8.0, 30.0, 30.0]
RATES_B = [4.0, 0.0, 6.0, 0.0, 0.0, 18.0, 0.0, 5.0]
PARAMS = HorizonParams(shrink_after_s=900.0, create_energy_j_per_chip=10.0, delete_energy_j_per_chip=5.0)


def _key(v, by: int = 0) -> tuple:
    """A column as (variable, index), its epoch (last in every index) moved by ``by``."""
    idx = v.index()
    return (v.parent_component().local_name, *idx[:-1], int(idx[-1]) + by)


def _same_arrays(f, g, by: int) -> bool:
    """``f`` (the template's columns) and ``g`` (the fresh model's, epochs ``by`` later) entry for entry."""
    return (
        [_key(v) for v in f.columns] == [_key(v, by) for v in g.columns]
        and all(np.array_equal(getattr(f, k), getattr(g, k)) for k in ("col_lo", "col_hi", "row_lo", "row_hi", "cost"))
        and np.array_equal(f.integer, g.integer)
        and f.offset == g.offset
        and f.a.shape == g.a.shape
        and all(np.array_equal(getattr(f.a, k), getattr(g.a, k)) for k in ("indptr", "indices", "data"))
    )


def _spy_forms(monkeypatch, same) -> dict[str, int]:
    """Every compiled form compared with the fresh compile of the same window by
    ``same(compiled, fresh, epochs between them)``; the counts of the comparisons."""
    log = {"same": 0, "diff": 0, "fallback": 0, "masked": 0}
    form = CompiledWindows._form

    def check(tpl, ctx):
        f = form(tpl, ctx)
        if f is None:
            log["fallback"] += 1
            return None
        # the fresh model stays referenced while its columns are read: a column names its variable
        # through a weak reference, which a collected model would leave empty
        fresh = build_model(ctx)
        g = linear_form(fresh)
        log["same" if same(f, g, tpl.first - ctx.epochs[0]) else "diff"] += 1
        del fresh
        log["masked"] += int(len(f.rows) < len(tpl.form.rows))
        return f

    monkeypatch.setattr(CompiledWindows, "_form", staticmethod(check))
    return log


@pytest.fixture
def spy(monkeypatch):
    """Every compiled form compared with the fresh compile of the same window."""
    return _spy_forms(monkeypatch, _same_arrays)


def _fresh(monkeypatch):
    """Every window built afresh (the path before compiled windows)."""
    monkeypatch.setattr(CompiledWindows, "solve", lambda self, ctx, options, fixed=None: None)


def _rows(sol) -> pd.DataFrame:
    return sol.allocations.sort_values(["epoch", "vpod_group", "config_id"], kind="mergesort").reset_index(drop=True)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("oracle", PARAMS),
        ("last-peak", PARAMS),
        ("quantile", PARAMS.replace(reserve_forecast="last-peak")),  # the guard reserve's rows and numbers
    ],
)
def test_compiled_windows_hand_highs_the_arrays_of_a_fresh_compile(spy, method, params):
    coeffs = two_class(RATES_A, RATES_B)
    plan_rolling(coeffs, OPTS, params, method, window=3)
    # every window went through the compiled path (energy objective: every rate column is in the
    # objective, so no column depends on an absent row); rows came and went; all arrays equal
    assert spy["fallback"] == 0 and spy["diff"] == 0
    if params.reserve_forecast is None:
        assert spy["same"] == len(RATES_A)
    else:  # each window solved without its reserve first, then checked (and solved whole) with it
        assert spy["same"] > len(RATES_A)
    if method == "oracle":
        assert spy["masked"] > 0


def test_a_window_whose_column_would_move_is_built_afresh(spy):
    # one_class has no dynamic energy: a_k = 0, so a rate column first appears in demand_coverage;
    # with no demand in an epoch that row is absent and the fresh compile orders the column later
    coeffs = one_class([20.0, 0.0, 20.0, 20.0, 0.0, 10.0])
    sol = plan_rolling(coeffs, OPTS, PARAMS, "oracle", window=3)
    assert spy["fallback"] > 0 and spy["diff"] == 0 and spy["same"] > 0
    # by hand: 20 req/s on 10-req/s vPods needs 2; the 3-epoch hold keeps n_t >= the largest load of
    # epochs t-3 .. t-1, which is 2 at every epoch after the first (epoch 1: load 2 at 0; epoch 4:
    # loads 2 at 2 and 3; epoch 5: 2 at 2 and 3), so 2 vPods are held throughout
    held = sol.allocations.groupby("epoch")["n_vpods"].sum().to_dict()
    assert held == {t: 2 for t in range(6)}


@pytest.mark.parametrize(
    ("coeffs", "method", "window"),
    [
        (two_class(RATES_A, RATES_B), "oracle", 3),
        (two_class(RATES_A, RATES_B), "last-peak", 4),
        (one_class([20.0, 0.0, 20.0, 20.0, 0.0, 10.0], second=True), "oracle", 2),
        (two_class(RATES_A, RATES_B), "quantile", 3),
    ],
)
def test_the_plan_is_the_one_of_fresh_windows(monkeypatch, coeffs, method, window):
    params = PARAMS.replace(reserve_forecast="last-peak") if method == "quantile" else PARAMS
    compiled = plan_rolling(coeffs, OPTS, params, method, window=window)
    _fresh(monkeypatch)
    fresh = plan_rolling(coeffs, OPTS, params, method, window=window)
    pd.testing.assert_frame_equal(_rows(compiled), _rows(fresh))
    assert compiled.objective_value == fresh.objective_value
    assert [e["window_nodes"] for e in compiled.epochs] == [e["window_nodes"] for e in fresh.epochs]


def test_windows_of_one_structure_share_one_compile(monkeypatch):
    made = []
    init = CompiledWindows.__init__

    def keep(self):
        init(self)
        made.append(self)

    monkeypatch.setattr(CompiledWindows, "__init__", keep)
    plan_rolling(two_class(RATES_A * 3, RATES_B * 3), OPTS, PARAMS, "last-peak", window=3)
    (cw,) = made
    # structures: the first window (no state), one for every later full-length window (those
    # starting at 1 and 2, whose hold window is cut at epoch 0, are the full one with rows absent),
    # and the two shorter ones at the end
    assert cw.compiled == 4
    assert cw.reused == 3 * len(RATES_A) - 4


def _numbers_equal(f, g) -> bool:
    """The arrays of two forms, entry for entry (the columns' names aside)."""
    return (
        len(f.columns) == len(g.columns)
        and all(np.array_equal(getattr(f, k), getattr(g, k)) for k in ("col_lo", "col_hi", "row_lo", "row_hi", "cost"))
        and np.array_equal(f.integer, g.integer)
        and f.a.shape == g.a.shape
        and all(np.array_equal(getattr(f.a, k), getattr(g.a, k)) for k in ("indptr", "indices", "data"))
    )


@pytest.fixture(scope="module")
def placed():
    """``instances/placement/unplaceable.toml`` (a fragmented v6e pod, placed) over six epochs."""
    from neuscale_opt.candidates import build_coefficients
    from neuscale_opt.instance import load_instance, parse_instance

    raw = load_instance(ROOT / "instances" / "placement" / "unplaceable.toml").model_dump(
        mode="python", exclude_none=True
    )
    rates = [480.0, 240.0, 480.0, 300.0, 520.0, 200.0]
    raw["workload"]["demand"] = [{"epoch": e, "bucket": "chat", "rate_rps": r} for e, r in enumerate(rates)]
    raw["epochs"] = {**raw.get("epochs", {}), "horizon": len(rates)}
    inst = parse_instance(raw)
    return inst, build_coefficients(inst)


@pytest.mark.parametrize("method", ["last-peak", "oracle"])
def test_placed_windows_are_solved_compiled_and_place_as_fresh_ones(monkeypatch, placed, method):
    inst, coeffs = placed
    opts = PlanOptions.from_instance(inst)
    assert opts.placement != "none" and coeffs.pods is not None and len(coeffs.pods) > 0
    seen = _spy_forms(monkeypatch, lambda f, g, _by: _numbers_equal(f, g))
    compiled = plan_rolling(coeffs, opts, PARAMS, method, window=3)
    assert seen["diff"] == 0 and seen["same"] >= 4  # the placed windows went through the compiled path
    _fresh(monkeypatch)
    fresh = plan_rolling(coeffs, opts, PARAMS, method, window=3)
    pd.testing.assert_frame_equal(_rows(compiled), _rows(fresh))
    assert len(compiled.placements) > 0
    pd.testing.assert_frame_equal(compiled.placements, fresh.placements)
    assert compiled.objective_value == fresh.objective_value
