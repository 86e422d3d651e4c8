"""The public door of horizon planning: :func:`plan_horizon` and :func:`uses_horizon`.

Methods (all return a :class:`~neuscale_opt.alloc.solution.Solution` whose allocations carry every
epoch and whose ``epochs`` summaries carry forecast and actual demand, chips per generation,
energy, money, vPods created and deleted):

* ``milp`` - the rolling horizon plan on the instance's forecast (window H of ``[horizon]``;
  one full-horizon solve when H covers every epoch and the forecast is ``oracle``);
* ``oracle`` - the same planner fed with the actual future demand (a bound on what forecasting
  could give);
* ``neuscale-autoscaler`` - NeuScale's reactive rules over the heterogeneous fleet;
* ``homogeneous-autoscaler`` - the same rules on one generation (the best one, by objective).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.solution import Solution
from neuscale_opt.coefficients import Coefficients
from neuscale_opt.errors import InputError, TimeLimitError
from neuscale_opt.horizon.autoscaler import homogeneous_autoscaler, neuscale_autoscaler
from neuscale_opt.horizon.params import HorizonParams
from neuscale_opt.horizon.rolling import instance_inventory, plan_full, plan_rolling

HORIZON_METHODS: tuple[str, ...] = ("milp", "oracle", "neuscale-autoscaler", "homogeneous-autoscaler")
#: Window of the rolling plan when the instance does not set one: the paper's 30-minute
#: monitoring window at 5-minute epochs.
DEFAULT_WINDOW = 6


def uses_horizon(instance: Any) -> bool:
    """True when ``neuscale-opt plan`` should plan this instance with the horizon model: it has a
    ``[horizon]`` table or ``[[inventory_events]]``."""
    return getattr(instance, "horizon", None) is not None or bool(getattr(instance, "inventory_events", ()))


def plan_horizon(
    instance: Any,
    method: str = "milp",
    coeffs: Coefficients | None = None,
    window: int | None = None,
    forecast: str | None = None,
    progress: Callable[[int], Any] | None = None,
    options: PlanOptions | None = None,
    params: HorizonParams | None = None,
    chip: str | None = None,
) -> Solution:
    """Plan ``instance`` over its epochs with ``method`` (see the module docstring).

    ``coeffs`` default ``build_coefficients(instance)``; ``window`` and ``forecast`` override the
    ``[horizon]`` table; ``options`` default ``PlanOptions.from_instance(instance)``; ``chip`` fixes
    the generation of ``homogeneous-autoscaler``. ``progress(k)`` is called as epochs are planned.
    """
    if method not in HORIZON_METHODS:
        raise InputError(f"method must be one of {list(HORIZON_METHODS)}, got {method!r}", where="plan")
    if coeffs is None:
        from neuscale_opt.candidates import build_coefficients

        coeffs = build_coefficients(instance)
    opts = options or PlanOptions.from_instance(instance)
    prm = params or HorizonParams.from_instance(instance, window=window, forecast=forecast)
    inv = instance_inventory(coeffs, getattr(instance, "inventory_events", ()))
    n_epochs = len(coeffs.epochs)
    h = prm.window if prm.window is not None else DEFAULT_WINDOW
    if method == "neuscale-autoscaler":
        sol = neuscale_autoscaler(coeffs, opts, prm, inv)
    elif method == "homogeneous-autoscaler":
        sol = homogeneous_autoscaler(coeffs, opts, prm, chip, inv)
    else:
        fc = "oracle" if method == "oracle" else prm.forecast
        if fc == "oracle" and h >= n_epochs:
            sol = plan_full(coeffs, opts, prm, inventory=inv, method=method, progress=progress)
        else:
            sol = plan_rolling(coeffs, opts, prm, fc, h, inv, method=method, progress=progress)
            sol = with_uncoupled_bound(sol, coeffs, opts, inv)
        return sol
    if progress is not None:
        progress(n_epochs)
    return sol


def with_uncoupled_bound(
    sol: Solution, coeffs: Coefficients, opts: PlanOptions, inventory: dict[tuple[str, int], float]
) -> Solution:
    """A rolling plan with a proven lower bound: the independent epoch MILPs' bounds on the demand
    the plan covered (its forecasts), summed over epochs, with every generation's largest inventory
    over the horizon and unserved demand at the plan's penalty.

    Any schedule covering that demand pays at least each epoch's uncoupled optimum (the coupling
    rules, the creation delay and reconfiguration only add constraints and costs), so the sum bounds
    the plan's objective from below; the gap is what coupling, the rolling window's myopia and
    reconfiguration cost. The status stays ``feasible``: the plan is not proven optimal.
    """
    import math
    from dataclasses import replace

    import pandas as pd

    from neuscale_opt.alloc.plan import solve_milp

    rows = [
        (int(e["epoch"]), str(b), float(v))
        for e in sol.epochs
        if isinstance(e, dict) and "forecast_rps" in e
        for b, v in sorted(e["forecast_rps"].items())
    ]
    if not rows or not math.isfinite(sol.objective_value):
        return sol
    planned = pd.DataFrame(rows, columns=["epoch", "bucket", "rate_rps"])
    chips = coeffs.chips.copy()
    peak = {}
    for (c, _t), h in inventory.items():
        peak[c] = max(peak.get(c, 0.0), float(h))
    chips["healthy_chips"] = [peak.get(c, h) for c, h in zip(chips["chip"], chips["healthy_chips"], strict=True)]
    relaxed = replace(coeffs, demand=planned, chips=chips)
    try:
        ref = solve_milp(relaxed, replace(opts, allow_unserved=True, unserved_penalty=sol.penalty_per_req or None))
    except TimeLimitError:  # a spent --time-limit-scope total budget: the plan stands, without a bound
        return sol
    if not math.isfinite(ref.bound):
        return sol
    bound = float(ref.bound)
    gap = max(0.0, sol.objective_value - bound) / max(abs(sol.objective_value), 1e-9)
    meta = {**sol.meta, "bound": "sum of the independent epoch MILPs' bounds on the planned demand"}
    return replace(sol, bound=bound, gap=gap, meta=meta)
