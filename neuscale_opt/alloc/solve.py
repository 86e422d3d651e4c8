"""The one door to solvers: HiGHS through Pyomo, and OR-Tools as a second backend.

This is the only module of the package that imports solver interfaces. :func:`solve_model` takes
a built Pyomo model and generic options (work limit, time limit, relative gap, threads, seed), and
returns a :class:`SolveResult`: status, objective, proven bound, relative gap, branch-and-bound
nodes, wall time and the variable values. Infeasibility is a status, not an exception.

Two limits stop a MILP search (``formulations/allocation.md``, "Solver limits"): the work limit
``options.node_limit`` (branch-and-bound nodes: HiGHS ``mip_max_nodes``, SCIP
``limits/totalnodes``), deterministic with one thread and a fixed seed, and the wall-clock limit
``options.solve_time_limit()``, a safety net. The status says which one stopped a solve:
``work_limit`` or ``time_limit``.

HiGHS receives the model's standard form as arrays: for a model of
:func:`neuscale_opt.alloc.model.build_model` still exactly as built, the rows its builders recorded
while making its constraints (:func:`recorded_form`, the same arrays as Pyomo's compiler gives);
for any other model, Pyomo's ``LinearStandardFormCompiler`` (:func:`linear_form`).

The OR-Tools backend does not re-formulate anything: it reads the Pyomo model's linear rows
(``pyomo.repn.generate_standard_repn``) into ``pywraplp`` and solves them with SCIP, so both
backends solve exactly the same rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pyomo.environ as pyo
from pyomo.repn import generate_standard_repn

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.solution import STOPPED_BY
from neuscale_opt.errors import SolverError

#: Statuses a solve can end with (``feasible`` is reserved for heuristics), as in
#: :data:`neuscale_opt.alloc.solution.JSON_STATUSES`, plus ``no_incumbent``.
STATUSES: tuple[str, ...] = ("optimal", "feasible", "work_limit", "time_limit", "infeasible", "no_incumbent")

#: The statuses of a solve stopped by a limit with an incumbent (its gap reported).
LIMIT_STATUSES: tuple[str, ...] = tuple(STOPPED_BY)


@dataclass(frozen=True)
class SolveResult:
    """Outcome of one solve.

    ``status``: ``optimal`` (proven within the requested gap), ``work_limit`` (stopped by the node
    limit with an incumbent: deterministic), ``time_limit`` (stopped by the wall-clock limit with
    an incumbent: may differ between machines), ``infeasible`` or ``no_incumbent`` (stopped by a
    limit without any feasible point; ``stopped_by`` says which). ``objective``/``bound`` are in
    objective units; ``gap`` is (objective - bound) / max(|objective|, 1e-9). ``nodes``: the
    branch-and-bound nodes the search took (0 for an LP). ``values`` maps a variable's name to
    {index: value}.
    """

    status: str
    objective: float
    bound: float
    gap: float
    seconds: float
    backend: str
    values: dict[str, dict[Any, float]] = field(default_factory=dict)
    nodes: int = 0
    stopped_by: str | None = None

    @property
    def has_plan(self) -> bool:
        return self.status in ("optimal", "feasible", *LIMIT_STATUSES)

    def info(self) -> dict[str, Any]:
        """The solve's figures the planners record per epoch or window."""
        return {
            "objective_value": self.objective,
            "bound": self.bound,
            "gap": self.gap,
            "solve_seconds": self.seconds,
            "nodes": self.nodes,
        }


def relative_gap(objective: float, bound: float) -> float:
    if not (math.isfinite(objective) and math.isfinite(bound)):
        return math.inf
    return max(0.0, objective - bound) / max(abs(objective), 1e-9)


def _values(m: pyo.ConcreteModel) -> dict[str, dict[Any, float]]:
    """Values of every variable, keyed by the variable's name: ``n_vpods`` at the top level, the
    block path for variables of sub-blocks (``placement.y_pattern``)."""
    out: dict[str, dict[Any, float]] = {}
    for var in m.component_objects(pyo.Var, descend_into=True):
        name = var.getname(fully_qualified=True)
        out[name] = {idx: float(v.value) if v.value is not None else 0.0 for idx, v in var.items()}
    return out


