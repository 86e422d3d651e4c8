"""The planner's working table (alloc/table.py): rows, derived columns and the DataFrame built from them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from neuscale_opt.alloc.table import Table


def _frame() -> pd.DataFrame:
    df = pd.DataFrame(
        {
            "k": pd.Series(["x", "y", "z", "w"], dtype="string"),
            "n": [1, 2, 3, 4],
            "f": [0.5, np.nan, 2.5, 4.0],
        }
    )
    df.attrs["unit"] = {"f": "req/s"}
    return df


def test_rows_of_rows_read_the_source_at_the_composed_positions():
    t = Table(_frame()).take(np.array([3, 1, 0])).take(np.array([2, 0]))  # source rows 0, 3
    assert len(t) == 2
    assert t["k"].tolist() == ["x", "w"] and t["k"].dtype == object
    assert t["n"].tolist() == [1, 4] and t["n"].dtype == np.int64
    assert t["f"].tolist() == [0.5, 4.0]


def test_derived_columns_replace_in_place_or_come_last_and_survive_a_take():
    t = Table(_frame()).with_columns(n=np.array([10, 20, 30, 40]), g=np.array(["a", "b", "c", "d"], dtype=object))
    assert t.columns == ["k", "n", "f", "g"]
    sub = t.take(np.array([2, 1]), columns=["g", "n"])
    assert sub.columns == ["g", "n"] and sub["g"].tolist() == ["c", "b"] and sub["n"].tolist() == [30, 20]
    out = sub.frame()
    assert list(out.columns) == ["g", "n"] and list(out.index) == [0, 1]
    assert out["g"].dtype == object and out["n"].dtype == np.int64
    assert out.attrs == {"unit": {"f": "req/s"}}  # the source's metadata, copied
    assert sub.frame() is out  # built once


def test_a_table_of_a_whole_frame_hands_back_the_frame_itself():
    df = _frame()
    assert Table(df).frame() is df
    assert Table(df).take(np.arange(4)).frame() is not df  # a copy once rows are taken
    pd.testing.assert_frame_equal(
        Table(df).take(np.arange(4)).frame(), df.assign(k=df["k"].astype(object)), check_dtype=True
    )


def test_membership_and_length_read_like_a_frame():
    t = Table(_frame()).take(np.array([], dtype=np.int64))
    assert len(t) == 0 and t.empty and "f" in t and "nope" not in t
    assert t.frame().shape == (0, 3)


def test_allocation_rows_sorted_with_integer_counts_and_stable_rates():
    from neuscale_opt.alloc.solution import ALLOC_COLUMNS, allocations_table

    def row(epoch, group, bucket, rate, n=1.0):
        return {
            "epoch": epoch, "bucket": bucket, "phase": "colocated", "chip": "v5e", "shape": "2x2",
            "chips_per_vpod": 4, "tp": 4, "pp": 1, "ep": 1, "batch": 8, "vpod_type": group,
            "config_id": f"{group}|{bucket}", "vpod_group": group, "n_vpods": n, "rate_rps": rate,
        }  # fmt: skip

    out = allocations_table([row(1, "g", "a", 1.0), row(0, "h", "b", 0.1 + 0.2, 2.0), row(0, "g", "c", 2.5)])
    assert list(out.columns) == list(ALLOC_COLUMNS)
    assert list(zip(out["epoch"], out["vpod_group"], out["bucket"], strict=True)) == [
        (0, "g", "c"), (0, "h", "b"), (1, "g", "a"),
    ]  # fmt: skip
    assert out["n_vpods"].tolist() == [1, 2, 1] and out["n_vpods"].dtype == np.int64
    assert out["rate_rps"].tolist() == [2.5, 0.3, 1.0]  # 0.30000000000000004 to ten digits
    assert out.attrs["unit"]["rate_rps"] == "req/s"
    assert allocations_table([]).empty


def test_one_configuration_table_per_coefficient_bundle():
    """Every reader of a bundle (preparation, evaluation) shares its columns; a bundle with other
    configurations gets its own table, and the shared reads leave plans and evaluations as they
    were on a fresh bundle."""
    from dataclasses import replace
    from pathlib import Path

    from neuscale_opt.alloc.evaluate import evaluate
    from neuscale_opt.alloc.melange import load_melange, melange_coefficients
    from neuscale_opt.alloc.options import PlanOptions
    from neuscale_opt.alloc.plan import plan
    from neuscale_opt.alloc.table import configs_table

    path = Path(__file__).resolve().parents[2] / "instances" / "alloc" / "melange_example.json"
    coeffs = melange_coefficients(load_melange(path))
    t = configs_table(coeffs)
    assert configs_table(coeffs) is t and t.frame() is coeffs.configs
    other = replace(coeffs, configs=coeffs.configs.iloc[::-1].reset_index(drop=True))
    assert configs_table(other) is not t
    assert list(configs_table(other)["config_id"]) == list(coeffs.configs["config_id"])[::-1]
    opts = PlanOptions(objective="cost", variant="pooled", util_cap=1.0, slice_factor=1)
    first = plan(coeffs, opts, "milp")
    again = plan(melange_coefficients(load_melange(path)), opts, "milp")  # a fresh bundle, nothing shared
    assert first.objective_value == again.objective_value
    pd.testing.assert_frame_equal(first.allocations, again.allocations)
    a, b = evaluate(first, coeffs), evaluate(first, melange_coefficients(load_melange(path)))
    assert a.feasible and b.feasible and a.totals == b.totals and a.objective_value == b.objective_value
    assert math.isclose(first.objective_value, 6.70, rel_tol=1e-9)  # the published optimum (slice factor 1)
