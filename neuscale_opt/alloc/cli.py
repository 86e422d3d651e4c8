"""CLI commands of the allocation package: ``plan`` and ``import-melange``.

``neuscale-opt plan [INSTANCE] [--method milp|greedy|homogeneous|unlimited]
[--objective energy|cost|carbon] [--time-limit S] [--json PATH|-] [--out DIR] [--quiet]``

With ``--out DIR`` it also runs the baselines (greedy, homogeneous, unlimited) and writes the
capacity-planning report there (``report.md``, ``report.html``, ``plan.json``, CSVs, figures).

INSTANCE is an instance TOML (roofline coefficients), a profile instance TOML (a ``[profile]``
table, e.g. written by ``import-melange``) or a Mélange JSON configuration; without it the embedded
default instance is planned. Exit codes: 0 a plan (``optimal``, ``feasible`` or ``time_limit`` with
an incumbent), 1 infeasible (one-line diagnosis on stderr), 2 bad input, 3 time limit without any
plan.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

from neuscale_opt.alloc.evaluate import evaluate
from neuscale_opt.alloc.melange import (
    is_profile_instance,
    load_melange,
    melange_to_profile,
    parse_profile_instance,
    profile_coefficients,
    profile_to_toml,
)
from neuscale_opt.alloc.options import BACKENDS, METHODS, OBJECTIVES, PLACEMENTS, SERVINGS, VARIANTS, PlanOptions
from neuscale_opt.alloc.plan import plan
from neuscale_opt.alloc.solution import Solution
from neuscale_opt.coefficients import Coefficients
from neuscale_opt.errors import EXIT_INFEASIBLE, EXIT_OK, InputError
from neuscale_opt.horizon import HORIZON_METHODS, plan_horizon, uses_horizon
from neuscale_opt.io import emit, to_json

FORECASTS = ("last-peak", "ewma", "seasonal-naive", "quantile", "oracle")


def load_plan_input(path: str | None) -> tuple[Coefficients, object]:
    """Coefficients and the instance-like object options are read from, for any accepted input."""
    if path is not None and path.lower().endswith(".json"):
        inst = melange_to_profile(load_melange(path), name=Path(path).stem)
        return profile_coefficients(inst), inst
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError("no such file", where=path) from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"malformed TOML: {exc}", where=path) from None
        if is_profile_instance(data):
            inst = parse_profile_instance(data, where=path)
            return profile_coefficients(inst), inst
    from neuscale_opt.candidates import build_coefficients
    from neuscale_opt.instance import load_instance

    instance = load_instance(path)
    return build_coefficients(instance), instance


def register(sub) -> None:
    """Add the ``plan`` and ``import-melange`` subcommands."""
    p = sub.add_parser(
        "plan",
        help="plan vPods per class and generation for each epoch (MILP, greedy or baselines)",
        description=__doc__.split("\n\n")[1],
    )
    p.add_argument("instance", nargs="?", help="instance TOML, profile TOML or Mélange JSON (default: embedded)")
    p.add_argument(
        "--method",
        choices=tuple(dict.fromkeys((*METHODS, *HORIZON_METHODS))),
        default="milp",
        help="milp (default), greedy, homogeneous, unlimited; horizon policies: oracle, neuscale-autoscaler, "
        "homogeneous-autoscaler",
    )
    p.add_argument("--window", type=int, default=None, metavar="H", help="rolling horizon window (epochs)")
    p.add_argument("--forecast", choices=FORECASTS, default=None, help="forecaster of the rolling horizon")
    p.add_argument("--objective", choices=OBJECTIVES, default=None, help="override the instance's objective")
    p.add_argument("--variant", choices=VARIANTS, default=None, help="override planning.variant")
    p.add_argument("--serving", choices=SERVINGS, default=None, help="override planning.serving")
    p.add_argument("--backend", choices=BACKENDS, default=None, help="override solver.backend")
    p.add_argument("--placement", choices=PLACEMENTS, default=None, help="override planning.placement")
    p.add_argument("--allow-unserved", action="store_true", default=None, help="plan partially if over-subscribed")
    p.add_argument("--time-limit", type=float, default=None, metavar="S", help="solver time limit per epoch (s)")
    p.add_argument("--json", default=None, metavar="PATH", help="write the plan as JSON to PATH ('-' = stdout)")
    p.add_argument("--out", default=None, metavar="DIR", help="write the report (Markdown, HTML, JSON, CSV) to DIR")
    p.add_argument("--no-baselines", action="store_true", help="with --out: do not run the baselines")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_objective_flags(p)
    p.set_defaults(func=cmd_plan)

    e = sub.add_parser(
        "evaluate",
        help="re-check any plan JSON against an instance and account its energy, money and carbon",
    )
    e.add_argument("plan", help="plan JSON (from neuscale-opt plan or any producer following its contract)")
    e.add_argument("--instance", default=None, help="instance TOML (default: the embedded default)")
    e.add_argument("--json", default=None, metavar="PATH", help="write the evaluation as JSON ('-' = stdout)")
    e.set_defaults(func=cmd_evaluate)

    m = sub.add_parser(
        "import-melange",
        help="convert a Mélange configuration (JSON) into a profile instance (TOML)",
    )
    m.add_argument("config", help="Mélange configuration JSON (gpu_info, workload_distribution, ...)")
    m.add_argument("-o", "--output", default="-", metavar="INSTANCE", help="output TOML path ('-' = stdout)")
    m.set_defaults(func=cmd_import_melange)


def cmd_plan(args: argparse.Namespace) -> int:
    if args.out is not None:
        from neuscale_opt.report.build import check_out_dir

        check_out_dir(args.out)  # fail before solving: exit 2, nothing written
    coeffs, inst = load_plan_input(args.instance)
    options = PlanOptions.from_instance(
        inst,
        objective=args.objective,
        variant=args.variant,
        serving=args.serving,
        backend=args.backend,
        allow_unserved=args.allow_unserved,
        time_limit_s=args.time_limit,
        placement=args.placement,
    )
    options = with_bounds(args, options)
    if getattr(args, "pareto", False):
        return cmd_pareto(args, coeffs, options)
    from neuscale_opt.report.progress import progress_bar

    n_epochs = len(coeffs.epochs)
    from neuscale_opt.instance import Instance

    if args.window is not None and args.window <= 0:
        raise InputError(f"must be > 0, got {args.window}", where="--window")
    horizon = isinstance(inst, Instance) and (
        uses_horizon(inst)
        or args.method in ("oracle", "neuscale-autoscaler", "homogeneous-autoscaler")
        or args.window is not None
        or args.forecast is not None
    )
    if horizon and options.bounds:
        raise InputError("bounds apply to independent epochs (the epoch MILP), not to a horizon plan", where="--bound")
    if not horizon and args.method not in METHODS:
        raise InputError(f"method {args.method} needs an instance with a trace and epochs", where="--method")
    with progress_bar(total=n_epochs, desc=f"plan {args.method}", quiet=args.quiet) as bar:
        if horizon:
            sol = plan_horizon(
                inst,
                args.method,
                coeffs=coeffs,
                window=args.window,
                forecast=args.forecast,
                progress=bar.update,
                options=options,
            )
        else:
            sol = plan(coeffs, options, args.method, progress=bar.update)
    if args.json is not None:
        emit(sol.to_json(), args.json)
    if args.json != "-":
        sys.stdout.write(summary(sol, coeffs, inst))
    if args.out is not None and sol.has_plan:
        written = write_plan_report(args, inst, coeffs, options, sol)
        if args.json != "-":
            sys.stdout.write(f"report: {written}\n")
    if sol.status == "infeasible":
        print(f"neuscale-opt: infeasible: {sol.diagnosis}", file=sys.stderr)
        return EXIT_INFEASIBLE
    return EXIT_OK


# -- both objectives: epsilon constraint and front (neuscale_opt.alloc.pareto) -------------------


def add_objective_flags(p: argparse.ArgumentParser) -> None:
    """``--bound METRIC<=X`` (repeatable) and ``--pareto`` [``--pareto-points N``, ``--pareto-epoch E``]."""
    p.add_argument(
        "--bound",
        action="append",
        default=None,
        metavar="METRIC<=X",
        help="bound another objective per epoch while minimising --objective, e.g. cost<=12.5 (USD), energy<=3e7 (J)",
    )
    p.add_argument("--pareto", action="store_true", help="write the energy-cost front of one epoch instead of a plan")
    p.add_argument("--pareto-points", type=int, default=7, metavar="N", help="points of the front (default 7)")
    p.add_argument("--pareto-epoch", type=int, default=None, metavar="E", help="epoch of the front (default: peak)")


def with_bounds(args: argparse.Namespace, options: PlanOptions) -> PlanOptions:
    """``options`` with the ``--bound`` flags as epsilon constraints."""
    from neuscale_opt.alloc.options import parse_bound

    bounds = tuple(parse_bound(b) for b in (getattr(args, "bound", None) or []))
    return options.replace(bounds=bounds) if bounds else options


def cmd_pareto(args: argparse.Namespace, coeffs: Coefficients, options: PlanOptions) -> int:
    """``plan --pareto``: the front as JSON (``--json``) or a table on stdout."""
    from neuscale_opt.alloc.pareto import pareto_front

    front = pareto_front(coeffs, options.replace(bounds=()), epoch=args.pareto_epoch, points=args.pareto_points)
    if args.json is not None:
        emit(to_json({"pareto": front.to_dict("records"), "units": front.attrs.get("unit", {})}), args.json)
    if args.json != "-":
        sys.stdout.write(front.to_string(index=False) + "\n")
    return EXIT_OK


def evaluate_any(sol: Solution, coeffs: Coefficients, inst) -> object:
    """The independent evaluation fit for the plan: a horizon plan (epoch summaries with the demand
    it planned for) is re-checked as a schedule, with the coupling rules and its planned demand;
    any other plan epoch by epoch against the instance's demand (``unlimited``: without inventory)."""
    from neuscale_opt.instance import Instance

    schedule = [e for e in sol.epochs if isinstance(e, dict) and "forecast_rps" in e]
    if schedule and isinstance(inst, Instance):
        import pandas as pd

        from neuscale_opt.horizon import HorizonParams, evaluate_schedule, instance_inventory

        planned = pd.DataFrame(
            [(int(e["epoch"]), str(b), float(v)) for e in schedule for b, v in sorted(e["forecast_rps"].items())],
            columns=["epoch", "bucket", "rate_rps"],
        )
        return evaluate_schedule(
            sol,
            coeffs,
            HorizonParams.from_instance(inst),
            demand=planned,
            inventory=instance_inventory(coeffs, inst.inventory_events),
        )
    return evaluate(sol, coeffs.with_unlimited_inventory() if sol.method == "unlimited" else coeffs)


