"""A simple, planner-independent plan for tests, benchmarks and sanity checks.

:func:`simple_plan` gives every class its own (dedicated) vPod group of the configuration with the
lowest ``energy_j_per_req`` whose generation still has chips, sized per epoch as

    n_vpods(e, b) = ceil(scale x rate_rps(e, b) / (util_cap x max_rate_rps))

(``util_cap`` of the coefficients unless given). Classes are served in descending order of their
peak demand, each reserving its peak count of chips of the chosen generation, so the plan respects
the fleet's inventory in every epoch. ``scale`` > 1 over-provisions, < 1 under-provisions.
"""

from __future__ import annotations

import math
from typing import Any

from neuscale_opt.alloc.attainment import DEFAULT_UTIL_CAP
from neuscale_opt.coefficients import Coefficients
from neuscale_opt.errors import InfeasibleError


def simple_plan(
    coeffs: Coefficients,
    scale: float = 1.0,
    util: float | None = None,
    min_vpods: int = 0,
) -> dict[str, Any]:
    """A plan dict in the allocation planner's JSON contract (see the module docstring).

    ``min_vpods``: at least this many vPods per class in every epoch (also when its rate is 0).
    """
    u = util if util is not None else coeffs.util_cap if coeffs.util_cap is not None else DEFAULT_UTIL_CAP
    cfg = coeffs.configs[coeffs.configs["phase"] == "colocated"]
    left = dict(coeffs.inventory())
    dem = coeffs.demand
    peak = dem.groupby("bucket")["rate_rps"].max()
    order = sorted(coeffs.bucket_names, key=lambda b: (-float(peak.get(b, 0.0)), b))
    rows: list[dict[str, Any]] = []
    for b in order:
        rates = dem[dem["bucket"] == b].sort_values("epoch")
        cands = cfg[cfg["bucket"] == b].sort_values(["energy_j_per_req", "config_id"], kind="mergesort")
        chosen = None
        for r in cands.itertuples(index=False):
            counts = [max(min_vpods, math.ceil(scale * x / (u * r.max_rate_rps) - 1e-9)) for x in rates["rate_rps"]]
            need = max(counts, default=0) * int(r.chips_per_vpod)
            if need <= left.get(r.chip, 0):
                chosen = (r, counts)
                left[r.chip] -= need
                break
        if chosen is None:
            raise InfeasibleError(f"simple_plan: no generation has chips left for class {b!r}")
        r, counts = chosen
        for e, n, x in zip(rates["epoch"], counts, rates["rate_rps"], strict=True):
            if n == 0:
                continue
            rows.append(
                {
                    "epoch": int(e),
                    "bucket": b,
                    "phase": "colocated",
                    "chip": r.chip,
                    "shape": r.shape,
                    "chips_per_vpod": int(r.chips_per_vpod),
                    "tp": int(r.tp),
                    "pp": int(r.pp),
                    "ep": int(r.ep),
                    "batch": int(r.batch),
                    "vpod_type": r.vpod_type,
                    "config_id": r.config_id,
                    "vpod_group": r.config_id,
                    "n_vpods": int(n),
                    "rate_rps": float(x),
                }
            )
    rows.sort(key=lambda d: (d["epoch"], d["vpod_group"]))
    return {
        "status": "feasible",
        "method": "simple",
        "objective": "energy",
        "objective_value": None,
        "variant": "dedicated",
        "serving": "colocated",
        "allocations": rows,
    }
