"""Our MILP against Mélange's own ILP (PuLP + CBC) on Mélange configurations.

Run: ``.venv/bin/python benchmarks/bench_melange_ilp.py [--repeat N] [--cbc-time-limit S] [--json PATH]``

Mélange's ILP, as its paper (Griggs et al., "Mélange: Cost Efficient Large Language Model Serving by
Exploiting GPU Heterogeneity", section 5) and the ``melange-release`` README describe it, written
here from that description:

* every request bucket (input size i, output size j) carries ``rate x workload_distribution[i][j]``
  req/s, cut into ``slice_factor`` equal slices;
* a binary ``A[b, s, g]`` assigns slice s of bucket b to GPU type g, each slice to exactly one type
  (a type whose throughput for the bucket is 0 cannot take it);
* an integer ``B[g]`` counts the GPUs of type g; the slices on a type add up their fractional loads
  ``slice rate / tputs[g][b]`` and must fit: ``sum_{b,s} A[b,s,g] slice_rate_b / tput_{g,b} <= B[g]``;
* minimise the hourly cost ``sum_g cost_g B[g]``.

It is solved by PuLP's bundled CBC (single thread, ``--cbc-time-limit`` seconds, default 60: a
run stopped there is reported with CBC's status). Ours is :func:`neuscale_opt.alloc.plan.plan` on
the imported configuration (pooled, cost, utilisation cap 1, the same slice factor), the whole
in-process call: context, Pyomo model, HiGHS, independent evaluation.

Checks: (1) both reproduce Mélange's published example optimum, 6.70 USD/h
(``instances/alloc/melange_example.json``, slice factor 1); (2) on generated configurations (6 x 6
buckets x 4 GPU types at slice factors 1, 2, 4, 8; 10 x 10 buckets x 8 types at slice factor 8)
ours is never slower, at least 10x faster wherever CBC takes more than 1 s, and its optimum is equal
or better (lower). Times are medians over ``--repeat`` interleaved runs in one process (ratios in
one run); runs that hit CBC's time limit are not repeated.

History (medians over alternating runs, shared 2-core machine): ours 49 / 77 / 80 / 104 / 208 ms
at S = 1 / 2 / 4 / 8 / 10 x 10 x 8 before the recorded-rows step; 21-28 / 25-32 / 25-37 / 24-27 /
66-83 ms at ``9eb37b9`` (2026-12-02 00:05, load 0.6-1.8), 0.54-0.83x behind CBC at S = 1 and 2,
8.0-9.9x on 10 x 10 x 8.

Measured 2026-12-02 02:06-02:07 UTC, main's code (``3bbfca6``) and this one (``2c6e096``: the
planner's working tables read as numpy columns, ``alloc/table.py``, DataFrames built only when a
reader asks; monomial-term model rows; recorded rows compiled in one pass; the allocations table
built once; same models and HiGHS options, every shipped and generated plan and the HiGHS arrays
hashed identical) run alternately, four runs each (``--repeat 5``), load average 0.7-0.9. Median
over the runs of the median wall ms, main -> this (CBC in this code's runs): S = 1 30.1 -> 20.9
(18.2), S = 2 31.1 -> 30.1 (30.6), S = 4 30.1 -> 30.4 (44.9), S = 8 32.3 -> 28.4 (85.6),
10 x 10 x 8 82.8 -> 85.4 (858). Ratios (CBC / ours, per run): S = 1 0.50-0.85x -> 0.68-1.05x
(median 0.82x: still behind), S = 2 0.82-0.96x -> 0.97-1.12x (median 1.00x), S = 4 1.34-2.09x,
S = 8 2.87-3.53x, 10 x 10 x 8 7.1-11.5x -> 8.3-12.0x (median 11.0x). An earlier alternating round
(01:59-02:00, load 0.9-1.0, before the last step) gave S = 1 24.8 -> 19.0 ms (0.90x), S = 2
36.8 -> 26.0 ms (1.20x), 10 x 10 x 8 95.6 -> 75.5 ms (11.2x).

Where a 6 x 6 S = 1 call goes (medians of 40 calls, fresh coefficients, load 1.0): HiGHS 6.0 ms
(a root node without LP iterations: its fixed set-up), ``prepare`` 1.6 ms (this benchmark builds
new coefficients for every call, so the prepared-table reuse of ``context.prepare`` does not
apply), the epoch context 0.5 ms, the Pyomo model 2.2 ms and its rows 1.1 ms, the assembly 5.0 ms
of which the independent evaluation 2.5 ms; about 18 ms a call in all (in the benchmark, which
alternates with CBC runs, 19-21 ms). HiGHS options were tried on these configurations: presolve
off is slower; feasibility jump off is faster at S = 2 (about 8.7 -> 3.4 ms) but changes the
returned plan among equal-cost optima (on shipped instances too), so it is not used; symmetry
detection, heuristic effort, ZI rounding/shifting, root reduced-cost and restarts off gave no
measurable gain.

Again on a fresh clone of ``7299872`` (2026-12-02 02:32 UTC, load 0.7-0.9), three runs of
``--repeat 7``, CBC / ours per run: S = 1 0.8-0.9x (ours 21-26 ms, CBC 18-21 ms), S = 2 0.9-1.0x,
S = 4 1.5-1.8x, S = 8 3.2-3.9x, 10 x 10 x 8 7.5-12.0x (ours 67-118 ms, CBC 807-880 ms). HiGHS
alone on the S = 1 model (292 columns, 184 rows; 40 rows and 148 columns after its presolve, solved
at the root with no LP iteration) takes about 9 ms a run in that process, half of CBC's whole call.

2026-12-02 03:56-04:59 UTC, after the configuration table is read once per coefficient bundle
(``alloc.table.configs_table``, shared by the preparation and the evaluator; about 0.6 ms of the
plan in an instrumented split): ``--repeat 7`` and ``--repeat 9`` runs at load 0.9-1.6, CBC / ours
at S = 1 0.9-1.0x (ours 12.0-16.0 ms, CBC 12.1-14.1 ms), S = 2 1.1x, S = 4 1.5x, S = 8 3.1x,
10 x 10 x 8 9.7x (CBC 0.49 s: under 1 s, so the 10x rule does not apply to it). An S = 1 call,
split (instrumented, load about 1.5, 13.6 ms in all): HiGHS's run 4.0-4.3 ms (its options change
nothing: 5.7-6.0 ms each under load, against 1.5 ms for the LP relaxation alone), the Pyomo model
1.6-1.7 ms and its rows 0.7-0.8 ms, the preparation 1.1-1.2 ms, the evaluation 1.5 ms (2.1 ms
before), the allocations table 0.6-0.7 ms, one garbage collection of the model's cycles (0.7-2 ms,
not avoidable by freezing the older objects: it is a young-generation collection). At S = 1 the
benchmark read "ok" (1.0x) in two of four runs of this code and 0.9x in the other two: parity, not
yet "never slower".

2026-12-02 15:27-15:30 UTC (``5da801c``, load 0.9-1.1), three runs (``--repeat 5``, ``7``, ``7``),
CBC / ours per run: S = 1 1.1x, 1.2x, 1.2x (ours 11.9-14.5 ms, CBC 13.0-17.0 ms), S = 2 1.2-1.5x,
S = 4 1.7-2.2x, S = 8 3.4-4.2x, 10 x 10 x 8 10.3-10.7x (ours 42-48 ms, CBC 0.44-0.51 s); every
row "optimum ok, speed ok" in all three. Since the runs above the collector is paused over the
whole epoch plan (``1fb773f``: the young-generation collection of 0.7-2 ms above; 1.1-1.3x against
1.0x then, in 15 interleaved runs each); the rest of the step from 21-26 ms is the machine's load.

2026-12-05 (another host, ``e48b0b3``, pulp 3.3.2, load 0.3, ``--repeat 3``): ours 7.9 / 9.6 / 9.9 /
9.6 / 31.2 ms at S = 1 / 2 / 4 / 8 / 10 x 10 x 8, CBC / ours 1.1x / 1.3x / 1.9x / 3.7x / 10.4x (CBC
0.32 s on 10 x 10 x 8); the published example 6.70 USD/h on both; every row "optimum ok, speed ok".
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pulp  # noqa: E402
from bench_alloc import MELANGE_PRICES, melange_sized_config  # noqa: E402

from neuscale_opt.alloc.melange import MelangeConfig, load_melange, melange_coefficients  # noqa: E402
from neuscale_opt.alloc.options import PlanOptions  # noqa: E402
from neuscale_opt.alloc.plan import plan  # noqa: E402

PUBLISHED_EXAMPLE_USD_H = 6.70  # Mélange's README, melange/config/example.json at slice factor 1

# Eight GPU types for the larger configurations: the four of bench_alloc, and four more between
# and beyond them (price USD/h; speed on short requests, decay with size).
EIGHT_GPUS = {
    **{g: (MELANGE_PRICES[g], s) for g, s in {"L4": (1.0, 0.55), "A10G": (1.3, 0.6), "A100-80GB": (4.0, 0.85),
                                               "H100": (7.0, 0.9)}.items()},
    "T4": (0.53, (0.6, 0.5)),
    "L40S": (1.86, (2.2, 0.7)),
    "A100-40GB": (3.1, (3.4, 0.8)),
    "H200": (9.2, (8.5, 0.92)),
}  # fmt: skip


def generated_config(n: int, gpus: int, slice_factor: int) -> MelangeConfig:
    """An n x n configuration on 4 (``bench_alloc``'s) or 8 GPU types, deterministic throughputs."""
    if gpus == 4 and n == 6:
        return melange_sized_config(slice_factor)
    info: dict[str, Any] = {}
    for name, (price, (base, decay)) in list(EIGHT_GPUS.items())[:gpus]:
        scale = 6.0 / n  # the same size range as the 6 x 6 grid, in finer steps
        tputs = [
            [round(base * 40 * decay ** (scale * (i + 1.5 * j)) / (1 + 0.2 * scale * i), 4) for j in range(n)]
            for i in range(n)
        ]
        info[name] = {"cost": price, "tputs": tputs}
    weights = [[(i + 1) * (n - j) for j in range(n)] for i in range(n)]
    total = sum(map(sum, weights))
    dist = [[w / total for w in row] for row in weights]
    return MelangeConfig.model_validate(
        {"gpu_info": info, "workload_distribution": dist, "total_request_rate": 60.0, "slice_factor": slice_factor}
    )


def melange_ilp(cfg: MelangeConfig, slice_factor: int, time_limit: float) -> dict[str, Any]:
    """Mélange's ILP (module docstring) in PuLP, solved by CBC; wall time of build + solve."""
    t0 = time.perf_counter()
    prob = pulp.LpProblem("melange", pulp.LpMinimize)
    gpus = sorted(cfg.gpu_info)
    dist = cfg.workload_distribution
    rate = float(cfg.total_request_rate)
    count = {g: pulp.LpVariable(f"B_{k}", lowBound=0, cat="Integer") for k, g in enumerate(gpus)}
    load: dict[str, list[Any]] = {g: [] for g in gpus}
    for i, row in enumerate(dist):
        for j, share in enumerate(row):
            slice_rate = rate * float(share) / slice_factor
            if slice_rate <= 0:
                continue
            able = [g for g in gpus if float(cfg.gpu_info[g].tputs[i][j]) > 0]
            for s in range(slice_factor):
                a = {g: pulp.LpVariable(f"A_{i}_{j}_{s}_{gpus.index(g)}", cat="Binary") for g in able}
                prob += pulp.lpSum(a.values()) == 1, f"slice_{i}_{j}_{s}"
                for g, var in a.items():
                    load[g].append((slice_rate / float(cfg.gpu_info[g].tputs[i][j])) * var)
    for k, g in enumerate(gpus):
        prob += pulp.lpSum(load[g]) <= count[g], f"capacity_{k}"
    prob += pulp.lpSum(float(cfg.gpu_info[g].cost) * count[g] for g in gpus)
    solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit, threads=1)
    prob.solve(solver)
    seconds = time.perf_counter() - t0
    status = pulp.LpStatus[prob.status]
    obj = pulp.value(prob.objective)
    # CBC ends a time-limited run with status "Optimal" when it holds an incumbent: tell them apart
    hit_limit = seconds >= time_limit * 0.98
    return {
        "status": "time_limit" if hit_limit and status == "Optimal" else status.lower(),
        "usd_per_h": float(obj) if obj is not None else float("nan"),
        "seconds": seconds,
        "gpus": {g: int(round(count[g].value() or 0)) for g in gpus},
    }


