"""Any method on any input: the loader, the planner choice and the evaluation fit for a plan.

The commands ``plan``, ``evaluate`` and ``bench`` and the report share these three steps:

* :func:`load_plan_input` - coefficients and the instance-like object for an instance TOML, a
  profile TOML (a ``[profile]`` table, as ``import-melange`` writes) or a Mélange JSON;
* :func:`plan_any` - the epoch methods (``milp``, ``greedy``, ``homogeneous``, ``unlimited``)
  epoch by epoch, or the horizon model (rolling ``milp``, ``oracle``, the two auto-scalers) on an
  instance with a trace and epochs. An instance with a ``[horizon]`` table is planned as a schedule
  by ``milp``; ``independent=True`` plans it epoch by epoch instead, and the epoch-only methods
  (``greedy``, ``homogeneous``, ``unlimited``) always plan it epoch by epoch;
* :func:`evaluate_any` - the independent evaluation: a schedule with its coupling rules, any other
  plan epoch by epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from neuscale_opt.errors import InputError

if TYPE_CHECKING:
    from neuscale_opt.alloc.options import PlanOptions
    from neuscale_opt.alloc.solution import Solution
    from neuscale_opt.coefficients import Coefficients

#: Methods that need the horizon model (an instance with a trace and epochs).
HORIZON_ONLY: tuple[str, ...] = ("oracle", "neuscale-autoscaler", "homogeneous-autoscaler")
#: The horizon policies ``bench`` runs by name (``rolling-milp``: the horizon model's ``milp``).
HORIZON_POLICIES: tuple[str, ...] = ("rolling-milp", *HORIZON_ONLY)


def load_plan_input(path: str | None) -> tuple[Coefficients, Any]:
    """Coefficients and the instance-like object options are read from, for any accepted input
    (read by the one loader, :func:`neuscale_opt.instance.load_instance` with ``profile=True``)."""
    from neuscale_opt.instance import Instance, load_instance

    inst = load_instance(path, profile=True)
    if isinstance(inst, Instance):
        from neuscale_opt.candidates import build_coefficients

        return build_coefficients(inst), inst
    from neuscale_opt.alloc.melange import profile_coefficients

    return profile_coefficients(inst), inst


def is_schedule(sol: Solution) -> bool:
    """True for a horizon plan (its epoch summaries carry the demand it planned for)."""
    return any(isinstance(e, dict) and "forecast_rps" in e for e in sol.epochs)


def uses_schedule(inst: Any, method: str, independent: bool = False, window: Any = None, forecast: Any = None) -> bool:
    """Whether :func:`plan_any` plans ``inst`` with the horizon model (see the module docstring)."""
    from neuscale_opt.alloc.options import METHODS
    from neuscale_opt.instance import Instance

    asked = method in HORIZON_ONLY or window is not None or forecast is not None
    if independent:
        if asked:
            what = f"--method {method}" if method in HORIZON_ONLY else "--window/--forecast"
            raise InputError(f"plans epochs independently; {what} needs the horizon model", where="--independent")
        return False
    if not isinstance(inst, Instance):
        if method not in METHODS or asked:
            raise InputError(f"method {method} needs an instance with a trace and epochs", where="--method")
        return False
    from neuscale_opt.horizon import uses_horizon

    return asked or (method == "milp" and uses_horizon(inst))


def plan_any(
    inst: Any,
    coeffs: Coefficients,
    method: str,
    options: PlanOptions,
    independent: bool = False,
    window: int | None = None,
    forecast: str | None = None,
    progress: Callable[[int], Any] | None = None,
    bound: bool = True,
) -> Solution:
    """Plan ``inst`` with ``method``: the horizon model or epoch by epoch (:func:`uses_schedule`).
    ``bound=False``: a rolling horizon plan without its proven bound (:func:`~neuscale_opt.
    horizon.plan_horizon`); epoch plans always carry their solver's bound."""
    if window is not None and window <= 0:
        raise InputError(f"must be > 0, got {window}", where="--window")
    if uses_schedule(inst, method, independent, window, forecast):
        from neuscale_opt.horizon import plan_horizon

        return plan_horizon(
            inst,
            method,
            coeffs=coeffs,
            window=window,
            forecast=forecast,
            progress=progress,
            options=options,
            bound=bound,
        )
    from neuscale_opt.alloc.plan import plan

    return plan(coeffs, options, method, progress=progress)


def evaluate_any(sol: Solution, coeffs: Coefficients, inst: Any) -> Any:
    """The independent evaluation fit for the plan: a horizon plan (epoch summaries with the demand
    it planned for) is re-checked as a schedule, with the coupling rules and its planned demand;
    any other plan epoch by epoch against the instance's demand (``unlimited``: without inventory)."""
    from neuscale_opt.alloc.evaluate import evaluate
    from neuscale_opt.instance import Instance

    schedule = [e for e in sol.epochs if isinstance(e, dict) and "forecast_rps" in e]
    if schedule and isinstance(inst, Instance):
        import pandas as pd

        from neuscale_opt.horizon import HorizonParams, evaluate_schedule, instance_inventory

        planned = pd.DataFrame(
            [(int(e["epoch"]), str(b), float(v)) for e in schedule for b, v in sorted(e["forecast_rps"].items())],
            columns=["epoch", "bucket", "rate_rps"],
        )
        return evaluate_schedule(
            sol,
            coeffs,
            HorizonParams.from_instance(inst),
            demand=planned,
            inventory=instance_inventory(coeffs, inst.inventory_events),
        )
    return evaluate(sol, coeffs.with_unlimited_inventory() if sol.method == "unlimited" else coeffs)
