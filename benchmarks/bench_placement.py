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

Times are wall-clock, single-threaded HiGHS through Pyomo's ``appsi_highs``.
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


def large_fleet(seed: int, failed: int):
    """The 27,392-chip fleet; failures spread over pods in proportion to their chips."""
    rng = random.Random(seed)
    pods = [("tpu-v5e", (16, 16))] * 48 + [("tpu-v6e", (16, 16))] * 8
    pods += [("tpu-v4", (16, 16, 16)), ("tpu-v5p", (16, 20, 28))]
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


def run_large(seed: int, failed: int) -> dict:
    inst = large_fleet(seed, failed)
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--failed", type=int, default=300)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    large = run_large(args.seed, args.failed)
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
    small = run_small(args.seed)
    for v in ("pattern", "exact"):
        s = small[v]
        print(f"small fleet {v:8s}: objective {s['objective']:.3f}, gap {100 * s['gap']:.4f} %, "
              f"{s['vars']} vars, build+solve {s['total_s']:.2f} s")
    print(f"  same optimum: {small['same_optimum']}")
    if args.json:
        args.json.write_text(json.dumps({"large": large, "small": small}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
