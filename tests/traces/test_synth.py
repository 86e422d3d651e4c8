"""The seeded multi-day synthetic composition: determinism, labelling, shape and token mix."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from neuscale_opt.traces.buckets import DEFAULT_BUCKETS
from neuscale_opt.traces.loaders import load_rate_series, load_trace_file
from neuscale_opt.traces.shipped import AZURE_CODE, SERVEGEN
from neuscale_opt.traces.synth import SYNTHETIC_PREFIX, compose_demand, compose_trace


@pytest.fixture(scope="module")
def sources() -> tuple[pd.DataFrame, pd.DataFrame]:
    return load_rate_series(SERVEGEN, series="m-large"), load_trace_file(AZURE_CODE)


def test_seeded_and_labelled(sources: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    rates, tokens = sources
    a = compose_trace(rates, tokens, seed=7, days=1, mean_rps=0.5)
    b = compose_trace(rates, tokens, seed=7, days=1, mean_rps=0.5)
    c = compose_trace(rates, tokens, seed=8, days=1, mean_rps=0.5)
    pd.testing.assert_frame_equal(a, b)
    assert len(a) != len(c) or not np.array_equal(a["arrival_s"], c["arrival_s"])
    label = a.attrs["label"]
    assert label.startswith(SYNTHETIC_PREFIX) and a.attrs["synthetic"] is True
    assert "servegen_bailian_rate_10min.csv [m-large]" in label and "azure_llm_2023_code.csv" in label
    assert a["provenance"].cat.categories.tolist() == [label]
    assert a["arrival_s"].is_monotonic_increasing and a["arrival_s"].between(0, 86400).all()


def test_shape_level_and_token_mix(sources: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    rates, tokens = sources
    syn = compose_trace(rates, tokens, seed=0, days=1, mean_rps=2.0)
    # level: mean rate within Poisson noise of the target (N ~ 172800, sd ~ 0.24 %)
    assert abs(len(syn) / 86400 - 2.0) < 0.02
    # shape: per-window counts follow the scaled series (Poisson: relative sd ~ 1/sqrt(1200))
    r = rates["rate_rps"].to_numpy()[:144]
    expected = r / r.mean() * 2.0 * 600
    got = np.bincount((syn["arrival_s"] // 600).astype(int), minlength=144)
    assert np.corrcoef(got, expected)[0, 1] > 0.97
    assert np.max(np.abs(got - expected) / np.sqrt(expected)) < 5
    # every (input, output) pair is a row of the token trace
    pairs = set(zip(tokens["input_tokens"], tokens["output_tokens"], strict=True))
    assert set(zip(syn["input_tokens"], syn["output_tokens"], strict=True)) <= pairs


def test_compose_demand_is_labelled_everywhere(sources: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    rates, tokens = sources
    d = compose_demand(rates, tokens, DEFAULT_BUCKETS, seed=1, days=0.5, mean_rps=1.0)
    assert d.attrs["synthetic"] is True and d.attrs["label"].startswith(SYNTHETIC_PREFIX)
    assert (d["provenance"].astype(str) == d.attrs["label"]).all()
    assert d["epoch"].max() == 143  # 12 h of 300-s epochs
    assert d["count"].sum() == len(compose_trace(rates, tokens, seed=1, days=0.5, mean_rps=1.0))
