"""CLI command ``replay``: judge a plan by replaying a trace against it.

``neuscale-opt replay PLAN.json [--instance INSTANCE [--force]] [--trace TRACE] [--json PATH|-]
[--requests PATH|-] [--create-delay S] [--no-prewarm] [--cold-start] [--idle-fleet-power] [--admission all|plan]
[--routing plan|load] [--no-overflow] [--no-surge] [--stand-ins plan|fleet|off]``

PLAN.json is a plan in the allocation planner's JSON contract; INSTANCE the instance it was made
for (default: the instance the plan's provenance records, else the embedded default; an instance
whose SHA-256 is not the recorded one is refused unless ``--force``); TRACE a per-request trace
file (format detected from its header; default: the instance's trace). Prints the headline metrics
(one ``name value`` line each) unless the JSON goes to stdout. ``--json`` and ``--requests`` are
written both or neither. Exit codes: 0 replayed (whatever the SLO attainment), 2 bad
input (a plan that does not match the instance, an unreadable trace), with a one-line reason.
``--admission plan`` rejects at arrival the demand the plan leaves unserved (its ``unserved``
rows), so the replay does the work the plan accounts (README section 3); default ``all``.
``--routing load`` sends each request to the best vPod of all its class's groups instead of
splitting the class over them as the plan's rates say (default ``plan``; README section 2).
``--no-overflow`` keeps every request on its class's groups (by default a request those would
serve after its TTFT target goes to another class's vPod whose configuration serves its class, if
that one gives its first token in time). ``--no-surge`` turns off the surge guard (by default a
group whose requests come late beyond what the SLO-attainment target explains gets the vPods its
arrival rate asks for where the fleet has a free slice, up to twice its planned vPods, drained once
the surge is over or at the next epoch boundary; README section 2). ``--stand-ins`` says where the guard
may grow a group whose generation has no room, with another configuration that serves all its
classes: on the generations the plan deploys (``plan``, default), on any of the fleet's
(``fleet``), or nowhere (``off``: its own vPod type only).
"""

from __future__ import annotations

import argparse
import sys

from neuscale_opt.cli import Command
from neuscale_opt.errors import EXIT_OK

HEADLINE: tuple[str, ...] = (
    "requests",
    "slo_attainment",
    "energy_j",
    "cost_usd",
    "carbon_kg",
    "tokens_out",
    "tokens_per_joule",
    "tokens_per_usd",
    "goodput_tokens_out",
    "goodput_tokens_per_joule",
    "goodput_tokens_per_usd",
    "p50_ttft_s",
    "p99_ttft_s",
    "p50_tpot_s",
    "p99_tpot_s",
    "unserved",
    "chip_hours",
    "surge_vpods",
    "surge_chip_hours",
    "surge_standin_vpods",
)


def _replay_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan", metavar="PLAN.json", help="plan JSON (the planner's --json output)")
    p.add_argument(
        "--instance",
        default=None,
        help="instance TOML the plan was made for (default: the one the plan records, else the embedded default)",
    )
    p.add_argument("--force", action="store_true", help="replay on --instance even if it is not the plan's")
    p.add_argument("--trace", default=None, help="per-request trace file (default: the instance's trace)")
    p.add_argument("--json", default=None, metavar="PATH", help="write the summary as JSON to PATH ('-' = stdout)")
    p.add_argument("--requests", default=None, metavar="PATH", help="write per-request results as CSV ('-' = stdout)")
    p.add_argument(
        "--create-delay",
        type=float,
        default=None,
        metavar="S",
        help="seconds from an epoch boundary until an added vPod serves (default 30)",
    )
    p.add_argument(
        "--no-prewarm",
        action="store_true",
        help="create an epoch's new vPods at its boundary (serving after the delay), not the delay before it "
        "(default: the instance's [horizon] prewarm, on without it)",
    )
    p.add_argument("--cold-start", action="store_true", help="the vPods of epoch 0 also wait for the creation delay")
    p.add_argument(
        "--idle-fleet-power",
        action="store_true",
        help="also charge the static power of the fleet's healthy chips no vPod holds (default: not charged)",
    )
    p.add_argument(
        "--admission",
        choices=("all", "plan"),
        default="all",
        help="all: queue every arrival (default); plan: reject the share of each class the plan leaves unserved",
    )
    p.add_argument(
        "--routing",
        choices=("plan", "load"),
        default="plan",
        help="plan: split each class over its groups as the plan's rates say (default); load: the best vPod of any",
    )
    p.add_argument(
        "--no-overflow",
        action="store_true",
        help="keep every request on its class's groups (default: a request they would serve late may go to "
        "another class's vPod that serves its class in time)",
    )
    p.add_argument(
        "--no-surge",
        action="store_true",
        help="no run-time scale-up (default: a group whose requests come late gets the vPods its arrival rate "
        "asks for where the fleet has room, up to twice its planned vPods, until the surge is over or the "
        "next epoch boundary)",
    )
    p.add_argument(
        "--stand-ins",
        choices=("plan", "fleet", "off"),
        default="plan",
        help="where the surge guard may grow a group whose generation has no room, with another configuration "
        "that serves all its classes: the plan's generations (default), the fleet's, or nowhere",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_replay)


COMMANDS: dict[str, Command] = {
    "replay": Command(
        "replay a trace against a plan: per-request SLOs, energy, cost, carbon",
        _replay_args,
        description=__doc__.split("\n\n")[1],
    ),
}


def cmd_replay(args: argparse.Namespace) -> int:
    from neuscale_opt.cli.plan import read_plan
    from neuscale_opt.instance import load_instance
    from neuscale_opt.io import Outputs, check_output, frame_to_csv_text, to_json
    from neuscale_opt.provenance import check_instance, instance_path, instance_to_use
    from neuscale_opt.replay.simulate import ReplayOptions, instance_trace, replay

    check_output(args.json, "--json")
    check_output(args.requests, "--requests")
    data = read_plan(args.plan)
    path = instance_to_use(data, args.instance, where="--instance")
    inst = load_instance(path)
    check_instance(data, instance_path(path, inst), args.force, where="--instance")
    if args.trace is not None:
        from neuscale_opt.traces.loaders import load_trace_file

        trace = load_trace_file(args.trace)
    else:
        trace = instance_trace(inst)
    kw: dict = {
        "warm_start": not args.cold_start,
        "idle_fleet_power": args.idle_fleet_power,
        "admission": args.admission,
        "routing": args.routing,
        "overflow": not args.no_overflow,
        "surge": not args.no_surge,
        "standins": args.stand_ins,
        "prewarm": False if args.no_prewarm else None,
    }
    if args.create_delay is not None:
        kw["create_delay_s"] = args.create_delay
    from neuscale_opt.report.progress import progress_bar

    with progress_bar(total=inst.epochs.horizon or 0, desc="replay", quiet=args.quiet) as bar:
        res = replay(args.plan, inst, trace, ReplayOptions(**kw), progress=bar.update)
    with Outputs() as out:  # both or neither
        if args.json is not None:
            out.add(to_json(res.to_dict()), args.json, "--json")
        if args.requests is not None:
            out.add(frame_to_csv_text(res.requests), args.requests, "--requests")
    if args.json != "-" and args.requests != "-":
        keys = HEADLINE + (("rejected", "slo_attainment_admitted") if args.admission == "plan" else ())
        width = max(len(k) for k in keys)
        for k in keys:
            v = res.totals[k]
            sys.stdout.write(f"{k:<{width}}  {v:.6g}\n" if isinstance(v, float) else f"{k:<{width}}  {v}\n")
    return EXIT_OK
