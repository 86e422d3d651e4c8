"""Forecasters: hand-computed values, the no-future property, backtest metrics, doc registry."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuscale_opt.errors import InputError
from neuscale_opt.traces.buckets import DEFAULT_BUCKETS
from neuscale_opt.traces.demand import epoch_demand
from neuscale_opt.traces.forecast import METHODS, POOLED, backtest, forecast, planner_demand
from neuscale_opt.traces.loaders import load_trace_file
from neuscale_opt.traces.shipped import AZURE_CONV

X = [1.0, 5.0, 2.0, 8.0, 3.0, 0.0, 4.0]
NAN = math.nan


def demand_from(matrix: np.ndarray, epoch_s: float = 300.0, durations: list[float] | None = None) -> pd.DataFrame:
    """A demand table with the given peak_rps matrix (epochs x buckets)."""
    n, nb = matrix.shape
    names = [f"b{i}" for i in range(nb)]
    dur = np.full(n, epoch_s) if durations is None else np.asarray(durations, dtype=float)
    d = pd.DataFrame(
        {
            "epoch": np.repeat(np.arange(n), nb),
            "bucket": pd.Categorical(np.tile(names, n), categories=names),
            "start_s": np.repeat(np.arange(n) * epoch_s, nb),
            "duration_s": np.repeat(dur, nb),
            "peak_rps": matrix.reshape(-1),
            "mean_rps": matrix.reshape(-1) / 2,
        }
    )
    d.attrs["epoch_s"] = epoch_s
    return d


ONE = demand_from(np.array(X)[:, None])


@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        ("last-peak", {"window_s": 900}, [NAN, 1, 5, 5, 8, 8, 8, 4]),
        ("ewma", {"alpha": 0.5}, [NAN, 1, 3, 2.5, 5.25, 4.125, 2.0625, 3.03125]),
        ("seasonal-naive", {"period_s": 600}, [NAN, NAN, 1, 5, 2, 8, 3, 0]),
        ("quantile", {"q": 0.5, "window_s": 900}, [NAN, 1, 3, 2, 5, 3, 3, 3]),
        ("oracle", {}, [*X, NAN]),
        # the median of the last 3 epochs times the largest rise of the last 2 ratios X[k]/X[k-1]
        # (5, 0.4, 4, 0.375, 0, and none after the 0), at most 2, at least 1, where the last epoch
        # rose (5 >= 1, 8 >= 2, 4 >= 0: the forecasts of epochs 2, 4 and 7)
        ("quantile-growth", {"q": 0.5, "window_s": 900}, [NAN, 1, 6, 2, 10, 3, 3, 3]),
    ],
)
def test_hand_computed(method: str, params: dict, expected: list[float]) -> None:
    fc = forecast(ONE, method, steps=1, **params)
    np.testing.assert_allclose(fc["rate_rps"].to_numpy(), expected, equal_nan=True)
    assert fc["future"].tolist() == [False] * 7 + [True]
    np.testing.assert_allclose(fc["actual_rps"].to_numpy(), [*X, NAN], equal_nan=True)
    assert fc["available"].tolist() == [not math.isnan(v) for v in expected]


def test_defaults_documented() -> None:
    assert METHODS["last-peak"].defaults == {"window_s": 1800.0}
    assert METHODS["ewma"].defaults["alpha"] == pytest.approx(2 / 7)
    assert METHODS["seasonal-naive"].defaults == {"period_s": 86400.0}
    # default last-peak at 300-s epochs: max of the previous 6 epochs
    x = np.arange(10, dtype=float)[:, None] % 7
    fc = forecast(demand_from(x), "last-peak")
    expect = [max(x[max(0, e - 6) : e, 0]) if e else NAN for e in range(11)]
    np.testing.assert_allclose(fc["rate_rps"], expect, equal_nan=True)


def test_quantile_growth_scales_every_class_by_the_total_rise() -> None:
    # totals 2, 4, 4: the rise 4 / 2 = 2 from epoch 0 to 1 lifts every class's 30-min maximum (q = 1)
    x = np.array([[1.0, 1.0], [1.0, 3.0], [2.0, 2.0]])
    fc = forecast(demand_from(x), "quantile-growth", steps=1, q=1.0, window_s=900)
    got = fc["rate_rps"].to_numpy().reshape(-1, 2)
    np.testing.assert_allclose(got, [[NAN, NAN], [1, 1], [2, 6], [4, 6]], equal_nan=True)
    # max_growth = 1: no allowance, the quantile itself
    for q in (0.5, 0.9):
        plain = forecast(ONE, "quantile", q=q)["rate_rps"].to_numpy()
        grown = forecast(ONE, "quantile-growth", q=q, max_growth=1.0)["rate_rps"].to_numpy()
        np.testing.assert_array_equal(plain, grown)
    with pytest.raises(InputError, match="max_growth must be >= 1"):
        forecast(ONE, "quantile-growth", max_growth=0.5)


def test_future_steps_hold_the_latest_information() -> None:
    fc = forecast(ONE, "last-peak", steps=3, window_s=900)
    assert fc["rate_rps"].tolist()[-3:] == [4.0, 4.0, 4.0]
    sn = forecast(ONE, "seasonal-naive", steps=3, period_s=600)
    np.testing.assert_allclose(sn["rate_rps"].tolist()[-3:], [0.0, 4.0, NAN], equal_nan=True)


matrices = st.integers(2, 24).flatmap(
    lambda n: st.integers(1, 3).flatmap(
        lambda nb: st.tuples(
            st.lists(st.floats(0, 1e4, allow_nan=False), min_size=n * nb, max_size=n * nb).map(
                lambda v: np.array(v).reshape(n, nb)
            ),
            st.lists(st.floats(0, 1e4, allow_nan=False), min_size=n * nb, max_size=n * nb).map(
                lambda v: np.array(v).reshape(n, nb)
            ),
            st.integers(0, n - 1),
        )
    )
)


@pytest.mark.parametrize("method", [m for m, spec in METHODS.items() if not spec.reads_future])
@settings(max_examples=60, deadline=None)
@given(data=matrices, window_s=st.sampled_from([300.0, 900.0, 1800.0]))
def test_forecast_never_reads_the_future(method: str, data: tuple, window_s: float) -> None:
    """Changing epochs t, t+1, ... never changes the forecast for any epoch <= t."""
    x, other, t = data
    y = x.copy()
    y[t:] = other[t:]
    params = {"window_s": window_s} if "window_s" in METHODS[method].defaults else {}
    if method == "seasonal-naive":
        params = {"period_s": window_s}
    a = forecast(demand_from(x), method, steps=0, **params)
    b = forecast(demand_from(y), method, steps=0, **params)
    upto = a["epoch"] <= t
    np.testing.assert_array_equal(a.loc[upto, "rate_rps"].to_numpy(), b.loc[upto, "rate_rps"].to_numpy())


def test_oracle_reads_the_future_by_design() -> None:
    x = np.array([[1.0], [2.0], [3.0]])
    y = x.copy()
    y[2] = 9.0
    assert forecast(demand_from(x), "oracle")["rate_rps"][2] != forecast(demand_from(y), "oracle")["rate_rps"][2]


def test_backtest_hand_computed() -> None:
    bt = backtest(ONE, "last-peak", window_s=900).set_index("bucket")
    row = bt.loc["b0"]
    # scored epochs 1..6: f = [1, 5, 5, 8, 8, 8], a = [5, 2, 8, 3, 0, 4]
    assert row["n_epochs"] == 6
    assert row["mae_rps"] == pytest.approx(27 / 6)
    assert row["mape_pct"] == pytest.approx(100 * (4 / 5 + 3 / 2 + 3 / 8 + 5 / 3 + 4 / 4) / 5)
    assert row["under_rate"] == pytest.approx(2 / 6)
    assert row["shortfall_rps"] == pytest.approx(7 / 6)
    assert row["over_pct"] == pytest.approx(100 * (35 / 22 - 1))
    assert bt.loc[POOLED, "mae_rps"] == pytest.approx(27 / 6)
    orc = backtest(ONE, "oracle").set_index("bucket").loc["b0"]
    assert orc["n_epochs"] == 7 and orc["mae_rps"] == 0 and orc["under_rate"] == 0


def test_backtest_skips_partial_and_filled_epochs_and_score_from() -> None:
    d = demand_from(np.array(X)[:, None], durations=[300] * 6 + [120])
    assert backtest(d, "oracle").loc[0, "n_epochs"] == 6
    d["filled"] = d["epoch"] == 2
    assert backtest(d, "oracle").loc[0, "n_epochs"] == 5
    assert backtest(d, "oracle", score_from=4).loc[0, "n_epochs"] == 2
    mean = backtest(ONE, "last-peak", target="mean_rps", window_s=900).loc[0, "mae_rps"]
    assert mean == pytest.approx(27 / 12)


def test_pooled_row_leaves_out_buckets_that_never_see_demand() -> None:
    m = np.column_stack([X, np.zeros(7)])
    bt = backtest(demand_from(m), "last-peak", window_s=900).set_index("bucket")
    assert bt.loc["b1", "mae_rps"] == 0 and bt.loc[POOLED, "n_epochs"] == 6


def test_last_peak_on_azure_matches_an_independent_rolling_max() -> None:
    d = epoch_demand(load_trace_file(AZURE_CONV), DEFAULT_BUCKETS)
    fc = forecast(d, "last-peak")
    wide = d.pivot(index="epoch", columns="bucket", values="peak_rps")
    got = fc[~fc["future"]].pivot(index="epoch", columns="bucket", values="rate_rps")
    for e in range(1, len(wide)):
        np.testing.assert_allclose(got.loc[e].to_numpy(), wide.loc[max(0, e - 6) : e - 1].max().to_numpy())
    pd_ = planner_demand(fc)
    assert list(pd_.columns) == ["epoch", "bucket", "rate_rps"] and pd_["rate_rps"].notna().all()
    assert pd_["epoch"].min() == 1 and pd_["epoch"].max() == d["epoch"].max() + 1


def test_bad_method_and_params() -> None:
    with pytest.raises(InputError, match="unknown method 'arima'"):
        forecast(ONE, "arima")
    with pytest.raises(InputError, match="takes"):
        forecast(ONE, "oracle", alpha=0.5)
    with pytest.raises(InputError, match="q must be in"):
        forecast(ONE, "quantile", q=2)


def test_formulation_document_names_every_method() -> None:
    doc = (Path(__file__).resolve().parents[2] / "formulations" / "forecast.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\|\s*(FC\d+)\s*\|\s*`([a-z-]+)`", doc, flags=re.M))
    assert rows == {m.id: name for name, m in METHODS.items()}


def test_every_registered_forecaster_is_a_name_the_schema_accepts() -> None:
    from neuscale_opt.forecast_names import FORECAST_METHODS

    assert set(METHODS) == set(FORECAST_METHODS)
