"""The numbers one window of the horizon model reads, precomputed outside any solver.

:func:`build_window` turns coefficients, the planned demand of the window's epochs, the inventory
schedule and the state committed before the window into a frozen :class:`WindowContext`. The
per-epoch data (usable configurations, vPod groups, capacities c_k, objective coefficients a_k and
h_g, unserved penalty) come from :func:`neuscale_opt.alloc.context.prepare`, the single-epoch
model's own preparation, so the horizon model and the epoch MILP read identical numbers. The
reactive policies read the same object. No Pyomo in here; symbols of ``formulations/horizon.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import pandas as pd

from neuscale_opt.alloc.context import Prepared, phases_for, prepare
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.coefficients import J_PER_KWH, Coefficients
from neuscale_opt.horizon.params import HorizonParams
from neuscale_opt.topology.patterns import GenPlacementData


@dataclass(frozen=True)
class State:
    """What the epochs before a window left behind (the rolling plan's carried state).

    ``epoch`` is the last committed epoch (t0 - 1); ``n`` the vPods each group held in it;
    ``loads`` the load (vPods' worth of traffic, sum_k r_k / c_k) of each group in each committed
    epoch of the hold window; ``inventory`` the healthy chips per generation in epoch t0 - 1.
    """

    epoch: int
    n: dict[str, int]
    loads: dict[tuple[str, int], float]
    inventory: dict[str, float]


@dataclass(frozen=True)
class WindowContext:
    """Everything the horizon model of one window needs.

    ``configs``: usable configurations K (columns of ``alloc.context.prepare``: ``config_id``,
    ``group``, ``bucket``, ``phase``, ``chip``, ``chips_per_vpod``, ``cap_rps`` = c_k,
    ``var_obj_per_req`` = a_k, ``held_obj_per_vpod`` = h_g). ``groups``: one row per group with
    ``chip``, ``chips_per_vpod``, ``held_obj_per_vpod``, ``create_obj`` and ``delete_obj``
    (objective units per vPod created / deleted) and ``placed_shape`` (canonical slice shape s(g) of a
    placed generation, else None). ``demand[(b, t)]`` the planned rate (req/s, zeros included),
    ``inventory[(c, t)]`` H_{c,t}. ``state`` is None when the window starts the horizon (warm start:
    no coupling into its first epoch). ``placement`` maps each placed generation to its packing data
    (``Prepared.placement``: pods given, finite inventory, ``options.placement != "none"``); empty
    when nothing is placed. ``reserve[(b, t)]``: the rate above ``demand`` the plan keeps room for
    (``HorizonParams.reserve_forecast``; empty without one), only where ``demand`` is positive.
    """

    epochs: tuple[int, ...]
    options: PlanOptions
    params: HorizonParams
    epoch_s: float
    penalty_per_req: float
    configs: pd.DataFrame
    groups: pd.DataFrame
    buckets: tuple[str, ...]
    phases: tuple[str, ...]
    demand: dict[tuple[str, int], float]
    inventory: dict[tuple[str, int], float]
    state: State | None
    delta: float
    hold_epochs: int
    placement: Mapping[str, GenPlacementData] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    reserve: dict[tuple[str, int], float] = field(default_factory=dict)

    @property
    def reserved(self) -> bool:
        """Does the model carry the guard-reserve rows (``HorizonParams.reserve_forecast`` set)?"""
        return self.params.reserve_forecast is not None

    @cached_property
    def members(self) -> dict[str, list[tuple[str, str, str, float]]]:
        """Configurations of each group: (config_id, bucket, phase, c_k), in the order of ``configs``
        (computed once per window; every family that sums over a group's members reads it)."""
        out: dict[str, list[tuple[str, str, str, float]]] = {g: [] for g in self.groups["group"]}
        cfg = self.configs
        for k, g, b, p, c in zip(
            cfg["config_id"], cfg["group"], cfg["bucket"], cfg["phase"], cfg["cap_rps"], strict=True
        ):
            out[g].append((k, str(b), str(p), float(c)))
        return out

    def previous(self, t: int) -> int | None:
        """The epoch before t whose vPod counts couple into t, or None (first epoch, warm start)."""
        if t == self.epochs[0]:
            return None if self.state is None else self.state.epoch
        return t - 1

    def inventory_drop(self, chip: str, t: int) -> float:
        """Chips of ``chip`` lost between the previous epoch and t (0 if none or no previous)."""
        p = self.previous(t)
        if p is None:
            return 0.0
        before = self.state.inventory.get(chip, math.inf) if t == self.epochs[0] else self.inventory[(chip, p)]
        now = self.inventory[(chip, t)]
        if math.isinf(before) or math.isinf(now):
            return 0.0
        return max(0.0, before - now)

    def dropped_between(self, chip: str, tau: int, t: int) -> bool:
        """Did ``chip`` lose chips at some epoch e with tau < e <= t? (A failure restarts the hold
        window of the generation's groups: loads measured before it no longer bind.)"""
        return inventory_dropped(self.inventory, chip, tau, t)


def inventory_dropped(inventory: dict[tuple[str, int], float], chip: str, tau: int, t: int) -> bool:
    """True when H_{chip,e} < H_{chip,e-1} for some tau < e <= t (epochs absent from the schedule
    count as no change)."""
    for e in range(tau + 1, t + 1):
        before, now = inventory.get((chip, e - 1)), inventory.get((chip, e))
        if before is not None and now is not None and now < before:
            return True
    return False


def serving_capacity(n: float, prev: float, delta: float) -> float:
    """vPods' worth of serving capacity of n vPods when prev existed before (the right side of
    ``vpod_capacity``): n - delta max(n - prev, 0), the vPods created serving 1 - delta of the epoch."""
    return n - delta * max(n - prev, 0)


def horizon_options(options: PlanOptions) -> PlanOptions:
    """The options of the horizon model: unserved demand is always allowed (priced by the penalty),
    because the coupling may keep a plan from reaching a sudden peak in time; HiGHS's restarts are
    off unless the options say otherwise (``PlanOptions.restarts``)."""
    restarts = False if options.restarts is None else options.restarts
    return options.replace(allow_unserved=True, restarts=restarts)


def reconfiguration_coefficients(
    groups: pd.DataFrame, coeffs: Coefficients, options: PlanOptions, params: HorizonParams
) -> tuple[pd.Series, pd.Series]:
    """Objective units per vPod created and per vPod deleted: chips x J per chip, at the facility
    (PUE) for ``energy``, times the carbon intensity for ``carbon``, 0 for ``cost``; a pre-warmed
    vPod (``HorizonParams.lead_s`` L > 0) is also held L before its epoch: h_g L / T more."""
    chips = groups["chips_per_vpod"].astype(float)
    per_j = {"energy": coeffs.pue, "cost": 0.0, "carbon": coeffs.pue * coeffs.carbon_kg_per_kwh / J_PER_KWH}
    k = per_j[options.objective]
    epoch_s = float(coeffs.epoch_s)
    pre = groups["held_obj_per_vpod"].astype(float) * (params.lead_s(epoch_s) / epoch_s)
    return k * chips * params.create_energy_j_per_chip + pre, k * chips * params.delete_energy_j_per_chip


def prepared_for(prepared: Prepared, options: PlanOptions) -> bool:
    """Was ``prepared`` made by ``prepare(coeffs, options)``? Its options are ``options`` with the
    default unserved penalty resolved to a number (``prepare`` fixes it), so a window planned with the
    default penalty reuses the preparation instead of redoing it (the time budget, ``deadline``, is
    not a setting and does not count)."""
    if prepared.options == options:
        return True
    return options.unserved_penalty is None and prepared.options == options.replace(
        unserved_penalty=prepared.options.unserved_penalty
    )


def build_window(
    coeffs: Coefficients,
    options: PlanOptions,
    params: HorizonParams,
    epochs: list[int],
    demand: dict[tuple[str, int], float],
    inventory: dict[tuple[str, int], float],
    state: State | None = None,
    prepared: Prepared | None = None,
    reserve: dict[tuple[str, int], float] | None = None,
) -> WindowContext:
    """The frozen data of the window ``epochs`` (consecutive) with planned ``demand`` and, under a
    reserve forecaster, the ``reserve`` rate to keep room for (kept where ``demand`` is positive:
    a class the model does not plan, a tail class, has no reserve)."""
    opts = horizon_options(options)
    if prepared is None or not prepared_for(prepared, opts):
        prepared = prepare(coeffs, opts)
    cfg = prepared.configs.reset_index(drop=True)
    cols = ["group", "chip", "shape", "chips_per_vpod", "held_obj_per_vpod", "vpod_type", "placed_shape"]
    groups = cfg[cols].drop_duplicates("group").sort_values("group").reset_index(drop=True)
    create, delete = reconfiguration_coefficients(groups, coeffs, opts, params)
    groups = groups.assign(create_obj=create.to_numpy(), delete_obj=delete.to_numpy())
    epoch_s = float(coeffs.epoch_s)
    return WindowContext(
        epochs=tuple(int(t) for t in epochs),
        options=opts,
        params=params,
        epoch_s=epoch_s,
        penalty_per_req=prepared.penalty_per_req,
        configs=cfg,
        groups=groups,
        buckets=tuple(coeffs.bucket_names),
        phases=phases_for(opts.serving),
        demand={k: float(v) for k, v in demand.items()},
        inventory=dict(inventory),
        state=state,
        delta=params.delay_share(epoch_s) if params.coupling else 0.0,
        hold_epochs=params.hold_epochs(epoch_s) if params.coupling else 0,
        placement=prepared.placement if opts.placement != "none" else {},
        reserve={
            (str(b), int(t)): float(v)
            for (b, t), v in (reserve or {}).items()
            if v > 0 and float(demand.get((b, t), 0.0)) > 0 and int(t) in epochs
        },
    )
