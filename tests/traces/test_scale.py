"""Scaling a trace to k times its rate: counts, token mix, determinism, labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from neuscale_opt.errors import InputError
from neuscale_opt.traces.demand import epoch_demand
from neuscale_opt.traces.scale import rotate_within_windows, scale_trace


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
    # copies rotate within their 300-s window: no request leaves its window or the horizon
    assert s["arrival_s"].max() <= t["arrival_s"].max()
    assert (
        np.bincount((s["arrival_s"] // 300).astype(int)) == 3 * np.bincount((t["arrival_s"] // 300).astype(int))
    ).all()
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
    # copies rotate within their epoch: every epoch's count is exactly 4x
    assert (d4["count"].to_numpy() == 4 * d1["count"].to_numpy()).all()
    m1 = d1.set_index("epoch")["mean_rps"].to_numpy()
    m4 = d4.set_index("epoch")["mean_rps"].to_numpy()
    assert m4 == pytest.approx(4 * m1, rel=1e-12)


def test_factor_one_is_the_identity_and_bad_factors_are_refused():
    t = trace(10)
    assert scale_trace(t, 1.0) is t
    with pytest.raises(InputError, match="workload.rate_scale"):
        scale_trace(t, float("nan"))


def test_rotation_moves_each_window_by_one_offset_hand_checked():
    # two 10-s windows of a 15-s horizon (the second 5 s long); offsets drawn as the function does
    t = np.array([1.0, 4.0, 9.5, 11.0, 14.0])
    got = rotate_within_windows(t, 10.0, 15.0, np.random.default_rng(3))
    u = np.random.default_rng(3).uniform(0.0, 1.0, size=2)
    s0, s1 = 10.0 * u[0], 5.0 * u[1]
    want = [(1.0 + s0) % 10, (4.0 + s0) % 10, (9.5 + s0) % 10, 10 + (1.0 + s1) % 5, 10 + (4.0 + s1) % 5]
    assert got == pytest.approx(want)


def test_copies_keep_the_trace_dispersion_instead_of_clumping():
    # a Poisson trace superposed 10 times: independent copies keep the counts' index of dispersion
    # near 1 (a superposition of independent Poisson processes is Poisson); copies that all arrived
    # within a second of their original (the earlier rule) gave about 10 at 1-s resolution
    rng = np.random.default_rng(11)
    n = 6000
    t = pd.DataFrame({"arrival_s": np.sort(rng.uniform(0, 3000, n)), "input_tokens": 1, "output_tokens": 1})
    t.attrs["horizon_s"] = 3000.0
    s = scale_trace(t, 10.0, period_s=300.0)
    c = np.bincount(s["arrival_s"].astype(int), minlength=3000)
    assert c.var() / c.mean() == pytest.approx(1.0, abs=0.15)
