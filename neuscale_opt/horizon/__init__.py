"""Horizon planning: a multi-epoch model with the auto-scaling rules as coupling constraints.

Modules: ``params`` (the rules' constants, inventory over time), ``context`` (the numbers of one
window, no Pyomo), ``model`` (the Pyomo model, one ``add_<ID>`` builder per constraint family),
``rolling`` (full-horizon and rolling-window plans, assembly into a ``Solution``), ``autoscaler``
(the reactive policies), ``evaluate`` (independent schedule evaluator), ``plan`` (the door:
:func:`plan_horizon`, :func:`uses_horizon`). Spec: ``formulations/horizon.md``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Lazy exports: importing ``neuscale_opt.horizon.evaluate`` (the independent schedule evaluator)
# must not pull in Pyomo through the model modules.
_EXPORTS = {
    "DEFAULT_WINDOW": "plan",
    "HORIZON_METHODS": "plan",
    "HorizonParams": "params",
    "ScheduleEvaluation": "evaluate",
    "evaluate_schedule": "evaluate",
    "fleet_total_inventory": "autoscaler",
    "forecast_window": "rolling",
    "homogeneous_autoscaler": "autoscaler",
    "homogeneous_each": "autoscaler",
    "instance_inventory": "rolling",
    "inventory_schedule": "params",
    "neuscale_autoscaler": "autoscaler",
    "plan_full": "rolling",
    "plan_horizon": "plan",
    "plan_rolling": "rolling",
    "uses_horizon": "plan",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"neuscale_opt.horizon.{_EXPORTS[name]}"), name)
    raise AttributeError(name)
