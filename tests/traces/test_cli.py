"""The trace-stats and forecast commands, end to end through neuscale_opt.cli.main."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from neuscale_opt.traces.shipped import AZURE_CODE, AZURE_CONV, MOONCAKE_CONV, SERVEGEN


def test_trace_stats_json_on_azure_code(run_cli: Callable) -> None:
    code, out, err = run_cli("trace-stats", AZURE_CODE, "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["rows"] == 8819 and s["format"] == "azure"
    assert s["span_s"] == pytest.approx(3435.948, abs=1e-3)
    assert s["rate_rps"] == pytest.approx(2.567, abs=1e-3)
    q = s["input_tokens"]
    assert [q["p50"], q["p90"], q["p99"]] == pytest.approx([1469, 5187.6, 7436])
    assert s["output_tokens"]["max"] == 1899
    assert s["full_epochs"] == 11 and s["requests_per_full_epoch"]["min"] == 32
    table = pd.DataFrame(s["buckets"]["table"])
    raw = pd.read_csv(AZURE_CODE)
    total = raw["ContextTokens"] + raw["GeneratedTokens"]
    bins = [-np.inf, 512, 1024, 2048, 4096, 8192, 16384, 32768, np.inf]
    expected = pd.cut(total, bins, labels=False).value_counts().reindex(range(8), fill_value=0)
    assert table["count"].tolist() == expected.tolist()


def test_trace_stats_text_and_2d(run_cli: Callable, tmp_path: Path) -> None:
    code, out, _ = run_cli("trace-stats", MOONCAKE_CONV, "--buckets", "input_output", "--representative", "p90")
    assert code == 0 and "rows           12031" in out and "i16384-inf_o1024-inf" in out
    dest = tmp_path / "s.json"
    assert run_cli("trace-stats", SERVEGEN, "--series", "m-mid", "--json", dest)[0] == 0
    s = json.loads(dest.read_text())
    assert s["windows"] == 2016 and s["filled_windows"] == 84


def test_forecast_outputs(run_cli: Callable, tmp_path: Path) -> None:
    j, c = tmp_path / "f.json", tmp_path / "f.csv"
    code, out, err = run_cli("forecast", AZURE_CONV, "--method", "ewma", "--backtest", "--json", j, "--csv", c)
    assert code == 0, err
    doc = json.loads(j.read_text())
    assert doc["method"] == "ewma" and doc["synthetic"] is False and doc["target"] == "peak_rps"
    assert {r["bucket"] for r in doc["backtest"]} >= {"s0-512", "pooled"}
    table = pd.read_csv(c)
    assert list(table.columns) == ["epoch", "bucket", "rate_rps", "actual_rps", "available", "future", "method"]
    assert table["epoch"].max() == 12 and table["future"].sum() == 8  # 12 epochs + 1 step, 8 buckets
    assert "ewma (FC2)" in out and "pooled" in out  # backtest text on stdout


def test_forecast_default_is_csv_on_stdout(run_cli: Callable) -> None:
    code, out, _ = run_cli("forecast", AZURE_CODE, "--method", "last-peak", "--buckets", "none", "--epoch", "600")
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0] == "epoch,bucket,rate_rps,actual_rps,available,future,method" and len(lines) == 1 + 6 + 1


def test_forecast_rate_series_and_synthetic(run_cli: Callable, tmp_path: Path) -> None:
    code, out, _ = run_cli(
        "forecast", SERVEGEN, "--series", "m-large", "--method", "seasonal-naive", "--backtest", "--json", "-"
    )
    doc = json.loads(out)
    assert code == 0 and doc["epoch_s"] == 600 and doc["backtest"][0]["n_epochs"] == 2016 - 144
    c = tmp_path / "syn.csv"
    code, out, _ = run_cli(
        "forecast",
        SERVEGEN,
        "--series",
        "m-large",
        "--method",
        "ewma",
        "--synthetic-tokens",
        AZURE_CODE,
        "--days",
        "0.25",
        "--mean-rps",
        "1",
        "--backtest",
        "--csv",
        c,
    )
    assert code == 0 and "[SYNTHETIC]" in out
    table = pd.read_csv(c)
    assert table["provenance"].str.startswith("synthetic composition of two real sources").all()


def test_trace_stats_single_request(run_cli: Callable, tmp_path: Path) -> None:
    one = tmp_path / "one.csv"
    one.write_text("timestamp_ms,input_length,output_length\n0,5,7\n")
    code, out, err = run_cli("trace-stats", one)
    assert code == 0, err
    assert "rows           1" in out and "rate n/a req/s" in out
