"""Loaders: every format on tiny hand-written files, the shipped traces, and repairs."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from neuscale_opt.errors import InputError
from neuscale_opt.traces.loaders import (
    TraceWarning,
    detect_format,
    load_rate_series,
    load_trace,
    load_trace_file,
)
from neuscale_opt.traces.shipped import AZURE_CODE, AZURE_CONV, DATA_DIR, MOONCAKE_CONV, SERVEGEN
from neuscale_opt.traces.spec import ColumnMap, TraceSpec

AZURE_TEXT = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:17:03.9799600,4808,10\n"
    "2023-11-16 18:17:04.0319600,3180,8\n"
    "2023-11-16 18:17:05.5000000,7,0\n"
    "2023-11-16 18:22:03.9799600,100,200\n"
)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_azure_tiny(tmp_path: Path) -> None:
    df = load_trace_file(write(tmp_path / "a.csv", AZURE_TEXT))
    assert list(df.columns) == ["arrival_s", "input_tokens", "output_tokens"]
    assert df["arrival_s"].dtype == np.float64 and df["input_tokens"].dtype == np.int64
    np.testing.assert_allclose(df["arrival_s"], [0.0, 0.052, 1.52004, 300.0], atol=1e-9)
    assert df["input_tokens"].tolist() == [4808, 3180, 7, 100]
    assert df["output_tokens"].tolist() == [10, 8, 0, 200]
    assert df.attrs["format"] == "azure" and df.attrs["rows_in_file"] == 4


def test_mooncake_csv_jsonl_and_gzip(tmp_path: Path) -> None:
    csv = "timestamp_ms,input_length,output_length,hash_ids\n0,600,5,0 1\n3000,10,20,2\n1500,7,8,3\n"
    rows = [
        {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 1500, "input_length": 7, "output_length": 8, "hash_ids": [3]},
        {"timestamp": 3000, "input_length": 10, "output_length": 20, "hash_ids": [2]},
    ]
    jsonl = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "m.jsonl.gz").write_bytes(gzip.compress(jsonl.encode()))
    with pytest.warns(TraceWarning, match=r"row 3, column 'timestamp_ms'.*sorted"):
        a = load_trace_file(write(tmp_path / "m.csv", csv))
    b = load_trace_file(tmp_path / "m.jsonl.gz")
    for df in (a, b):
        assert df["arrival_s"].tolist() == [0.0, 1.5, 3.0]
        assert df["input_tokens"].tolist() == [600, 7, 10]
        assert df["output_tokens"].tolist() == [5, 8, 20]
    assert a.attrs["repaired"] and not b.attrs["repaired"]


def test_burstgpt(tmp_path: Path) -> None:
    text = (
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,GPT-4,1087,0,1087,API log\n"
    )
    path = write(tmp_path / "b.csv", text)
    assert detect_format(path) == "burstgpt"
    df = load_trace_file(path)
    assert df["arrival_s"].tolist() == [0.0, 40.0]
    assert df["input_tokens"].tolist() == [472, 1087]
    assert df["output_tokens"].tolist() == [18, 0]  # failed request kept


@pytest.mark.parametrize(
    ("unit", "times", "expected"),
    [
        ("s", ["10", "12.5", "20"], [0.0, 2.5, 10.0]),
        ("ms", ["1000", "3500", "11000"], [0.0, 2.5, 10.0]),
        ("datetime", ["2024-01-01T00:00:10", "2024-01-01T00:00:12.5", "2024-01-01T00:00:20"], [0.0, 2.5, 10.0]),
    ],
)
def test_generic_units(tmp_path: Path, unit: str, times: list[str], expected: list[float]) -> None:
    text = "t,prompt,completion\n" + "".join(f"{t},{i + 1},{2 * i + 1}\n" for i, t in enumerate(times))
    write(tmp_path / "g.csv", text)
    spec = TraceSpec(
        path="g.csv",
        format="generic",
        columns=ColumnMap(arrival="t", input_tokens="prompt", output_tokens="completion", time_unit=unit),
    )
    df = load_trace(spec, base_dir=tmp_path)
    np.testing.assert_allclose(df["arrival_s"], expected)
    assert df["input_tokens"].tolist() == [1, 2, 3] and df["output_tokens"].tolist() == [1, 3, 5]


def test_horizon_cut_rebases_to_start(tmp_path: Path) -> None:
    write(tmp_path / "a.csv", AZURE_TEXT)
    df = load_trace(TraceSpec(path="a.csv", start_s=1.0, duration_s=299.0), base_dir=tmp_path)
    # kept: arrivals 1.52004 (in [1, 300)); 300.0 is outside the half-open horizon
    np.testing.assert_allclose(df["arrival_s"], [0.52004])
    assert df.attrs["horizon_s"] == 299.0


@pytest.mark.parametrize(
    ("path", "fmt", "rows", "span_s", "mean_in", "mean_out"),
    [
        (AZURE_CODE, "azure", 8819, 3435.9, 2047.8, 27.9),
        (AZURE_CONV, "azure", 19366, 3501.7, 1154.7, 211.1),
        (MOONCAKE_CONV, "mooncake", 12031, 3537.0, 12035.1, 342.6),
    ],
)
def test_shipped_traces_match_the_published_figures(
    path: Path, fmt: str, rows: int, span_s: float, mean_in: float, mean_out: float
) -> None:
    df = load_trace_file(path)
    assert df.attrs["format"] == fmt
    assert len(df) == rows
    assert df["arrival_s"].iloc[0] == 0.0 and df["arrival_s"].is_monotonic_increasing
    assert math.isclose(df["arrival_s"].iloc[-1], span_s, abs_tol=0.05)
    assert math.isclose(df["input_tokens"].mean(), mean_in, abs_tol=0.05)
    assert math.isclose(df["output_tokens"].mean(), mean_out, abs_tol=0.05)
    # independent read with plain pandas
    raw = pd.read_csv(path)
    col = "ContextTokens" if fmt == "azure" else "input_length"
    assert df["input_tokens"].sum() == raw[col].sum()


def test_rate_series_servegen() -> None:
    rs = load_rate_series(SERVEGEN, series="m-mid")
    assert len(rs) == 2016 and rs["window_s"].eq(600).all()
    assert int(rs["filled"].sum()) == 84  # the all-zero windows of the README
    raw = pd.read_csv(SERVEGEN).query("model == 'm-mid'").reset_index(drop=True)
    real = raw["total_rate_rps"] > 0
    np.testing.assert_allclose(rs.loc[real, "rate_rps"], raw.loc[real, "total_rate_rps"])
    # a filled window lies between its real neighbours (linear interpolation)
    i = int(np.flatnonzero(rs["filled"].to_numpy() & ~rs["filled"].shift(1, fill_value=True).to_numpy())[0])
    j = i + int(np.argmax(~rs["filled"].to_numpy()[i:]))
    lo, hi = sorted([rs.loc[i - 1, "rate_rps"], rs.loc[j, "rate_rps"]])
    assert (rs.loc[i : j - 1, "rate_rps"].between(lo, hi)).all()
    large = load_rate_series(TraceSpec(path=SERVEGEN.name, format="rate-series", series="m-large"), base_dir=DATA_DIR)
    assert not large["filled"].any() and math.isclose(large["rate_rps"].mean(), 195.84, abs_tol=0.01)


def test_rate_series_gap_and_zero_filled_by_interpolation(tmp_path: Path) -> None:
    # window 1200 absent, window 600 zero: both missing -> linear between 1 (t=0) and 4 (t=1800)
    write(tmp_path / "r.csv", "window_start_s,window_s,rate_rps\n0,600,1\n600,600,0\n1800,600,4\n")
    rs = load_rate_series(tmp_path / "r.csv")
    assert rs["window_start_s"].tolist() == [0.0, 600.0, 1200.0, 1800.0]
    np.testing.assert_allclose(rs["rate_rps"], [1.0, 2.0, 3.0, 4.0])
    assert rs["filled"].tolist() == [False, True, True, False]
    kept = load_rate_series(tmp_path / "r.csv", zero_is_missing=False)
    np.testing.assert_allclose(kept["rate_rps"], [1.0, 0.0, 2.0, 4.0])


def test_rate_series_needs_a_series_name_when_several() -> None:
    with pytest.raises(InputError, match=r"several series .*m-large"):
        load_rate_series(SERVEGEN)
    with pytest.raises(InputError, match=r"no series 'nope'"):
        load_rate_series(SERVEGEN, series="nope")


def test_load_trace_refuses_rate_series_spec() -> None:
    with pytest.raises(InputError, match="load_rate_series"):
        load_trace(TraceSpec(path=str(SERVEGEN), format="rate-series", series="m-large"))
