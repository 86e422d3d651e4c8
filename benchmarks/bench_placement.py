"""Placement benchmarks: pattern generation and the placement MILP on a large fleet.

Run: ``.venv/bin/python benchmarks/bench_placement.py [--seed S] [--failed N] [--json PATH]``

1. Large fleet: 48 v5e pods, 8 v6e pods, one v4 pod of 64 cubes (16x16x16) and one v5p pod (16x20x28,
   140 cubes) = 27,392 chips, with ``--failed`` (default 300) failed chips at random. One epoch: every
   allowed shape of at most 256 chips, integer vPods ``N[c, s]`` up to a random demand, maximise a value
   slightly super-linear in chips (so large slices are wanted but do not always fit) subject to the
   pattern placement constraints. Target: proven gap < 0.1 % in < 5 s (pod states + patterns + build +
   solve + realisation). The realised placements go through the independent check.
2. Small fleet (3 v5e pods, two of them identical, and one v4 pod of 2 cubes): the pattern and the exact
   per-placement variants solved to optimality (gap 0), same optimum, times.
3. **Allocation MILP with placement** on the large fleet: Llama-3-70B, three request classes (short
   512/128, chat 2048/256, long 8192/512 tokens) at 12,000 / 6,000 / 1,200 req/s (262k: 0.4x that per chip),
   chips, energy objective, one epoch, ``placement = "pattern"``, relative gap 1e-3. Timed: the roofline
   coefficients, then ``context.prepare`` (usable configurations, pod states, patterns), the model build,
   the solve, the realisation of the placements, and the whole ``solve_milp`` call (which also runs the
   independent evaluation, placement check included). Compared with the count-only plan
   (``placement = "none"``). Target: proven gap < 0.1 % in < 5 s.
4. Allocation MILP on the small fleet of 2 (Llama-3-70B, demand near its capacity: 95 % of the largest
   multiple of 160 / 80 / 16 req/s that the pattern placement can serve, found by bisection, so the
   case stays near capacity whatever the calibrated coefficients make of fixed rates): ``pattern``
   and ``exact`` placement solved to optimality, same optimum, times.

Times are wall-clock, single-threaded HiGHS through Pyomo's ``appsi_highs``.

Measured (2 shared cores, load average 2.3-3.5 unless said; one run each, upper bounds under load):

* ``--fleet 262k --only-large`` (384 v5e + 256 v6e pods, 16 v4 and 8 v5p 64-cube pods, 300 failed
  chips), two runs at load 2.2-3.3: section 1 has 177 pod states in 54 pattern classes (22 v5e,
  19 v6e by damaged hosts up to a reflection of the host grid, 7 v4 and 6 v5p by healthy cubes; the
  3-D classes as knapsack rows), 1,869 integer variables; states 0.00 s, patterns 0.25-0.32 s, build
  0.05-0.08 s, solve 0.24-0.34 s (gap 0.066 %), realisation 2.0-3.0 s: **2.6-3.8 s in total**;
  17,030 vPods on 261,357 chips, independent check 0.8-1.3 s, no problem (the same placements, byte
  for byte, in two processes). Before these changes the same section ran for more than 15 minutes at
  load 5-8 (~50,000 pattern columns, one set per pod state) and its check took 18.7 s (networkx per
  vPod). Section 3: 997 integer variables, 122 rows; prepare 0.9-1.1 s, build 0.8-1.1 s, solve
  0.7-0.9 s, realise 0.9-1.5 s -> 3.2-4.5 s at proven gap 0.004 %; the whole ``solve_milp`` call with
  the evaluation 5.1-8.3 s; 24,266 vPods placed, evaluation feasible.
* default ``--fleet 27k``, section 1, interleaved with the previous code in one run (3 runs each,
  load 3.5-5.2, medians): total 5.69 s -> 2.98 s, independent check 3.98 s -> 0.19 s, the same
  optimum 35,195.028 (gap 0) with 2,219 instead of 4,685 integer variables. Section 3 on the 27k fleet
  is reported infeasible by the counting pre-check (class ``chat`` short by 9.9 req/s of the whole
  inventory), as on the previous code.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import pyomo.environ as pyo  # noqa: E402

from neuscale_opt.alloc.context import build_context, prepare  # noqa: E402
from neuscale_opt.alloc.evaluate import evaluate  # noqa: E402
from neuscale_opt.alloc.model import build_model  # noqa: E402
from neuscale_opt.alloc.options import PlanOptions  # noqa: E402
from neuscale_opt.alloc.placement import milp_placements  # noqa: E402
from neuscale_opt.alloc.plan import solve_milp  # noqa: E402
from neuscale_opt.alloc.solve import solve_model  # noqa: E402
from neuscale_opt.candidates import build_coefficients  # noqa: E402
from neuscale_opt.catalog import get_chip  # noqa: E402
from neuscale_opt.instance import parse_instance  # noqa: E402
from neuscale_opt.topology.check import check_placements  # noqa: E402
from neuscale_opt.topology.milp import demo_model, exact_choice, pattern_choice  # noqa: E402
from neuscale_opt.topology.patterns import fleet_placement_data, realize_generation  # noqa: E402
from neuscale_opt.topology.pods import pod_states  # noqa: E402
from neuscale_opt.topology.slices import allowed_shapes, canonical, shape_str  # noqa: E402

MAX_CHIPS = 256
GAP = 1e-3


def _instance(fleet: list[dict]):
    return parse_instance(
        {
            "name": "placement-bench",
            "model": {"name": "Llama-3-8B"},
            "fleet": fleet,
            "workload": {
                "classes": [{"name": "short", "input_tokens": 512, "output_tokens": 128}],
                "demand": [{"epoch": 0, "bucket": "short", "rate_rps": 10.0}],
            },
        }
    )


def _failures(rng: random.Random, dims: tuple[int, ...], n: int) -> list[list[int]]:
    out: set[tuple[int, ...]] = set()
    while len(out) < n:
        out.add(tuple(rng.randrange(d) for d in dims))
    return [list(c) for c in sorted(out)]


FLEETS: dict[str, list[tuple[str, tuple[int, ...]]]] = {
    # 48 v5e pods, 8 v6e pods, one v4 pod of 64 cubes, one v5p pod of 140 cubes: 27,392 chips
    "27k": [("tpu-v5e", (16, 16))] * 48
    + [("tpu-v6e", (16, 16))] * 8
    + [("tpu-v4", (16, 16, 16)), ("tpu-v5p", (16, 20, 28))],
    # 384 v5e pods, 256 v6e pods, 16 v4 and 8 v5p pods of 64 cubes (16x16x16): 2^18 = 262,144 chips
    "262k": [("tpu-v5e", (16, 16))] * 384
    + [("tpu-v6e", (16, 16))] * 256
    + [("tpu-v4", (16, 16, 16))] * 16
    + [("tpu-v5p", (16, 16, 16))] * 8,
}


def large_fleet(seed: int, failed: int, fleet_name: str = "27k"):
    """A fleet of :data:`FLEETS`; ``failed`` chips at random, spread over pods in proportion to
    their chips."""
    rng = random.Random(seed)
    pods = FLEETS[fleet_name]
    total = sum(math.prod(d) for _, d in pods)
    per_pod = [0] * len(pods)
    for _ in range(failed):
        r = rng.randrange(total)
        for i, (_, d) in enumerate(pods):
            if r < math.prod(d):
                per_pod[i] += 1
                break
            r -= math.prod(d)
    fleet: dict[str, list[dict]] = {}
    for (chip, dims), n in zip(pods, per_pod, strict=True):
        fleet.setdefault(chip, []).append({"dims": list(dims), "failed_chips": _failures(rng, dims, n)})
    return _instance([{"chip": c, "pods": p} for c, p in fleet.items()])


def small_fleet(seed: int):
    rng = random.Random(seed)
    v5e = [{"dims": [16, 16], "failed_chips": []}] * 2
    v5e.append({"dims": [16, 16], "failed_chips": _failures(rng, (16, 16), 4)})
    v4 = [{"dims": [4, 4, 8], "failed_chips": _failures(rng, (4, 4, 8), 2)}]
    return _instance([{"chip": "tpu-v5e", "pods": v5e}, {"chip": "tpu-v4", "pods": v4}])


def shapes_of_interest(chip: str) -> list[str]:
    spec = get_chip(chip)
    out = {shape_str(canonical(spec, s)) for s in allowed_shapes(chip) if math.prod(s) <= MAX_CHIPS}
    return sorted(out, key=lambda s: (math.prod(int(x) for x in s.split("x")), s))


def objective_data(inst, seed: int) -> tuple[dict, dict]:
    """Value per vPod (chips^1.05 x U[1, 1.2]) and a demand cap per (generation, shape) that asks for
    about 1.3 x the healthy chips in total, so that the mix has to be chosen."""
    rng = random.Random(seed + 1)
    value, upper = {}, {}
    for f in inst.fleet:
        shapes = shapes_of_interest(f.chip)
        budget = 1.3 * f.healthy_chips
        for s in shapes:
            chips = math.prod(int(x) for x in s.split("x"))
            value[(f.chip, s)] = chips**1.05 * (1.0 + 0.2 * rng.random())
            upper[(f.chip, s)] = max(1, round(budget / len(shapes) / chips * rng.uniform(0.5, 1.5)))
    return value, upper


def solve(m: pyo.ConcreteModel, gap: float = GAP, time_limit: float = 60.0) -> dict:
    opt = pyo.SolverFactory("appsi_highs")
    opt.config.time_limit = time_limit
    opt.config.mip_gap = gap
    opt.highs_options = {"threads": 1}
    t0 = time.perf_counter()
    res = opt.solve(m, load_solutions=True)
    wall = time.perf_counter() - t0
    ub, lb = res.problem.upper_bound, res.problem.lower_bound  # maximisation: bound = upper
    gap = (ub - lb) / max(abs(lb), 1e-9)
    return {"status": str(res.solver.termination_condition), "objective": lb, "bound": ub, "gap": gap, "solve_s": wall}


def run_large(seed: int, failed: int, fleet_name: str = "27k") -> dict:
    inst = large_fleet(seed, failed, fleet_name)
    t0 = time.perf_counter()
    groups = pod_states(inst)
    t1 = time.perf_counter()
    data = fleet_placement_data(groups, {f.chip: shapes_of_interest(f.chip) for f in inst.fleet})
    t2 = time.perf_counter()
    value, upper = objective_data(inst, seed)
    m = demo_model(data, value, upper, variant="pattern")
    t3 = time.perf_counter()
    sol = solve(m)
    t4 = time.perf_counter()
    pods, cubes = pattern_choice(m.placement, data)
    rows, alloc = [], {}
    for chip, d in data.items():
        counts = {s: round(pyo.value(m.N[c, s])) for c, s in value if c == chip}
        alloc.update({(0, chip, s): n for s, n in counts.items()})
        for pp in realize_generation(d, counts, pods[chip], cubes[chip]):
            rows.append({"epoch": 0, "pod": pp.pod, **pp.placement.row()})
    t5 = time.perf_counter()
    problems = check_placements(pd.DataFrame(rows), inst, alloc)
    t6 = time.perf_counter()
    n_chips = sum(sum(math.prod(p.dims) for p in f.pods) for f in inst.fleet)
    placed = sum(len(r["chips"]) for r in rows)
    return {
        "chips": n_chips,
        "failed_chips": sum(len(p.failed_chips) for f in inst.fleet for p in f.pods),
        "pod_states": len(groups),
        "patterns": {c: d.n_patterns for c, d in data.items()},
        "integer_vars": sum(1 for v in m.component_data_objects(pyo.Var) if v.is_integer()),
        "t_states_s": t1 - t0,
        "t_patterns_s": t2 - t1,
        "t_build_s": t3 - t2,
        **sol,
        "t_realize_s": t5 - t4,
        "t_total_s": t5 - t0,
        "t_check_s": t6 - t5,
        "vpods": len(rows),
        "chips_placed": placed,
        "check_problems": len(problems),
    }


def run_small(seed: int) -> dict:
    inst = small_fleet(seed)
    groups = pod_states(inst)
    data = fleet_placement_data(groups, {f.chip: shapes_of_interest(f.chip) for f in inst.fleet})
    value, upper = objective_data(inst, seed)
    out = {}
    for variant in ("pattern", "exact"):
        t0 = time.perf_counter()
        m = demo_model(data, value, upper, variant=variant)
        sol = solve(m, gap=0.0)
        n_vars = sum(1 for _ in m.component_data_objects(pyo.Var))
        if variant == "exact":
            assert exact_choice(m.placement)
        out[variant] = {**sol, "total_s": time.perf_counter() - t0, "vars": n_vars}
    out["same_optimum"] = abs(out["pattern"]["objective"] - out["exact"]["objective"]) <= 1e-6 * abs(
        out["exact"]["objective"]
    )
    return out


CLASSES = [
    {"name": "short", "input_tokens": 512, "output_tokens": 128},
    {"name": "chat", "input_tokens": 2048, "output_tokens": 256},
    {"name": "long", "input_tokens": 8192, "output_tokens": 512},
]
LARGE_RATES_RPS = {"short": 12_000.0, "chat": 6_000.0, "long": 1_200.0}


def with_demand(inst, rates: dict[str, float], max_chips: int = MAX_CHIPS):
    """The fleet of ``inst`` serving Llama-3-70B at ``rates`` (req/s per class, one epoch)."""
    raw = inst.model_dump(mode="python", exclude_none=True)
    raw["model"] = {"name": "Llama-3-70B"}
    raw["search"] = {"max_chips_per_vpod": max_chips}
    raw["workload"] = {
        "classes": CLASSES,
        "demand": [{"epoch": 0, "bucket": b, "rate_rps": r} for b, r in rates.items()],
    }
    return parse_instance(raw)


def run_alloc_large(seed: int, failed: int, gap: float = GAP, fleet_name: str = "27k") -> dict:
    # demand grows with the fleet; the 262k fleet has relatively fewer v5p chips, which carry most of the
    # long prompts, so it serves 0.4x the 27k fleet's rate per chip
    scale = sum(math.prod(d) for _, d in FLEETS[fleet_name]) / sum(math.prod(d) for _, d in FLEETS["27k"])
    scale *= 1.0 if fleet_name == "27k" else 0.4
    rates = {k: v * scale for k, v in LARGE_RATES_RPS.items()}
    inst = with_demand(large_fleet(seed, failed, fleet_name), rates)
    t0 = time.perf_counter()
    coeffs = build_coefficients(inst)
    t1 = time.perf_counter()
    opts = PlanOptions.from_instance(inst, placement="pattern", mip_gap=gap, time_limit_s=60.0)
    prep = prepare(coeffs, opts)
    t2 = time.perf_counter()
    ctx = build_context(coeffs, opts, 0, prep)
    m = build_model(ctx)
    t3 = time.perf_counter()
    res = solve_model(m, opts)
    t4 = time.perf_counter()
    n = {str(g): round(v) for g, v in res.values.get("n_vpods", {}).items() if round(v) > 0}
    placed = milp_placements(m, ctx, n)
    t5 = time.perf_counter()
    sol = solve_milp(coeffs, opts)  # the whole planner call: prepare, build, solve, realise, evaluate
    t6 = time.perf_counter()
    if not sol.totals:  # no plan: say why instead of timing nothing
        return {"status": sol.status, "diagnosis": sol.diagnosis, "t_solve_milp_s": t6 - t5}
    ev = evaluate(sol, coeffs)
    count_only = solve_milp(coeffs, opts.replace(placement="none"))
    data = ctx.placement
    return {
        "chips": sum(sum(math.prod(p.dims) for p in f.pods) for f in inst.fleet),
        "healthy_chips": sum(f.healthy_chips for f in inst.fleet),
        "failed_chips": sum(len(p.failed_chips) for f in inst.fleet for p in f.pods),
        "pod_states": sum(len(d.groups) for d in data.values()),
        "patterns": {c: d.n_patterns for c, d in data.items()},
        "shapes": {c: [shape_str(s) for s in d.shapes] for c, d in data.items()},
        "groups": len(ctx.groups),
        "integer_vars": sum(1 for v in m.component_data_objects(pyo.Var) if v.is_integer()),
        "rows": sum(1 for _ in m.component_data_objects(pyo.Constraint, active=True)),
        "t_coefficients_s": t1 - t0,
        "t_prepare_s": t2 - t1,
        "t_build_s": t3 - t2,
        "t_solve_s": t4 - t3,
        "t_realise_s": t5 - t4,
        "t_pipeline_s": t5 - t1,
        "t_solve_milp_s": t6 - t5,
        "solve_status": res.status,
        "status": sol.status,
        "objective": sol.objective_value,
        "bound": sol.bound,
        "gap": sol.gap,
        "vpods_placed": len(placed),
        "chips_by_version": sol.totals["chips_by_version"],
        "chips_held": sum(sol.totals["chips_by_version"].values()),
        "evaluation_feasible": ev.feasible,
        "evaluation_placement": ev.totals["placement"],
        "count_only_objective": count_only.objective_value,
        "count_only_chips": count_only.totals.get("chips_by_version"),
    }


SMALL_RATES_RPS = {"short": 160.0, "chat": 80.0, "long": 16.0}


def near_capacity(seed: int, rates: dict[str, float], share: float = 0.95, steps: int = 8):
    """The small fleet at ``share`` of the largest multiple of ``rates`` its pattern placement can serve.

    The multiple is found by bisection on [0, 1] (``steps`` count-only-sized MILPs with pattern
    placement, each well under a second), so the case stays near capacity, where placement decides,
    whatever the roofline coefficients of the day make of the fixed rates. Returns the instance, its
    coefficients and the multiple used."""
    lo, hi = 0.0, 1.0

    def feasible(scale: float) -> bool:
        inst = with_demand(small_fleet(seed), {k: v * scale for k, v in rates.items()})
        coeffs = build_coefficients(inst)
        opts = PlanOptions.from_instance(inst, placement="pattern", mip_gap=0.0)
        return solve_milp(coeffs, opts).status == "optimal"

    if feasible(hi):
        lo = hi
    else:
        for _ in range(steps):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if feasible(mid) else (lo, mid)
    scale = share * lo
    inst = with_demand(small_fleet(seed), {k: v * scale for k, v in rates.items()})
    return inst, build_coefficients(inst), scale


def run_alloc_small(seed: int) -> dict:
    inst, coeffs, scale = near_capacity(seed, SMALL_RATES_RPS)
    out: dict = {"rate_multiple": scale}
    for variant in ("none", "pattern", "exact"):
        opts = PlanOptions.from_instance(inst, placement=variant, mip_gap=0.0)
        t0 = time.perf_counter()
        prep = prepare(coeffs, opts)
        m = build_model(build_context(coeffs, opts, 0, prep))
        res = solve_model(m, opts)
        wall = time.perf_counter() - t0
        out[variant] = {
            "status": res.status,
            "objective": res.objective,
            "gap": res.gap,
            "vars": sum(1 for _ in m.component_data_objects(pyo.Var)),
            "rows": sum(1 for _ in m.component_data_objects(pyo.Constraint, active=True)),
            "total_s": wall,
        }
    out["same_optimum"] = abs(out["pattern"]["objective"] - out["exact"]["objective"]) <= 1e-9 * abs(
        out["exact"]["objective"]
    )
    return out


def _print_alloc_large(al: dict) -> None:
    print(
        f"allocation MILP + placement, large fleet: {al['chips']} chips ({al['failed_chips']} failed), "
        f"{al['pod_states']} pod states, patterns {al['patterns']}, {al['groups']} vPod groups, "
        f"{al['integer_vars']} integer vars, {al['rows']} rows"
    )
    print(
        f"  coefficients {al['t_coefficients_s']:.2f} s; prepare (states, patterns) {al['t_prepare_s']:.2f} s, "
        f"build {al['t_build_s']:.2f} s, solve {al['t_solve_s']:.2f} s, realise {al['t_realise_s']:.2f} s "
        f"-> {al['t_pipeline_s']:.2f} s; whole solve_milp call (with evaluation) {al['t_solve_milp_s']:.2f} s"
    )
    print(
        f"  {al['status']}, proven gap {100 * al['gap']:.4f} %, objective {al['objective']:.6g} J; "
        f"{al['vpods_placed']} vPods placed, chips held {al['chips_by_version']} = {al['chips_held']}; "
        f"evaluation feasible={al['evaluation_feasible']} ({al['evaluation_placement']})"
    )
    print(f"  count-only plan: objective {al['count_only_objective']:.6g} J, chips {al['count_only_chips']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--failed", type=int, default=300)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--fleet", choices=sorted(FLEETS), default="27k", help="the large fleet (default 27k)")
    ap.add_argument("--only-large", action="store_true", help="sections 1 and 3 only (the large fleet)")
    args = ap.parse_args(argv)
    large = run_large(args.seed, args.failed, args.fleet)
    print(
        f"large fleet: {large['chips']} chips, {large['failed_chips']} failed, {large['pod_states']} pod states, "
        f"patterns {large['patterns']}, {large['integer_vars']} integer vars"
    )
    print(
        f"  states {large['t_states_s']:.2f} s, patterns {large['t_patterns_s']:.2f} s, "
        f"build {large['t_build_s']:.2f} s, "
        f"solve {large['solve_s']:.2f} s ({large['status']}, gap {100 * large['gap']:.4f} %), "
        f"realise {large['t_realize_s']:.2f} s -> total {large['t_total_s']:.2f} s"
    )
    print(
        f"  {large['vpods']} vPods on {large['chips_placed']} chips; independent check "
        f"{large['t_check_s']:.2f} s, {large['check_problems']} problems"
    )
    small = run_small(args.seed) if not args.only_large else None
    for v in ("pattern", "exact") if small else ():
        s = small[v]
        print(
            f"small fleet {v:8s}: objective {s['objective']:.3f}, gap {100 * s['gap']:.4f} %, "
            f"{s['vars']} vars, build+solve {s['total_s']:.2f} s"
        )
    if small:
        print(f"  same optimum: {small['same_optimum']}")
    al = run_alloc_large(args.seed, args.failed, fleet_name=args.fleet)
    if "diagnosis" in al:
        print(f"allocation MILP + placement, large fleet: {al['status']} ({al['diagnosis']})")
    else:
        _print_alloc_large(al)
    asmall = run_alloc_small(args.seed) if not args.only_large else None
    for v in ("none", "pattern", "exact") if asmall else ():
        s = asmall[v]
        print(
            f"allocation MILP, small fleet, placement {v:8s}: {s['status']}, objective {s['objective']:.8g} J, "
            f"{s['vars']} vars, {s['rows']} rows, prepare+build+solve {s['total_s']:.2f} s"
        )
    if asmall:
        print(
            f"  demand {asmall['rate_multiple']:.3f} x {SMALL_RATES_RPS} req/s (95 % of the largest multiple "
            f"the pattern placement serves); same optimum (pattern vs exact): {asmall['same_optimum']}"
        )
    if args.json:
        out = {"large": large, "small": small, "alloc_large": al, "alloc_small": asmall}
        args.json.write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
