"""MILP optimum = brute-force enumeration on random tiny instances (dedicated, colocated).

The enumeration shares no code with the package: it tries every vector of vPod counts within the
inventory, fills each class from its cheapest-per-request configuration (optimal once the counts are
fixed, classes being independent in the dedicated variant) and prices the rest as unserved.
"""

from __future__ import annotations

import itertools
import math

import pytest
from alloc_random import random_instance

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import plan


def _coefs(row, c, objective):
    t = c.epoch_s
    if objective == "energy":
        return c.pue * row.dyn_energy_j_per_req, c.pue * row.static_power_w * t
    if objective == "cost":
        return 0.0, row.price_usd_per_hour * t / 3600
    kg = c.carbon_kg_per_kwh / 3.6e6
    return (
        c.pue * row.dyn_energy_j_per_req * kg,
        c.pue * row.static_power_w * t * kg + row.embodied_kg_per_hour * t / 3600,
    )


def brute_force(c, objective: str, allow_unserved: bool, penalty: float) -> float:
    u, t = c.util_cap, c.epoch_s
    demand = {r.bucket: r.rate_rps for r in c.demand.itertuples() if r.rate_rps > 0}
    rows = [r for r in c.configs.itertuples() if r.bucket in demand]
    inv = c.inventory()
    ranges = []
    for r in rows:
        ub = math.ceil(demand[r.bucket] / (u * r.max_rate_rps) - 1e-9)
        ub = min(ub, int(inv[r.chip] // r.chips_per_vpod))
        ranges.append(range(ub + 1))
    best = math.inf
    for ns in itertools.product(*ranges):
        used: dict[str, float] = {}
        for r, n in zip(rows, ns, strict=True):
            used[r.chip] = used.get(r.chip, 0) + n * r.chips_per_vpod
        if any(used[ch] > inv[ch] for ch in used):
            continue
        total = 0.0
        ok = True
        for r, n in zip(rows, ns, strict=True):
            total += _coefs(r, c, objective)[1] * n
        for b, d in demand.items():
            opts = sorted(
                (_coefs(r, c, objective)[0], u * r.max_rate_rps * n)
                for r, n in zip(rows, ns, strict=True)
                if r.bucket == b
            )
            left = d
            for a, cap in opts:
                take = min(left, cap)
                total += a * take * t
                left -= take
            if left > 1e-9:
                if not allow_unserved:
                    ok = False
                    break
                total += penalty * left * t
        if ok:
            best = min(best, total)
    return best


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("objective", ["energy", "cost", "carbon"])
def test_milp_equals_brute_force(seed, objective):
    c = random_instance(seed)
    allow = seed % 2 == 1
    sol = plan(
        c,
        PlanOptions(
            objective=objective,
            variant="dedicated",
            allow_unserved=allow,
            prune_dominated=seed % 3 == 0,
            tail_rate_rps=0.0,  # the formulation itself: every class covered by the model
        ),
        "milp",
    )
    bf = brute_force(c, objective, allow, sol.penalty_per_req)
    if math.isinf(bf):
        assert sol.status == "infeasible"
        assert sol.diagnosis
    else:
        assert sol.status == "optimal"
        assert sol.objective_value == pytest.approx(bf, rel=1e-6, abs=1e-9)
