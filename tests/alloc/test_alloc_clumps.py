"""Arrivals in clumps (AT5 of ``formulations/allocation.md``, D13 of ``formulations/forecast.md``):
the clump law read from a trace against hand counts, its split over a group's vPods and the
queueing terms against hand-solved values and brute-forced distributions, and the safe load
against one-vPod and three-vPod replays of clumped arrivals."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from alloc_support import attainment_inputs, one_class_picks, one_vpod
from scipy.stats import poisson

from neuscale_opt.alloc.attainment import (
    _clump_args,
    attainment,
    batch_decay,
    clump_ahead,
    md1_decay,
    safe_load,
    slot_decay,
    tpot_tail,
    vpod_clumps,
)
from neuscale_opt.candidates import build_coefficients
from neuscale_opt.replay import ReplayOptions, replay
from neuscale_opt.traces.demand import MAX_CLUMP, clump_sizes, clumped
from neuscale_opt.traces.spec import BucketSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replay"))
from replay_builders import plan_of, tiny_instance  # noqa: E402

TARGET = 0.99
HORIZON_S = 1800.0
#: sampling noise of a 30-min replay's attainment (thousands of requests)
NOISE = 0.006
#: The clumped model may be conservative by at most this much load against the replay (its
#: slack keeps a whole decode round at the full batch, which a clump's last request has little of)
TOLERANCE = 0.15
#: the clump law of the calibration: 1 to 4 requests at one instant (mean 2.3)
LAW = (0.3, 0.3, 0.2, 0.2)


def _trace(times, classes=None) -> pd.DataFrame:
    n = len(times)
    tr = pd.DataFrame({"arrival_s": np.asarray(times, dtype=float), "input_tokens": 8, "output_tokens": 4})
    if classes is not None:  # total lengths that fall into the classes of ``SPEC``
        tr["input_tokens"] = np.where(np.asarray(classes) == 0, 8, 80)
    assert len(tr) == n
    return tr


SPEC = BucketSpec(kind="total", edges=(50,))


def test_clump_sizes_hand_counted():
    # instants 0 (3 requests), 1 (1), 2 (2), 3 (1): clumps of 1, 1, 2, 3
    got = clump_sizes(_trace([0, 0, 0, 1, 2, 2, 3]), None)
    assert got["all"] == pytest.approx((0.5, 0.25, 0.25))
    # by class: class 0 at 0, 0, 5; class 1 at 0, 5, 5, 5 (equal times of another class are not its clump)
    by = clump_sizes(_trace([0, 0, 0, 5, 5, 5, 5], classes=[0, 0, 1, 0, 1, 1, 1]), SPEC)
    assert list(by.index) == ["s0-50", "s50-inf"]
    assert by["s0-50"] == pytest.approx((0.5, 0.5))
    assert by["s50-inf"] == pytest.approx((0.5, 0.0, 0.5))
    # the horizon leaves the instant at 3 out; a class without arrivals has no law
    cut = clump_sizes(_trace([0, 0, 0, 1, 2, 2, 3]), None, horizon_s=3.0)["all"]
    assert cut == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert clump_sizes(_trace([0, 1], classes=[0, 0]), SPEC)["s50-inf"] == ()
    # arrivals that never coincide: one request per clump; the largest clumps are counted at MAX_CLUMP
    assert clump_sizes(_trace(np.arange(10) * 0.1), None)["all"] == (1.0,)
    big = clump_sizes(_trace([1.0] * (MAX_CLUMP + 6)), None)["all"]
    assert len(big) == MAX_CLUMP and big[-1] == 1.0
    assert clumped((0.5, 0.5)) and not clumped((1.0,)) and not clumped(()) and not clumped((1.0, 0.0))


def test_traces_without_coincident_arrivals_add_no_clump_columns():
    coeffs = build_coefficients(tiny_instance({"a": 1.0}))
    assert "clump_sizes" not in coeffs.buckets.columns


def test_vpod_clumps_hand_values():
    four = np.array([[0.0, 0.0, 0.0, 1.0]])
    # n = 3 vPods: a clump of 4 gives a vPod 1, or 2 with probability 1/3
    assert vpod_clumps(four, np.array([3.0]), np.array([1.0]))[0] == pytest.approx([2 / 3, 1 / 3, 0, 0])
    # n = 5: a clump of 4 reaches 4 of the 5 vPods with one request each
    assert vpod_clumps(four, np.array([5.0]), np.array([1.0]))[0] == pytest.approx([1, 0, 0, 0])
    # n = 1 (one vPod, or the class's rate unknown): the whole clump
    assert vpod_clumps(four, np.array([1.0]), np.array([1.0]))[0] == pytest.approx([0, 0, 0, 1])
    assert vpod_clumps(four, np.array([0.0]), np.array([1.0]))[0] == pytest.approx([0, 0, 0, 1])
    # clumps of 1 or 2 over 2 vPods: a vPod gets 1 from either, or nothing (not its clump)
    assert vpod_clumps(np.array([[0.5, 0.5]]), np.array([2.0]), np.array([1.0]))[0] == pytest.approx([1, 0])
    # n = ceil(2.5) = 3 of a clump of 5: 1 or 2, 2 with probability 2/3
    five = np.array([[0, 0, 0, 0, 1.0]])
    assert vpod_clumps(five, np.array([2.5]), np.array([1.0]))[0] == pytest.approx([1 / 3, 2 / 3, 0, 0, 0])


def test_clump_ahead_hand_values():
    # clumps of 3: the first, second and third place alike
    assert clump_ahead(np.array([[0, 0, 1.0]]))[0] == pytest.approx([1 / 3, 1 / 3, 1 / 3])
    # 1 or 2 alike (E[Y] = 1.5): requests in a clump of 2 are 2/3 of all, half of them second
    assert clump_ahead(np.array([[0.5, 0.5]]))[0] == pytest.approx([2 / 3, 1 / 3])


def test_decays_solve_their_equations_and_reduce_to_single_arrivals():
    rho = np.array([0.1, 0.5, 0.9])
    one = np.array([[1.0, 0.0]] * 3)
    assert batch_decay(rho, one) == pytest.approx(md1_decay(rho), rel=1e-9)
    assert slot_decay(rho, one) == pytest.approx(1.0 - rho, rel=1e-9)
    y = np.array([[0.2, 0.3, 0.5]] * 3)
    sizes = np.arange(1, 4)
    mean = y[0] @ sizes
    z = batch_decay(rho, y)
    assert np.all(z > 0)
    assert rho * ((y * np.exp(np.outer(z, sizes))).sum(axis=1) - 1) / mean == pytest.approx(z, rel=1e-9)
    v = slot_decay(rho, y)
    assert np.all((v > 0) & (v < 1 - rho))
    assert rho * ((y * (1 - v[:, None]) ** (-sizes[None, :])).sum(axis=1) - 1) / mean == pytest.approx(v, rel=1e-9)
    # clumps slow both queues' drain
    assert np.all(z < md1_decay(rho))


def _compound_poisson_cdf(rate: float, law: np.ndarray, k: int) -> float:
    """P(N <= k) for N a Poisson(rate) number of clumps of sizes ``law`` (1, 2, ...), by Panjer's
    recursion f_n = rate / n sum_j j P(Y = j) f_{n - j}."""
    f = [math.exp(-rate)]
    for n in range(1, k + 1):
        f.append(rate / n * sum(j * law[j - 1] * f[n - j] for j in range(1, min(n, len(law)) + 1)))
    return float(sum(f))


def test_tpot_tail_under_clumps_against_brute_force():
    """With dispersion D, AT3's count is the negative binomial of the same mean, which is exactly a
    Poisson number of log-series clumps (parameter 1 - 1 / D): checked against Panjer's recursion;
    the followers of its own clump add a convolution, checked by summing the brute-forced laws."""
    lam, o, tau, step, stall = 0.5, 40.0, 0.1, 0.05, 0.25  # k(o) = floor(40 x 0.05 / 0.25) = 8
    m = lam * o * tau  # 2 prefills expected
    for d in (1.5, 3.0):
        theta = 1.0 - 1.0 / d
        js = np.arange(1, 400)
        law = -(theta**js) / (js * math.log(1 - theta))
        rate = m * math.log(d) / (d - 1.0)
        want = 1.0 - _compound_poisson_cdf(rate, law, 8)
        got = tpot_tail(
            np.array([lam]), np.array([[o]]), np.array([tau]), np.array([step]), np.array([stall]), np.array([d])
        )
        assert got[0] == pytest.approx(want, rel=1e-6)
        follow = np.array([[0.5, 0.3, 0.2]])
        want_f = 1.0 - sum(p * _compound_poisson_cdf(rate, law, 8 - b) for b, p in enumerate(follow[0]))
        row = (np.array([lam]), np.array([[o]]), np.array([tau]), np.array([step]), np.array([stall]))
        got_f = tpot_tail(*row, np.array([d]), follow)
        assert got_f[0] == pytest.approx(want_f, rel=1e-6)
    # D = 1 is Poisson's
    plain = tpot_tail(np.array([lam]), np.array([[o]]), np.array([tau]), np.array([step]), np.array([stall]))
    assert plain[0] == pytest.approx(poisson.sf(8, m), rel=1e-9)


@pytest.fixture(scope="module")
def clumped_class():
    """The one-class calibration picks (``alloc_support.one_class_picks``) with the class's arrivals
    in clumps of ``LAW`` on one vPod (planned rate 0: the whole clump reaches it); the rows the
    clumped model can load at all."""
    inst, coeffs, pick = one_class_picks(HORIZON_S)
    b = coeffs.buckets.copy()
    b["clump_sizes"] = [LAW if x == "a" else (1.0,) for x in b["bucket"]]
    b["clump_rate_rps"] = 0.0
    cc = replace(coeffs, buckets=b)
    pick["u"] = safe_load(pick, b, TARGET)
    pick["u_poisson"] = safe_load(pick, coeffs.buckets, TARGET)
    return inst, cc, pick


def _clumped_trace(lam: float, rep: pd.Series, law: tuple = LAW, seed: int = 0) -> pd.DataFrame:
    """Clumps of sizes ``law`` at the instants of a Poisson process of rate ``lam / E[size]`` (so
    ``lam`` requests per second), fixed lengths."""
    rng = np.random.default_rng(seed)
    sizes = np.arange(1, len(law) + 1)
    n = int(rng.poisson(lam / float(np.dot(sizes, law)) * HORIZON_S))
    t = np.sort(rng.random(n) * HORIZON_S)
    k = rng.choice(sizes, size=n, p=law)
    tr = pd.DataFrame(
        {
            "arrival_s": np.repeat(t, k),
            "input_tokens": int(rep["input_tokens"]),
            "output_tokens": int(rep["output_tokens"]),
            "bucket": "a",
        }
    )
    tr.attrs["source"] = "clumped-test-trace"
    return tr


def _replayed(inst, coeffs, r, load: float, n_vpods: int = 1, law: tuple = LAW) -> float:
    """Attainment of ``n_vpods`` vPods of row ``r``, each at ``load``, under clumps of ``law``."""
    lam = load * float(r.max_rate_rps)
    rep = coeffs.buckets.set_index("bucket").loc["a"]
    row = one_vpod(r, lam * n_vpods)
    row["n_vpods"] = n_vpods
    tr = _clumped_trace(lam * n_vpods, rep, law)
    res = replay(plan_of([row]), inst, trace=tr, options=ReplayOptions(surge=False), coeffs=coeffs)
    return float(res.totals["slo_attainment"])


def test_clumped_safe_load_against_one_vpod_replays(clumped_class):
    """At the clumped safe load one vPod keeps the target (within the sampling noise) and misses it
    TOLERANCE above; the Poisson safe load, blind to the clumps, misses it on every row."""
    inst, cc, pick = clumped_class
    live = pick[pick["u"] > 0.02]
    assert len(live) >= 4
    assert (live["u"] < live["u_poisson"]).all()
    for r in live.itertuples():
        assert _replayed(inst, cc, r, float(r.u)) >= TARGET - NOISE, r.vpod_type
        assert _replayed(inst, cc, r, min(1.0, float(r.u) + TOLERANCE)) < TARGET, r.vpod_type
        assert _replayed(inst, cc, r, float(r.u_poisson)) < TARGET - NOISE, r.vpod_type


def test_a_group_splits_its_clumps(clumped_class):
    """Clumps of 2 over a group of 2 vPods reach each vPod one request at a time (the router hands
    them to the least-loaded in turn): the model's attainment is then the Poisson one, and a
    two-vPod group replayed at the Poisson safe load keeps the target, where one vPod given the
    same clumps at that load misses it."""
    inst, cc, pick = clumped_class
    r = pick[pick["batch"] * pick["pp"] >= 16].iloc[0]
    cfg = pick.loc[[r.name]].reset_index(drop=True)
    load = float(r["u_poisson"])
    lam = load * float(r["max_rate_rps"])
    two = cc.buckets.assign(clump_sizes=[(0.0, 1.0)] * len(cc.buckets), clump_rate_rps=2.0 * lam)
    args, tail, prompt = attainment_inputs(cfg, two)
    split = _clump_args(cfg, two.set_index("bucket"), cfg["bucket"].astype(str), np.arange(1))
    plain = attainment(np.array([lam]), *args, tail=tail, prompt=prompt)
    assert attainment(np.array([lam]), *args, tail=tail, prompt=prompt, clumps=split) == pytest.approx(plain)
    whole = (split[0], np.zeros(1), split[2])  # the class's rate unknown: one vPod takes the clump
    assert attainment(np.array([lam]), *args, tail=tail, prompt=prompt, clumps=whole)[0] < TARGET
    row = next(pick.loc[[r.name]].itertuples())
    assert _replayed(inst, cc, row, load, n_vpods=2, law=(0.0, 1.0)) >= TARGET - NOISE
    assert _replayed(inst, cc, row, load, law=(0.0, 1.0)) < TARGET


def test_rows_without_clumps_keep_at0_at4(clumped_class):
    """A law of one request per clump gives exactly the attainment without clumps."""
    _inst, cc, pick = clumped_class
    cfg = pick.reset_index(drop=True)
    single = cc.buckets.assign(clump_sizes=[(1.0,)] * len(cc.buckets))
    args, tail, prompt = attainment_inputs(cfg, single)
    lam = 0.3 * cfg["max_rate_rps"].to_numpy(float)
    assert _clump_args(cfg, single.set_index("bucket"), cfg["bucket"].astype(str), np.arange(len(cfg))) is None
    ones = (np.ones((len(cfg), 2)) * [1.0, 0.0], np.zeros(len(cfg)), np.full(len(cfg), np.nan))
    assert np.array_equal(
        attainment(lam, *args, tail=tail, prompt=prompt, clumps=ones), attainment(lam, *args, tail=tail, prompt=prompt)
    )
    without = cc.buckets.drop(columns="clump_sizes")
    assert np.array_equal(safe_load(cfg, single, TARGET), safe_load(cfg, without, TARGET))


def test_coefficients_refuse_a_bad_clump_law(clumped_class):
    """A coefficient table's clump laws must be shares summing to 1 and its planned rates finite
    numbers >= 0 (the tables are checked when made), naming the class."""
    from neuscale_opt.errors import InputError

    _inst, cc, _pick = clumped_class
    n = len(cc.buckets)
    for bad in ((0.5, 0.4), (-0.5, 1.5), (float("nan"), 1.0)):
        with pytest.raises(InputError, match="clump_sizes of class '.*' must be shares >= 0 summing to 1"):
            replace(cc, buckets=cc.buckets.assign(clump_sizes=[bad] * n))
    for bad in (-1.0, float("inf"), "x"):
        with pytest.raises(InputError, match="clump_rate_rps must be a finite number >= 0"):
            replace(cc, buckets=cc.buckets.assign(clump_rate_rps=bad))


def test_clumps_never_raise_the_attainment(clumped_class):
    """Under clumps a row's attainment is at most its attainment under Poisson arrivals, at every
    load and for every split of the clumps."""
    _inst, cc, pick = clumped_class
    cfg = pick.reset_index(drop=True)
    args, tail, prompt = attainment_inputs(cfg, cc.buckets)
    slo = cc.buckets.set_index("bucket")
    mu = cfg["max_rate_rps"].to_numpy(float)
    for planned in (0.0, 1.0, 5.0):
        clumps = _clump_args(cfg, slo.assign(clump_rate_rps=planned), cfg["bucket"].astype(str), np.arange(len(cfg)))
        for load in (0.05, 0.2, 0.5, 0.8):
            lumpy = attainment(load * mu, *args, tail=tail, prompt=prompt, clumps=clumps)
            assert np.all(lumpy <= attainment(load * mu, *args, tail=tail, prompt=prompt) + 1e-12)
