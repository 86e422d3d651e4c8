"""The headline experiment: horizon MILP vs NeuScale's auto-scaler vs the homogeneous auto-scaler.

For each instance (Llama-3-70B on the Azure 2023 conversation trace at 10x and at 1x its rate, and
on the Azure code trace at 5x; optionally DeepSeek-V3 on the conversation trace at 10x), over the
mixed v4/v5e/v5p/v6e fleet of ``instances/default.toml``:

* ``milp`` - the rolling horizon MILP (window 6 epochs, last-peak forecast, energy objective);
* ``milp-pooled`` - the same with the ``pooled`` variant (a vPod type's vPods shared by its classes:
  the MILP's counterpart of coalescing);
* ``milp-cost`` - the dedicated MILP with the cost objective;
* ``oracle`` - the rolling horizon MILP fed with the actual future demand;
* ``neuscale-autoscaler`` - NeuScale's reactive rules (best fit, fail-over, 2x growth, halving
  after 30 min, coalescing at 0.5);
* ``homogeneous-autoscaler`` on each generation with that generation's own inventory (the paper's
  baseline: the same fleet, one generation used), and the best of them (least planned objective);
* ``homogeneous-autoscaler (N-chip fleet)`` on each generation, with a homogeneous fleet as large as
  the whole mixed fleet (a counterfactual: what if the whole fleet were of that generation).

Every plan is replayed (``neuscale_opt.replay.replay``, 30-s vPod creation delay, warm start);
the table reports output tokens per joule, per dollar and the SLO attainment of the replay,
normalised to the homogeneous auto-scaler (best generation, own inventory), beside the paper's
1.13x / 1.43x / 1.36x. Results go to ``benchmarks/headline_results.md``.

Run: ``.venv/bin/python benchmarks/headline.py [--deepseek] [--epochs N] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.candidates import build_coefficients, instance_trace
from neuscale_opt.horizon import (
    HorizonParams,
    fleet_total_inventory,
    homogeneous_each,
    instance_inventory,
    neuscale_autoscaler,
    plan_rolling,
)
from neuscale_opt.horizon.autoscaler import autoscale
from neuscale_opt.instance import FleetEntry, Instance, ModelChoice, load_instance
from neuscale_opt.replay import replay

ROOT = Path(__file__).resolve().parents[1]
PAPER = {"tokens_per_joule": 1.13, "tokens_per_usd": 1.43, "slo_attainment": 1.36}
WINDOW = 6


@dataclass(frozen=True)
class Case:
    label: str
    instance: Instance


@dataclass(frozen=True)
class Run:
    case: str
    method: str
    baseline: bool
    plan_s: float
    replay_s: float
    planned_energy_j: float
    planned_unserved_rps: float
    violations: int
    chips: dict[str, int]
    replay: dict[str, Any]


def cases(deepseek: bool, epochs: int | None) -> list[Case]:
    out = [
        Case("azure-conv x10 (default)", load_instance(ROOT / "instances" / "default.toml")),
        Case("azure-conv x1", load_instance(ROOT / "instances" / "azure-conv.toml")),
        Case("azure-code x5", load_instance(ROOT / "instances" / "horizon" / "azure-code.toml")),
    ]
    if deepseek:
        base = out[0].instance
        ds = base.model_copy(update={"name": "deepseek-conv", "model": ModelChoice(name="DeepSeek-V3-671B")})
        ds._path = base.path
        out.append(Case("DeepSeek-V3 azure-conv x10", ds))
    if epochs is not None:
        trimmed = []
        for c in out:
            inst = c.instance.model_copy(update={"epochs": c.instance.epochs.model_copy(update={"horizon": epochs})})
            inst._path = c.instance.path
            trimmed.append(Case(c.label, inst))
        out = trimmed
    return out


def homogeneous_instance(inst: Instance, chip: str, chips: int) -> Instance:
    """The instance with a fleet of ``chips`` chips of ``chip`` only (for replaying the
    counterfactual homogeneous fleet)."""
    new = inst.model_copy(update={"fleet": (FleetEntry(chip=chip, chips=chips),), "inventory_events": ()})
    new._path = inst.path
    return new


def run_case(case: Case) -> list[Run]:
    inst = case.instance
    coeffs = build_coefficients(inst)
    trace = instance_trace(inst)
    opts = PlanOptions.from_instance(inst)
    params = HorizonParams.from_instance(inst)
    inv = instance_inventory(coeffs, inst.inventory_events)
    runs: list[Run] = []

    def record(method: str, plan_fn, replay_inst: Instance = inst, baseline: bool = False) -> Any:
        t0 = time.perf_counter()
        sol = plan_fn()
        t1 = time.perf_counter()
        res = replay(sol.to_dict(timing=False), replay_inst, trace, coeffs=coeffs)
        t2 = time.perf_counter()
        runs.append(
            Run(
                case.label,
                method,
                baseline,
                t1 - t0,
                t2 - t1,
                float(sol.totals["energy_j"]),
                float(sol.totals["unserved_rps"]),
                int(sol.totals.get("coupling_violations", 0)),
                dict(sol.totals["chips_by_version"]),
                res.totals,
            )
        )
        return sol

    record("milp", lambda: plan_rolling(coeffs, opts, params, "last-peak", WINDOW, inv, method="milp"))
    record(
        "milp-pooled",
        lambda: plan_rolling(coeffs, opts.replace(variant="pooled"), params, "last-peak", WINDOW, inv, method="milp"),
    )
    record(
        "milp-cost",
        lambda: plan_rolling(coeffs, opts.replace(objective="cost"), params, "last-peak", WINDOW, inv, method="milp"),
    )
    record("oracle", lambda: plan_rolling(coeffs, opts, params, "oracle", WINDOW, inv, method="oracle"))
    record("neuscale-autoscaler", lambda: neuscale_autoscaler(coeffs, opts, params, inv))
    each = homogeneous_each(coeffs, opts, params, inv)
    best = min(each, key=lambda c: (each[c].objective_value, c))
    for chip, sol in each.items():
        record(f"homogeneous-autoscaler {chip}" + (" (best)" if chip == best else ""), lambda s=sol: s, baseline=True)
    total = int(sum(coeffs.inventory().values()))
    for chip in each:
        inv_h = fleet_total_inventory(coeffs, chip, inst.inventory_events)
        h_inst = homogeneous_instance(inst, chip, total)
        sol = autoscale(coeffs, opts, params, chip, inv_h, "homogeneous-autoscaler")
        record(f"homogeneous-autoscaler {chip} ({total}-chip fleet)", lambda s=sol: s, h_inst)
    return runs


def _ratio(a: float, b: float) -> float:
    return a / b if b and math.isfinite(a) and math.isfinite(b) else math.nan


def table(runs: list[Run]) -> str:
    lines = []
    for label in dict.fromkeys(r.case for r in runs):
        rs = [r for r in runs if r.case == label]
        base = next(r for r in rs if r.method.endswith("(best)"))
        lines.append(f"\n### {label}\n")
        lines.append(f"Baseline: `{base.method}`. Ratios > 1 are better than the baseline.\n")
        lines.append(
            "| method | tokens/J | tokens/$ | SLO attainment | energy eff. x | cost eff. x | SLO x | "
            "planned unserved req/s | chips (peak per generation) | plan s | replay s |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
        for r in rs:
            t = r.replay
            chips = ", ".join(f"{c.replace('tpu-', '')} {n}" for c, n in r.chips.items())
            lines.append(
                f"| {r.method} | {t['tokens_per_joule']:.4g} | {t['tokens_per_usd']:.4g} | "
                f"{t['slo_attainment']:.3f} | {_ratio(t['tokens_per_joule'], base.replay['tokens_per_joule']):.2f} | "
                f"{_ratio(t['tokens_per_usd'], base.replay['tokens_per_usd']):.2f} | "
                f"{_ratio(t['slo_attainment'], base.replay['slo_attainment']):.2f} | "
                f"{r.planned_unserved_rps:.3g} | {chips} | {r.plan_s:.2f} | {r.replay_s:.2f} |"
            )
        lines.append(
            f"| *paper: NeuScale vs homogeneous* | | | | *{PAPER['tokens_per_joule']:.2f}* | "
            f"*{PAPER['tokens_per_usd']:.2f}* | *{PAPER['slo_attainment']:.2f}* | | | | |"
        )
        by = {r.method: r for r in rs}
        if "milp" in by and "oracle" in by:
            f, o = by["milp"].replay, by["oracle"].replay
            lines.append(
                f"\nForecast (last-peak) vs oracle, same rolling MILP: tokens/J "
                f"{_ratio(f['tokens_per_joule'], o['tokens_per_joule']):.3f}x, tokens/$ "
                f"{_ratio(f['tokens_per_usd'], o['tokens_per_usd']):.3f}x, SLO attainment "
                f"{_ratio(f['slo_attainment'], o['slo_attainment']):.3f}x of the oracle's."
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deepseek", action="store_true", help="add DeepSeek-V3 on the conversation trace at 10x")
    ap.add_argument("--epochs", type=int, default=None, help="plan only the first N epochs")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "headline_results.md"))
    args = ap.parse_args(argv)
    start = time.perf_counter()
    runs: list[Run] = []
    for case in cases(args.deepseek, args.epochs):
        t0 = time.perf_counter()
        runs.extend(run_case(case))
        print(f"{case.label}: {time.perf_counter() - t0:.1f} s", flush=True)
    body = table(runs)
    total = time.perf_counter() - start
    header = (
        "# Headline experiment: horizon MILP vs NeuScale auto-scaler vs homogeneous auto-scaler\n\n"
        "Generated by `benchmarks/headline.py` (see its docstring for the set-up). Every plan is replayed "
        "against the trace (`neuscale_opt.replay`, 30-s vPod creation delay, warm start); tokens are output "
        "tokens of served requests; energy at the facility (PUE 1.1); money = chip-hours held x on-demand "
        "price. Ratios are normalised to the homogeneous auto-scaler on its best generation with that "
        f"generation's own inventory. Total run time {total:.0f} s.\n"
    )
    Path(args.out).write_text(header + body, encoding="utf-8")
    print(body)
    print(f"written {args.out} in {total:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
