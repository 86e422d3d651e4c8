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
from neuscale_opt.errors import InputError
from neuscale_opt.horizon.autoscaler import homogeneous_autoscaler, neuscale_autoscaler
from neuscale_opt.horizon.params import HorizonParams
from neuscale_opt.horizon.rolling import instance_inventory, plan_full, plan_rolling

HORIZON_METHODS: tuple[str, ...] = ("milp", "oracle", "neuscale-autoscaler", "homogeneous-autoscaler")
#: Window of the rolling plan when the instance does not set one: the paper's 30-minute
#: monitoring window at 5-minute epochs.
DEFAULT_WINDOW = 3


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
    bound: bool = True,
) -> Solution:
    """Plan ``instance`` over its epochs with ``method`` (see the module docstring).

    ``coeffs`` default ``build_coefficients(instance)``; ``window`` and ``forecast`` override the
    ``[horizon]`` table; ``options`` default ``PlanOptions.from_instance(instance)``; ``chip`` fixes
    the generation of ``homogeneous-autoscaler``. ``progress(k)`` is called as epochs are planned.
    ``bound=False`` leaves out a rolling plan's proven bound (its LP over the whole horizon; the
    plan is the same, its ``bound`` and ``gap`` NaN): for a plan that is only compared, e.g. a
    report's oracle baseline.
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
            sol = plan_rolling(coeffs, opts, prm, fc, h, inv, method=method, progress=progress, bound=bound)
        return sol
    if progress is not None:
        progress(n_epochs)
    return sol