def _is_trivial(m: pyo.ConcreteModel) -> bool:
    return not any(True for _ in m.component_data_objects(pyo.Var, descend_into=True))


#: Models written per ``save_lp``/``save_mps`` path in this process (the k-th goes to ``<stem>-<k>``).
_SAVED: dict[str, int] = {}


def save_model(m: pyo.ConcreteModel, path: str, fmt: str) -> str:
    """Write ``m`` in ``fmt`` (``lp`` or ``mps``) through Pyomo to ``path``, or to ``<stem>-<k><suffix>``
    for the k-th further model written to the same path in this process; returns where it went.
    The file is written by the rules of :mod:`neuscale_opt.io` (devices and FIFOs written through)."""
    import tempfile
    from pathlib import Path

    from neuscale_opt.io import emit

    k = _SAVED.get(path, 0)
    _SAVED[path] = k + 1
    p = Path(path)
    through = p.exists() and not p.is_file()  # a device or FIFO takes every model
    dest = path if k == 0 or through else str(p.with_name(f"{p.stem}-{k}{p.suffix}"))
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / f"model.{fmt}"
        m.write(str(f), io_options={"symbolic_solver_labels": True})  # the format from the suffix
        emit(f.read_bytes(), dest, where=f"--save-{fmt}")
    return dest


def solve_model(m: pyo.ConcreteModel, options: PlanOptions) -> SolveResult:
    """Solve ``m`` with ``options.backend`` under the work limit, time limit, gap, threads and seed
    given (writing the model first when ``save_lp``/``save_mps`` is set)."""
    start = time.perf_counter()
    if options.save_lp:
        save_model(m, options.save_lp, "lp")
    if options.save_mps:
        save_model(m, options.save_mps, "mps")
    if _is_trivial(m):
        obj = float(pyo.value(m.total_objective.expr))
        return SolveResult("optimal", obj, obj, 0.0, time.perf_counter() - start, options.backend, {})
    if options.backend == "highs":
        res = _solve_highs(m, options)
    else:
        res = _solve_ortools(m, options)
    return dataclasses.replace(res, seconds=time.perf_counter() - start)


@contextlib.contextmanager
def _log_to_stderr():
    """A logger that prints the solver's log on stderr (so that ``--json -`` stays clean).

    Pyomo captures the solver's file descriptors 1 and 2 while it solves and hands the lines to a
    logger; the logger writes to a duplicate of stderr's descriptor taken before that capture (a
    write to fd 2 itself would feed the capture again), or to the ``sys.stderr`` object when it has
    no descriptor."""
    try:
        stream = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
        own = True
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        stream, own = sys.stderr, False
    logger = logging.getLogger("neuscale_opt.solver_log")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger
    finally:
        logger.removeHandler(handler)
        handler.flush()
        if own:
            stream.close()


#: The thread count HiGHS's global scheduler was last started with in this process.
_HIGHS_THREADS: list[int] = []


def _highs_threads(threads: int) -> None:
    """HiGHS starts one global thread scheduler per process and refuses a later solve asking for
    another thread count (it reports an error, which would read as infeasible); reset the
    scheduler when the count changes."""
    if _HIGHS_THREADS and _HIGHS_THREADS[-1] != threads:
        import highspy

        highspy.Highs.resetGlobalScheduler(True)
    _HIGHS_THREADS[:] = [threads]


