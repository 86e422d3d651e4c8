"""Both objectives of one epoch: the energy-cost front by epsilon constraints
(``formulations/allocation.md``, "Both objectives").

Each point minimises ``y`` (default energy) with ``x`` (default cost) bounded by a limit
(``PlanOptions.bounds``, the MILP's ``objective_bound`` rows). The ends are lexicographic optima:
``x`` least (then ``y`` least at that ``x``), and ``y`` least; the limits in between are evenly
spaced in ``x``. Every point is an optimum of its bounded problem (solved to the options' gap), so
``y`` never increases as the limit grows: the front is monotone. Points with the same plan totals
are listed once (a front where one plan is least in both objectives is a single point).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from neuscale_opt.alloc.options import OBJECTIVES, PlanOptions
from neuscale_opt.alloc.plan import solve_milp
from neuscale_opt.alloc.solution import Solution
from neuscale_opt.coefficients import Coefficients
from neuscale_opt.errors import InfeasibleError, InputError

#: Totals key of each objective in ``Solution.totals`` (the evaluator's accounting).
TOTAL_OF: dict[str, str] = {"energy": "energy_j", "cost": "cost_usd", "carbon": "carbon_kg"}
#: Relative slack of the lexicographic step (the second solve keeps x within this of its optimum).
LEX_RTOL = 1e-7

FRONT_COLUMNS = ["point", "epoch", "bound_metric", "bound", "status", "energy_j", "cost_usd", "carbon_kg"]


def epoch_coefficients(coeffs: Coefficients, epoch: int | None = None) -> tuple[Coefficients, int]:
    """The coefficients of one epoch: ``epoch``, or by default the epoch of largest total demand
    (the one that sizes the fleet; ties by the earliest)."""
    dem = coeffs.demand
    if epoch is None:
        tot = dem.groupby("epoch")["rate_rps"].sum()
        epoch = int(min(tot.index[tot == tot.max()])) if len(tot) else 0
    if epoch not in set(int(e) for e in dem["epoch"]):
        raise InputError(f"epoch {epoch} is not in the demand table", where="--pareto-epoch")
    return replace(coeffs, demand=dem[dem["epoch"] == epoch].reset_index(drop=True)), int(epoch)


def solve_bounded(coeffs: Coefficients, options: PlanOptions, bounds: dict[str, float]) -> Solution:
    """The MILP minimising ``options.objective`` with each metric of ``bounds`` at most its limit."""
    return solve_milp(coeffs, options.replace(bounds=tuple(sorted(bounds.items()))))


def pareto_front(
    coeffs: Coefficients,
    options: PlanOptions | None = None,
    epoch: int | None = None,
    points: int = 7,
    x: str = "cost",
    y: str = "energy",
) -> pd.DataFrame:
    """The ``y``-``x`` front of one epoch in ``points`` optimal points (``FRONT_COLUMNS``, sorted by
    the limit on ``x``). Raises :class:`InfeasibleError` when the epoch has no plan at all."""
    if not 2 <= points <= 50:
        raise InputError(f"points must be in 2..50, got {points}", where="pareto")
    if x == y or x not in OBJECTIVES or y not in OBJECTIVES:
        raise InputError(f"x and y must be two different objectives of {list(OBJECTIVES)}", where="pareto")
    base = (options or PlanOptions()).replace(bounds=())
    one, e = epoch_coefficients(coeffs, epoch)
    kx, ky = TOTAL_OF[x], TOTAL_OF[y]
    best_y = solve_milp(one, base.replace(objective=y))
    best_x = solve_milp(one, base.replace(objective=x))
    if not (best_y.has_plan and best_x.has_plan):
        raise InfeasibleError(best_y.diagnosis or best_x.diagnosis or f"epoch {e}: no plan")
    x_lo = float(best_x.totals[kx])
    x_hi = float(best_y.totals[kx])
    y_opts = base.replace(objective=y)
    rows = []
    for i in range(points):
        if i == points - 1:
            limit, sol = x_hi, best_y
        else:
            limit = x_lo + (x_hi - x_lo) * i / (points - 1)
            if i == 0:
                limit = x_lo * (1 + LEX_RTOL) + LEX_RTOL
            sol = solve_bounded(one, y_opts, {x: limit})
        rows.append(
            {
                "point": i,
                "epoch": e,
                "bound_metric": x,
                "bound": float(limit),
                "status": sol.status,
                **{k: float(sol.totals.get(k, math.nan)) for k in ("energy_j", "cost_usd", "carbon_kg")},
            }
        )
    out = pd.DataFrame(rows, columns=FRONT_COLUMNS)
    # a degenerate front (one plan least in both) is one point; equal plans are listed once
    out = out.drop_duplicates(["energy_j", "cost_usd", "carbon_kg"], keep="first").reset_index(drop=True)
    out["point"] = range(len(out))
    out.attrs["unit"] = {"energy_j": "J", "cost_usd": "USD", "carbon_kg": "kgCO2e", "bound": TOTAL_OF[x]}
    out.attrs["y"] = ky
    return out