def ours(cfg: MelangeConfig, slice_factor: int) -> dict[str, Any]:
    coeffs = melange_coefficients(cfg)
    opts = PlanOptions(objective="cost", variant="pooled", util_cap=1.0, slice_factor=slice_factor, threads=1)
    t0 = time.perf_counter()
    sol = plan(coeffs, opts, "milp")
    seconds = time.perf_counter() - t0
    return {
        "status": sol.status,
        "usd_per_h": float(sol.objective_value),
        "seconds": seconds,
        "gpus": dict(sol.totals.get("chips_by_version", {})),
    }


def compare(name: str, cfg: MelangeConfig, sf: int, repeat: int, limit: float) -> dict[str, Any]:
    ours(cfg, sf)  # warm (imports, first HiGHS instance)
    mine, theirs = [], []
    for k in range(repeat):
        mine.append(ours(cfg, sf))
        if k == 0 or theirs[-1]["seconds"] < limit * 0.5:  # a run at CBC's time limit is not repeated
            theirs.append(melange_ilp(cfg, sf, limit))
    t_ours = statistics.median(r["seconds"] for r in mine)
    t_cbc = statistics.median(r["seconds"] for r in theirs)
    o, c = mine[-1], theirs[-1]
    row = {
        "config": name,
        "slice_factor": sf,
        "ours_status": o["status"],
        "ours_usd_per_h": o["usd_per_h"],
        "ours_s": t_ours,
        "cbc_status": c["status"],
        "cbc_usd_per_h": c["usd_per_h"],
        "cbc_s": t_cbc,
        "cbc_runs": len(theirs),
        "speedup": t_cbc / t_ours,
        "ours_gpus": o["gpus"],
        "cbc_gpus": c["gpus"],
    }
    row["optimum_ok"] = o["usd_per_h"] <= c["usd_per_h"] * (1 + 1e-9) + 1e-9
    row["speed_ok"] = t_ours <= t_cbc and (t_cbc <= 1.0 or row["speedup"] >= 10.0)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cbc-time-limit", type=float, default=60.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    print("load (uptime): " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f"; pulp {pulp.__version__}")

    example = load_melange(ROOT / "instances" / "alloc" / "melange_example.json")
    ex_cbc = melange_ilp(example, 1, args.cbc_time_limit)
    ex_ours = ours(example, 1)
    ex_ok = (
        abs(ex_cbc["usd_per_h"] - PUBLISHED_EXAMPLE_USD_H) < 1e-6
        and abs(ex_ours["usd_per_h"] - PUBLISHED_EXAMPLE_USD_H) < 1e-6
    )
    print(
        f"published example (slice factor 1): Mélange {PUBLISHED_EXAMPLE_USD_H:.2f} USD/h, PuLP+CBC "
        f"{ex_cbc['usd_per_h']:.4f}, ours {ex_ours['usd_per_h']:.4f} -> {'ok' if ex_ok else 'MISMATCH'}"
    )

    cases = [("6x6x4", generated_config(6, 4, sf), sf) for sf in (1, 2, 4, 8)]
    cases.append(("10x10x8", generated_config(10, 8, 8), 8))
    rows = [compare(name, cfg, sf, args.repeat, args.cbc_time_limit) for name, cfg, sf in cases]
    print(
        "== median wall s (ours: whole plan() call; CBC: PuLP build + CBC, 1 thread, "
        f"limit {args.cbc_time_limit:g} s) =="
    )
    for r in rows:
        print(
            f"{r['config']:<8} S={r['slice_factor']:<2} ours {r['ours_s']:.4f} s {r['ours_status']:<8} "
            f"{r['ours_usd_per_h']:.4f} USD/h | CBC {r['cbc_s']:.4f} s ({r['cbc_runs']} runs) {r['cbc_status']:<10} "
            f"{r['cbc_usd_per_h']:.4f} USD/h | {r['speedup']:.1f}x  optimum {'ok' if r['optimum_ok'] else 'WORSE'}"
            f"  speed {'ok' if r['speed_ok'] else 'MISSED'}"
        )
    print(f"load (uptime) after: {os.getloadavg()[0]:.2f}")
    if args.json:
        from neuscale_opt.io import write_json

        write_json({"example": {"cbc": ex_cbc, "ours": ex_ours, "ok": ex_ok}, "rows": rows}, args.json)
    return 0 if ex_ok and all(r["optimum_ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
