"""The ``sweep`` command.

``neuscale-opt sweep SPEC.toml --out DIR [--workers N] [--scheduler local|processes|dask|ADDRESS]
[--no-robust] [--quiet]``

Runs every scenario of the sweep file not yet in DIR (one task and one row each; a rerun resumes),
then writes the analysis and ``report.md`` into DIR. Schedulers: ``processes`` (default, a process
pool of N workers), ``dask`` (a local Dask cluster of N single-threaded worker processes), the
address of a running Dask scheduler (``tcp://host:8786``), or ``local`` (this process, in order).
Exit codes: 0 done (scenarios that fail are rows with their status), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys

from neuscale_opt.cli import Command
from neuscale_opt.errors import EXIT_OK, InputError


def _sweep_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="sweep TOML (see instances/sweeps/)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the rows and the report (resumable)")
    p.add_argument("--workers", type=int, default=1, metavar="N", help="worker processes (default 1)")
    p.add_argument(
        "--scheduler",
        default="processes",
        metavar="local|processes|dask|ADDRESS",
        help="executor: processes (default), dask, a Dask scheduler address, or local",
    )
    p.add_argument("--no-robust", action="store_true", help="skip the robust-plan analysis")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)


COMMANDS: dict[str, Command] = {
    "sweep": Command(
        "run a scenario sweep (sensitivity, regret, robust plans) on a process pool or a Dask cluster", _sweep_args
    ),
}


def check_scheduler(value: str) -> str:
    if value in ("local", "processes", "dask") or "://" in value or (":" in value and not value.startswith(":")):
        return value
    raise InputError(f"must be local, processes, dask or a scheduler address, got {value!r}", where="--scheduler")


def cmd_sweep(args: argparse.Namespace) -> int:
    from neuscale_opt.report.progress import progress_bar
    from neuscale_opt.sweep.analysis import robust_plans
    from neuscale_opt.sweep.report import write_sweep_report
    from neuscale_opt.sweep.run import prepare, run_sweep
    from neuscale_opt.sweep.spec import load_sweep

    if args.workers < 1:
        raise InputError(f"must be >= 1, got {args.workers}", where="--workers")
    scheduler = check_scheduler(args.scheduler)
    prepared = prepare(load_sweep(args.spec))
    with progress_bar(total=len(prepared.tasks), desc=f"sweep {prepared.spec.name}", quiet=args.quiet) as bar:
        rows, stats = run_sweep(prepared, args.out, workers=args.workers, scheduler=scheduler, progress=bar.update)
    robust = None
    if prepared.spec.robust.enabled and not args.no_robust:
        robust = robust_plans(prepared, rows, workers=args.workers, scheduler=scheduler)
    md = write_sweep_report(prepared, rows, args.out, robust)
    statuses = {str(k): int(v) for k, v in rows["status"].value_counts().sort_index().items()}
    sys.stdout.write(
        f"sweep {prepared.spec.name}: {len(stats.computed)} scenarios run, {len(stats.skipped)} already done; "
        f"statuses {statuses}\nreport: {md}\n"
    )
    return EXIT_OK
