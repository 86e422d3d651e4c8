"""Placements of a horizon plan: which vPod of which group sits where, epoch by epoch (spec:
``formulations/horizon.md``, section "Placement").

The horizon model makes the counts N_{c,s,t} of every epoch placeable with one sub-block per epoch
(``placement.e<t>``, the epoch MILP's placement rows). Reading a solved sub-block is the epoch
MILP's job already: :func:`epoch_view` presents one epoch of a window as the
:class:`~neuscale_opt.alloc.context.EpochContext` fields those readers use (``epoch``, ``options``,
``configs``, ``groups`` with ``placed_shape``, ``placement``), so that
:func:`neuscale_opt.alloc.placement.milp_placements` realises the counts (pattern: packing patterns
turned into positions; exact: the selected positions), hands them to the groups in a fixed order and
:func:`neuscale_opt.alloc.placement.placement_rows` writes the rows. Deterministic: depends only on
the solved values. The reactive policies place their vPods themselves (first fit) and write their
rows with :func:`view_placement_rows`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pyomo.environ as pyo

from neuscale_opt.alloc.context import EpochContext, Prepared
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.placement import GroupPlacements, milp_placements, placement_rows
from neuscale_opt.horizon.context import WindowContext
from neuscale_opt.horizon.model import placement_block_name


def placement_view(
    t: int, options: PlanOptions, configs: pd.DataFrame, groups: pd.DataFrame, placement: Mapping[str, Any]
) -> EpochContext:
    """Epoch t as an :class:`EpochContext` for the placement readers and writers: ``configs``
    (``config_id``, ``group``, ``bucket``, ``vpod_type``), ``groups`` (``group``, ``chip``,
    ``placed_shape``) and the packing data; demand, inventory and the accounting constants are not
    theirs to read and are left empty."""
    return EpochContext(
        epoch=int(t),
        options=options,
        epoch_s=math.nan,
        util_cap=math.nan,
        pue=math.nan,
        carbon_kg_per_kwh=math.nan,
        penalty_per_req=math.nan,
        configs=configs,
        groups=groups,
        demand={},
        inventory={},
        bucket_rate={},
        placement=placement,
    )


def epoch_view(ctx: WindowContext, t: int) -> EpochContext:
    """Epoch t of the window (:func:`placement_view`)."""
    return placement_view(t, ctx.options, ctx.configs, ctx.groups, ctx.placement)


def window_placements(
    m: pyo.ConcreteModel, ctx: WindowContext, t: int, n: Mapping[str, int], block_epoch: int | None = None
) -> GroupPlacements:
    """Concrete placements of epoch t of a solved window (empty when nothing is placed), read from
    the sub-block of ``block_epoch`` (default t; a compiled window's model is labelled with the
    epochs of the window it was compiled for)."""
    blk = getattr(m, "placement", None)
    if blk is None:
        return ()
    sub = getattr(blk, placement_block_name(t if block_epoch is None else block_epoch))
    return milp_placements(SimpleNamespace(placement=sub), epoch_view(ctx, t), n)


def routed_configs(configs: pd.DataFrame, route: Mapping[str, str] | None) -> pd.DataFrame:
    """``configs`` with each configuration of ``route`` moved to the group it runs on (a coalesced or
    tail class is listed on that group's placement rows)."""
    if not route:
        return configs
    return configs.assign(group=[route.get(k, g) for k, g in zip(configs["config_id"], configs["group"], strict=True)])


def epoch_placement_rows(
    ctx: WindowContext,
    t: int,
    assigned: GroupPlacements,
    x: Mapping[str, float],
    route: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Rows of ``Solution.placements`` for epoch t (``alloc.placement.placement_rows``); ``route``
    as in :func:`view_placement_rows`."""
    if not assigned:
        return []
    view = placement_view(t, ctx.options, routed_configs(ctx.configs, route), ctx.groups, ctx.placement)
    return placement_rows(view, assigned, x)


def view_placement_rows(
    t: int,
    options: PlanOptions,
    prep: Prepared,
    assigned: GroupPlacements,
    x: Mapping[str, float],
    route: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Rows of ``Solution.placements`` for epoch t of a reactive policy: ``assigned`` (group,
    placement) pairs, ``x`` the rate per configuration, ``route`` the group a coalesced configuration
    runs on (its class is listed on that group's rows)."""
    groups = prep.configs.drop_duplicates("group")[["group", "chip", "placed_shape"]].reset_index(drop=True)
    cfg = routed_configs(prep.configs, route)
    return placement_rows(placement_view(t, options, cfg, groups, prep.placement), assigned, x)
