"""Per-epoch demand: a hand-computed fixture and the shipped traces against pandas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from neuscale_opt.errors import InputError
from neuscale_opt.traces.buckets import DEFAULT_BUCKETS, DEFAULT_BUCKETS_2D, assign_buckets, bucket_names
from neuscale_opt.traces.demand import epoch_demand, series_demand
from neuscale_opt.traces.loaders import load_rate_series, load_trace_file
from neuscale_opt.traces.shipped import AZURE_CODE, AZURE_CONV, MOONCAKE_CONV, SERVEGEN
from neuscale_opt.traces.spec import BucketSpec

SPEC = BucketSpec(kind="total", edges=(100,))  # s0-100, s100-inf


def tiny() -> pd.DataFrame:
    # epoch 10 s, sub-window 5 s. small (total <= 100) / big requests
    t = [0.0, 1.0, 4.9, 5.0, 12.0, 31.0]
    inp = [10, 90, 200, 20, 30, 50]
    out = [5, 5, 50, 1, 2, 3]
    return pd.DataFrame({"arrival_s": t, "input_tokens": inp, "output_tokens": out}).astype(
        {"input_tokens": np.int64, "output_tokens": np.int64}
    )


def test_tiny_hand_computed() -> None:
    d = epoch_demand(tiny(), SPEC, epoch_s=10, subwindow_s=5)
    assert list(d.columns)[:9] == [
        "epoch",
        "bucket",
        "start_s",
        "duration_s",
        "count",
        "mean_rps",
        "peak_rps",
        "input_tokens",
        "output_tokens",
    ]
    # horizon = last arrival 31 -> epochs 0..3, the last one partial (1 s, floored at one 5-s sub-window)
    assert d["epoch"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert d["bucket"].astype(str).tolist() == ["s0-100", "s100-inf"] * 4
    assert d["count"].tolist() == [3, 1, 1, 0, 0, 0, 1, 0]
    assert d["duration_s"].tolist() == [10, 10, 10, 10, 10, 10, 5, 5]
    np.testing.assert_allclose(d["mean_rps"], [0.3, 0.1, 0.1, 0, 0, 0, 0.2, 0])
    # epoch 0 small: sub-window [0,5) has 0.0, 1.0 -> 2/5; [5,10) has 5.0 -> 1/5 -> peak 0.4
    np.testing.assert_allclose(d["peak_rps"], [0.4, 0.2, 0.2, 0, 0, 0, 0.2, 0])
    assert d["input_tokens"].tolist() == [120, 200, 30, 0, 0, 0, 50, 0]
    assert d["output_tokens"].tolist() == [11, 50, 2, 0, 0, 0, 3, 0]
    assert d["count"].sum() == 6


def test_explicit_horizon_and_drop_partial() -> None:
    d = epoch_demand(tiny(), SPEC, epoch_s=10, subwindow_s=5, horizon_s=30)
    assert d["epoch"].max() == 2 and d["count"].sum() == 5 and d.attrs["rows_outside_horizon"] == 1
    dropped = epoch_demand(tiny(), SPEC, epoch_s=10, subwindow_s=5, partial="drop")
    assert dropped["epoch"].max() == 2 and dropped["count"].sum() == 5
    one = epoch_demand(tiny(), None, epoch_s=10, subwindow_s=5)
    assert one["bucket"].astype(str).unique().tolist() == ["all"] and one["count"].tolist() == [4, 1, 0, 1]


def test_epoch_must_hold_whole_subwindows() -> None:
    with pytest.raises(InputError, match="whole number of sub-windows"):
        epoch_demand(tiny(), SPEC, epoch_s=10, subwindow_s=3)


@pytest.mark.parametrize(
    ("path", "full_min", "full_mean", "full_max"),
    [(AZURE_CODE, 32, 769.4, 1199), (AZURE_CONV, 1297, 1690.7, 2239), (MOONCAKE_CONV, 832, 1013.4, 1104)],
    ids=lambda v: Path(v).name if isinstance(v, Path) else str(v),
)
@pytest.mark.parametrize("spec", [DEFAULT_BUCKETS, DEFAULT_BUCKETS_2D], ids=["total", "input_output"])
def test_shipped_counts_sum_to_rows_and_match_pandas(
    path: Path, full_min: int, full_mean: float, full_max: int, spec: BucketSpec
) -> None:
    df = load_trace_file(path)
    d = epoch_demand(df, spec)
    names = bucket_names(spec)
    n_ep = int(d["epoch"].max()) + 1
    assert len(d) == n_ep * len(names)  # every (epoch, bucket) pair
    assert d["count"].sum() == len(df)
    # independent pandas computation of counts and peaks
    ep = (df["arrival_s"] // 300).astype(int)
    sw = ((df["arrival_s"] - ep * 300) // 10).astype(int)
    b = assign_buckets(df, spec).astype(str)
    counts = pd.crosstab(ep, b).reindex(index=range(n_ep), columns=names, fill_value=0)
    np.testing.assert_array_equal(d["count"].to_numpy(), counts.to_numpy().reshape(-1))
    peaks = (
        (pd.DataFrame({"e": ep, "s": sw, "b": b}).groupby(["e", "s", "b"]).size().groupby(["e", "b"]).max() / 10)
        .unstack(fill_value=0.0)
        .reindex(index=range(n_ep), columns=names, fill_value=0.0)
    )
    np.testing.assert_allclose(d["peak_rps"].to_numpy(), peaks.to_numpy().reshape(-1))
    tok = df.groupby([ep, b])["input_tokens"].sum().unstack(fill_value=0)
    tok = tok.reindex(index=range(n_ep), columns=names, fill_value=0)
    np.testing.assert_array_equal(d["input_tokens"].to_numpy(), tok.to_numpy().reshape(-1))
    # the published requests-per-full-epoch figures
    per = d.groupby("epoch")["count"].sum()[d.groupby("epoch")["duration_s"].min() == 300]
    assert (per.min(), round(per.mean(), 1), per.max()) == (full_min, full_mean, full_max)
    assert (d["peak_rps"] >= d["mean_rps"] - 1e-12).all()


def test_series_demand_aggregates_windows(tmp_path: Path) -> None:
    (tmp_path / "r.csv").write_text("window_start_s,window_s,rate_rps\n0,600,1\n600,600,3\n1200,600,2\n1800,600,6\n")
    rs = load_rate_series(tmp_path / "r.csv")
    d = series_demand(rs, epoch_s=1200)
    assert d["mean_rps"].tolist() == [2.0, 4.0] and d["peak_rps"].tolist() == [3.0, 6.0]
    assert d["count"].tolist() == [2400, 4800] and not d["filled"].any()
    sg = series_demand(load_rate_series(SERVEGEN, series="m-small"))
    assert len(sg) == 2016 and sg["filled"].sum() == 37
