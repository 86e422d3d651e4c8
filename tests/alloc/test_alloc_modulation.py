"""AT4 of the SLO-attainment model: arrivals whose rate moves inside the sizing window.

The class's movement (``traces.demand.rate_modulation``, D12) against hand-counted arrivals, the
size-biased nodes against their moments and a numerical integral, the safe loads' grid against the
exact mixture, and the modulated safe load against one-vPod replays of gamma-modulated arrivals."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from alloc_support import attainment_inputs, one_class_picks, one_vpod
from scipy import integrate
from scipy.stats import gamma

from neuscale_opt.alloc.attainment import (
    attainment,
    modulated_attainment,
    modulation_nodes,
    safe_load,
)
from neuscale_opt.candidates import build_coefficients
from neuscale_opt.replay import ReplayOptions, replay
from neuscale_opt.traces.demand import rate_modulation
from neuscale_opt.traces.spec import BucketSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replay"))
from replay_builders import plan_of  # noqa: E402

TARGET = 0.99
HORIZON_S = 1800.0


def _arrivals(counts: np.ndarray, slot_s: float, name: str = "a") -> pd.DataFrame:
    """``counts[i]`` arrivals evenly spread over slot ``i`` of ``slot_s`` s, every one of class ``name``."""
    t = np.concatenate([(i + (np.arange(c) + 0.5) / max(c, 1)) * slot_s for i, c in enumerate(counts)])
    df = pd.DataFrame({"arrival_s": t, "input_tokens": 100, "output_tokens": 10, "bucket": name})
    df.attrs["horizon_s"] = len(counts) * slot_s
    return df


SPEC = BucketSpec(kind="total", edges=(512,))


def test_rate_modulation_hand_counted():
    """A slow movement: 2-s slots of 0 and 20 arrivals in runs of ten, inside 200-s windows (100
    slots, five runs of each), 12 windows. Centred on each window's mean M = 10 every slot is off by
    10: variance V = 100 x 100 / 99 (99 pairs a window), and of the 99 adjacent pairs 90 share a
    run (+100) and 9 straddle a switch (-100): covariance C = 8,100 / 99. By hand, c2 = min(C + V /
    100 - 2 V / sqrt(P), V - M - 2 M sqrt(2 / P)) / M^2 with P = 12 x 99."""
    counts = np.tile(np.repeat([0, 20], 10), 5 * 12)
    got = rate_modulation(_arrivals(counts, 2.0), SPEC, 200.0, scale_s=2.0)
    pairs = 12 * 99
    v = 100.0 * 100 / 99
    c = 8100.0 / 99
    slow = c + v / 100 - 2 * v / math.sqrt(pairs)
    beyond = v - 10.0 - 2 * 10.0 * math.sqrt(2 / pairs)
    assert slow < beyond
    assert got["s0-512"] == pytest.approx(slow / 100.0, rel=1e-12)
    assert got["s512-inf"] == 0.0  # no arrivals
    # the same counts alternating slot by slot: clumps, not a movement (adjacent slots anti-correlated)
    assert rate_modulation(_arrivals(np.tile([0, 20], 6000), 2.0), SPEC, 200.0, scale_s=2.0)["s0-512"] == 0.0
    # a steady count (less variable than Poisson) moves nothing; one slot per window cannot show movement
    assert rate_modulation(_arrivals(np.full(1800, 10), 2.0), SPEC, 300.0)["s0-512"] == 0.0
    assert rate_modulation(_arrivals(counts, 2.0), SPEC, 2.0, scale_s=2.0)["s0-512"] == 0.0
    # a trailing partial window is left out: the same 12 windows with 100 s more recorded
    longer = _arrivals(np.concatenate([counts, np.full(50, 20)]), 2.0)
    assert rate_modulation(longer, SPEC, 200.0, scale_s=2.0)["s0-512"] == pytest.approx(slow / 100.0, rel=1e-12)


def test_rate_modulation_poisson_thinned_and_modulated():
    """Poisson arrivals at a steady rate give 0 (the allowance covers the estimate's noise), and so
    do clumps (the rate redrawn independently in every 2-s slot); a gamma-distributed rate redrawn
    every 10 s gives its c2 less what a slot pair straddling a redraw (1 in 5) and each window's own
    mean (1 of its 30 redraws) hide, and a random thinning to a third keeps it."""
    rng = np.random.default_rng(3)
    steady = rng.poisson(20.0, 1800)
    assert rate_modulation(_arrivals(steady, 2.0), SPEC, 300.0)["s0-512"] == 0.0
    c2 = 0.2
    slots = 3600
    clumps = rng.poisson(20.0 * rng.gamma(1 / c2, c2, slots))
    assert rate_modulation(_arrivals(clumps, 2.0), SPEC, 300.0)["s0-512"] < 0.01
    counts = rng.poisson(20.0 * np.repeat(rng.gamma(1 / c2, c2, slots // 5), 5))
    tr = _arrivals(counts, 2.0)
    want = c2 * (4 / 5) * (29 / 30)
    full = rate_modulation(tr, SPEC, 300.0)["s0-512"]
    assert full == pytest.approx(want, rel=0.15)
    thinned = tr[rng.random(len(tr)) < 1 / 3].reset_index(drop=True)
    thinned.attrs = dict(tr.attrs)
    assert rate_modulation(thinned, SPEC, 300.0)["s0-512"] == pytest.approx(want, rel=0.2)


def test_modulation_nodes_moments():
    """The nodes' weights sum to 1, their mean is the size-biased mean 1 + c2 (exactly: conditional
    means) and their variance c2 (1 + c2) less what the pieces hide (Gamma(1 / c2 + 1, scale
    c2)); c2 = 0 puts every node at 1."""
    g, w = modulation_nodes(np.array([0.0, 0.01, 0.1, 0.5]))
    assert w.sum() == pytest.approx(1.0)
    assert np.all(g[0] == 1.0)
    for row, c2 in zip(g[1:], (0.01, 0.1, 0.5), strict=True):
        assert row @ w == pytest.approx(1 + c2, rel=1e-9)
        assert ((row - 1 - c2) ** 2) @ w == pytest.approx(c2 * (1 + c2), rel=0.03)
        assert np.all(np.diff(row) > 0)
    # the upper tail is resolved: the last node sits beyond the 0.9998 quantile
    assert g[3, -1] > gamma.ppf(0.9998, 1 / 0.5 + 1, scale=0.5)


@pytest.fixture(scope="module")
def one_class():
    return one_class_picks(HORIZON_S)


def test_modulated_attainment_is_the_size_biased_integral(one_class):
    """The nodes' average against the integral of Attainment(lambda g) over the size-biased
    gamma density (scipy.integrate.quad), at a load where it matters; c2 = 0 is AT0-AT3."""
    _inst, coeffs, pick = one_class
    args, tail, prompt = attainment_inputs(pick, coeffs.buckets)
    mu = args[-1]
    lam = 0.4 * mu
    assert np.allclose(
        modulated_attainment(lam, np.zeros(len(lam)), *args, tail=tail, prompt=prompt),
        attainment(lam, *args, tail=tail, prompt=prompt),
    )
    c2 = 0.3
    got = modulated_attainment(lam, np.full(len(lam), c2), *args, tail=tail, prompt=prompt)
    for i in range(len(pick)):
        one = tuple(np.asarray(a)[[i]] for a in args)
        t1 = tuple(np.asarray(a)[[i]] for a in tail) if tail is not None else None
        p1 = tuple(None if a is None else np.asarray(a)[[i]] for a in prompt) if prompt is not None else None

        def f(x, i=i, one=one, t1=t1, p1=p1):
            if x * lam[i] > mu[i]:
                return 0.0
            return float(attainment(np.array([x * lam[i]]), *one, tail=t1, prompt=p1)[0]) * gamma.pdf(
                x, 1 / c2 + 1, scale=c2
            )

        want = integrate.quad(f, 0, mu[i] / lam[i], limit=200, points=[1.0])[0]
        assert got[i] == pytest.approx(want, abs=0.01), pick.loc[i, "vpod_type"]
        assert got[i] < float(attainment(lam[[i]], *one, tail=t1, prompt=p1)[0])


def test_safe_load_grid_against_the_exact_mixture(one_class):
    """The safe loads' grid and interpolation against the exact mixture: at the grid's load the
    exact average keeps the target less 0.003, and 0.02 above it, it does not; a class with
    c2 = 0 gets exactly the Poisson safe load."""
    _inst, coeffs, pick = one_class
    c2 = 0.2
    steady = safe_load(pick, coeffs.buckets, TARGET)
    assert np.array_equal(safe_load(pick, coeffs.buckets.assign(rate_cv2=0.0), TARGET), steady)
    u = safe_load(pick, coeffs.buckets.assign(rate_cv2=c2), TARGET)
    assert np.all(u < steady)
    args, tail, prompt = attainment_inputs(pick, coeffs.buckets)
    mu = args[-1]
    c = np.full(len(u), c2)
    at = modulated_attainment(u * mu, c, *args, tail=tail, prompt=prompt)
    above = modulated_attainment(np.minimum(u + 0.02, 1.0) * mu, c, *args, tail=tail, prompt=prompt)
    assert np.all(at >= TARGET - 0.003), at
    assert np.all(above < TARGET), above


def _modulated_trace(lam: float, s_in: int, s_out: int, c2: float, slot_s: float, seed: int) -> pd.DataFrame:
    """Poisson arrivals at ``lam`` x G per slot of ``slot_s``, G ~ Gamma(1 / c2, scale c2) afresh each slot."""
    rng = np.random.default_rng(seed)
    n = int(HORIZON_S / slot_s)
    counts = rng.poisson(lam * rng.gamma(1 / c2, c2, n) * slot_s)
    t = np.sort(np.concatenate([(i + rng.random(k)) * slot_s for i, k in enumerate(counts)]))
    lengths = {"input_tokens": np.int64(s_in), "output_tokens": np.int64(s_out)}
    return pd.DataFrame({"arrival_s": t, **lengths, "bucket": "a"})


def test_modulated_safe_load_against_one_vpod_replays(one_class):
    """One vPod replayed for 30 minutes under arrivals whose rate is redrawn every 5 s from a gamma
    law of c2 = 0.3 (mean of two seeds): at the modulated safe load it keeps the target (less the
    sampling noise of 360 draws, 0.006), 0.12 above it it does not, and at the Poisson safe load
    (what AT0-AT3 alone would plan) the rows of 8 slots or more miss it by more than a point."""
    inst, coeffs, pick = one_class
    c2 = 0.3
    steady = safe_load(pick, coeffs.buckets, TARGET)
    moving = safe_load(pick, coeffs.buckets.assign(rate_cv2=c2), TARGET)
    lengths = coeffs.buckets.set_index("bucket")
    s_in, s_out = int(lengths.at["a", "input_tokens"]), int(lengths.at["a", "output_tokens"])

    def replayed(r, load: float, seed: int) -> float:
        lam = load * float(r.max_rate_rps)
        tr = _modulated_trace(lam, s_in, s_out, c2, 5.0, seed)
        res = replay(plan_of([one_vpod(r, lam)]), inst, trace=tr, options=ReplayOptions(surge=False), coeffs=coeffs)
        return float(res.totals["slo_attainment"])

    assert len(pick) >= 4
    for r, u_mod, u_poi in zip(pick.itertuples(), moving, steady, strict=True):
        assert np.mean([replayed(r, u_mod, s) for s in (0, 1)]) >= TARGET - 0.006, r.vpod_type
        assert replayed(r, min(1.0, u_mod + 0.12), 0) < TARGET, r.vpod_type
        if r.batch * r.pp >= 8:
            assert replayed(r, u_poi, 0) < TARGET - 0.01, r.vpod_type


def test_coefficients_refuse_a_bad_rate_cv2(one_class):
    """A coefficient table's rate_cv2 must be a finite number >= 0 (the tables are checked when made)."""
    from dataclasses import replace

    from neuscale_opt.errors import InputError

    _inst, coeffs, _pick = one_class
    assert replace(coeffs, buckets=coeffs.buckets.assign(rate_cv2=0.25)).buckets["rate_cv2"].iloc[0] == 0.25
    for bad in (-0.1, float("nan"), float("inf"), "x"):
        with pytest.raises(InputError, match="rate_cv2 must be a finite number >= 0"):
            replace(coeffs, buckets=coeffs.buckets.assign(rate_cv2=bad))


