"""The sizing window chosen from the trace's burstiness (``traces.demand.sizing_window``, D7-D10 of
``formulations/forecast.md``), on synthetic arrivals whose answer is known by construction."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from neuscale_opt.errors import InputError
from neuscale_opt.traces.demand import burst_demand, observed_demand, prewarm_lead_s, sizing_window
from neuscale_opt.traces.spec import BucketSpec

H = 3600.0  # 12 epochs of 300 s, 10-s base sub-windows


def _trace(t: np.ndarray, inp: np.ndarray | None = None) -> pd.DataFrame:
    order = np.argsort(t, kind="stable")
    inp = np.full(len(t), 100) if inp is None else inp
    df = pd.DataFrame({"arrival_s": t[order], "input_tokens": inp[order], "output_tokens": np.full(len(t), 10)})
    df.attrs["horizon_s"] = H
    return df


def _poisson(rate: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(0.0, H, rng.poisson(rate * H))


def _mmpp(hi: float, lo: float, tau: float, seed: int) -> np.ndarray:
    """Poisson arrivals whose rate alternates hi, lo, hi, ... every ``tau`` s (states aligned to 0)."""
    rng = np.random.default_rng(seed)
    parts = [
        k * tau + rng.uniform(0.0, tau, rng.poisson((hi if k % 2 == 0 else lo) * tau)) for k in range(int(H / tau))
    ]
    return np.concatenate(parts)


@pytest.mark.parametrize(("rate", "seed"), [(0.5, 1), (5.0, 2), (50.0, 3)])
def test_poisson_arrivals_are_sized_on_the_epoch_mean(rate, seed):
    # a steady Poisson rate does not move inside any window: w* = the epoch, burst_rps = the mean
    tr = _trace(_poisson(rate, seed))
    w, reason = sizing_window(tr)
    assert w == 300.0
    assert all(c["cv_extra"] <= 0.1 for c in reason["candidates"])
    dem = burst_demand(tr, None)
    assert np.allclose(dem["burst_rps"], dem["count"] / 300.0)


def test_clumped_copies_are_not_rate_movement():
    # a Poisson trace whose every request arrives as 10 copies within 1 s (a trace that repeats
    # requests in clumps): its counts vary 10x more than Poisson at every scale, yet its rate is
    # steady: still the epoch mean
    base = _poisson(2.0, 4)
    rng = np.random.default_rng(4)
    clumped = np.sort(
        np.concatenate([base] + [np.minimum(base + rng.uniform(0, 1, len(base)), H - 1e-6) for _ in range(9)])
    )
    tr = _trace(clumped)
    tr.attrs["horizon_s"] = H
    assert sizing_window(tr)[0] == 300.0


def test_a_trailing_partial_epoch_is_sized_on_its_own_length():
    # 11 full epochs and one of 200 s: at w* = 300 s its rate is its count over 200 s, not over
    # the 300 s of a window it does not fill
    h = 3500.0
    t = _poisson(5.0, 6)
    t = t[t < h]
    tr = _trace(t)
    tr.attrs["horizon_s"] = h
    dem = burst_demand(tr, None, horizon_s=h)
    assert dem.attrs["sizing_window"]["window_s"] == 300.0
    last = dem[dem["epoch"] == 11].iloc[0]
    assert last["burst_rps"] == pytest.approx(((t >= 3300.0).sum()) / 200.0)


def test_a_horizon_longer_than_the_data_is_not_a_rate_drop():
    # a steady rate recorded until 3500 s, planned over 12 whole epochs (epochs.horizon = 12, H =
    # 3600 s): the last 100 s hold nothing because nothing was recorded. Counted as a full epoch
    # they read as the rate falling to 0 inside a 300-s window (cv_x(300) ~ 0.13 at 5 req/s) and
    # would shorten w*; epoch 11 is left out of the estimate instead, as a partial epoch is
    h = 3500.0
    t = _poisson(5.0, 6)
    tr = _trace(t[t < h])
    tr.attrs["horizon_s"] = h
    assert sizing_window(tr, horizon_s=H)[0] == 300.0
    assert sizing_window(tr, horizon_s=H)[1]["candidates"] == sizing_window(tr, horizon_s=3300.0)[1]["candidates"]
    # and epoch 11 is sized on the 200 s the trace recorded of it, not on the horizon's 300 s (its
    # mean rate, what arrives on average over the epoch, keeps the 300 s)
    dem = burst_demand(tr, None, horizon_s=H)
    last = dem[dem["epoch"] == 11].iloc[0]
    n11 = int((t[t < h] >= 3300.0).sum())
    assert last["burst_rps"] == pytest.approx(n11 / 200.0)
    assert last["mean_rps"] == pytest.approx(n11 / 300.0)
    # the same 100 s recorded empty (the data's horizon 3600 s): a real lull, which does count
    tr.attrs["horizon_s"] = H
    assert sizing_window(tr, horizon_s=H)[0] < 300.0


@pytest.mark.parametrize(("hi", "lo"), [(30.0, 10.0), (6.0, 2.0)])
def test_mmpp_is_sized_within_its_states(hi, lo):
    # rate jumps every 60 s: windows of 10, 20 and 30 s lie inside one state (they divide 60), a
    # 50-s window straddles a jump in 4 of every 6 windows: w* = 30 s
    tr = _trace(_mmpp(hi, lo, 60.0, seed=5))
    w, reason = sizing_window(tr)
    assert w == 30.0
    cv = {c["window_s"]: c["cv_extra"] for c in reason["candidates"]}
    assert cv[50.0] > 0.1
    # a 300-s epoch holds 3 states of one rate and 2 of the other: the within-epoch variance of
    # the 10-s counts beyond Poisson is 0.6 x 0.4 x ((hi - lo) x 10)^2, over a mean count of
    # (hi + lo) / 2 x 10 (epochs alternate 3:2 and 2:3): cv = sqrt(0.24) (hi - lo) / ((hi + lo) / 2)
    # = 0.490; the two-standard-error allowance takes a little off
    hand = math.sqrt(0.24) * (hi - lo) / ((hi + lo) / 2)
    assert cv[300.0] == pytest.approx(hand, rel=0.08)
    assert cv[300.0] <= hand * 1.02


def test_jumps_every_30_s_are_sized_at_the_base_window():
    # a 20-s window straddles a 30-s state boundary in 1 of every 3 windows: w* = 10 s
    assert sizing_window(_trace(_mmpp(30.0, 10.0, 30.0, seed=6)))[0] == 10.0


def test_burst_rps_is_each_class_share_of_the_pooled_peak():
    # two classes (input 100 and 3000 tokens, total buckets at 512): class shares x the busiest
    # 30-s pooled count, counted here directly from the arrivals
    rng = np.random.default_rng(7)
    t = _mmpp(30.0, 10.0, 60.0, seed=8)
    inp = np.where(rng.random(len(t)) < 0.25, 3000, 100)
    tr = _trace(t, inp)
    spec = BucketSpec(kind="total", edges=(512,))
    dem = burst_demand(tr, spec)
    assert dem.attrs["sizing_window"]["window_s"] == 30.0
    ts, big = tr["arrival_s"].to_numpy(), tr["input_tokens"].to_numpy() > 512
    for e in range(12):
        m = (ts >= 300 * e) & (ts < 300 * (e + 1))
        peak = max(((ts >= 300 * e + 30 * j) & (ts < 300 * e + 30 * (j + 1))).sum() for j in range(10)) / 30.0
        rows = dem[dem["epoch"] == e].set_index("bucket")["burst_rps"]
        assert rows["s512-inf"] == pytest.approx((m & big).sum() / m.sum() * peak)
        assert rows["s0-512"] == pytest.approx((m & ~big).sum() / m.sum() * peak)
    # the pooled group is sized for the pooled peak, never more than the sum of per-class peaks
    per_class = dem.groupby("epoch", observed=True)["peak_rps"].sum()
    pooled = dem.groupby("epoch", observed=True)["burst_rps"].sum()
    assert (pooled <= per_class + 1e-9).all()


def test_bad_headroom_is_refused():
    with pytest.raises(InputError, match="headroom"):
        sizing_window(_trace(_poisson(1.0, 9)), headroom=-0.1)


def test_instance_records_the_window_and_sizes_for_it():
    from pathlib import Path

    from neuscale_opt.candidates import build_coefficients, instance_trace
    from neuscale_opt.instance import load_instance

    base = load_instance(Path(__file__).resolve().parents[2] / "instances" / "azure-conv.toml")
    inst = base.model_copy(update={"workload": base.workload.model_copy(update={"provision_for": "burst"})})
    inst._path = base.path
    coeffs = build_coefficients(inst)
    sw = coeffs.meta["sizing_window"]
    w = sw["window_s"]
    assert w == sizing_window(instance_trace(inst))[0] and sw["why"]
    # every epoch's classes together are sized for the busiest w-s window of the pooled arrivals
    t = instance_trace(inst)["arrival_s"].to_numpy()
    sized = coeffs.demand.groupby("epoch")["rate_rps"].sum()
    for e, r in sized.items():
        if 300 * (e + 1) > t.max():
            continue  # trailing partial epoch
        counts = np.bincount(((t[(t >= 300 * e) & (t < 300 * (e + 1))] - 300 * e) // w).astype(int))
        assert r == pytest.approx(counts.max() / w * inst.workload.rate_scale)


def test_observed_demand_reads_only_the_observed_part_of_each_epoch():
    # D11 by hand: T = 300 s, L = 30 s, observed part [0, 270) of each epoch. Epoch 0: arrivals at
    # 5, 15, 16 s (class of 100 tokens) and 280 s (after the cut: not seen); epoch 1: 300, 301 s.
    spec = BucketSpec(kind="total", edges=(512,))
    t = np.array([5.0, 15.0, 16.0, 280.0, 300.0, 301.0])
    tr = _trace(t)
    b = {n: i for i, n in enumerate(["s0-512", "s512-inf"])}
    mean = observed_demand(tr, spec, 2, 300.0, 30.0, "mean")
    assert mean[0, b["s0-512"]] == pytest.approx(3 / 270.0) and mean[1, b["s0-512"]] == pytest.approx(2 / 270.0)
    peak = observed_demand(tr, spec, 2, 300.0, 30.0, "peak", subwindow_s=10.0)
    assert peak[0, b["s0-512"]] == pytest.approx(2 / 10.0)  # 15 and 16 s share [10, 20)
    # burst, w* = 150 s: one whole 150-s window fits in 270 s; the pooled count of [0, 150) is 3
    burst = observed_demand(tr, spec, 2, 300.0, 30.0, "burst", window_s=150.0)
    assert burst[0, b["s0-512"]] == pytest.approx(3 / 150.0)
    # w* = 300 s does not fit: the pooled observed mean
    burst = observed_demand(tr, spec, 2, 300.0, 30.0, "burst", window_s=300.0)
    assert burst[0, b["s0-512"]] == pytest.approx(3 / 270.0)
    assert (burst[:, b["s512-inf"]] == 0).all()
    # L = 0 is the whole epoch (D3: the request at 280 s counts)
    assert observed_demand(tr, spec, 2, 300.0, 0.0, "mean")[0, b["s0-512"]] == pytest.approx(4 / 300.0)
    with pytest.raises(InputError, match="lead must be in"):
        observed_demand(tr, spec, 2, 300.0, 300.0, "mean")


def test_prewarm_lead_rule():
    assert prewarm_lead_s(30.0, True, 300.0) == 30.0
    assert prewarm_lead_s(30.0, False, 300.0) == 0.0
    assert prewarm_lead_s(0.0, True, 300.0) == 0.0
    assert prewarm_lead_s(300.0, True, 300.0) == 0.0  # a delay of a whole epoch: not pre-warmed
