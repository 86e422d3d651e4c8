"""Run a sweep: one task per scenario, on a process pool, a Dask cluster or in-process.

Each task builds its scenario's coefficients and model, solves them (HiGHS, one thread, the spec's
time limit inside the task) and returns one row, never an exception: an error becomes the row's
``status = "error"`` with its message. Rows are written as they arrive, one Parquet file per
scenario under ``DIR/rows/`` (written whole, then renamed, so a killed sweep leaves only complete
rows) and one line of ``DIR/rows.csv``; a rerun skips the scenario ids already there. At the end
``DIR/scenarios.parquet`` and ``DIR/scenarios.csv`` hold every row sorted by scenario id, so the
same spec gives the same rows whatever the executor and the worker count (the timing columns
``TIMING_COLUMNS`` aside).

Row columns: ``scenario_id``, ``varied`` (the parameter a one-at-a-time scenario moves),
``p:<parameter>`` (its value, a factor when relative), ``status``/``objective``/``bound``/``gap`` of
the MILP, ``feasible`` (the independent evaluator's verdict), the evaluated totals ``energy_j``,
``cost_usd``, ``carbon_kg``, ``unserved_rps``, ``tokens_per_j``, ``chips:<generation>`` (peak chips
held), ``<method>_status``/``<method>_objective`` and ``ratio_<method>`` (its objective over the
MILP's, evaluated) per baseline, ``replay_*`` (when the spec asks for the replay),
``nominal_objective`` and ``regret`` (the nominal plan's vPods held in this scenario, demand
re-routed over them, against this scenario's optimum, both in the planner's objective as the MILP
minimises it (:func:`held_objective`); ``inf`` when they cannot carry it), ``vpods``
(the MILP's vPods per epoch and vPod type, JSON), ``error`` and the timings ``solve_seconds`` (HiGHS
time of the task: its MILP and the regret solve) and ``task_seconds`` (the whole task).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pandas as pd

from neuscale_opt.alloc.solution import STOPPED_BY
from neuscale_opt.errors import InputError, TimeLimitError
from neuscale_opt.instance import Instance, load_instance
from neuscale_opt.sweep.apply import apply_values, base_value
from neuscale_opt.sweep.designs import NOMINAL, Scenario, scenarios
from neuscale_opt.sweep.spec import SweepSpec

TIMING_COLUMNS: tuple[str, ...] = ("solve_seconds", "task_seconds")
SCHEDULERS: tuple[str, ...] = ("local", "processes", "dask")
REPLAY_KEYS: tuple[str, ...] = ("energy_j", "cost_usd", "carbon_kg", "slo_attainment", "unserved")


@dataclass(frozen=True)
class Task:
    """Everything one scenario's worker needs (picklable: a validated instance and plain data)."""

    scenario_id: str
    varied: str
    values: dict[str, float]
    instance: Instance
    methods: tuple[str, ...]
    time_limit_s: float
    mip_gap: float
    replay: bool
    nominal_vpods: dict[int, dict[str, int]] | None = None


@dataclass(frozen=True)
class Prepared:
    """A spec turned into tasks: the base instance after ``[set]``, the scenarios and their tasks."""

    spec: SweepSpec
    base: Instance
    scenarios: tuple[Scenario, ...]
    tasks: tuple[Task, ...]
    columns: tuple[str, ...]


@dataclass
class RunStats:
    computed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _where(spec: SweepSpec) -> str:
    return str(spec.path) if spec.path is not None else "sweep"


def scenario_instance(spec: SweepSpec, base: Instance, sc: Scenario) -> Instance:
    """The instance of one scenario: each parameter's value set at each of its paths (a relative
    value multiplies the path's value in ``base``)."""
    assignments: dict[str, Any] = {}
    for p in spec.parameter:
        v = sc.values[p.label]
        for path in p.targets:
            x = v * float(base_value(base, path)) if p.scale == "relative" else v
            assignments[path] = int(round(x)) if p.integer else float(x)
    return apply_values(base, assignments, where=f"{_where(spec)}: scenario {sc.scenario_id}")


#: The base instance of each sweep this process has loaded (a worker loads it once, then builds
#: every scenario it runs from it), keyed by :func:`_spec_key`.
_BASES: dict[str, Instance] = {}


def _spec_key(spec: SweepSpec) -> str:
    return json.dumps([str(spec.path), spec.model_dump(mode="json")], sort_keys=True, default=str)