@contextlib.contextmanager
def _stdout_to_stderr():
    """Send what the solver's C++ code prints on file descriptor 1 to stderr while it runs."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # pragma: no cover - no stdout descriptor at all
        yield
        return
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@dataclass(frozen=True)
class LinearForm:
    """A linear Pyomo model as arrays (Pyomo's standard-form compiler, ``mixed_form``): the columns
    (Pyomo variables) with bounds and integrality, the rows ``row_lo <= A x <= row_hi`` and the
    objective ``c x + offset`` (minimised). ``eliminated`` are the model's variables that appear in
    no row and no objective term, or are fixed: their value is set without the solver. ``rows``: the
    compiler's row entries (constraint, bound type: 0 equality, 1 upper, -1 lower), one per row."""

    columns: list
    col_lo: Any
    col_hi: Any
    integer: Any
    a: Any
    row_lo: Any
    row_hi: Any
    cost: Any
    offset: float
    rows: list = field(default_factory=list)


class TriviallyInfeasible(Exception):
    """A constraint without variables that cannot hold."""


def linear_form(m: pyo.ConcreteModel) -> LinearForm:
    """``m`` compiled to arrays by Pyomo's own linear standard-form compiler (vectorised rows rather
    than one expression walk per constraint through a persistent interface)."""
    import numpy as np
    from pyomo.common.errors import InfeasibleConstraintException
    from pyomo.repn.plugins.standard_form import LinearStandardFormCompiler

    try:
        info = LinearStandardFormCompiler().write(m, mixed_form=True, set_sense=pyo.minimize)
    except InfeasibleConstraintException as exc:
        raise TriviallyInfeasible(str(exc)) from exc
    cols = list(info.columns)
    n = len(cols)
    lo = np.empty(n)
    hi = np.empty(n)
    integer = np.zeros(n, dtype=bool)
    for i, v in enumerate(cols):
        lb, ub = v.bounds
        lo[i] = -math.inf if lb is None else float(lb)
        hi[i] = math.inf if ub is None else float(ub)
        integer[i] = v.is_integer() or v.is_binary()
    rhs = np.asarray(info.rhs, dtype=float)
    sense = np.array([r.bound_type for r in info.rows], dtype=int)
    row_lo = np.where(sense == 1, -math.inf, rhs)
    row_hi = np.where(sense == -1, math.inf, rhs)
    a = info.A.tocsc() if n else info.A
    cost = np.asarray(info.c.toarray()[0], dtype=float) if info.c.shape[0] else np.zeros(n)
    offset = float(np.asarray(info.c_offset).ravel()[0]) if np.size(info.c_offset) else 0.0
    return LinearForm(cols, lo, hi, integer, a, row_lo, row_hi, cost, offset, list(info.rows))


def recorded_form(m: pyo.ConcreteModel) -> LinearForm | None:
    """The standard form of a model made by :func:`neuscale_opt.alloc.model.build_model` from the
    rows its builders recorded while making its constraints (``model.ROWS_ATTR``): the same arrays as
    :func:`linear_form` (same column and row order, zeros and unused columns dropped; a test checks
    them equal), without walking every constraint's expression again.

    ``None`` - compile the model instead - unless the model is still exactly as built: its one
    active objective is the recorded ``total_objective``, its active constraints are exactly the
    recorded families (no other family, block or deactivated row), every recorded row has a
    nonzero and no variable is fixed. Variable bounds and integrality are read from the variables
    at solve time (so a relaxed copy, ``core.relax_integer_vars``, is read as relaxed)."""
    import numpy as np
    from scipy.sparse import csr_matrix

    from neuscale_opt.alloc.model import ROWS_ATTR

    rec = m.__dict__.get(ROWS_ATTR)
    if not rec or rec["objective"] is None:
        return None
    objective, obj_terms = rec["objective"]
    active = list(m.component_data_objects(pyo.Objective, active=True, descend_into=True))
    if len(active) != 1 or active[0] is not objective:
        return None
    families = rec["rows"]
    comps = list(m.component_objects(pyo.Constraint, active=True, descend_into=True))
    if [c.local_name for c in comps] != list(families) or any(c.parent_block() is not m for c in comps):
        return None
    for comp in comps:
        rows = families[comp.local_name]
        if len(comp) != len(rows) or not all(c.active for c in comp.values()):
            return None
    order: dict[int, int] = {}
    columns: list = []

    def col(v) -> int:
        # as Pyomo's compiler numbers them: at the first variable of an indexed variable met, all
        # of that variable's members in index order
        j = order.get(id(v))
        if j is None:
            for member in v.parent_component().values():
                order[id(member)] = len(columns)
                columns.append(member)
            j = order[id(v)]
        return j

    c_idx = [col(v) for v, _c in obj_terms]
    c_val = [float(c) for _v, c in obj_terms]
    rows = [r for comp in comps for r in families[comp.local_name]]
    if any(len(variables) != len(coefs) for variables, coefs, _lo, _hi in rows):
        raise ValueError("a recorded row has not as many coefficients as variables")
    flat = [v for variables, _c, _lo, _hi in rows for v in variables]  # all rows' terms, in row order
    get = order.get
    js = [get(id(v)) for v in flat]
    if None in js:  # variables not met yet: number each whole indexed variable at its first term
        js = [col(v) if j is None else j for v, j in zip(flat, js, strict=True)]
    data = np.asarray([c for _v, coefs, _lo, _hi in rows for c in coefs], dtype=float)
    indices = np.asarray(js, dtype=np.int32)
    row_of = np.repeat(np.arange(len(rows)), [len(variables) for variables, _c, _lo, _hi in rows])
    nonzero = data != 0
    if not nonzero.all():  # zeros dropped
        data, indices, row_of = data[nonzero], indices[nonzero], row_of[nonzero]
    counts = np.bincount(row_of, minlength=len(rows))
    if (counts == 0).any():
        return None
    indptr = np.concatenate(([0], np.cumsum(counts)))
    lo = [-math.inf if r[2] is None else r[2] for r in rows]
    hi = [math.inf if r[3] is None else r[3] for r in rows]
    if any(v.fixed for v in columns):
        return None
    n = len(columns)
    a = csr_matrix((data, indices, indptr), shape=(len(lo), n))
    a = a.tocsc()
    a.sum_duplicates()
    a.eliminate_zeros()
    cost = np.zeros(n)
    np.add.at(cost, np.asarray(c_idx, dtype=np.int64), np.asarray(c_val, dtype=float))
    used = (np.diff(a.indptr) > 0) | (cost != 0)
    if not used.all():
        keep = np.flatnonzero(used)
        a = a[:, keep]
        cost = cost[keep]
        columns = [columns[j] for j in keep]
        n = len(columns)
    bounds = [v.bounds for v in columns]
    col_lo = np.array([-math.inf if b[0] is None else b[0] for b in bounds], dtype=float)
    col_hi = np.array([math.inf if b[1] is None else b[1] for b in bounds], dtype=float)
    kinds: dict[int, bool] = {}  # integrality is the domain's: asked once per domain object
    integer = np.zeros(n, dtype=bool)
    for i, v in enumerate(columns):
        dom = v.domain
        k = kinds.get(id(dom))
        if k is None:
            k = kinds[id(dom)] = bool(v.is_integer() or v.is_binary())
        integer[i] = k
    return LinearForm(
        columns, col_lo, col_hi, integer, a, np.asarray(lo, dtype=float), np.asarray(hi, dtype=float), cost, 0.0
    )


def load_values(m: pyo.ConcreteModel, form: LinearForm, x) -> None:
    """Values of the solved columns into the Pyomo variables; variables outside the form take their
    fixed value, or the bound nearest 0 (they appear in no row nor the objective)."""
    solved = {id(v) for v in form.columns}
    for v, val in zip(form.columns, x, strict=True):
        v.set_value(float(val), skip_validation=True)
    for v in m.component_data_objects(pyo.Var, descend_into=True):
        if id(v) in solved or v.fixed:
            continue
        lb, ub = v.bounds
        val = 0.0
        if lb is not None and lb > 0:
            val = float(lb)
        if ub is not None and ub < 0:
            val = float(ub)
        v.set_value(val, skip_validation=True)


#: Guards the first HiGHS instance of the process, whose banner is sent to /dev/null by moving
#: file descriptor 1: two threads doing that at once could leave stdout pointing at /dev/null.
_FIRST_HIGHS = threading.Lock()
_BANNER_SHOWN: list[bool] = []


def _new_highs():
    """A HiGHS instance with its console output off. HiGHS prints its banner once per process, at
    the first instance: that one is made with file descriptor 1 on /dev/null (under a lock; the
    plan and its baselines may solve in two threads), later ones as they are."""
    import highspy

    if not _BANNER_SHOWN:
        with _FIRST_HIGHS:
            if not _BANNER_SHOWN:
                h = _first_highs(highspy)
                _BANNER_SHOWN.append(True)
                return h
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    return h


def _first_highs(highspy):
    """The process's first HiGHS instance, made with file descriptor 1 on /dev/null."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # pragma: no cover - no stdout descriptor at all
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        return h
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    try:
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
    return h


def _solve_highs(m: pyo.ConcreteModel, options: PlanOptions) -> SolveResult:
    _highs_threads(int(options.threads))
    try:
        form = recorded_form(m) or linear_form(m)
    except TriviallyInfeasible:
        return SolveResult("infeasible", math.nan, math.nan, math.inf, 0.0, "highs")
    if len(form.columns) == 0:  # every variable fixed or unused: the objective is a constant
        load_values(m, form, [])
        obj = float(pyo.value(m.total_objective.expr)) if hasattr(m, "total_objective") else form.offset
        return SolveResult("optimal", obj, obj, 0.0, 0.0, "highs", _values(m))
    res, x = solve_form(form, options)
    if x is None:
        return res
    load_values(m, form, x)
    return dataclasses.replace(res, values=_values(m))


def solve_form(form: LinearForm, options: PlanOptions) -> tuple[SolveResult, Any]:
    """Solve a compiled model (:func:`linear_form`, at least one column) with HiGHS under the
    options' limits; the result (without ``values``) and the column values (None without a
    plan). A fresh HiGHS instance per call, so that a form re-solved with other numbers (a rolling
    window, :mod:`neuscale_opt.horizon.persistent`) is solved exactly as a fresh compile of it.

    A HiGHS error status (not a result: e.g. its presolve failing on a badly scaled model) is never
    read as infeasible: the model is solved once more without presolve, and raises
    :class:`~neuscale_opt.errors.SolverError` if that fails too."""
    start = time.perf_counter()
    _highs_threads(int(options.threads))
    h = _run_highs(form, options, presolve=True)
    if h.getModelStatus() in _highs_errors():
        # HiGHS's presolve can fail on a badly scaled model that is feasible (costs of 1e3 to 1e10
        # with the unserved penalty): solve it once more without presolve rather than read the
        # error as infeasible
        h = _run_highs(form, options, presolve=False)
        if h.getModelStatus() in _highs_errors():
            raise SolverError(
                f"HiGHS failed on a model of {len(form.columns)} columns and {len(form.row_lo)} rows "
                f"({h.modelStatusToString(h.getModelStatus())}, with and without presolve)"
            )
    return _finish(h, form, start)


def _run_highs(form: LinearForm, options: PlanOptions, presolve: bool):
    """A fresh HiGHS instance with ``form`` and the options' limits, run."""
    import highspy
    import numpy as np

    n = len(form.columns)
    h = _new_highs()
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = len(form.row_lo)
    lp.col_cost_ = form.cost
    lp.col_lower_ = form.col_lo
    lp.col_upper_ = form.col_hi
    lp.row_lower_ = form.row_lo
    lp.row_upper_ = form.row_hi
    lp.offset_ = form.offset
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = form.a.indptr.astype(np.int32)
    lp.a_matrix_.index_ = form.a.indices.astype(np.int32)
    lp.a_matrix_.value_ = form.a.data.astype(float)
    if form.integer.any():
        kinds = highspy.HighsVarType.kInteger, highspy.HighsVarType.kContinuous
        lp.integrality_ = [kinds[0] if i else kinds[1] for i in form.integer]
    h.passModel(lp)
    limit = options.solve_time_limit()
    if limit is not None:
        h.setOptionValue("time_limit", float(limit))
    if options.node_limit is not None:
        h.setOptionValue("mip_max_nodes", int(options.node_limit))
    for key, val in (
        ("threads", int(options.threads)),
        ("random_seed", int(options.seed)),
        ("mip_rel_gap", float(options.mip_gap)),
        ("mip_abs_gap", 1e-9),
        ("presolve", "on" if presolve else "off"),
    ):
        h.setOptionValue(key, val)
    if options.restarts is not None:
        h.setOptionValue("mip_allow_restart", bool(options.restarts))
    if options.solver_log:
        from pyomo.common.log import LogStream
        from pyomo.common.tee import capture_output

        h.setOptionValue("output_flag", True)
        h.setOptionValue("log_to_console", True)
        with _log_to_stderr() as logger, capture_output(output=LogStream(logging.INFO, logger), capture_fd=True):
            h.run()
    else:
        h.run()
    return h


