"""Re-solving rolling windows without rebuilding their model (``formulations/horizon.md``, section
"Rolling window, full horizon, oracle", "Compiled windows").

The windows of a rolling plan differ in their numbers (forecast demand, carried counts and loads,
inventory, the bounds of n), not in their structure, except where a number decides whether a row
exists (a class without demand has no ``demand_coverage`` row, a group without a carried load has
no ``shrink_hold`` row for that epoch). :class:`CompiledWindows` builds the Pyomo model
(:func:`~neuscale_opt.horizon.model.build_model`) of a window once per structure, with every row
that may exist, and compiles it to arrays with the solver door's
:func:`~neuscale_opt.alloc.solve.linear_form`. For each later window of that structure it sets the
model's mutable parameters to the window's values (:func:`~neuscale_opt.horizon.model.window_data`),
re-evaluates only the right-hand sides and column bounds that read them, keeps the rows the window
has, and solves the arrays with :func:`~neuscale_opt.alloc.solve.solve_form`.

The arrays are those a fresh build and compile of the window would give, entry for entry (same
columns in the same order, same rows, same numbers; ``tests/horizon/test_horizon_persistent.py``
checks it), so the plan is the same. A window is built afresh instead when its arrays could differ:
a column whose first row is absent would move in the compiler's column order; failed chips
(``failure_loss``), another backend or a model to be written (``save_lp``/``save_mps``) are not
handled here. Placement is: its sub-blocks ``placement.e<t>`` read no number a window changes (the
pods and their failed chips are the plan's, inventory events bind through ``chip_inventory``), and
after a solve the window's values are loaded into the compiled model, whose sub-block of the
window's k-th epoch is its own k-th, so the placement readers read it as they read a fresh build.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyomo.environ as pyo
from pyomo.common.gc_manager import PauseGC
from pyomo.core.expr.visitor import identify_mutable_parameters
from pyomo.repn import generate_standard_repn

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.placement import GroupPlacements
from neuscale_opt.alloc.solve import (
    LinearForm,
    SolveResult,
    TriviallyInfeasible,
    linear_form,
    load_values,
    solve_form,
)
from neuscale_opt.horizon.context import State, WindowContext
from neuscale_opt.horizon.model import PARAMS, build_model, chips_t_set, cover_set, hold_set, window_data
from neuscale_opt.horizon.placement import window_placements

#: Position of the epoch in the index of each mutable parameter and variable (shifted between windows).
_PARAM_EPOCHS: dict[str, tuple[int, ...]] = {
    "demand_rps": (1,),
    "n_upper": (),
    "n_carried": (),
    "hold_load": (1, 2),
    "inventory_chips": (1,),
    "reserve_rps": (1,),
}
_VAR_EPOCHS: dict[str, tuple[int, ...]] = {
    "n_vpods": (1,),
    "rate": (1,),
    "unserved": (1,),
    "created": (1,),
    "deleted": (1,),
    "reserve_short": (1,),
}
#: Rows that exist only for some windows of a structure: row family -> its index set's function.
_OPTIONAL_ROWS = {"demand_coverage": (cover_set, (2,)), "shrink_hold": (hold_set, (1, 2))}


def _shift(index: Any, positions: tuple[int, ...], by: int) -> Any:
    if not positions:
        return index
    key = list(index) if isinstance(index, tuple) else [index]
    for p in positions:
        key[p] = int(key[p]) + by
    return tuple(key) if isinstance(index, tuple) else key[0]


@dataclass
class _Template:
    """One compiled window model with every optional row, and what a re-solve reads from it."""

    first: int
    model: pyo.ConcreteModel
    form: LinearForm
    a_csr: Any
    sense: np.ndarray
    rhs: np.ndarray
    param_rows: list[tuple[int, Any, Any]]
    optional: dict[str, tuple[np.ndarray, list[Any]]]
    always: np.ndarray
    first_row: np.ndarray
    bounded: list[tuple[int, Any]]
    names: list[tuple[str, Any]]


def superset_context(ctx: WindowContext) -> WindowContext:
    """The window with every optional row: demand in every (class, epoch), a carried load for every
    group in every epoch of the hold window before it (the numbers are placeholders, replaced by
    the window's own through the parameters)."""
    demand = {(b, t): 1.0 for b in ctx.buckets for t in ctx.epochs}
    state = ctx.state
    if state is not None:
        first = ctx.epochs[0]
        # tau < 0 included: a window whose hold window is cut at epoch 0 then has the structure of
        # a full one, its missing rows absent (a compile for the rolling plan's first K windows
        # instead of one each)
        loads = {(g, tau): 1.0 for g in ctx.groups["group"] for tau in range(first - ctx.hold_epochs, first)}
        state = State(epoch=state.epoch, n=dict(state.n), loads=loads, inventory=dict(state.inventory))
    return dataclasses.replace(ctx, demand=demand, state=state)


def _structure(ctx: WindowContext, full: WindowContext) -> tuple:
    """What decides a window's compiled structure, relative to its first epoch."""
    first = ctx.epochs[0]
    return (
        len(ctx.epochs),
        ctx.state is None,
        ctx.reserved,
        tuple((g, t - first, tau - first) for g, t, tau in hold_set(full)),
        tuple((c, t - first) for c, t in chips_t_set(ctx)),
    )


def _compile(full: WindowContext) -> _Template | None:
    with PauseGC():  # as build_model: the compile makes as many small objects as the build
        return _compile_template(full)


def _compile_template(full: WindowContext) -> _Template | None:
    m = build_model(full)
    try:
        form = linear_form(m)
    except TriviallyInfeasible:
        return None
    if len(form.columns) == 0:
        return None
    rows = form.rows
    sense = np.array([r.bound_type for r in rows], dtype=int)
    rhs = np.where(sense == 1, form.row_hi, form.row_lo).astype(float)
    param_rows = []
    optional_idx: dict[str, list[int]] = {k: [] for k in _OPTIONAL_ROWS}
    optional_keys: dict[str, list[Any]] = {k: [] for k in _OPTIONAL_ROWS}
    always = np.ones(len(rows), dtype=bool)
    for i, r in enumerate(rows):
        con = r.constraint
        family = con.parent_component().local_name
        if family in _OPTIONAL_ROWS:
            always[i] = False
            optional_idx[family].append(i)
            optional_keys[family].append(con.index())
        if identify_mutable_parameters(con.expr):
            lb, body, ub = con.to_bounded_expression()
            const = generate_standard_repn(body, compute_values=False, quadratic=False).constant
            bound = lb if r.bound_type == -1 else ub
            param_rows.append((i, bound, const))
    optional = {k: (np.asarray(optional_idx[k], dtype=int), optional_keys[k]) for k in _OPTIONAL_ROWS}
    a = form.a.tocsc()
    # the row in which each column first appears (-1: in the objective, compiled before every row)
    first_row = np.full(len(form.columns), -1, dtype=int)
    for j in range(len(form.columns)):
        if form.cost[j] == 0.0:
            lo, hi = a.indptr[j], a.indptr[j + 1]
            first_row[j] = int(a.indices[lo:hi].min()) if hi > lo else -1
    bounded = [(j, v) for j, v in enumerate(form.columns) if not v.fixed]
    names = [(v.parent_component().local_name, v.index()) for v in form.columns]
    return _Template(
        first=full.epochs[0],
        model=m,
        form=form,
        a_csr=a.tocsr(),
        sense=sense,
        rhs=rhs,
        param_rows=param_rows,
        optional=optional,
        always=always,
        first_row=first_row,
        bounded=bounded,
        names=names,
    )


def _fix_columns(form: LinearForm, tpl: _Template, by: int, fixed: Mapping[str, Mapping[Any, float]]) -> LinearForm:
    """``form`` with the columns of ``fixed`` (indices of the window, ``by`` epochs after the
    template's) bounded to their value from both sides."""
    lo, hi = form.col_lo.copy(), form.col_hi.copy()
    for j, (name, index) in enumerate(tpl.names):
        vals = fixed.get(name)
        if vals is None:
            continue
        v = vals.get(_shift(index, _VAR_EPOCHS[name], by))
        if v is not None:
            lo[j] = hi[j] = float(v)
    return dataclasses.replace(form, col_lo=lo, col_hi=hi)


class CompiledWindows:
    """The compiled window models of one rolling plan, one per structure (:func:`_structure`)."""

    def __init__(self) -> None:
        self._templates: dict[tuple, _Template | None] = {}
        self.reused = 0
        self.compiled = 0

    @staticmethod
    def handles(ctx: WindowContext, options: PlanOptions) -> bool:
        """Can a window be solved from a compiled model? (Otherwise it is built afresh.)"""
        if options.backend != "highs" or options.save_lp or options.save_mps:
            return False
        return not any(ctx.inventory_drop(str(c), t) > 0 for c in set(ctx.groups["chip"]) for t in ctx.epochs)

    def solve(
        self, ctx: WindowContext, options: PlanOptions, fixed: Mapping[str, Mapping[Any, float]] | None = None
    ) -> tuple[SolveResult, Callable[[int, Mapping[str, int]], GroupPlacements] | None] | None:
        """The window solved from its structure's compiled model, with the values of ``n_vpods``,
        ``rate``, ``unserved``, ``created`` and ``deleted`` keyed by the window's epochs, and the
        reader of its placements (``placements(t, n)``: :func:`~neuscale_opt.horizon.placement.
        window_placements` of epoch t on the compiled model; None when nothing is placed or there is
        no plan); None when the window must be built afresh. Read the placements before the next
        window is solved: it overwrites the compiled model's values. ``fixed`` (variable -> {index
        of the window: value}) fixes those columns at those values (both bounds), as a fresh build
        with the same bounds would."""
        if not self.handles(ctx, options):
            return None
        full = superset_context(ctx)
        key = _structure(ctx, full)
        if key not in self._templates:
            self._templates[key] = _compile(full)
            self.compiled += 1
        else:
            self.reused += 1
        tpl = self._templates[key]
        if tpl is None:
            return None
        form = self._form(tpl, ctx)
        if form is None:
            return None
        if fixed:
            form = _fix_columns(form, tpl, ctx.epochs[0] - tpl.first, fixed)
        res, x = solve_form(form, options)
        if x is None:
            return res, None
        by = ctx.epochs[0] - tpl.first
        values: dict[str, dict[Any, float]] = {}
        for (name, index), val in zip(tpl.names, x, strict=True):
            if name in _VAR_EPOCHS:
                values.setdefault(name, {})[_shift(index, _VAR_EPOCHS[name], by)] = float(val)
        reader = None
        if ctx.placement and hasattr(tpl.model, "placement"):
            load_values(tpl.model, form, x)
            model = tpl.model

            def reader(t: int, n: Mapping[str, int]) -> GroupPlacements:
                return window_placements(model, ctx, t, n, block_epoch=t - by)

        return dataclasses.replace(res, values=values), reader

    @staticmethod
    def _form(tpl: _Template, ctx: WindowContext) -> LinearForm | None:
        """The template's arrays with the window's numbers and rows, or None when they would not be
        those of a fresh compile (a column's first row absent)."""
        by = tpl.first - ctx.epochs[0]
        data = window_data(ctx)
        m = tpl.model
        for name, _sets in PARAMS:
            param = getattr(m, name)
            pos = _PARAM_EPOCHS[name]
            own = {_shift(k, pos, by): v for k, v in data[name].items()}
            for idx in param:
                param[idx].set_value(own.get(idx, 0.0))
        present = tpl.always.copy()
        for family, (rows, keys) in tpl.optional.items():
            fn, pos = _OPTIONAL_ROWS[family]
            have = {_shift(k, pos, by) for k in fn(ctx)}
            for i, k in zip(rows, keys, strict=True):
                present[i] = k in have
        need = tpl.first_row[tpl.first_row >= 0]
        if not present[need].all():
            return None
        rhs = tpl.rhs.copy()
        for i, bound, const in tpl.param_rows:
            rhs[i] = pyo.value(bound) - pyo.value(const)
        lo = tpl.form.col_lo.copy()
        hi = tpl.form.col_hi.copy()
        for j, v in tpl.bounded:
            lb, ub = v.bounds
            lo[j] = -math.inf if lb is None else float(lb)
            hi[j] = math.inf if ub is None else float(ub)
        sense = tpl.sense[present]
        rhs = rhs[present]
        return dataclasses.replace(
            tpl.form,
            col_lo=lo,
            col_hi=hi,
            a=tpl.a_csr[present].tocsc(),
            row_lo=np.where(sense == 1, -math.inf, rhs),
            row_hi=np.where(sense == -1, math.inf, rhs),
            rows=[r for r, p in zip(tpl.form.rows, present, strict=True) if p],
        )
