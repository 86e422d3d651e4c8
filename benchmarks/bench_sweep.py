"""Sweep benchmark: 200 scenarios of the default instance's busiest epoch on 1 and 2 workers.

Run: ``.venv/bin/python benchmarks/bench_sweep.py [--scenarios 200] [--workers 1 2]
[--scheduler processes|dask] [--json PATH]``

The scenarios are a Monte-Carlo design (seed 0) over three parameters of the default instance cut
to its busiest epoch (epoch 6, 30-35 min): the v6e TFLOP/J (x0.7..x1.3), the SLO multiplier (3..8)
and the traffic level (``workload.rate_scale`` 8..12). Each scenario is one MILP (HiGHS, one
thread) with its coefficients and its independent evaluation. Reported per worker count: wall time
of the whole sweep (pool start-up included), speed-up over one worker, the mean task time, the mean
bare solve time (HiGHS inside ``solve_model``), and the per-scenario overhead: task time minus
solve time (coefficients, model build, evaluation) and wall x workers / scenarios minus task time
(executor: start-up, pickling, writing the row).
"""

from __future__ import annotations

import argparse
import json
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


def run(scenarios: int, workers: list[int], scheduler: str) -> dict:
    prepared = prepare(parse_sweep(bench_spec(scenarios), where="bench"))
    out: dict = {"scenarios": len(prepared.tasks), "scheduler": scheduler, "runs": []}
    for w in workers:
        with tempfile.TemporaryDirectory(prefix="bench-sweep-") as d:
            t0 = time.perf_counter()
            rows, _ = run_sweep(prepared, d, workers=w, scheduler=scheduler)
            wall = time.perf_counter() - t0
        task = float(rows["task_seconds"].mean())
        solve = float(rows["solve_seconds"].mean())
        out["runs"].append(
            {
                "workers": w,
                "wall_s": wall,
                "statuses": {str(k): int(v) for k, v in rows["status"].value_counts().items()},
                "mean_task_s": task,
                "mean_solve_s": solve,
                "in_task_overhead_s": task - solve,
                "executor_overhead_s": wall * w / len(rows) - task,
                "objectives": rows["objective"].round(3).tolist(),
            }
        )
    base = out["runs"][0]["wall_s"]
    for r in out["runs"]:
        r["speedup"] = base / r["wall_s"]
    objs = [tuple(r.pop("objectives")) for r in out["runs"]]
    out["same_rows"] = all(o == objs[0] for o in objs)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", type=int, default=200)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--scheduler", default="processes", choices=("processes", "dask"))
    ap.add_argument("--json", default=None, metavar="PATH")
    args = ap.parse_args(argv)
    res = run(args.scenarios, args.workers, args.scheduler)
    print(f"{res['scenarios']} scenarios, scheduler {res['scheduler']}; identical objectives: {res['same_rows']}")
    print("workers  wall_s  speedup  task_s  solve_s  in-task overhead_s  executor overhead_s")
    for r in res["runs"]:
        print(
            f"{r['workers']:>7}  {r['wall_s']:6.1f}  {r['speedup']:7.2f}  {r['mean_task_s']:6.2f}  "
            f"{r['mean_solve_s']:7.3f}  {r['in_task_overhead_s']:18.2f}  {r['executor_overhead_s']:19.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