def write_plan_report(args: argparse.Namespace, inst, coeffs: Coefficients, options: PlanOptions, sol: Solution) -> str:
    """Run the baselines, evaluate every plan independently and write the report to ``args.out``."""
    from neuscale_opt.report.build import build_report, write_report
    from neuscale_opt.report.progress import progress_bar

    baselines: dict[str, tuple[Solution, object]] = {}
    # a horizon plan is compared with the horizon policies (the auto-scalers and the oracle), an
    # epoch-by-epoch plan with the epoch baselines
    horizon = any(isinstance(e, dict) and "forecast_rps" in e for e in sol.epochs)
    pool = (
        ("neuscale-autoscaler", "homogeneous-autoscaler", "oracle")
        if horizon
        else ("greedy", "homogeneous", "unlimited")
    )
    names = [] if args.no_baselines else [m for m in pool if m != sol.method]
    with progress_bar(total=len(names), desc="baselines", quiet=args.quiet) as bar:
        for name in names:
            if horizon:
                b = plan_horizon(inst, name, coeffs=coeffs, window=args.window, forecast=args.forecast, options=options)
            else:
                b = plan(coeffs, options, name)
            baselines[name] = (b, evaluate_any(b, coeffs, inst) if b.has_plan else None)
            bar.update(1)
    ev = evaluate_any(sol, coeffs, inst)
    cset = None
    from neuscale_opt.instance import Instance

    if isinstance(inst, Instance):
        from neuscale_opt.candidates import candidates

        cset = candidates(inst)
    replays = {}
    if cset is not None and inst.workload.trace is not None:
        from neuscale_opt.replay import replay

        todo = [(sol.method, sol)] + [(n, b) for n, (b, _) in baselines.items() if n != "unlimited" and b.has_plan]
        with progress_bar(total=len(todo), desc="replay", quiet=args.quiet) as bar:
            for name, s in todo:
                replays[name] = replay(s.to_dict(timing=False), inst, coeffs=coeffs).totals
                bar.update(1)
    pods = None if coeffs.pods is None else coeffs.pods.to_dict("records")
    placements = getattr(sol, "placements", None)
    report = build_report(
        inst, cset, coeffs, sol, ev, baselines, placements=placements, pods=pods, replays=replays or None
    )
    write_report(args.out, report)
    return str(args.out)


