"""Benchmark: the full candidate grid (design-space exploration) in candidate points per second.

A point is one row of the candidate table: (chip, slice, parallelism, batch, phase, request class).
Target: at least 1,000,000 points/s on a 2-core machine, vectorised (no Python loop per point).

Run: ``.venv/bin/python benchmarks/bench_candidates.py`` (prints a table; ``--json`` for JSON).
Times are medians over at least ``--repeat`` warm runs and at least ``MIN_CPU_S`` (0.3 s) of CPU
time, wall clock and this process's CPU time (the latter is less inflated when other jobs share
the machine); the load average is printed before and after.

What is timed, per instance:

* ``grid``: ``evaluate_grid`` alone (the roofline of every point and the table), given the classes.
* ``e2e``: the whole ``candidates(inst)`` call, warm, in-process: chip settings, the classes and
  demand, the SLO targets, the kinds, the grid, SLO and memory checks, Pareto flags, the table. A
  trace instance's classes and demand are read and bucketed once per (trace file content, workload
  and epoch settings) and then handed out as copies (``candidates._TRACE_CACHE``); the file's
  SHA-256 is kept per (path, device, inode, size, mtime_ns, ctime_ns) once the file is 2 s old
  (``candidates._TRACE_DIGESTS``), so a warm call only stats it. So ``e2e`` is the figure of a
  process that plans the same workload again (sweeps, benchmarks, re-planning).
* ``cold trace``: the same call with both caches emptied first: the trace is read, hashed, scaled
  and bucketed again (what one ``neuscale-opt plan`` run pays once).

Why at least 0.3 s (2026-12-02): with ``--repeat 7`` the default's figure was the median of the
process's calls 2-8, about 60 ms of CPU. Those calls are slower than later ones (call 2 re-grows
the heap after the cold trace read: about 850 page faults against 0-2 later; calls 2-8 took
9.2-13.1 ms against 7.2-11.6 ms for calls 11-30 of the same 8 processes, load 1.6; every cache hit
on every call, no collection beyond generation 0), and 60 ms is shorter than the bursts of other
jobs on the shared machine (the median of 7 consecutive calls went 6.0 -> 12.3 -> 5.8 ms within
one process, load 2.5). The median of about 40 calls (0.3 s) is less moved by one burst; in the
alternated runs below the two ways differ by no more than that noise, in either direction.

Measured 2026-12-02 01:51-01:57 UTC on the shared 2-core machine, pandas 3.1.1, main's code
(``3bbfca6``) and this code alternated, points per CPU-second (median of the runs, their range):

==========================  ==========  ======================  ======================
figure                      runs        main                    this
==========================  ==========  ======================  ======================
default e2e, >= 0.3 s       6 + 6       1.33 M (1.24-2.12)      1.98 M (1.80-2.83)
bench-grid e2e, >= 0.3 s    6 + 6       2.24 M (2.10-2.72)      2.39 M (2.12-2.75)
default grid, >= 0.3 s      6 + 6       2.37 M (2.07-3.20)      2.60 M (2.39-2.74)
default e2e, 7 calls        4 + 4       1.45 M (1.41-1.93)      2.62 M (2.39-2.88)
bench-grid e2e, 7 calls     4 + 4       2.40 M (2.02-2.88)      2.88 M (2.47-3.30)
==========================  ==========  ======================  ======================

(load 1.5-2.0; the 7-call rows with main's script: no CPU-time floor.) A warm default call: 8.4 ms
(5.8-9.2) with this script, 6.3 ms (5.7-6.9) with main's, under the 11.0 ms of the 1.5 M target in
every run; main's code 12.4 ms (7.8-13.3) and 11.4 ms (8.6-11.7), over it in 7 runs of 10. An
earlier set (01:40-01:53, load 1.6-1.8, nine runs each, before the last grid commit): default e2e
2.13 M (1.21-2.29) -> 2.45 M (2.07-2.94). What changed:
the table is built from the grid's dtype blocks on pandas 3 (``create_dataframe_from_blocks``;
1.12 -> 0.32 ms; pandas 2 keeps the constructor), the phase and energy-profile columns are kept per
(values, run lengths) (0.19 -> 0.03 ms each), the classes' columns are read out of their table once
per call, and on pandas 3 the cached classes and demand and the SLO-filled classes are shallow
copies (copy-on-write). Tried and dropped, no gain measured in one process alternating with the
code before: one stacked roofline evaluation for the decode and prefill steps (7.04 -> 6.98 ms per
call) and the kinds', classes' and config-id columns copied from kept blocks (6.03 -> 6.03 ms).
Tables, classes, demand, notes and coefficients are identical (hashes of the default, the bench
grid, every ``instances/*.toml`` and MLA, MoE, GPU and single-phase grids, pandas 3.1.1, 2.3.3 and
2.2.3). Left per call at a low load (6.3 ms): the grid 3.8 ms (roofline steps 1.4, the per-phase
columns 1.3), the Pareto flags 0.56, the SLO targets 0.38, classes and demand 0.33, the table 0.25,
the SLO check 0.24, the chip settings 0.20. Earlier (2026-12-02 00:25, five rounds of 7 calls, load
1.7-1.8): integ's ``e653c30`` 1.14 M, ``bd2070c`` 2.21 M; on a fresh clone of ``bd2070c`` at load
0.4-0.6, 1.22-1.62 M (five runs of 7 and 9 calls).
Again on a fresh clone of ``7299872`` (2026-12-02 02:33-02:35 UTC, load 0.6-0.7), six runs,
points per CPU-second end to end: default 1.52-2.68 M (at or above 1.5 M in all six), bench-grid
2.13-3.34 M.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from neuscale_opt.candidates import (
    _TRACE_CACHE,
    _TRACE_DIGESTS,
    candidates,
    chip_context,
    effective_model,
    evaluate_grid,
    vpod_kinds,
)
from neuscale_opt.instance import load_instance, parse_instance

#: Least CPU time each figure is the median of (see :func:`median_of`).
MIN_CPU_S = 0.3


def big_instance(n_classes: int = 36):
    """Llama-3-70B, all four TPU generations, vPods up to 256 chips, 36 classes, 10 batch sizes."""
    classes = [
        {"name": f"c{i}", "input_tokens": 128 * (1 + i % 12) * (1 + i // 12), "output_tokens": 32 * (1 + i % 6)}
        for i in range(n_classes)
    ]
    return parse_instance(
        {
            "name": "bench-grid",
            "model": {"name": "Llama-3-70B"},
            "fleet": [{"chip": c, "chips": 8192} for c in ("tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e")],
            "workload": {"classes": classes, "demand": [{"epoch": 0, "bucket": "c0", "rate_rps": 1.0}]},
            "search": {"max_chips_per_vpod": 256, "batch_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]},
        }
    )


def median_of(fn, repeat: int, min_cpu_s: float = MIN_CPU_S) -> tuple[float, float, object]:
    """(median wall s, median CPU s of this process, last result) over at least ``repeat`` warm
    runs (one warm-up first), and more until they took ``min_cpu_s`` of CPU time: a call of a few
    ms is timed over a window longer than the bursts of other jobs on a shared machine. The CPU
    time is the figure less inflated by other jobs."""
    fn()
    wall, cpu, out = [], [], None
    while len(cpu) < repeat or sum(cpu) < min_cpu_s:
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu), out


def cold(inst):
    """``candidates(inst)`` with the trace read, hashed and bucketed again (its caches emptied first)."""
    _TRACE_CACHE.clear()
    _TRACE_DIGESTS.clear()
    return candidates(inst)


def measure(inst, repeat: int) -> dict:
    t_full, c_full, cs = median_of(lambda: candidates(inst), repeat)
    t_cold, c_cold, _ = median_of(lambda: cold(inst), repeat)
    model = effective_model(inst)
    ctxs = {c: chip_context(inst, c) for c in inst.chip_names}
    kinds = [k for c in inst.chip_names for k in vpod_kinds(model, ctxs[c].chip, inst.search.max_chips_per_vpod)]
    t_grid, c_grid, grid = median_of(
        lambda: evaluate_grid(model, ctxs, kinds, cs.buckets, inst.search.batch_sizes, inst.search.phases), repeat
    )
    n = len(cs.table)
    return {
        "instance": inst.name,
        "points": n,
        "feasible": int(cs.table["feasible"].sum()),
        "pareto_energy": int(cs.table["pareto_energy"].sum()),
        "grid_seconds": t_grid,
        "grid_points_per_s": len(grid) / t_grid,
        "end_to_end_seconds": t_full,
        "end_to_end_points_per_s": n / t_full,
        "end_to_end_points_per_cpu_s": n / c_full,
        "grid_points_per_cpu_s": len(grid) / c_grid,
        "cold_trace_seconds": t_cold,
        "cold_trace_points_per_cpu_s": n / c_cold,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [measure(load_instance(None), args.repeat), measure(big_instance(), args.repeat)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("load (1/5/15 min): " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    head = ("instance", "points", "feasible", "grid s", "grid pts/cpu-s", "e2e s", "e2e pts/s", "e2e pts/cpu-s")
    print(
        f"{head[0]:<12} {head[1]:>9} {head[2]:>9} {head[3]:>8} {head[4]:>14} {head[5]:>8} {head[6]:>12} {head[7]:>14}"
        "   cold trace: e2e s, pts/cpu-s"
    )
    for r in rows:
        print(
            f"{r['instance']:<12} {r['points']:>9} {r['feasible']:>9} {r['grid_seconds']:>8.4f} "
            f"{r['grid_points_per_cpu_s']:>14,.0f} {r['end_to_end_seconds']:>8.4f} "
            f"{r['end_to_end_points_per_s']:>12,.0f} {r['end_to_end_points_per_cpu_s']:>14,.0f}"
            f"   {r['cold_trace_seconds']:.4f} {r['cold_trace_points_per_cpu_s']:>12,.0f}"
        )
    print("load (1 min) after: " + f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
