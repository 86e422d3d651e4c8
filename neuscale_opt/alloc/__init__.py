"""Epoch allocation: the MILP, the greedy heuristic and baselines, and the independent evaluator.

Spec: ``formulations/allocation.md``. Public API::

    from neuscale_opt.alloc import PlanOptions
    from neuscale_opt.alloc.evaluate import evaluate  # module and function share the name
    from neuscale_opt.alloc.plan import plan   # the function of the module of the same name
    sol = plan(coeffs, PlanOptions(objective="energy"), method="milp")
    check = evaluate(sol, coeffs)
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Lazy exports: importing ``neuscale_opt.alloc.evaluate`` must not pull in Pyomo.
_EXPORTS = {
    "Evaluation": "evaluate",
    "PlanOptions": "options",
    "Solution": "solution",
    "greedy": "plan",
    "homogeneous": "plan",
    "solve_milp": "plan",
    "unlimited": "plan",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"neuscale_opt.alloc.{_EXPORTS[name]}"), name)
    raise AttributeError(name)
