"""Planning commands: ``plan``, ``evaluate`` and ``import-melange``.

``neuscale-opt plan [INSTANCE] [--method M] [--independent] [--objective energy|cost|carbon]
[--node-limit N] [--time-limit S] [--time-limit-scope per-solve|per-window|total] [--mip-gap G] [--threads N]
[--solver-log] [--save-lp PATH] [--save-mps PATH] [--json PATH|-] [--out DIR] [--quiet] [--verbose]``

With ``--out DIR`` it also runs the baselines (greedy, homogeneous, unlimited; the auto-scalers and
the oracle for a schedule) and writes the capacity-planning report there (``report.md``,
``report.html``, ``plan.json``, ``replays.json``, ``timing.json``, CSVs, figures; see
``docs/report.md``). The terminal gets a short summary ending with the path of ``report.html``;
``--verbose`` adds the allocation table, ``--quiet`` prints the status line only. Which planner runs is decided by
:func:`neuscale_opt.planning.uses_schedule`; every output path is checked before any work.

INSTANCE is an instance TOML (roofline coefficients), a profile instance TOML (a ``[profile]``
table, e.g. written by ``import-melange``) or a Mélange JSON configuration; without it the embedded
default instance is planned. Exit codes: 0 a plan (``optimal``, ``feasible``, or ``work_limit`` /
``time_limit`` with an incumbent), 1 infeasible (one-line diagnosis on stderr), 2 bad input, 3 the
work limit or the time limit without any plan.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from neuscale_opt.cli import Command, settle_heap
from neuscale_opt.errors import EXIT_INFEASIBLE, EXIT_OK, InputError
from neuscale_opt.forecast_names import FORECAST_METHODS

if TYPE_CHECKING:
    from collections.abc import Callable

    from neuscale_opt.alloc.options import PlanOptions
    from neuscale_opt.alloc.solution import Solution
    from neuscale_opt.coefficients import Coefficients


def with_reserve_forecast(inst: Any, name: str | None, independent: bool = False) -> Any:
    """``inst`` with ``--reserve-forecast`` in its ``[horizon]`` table (a table of the defaults when it
    has none: the flag asks for a horizon plan, as ``--forecast`` does); ``none`` drops the reserve."""
    if name is None:
        return inst
    from neuscale_opt.instance import Horizon, Instance

    if independent:
        raise InputError("plans epochs independently; --reserve-forecast needs the horizon model", "--independent")
    if not isinstance(inst, Instance):
        raise InputError("needs an instance TOML with a trace (a horizon plan)", where="--reserve-forecast")
    table = inst.horizon if inst.horizon is not None else Horizon()
    table = table.model_copy(update={"reserve_forecast": None if name == "none" else name})
    return inst.model_copy(update={"horizon": table})


def _plan_args(p: argparse.ArgumentParser) -> None:
    from neuscale_opt.alloc.options import BACKENDS, METHODS, OBJECTIVES, PLACEMENTS, SERVINGS, VARIANTS
    from neuscale_opt.planning import HORIZON_ONLY

    p.add_argument("instance", nargs="?", help="instance TOML, profile TOML or Mélange JSON (default: embedded)")
    p.add_argument(
        "--method",
        choices=(*METHODS, *HORIZON_ONLY),
        default="milp",
        help="milp (default), greedy, homogeneous, unlimited; horizon policies: oracle, neuscale-autoscaler, "
        "homogeneous-autoscaler",
    )
    p.add_argument("--window", type=int, default=None, metavar="H", help="rolling horizon window (epochs)")
    p.add_argument("--forecast", choices=FORECAST_METHODS, default=None, help="forecaster of the rolling horizon")
    p.add_argument(
        "--reserve-forecast",
        choices=(*FORECAST_METHODS, "none"),
        default=None,
        help="keep room in the fleet for this forecaster's demand beside the plan (the guard reserve; "
        "'none': no reserve; default: the instance's [horizon] reserve_forecast)",
    )
    p.add_argument("--objective", choices=OBJECTIVES, default=None, help="override the instance's objective")
    p.add_argument("--variant", choices=VARIANTS, default=None, help="override planning.variant")
    p.add_argument("--serving", choices=SERVINGS, default=None, help="override planning.serving")
    p.add_argument("--backend", choices=BACKENDS, default=None, help="override solver.backend")
    p.add_argument("--placement", choices=PLACEMENTS, default=None, help="override planning.placement")
    p.add_argument("--allow-unserved", action="store_true", default=None, help="plan partially if over-subscribed")
    p.add_argument(
        "--slice-factor",
        type=_positive_int,
        default=None,
        metavar="S",
        help="profile/Mélange inputs: split each class into S equal slices as Mélange does "
        "(default: the exact continuous-share optimum)",
    )
    p.add_argument(
        "--independent",
        action="store_true",
        help="plan every epoch independently, also on an instance with a [horizon] table",
    )
    add_solver_args(p)
    p.add_argument("--json", default=None, metavar="PATH", help="write the plan as JSON to PATH ('-' = stdout)")
    p.add_argument("--out", default=None, metavar="DIR", help="write the report (Markdown, HTML, JSON, CSV) to DIR")
    p.add_argument("--no-baselines", action="store_true", help="with --out: do not run the baselines")
    p.add_argument(
        "--jobs",
        type=int,
        choices=(1, 2),
        default=2 if (os.cpu_count() or 1) > 1 else 1,
        help="2 runs, with --out, the baselines and the replays beside the plan (two worker processes "
        "on Linux, else a second thread), and without --out a horizon plan's bound beside its windows "
        "(a forked process on Linux); 1 does all in turn (default: 2 on a machine with two or more "
        "CPUs); the plan and the report are the same either way",
    )
    p.add_argument(
        "--quiet", action="store_true", help="no progress bar; print only the status line and the report path"
    )
    p.add_argument("--verbose", action="store_true", help="also print the allocation table")
    p.add_argument(
        "--sweep",
        metavar="DIR",
        help="with --out: a sweep's output folder (neuscale-opt sweep --out DIR); the report's risks say "
        "which parameter changes the plan's chip mix and at which value",
    )
    add_objective_flags(p)
    p.set_defaults(func=cmd_plan)


def _float_arg(text: str, ok, rule: str) -> float:
    """A finite float argument for which ``ok(value)`` holds (argparse ``type``); ``rule`` says which."""
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(v) and ok(v)):
        raise argparse.ArgumentTypeError(f"must be {rule}, got {text!r}")
    return v


def _positive_float(text: str) -> float:
    return _float_arg(text, lambda v: v > 0, "a finite number > 0")


def _nonnegative_float(text: str) -> float:
    return _float_arg(text, lambda v: v >= 0, "a finite number >= 0")


def _gap(text: str) -> float:
    return _float_arg(text, lambda v: 0 <= v < 1, "in [0, 1)")


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return v


def _node_limit(text: str) -> int:
    from neuscale_opt.alloc.options import MAX_NODE_LIMIT

    v = _positive_int(text)
    if v > MAX_NODE_LIMIT:
        raise argparse.ArgumentTypeError(f"must be <= {MAX_NODE_LIMIT}, got {text!r}")
    return v


def add_solver_args(p: argparse.ArgumentParser) -> None:
    """The solver options of ``plan`` and ``bench`` (they fill :class:`PlanOptions`)."""
    from neuscale_opt.alloc.options import DEFAULT_NODE_LIMIT, DEFAULT_TIME_LIMIT_S, TIME_LIMIT_SCOPES

    p.add_argument(
        "--node-limit",
        type=_node_limit,
        default=None,
        metavar="N",
        help="work limit: branch-and-bound nodes per MILP solve, deterministic (default: the instance's "
        f"solver.node_limit, {DEFAULT_NODE_LIMIT})",
    )
    p.add_argument(
        "--time-limit",
        type=_positive_float,
        default=None,
        metavar="S",
        help="wall-clock limit per solve (s), the safety net behind --node-limit (default: the instance's "
        f"solver.time_limit_s, {DEFAULT_TIME_LIMIT_S:g})",
    )
    p.add_argument(
        "--time-limit-scope",
        choices=TIME_LIMIT_SCOPES,
        default=None,
        help="what --time-limit bounds: each solve (per-solve, default), each epoch or window (per-window), "
        "or the whole plan (total)",
    )
    p.add_argument("--mip-gap", type=_gap, default=None, metavar="G", help="relative MIP gap (default 1e-6)")
    p.add_argument("--threads", type=_positive_int, default=None, metavar="N", help="solver threads (default 1)")
    p.add_argument("--solver-log", action="store_true", default=None, help="stream the solver's log to stderr")
    p.add_argument("--save-lp", default=None, metavar="PATH", help="write each solved model as LP (Pyomo)")
    p.add_argument("--save-mps", default=None, metavar="PATH", help="write each solved model as MPS (Pyomo)")


def solver_overrides(args: argparse.Namespace) -> dict:
    """The :class:`PlanOptions` fields the solver flags set (``None`` = keep the instance's)."""
    return {
        "node_limit": args.node_limit,
        "time_limit_s": args.time_limit,
        "time_limit_scope": args.time_limit_scope,
        "mip_gap": args.mip_gap,
        "threads": args.threads,
        "solver_log": args.solver_log,
        "save_lp": args.save_lp,
        "save_mps": args.save_mps,
    }


def check_solver_outputs(args: argparse.Namespace) -> None:
    from neuscale_opt.io import check_output

    check_output(args.save_lp, "--save-lp")
    check_output(args.save_mps, "--save-mps")


def _evaluate_args(e: argparse.ArgumentParser) -> None:
    e.add_argument("plan", help="plan JSON (from neuscale-opt plan or any producer following its contract)")
    e.add_argument(
        "--instance", default=None, help="instance TOML (default: the one the plan records, else the embedded default)"
    )
    e.add_argument("--force", action="store_true", help="check against --instance even if it is not the plan's")
    e.add_argument("--json", default=None, metavar="PATH", help="write the evaluation as JSON ('-' = stdout)")
    e.set_defaults(func=cmd_evaluate)


def _import_melange_args(m: argparse.ArgumentParser) -> None:
    m.add_argument("config", help="Mélange configuration JSON (gpu_info, workload_distribution, ...)")
    m.add_argument("-o", "--output", default="-", metavar="INSTANCE", help="output TOML path ('-' = stdout)")
    m.add_argument(
        "--slice-factor",
        type=_positive_int,
        default=None,
        metavar="S",
        help="split each class into S equal slices as Mélange does (default: the exact continuous-share optimum)",
    )
    m.set_defaults(func=cmd_import_melange)


COMMANDS: dict[str, Command] = {
    "plan": Command(
        "plan vPods per class and generation for each epoch (MILP, greedy or baselines)",
        _plan_args,
        description=__doc__.split("\n\n")[1],
    ),
    "evaluate": Command(
        "re-check any plan JSON against an instance and account its energy, money and carbon", _evaluate_args
    ),
    "import-melange": Command(
        "convert a Mélange configuration (JSON) into a profile instance (TOML)", _import_melange_args
    ),
}


def cmd_plan(args: argparse.Namespace) -> int:
    from neuscale_opt.alloc.options import PlanOptions
    from neuscale_opt.instance import Instance
    from neuscale_opt.io import Outputs, check_output, check_output_dir
    from neuscale_opt.planning import load_plan_input, plan_any, uses_schedule
    from neuscale_opt.report.progress import progress_bar

    # every output is checked before any work: exit 2, nothing written
    check_output(args.json, "--json")
    if args.out is not None:
        check_output_dir(args.out, "--out")
    check_solver_outputs(args)
    sweep = read_sweep_summary(args.sweep) if getattr(args, "sweep", None) is not None else None
    if sweep is not None and args.out is None:
        raise InputError("--sweep needs --out (it goes into the report)", "--sweep")
    coeffs, inst = load_plan_input(args.instance)
    inst = with_reserve_forecast(inst, getattr(args, "reserve_forecast", None), args.independent)
    settle_heap()  # the instance, its coefficients and the modules stay for the whole command
    options = PlanOptions.from_instance(
        inst,
        objective=args.objective,
        variant=args.variant,
        serving=args.serving,
        backend=args.backend,
        allow_unserved=args.allow_unserved,
        placement=args.placement,
        slice_factor=args.slice_factor,
        attainment=args.attainment,
        tail_rate_rps=args.tail_rate,
        jobs=args.jobs,
        **solver_overrides(args),
    )
    options = with_bounds(args, options)
    if args.pareto:
        return cmd_pareto(args, coeffs, options)
    schedule = uses_schedule(inst, args.method, args.independent, args.window, args.forecast)
    if schedule and options.bounds:
        raise InputError("bounds apply to independent epochs (the epoch MILP), not to a horizon plan", where="--bound")
    if not schedule and not args.independent and isinstance(inst, Instance):
        from neuscale_opt.horizon import uses_horizon

        if uses_horizon(inst):
            print(
                f"neuscale-opt: note: {args.method} plans every epoch independently (as with --independent); "
                "the instance's [horizon] rules do not apply to it",
                file=sys.stderr,
            )
    # with --out the replays get worker processes (forked now, before any thread or solver
    # starts; Workers) and the baselines start, beside the plan (:class:`Baselines`)
    played = replay_trace(inst, coeffs) if args.out is not None else None  # read once for every replay
    trace = None if played is None else played[0]
    if args.out is not None:  # the report's modules, imported once before the workers fork (they draw figures too)
        import neuscale_opt.report.build  # noqa: F401
    workers = Workers.start(args, inst, coeffs, trace) if args.out is not None else None
    base = Baselines(args, inst, coeffs, options, schedule, workers, trace) if args.out is not None else None
    try:
        with progress_bar(total=len(coeffs.epochs), desc=f"plan {args.method}", quiet=args.quiet) as bar:
            sol = plan_any(
                inst,
                coeffs,
                args.method,
                options.start_budget("total"),
                independent=args.independent,
                window=args.window,
                forecast=args.forecast,
                progress=bar.update,
            )
        prov = plan_provenance(args, inst, options)
        if "sizing_window" in coeffs.meta:  # provision_for = "burst": the window chosen and why
            prov["sizing_window"] = coeffs.meta["sizing_window"]
        if "rate_cv2" in coeffs.buckets.columns:  # AT4: each class's rate movement the safe loads took
            cv2 = zip(coeffs.buckets["bucket"], coeffs.buckets["rate_cv2"], strict=True)
            prov["rate_cv2"] = {str(b): round(float(v), 6) for b, v in cv2}
        if "clump_sizes" in coeffs.buckets.columns:  # AT5: each class's mean clump of simultaneous requests
            from neuscale_opt.traces.demand import mean_clump

            laws = zip(coeffs.buckets["bucket"], coeffs.buckets["clump_sizes"], strict=True)
            prov["clump_mean"] = {str(b): round(mean_clump(law), 6) for b, law in laws}
        report = (
            plan_report(args, inst, coeffs, sol, prov, base, played, sweep, workers)
            if args.out is not None and sol.has_plan
            else None
        )
    finally:
        if base is not None:
            base.stop()
        if workers is not None:
            workers.close()
    if args.json != "-":
        replayed = None
        if report is not None and "replays.json" in report.files:
            import json  # not at the top: building the parser (--help) does not need it

            replayed = json.loads(report.files["replays.json"]).get(sol.method)
        sys.stdout.write(
            summary(sol, coeffs, inst, verbose=getattr(args, "verbose", False), quiet=args.quiet, replayed=replayed)
        )
        sys.stdout.write(melange_comparison(args.instance, args.slice_factor, solved=sol))
    with Outputs() as out:
        out.add(plan_json(sol, prov, timing=True), args.json, "--json")
        if report is not None:
            out.add_folder(report.files, args.out, "--out")
    if report is not None and args.json != "-":
        from pathlib import Path

        sys.stdout.write(f"report: {Path(args.out) / 'report.html'}\n")
    if sol.status == "infeasible":
        print(f"neuscale-opt: infeasible: {sol.diagnosis}{_clump_hint(coeffs)}", file=sys.stderr)
        return EXIT_INFEASIBLE
    return EXIT_OK


def _clump_hint(coeffs: Coefficients) -> str:
    """When the safe loads read clumps of simultaneous requests (AT5), the largest and what to do
    if the trace's timestamps are only coarse."""
    b = coeffs.buckets
    if "clump_sizes" not in b.columns:
        return ""
    from neuscale_opt.traces.demand import MAX_CLUMP

    largest = max((len(law) for law in b["clump_sizes"]), default=1)
    size = f"{MAX_CLUMP} or more" if largest >= MAX_CLUMP else f"up to {largest}"
    return (
        f" (the trace records {size} requests of one class at one instant, and the safe loads "
        "charge them as arriving together, formulations/allocation.md AT5; if its timestamps are only coarse, "
        "set workload.trace.spread_s to their resolution)"
    )


# -- both objectives: epsilon constraint and front (neuscale_opt.alloc.pareto) -------------------


def add_objective_flags(p: argparse.ArgumentParser) -> None:
    """``--bound METRIC<=X`` (repeatable), ``--pareto`` [``--pareto-points N``, ``--pareto-epoch E``],
    the SLO-attainment target and the tail-class rate."""
    p.add_argument(
        "--bound",
        action="append",
        default=None,
        metavar="METRIC<=X",
        help="bound another objective per epoch while minimising --objective, e.g. cost<=12.5 (USD), energy<=3e7 (J)",
    )
    p.add_argument("--pareto", action="store_true", help="write the energy-cost front of one epoch instead of a plan")
    p.add_argument(
        "--pareto-points", type=_positive_int, default=7, metavar="N", help="points of the front (default 7)"
    )
    p.add_argument("--pareto-epoch", type=int, default=None, metavar="E", help="epoch of the front (default: peak)")
    p.add_argument(
        "--attainment",
        type=_positive_float,
        default=None,
        metavar="A",
        help="SLO-attainment target in (0, 1) that sizes each configuration's safe load (default: slo.attainment)",
    )
    p.add_argument(
        "--tail-rate",
        type=_nonnegative_float,
        default=None,
        metavar="RPS",
        help="classes below this rate get no vPod group of their own (default: planning.tail_rate_rps)",
    )


def with_bounds(args: argparse.Namespace, options: PlanOptions) -> PlanOptions:
    """``options`` with the ``--bound`` flags as epsilon constraints."""
    from neuscale_opt.alloc.options import parse_bound

    bounds = tuple(parse_bound(b) for b in (args.bound or []))
    return options.replace(bounds=bounds) if bounds else options


def cmd_pareto(args: argparse.Namespace, coeffs: Coefficients, options: PlanOptions) -> int:
    """``plan --pareto``: the front as JSON (``--json``) or a table on stdout."""
    from neuscale_opt.alloc.pareto import pareto_front
    from neuscale_opt.io import emit, to_json

    front = pareto_front(coeffs, options.replace(bounds=()), epoch=args.pareto_epoch, points=args.pareto_points)
    if args.json is not None:
        emit(to_json({"pareto": front.to_dict("records"), "units": front.attrs.get("unit", {})}), args.json, "--json")
    if args.json != "-":
        sys.stdout.write(front.to_string(index=False) + "\n")
    return EXIT_OK


def melange_comparison(path: str | None, slice_factor: int | None, solved=None) -> str:
    """For a Mélange JSON input, both answers side by side: the exact continuous-share optimum and
    Mélange's slice answer (``slice_factor``, default the configuration's own); else nothing.
    ``solved``: the plan just made of that input, reused for the answer it already is."""
    if path is None or not str(path).lower().endswith(".json"):
        return ""
    from neuscale_opt.alloc.melange import load_melange, solve_melange

    return solve_melange(load_melange(path), slice_factor=slice_factor, solved=solved).summary()


def plan_provenance(args: argparse.Namespace, inst, options: PlanOptions) -> dict:
    from neuscale_opt import provenance

    return provenance.plan_provenance(
        args.instance, inst, args.method, options.planning_dict(), getattr(args, "argv", None)
    )


def plan_json(sol: Solution, prov: dict, timing: bool) -> str:
    """The plan's JSON (the contract of ``Solution.to_dict``) with its ``provenance``."""
    from neuscale_opt.io import to_json

    return to_json({**sol.to_dict(timing=timing), "provenance": prov})


def read_sweep_summary(folder: str) -> dict:
    """The ``summary.json`` of a sweep's output folder, checked for the fields the report reads."""
    from pathlib import Path

    from neuscale_opt.readers import read_json

    path = Path(folder) / "summary.json"
    if not Path(folder).is_dir():
        raise InputError("not a sweep output folder (run neuscale-opt sweep SPEC --out DIR)", str(folder))
    data = read_json(path, str(path))
    if not isinstance(data, dict) or not isinstance(data.get("flips", []), list) or "solved" not in data:
        raise InputError("not a sweep summary (fields 'solved' and 'flips' expected)", str(path))
    for i, f in enumerate(data.get("flips", [])):
        if not isinstance(f, dict) or "parameter" not in f:
            raise InputError(f"flips[{i}]: an object with 'parameter' expected", str(path))
    return data


class _Stopped(Exception):
    """A baseline's plan given up because the report it was for will not be written."""


def plan_baseline(
    name: str,
    inst,
    coeffs: Coefficients,
    options: PlanOptions,
    horizon: bool,
    window: int | None,
    forecast: str | None,
    trace,
    progress: Callable[[int], object] | None = None,
) -> tuple[Solution, object, dict | None, str | None]:
    """One baseline of the report: its plan, its independent evaluation, against ``trace`` (None:
    not replayed) its replay totals, and why it was not replayed when the replay refused its plan
    (else None). Every baseline with allocations is replayed (``unlimited`` excepted: it ignores
    the inventory), also one the evaluator rejects: the auto-scalers react to demand after it came,
    and their replays measure what that costs."""
    from neuscale_opt.planning import evaluate_any, plan_any

    b = plan_any(
        inst,
        coeffs,
        name,
        options.start_budget("total"),
        independent=not horizon,
        window=window if horizon else None,
        forecast=forecast if horizon else None,
        progress=progress,
        bound=False,  # the report compares a baseline's replay, evaluation and status, never its bound
    )
    if progress is not None:
        progress(0)
    ev = evaluate_any(b, coeffs, inst) if b.runnable else None
    totals, refused = None, None
    if trace is not None and name != "unlimited" and b.runnable:
        try:
            totals = replay_totals(b, inst, trace, coeffs, detail=False)[0]
        except InputError as e:
            # a baseline's plan that the replay's plan reader refuses is a fault of that baseline,
            # not of the user's input: the report says so and is written without its replay
            refused = f"{name} was not replayed: the replay refused its plan ({e})"
    return b, ev, totals, refused


class Baselines:
    """The report's baselines (:func:`plan_baseline`), planned, evaluated and replayed beside the
    plan itself.

    A horizon plan is compared with the horizon policies (the auto-scalers and the oracle), an
    epoch-by-epoch plan with the epoch baselines. With ``--jobs 2`` (the default on a machine with
    two or more CPUs) they run beside the plan: in the worker processes when there are
    (:class:`Workers`), else in a second thread (HiGHS releases Python's lock while it runs, so
    one thread's solver time overlaps the other's Python work). Each baseline is planned and
    replayed from the same inputs as when run alone, so the report is the same bytes either way.
    With the solver's log on (its output is captured by file descriptor, one solve at a time) or
    ``--jobs 1`` they run after the plan, one at a time.
    """

    def __init__(
        self,
        args: argparse.Namespace,
        inst,
        coeffs: Coefficients,
        options: PlanOptions,
        horizon: bool,
        workers: Workers | None = None,
        trace=None,
    ):
        import threading

        pool = (
            ("neuscale-autoscaler", "homogeneous-autoscaler", "oracle")
            if horizon
            else ("greedy", "homogeneous", "unlimited")
        )
        self.names = [] if args.no_baselines else [m for m in pool if m != args.method]
        # --save-lp/--save-mps: the plan's models only
        self._todo = (args, inst, coeffs, options.replace(save_lp=None, save_mps=None), horizon)
        self._trace = trace  # what the baselines are replayed against (None: not replayed)
        self._done: dict[str, tuple[Solution, object, dict | None, str | None]] = {}
        self._pending: dict[str, Any] = {}
        #: why a baseline's replay is missing (the replay refused its plan), for the report's notes
        self.notes: list[str] = []
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = None
        if self.names and workers is not None:
            # the MILP baselines (the longest) first, so that the other worker takes the rest
            first = sorted(self.names, key=lambda n: n not in ("oracle", "unlimited"))
            o = self._todo[3]
            self._pending = {n: workers.baseline(n, o, horizon, args.window, args.forecast) for n in first}
        elif self.names and int(getattr(args, "jobs", 1)) > 1 and not options.solver_log:
            # a daemon: a plan that ends without a report does not wait for its baselines
            self._thread = threading.Thread(target=self._run, name="baselines", daemon=True)
            self._thread.start()

    def _check(self, _k: int = 0) -> None:
        if self._stop.is_set():
            raise _Stopped

    def _run(self) -> None:
        try:
            for name in self.names:
                self._done[name] = self._one(name)
        except _Stopped:
            pass
        except BaseException as e:  # handed to the thread that asks for the results
            self._error = e

    def _one(self, name: str) -> tuple[Solution, object, dict | None, str | None]:
        args, inst, coeffs, options, horizon = self._todo
        return plan_baseline(name, inst, coeffs, options, horizon, args.window, args.forecast, self._trace, self._check)

    def results(self, quiet: bool) -> tuple[dict[str, tuple[Solution, object]], dict[str, dict]]:
        """Every baseline's plan and independent evaluation, in the pool's order, and the replay
        totals of those replayed."""
        from neuscale_opt.report.progress import progress_bar

        with progress_bar(total=len(self.names), desc="baselines", quiet=quiet) as bar:
            if self._pending:
                for name in self.names:
                    self._done[name] = self._pending[name].get()
                    bar.update(1)
            elif self._thread is None:
                for name in self.names:
                    self._done[name] = self._one(name)
                    bar.update(1)
            else:
                self._thread.join()
                if self._error is not None:
                    raise self._error
                bar.update(len(self.names))
        done = {name: self._done[name] for name in self.names}
        plans = {name: (b, ev) for name, (b, ev, _r, _why) in done.items()}
        self.notes = [why for _b, _ev, _r, why in done.values() if why is not None]
        for note in self.notes:
            print(f"neuscale-opt: warning: {note}", file=sys.stderr)
        return plans, {name: r for name, (_b, _ev, r, _why) in done.items() if r is not None}

    def stop(self) -> None:
        """Give up the baselines not yet planned (in a thread: at the next epoch or window of the
        one running; the worker processes are ended by :meth:`Workers.close`)."""
        self._stop.set()


#: What a forked worker plans and replays with: (instance, trace, coefficients), set in the parent
#: just before the workers are forked (:class:`Workers`), so that only options and plans are sent.
_WORKER_INPUT: list[tuple] = []


def _replay_in_worker(plan: dict, detail: bool) -> tuple[dict, dict]:
    inst, trace, coeffs = _WORKER_INPUT[0]
    return _replay_plan(plan, inst, trace, coeffs, detail)


#: Figures a worker draws when there are workers (:func:`plan_report`): the pod maps take about
#: a third of the figures' time; the same job gives the same bytes in either process.
_DRAWN_AWAY = frozenset({"pod_maps.png"})


def _worker_init() -> None:
    """A worker leaves Ctrl-C to the command: the parent ends the workers (:meth:`Workers.close`)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _baseline_in_worker(name: str, options: PlanOptions, horizon: bool, window, forecast):
    inst, trace, coeffs = _WORKER_INPUT[0]
    return plan_baseline(name, inst, coeffs, options, horizon, window, forecast, trace)


class Workers:
    """Two worker processes for the report's baselines, replays and longest figure (Python-bound
    work: in threads it would only take turns with the plan's). Forked once the input is loaded,
    before any thread or solver starts, so each holds the instance, the trace and the coefficients
    already and is sent options and plans only. Only in the command-line process
    (:func:`neuscale_opt.cli.console`) on Linux with ``--jobs 2`` (also without baselines or a
    trace: the plan's replay and the pod maps still run beside the figures); otherwise
    :meth:`start` returns None and the work runs in this process or a thread (the same results: a
    plan, a replay or a figure is a function of its inputs)."""

    def __init__(self, inst, trace, coeffs: Coefficients) -> None:
        import multiprocessing

        _WORKER_INPUT[:] = [(inst, trace, coeffs)]
        self._pool = multiprocessing.get_context("fork").Pool(2, initializer=_worker_init)  # both forked here

    @classmethod
    def start(cls, args: argparse.Namespace, inst, coeffs: Coefficients, trace) -> Workers | None:
        """The workers, when they apply (``trace``: the replays' trace, None without one)."""
        from neuscale_opt.cli import _CONSOLE

        if not (_CONSOLE and sys.platform.startswith("linux") and int(getattr(args, "jobs", 1)) > 1):
            return None
        return cls(inst, trace, coeffs)

    def replay(self, sol: Solution, detail: bool):
        """The replay of ``sol`` started in a worker; ``.get()`` waits for (totals, detail)."""
        return self._pool.apply_async(_replay_in_worker, (sol.to_dict(timing=False), detail))

    def baseline(self, name: str, options: PlanOptions, horizon: bool, window, forecast):
        """:func:`plan_baseline` of ``name`` started in a worker; ``.get()`` waits for it."""
        return self._pool.apply_async(_baseline_in_worker, (name, options, horizon, window, forecast))

    def draw(self, job):
        """A :class:`~neuscale_opt.report.build.FigureJob` drawn in a worker; ``.get()`` waits for
        its PNG bytes."""
        return self._pool.apply_async(job.png)

    def close(self) -> None:
        self._pool.terminate()
        self._pool.join()


def replay_trace(inst, coeffs: Coefficients):
    """``(trace, note)`` the report replays plans against (:func:`planned_part` of the instance's
    trace), or None when the input has no trace (a profile instance, or no trace given)."""
    from neuscale_opt.instance import Instance

    if not isinstance(inst, Instance) or inst.workload.trace is None:
        return None
    from neuscale_opt.candidates import instance_trace

    return planned_part(instance_trace(inst), coeffs)


def replay_totals(sol: Solution, inst, trace, coeffs: Coefficients, detail: bool) -> tuple[dict, dict]:
    """One plan replayed: its totals, and its tables by class and by epoch when ``detail``."""
    return _replay_plan(sol.to_dict(timing=False), inst, trace, coeffs, detail)


def _replay_plan(plan: dict, inst, trace, coeffs: Coefficients, detail: bool) -> tuple[dict, dict]:
    from neuscale_opt.replay import replay

    res = replay(plan, inst, trace, coeffs=coeffs)
    return res.totals, ({"by_bucket": res.by_bucket, "by_epoch": res.by_epoch} if detail else {})


def plan_report(
    args: argparse.Namespace,
    inst,
    coeffs: Coefficients,
    sol: Solution,
    prov: dict,
    base: Baselines,
    played: tuple | None,
    sweep: dict | None = None,
    workers: Workers | None = None,
):
    """Evaluate the plan independently, replay it against ``played`` (:func:`replay_trace`, None:
    no replays), draw the report's figures, collect the baselines (planned, evaluated and
    replayed beside the plan, :class:`Baselines`) and build the report (nothing written)."""
    from neuscale_opt.planning import evaluate_any
    from neuscale_opt.report.build import build_report, draw_figures, figure_jobs
    from neuscale_opt.report.progress import progress_bar

    ev = evaluate_any(sol, coeffs, inst)
    cset = None
    from neuscale_opt.instance import Instance

    if isinstance(inst, Instance):
        from neuscale_opt.candidates import candidates

        cset = candidates(inst)
    notes: list[str] = []
    replays: dict[str, dict] = {}
    detail: dict = {}
    mine = None
    if played is not None:
        trace, note = played
        notes += [note] if note else []
        if workers is not None:  # replayed in a worker process while the figures are drawn
            mine = workers.replay(sol, detail=True)
        else:
            with progress_bar(total=1, desc="replay", quiet=args.quiet) as bar:
                replays[sol.method], detail = replay_totals(sol, inst, trace, coeffs, detail=True)
                bar.update(1)
    pods = None if coeffs.pods is None else coeffs.pods.to_dict("records")
    placements = getattr(sol, "placements", None)
    settle_heap()  # the plan, its evaluation and the plotting modules stay until the report is written
    # the figures read neither a baseline nor a replay: drawn while the baselines' thread works,
    # the pod maps (the longest to draw) in the first worker that is free when there are workers
    jobs = figure_jobs(inst, cset, coeffs, sol, ev, placements, pods)
    away = {j.name: workers.draw(j) for j in jobs if j.name in _DRAWN_AWAY} if workers is not None else {}
    drawn = {j.name: j.png() for j in jobs if j.name not in away}
    baselines, played_baselines = base.results(args.quiet)
    notes += base.notes
    figures = draw_figures(jobs, {**drawn, **{name: got.get() for name, got in away.items()}})
    if mine is not None:
        replays[sol.method], detail = mine.get()
    if played is not None:
        replays.update(played_baselines)
    return build_report(
        inst,
        cset,
        coeffs,
        sol,
        ev,
        baselines,
        placements=placements,
        pods=pods,
        replays=replays or None,
        provenance=prov,
        notes=notes,
        replay_detail=detail or None,
        sweep=sweep,
        figures=figures,
    )


def planned_part(trace, coeffs: Coefficients):
    """The note a report carries when the instance's trace holds requests beyond the planned epochs
    (``epochs.horizon`` shorter than the trace). The trace was cut to the planned epochs by the one
    loader (:func:`neuscale_opt.candidates.cut_to_horizon`), so plan, evaluation and replays cover
    exactly the same requests; this only says how many were left out."""
    left = int(trace.attrs.get("rows_beyond_horizon", 0))
    if left == 0:
        return trace, None
    total = len(trace) + left
    return trace, (
        f"the trace holds requests beyond the {len(coeffs.epochs)} planned epochs of {float(coeffs.epoch_s):g} s: "
        f"the plan and the replays cover the planned epochs ({len(trace)} of {total} requests)"
    )


def summary(
    sol: Solution,
    coeffs: Coefficients,
    inst=None,
    verbose: bool = False,
    quiet: bool = False,
    replayed: dict | None = None,
) -> str:
    """The terminal summary of a plan: status (and what was solved), objective, cost per hour,
    chips per generation, placement and, with a report, the replayed SLO attainment; the
    allocation table only when ``verbose``; ``quiet``: the status line alone."""
    from neuscale_opt.report.fmt import fmt, kwh, pct

    solved = ""
    meta = getattr(sol, "meta", {}) or {}
    if "window" in meta and "forecast" in meta:
        solved = f"; rolling {meta['window']}-epoch window on {meta['forecast']} forecasts"
    gap = ""
    if sol.has_plan and sol.gap == sol.gap:  # not NaN
        gap = f", gap {pct(sol.gap)} against the " + (
            "horizon's LP-relaxation bound" if "bound" in meta else "solver's bound"
        )
    from neuscale_opt.alloc.solution import status_note

    note = status_note(sol.status)
    stopped = f" ({note})" if note else ""
    lines = [f"plan {sol.method} ({sol.options.variant}, {sol.options.serving}): {sol.status}{stopped}{solved}{gap}"]
    if not sol.has_plan or quiet:
        return "\n".join(lines) + "\n"
    t = sol.totals
    hours = len(coeffs.epochs) * float(coeffs.epoch_s) / 3600.0
    unit = {"energy": "kWh", "cost": "USD", "carbon": "kgCO2e"}[sol.objective]
    value = kwh(sol.objective_value) if sol.objective == "energy" else sol.objective_value
    lines.append(
        f"objective {sol.objective} {fmt(value)} {unit}; cost {fmt(t['cost_usd'] / hours)} USD/h "
        f"({fmt(t['cost_usd'])} USD over {fmt(hours)} h); accounted energy {fmt(kwh(t['energy_j']))} kWh; "
        f"carbon {fmt(t['carbon_kg'])} kgCO2e; unserved {fmt(t['unserved_rps'])} req/s; "
        f"solved in {sol.solve_seconds:.1f} s"
    )
    inv = coeffs.inventory()
    lines.append(
        "chips by generation (peak of healthy): "
        + ", ".join(f"{c} {int(t['chips_by_version'].get(c, 0))} of {fmt(inv[c])}" for c in sorted(inv))
    )
    from neuscale_opt.planning import evaluate_any

    ev = evaluate_any(sol, coeffs, inst)
    placed = len(sol.placements) if getattr(sol, "placements", None) is not None else 0
    line = f"placement: {ev.totals.get('placement', 'not applicable')}, {placed} vPods placed"
    if getattr(ev, "unplaced", ()):
        line += f"; not placed: {', '.join(ev.unplaced)}"
    lines.append(line)
    if replayed is not None:
        lines.append(
            f"replayed: SLO attainment {pct(replayed.get('slo_attainment'))} of {fmt(replayed.get('requests'))} "
            f"requests, {fmt(replayed.get('goodput_tokens_per_joule'))} goodput tokens/J"
        )
    if not ev.feasible:
        lines.append("evaluation: " + "; ".join(ev.violations))
    cols = ["epoch", "bucket", "phase", "chip", "shape", "chips_per_vpod", "n_vpods", "rate_rps"]
    if verbose and len(sol.allocations):
        lines.append(sol.allocations[cols].to_string(index=False))
    elif len(sol.allocations):
        lines.append(f"{len(sol.allocations)} allocation rows (--verbose prints them)")
    return "\n".join(lines) + "\n"


def read_plan(path: str) -> dict:
    """The JSON object of a plan file (the replay's reader: one line naming the file on error)."""
    from neuscale_opt.replay.plan import _read

    return _read(path)[0]


def plan_instance(data: dict, args: argparse.Namespace) -> tuple[Coefficients, object]:
    """Coefficients and instance to check or replay the plan ``data`` against: ``--instance`` or
    the instance the plan records, refused when its SHA-256 differs from the recorded one unless
    ``--force``."""
    from neuscale_opt.planning import load_plan_input
    from neuscale_opt.provenance import check_instance, instance_path, instance_to_use

    path = instance_to_use(data, args.instance, where="--instance")
    coeffs, inst = load_plan_input(path)
    check_instance(data, instance_path(path, inst), args.force, where="--instance")
    return coeffs, inst


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Independent re-check of a plan file: exit 0 when feasible, 1 when it violates anything,
    2 when the file is not a well-formed plan."""
    from neuscale_opt.alloc.options import PlanOptions
    from neuscale_opt.alloc.solution import solution_from_dict
    from neuscale_opt.io import check_output, write_json
    from neuscale_opt.planning import evaluate_any

    check_output(args.json, "--json")
    data = read_plan(args.plan)
    coeffs, inst = plan_instance(data, args)
    sol = solution_from_dict(data, PlanOptions.from_instance(inst), where=args.plan, coeffs=coeffs)
    from dataclasses import replace

    sol = replace(sol, epochs=tuple(e for e in data.get("epochs") or [] if isinstance(e, dict)))
    ev = evaluate_any(sol, coeffs, inst)
    out = {
        "plan": args.plan,
        "method": sol.method,
        "feasible": ev.feasible,
        "violations": list(ev.violations),
        "objective": sol.objective,
        "objective_value": ev.objective_value,
        "claimed_objective_value": sol.objective_value,
        "totals": ev.totals,
    }
    if args.json is not None:
        write_json(out, args.json, "--json")
    if args.json != "-":
        verdict = "feasible" if ev.feasible else f"{len(ev.violations)} violation(s)"
        sys.stdout.write(
            f"{args.plan}: {verdict}; {sol.objective} = {ev.objective_value:.6g} "
            f"(plan claims {sol.objective_value:.6g})\n"
        )
        for v in ev.violations[:20]:
            sys.stdout.write(f"  {v}\n")
    return EXIT_OK if ev.feasible else EXIT_INFEASIBLE


def cmd_import_melange(args: argparse.Namespace) -> int:
    from pathlib import Path

    from neuscale_opt.alloc.melange import load_melange, melange_to_profile, profile_to_toml
    from neuscale_opt.io import check_output, emit

    check_output(args.output, "--output")
    cfg = load_melange(args.config)
    inst = melange_to_profile(cfg, name=Path(args.config).stem, slice_factor=args.slice_factor)
    emit(profile_to_toml(inst), args.output, "--output")
    # both answers on stderr (stdout may be the TOML itself)
    sys.stderr.write(melange_comparison(args.config, args.slice_factor))
    return EXIT_OK
