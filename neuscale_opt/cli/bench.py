"""``neuscale-opt bench``: every method on every instance, one table (:mod:`neuscale_opt.report.bench`)."""

from __future__ import annotations

import argparse
import sys

from neuscale_opt.cli import Command
from neuscale_opt.errors import InputError


def _bench_args(p: argparse.ArgumentParser) -> None:
    from neuscale_opt.alloc.options import METHODS
    from neuscale_opt.planning import HORIZON_POLICIES

    policies = ",".join(HORIZON_POLICIES)
    p.add_argument("instances", nargs="*", help="instance TOML files (default: the embedded default)")
    p.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated, from {','.join(METHODS)} (default all four) and the horizon policies {policies}",
    )
    p.add_argument("--replay", action="store_true", help="also replay each plan against the trace")
    p.add_argument("--json", metavar="PATH|-", help="write the table as JSON")
    p.add_argument("--md", metavar="PATH|-", help="write the table as Markdown")
    p.add_argument("--csv", metavar="PATH|-", help="write the table as CSV")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from neuscale_opt.io import Outputs, check_output, frame_to_csv_text, to_json
    from neuscale_opt.report.bench import METHODS, run_bench, to_markdown
    from neuscale_opt.report.progress import progress_bar

    for flag in ("json", "md", "csv"):
        check_output(getattr(args, flag), f"--{flag}")
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise InputError(f"unknown method {bad[0] if bad else ''!r}; known: {', '.join(METHODS)}", where="--methods")
    paths: list[str | None] = list(args.instances) or [None]
    with progress_bar(total=len(paths) * len(methods), desc="bench", quiet=args.quiet) as bar:
        notes: list[str] = []
        df = run_bench(paths, methods, replay=args.replay, progress=bar, notes=notes)
    for note in notes:
        print(f"neuscale-opt: note: {note}", file=sys.stderr)
    with Outputs() as out:  # all or none
        out.add(to_json({"rows": df.to_dict("records")}), args.json, "--json")
        out.add(to_markdown(df), args.md, "--md")
        out.add(frame_to_csv_text(df), args.csv, "--csv")
        if args.json is None and args.md is None and args.csv is None:
            out.add(to_markdown(df), "-")
    return 0


COMMANDS: dict[str, Command] = {
    "bench": Command("run methods on instances and tabulate objective, gap, time", _bench_args),
}
