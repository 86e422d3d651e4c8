"""Buckets: names, edge semantics, representatives, and histograms against pandas on real traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from neuscale_opt.traces.buckets import (
    DEFAULT_BUCKETS,
    DEFAULT_BUCKETS_2D,
    DEFAULT_TOTAL_EDGES,
    assign_buckets,
    bucket_names,
    bucket_table,
    histogram,
    length_nodes,
)
from neuscale_opt.traces.loaders import load_trace_file
from neuscale_opt.traces.shipped import AZURE_CODE, AZURE_CONV, MOONCAKE_CONV
from neuscale_opt.traces.spec import BucketSpec

ONE_D = BucketSpec(kind="total", edges=(10, 100))
TWO_D = BucketSpec(kind="input_output", input_edges=(10,), output_edges=(5,))


def trace(pairs: list[tuple[int, int]]) -> pd.DataFrame:
    inp, out = zip(*pairs, strict=True)
    return pd.DataFrame(
        {"arrival_s": np.arange(len(pairs), dtype=float), "input_tokens": inp, "output_tokens": out}
    ).astype({"input_tokens": np.int64, "output_tokens": np.int64})


def test_names_depend_on_edges_only() -> None:
    assert bucket_names(ONE_D) == ["s0-10", "s10-100", "s100-inf"]
    assert bucket_names(TWO_D) == ["i0-10_o0-5", "i0-10_o5-inf", "i10-inf_o0-5", "i10-inf_o5-inf"]
    assert len(bucket_names(DEFAULT_BUCKETS)) == len(DEFAULT_TOTAL_EDGES) + 1 == 8
    assert len(bucket_names(DEFAULT_BUCKETS_2D)) == 20


def test_edges_are_upper_inclusive() -> None:
    # totals: 0, 10, 11, 100, 101
    t = trace([(0, 0), (4, 6), (10, 1), (99, 1), (100, 1)])
    b = assign_buckets(t, ONE_D)
    assert list(b.cat.categories) == bucket_names(ONE_D)
    assert b.astype(str).tolist() == ["s0-10", "s0-10", "s10-100", "s10-100", "s100-inf"]
    t2 = trace([(10, 5), (10, 6), (11, 5), (11, 6)])
    assert assign_buckets(t2, TWO_D).astype(str).tolist() == bucket_names(TWO_D)


def test_bucket_table_hand_computed() -> None:
    # s0-10: (2, 3), (4, 5) ; s10-100: (20, 5), (40, 8), (60, 7) ; s100-inf: empty
    t = trace([(2, 3), (20, 5), (4, 5), (40, 8), (60, 7)])
    tb = bucket_table(t, ONE_D).set_index("bucket")
    assert tb["count"].tolist() == [2, 3, 0]
    assert tb.loc["s0-10", "mean_input"] == 3 and tb.loc["s0-10", "mean_output"] == 4
    assert tb.loc["s10-100", "mean_output"] == pytest.approx(20 / 3)
    # mean rounded up: (3, 4) and (40, 20/3 -> 7)
    assert tb[["input_tokens", "output_tokens"]].loc[["s0-10", "s10-100"]].to_numpy().tolist() == [[3, 4], [40, 7]]
    # empty open bucket: midpoint of (100, 200] = 150 split by the trace's input share 126/154
    share = 126 / (126 + 28)
    assert tb.loc["s100-inf", "input_tokens"] == round(150 * share)
    assert tb.loc["s100-inf", "output_tokens"] == 150 - round(150 * share)
    p50 = bucket_table(t, ONE_D.model_copy(update={"representative": "p50"})).set_index("bucket")
    assert p50.loc["s10-100", ["input_tokens", "output_tokens"]].tolist() == [40, 7]
    up = bucket_table(t, ONE_D.model_copy(update={"representative": "upper"})).set_index("bucket")
    # upper total edge 100 split in the bucket's mean ratio 40 : 20/3 -> 86 / 14
    assert up.loc["s10-100", ["input_tokens", "output_tokens"]].tolist() == [86, 14]
    assert up.loc["s0-10", ["input_tokens", "output_tokens"]].tolist() == [4, 6]  # 10 split 3:4 -> 4, 6


def test_length_nodes_hand_computed() -> None:
    # s0-10 holds outputs 3 and 5: at 4 nodes the mid-quantiles 1/8, 3/8, 5/8, 7/8 interpolate
    # between the two order statistics (position q x 1): 3.25, 3.75, 4.25, 4.75; s10-100 holds
    # 5, 7, 8 (positions q x 2: 0.25, 0.75, 1.25, 1.75); s100-inf is empty
    t = trace([(2, 3), (20, 5), (4, 5), (40, 8), (60, 7)])
    nodes = length_nodes(t, ONE_D, "output_tokens", nodes=4)
    assert nodes[0] == pytest.approx((3.25, 3.75, 4.25, 4.75))
    assert nodes[1] == pytest.approx((5.5, 6.5, 7.25, 7.75))
    assert nodes[2] == ()
    # the prompts of the same classes: s0-10 holds 2 and 4, s10-100 holds 20, 40, 60
    prompts = length_nodes(t, ONE_D, "input_tokens", nodes=4)
    assert prompts[0] == pytest.approx((2.25, 2.75, 3.25, 3.75))
    assert prompts[1] == pytest.approx((25.0, 35.0, 45.0, 55.0))
    assert prompts[2] == ()


def test_two_d_upper_and_empty() -> None:
    t = trace([(3, 2), (30, 9), (50, 12)])
    up = bucket_table(t, TWO_D.model_copy(update={"representative": "upper"})).set_index("bucket")
    assert up.loc["i0-10_o0-5", ["input_tokens", "output_tokens"]].tolist() == [10, 5]
    assert up.loc["i10-inf_o5-inf", ["input_tokens", "output_tokens"]].tolist() == [50, 12]  # observed max
    # empty i0-10_o5-inf: input midpoint of (0, 10] = 5, output midpoint of (5, 10] = 7.5 -> 8
    assert up.loc["i0-10_o5-inf", ["input_tokens", "output_tokens"]].tolist() == [5, 8]


def _pandas_histogram(df: pd.DataFrame, spec: BucketSpec) -> np.ndarray:
    """Independent computation with pd.cut (right-closed bins)."""
    if spec.kind == "total":
        bins = [-np.inf, *spec.edges, np.inf]
        codes = pd.cut(df["input_tokens"] + df["output_tokens"], bins, right=True, labels=False)
        return codes.value_counts().reindex(range(len(bins) - 1), fill_value=0).to_numpy()
    bi, bo = [-np.inf, *spec.input_edges, np.inf], [-np.inf, *spec.output_edges, np.inf]
    ci = pd.cut(df["input_tokens"], bi, right=True, labels=False)
    co = pd.cut(df["output_tokens"], bo, right=True, labels=False)
    ct = pd.crosstab(ci, co).reindex(index=range(len(bi) - 1), columns=range(len(bo) - 1), fill_value=0)
    return ct.to_numpy().reshape(-1)


@pytest.mark.parametrize("path", [AZURE_CONV, AZURE_CODE, MOONCAKE_CONV], ids=lambda p: Path(p).name)
@pytest.mark.parametrize("spec", [DEFAULT_BUCKETS, DEFAULT_BUCKETS_2D], ids=["total", "input_output"])
def test_histograms_match_pandas_on_shipped_traces(path: Path, spec: BucketSpec) -> None:
    df = load_trace_file(path)
    expected = _pandas_histogram(df, spec)
    tb = bucket_table(df, spec)
    np.testing.assert_array_equal(tb["count"].to_numpy(), expected)
    np.testing.assert_array_equal(histogram(df, spec).to_numpy(), expected)
    assert tb["count"].sum() == len(df)
    # means against a groupby on the categorical assignment
    g = df.groupby(assign_buckets(df, spec), observed=False)[["input_tokens", "output_tokens"]].mean()
    np.testing.assert_allclose(tb["mean_input"].to_numpy(), g["input_tokens"].to_numpy(), equal_nan=True)
    reps = tb[["input_tokens", "output_tokens"]].to_numpy()
    assert reps.dtype == np.int64 and (reps >= 1).all()
    full = tb["count"].to_numpy() > 0
    np.testing.assert_array_equal(reps[full, 0], np.ceil(g["input_tokens"].to_numpy()[full] - 1e-9))


@pytest.mark.parametrize("fractional", [False, True])
def test_bucket_quantiles_equal_numpy_per_bucket(fractional):
    # per-bucket quantiles and maxima against numpy.quantile on each bucket's values (linear
    # interpolation), whole token counts (the integer-key sort) and fractional values (the other)
    from neuscale_opt.traces.buckets import _bucket_quantile, _sorted_by_bucket

    rng = np.random.default_rng(5)
    codes = rng.integers(0, 6, size=500)
    codes[codes == 4] = 5  # bucket 4 empty
    values = rng.integers(1, 40, size=500).astype(float) + (rng.random(500) if fractional else 0.0)
    count = np.bincount(codes, minlength=7)  # bucket 6 empty too
    ordered = _sorted_by_bucket(codes, values)
    for q in (0.0, 0.5, 0.9, 0.99, 1.0):
        got = _bucket_quantile(ordered, count, q)
        for b in range(7):
            if count[b] == 0:
                assert np.isnan(got[b])
            else:
                assert got[b] == pytest.approx(np.quantile(values[codes == b], q), rel=1e-12)