def base_instance(spec: SweepSpec) -> Instance:
    """The sweep's base instance after ``[set]``, loaded once per process."""
    key = _spec_key(spec)
    if key not in _BASES:
        base = load_instance(spec.base_path())
        if spec.set:
            base = apply_values(base, dict(spec.set), where=f"{_where(spec)}: set")
        _BASES[key] = base
    return _BASES[key]


def prepare(spec: SweepSpec) -> Prepared:
    """Validate the whole sweep up front: the base instance, ``[set]`` and every scenario's
    instance (a bad value is an InputError naming the scenario before anything runs)."""
    base = base_instance(spec)
    nominal: dict[str, float] = {}
    for p in spec.parameter:
        if p.nominal is not None:
            nominal[p.label] = p.nominal
        elif p.scale == "relative":
            nominal[p.label] = 1.0
        else:
            v = base_value(base, p.targets[0])
            if not isinstance(v, int | float) or isinstance(v, bool):
                raise InputError(f"{p.targets[0]} has no number in the base instance; give nominal", where=p.label)
            nominal[p.label] = float(v)
    scs = tuple(scenarios(spec, nominal))
    tasks = tuple(make_task(spec, base, sc) for sc in scs)
    return Prepared(spec, base, scs, tasks, tuple(row_columns(spec, base)))


def make_task(spec: SweepSpec, base: Instance, sc: Scenario, nominal_vpods: dict | None = None) -> Task:
    return Task(
        sc.scenario_id,
        sc.varied,
        dict(sc.values),
        scenario_instance(spec, base, sc),
        tuple(spec.methods),
        float(spec.time_limit_s),
        float(spec.mip_gap),
        bool(spec.replay),
        nominal_vpods,
    )


def row_columns(spec: SweepSpec, base: Instance) -> list[str]:
    cols = ["scenario_id", "varied", *(f"p:{p.label}" for p in spec.parameter)]
    cols += ["status", "objective", "bound", "gap", "feasible", "energy_j", "cost_usd", "carbon_kg"]
    cols += ["unserved_rps", "tokens_per_j", *(f"chips:{c}" for c in base.chip_names)]
    for m in spec.methods:
        if m != "milp":
            cols += [f"{m}_status", f"{m}_objective", f"ratio_{m}"]
    if spec.replay:
        cols += [f"replay_{k}" for k in REPLAY_KEYS]
    cols += ["nominal_objective", "regret", "vpods", "error", *TIMING_COLUMNS]
    return cols


# --------------------------------------------------------------------------------------------
# One scenario


def vpods_of(sol: Any) -> dict[int, dict[str, int]]:
    """{epoch: {vPod type: vPods held}} of a plan, the first-stage decision a plan is held by in
    another scenario (the split over its groups, which classes share which vPods, is second stage:
    ``formulations/robust.md``)."""
    out: dict[int, dict[str, int]] = {}
    held = sol.allocations[["epoch", "vpod_group", "vpod_type", "n_vpods"]].drop_duplicates(["epoch", "vpod_group"])
    for r in held.itertuples():
        if int(r.n_vpods) > 0:
            per = out.setdefault(int(r.epoch), {})
            per[str(r.vpod_type)] = per.get(str(r.vpod_type), 0) + int(r.n_vpods)
    return out


def vpods_json(v: dict[int, dict[str, int]]) -> str:
    return json.dumps({str(e): dict(sorted(g.items())) for e, g in sorted(v.items())}, sort_keys=True)


def vpods_from_json(text: str) -> dict[int, dict[str, int]]:
    return {int(e): {str(g): int(n) for g, n in gs.items()} for e, gs in json.loads(text).items()}


def _options(task: Task):
    from neuscale_opt.alloc.options import PlanOptions

    return PlanOptions.from_instance(task.instance, time_limit_s=task.time_limit_s, mip_gap=task.mip_gap, threads=1)


def held_objective(coeffs: Any, options: Any, vpods: dict[int, dict[str, int]]) -> tuple[float, Any]:
    """Objective of holding ``vpods`` ({epoch: {vPod type: vPods}}) under ``coeffs``: the held vPods
    split over the scenario's groups and the demand routed over them at least objective, by the
    scenario-based model with one scenario and its first stage fixed
    (:func:`neuscale_opt.sweep.robust.robust_milp`); the plan it finds is rebuilt with those
    groups held (``solve_milp(..., fixed_vpods=...)``), which checks it with the independent
    evaluator. Returns (objective, that plan or ``None``), ``inf`` when the vPods cannot carry the
    demand or a held type has no usable configuration.

    The objective is the planner's (``formulations/allocation.md``, "Linear objective"), the one
    every scenario's MILP and the scenario-based MILP minimise: a scenario optimum held in its own
    scenario gives back its objective, regrets are >= 0, and the robust MILP's expected objective is
    the mean of its plan's held objectives. The evaluator's accounting of the held plan (weight
    streaming at each group's own load, E8) is in the plan's ``totals``."""
    from neuscale_opt.alloc.plan import solve_milp
    from neuscale_opt.sweep.robust import robust_milp

    split = robust_milp([coeffs], options, fixed=vpods)
    if split.status not in ("optimal", *STOPPED_BY):
        return math.inf, None
    sol = solve_milp(coeffs, options.replace(prune_dominated=False), method="fixed", fixed_vpods=split.groups)
    sol = replace(sol, solve_seconds=float(sol.solve_seconds) + float(split.seconds))
    if not sol.has_plan:
        return math.inf, sol
    return float(sol.objective_value), sol