def _highs_errors() -> tuple:
    """HiGHS model statuses that mean the solver failed, not that the model has no solution."""
    import highspy

    ms = highspy.HighsModelStatus
    return (ms.kNotset, ms.kLoadError, ms.kModelError, ms.kPresolveError, ms.kSolveError, ms.kPostsolveError)


def _finish(h, form: LinearForm, start: float) -> tuple[SolveResult, Any]:
    """The result of a HiGHS run (:func:`solve_form`)."""
    import highspy
    import numpy as np

    st = h.getModelStatus()
    info = h.getInfo()
    sol = h.getSolution()
    ms = highspy.HighsModelStatus
    if st in (ms.kInfeasible, ms.kUnboundedOrInfeasible):
        return SolveResult("infeasible", math.nan, math.nan, math.inf, time.perf_counter() - start, "highs"), None
    optimal = st == ms.kOptimal
    # the node limit ends a search with kSolutionLimit (HiGHS >= 1.7; kIterationLimit before): work
    # limits, the same on any machine; kTimeLimit is the clock
    work = st in (ms.kSolutionLimit, ms.kIterationLimit, ms.kObjectiveBound)
    stopped_by = "time_limit" if st == ms.kTimeLimit else ("work_limit" if work else None)
    has_incumbent = optimal or (stopped_by is not None and sol.value_valid)
    mip = bool(form.integer.any()) and info.mip_node_count != -1
    nodes = max(int(info.mip_node_count), 0) if mip else 0
    obj = float(info.objective_function_value) if has_incumbent else math.nan
    if mip:
        bound = float(info.mip_dual_bound)
    else:
        bound = obj if has_incumbent else math.nan
    bound = bound if math.isfinite(bound) else -math.inf
    if not (has_incumbent and math.isfinite(obj)):
        status = "no_incumbent" if stopped_by is not None else "infeasible"
        res = SolveResult(status, math.nan, bound, math.inf, 0.0, "highs", nodes=nodes, stopped_by=stopped_by)
        return dataclasses.replace(res, seconds=time.perf_counter() - start), None
    if optimal:
        status, stopped_by = "optimal", None
        bound = min(bound, obj) if math.isfinite(bound) else obj
    else:
        status = stopped_by
    gap = relative_gap(obj, bound)
    res = SolveResult(status, obj, bound, gap, time.perf_counter() - start, "highs", nodes=nodes, stopped_by=stopped_by)
    return res, np.asarray(sol.col_value, dtype=float)


