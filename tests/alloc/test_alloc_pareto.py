"""Both objectives: the epsilon constraint (``objective_bound``) and the energy-cost front, each
point checked against brute force over every vPod count on a small instance."""

from __future__ import annotations

import functools
import itertools
import math

import pytest

from neuscale_opt.alloc.context import build_context
from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.alloc.model import build_model
from neuscale_opt.alloc.options import PlanOptions, parse_bound
from neuscale_opt.alloc.pareto import pareto_front, solve_bounded
from neuscale_opt.errors import InputError

T = 3600.0
# (type, class): rate req/s, dynamic J/req; per type: static W, price USD/h
TYPES = {"lean": (100.0, 3.0), "cheap": (300.0, 1.0), "mid": (180.0, 2.0)}
RATES = {("lean", "a"): (4.0, 1.0), ("lean", "b"): (2.0, 3.0), ("cheap", "a"): (5.0, 4.0), ("cheap", "b"): (3.0, 6.0),
         ("mid", "a"): (4.0, 2.0), ("mid", "b"): (3.0, 4.0)}  # fmt: skip
DEMAND = {"a": 9.0, "b": 5.0}


def _coeffs():
    rows = [
        vpod("g", b, rate=r, dyn_j=e, static_w=TYPES[t][0], price=TYPES[t][1], name=t)
        for (t, b), (r, e) in sorted(RATES.items())
    ]
    return make_coefficients(rows, DEMAND, epoch_s=T, util_cap=1.0)


@functools.cache
def _brute() -> tuple[tuple[float, float], ...]:
    """Every dedicated plan (vPods per (type, class), 0..5) that covers the demand, with its least
    energy (each class's rate on its lowest-dynamic-energy vPods first) and its cost."""
    out = []
    keys = sorted(RATES)
    for n in itertools.product(range(6), repeat=len(keys)):
        cnt = dict(zip(keys, n, strict=True))
        energy = sum(TYPES[t][0] * k for (t, _), k in cnt.items()) * T
        cost = sum(TYPES[t][1] * k for (t, _), k in cnt.items())
        ok = True
        for b, d in DEMAND.items():
            left = d
            for (t, bb), (r, e) in sorted(RATES.items(), key=lambda kv: kv[1][1]):
                if bb != b:
                    continue
                take = min(left, r * cnt[(t, bb)])
                energy += take * e * T
                left -= take
            ok &= left <= 1e-9
        if ok:
            out.append((energy, cost))
    return tuple(out)


def _least_energy(plans, cost_limit: float) -> float:
    return min(e for e, c in plans if c <= cost_limit + 1e-9)


def test_parse_bound():
    assert parse_bound("cost<=12.5") == ("cost", 12.5)
    assert parse_bound(" energy <= 1e6 ") == ("energy", 1e6)
    for bad in ("cost<12", "money<=3", "cost<=x", "cost<=nan"):
        with pytest.raises(InputError):
            parse_bound(bad)
    with pytest.raises(InputError):
        PlanOptions(objective="cost", bounds=(("cost", 1.0),))


@pytest.mark.parametrize("limit", [8.0, 9.5, 11.0, 14.0, 30.0])
def test_epsilon_constraint_matches_brute_force(limit):
    c = _coeffs()
    opts = PlanOptions(objective="energy", variant="dedicated")
    sol = solve_bounded(c, opts, {"cost": limit})
    plans = _brute()
    assert sol.status == "optimal"
    assert sol.objective_value == pytest.approx(_least_energy(plans, limit), rel=1e-9)
    assert sol.totals["cost_usd"] <= limit * (1 + 1e-9)
    m = build_model(build_context(c, opts.replace(bounds=(("cost", limit),)), 0))
    assert list(m.BOUNDS) == ["cost"] and list(m.objective_bound.keys()) == ["cost"]


def test_bound_below_the_least_cost_is_infeasible():
    c = _coeffs()
    least = min(cost for _, cost in _brute())
    sol = solve_bounded(c, PlanOptions(variant="dedicated"), {"cost": least - 0.5})
    assert sol.status == "infeasible"


def test_pareto_front_points_are_optimal_and_monotone():
    c = _coeffs()
    opts = PlanOptions(variant="dedicated")
    front = pareto_front(c, opts, points=7)
    plans = _brute()
    assert 5 <= len(front) <= 7
    least_cost = min(cost for _, cost in plans)
    least_energy = min(e for e, _ in plans)
    assert front["cost_usd"].iloc[0] == pytest.approx(least_cost)
    # the cheapest end is lexicographic: the least energy among the least-cost plans
    assert front["energy_j"].iloc[0] == pytest.approx(_least_energy(plans, least_cost), rel=1e-9)
    assert front["energy_j"].iloc[-1] == pytest.approx(least_energy, rel=1e-9)
    for r in front.itertuples():
        assert r.status == "optimal"
        assert r.energy_j == pytest.approx(_least_energy(plans, r.bound), rel=1e-9)
        assert r.cost_usd <= r.bound * (1 + 1e-6) + 1e-9
    assert (front["bound"].diff().dropna() > 0).all()
    assert (front["energy_j"].diff().dropna() <= 1e-9).all()
    assert (front["cost_usd"].diff().dropna() >= -1e-9).all()
    assert not math.isclose(front["energy_j"].iloc[0], front["energy_j"].iloc[-1])


def test_pooled_front_never_above_dedicated():
    c = _coeffs()
    ded = pareto_front(c, PlanOptions(variant="dedicated"), points=5)
    for r in ded.itertuples():
        pooled = solve_bounded(c, PlanOptions(variant="pooled"), {"cost": r.bound})
        assert pooled.objective_value <= r.energy_j * (1 + 1e-9)
