"""Scaling a trace to k times its rate: counts, token mix, determinism, labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from neuscale_opt.errors import InputError
from neuscale_opt.traces.demand import epoch_demand
from neuscale_opt.traces.scale import scale_trace


def trace(n: int = 1000, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 600, n)),
            "input_tokens": rng.integers(1, 4000, n),
            "output_tokens": rng.integers(1, 500, n),
        }
    )
    t.attrs["source"] = "t.csv"
    return t


def test_integer_factor_multiplies_every_request_and_keeps_the_mix():
    t = trace()
    s = scale_trace(t, 3.0)
    assert len(s) == 3 * len(t)
    assert s["arrival_s"].is_monotonic_increasing
    assert s["input_tokens"].mean() == pytest.approx(t["input_tokens"].mean())
    assert sorted(s["output_tokens"]) == sorted(np.repeat(t["output_tokens"].to_numpy(), 3))
    # every copy lies within the jitter of its original
    assert (s["arrival_s"].max() - t["arrival_s"].max()) < 1.0
    assert "3x" in s.attrs["label"] and s.attrs["rate_scale"] == 3.0


def test_fractional_factor_and_thinning_are_seeded():
    t = trace(5000)
    a, b = scale_trace(t, 2.5, seed=7), scale_trace(t, 2.5, seed=7)
    pd.testing.assert_frame_equal(a, b)
    assert len(a) == pytest.approx(2.5 * len(t), rel=0.03)
    thin = scale_trace(t, 0.2, seed=0)
    assert len(thin) == pytest.approx(0.2 * len(t), rel=0.1)
    assert set(thin["arrival_s"]) <= set(t["arrival_s"])  # thinning keeps original arrival times


def test_epoch_rates_scale_with_the_factor():
    t = trace(3000)
    d1 = epoch_demand(t, None, epoch_s=300.0)
    d4 = epoch_demand(scale_trace(t, 4.0), None, epoch_s=300.0)
    assert d4["count"].sum() == 4 * d1["count"].sum()
    full = [0, 1]  # the two full epochs (jittered copies may spill past the last arrival)
    m1 = d1.set_index("epoch").loc[full, "mean_rps"].to_numpy()
    m4 = d4.set_index("epoch").loc[full, "mean_rps"].to_numpy()
    assert m4 == pytest.approx(4 * m1, rel=0.02)


def test_factor_one_is_the_identity_and_bad_factors_are_refused():
    t = trace(10)
    assert scale_trace(t, 1.0) is t
    with pytest.raises(InputError, match="workload.rate_scale"):
        scale_trace(t, float("nan"))