def test_trace_instance_carries_each_class_movement():
    """A trace instance's classes carry D12 over the window whose mean rate is planned (``burst``:
    the sizing window; ``mean``: the epoch); ``peak`` (the busiest sub-window's rate) and
    ``arrivals = "poisson"`` leave it out, and the safe loads are then AT0-AT3's, never below the
    modulated ones (less the grid's step, 0.01)."""
    from neuscale_opt.candidates import instance_trace
    from neuscale_opt.instance import load_instance

    base = load_instance(Path(__file__).resolve().parents[2] / "instances" / "azure-conv.toml")

    def with_workload(**kw):
        inst = base.model_copy(update={"workload": base.workload.model_copy(update=kw)})
        inst._path = base.path
        return inst

    burst = build_coefficients(with_workload(provision_for="burst"))
    mean = build_coefficients(with_workload(provision_for="mean"))
    assert "rate_cv2" not in build_coefficients(with_workload(provision_for="peak")).buckets.columns
    trace = instance_trace(base)
    horizon = base.epochs.horizon * base.epochs.length_s
    for coeffs, window in ((burst, burst.meta["sizing_window"]["window_s"]), (mean, base.epochs.length_s)):
        want = rate_modulation(trace, base.workload.buckets, window, horizon_s=horizon)
        got = coeffs.buckets.set_index("bucket")["rate_cv2"]
        assert np.allclose(got.to_numpy(), want.reindex(got.index).to_numpy())
    assert (burst.buckets["rate_cv2"] > 0).any()
    steady = build_coefficients(with_workload(provision_for="burst", arrivals="poisson"))
    assert "rate_cv2" not in steady.buckets.columns
    cfg = burst.configs[burst.configs["phase"] == "colocated"]
    u_mod = safe_load(cfg, burst.buckets, TARGET)
    u_poi = safe_load(cfg, steady.buckets, TARGET)
    assert np.all(u_mod <= u_poi + 0.01) and np.any(u_mod < u_poi - 0.01)


def test_rate_modulation_of_a_long_sparse_trace_stays_small():
    """A year of 2-s slots in 5-min windows (15.8 million slots per class) is summed over the
    occupied slots only: no dense table, and a handful of arrivals moves nothing."""
    t = np.array([0.5, 1.0e7, 3.0e7])
    tr = pd.DataFrame({"arrival_s": t, "input_tokens": 100, "output_tokens": 10})
    tr.attrs["horizon_s"] = 3.15e7
    got = rate_modulation(tr, SPEC, 300.0)
    assert list(got.index) == ["s0-512", "s512-inf"] and (got == 0.0).all()
