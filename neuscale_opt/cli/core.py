"""Core subcommands: ``validate``, ``candidates``, ``roofline`` and ``catalog``."""

from __future__ import annotations

import argparse
import math
import sys

from neuscale_opt.cli import Command
from neuscale_opt.errors import InputError

CANDIDATE_COLUMNS = [
    "config_id",
    "bucket",
    "phase",
    "chip",
    "shape",
    "chips_per_vpod",
    "tp",
    "pp",
    "ep",
    "batch",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "max_rate_rps",
    "tokens_per_s",
    "energy_j_per_req",
    "dyn_energy_j_per_req",
    "cost_usd_per_req",
    "embodied_kg_per_req",
    "bound",
    "memory_ok",
    "slo_ok",
    "pareto_energy",
    "pareto_cost",
]


def _validate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("instance", nargs="?", help="instance TOML (default: the embedded default)")
    p.add_argument("--json", metavar="PATH|-", help="write the normalised instance as JSON")
    p.set_defaults(func=cmd_validate)


def _candidates_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("instance", nargs="?", help="instance TOML (default: the embedded default)")
    p.add_argument("--json", metavar="PATH|-", help="write the candidates as JSON")
    p.add_argument("--csv", metavar="PATH|-", help="write the candidates as CSV")
    p.add_argument("--all", action="store_true", help="every candidate, not only the Pareto-optimal ones")
    p.set_defaults(func=cmd_candidates)


def _roofline_args(p: argparse.ArgumentParser) -> None:
    from neuscale_opt.catalog import ENERGY_PROFILES

    p.add_argument("--model", required=True)
    p.add_argument("--chip", required=True)
    p.add_argument("--chips", type=int, required=True, help="chips in the vPod")
    p.add_argument("--shape", help="slice shape AxB[xC] (default: the smallest allowed with --chips chips)")
    p.add_argument("--tp", type=int, help="tensor parallelism (default chips / pp)")
    p.add_argument("--pp", type=int, default=1, help="pipeline parallelism (default 1)")
    p.add_argument("--ep", type=int, default=1, help="expert parallelism: 1 or tp (MoE only)")
    p.add_argument("--phase", choices=["prefill", "decode"], required=True)
    p.add_argument("--seq-len", type=int, required=True, help="prefill: prompt tokens; decode: context tokens")
    p.add_argument("--output-len", type=int, default=0, help="decode: tokens still to generate (memory check)")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--profile", choices=ENERGY_PROFILES, default="neuscale", help="energy profile")
    p.add_argument("--attn-dp", action="store_true", help="MLA data-parallel attention layout (needs --ep = tp)")
    p.add_argument(
        "--hop-latency-s",
        type=float,
        default=None,
        help="collective step latency in s (default: the calibration profile's, else the roofline's default)",
    )
    p.add_argument("--hbm-usable-fraction", type=float, default=None, help="usable share of HBM (default 0.9)")
    p.add_argument("--calibration", default="default", help="calibration profile: default, none or a TOML path")
    p.add_argument("--json", metavar="PATH|-", default="-", help="where to write the JSON (default stdout)")
    p.set_defaults(func=cmd_roofline)


def _calibrate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("measurements", help="measurements CSV (columns of data/measured/README.md)")
    p.add_argument("--out", metavar="PROFILE.toml", help="write the profile (default: print the summary only)")
    p.add_argument("--no-cv", action="store_true", help="skip the leave-one-source-out cross-validation")
    p.set_defaults(func=cmd_calibrate)


def _catalog_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("table", choices=["chips", "models", "energy_profiles"])
    p.add_argument("--csv", metavar="PATH|-", default="-")
    p.set_defaults(func=cmd_catalog)


def _instances_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="PATH|-", help="write the list as JSON")
    p.set_defaults(func=cmd_instances)


def _init_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", help="a shipped instance (see neuscale-opt instances)")
    p.add_argument("dir", metavar="DIR", help="folder to copy it into (created if missing)")
    p.set_defaults(func=cmd_init)