def run_scenario(task: Task) -> dict[str, Any]:
    """One scenario's row (never raises: an error is recorded in the row)."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {"scenario_id": task.scenario_id, "varied": task.varied}
    row.update({f"p:{k}": float(v) for k, v in task.values.items()})
    try:
        row.update(_solve_scenario(task))
    except TimeLimitError as exc:
        row.update(status="no_incumbent", error=str(exc))
    except Exception as exc:  # a task returns a row, never an exception: the error is the row's status
        row.update(status="error", error=f"{type(exc).__name__}: {exc}")
    row["task_seconds"] = time.perf_counter() - t0
    return row


def _solve_scenario(task: Task) -> dict[str, Any]:
    from neuscale_opt.alloc.evaluate import evaluate
    from neuscale_opt.alloc.pareto import TOTAL_OF
    from neuscale_opt.alloc.plan import plan
    from neuscale_opt.candidates import build_coefficients

    inst = task.instance
    coeffs = build_coefficients(inst)
    opts = _options(task)
    sol = plan(coeffs, opts, "milp")
    out: dict[str, Any] = {"status": sol.status, "solve_seconds": float(sol.solve_seconds), "error": ""}
    if not sol.has_plan:
        out["error"] = str(sol.diagnosis or "")
        return out
    # solve_milp has checked the plan with the independent evaluator (a plan it finds infeasible has
    # no plan status) and carries its totals
    t = sol.totals
    obj = float(t[TOTAL_OF[sol.objective]]) + float(t["penalty"])  # the evaluator's objective_value
    out.update(
        objective=float(sol.objective_value),
        bound=float(sol.bound),
        gap=float(sol.gap),
        feasible=True,
        energy_j=float(t["energy_j"]),
        cost_usd=float(t["cost_usd"]),
        carbon_kg=float(t["carbon_kg"]),
        unserved_rps=float(t["unserved_rps"]),
        tokens_per_j=float(t["tokens_per_j"]),
        vpods=vpods_json(vpods_of(sol)),
    )
    for c in inst.chip_names:
        out[f"chips:{c}"] = float(t["chips_by_version"].get(c, 0))
    for m in task.methods:
        if m == "milp":
            continue
        b = plan(coeffs, opts, m)
        out[f"{m}_status"] = b.status
        if b.has_plan:
            bev = evaluate(b, coeffs.with_unlimited_inventory() if m == "unlimited" else coeffs)
            out[f"{m}_objective"] = float(bev.objective_value)
            out[f"ratio_{m}"] = float(bev.objective_value) / obj
    if task.replay and inst.workload.trace is not None:
        from neuscale_opt.replay import replay

        rt = replay(sol.to_dict(timing=False), inst, coeffs=coeffs).totals
        out.update({f"replay_{k}": float(rt[k]) for k in REPLAY_KEYS})
    if task.scenario_id == NOMINAL:
        out["nominal_objective"] = float(sol.objective_value)
        out["regret"] = 0.0
    elif task.nominal_vpods is not None:
        nom, held = held_objective(coeffs, opts, task.nominal_vpods)
        out["solve_seconds"] += float(held.solve_seconds) if held is not None else 0.0
        out["nominal_objective"] = nom
        out["regret"] = nom - float(sol.objective_value)
    return out


def cross_evaluate(task: Task, plans: tuple[str, ...]) -> dict[str, Any]:
    """The objective of holding each candidate plan's vPods (JSON) in this task's scenario."""
    from neuscale_opt.candidates import build_coefficients

    out: dict[str, Any] = {"scenario_id": task.scenario_id}
    try:
        coeffs = build_coefficients(task.instance)
        opts = _options(task)
        out["objectives"] = [held_objective(coeffs, opts, vpods_from_json(p))[0] for p in plans]
    except Exception as exc:  # recorded like run_scenario's errors
        out["objectives"] = [math.nan] * len(plans)
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


# --------------------------------------------------------------------------------------------
# Executors

#: Chunks per worker the scenarios are cut into (load balance), and the largest chunk (a killed
#: sweep loses at most the chunks in flight; rows stream to disk as each chunk finishes).
CHUNKS_PER_WORKER = 8
MAX_CHUNK = 4


@dataclass(frozen=True)
class Job:
    """What travels to a worker for one scenario: its id, its values and the nominal plan to hold.
    The worker builds the scenario's instance from the base instance it loaded once
    (:func:`base_instance`), so a job pickles in bytes, not the whole instance and its trace."""

    scenario_id: str
    varied: str
    values: dict[str, float]
    nominal_vpods: dict[int, dict[str, int]] | None = None


def job_of(task: Task, nominal_vpods: dict[int, dict[str, int]] | None = None) -> Job:
    return Job(task.scenario_id, task.varied, dict(task.values), nominal_vpods)


def task_of(spec: SweepSpec, base: Instance | None, job: Job) -> Task:
    """The job's task, its instance built from ``base`` (``None``: this process's copy)."""
    sc = Scenario(job.scenario_id, dict(job.values), job.varied)
    return make_task(spec, base if base is not None else base_instance(spec), sc, job.nominal_vpods)


def init_worker(spec: SweepSpec) -> None:
    """Worker initializer: load the base instance (and the catalogs it reads) and import the
    planners once, before the first job."""
    base_instance(spec)
    import neuscale_opt.alloc.plan  # noqa: F401
    import neuscale_opt.candidates  # noqa: F401


def scenario_rows(spec: SweepSpec, base: Instance | None, jobs: list[Job]) -> list[dict[str, Any]]:
    """One chunk of scenarios: a row each (:func:`run_scenario`)."""
    return [run_scenario(task_of(spec, base, j)) for j in jobs]


def cross_rows(spec: SweepSpec, base: Instance | None, jobs: list[Job], plans: tuple[str, ...]) -> list[dict[str, Any]]:
    """One chunk of scenarios: each candidate plan held in each (:func:`cross_evaluate`)."""
    return [cross_evaluate(task_of(spec, base, j), plans) for j in jobs]


def chunk_size(n: int, workers: int) -> int:
    return max(1, min(MAX_CHUNK, n // max(1, workers * CHUNKS_PER_WORKER)))


def execute(
    prepared: Prepared,
    jobs: Iterable[Job],
    fn: Callable[..., list[Any]],
    *args: Any,
    workers: int = 1,
    scheduler: str = "processes",
    on_result: Callable[[Any], None] | None = None,
) -> list[Any]:
    """Run ``fn(spec, base, chunk, *args)`` over chunks of ``jobs`` (:func:`chunk_size`) and hand
    every result to ``on_result`` as its chunk finishes. ``scheduler``: ``local`` (this process, in
    order), ``processes`` (a spawned process pool of ``workers``, each loading the base instance
    once in :func:`init_worker`), ``dask`` (a ``dask.distributed.LocalCluster`` of ``workers``
    single-threaded processes) or the address of a running Dask scheduler (the base instance is
    scattered to every worker once, so remote workers need no instance files)."""
    spec = prepared.spec
    jobs = list(jobs)
    results: list[Any] = []

    def take(rs: list[Any]) -> None:
        for r in rs:
            results.append(r)
            if on_result is not None:
                on_result(r)

    if not jobs:
        return results
    size = 1 if scheduler == "local" else chunk_size(len(jobs), workers)
    chunks = [jobs[i : i + size] for i in range(0, len(jobs), size)]
    if scheduler == "local":
        for c in chunks:
            take(fn(spec, prepared.base, c, *args))
    elif scheduler == "processes":
        pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=get_context("spawn"), initializer=init_worker, initargs=(spec,)
        )
        try:
            futures = [pool.submit(fn, spec, None, c, *args) for c in chunks]
            for fut in as_completed(futures):
                take(fut.result())
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    else:
        from distributed import Client, LocalCluster
        from distributed import as_completed as dask_completed

        if scheduler == "dask":
            cluster = LocalCluster(
                n_workers=workers, processes=True, threads_per_worker=1, dashboard_address=None, silence_logs=40
            )
            client = Client(cluster)
        else:
            cluster = None
            client = Client(scheduler, timeout=30)
        try:
            [base] = client.scatter([prepared.base], broadcast=True)
            futures = [client.submit(fn, spec, base, c, *args, pure=False) for c in chunks]
            for fut in dask_completed(futures):
                take(fut.result())
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    return results


# --------------------------------------------------------------------------------------------
# The row store


class RowStore:
    """Finished rows under ``out``: ``rows/<id>.parquet`` (the record) and ``rows.csv`` (a stream)."""

    def __init__(self, out: Path, columns: tuple[str, ...]) -> None:
        self.out = out
        self.columns = columns
        self.parts = out / "rows"
        self.parts.mkdir(parents=True, exist_ok=True)
        done = self.frame()
        done.to_csv(out / "rows.csv", index=False)  # rebuilt from the record: no half line survives

    def finished(self) -> set[str]:
        return {p.stem for p in self.parts.glob("*.parquet")}

    def frame(self) -> pd.DataFrame:
        files = sorted(self.parts.glob("*.parquet"))
        if not files:
            return pd.DataFrame(columns=list(self.columns))
        df = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
        return df.sort_values("scenario_id", kind="stable").reset_index(drop=True)[list(self.columns)]

    def add(self, row: dict[str, Any]) -> None:
        df = _row_frame(row, self.columns)
        tmp = self.parts / f".{row['scenario_id']}.parquet.tmp"
        df.to_parquet(tmp, index=False)
        os.replace(tmp, self.parts / f"{row['scenario_id']}.parquet")
        with (self.out / "rows.csv").open("a", encoding="utf-8") as fh:
            df.to_csv(fh, index=False, header=False)


_TEXT = ("scenario_id", "varied", "status", "vpods", "error")


def _row_frame(row: dict[str, Any], columns: tuple[str, ...]) -> pd.DataFrame:
    """One row with a fixed schema: text columns as strings, ``feasible`` as bool, the rest float."""
    data: dict[str, list[Any]] = {}
    for c in columns:
        v = row.get(c)
        if c in _TEXT or c.endswith("_status"):
            data[c] = ["" if v is None else str(v)]
        elif c == "feasible":
            data[c] = [bool(v) if v is not None else False]
        else:
            data[c] = [math.nan if v is None else float(v)]
    return pd.DataFrame(data)


def _check_out(out: Path, prepared: Prepared) -> None:
    """A rerun into ``out`` must be of the same sweep (same spec, same scenarios)."""
    key = {
        "spec": prepared.spec.model_dump(mode="json"),
        "scenarios": [[s.scenario_id, s.values] for s in prepared.scenarios],
    }
    f = out / "sweep.json"
    if f.exists():
        try:
            old = json.loads(f.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            old = None
        if old != json.loads(json.dumps(key)):
            raise InputError("holds the rows of a different sweep; choose another --out", where=str(out))
    else:
        out.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(key, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def run_sweep(
    prepared: Prepared,
    out: str | Path,
    workers: int = 1,
    scheduler: str = "processes",
    progress: Callable[[int], Any] | None = None,
    stop_after: int | None = None,
) -> tuple[pd.DataFrame, RunStats]:
    """Run the scenarios not yet in ``out`` and return every row (sorted by id) and what ran.

    The nominal scenario runs first, here: the other tasks hold its plan to measure regret.
    ``stop_after`` interrupts the run (KeyboardInterrupt) once that many rows were written in
    this call, as a kill would (for tests of resuming)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a directory", where=str(out))
    _check_out(out, prepared)
    store = RowStore(out, prepared.columns)
    stats = RunStats()
    done = store.finished()

    def record(row: dict[str, Any]) -> None:
        store.add(row)
        stats.computed.append(str(row["scenario_id"]))
        if progress is not None:
            progress(1)
        if stop_after is not None and len(stats.computed) >= stop_after:
            raise KeyboardInterrupt(f"stopped after {stop_after} rows")

    by_id = {t.scenario_id: t for t in prepared.tasks}
    if NOMINAL not in done:
        record(run_scenario(by_id[NOMINAL]))
    else:
        stats.skipped.append(NOMINAL)
        if progress is not None:
            progress(1)
    nominal = store.frame().set_index("scenario_id").loc[NOMINAL]
    nom_vpods = vpods_from_json(nominal["vpods"]) if nominal["vpods"] else None
    todo = []
    for t in prepared.tasks:
        if t.scenario_id == NOMINAL:
            continue
        if t.scenario_id in done:
            stats.skipped.append(t.scenario_id)
            if progress is not None:
                progress(1)
            continue
        todo.append(job_of(t, nom_vpods))
    execute(prepared, todo, scenario_rows, workers=workers, scheduler=scheduler, on_result=record)
    rows = store.frame()
    rows.to_parquet(out / "scenarios.parquet", index=False)
    rows.to_csv(out / "scenarios.csv", index=False)
    return rows, stats
