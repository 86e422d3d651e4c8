"""Sweep benchmark: 200 scenarios of the default instance's busiest epoch on 1 and 2 workers.

Run (one command; a quiet 2-core machine is what the >= 1.7x target is stated for):

    .venv/bin/python benchmarks/bench_sweep.py [--scenarios 200] [--workers 1 2] [--repeats 3]
        [--scheduler processes|dask] [--json PATH]

The scenarios are a Monte-Carlo design (seed 0) over three parameters of the default instance cut
to its busiest epoch (epoch 6, 30-35 min): the v6e TFLOP/J (x0.7..x1.3), the SLO multiplier (3..8)
and the traffic level (``workload.rate_scale`` 8..12). Each scenario is one task: its coefficients,
its MILP (HiGHS, one thread), the independent evaluation and the nominal plan held in it (regret).
Workers load the base instance once (``run.init_worker``), receive chunks of scenario ids and values
(``run.chunk_size``), and rows stream to disk as chunks finish.

Each repeat runs every worker count back to back (the speed-up is the ratio within one repeat, so
that load drifting between repeats cancels as far as it can); reported are medians over repeats of
the wall time of the whole sweep (pool start-up and the nominal scenario, which runs first, in the
main process, included), the speed-up over the first worker count, and per scenario: the task time,
the bare solve time (HiGHS inside ``solve_model``: the scenario's MILP and the regret solve), the in-task
overhead (task minus solve: coefficients, model build, evaluation) and the executor overhead
(wall x workers / scenarios minus the mean task time: start-up, pickling, streaming the rows, idle
workers at the end). The 1-minute load average (``os.getloadavg``) before and after each run is
printed with it: on a shared machine the speed-up is depressed by the other processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from neuscale_opt.sweep.run import prepare, run_sweep  # noqa: E402
from neuscale_opt.sweep.spec import parse_sweep  # noqa: E402


def bench_spec(scenarios: int) -> dict:
    return {
        "name": "bench",
        "design": "mc",
        "samples": scenarios - 1,  # + the nominal scenario
        "seed": 0,
        "methods": ["milp"],
        "time_limit_s": 60,
        "set": {"workload.trace.start_s": 1800.0, "workload.trace.duration_s": 300.0, "epochs.horizon": 1},
        "parameter": [
            {
                "name": "v6e TFLOP/J",
                "path": "catalog.energy_profiles[neuscale][tpu-v6e].tflop_per_j",
                "scale": "relative",
                "low": 0.7,
                "high": 1.3,
            },
            {"name": "slo", "path": "slo.multiplier", "low": 3.0, "high": 8.0},
            {"name": "rate", "path": "workload.rate_scale", "low": 8.0, "high": 12.0},
        ],
        "robust": {"enabled": False},
    }


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def one_run(prepared, workers: int, scheduler: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as d:
        before = _load()
        t0 = time.perf_counter()
        rows, _ = run_sweep(prepared, d, workers=workers, scheduler=scheduler)
        wall = time.perf_counter() - t0
        after = _load()
    task = rows["task_seconds"].astype(float)
    solve = rows["solve_seconds"].astype(float)
    return {
        "workers": workers,
        "wall_s": wall,
        "load_before": before,
        "load_after": after,
        "statuses": {str(k): int(v) for k, v in rows["status"].value_counts().items()},
        "mean_task_s": float(task.mean()),
        "mean_solve_s": float(solve.mean()),
        "in_task_overhead_s": float((task - solve).mean()),
        "executor_overhead_s": wall * workers / len(rows) - float(task.mean()),
        "rows": _fingerprint(rows),
    }


def _fingerprint(rows) -> list[tuple]:
    """What must be equal between runs: per scenario its id, status, objective, bound and vPods
    (NaN written as None, so that an infeasible scenario compares equal to itself)."""
    out = []
    for r in rows.itertuples(index=False):
        nums = tuple(None if x != x else round(float(x), 6) for x in (r.objective, r.bound))
        out.append((str(r.scenario_id), str(r.status), *nums, str(r.vpods)))
    return out


def run(scenarios: int, workers: list[int], scheduler: str, repeats: int = 1) -> dict:
    prepared = prepare(parse_sweep(bench_spec(scenarios), where="bench"))
    out: dict = {"scenarios": len(prepared.tasks), "scheduler": scheduler, "repeats": repeats, "runs": []}
    for rep in range(repeats):
        first = None
        for w in workers:
            r = one_run(prepared, w, scheduler)
            first = r["wall_s"] if first is None else first
            r.update(repeat=rep, speedup=first / r["wall_s"])
            out["runs"].append(r)
            print(
                f"  repeat {rep} workers {w}: wall {r['wall_s']:.1f} s, speed-up {r['speedup']:.2f}, per scenario: "
                f"task {r['mean_task_s']:.2f} s, solve {r['mean_solve_s']:.3f} s, in-task overhead "
                f"{r['in_task_overhead_s']:.2f} s, executor overhead {r['executor_overhead_s']:.2f} s; "
                f"load {r['load_before']} -> {r['load_after']}",
                flush=True,
            )
    prints = [r.pop("rows") for r in out["runs"]]
    out["same_rows"] = all(p == prints[0] for p in prints)
    keys = ("wall_s", "speedup", "mean_task_s", "mean_solve_s", "in_task_overhead_s", "executor_overhead_s")
    out["median"] = [
        {"workers": w, **{k: statistics.median(r[k] for r in out["runs"] if r["workers"] == w) for k in keys}}
        for w in workers
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", type=int, default=200)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scheduler", default="processes", choices=("processes", "dask"))
    ap.add_argument("--json", default=None, metavar="PATH")
    args = ap.parse_args(argv)
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    res = run(args.scenarios, args.workers, args.scheduler, args.repeats)
    print(
        f"{res['scenarios']} scenarios, scheduler {res['scheduler']}, medians of {res['repeats']} repeat(s); "
        f"identical rows (id, status, objective, bound, vPods): {res['same_rows']}"
    )
    print("workers  wall_s  speedup  task_s  solve_s  in-task overhead_s  executor overhead_s (per scenario)")
    for r in res["median"]:
        print(
            f"{r['workers']:>7}  {r['wall_s']:6.1f}  {r['speedup']:7.2f}  {r['mean_task_s']:6.2f}  "
            f"{r['mean_solve_s']:7.3f}  {r['in_task_overhead_s']:18.2f}  {r['executor_overhead_s']:19.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