def summary(sol: Solution, coeffs: Coefficients, inst=None) -> str:
    """A short human-readable report of a plan."""
    lines = [f"method {sol.method} ({sol.options.variant}, {sol.options.serving}): {sol.status}"]
    if not sol.has_plan:
        return "\n".join(lines) + "\n"
    unit = {"energy": "J", "cost": "USD", "carbon": "kgCO2e"}[sol.objective]
    lines.append(
        f"objective {sol.objective} = {sol.objective_value:.6g} {unit}; bound {sol.bound:.6g}; "
        f"gap {sol.gap:.3g}; {sol.solve_seconds:.3f} s"
    )
    t = sol.totals
    lines.append(
        f"energy {t['energy_j']:.6g} J, cost {t['cost_usd']:.6g} USD, carbon {t['carbon_kg']:.6g} kg, "
        f"unserved {t['unserved_rps']:.4g} req/s"
    )
    lines.append("chips by generation: " + ", ".join(f"{c} {n}" for c, n in t["chips_by_version"].items()))
    cols = ["epoch", "bucket", "phase", "chip", "shape", "chips_per_vpod", "n_vpods", "rate_rps"]
    if len(sol.allocations):
        lines.append(sol.allocations[cols].to_string(index=False))
    ev = evaluate_any(sol, coeffs, inst)
    placed = len(sol.placements) if getattr(sol, "placements", None) is not None else 0
    line = f"placement: {ev.totals.get('placement', 'not applicable')}, {placed} vPods placed"
    if getattr(ev, "unplaced", ()):
        line += f"; not placed: {', '.join(ev.unplaced)}"
    lines.insert(4, line)
    if not ev.feasible:
        lines.append("evaluation: " + "; ".join(ev.violations))
    return "\n".join(lines) + "\n"


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Independent re-check of a plan file: exit 0 when feasible, 1 when it violates anything."""
    import json

    from neuscale_opt.alloc.solution import solution_from_dict

    try:
        data = json.loads(Path(args.plan).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("no such file", where=args.plan) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"malformed JSON: {exc}", where=args.plan) from None
    coeffs, inst = load_plan_input(args.instance)
    sol = solution_from_dict(data, PlanOptions.from_instance(inst), where=args.plan)
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
        from neuscale_opt.io import write_json

        write_json(out, args.json)
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
    cfg = load_melange(args.config)
    inst = melange_to_profile(cfg, name=Path(args.config).stem)
    emit(profile_to_toml(inst), args.output)
    return EXIT_OK