COMMANDS: dict[str, Command] = {
    "validate": Command("check an instance file; --json prints it normalised", _validate_args),
    "candidates": Command("list candidate vPod configurations and the Pareto fronts", _candidates_args),
    "roofline": Command("roofline of one configuration and one step", _roofline_args),
    "calibrate": Command("fit the roofline's calibration profile to measured points", _calibrate_args),
    "catalog": Command("list the shipped chips, models or energy profiles", _catalog_args),
    "instances": Command("list the shipped instances: name, description, path", _instances_args),
    "init": Command("copy a shipped instance and its data files into a folder, ready to run", _init_args),
}


def cmd_validate(args: argparse.Namespace) -> int:
    from neuscale_opt.instance import Instance, load_instance
    from neuscale_opt.io import check_output, write_json

    check_output(args.json, "--json")
    # the one loader: instances, profile TOMLs (as import-melange writes) and Mélange JSONs
    inst = load_instance(args.instance, profile=True)
    if not isinstance(inst, Instance):
        accs = ", ".join(a.name for a in inst.profile.accelerators)
        if args.json:
            write_json(inst.model_dump(mode="json"), args.json, "--json")
        else:
            print(f"{args.instance}: ok (profile instance {inst.name}; accelerators: {accs})")
        return 0
    if args.json:
        write_json(inst.normalised(), args.json, "--json")
    else:
        chips = ", ".join(f"{k} {v}" for k, v in inst.healthy_chips().items())
        print(f"{inst.path}: ok ({inst.model.name}; healthy chips: {chips})")
    return 0


def cmd_candidates(args: argparse.Namespace) -> int:
    from neuscale_opt.candidates import candidates
    from neuscale_opt.catalog import energy_spec, get_chip
    from neuscale_opt.instance import load_instance
    from neuscale_opt.io import Outputs, check_output, frame_to_csv_text, to_json
    from neuscale_opt.roofline import chip_rooflines

    check_output(args.json, "--json")
    check_output(args.csv, "--csv")
    inst = load_instance(args.instance)
    cs = candidates(inst)
    t = cs.table
    shown = t if args.all else t[t["pareto_energy"] | t["pareto_cost"]]
    shown = shown.sort_values(["bucket", "phase", "e2e_s", "ttft_s", "tpot_s", "config_id"], kind="mergesort")
    shown = shown[CANDIDATE_COLUMNS].reset_index(drop=True)
    with Outputs() as out:  # both or neither
        if args.json:
            out.add(
                to_json(
                    {
                        "instance": inst.name,
                        "model": cs.model.name,
                        "slo": cs.slo_note,
                        "notes": list(cs.notes),
                        "buckets": cs.buckets.to_dict("records"),
                        "evaluated": int(len(t)),
                        "feasible": int(t["feasible"].sum()),
                        "rooflines": [
                            chip_rooflines(get_chip(c), energy_spec(get_chip(c), inst.energy.profile))
                            for c in inst.chip_names
                        ],
                        "candidates": shown.to_dict("records"),
                    }
                ),
                args.json,
                "--json",
            )
        if args.csv:
            out.add(frame_to_csv_text(shown), args.csv, "--csv")
    if not args.json and not args.csv:
        _print_summary(inst.name, cs, shown)
    return 0


def _print_summary(name: str, cs, shown) -> None:
    import pandas as pd

    t = cs.table
    out = sys.stdout
    out.write(f"instance {name}: {cs.model.name}; SLO {cs.slo_note}\n")
    for note in cs.notes:
        out.write(f"note: {note}\n")
    out.write(
        f"{len(t)} candidates evaluated, {int(t['memory_ok'].sum())} fit in memory, "
        f"{int(t['feasible'].sum())} also meet the SLO; Pareto-optimal shown: {len(shown)}\n\n"
    )
    cols = [
        "bucket",
        "phase",
        "chip",
        "shape",
        "tp",
        "pp",
        "batch",
        "ttft_s",
        "tpot_s",
        "e2e_s",
        "max_rate_rps",
        "energy_j_per_req",
        "cost_usd_per_req",
        "bound",
    ]
    with pd.option_context("display.width", 200, "display.max_rows", 400, "display.float_format", "{:.4g}".format):
        out.write(shown[cols].to_string(index=False) + "\n")