def _linear_rows(m: pyo.ConcreteModel):
    """Variables, rows (lo, [(var idx, coef)], hi) and objective of a linear Pyomo model."""
    var_list = list(m.component_data_objects(pyo.Var, descend_into=True, sort=True))
    pos = {id(v): i for i, v in enumerate(var_list)}
    rows = []
    for con in m.component_data_objects(pyo.Constraint, active=True, descend_into=True, sort=True):
        repn = generate_standard_repn(con.body, compute_values=True, quadratic=False)
        if not repn.is_linear():
            raise ValueError(f"constraint {con.name} is not linear")
        const = float(repn.constant or 0.0)
        lo = None if con.lower is None else float(pyo.value(con.lower)) - const
        hi = None if con.upper is None else float(pyo.value(con.upper)) - const
        terms = [(pos[id(v)], float(c)) for v, c in zip(repn.linear_vars, repn.linear_coefs, strict=True)]
        rows.append((lo, terms, hi))
    obj = next(m.component_data_objects(pyo.Objective, active=True, descend_into=False))
    repn = generate_standard_repn(obj.expr, compute_values=True, quadratic=False)
    obj_terms = [(pos[id(v)], float(c)) for v, c in zip(repn.linear_vars, repn.linear_coefs, strict=True)]
    return var_list, rows, obj_terms, float(repn.constant or 0.0)


