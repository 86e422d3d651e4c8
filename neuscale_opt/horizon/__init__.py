"""Horizon planning: a multi-epoch model with the auto-scaling rules as coupling constraints.

Modules: ``params`` (the rules' constants, inventory over time), ``context`` (the numbers of one
window, no Pyomo), ``model`` (the Pyomo model, one ``add_<ID>`` builder per constraint family),
``rolling`` (full-horizon and rolling-window plans, assembly into a ``Solution``), ``autoscaler``
(the reactive policies), ``evaluate`` (independent schedule evaluator), ``plan`` (the door:
:func:`plan_horizon`, :func:`uses_horizon`). Spec: ``formulations/horizon.md``.
"""

from __future__ import annotations

from neuscale_opt.horizon.autoscaler import (
    fleet_total_inventory,
    homogeneous_autoscaler,
    homogeneous_each,
    neuscale_autoscaler,
)
from neuscale_opt.horizon.evaluate import ScheduleEvaluation, evaluate_schedule
from neuscale_opt.horizon.params import HorizonParams, inventory_schedule
from neuscale_opt.horizon.plan import DEFAULT_WINDOW, HORIZON_METHODS, plan_horizon, uses_horizon
from neuscale_opt.horizon.rolling import forecast_window, instance_inventory, plan_full, plan_rolling

__all__ = [
    "DEFAULT_WINDOW",
    "HORIZON_METHODS",
    "HorizonParams",
    "ScheduleEvaluation",
    "evaluate_schedule",
    "fleet_total_inventory",
    "forecast_window",
    "homogeneous_autoscaler",
    "homogeneous_each",
    "instance_inventory",
    "inventory_schedule",
    "neuscale_autoscaler",
    "plan_full",
    "plan_horizon",
    "plan_rolling",
    "uses_horizon",
]