def cmd_roofline(args: argparse.Namespace) -> int:
    from neuscale_opt.calibrate import chip_calibration
    from neuscale_opt.candidates import slice_shapes
    from neuscale_opt.catalog import energy_spec, get_chip, get_model
    from neuscale_opt.io import check_output, write_json
    from neuscale_opt.roofline import (
        BOUNDS,
        HBM_USABLE_FRACTION_DEFAULT,
        for_slice,
        hw_rows_for,
        steady_state_energy_j,
        step_cost,
        vpod_nodes,
    )

    check_output(args.json, "--json")
    model = get_model(args.model, where="--model")
    chip = get_chip(args.chip, where="--chip")
    for name in ("chips", "batch", "seq_len", "pp", "ep"):
        if getattr(args, name) <= 0:
            raise InputError(f"must be > 0, got {getattr(args, name)}", where=f"--{name.replace('_', '-')}")
    if args.output_len < 0:
        raise InputError("must be >= 0", where="--output-len")
    allowed = slice_shapes(chip, chip.pod_chips)
    if args.shape:
        try:
            shape = tuple(int(x) for x in args.shape.lower().split("x"))
        except ValueError:
            raise InputError(f"{args.shape!r} is not AxB or AxBxC", where="--shape") from None
        if tuple(sorted(shape)) not in {tuple(sorted(s)) for s in allowed}:
            raise InputError(
                f"shape {args.shape} is not allowed on {chip.name}; allowed: {' '.join(chip.slice_shapes)}",
                where="--shape",
            )
        if math.prod(shape) != args.chips:
            raise InputError(f"shape {args.shape} has {math.prod(shape)} chips, not {args.chips}", where="--shape")
    else:
        # The smallest allowed slice with that many chips; a chip count no slice has (a single v5p,
        # say) is still computed, as a what-if, with ``slice_allowed: false``.
        fits = [s for s in allowed if math.prod(s) == args.chips]
        shape = fits[0] if fits else (args.chips,)
    tp = args.tp if args.tp is not None else args.chips // args.pp
    if tp * args.pp != args.chips:
        raise InputError(f"tp x pp = {tp} x {args.pp} != {args.chips} chips", where="--tp")
    if args.ep not in (1, tp) or (args.ep > 1 and not model.is_moe):
        raise InputError("must be 1, or equal to tp for an MoE model", where="--ep")
    if args.attn_dp and not (model.is_mla and args.ep == tp > 1):
        raise InputError("needs an MLA model with --ep equal to tp > 1", where="--attn-dp")
    if args.hop_latency_s is not None and not (math.isfinite(args.hop_latency_s) and args.hop_latency_s >= 0):
        raise InputError("must be a finite number >= 0", where="--hop-latency-s")
    hbm_frac = HBM_USABLE_FRACTION_DEFAULT if args.hbm_usable_fraction is None else args.hbm_usable_fraction
    if not (math.isfinite(hbm_frac) and 0 < hbm_frac <= 1):
        raise InputError("must be in (0, 1]", where="--hbm-usable-fraction")
    es = energy_spec(chip, args.profile)
    cal = chip_calibration(args.calibration, chip, hop_latency_s=args.hop_latency_s)
    hop_s = cal.hop_latency_s
    hw = hw_rows_for(chip, es, 0.0, 1.0, hbm_frac, hop_s, cal.eff, cal.layer_overhead_s, cal.ici_serial)
    hw = for_slice(hw, chip, shape, tp)
    B = float(args.batch)
    nodes = vpod_nodes(chip, args.chips)
    if nodes > 1 and (tp > chip.pod_chips or args.pp % nodes):
        raise InputError(
            f"{args.chips} {chip.name} span {nodes} nodes: tp must stay within a node of {chip.pod_chips} "
            f"and pp be a multiple of {nodes}",
            where="--tp",
        )
    if args.phase == "prefill":
        sc = step_cost(model, hw, tp, args.pp, args.ep, B, float(args.seq_len), 0.0, nodes=nodes, attn_dp=args.attn_dp)
        tokens = B * args.seq_len
    else:
        sc = step_cost(
            model,
            hw,
            tp,
            args.pp,
            args.ep,
            B,
            1.0,
            float(args.seq_len),
            mem_context=float(args.seq_len + args.output_len),
            nodes=nodes,
            attn_dp=args.attn_dp,
        )
        tokens = B
    latency = float(sc.latency_s)
    # steady state (R13): pp micro-batches in flight, one completes every t_stage
    energy_j = float(steady_state_energy_j(sc, es.static_w, args.chips))
    static_j = energy_j - float(sc.energy_dyn_j)
    price = chip.price_usd_per_chip_hour
    res = {
        "model": model.name,
        "chip": chip.name,
        "shape": "x".join(map(str, shape)),
        "slice_allowed": tuple(sorted(shape)) in {tuple(sorted(a)) for a in allowed},
        "chips": args.chips,
        "tp": tp,
        "pp": args.pp,
        "ep": args.ep,
        "phase": args.phase,
        "batch": args.batch,
        "seq_len": args.seq_len,
        "energy_profile": es.profile,
        "latency_s": latency,
        "t_compute_s": float(sc.t_compute_s),
        "t_hbm_s": float(sc.t_hbm_s),
        "t_ici_s": float(sc.t_ici_s),
        "throughput_tokens_s": tokens * args.pp / (args.pp * float(sc.t_stage_s)),
        "energy_j": energy_j,
        "energy_dynamic_j": float(sc.energy_dyn_j),
        "energy_static_j": static_j,
        "energy_j_per_token": energy_j / tokens,
        "attn_dp": bool(args.attn_dp),
        "hop_latency_s": hop_s,
        "calibration": cal.note,
        "cost_usd": price * args.chips * float(sc.t_stage_s) / 3600.0 if not math.isnan(price) else None,
        "bound": str(BOUNDS[int(sc.bound)]),
        "memory_ok": bool(sc.mem_bytes_per_chip <= hw.hbm_cap),
        "memory_bytes_per_chip": float(sc.mem_bytes_per_chip),
        "hbm_capacity_bytes": float(hw.hbm_cap),
        "flops": float(sc.flops),
        "hbm_bytes": float(sc.hbm_bytes),
        "ici_bytes": float(sc.ici_bytes),
        "dcn_bytes": float(sc.dcn_bytes),
        "nodes": nodes,
    }
    write_json(res, args.json, "--json")
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
    from neuscale_opt.catalog import catalog_frames
    from neuscale_opt.io import check_output, write_csv

    check_output(args.csv, "--csv")
    write_csv(catalog_frames()[args.table], args.csv, "--csv")
    return 0


def cmd_instances(args: argparse.Namespace) -> int:
    from neuscale_opt.io import check_output, write_json
    from neuscale_opt.shipped import shipped_instances

    check_output(args.json, "--json")
    rows = shipped_instances()
    if args.json is not None:
        write_json([{"name": r.name, "description": r.description, "path": str(r.path)} for r in rows], args.json)
        return 0
    width = max(len(r.name) for r in rows)
    for r in rows:
        sys.stdout.write(f"{r.name:<{width}}  {r.description}\n{'':<{width}}  {r.path}\n")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from neuscale_opt.shipped import copy_instance

    target = copy_instance(args.name, args.dir)
    sys.stdout.write(f"{target}\n")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from neuscale_opt.calibrate import calibrate, profile_toml, summary_table
    from neuscale_opt.io import check_output, emit

    check_output(args.out, "--out")
    cal = calibrate(args.measurements, cross_validate=not args.no_cv)
    sys.stdout.write(summary_table(cal))
    if args.out:
        emit(profile_toml(cal), args.out, "--out")
    return 0
