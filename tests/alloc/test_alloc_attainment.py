"""The SLO-attainment safe load (``alloc.attainment``): queueing formulas against hand-computed
values, and the derived safe load against one-vPod replays under Poisson arrivals."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from neuscale_opt.alloc.attainment import DEFAULT_UTIL_CAP, erlang_c, md1_decay, safe_load
from neuscale_opt.alloc.context import usable_configs
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.candidates import build_coefficients
from neuscale_opt.coefficients import meets_slo
from neuscale_opt.replay import replay

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replay"))
from replay_builders import plan_of, poisson_trace, tiny_instance  # noqa: E402

TARGET = 0.99
#: The model may be conservative by at most this much load (lambda / mu) against the replay.
TOLERANCE = 0.12
#: Replayed horizon (s) and the sampling noise of its attainment (thousands of requests).
HORIZON_S = 1800.0
NOISE = 0.006


def test_erlang_c_hand_values():
    # M/M/1: an arrival waits with probability rho
    assert erlang_c(np.array([1.0]), np.array([0.5]))[0] == pytest.approx(0.5)
    # c = 2, A = 1: Erlang-B = (1/2) / (1 + 1 + 1/2) = 0.2, C = 2 x 0.2 / (2 - 1 x 0.8) = 1/3
    assert erlang_c(np.array([2.0]), np.array([1.0]))[0] == pytest.approx(1 / 3)
    # saturated
    assert erlang_c(np.array([4.0]), np.array([5.0]))[0] == 1.0


def test_md1_decay_solves_its_equation():
    rho = np.array([0.1, 0.5, 0.9])
    z = md1_decay(rho)
    assert np.all(z > 0)
    assert np.allclose(rho * np.expm1(z), z, rtol=1e-9)
    # heavy traffic: z -> 2 (1 - rho) (the exponential approximation), from above
    assert z[2] == pytest.approx(2 * 0.1, rel=0.1) and z[2] > 2 * 0.1


def test_rows_without_latencies_keep_the_default_cap():
    inst = tiny_instance({"a": 1.0})
    c = build_coefficients(inst)
    cfg = c.configs.head(3).copy()
    cfg["ttft_s"] = np.nan
    assert np.all(safe_load(cfg, c.buckets, TARGET) == DEFAULT_UTIL_CAP)


@pytest.fixture(scope="module")
def one_class():
    inst = tiny_instance({"a": 1.0}, epochs=1, length_s=HORIZON_S)
    coeffs = build_coefficients(inst)
    cfg = coeffs.configs
    cfg = cfg[(cfg["phase"] == "colocated") & (cfg["bucket"] == "a") & meets_slo(cfg, coeffs.buckets)].copy()
    cfg["u"] = safe_load(cfg, coeffs.buckets, TARGET)
    # the least-energy configuration of each batch size from 2 to 64 slots
    pick = cfg.sort_values(["energy_j_per_req", "config_id"]).drop_duplicates("batch")
    pick = pick[(pick["batch"] * pick["pp"] >= 2) & (pick["batch"] * pick["pp"] <= 64)].sort_values("batch")
    return inst, coeffs, pick


def _replayed(inst, coeffs, r, load: float) -> float:
    lengths = coeffs.buckets.set_index("bucket")
    lam = load * float(r.max_rate_rps)
    spec = {"a": (lam, int(lengths.at["a", "input_tokens"]), int(lengths.at["a", "output_tokens"]))}
    tr = poisson_trace(spec, HORIZON_S)
    row = {
        "epoch": 0,
        "bucket": "a",
        "phase": "colocated",
        "chip": r.chip,
        "shape": r.shape,
        "chips_per_vpod": int(r.chips_per_vpod),
        "tp": int(r.tp),
        "pp": int(r.pp),
        "ep": int(r.ep),
        "batch": int(r.batch),
        "n_vpods": 1,
        "rate_rps": lam,
    }
    return float(replay(plan_of([row]), inst, trace=tr, coeffs=coeffs).totals["slo_attainment"])


def test_safe_load_against_one_vpod_replays(one_class):
    """At the derived safe load the replay keeps the target; TOLERANCE above it, it does not: the
    derived load is within TOLERANCE below the replayed one (several batch sizes)."""
    inst, coeffs, pick = one_class
    assert len(pick) >= 4
    loads = pick["u"].to_numpy()
    assert np.all(np.diff(loads) > 0)  # more slots, more safe load
    for r in pick.itertuples():
        assert _replayed(inst, coeffs, r, float(r.u)) >= TARGET - NOISE, r.vpod_type
        above = min(1.0, float(r.u) + TOLERANCE)
        assert _replayed(inst, coeffs, r, above) < TARGET, r.vpod_type


def test_planner_capacity_is_the_safe_load_unless_overridden():
    inst = tiny_instance({"a": 1.0, "b": 1.0})
    coeffs = build_coefficients(inst)
    assert coeffs.util_cap is None  # planning.util_cap not given: derive
    derived = usable_configs(coeffs, PlanOptions())
    want = safe_load(derived, coeffs.buckets, TARGET) * derived["max_rate_rps"].astype(float).to_numpy()
    assert np.allclose(derived["cap_rps"].to_numpy(), want)
    assert derived["util"].nunique() > 3
    stricter = usable_configs(coeffs, PlanOptions(attainment=0.999))
    assert (stricter["cap_rps"].to_numpy() <= derived["cap_rps"].to_numpy() + 1e-12).all()
    fixed = usable_configs(coeffs, PlanOptions(util_cap=0.9))
    assert np.allclose(fixed["cap_rps"], 0.9 * fixed["max_rate_rps"].astype(float))