def _solve_ortools(m: pyo.ConcreteModel, options: PlanOptions) -> SolveResult:
    from ortools.linear_solver import pywraplp

    var_list, rows, obj_terms, obj_const = _linear_rows(m)
    solver = pywraplp.Solver.CreateSolver("SCIP")
    if solver is None:  # pragma: no cover - SCIP ships with the ortools wheel
        raise RuntimeError("OR-Tools was built without SCIP")
    inf = solver.infinity()
    xs = []
    for i, v in enumerate(var_list):
        lb = -inf if v.lb is None else float(v.lb)
        ub = inf if v.ub is None else float(v.ub)
        if v.is_integer():
            xs.append(solver.IntVar(lb, ub, f"x{i}"))
        else:
            xs.append(solver.NumVar(lb, ub, f"x{i}"))
    for lo, terms, hi in rows:
        ct = solver.Constraint(-inf if lo is None else lo, inf if hi is None else hi)
        for j, c in terms:
            ct.SetCoefficient(xs[j], ct.GetCoefficient(xs[j]) + c)
    objective = solver.Objective()
    for j, c in obj_terms:
        objective.SetCoefficient(xs[j], objective.GetCoefficient(xs[j]) + c)
    objective.SetOffset(obj_const)
    objective.SetMinimization()
    limit = options.solve_time_limit()
    if limit is not None:
        solver.SetTimeLimit(int(math.ceil(limit * 1000)))
    # SCIP's own parameters: the work limit (nodes, restarts included, as ``solver.nodes()`` counts
    # them) and the seed
    scip = f"randomization/randomseedshift = {int(options.seed)}\n"
    if options.node_limit is not None:
        scip += f"limits/totalnodes = {int(options.node_limit)}\n"
    if not solver.SetSolverSpecificParametersAsString(scip):  # pragma: no cover - both are SCIP parameters
        raise RuntimeError(f"SCIP refused the parameters {scip!r}")
    if options.solver_log:
        solver.EnableOutput()
    solver.SetNumThreads(int(options.threads))
    params = pywraplp.MPSolverParameters()
    params.SetDoubleParam(pywraplp.MPSolverParameters.RELATIVE_MIP_GAP, float(options.mip_gap))
    if options.solver_log:
        with _stdout_to_stderr():
            code = solver.Solve(params)
    else:
        code = solver.Solve(params)
    nodes = int(solver.nodes()) if any(v.is_integer() for v in var_list) else 0
    # MPSolver reports a stopped search as FEASIBLE (or NOT_SOLVED without an incumbent) whichever
    # limit stopped it: the node count tells the work limit from the clock
    reached = options.node_limit is not None and nodes >= int(options.node_limit)
    stopped_by = "work_limit" if reached else "time_limit"
    if code == pywraplp.Solver.INFEASIBLE:
        return SolveResult("infeasible", math.nan, math.nan, math.inf, 0.0, "ortools", nodes=nodes)
    if code not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return SolveResult(
            "no_incumbent", math.nan, -math.inf, math.inf, 0.0, "ortools", nodes=nodes, stopped_by=stopped_by
        )
    obj = float(objective.Value())
    bound = float(objective.BestBound())
    if code == pywraplp.Solver.OPTIMAL:
        status, stopped_by = "optimal", None
        bound = min(bound, obj)
    else:
        status = stopped_by
    for v, x in zip(var_list, xs, strict=True):
        v.set_value(float(x.solution_value()), skip_validation=True)
    gap = relative_gap(obj, bound)
    return SolveResult(status, obj, bound, gap, 0.0, "ortools", _values(m), nodes=nodes, stopped_by=stopped_by)
