"""The headline experiment on goodput: horizon MILP vs NeuScale's auto-scaler vs the homogeneous auto-scaler.

For each shipped scenario (Llama-3-70B on the Azure 2023 conversation trace at 1x and at 10x its
rate (the default instance), on the Azure code trace at 5x, and DeepSeek-V3 on the conversation
trace at 10x), over the mixed v4/v5e/v5p/v6e fleet of ``instances/default.toml``, each method is
planned with ``--objective energy`` and with ``--objective cost`` (the instance's other options:
pooled default, SLO-attainment loads, tail classes):

* ``milp`` - the rolling horizon MILP (window 3 epochs, the default; each scenario's own
  forecaster, ``forecast_of``, or ``--forecast`` in every scenario, and its guard-reserve
  forecaster, ``params_of``, or ``--reserve-forecast``);
* ``oracle`` - the same fed with the actual future demand (both objectives: what the forecast costs);
* ``neuscale-autoscaler`` - NeuScale's reactive rules (best fit, fail-over, 2x growth, halving
  after 30 min, coalescing at 0.5, tail classes), sized as NeuScale publishes them: each class's
  peak over 10-s sub-windows (``R_peak``, ``workload.provision_for = "peak"``);
* ``homogeneous-autoscaler <chip>`` - the same rules on one generation with its own inventory (the
  paper's baseline), on every generation;
* where the instance sizes otherwise (``provision_for = "burst"``: the conversation-trace ones), the same
  two baselines on the MILP's own demand as well (``... on the MILP's demand (burst)``): not a
  criterion, the rows that say how much of the gain is the sizing and how much the plan.

Every plan is replayed (``neuscale_opt.replay.replay``, 30-s vPod creation delay, warm start, each
class split over its groups as the plan says, ``ReplayOptions.routing``, and the same run-time surge
guard under every plan, ``ReplayOptions.surge``: its vPods are in the energy and money and counted
in the *surge* column). The criterion of issue 11:
the energy plan's **goodput tokens/J** (output tokens of requests that met their SLO, per joule at
the facility) >= 1.15x, and the cost plan's **goodput tokens/$** >= 1.5x,
those of NeuScale's auto-scaler and of the best homogeneous auto-scaler (``best_homogeneous``: of
the generations planned with the same objective whose replayed SLO attainment is within 0.5 point
of the best generation's, the one of highest replayed goodput per J, resp. per $; a generation whose
inventory carries only part of the demand serves that part at full load and is no deployment),
each at a replayed SLO attainment no lower than the baseline's minus 0.5 point. Two accountings of energy:
*plain* (the replay's ``energy_j``: held vPods only) and the *operator's view*, which also charges
the static power of the fleet's healthy chips no vPod holds (the replay's ``--idle-fleet-power``,
``energy_idle_fleet_j`` x PUE added; money is the same in both: chip-hours held x price).
Each criterion row also gives the *ceiling*: the most a schedule that serves the whole demand
under the same rules can reach against that baseline (every offered output token as goodput over
``relaxation_bound(serve_all=True)``, the proven lower bound on the objective of such schedules), so
that a target no full-service plan can reach is named as such, with the number. Where that LP
ceiling is at or above a failed criterion's target, the full-horizon integer model is searched as
well (``integer_bound(serve_all=True)``, at most ``INTEGER_NODES`` nodes: its proven bound, optimal
or not), which closes the vPod rounding the LP leaves open. Where even that ceiling stays at or
above a failed target, one solve of the whole horizon on the demand that came, the tail classes
planned as ordinary ones (``best_full_service``), gives the best full-service schedule found: an
achievable schedule, not a bound, which says whether perfect foresight and no rolling windows
would meet the target (the integer ceiling relaxes the tail classes: each tail request costs its
least marginal cost, whereas a schedule must hold a group that serves it).
A second ceiling per row is the most any schedule that serves at least the share of requests the
criterion allows (the baseline's replayed SLO attainment minus the slack) can reach: the largest
served output tokens per J, resp. per USD, over the full-horizon LP relaxation (``ratio_bound``,
``formulations/horizon.md``, "Ratio ceiling"). Below the target, no plan that sizes for the
provisioned demand and meets the criterion's SLO condition reaches the target, however much it
leaves unserved; above it, the target is not ruled out, and the ceiling says how much shedding load
could gain. Both ceilings are of demand as the instance provisions it: a plan sized below the
provisioned rates (a lower forecast) can serve most requests all the same, and may pass them.
Each failed criterion gets its reason (``shortfall_reason``, listed at the top of the results as
well): the fleet, the SLO condition, a ceiling below the target, the forecast (the oracle meets
it), what is out of reach even with perfect foresight (the best full-service schedule), or the
rolling windows.
Where a criterion is lost on the SLO condition, the scenario's section says where the misses lie
(``slo_shortfalls``): the MILP's and the baseline's missed requests in the epochs that hold most of
the difference, the kinds of the MILP's misses (TTFT, TPOT, end-to-end, rejected) and the oracle's
attainment, which separates what the forecast costs from what the model does.
It also checks that no baseline plan beats the MILP's on the MILP's own objective (replayed energy,
resp. money) at an equal or higher replayed SLO attainment. Results go to
``benchmarks/headline_results.md`` (and the rows to ``headline_results.json``).

Run: ``.venv/bin/python benchmarks/headline.py [--quick] [--only LABEL,...] [--epochs N]
[--provision-for burst] [--forecast NAME] [--reserve-forecast NAME|none] [--extra] [--out PATH]``;
``--extra`` runs the same criterion on the seven scenarios outside the shipped ones (``EXTRA``: other
rates, models, the code trace at other scales and the Mooncake conversation trace, those of ``forecast_gap.py``) into
``benchmarks/headline_extra_results.md``
(one command; about 15-25 min on two shared cores). ``--quick``: 2 epochs of azure-conv x1.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.candidates import build_coefficients, instance_trace
from neuscale_opt.horizon import (
    HorizonParams,
    homogeneous_each,
    instance_inventory,
    neuscale_autoscaler,
    plan_rolling,
)
from neuscale_opt.horizon.rolling import actual_demand, integer_bound, ratio_bound, relaxation_bound
from neuscale_opt.instance import Instance, ModelChoice, load_instance
from neuscale_opt.replay import replay
from neuscale_opt.replay.plan import arrival_epochs
from neuscale_opt.replay.simulate import offered_by_class

ROOT = Path(__file__).resolve().parents[1]
WINDOW = 3


def shipped_params() -> HorizonParams:
    """The shipped default instance's horizon parameters (``instances/default.toml``, ``[horizon]``)."""
    return HorizonParams.from_instance(load_instance(ROOT / "instances" / "default.toml"))


def shipped_forecast() -> str:
    """The shipped default instance's forecaster (``horizon.forecast``)."""
    return shipped_params().forecast


#: ``--forecast``: the MILP's forecaster in every scenario (None: :func:`forecast_of`)
FORECAST: str | None = None
#: ``--reserve-forecast``: the MILP's guard-reserve forecaster in every scenario (None: the instance's)
RESERVE: str | None = None


def params_of(inst: Instance) -> HorizonParams:
    """The MILP's horizon parameters for ``inst``: its ``[horizon]`` table, or (an instance without
    one, planned here as a schedule all the same) the rules' defaults with the shipped default
    instance's guard-reserve forecaster; ``--reserve-forecast`` wins ('none': no reserve)."""
    params = HorizonParams.from_instance(inst)
    if inst.horizon is None:
        params = params.replace(reserve_forecast=shipped_params().reserve_forecast)
    if RESERVE is not None:
        params = params.replace(reserve_forecast=None if RESERVE == "none" else RESERVE)
    return params


def forecast_of(inst: Instance) -> str:
    """The MILP's forecaster for ``inst``: ``--forecast`` if given, else the instance's own
    ``horizon.forecast``, else (an instance without a ``[horizon]`` table, planned here as a
    schedule all the same) the shipped default instance's."""
    if FORECAST is not None:
        return FORECAST
    return inst.horizon.forecast if inst.horizon is not None else shipped_forecast()


@dataclass(frozen=True)
class Case:
    label: str
    instance: Instance


@dataclass(frozen=True)
class Run:
    case: str
    method: str
    objective: str
    plan_s: float
    replay_s: float
    planned_objective: float
    planned_unserved_rps: float
    chips: dict[str, int]
    replay: dict[str, Any]
    #: the case's full-service bound of this objective (``full_service_bound``), None if none exists
    full_service_bound: float | None = None
    #: how that bound was proven: "LP" (``relaxation_bound``) or the integer search's status and
    #: nodes (``integer_bound``, run where the LP's ceiling does not settle a criterion)
    full_service_kind: str = "LP"
    #: on the MILP's runs: the ratio ceiling (``ratio_bound``: output tokens per objective unit)
    #: at each served share a criterion needs, keyed by the share (``share_key``); None: no schedule
    ratio_bounds: dict[str, float | None] = field(default_factory=dict)
    #: where a criterion is still open after the integer ceiling: the objective of the best
    #: full-service schedule found by one solve of the whole horizon on the demand that came
    #: (``best_full_service``; an achievable schedule, not a bound), None where not run or none found
    best_schedule: float | None = None
    #: how that schedule was found: the solve's status, nodes and gap
    best_schedule_kind: str = ""
    #: the forecaster of a rolling plan (milp runs), else ""
    forecast: str = ""
    #: the replay's requests that missed their SLO, per epoch of arrival (``slo_misses``)
    misses_by_epoch: list[int] = field(default_factory=list)
    #: of those, how many missed TTFT, TPOT, end-to-end (a request may miss several) or were rejected
    miss_kinds: dict[str, int] = field(default_factory=dict)

    @property
    def energy_op_j(self) -> float:
        """Replayed energy with the idle fleet chips' static power charged (operator's view)."""
        t = self.replay
        return float(t["energy_j"]) + float(t["pue"]) * float(t["energy_idle_fleet_j"])

    def metric(self, name: str) -> float:
        t = self.replay
        if name == "gp_j":
            return float(t["goodput_tokens_per_joule"])
        if name == "gp_j_op":
            return float(t["goodput_tokens_out"]) / self.energy_op_j if self.energy_op_j > 0 else math.nan
        if name == "gp_usd":
            return float(t["goodput_tokens_per_usd"])
        raise KeyError(name)

    @property
    def slo(self) -> float:
        return float(self.replay["slo_attainment"])


def slo_misses(res: Any, epoch_s: float) -> tuple[list[int], dict[str, int]]:
    """The replay's missed requests per epoch of arrival (the replay's own rule, ``arrival_epochs``)
    and by kind: TTFT, TPOT and end-to-end late (served requests; one may be late on several) and
    rejected (never served: vPod -1)."""
    rq = res.requests
    met = rq["slo_met"].to_numpy(bool)
    served = rq["vpod"].to_numpy() >= 0
    epochs = int(res.by_epoch["epoch"].max()) + 1
    epoch = np.minimum(arrival_epochs(rq["arrival_s"].to_numpy(), epoch_s), epochs - 1)
    kinds = {"rejected": int((~served).sum())}
    for k in ("ttft", "tpot", "e2e"):
        kinds[k] = int((served & ~rq[f"{k}_ok"].to_numpy(bool)).sum())
    return np.bincount(epoch[~met], minlength=epochs).tolist(), kinds


def slo_shortfalls(rs: list[Run], vs: list[dict[str, Any]]) -> list[str]:
    """For each criterion of ``vs`` (``verdicts(rs)``) lost on the SLO condition: where the MILP's
    misses lie against the baseline's (the epochs that hold most of the difference), what kind they
    are, and the oracle's attainment (the same rolling MILP on the actual demand), which separates
    the forecast's share from the model's. The operator's-view row compares the same two plans as
    the plain one, so each (objective, baseline) pair is explained once."""
    out = []
    seen = set()
    for v in vs:
        objective = v["objective"]
        if v["slo_ok"] or v["info"] or (objective, v["baseline"]) in seen:
            continue
        seen.add((objective, v["baseline"]))
        milp = next(r for r in rs if r.method == "milp" and r.objective == objective)
        base = next(r for r in rs if r.method == v["baseline"] and r.objective == objective)
        if not milp.misses_by_epoch or not base.misses_by_epoch:
            continue
        diff = np.asarray(milp.misses_by_epoch) - np.asarray(base.misses_by_epoch)
        top = [int(e) for e in np.argsort(-diff, kind="stable")[:3] if diff[e] > 0]
        total = sum(milp.misses_by_epoch)
        extra = total - sum(base.misses_by_epoch)
        where = ", ".join(f"epoch {e} {milp.misses_by_epoch[e]} vs {base.misses_by_epoch[e]}" for e in top)
        k = milp.miss_kinds
        line = (
            f"- {objective} plan against {v['baseline']}: the MILP misses {total} "
            f"requests, {extra} more than the baseline; most of the difference in {where or 'no single epoch'} "
            f"(MILP vs baseline). The MILP's misses: {k.get('ttft', 0)} TTFT, {k.get('tpot', 0)} TPOT, "
            f"{k.get('e2e', 0)} end-to-end late, {k.get('rejected', 0)} rejected."
        )
        oracle = next((r for r in rs if r.method == "oracle" and r.objective == objective), None)
        if oracle is not None:
            line += f" The oracle (the same MILP on the actual demand, {objective}) replays at SLO {oracle.slo:.3f}."
        out.append(line)
    return out


def variant(base: Instance, **update: Any) -> Instance:
    """``base`` with top-level fields replaced (``model_copy``), still reading its trace and files
    relative to ``base``'s own path."""
    inst = base.model_copy(update=update)
    inst._path = base.path
    return inst


#: Scenarios outside the shipped ones (same fleet, SLO and epochs as the instance they vary):
#: label -> (instance file under ``instances/``, model or None, rate_scale or None). The headline
#: runs them with ``--extra``; ``forecast_gap.py`` runs them beside the shipped ones.
EXTRA: dict[str, tuple[str, str | None, float | None]] = {
    "azure-conv x3": ("default.toml", None, 3.0),
    "azure-code x1": ("horizon/azure-code.toml", None, 1.0),
    "azure-code x2": ("horizon/azure-code.toml", None, 2.0),
    "Llama-3-8B azure-conv x20": ("default.toml", "Llama-3-8B", 20.0),
    "Qwen3-32B azure-conv x10": ("default.toml", "Qwen3-32B", None),
    "Mixtral-8x7B azure-conv x5": ("default.toml", "Mixtral-8x7B", 5.0),
    "mooncake-conv x1": ("default.toml", None, 1.0),
}

#: Scenarios of :data:`EXTRA` on another trace than their instance's: label -> (path relative to
#: ``instances/``, loader format). The Mooncake (Kimi) FAST'25 conversation trace: 12,031 requests
#: in 59 min, prompts of 12,035 tokens on average (median 6,909) (``instances/data/README.md``).
EXTRA_TRACE: dict[str, tuple[str, str]] = {
    "mooncake-conv x1": ("data/mooncake_fast25_conversation.csv.gz", "mooncake"),
}


def extra_instance(label: str) -> Instance:
    """The instance of scenario ``label`` of :data:`EXTRA` (on :data:`EXTRA_TRACE`'s trace where given)."""
    path, model, scale = EXTRA[label]
    base = load_instance(ROOT / "instances" / path)
    upd: dict[str, Any] = {"name": label}
    if model is not None:
        upd["model"] = ModelChoice(name=model)
    work: dict[str, Any] = {}
    if scale is not None:
        work["rate_scale"] = scale
    if label in EXTRA_TRACE:
        trace, fmt = EXTRA_TRACE[label]
        work["trace"] = base.workload.trace.model_copy(update={"path": trace, "format": fmt})
    if work:
        upd["workload"] = base.workload.model_copy(update=work)
    return variant(base, **upd)


def cases(deepseek: bool, epochs: int | None, provision_for: str | None = None, extra: bool = False) -> list[Case]:
    if extra:
        return _sized([Case(label, extra_instance(label)) for label in EXTRA], epochs, provision_for)
    out = [
        Case("azure-conv x1", load_instance(ROOT / "instances" / "azure-conv.toml")),
        Case("azure-conv x10 (default)", load_instance(ROOT / "instances" / "default.toml")),
        Case("azure-code x5", load_instance(ROOT / "instances" / "horizon" / "azure-code.toml")),
    ]
    if deepseek:
        base = out[1].instance
        ds = variant(base, name="deepseek-conv", model=ModelChoice(name="DeepSeek-V3-671B"))
        out.append(Case("DeepSeek-V3 azure-conv x10", ds))
    return _sized(out, epochs, provision_for)


def _sized(out: list[Case], epochs: int | None, provision_for: str | None) -> list[Case]:
    """``out`` with ``workload.provision_for`` and the planned epochs overridden where given."""
    if provision_for is not None:
        out = [
            Case(
                c.label,
                variant(c.instance, workload=c.instance.workload.model_copy(update={"provision_for": provision_for})),
            )
            for c in out
        ]
    if epochs is not None:
        out = [
            Case(c.label, variant(c.instance, epochs=c.instance.epochs.model_copy(update={"horizon": epochs})))
            for c in out
        ]
    return out


def run_case(case: Case, methods: list[str] | None = None) -> list[Run]:
    inst = case.instance
    coeffs = build_coefficients(inst)
    trace = instance_trace(inst)
    base_opts = PlanOptions.from_instance(inst)
    params = params_of(inst)
    inv = instance_inventory(coeffs, inst.inventory_events)
    demand = actual_demand(coeffs)  # what the instance provisions for: every ceiling's demand
    # the baselines size as NeuScale publishes (each class's peak over 10-s sub-windows, R_peak);
    # where the instance sizes otherwise they are also run on its demand (tagged, not a criterion)
    pf = inst.workload.provision_for
    sizings: list[tuple[Any, str]] = [(coeffs, "")]
    if pf != PUBLISHED_SIZING:
        published = variant(inst, workload=inst.workload.model_copy(update={"provision_for": PUBLISHED_SIZING}))
        sizings = [(build_coefficients(published), ""), (coeffs, f"{SAME_DEMAND} ({pf})")]
    runs: list[Run] = []
    bounds = {
        objective: relaxation_bound(coeffs, base_opts.replace(objective=objective), params, demand, inv, serve_all=True)
        for objective in OBJECTIVES
    }

    def record(method: str, objective: str, plan_fn, forecast: str = "") -> None:
        if methods is not None and not any(method.startswith(m) for m in methods):
            return
        t0 = time.perf_counter()
        sol = plan_fn()
        t1 = time.perf_counter()
        if sol.allocations.empty:
            print(f"  {method} ({objective}): no plan ({sol.status})", flush=True)
            return
        # a plan the evaluator finds infeasible because it leaves demand unserved (the fleet, or one
        # generation of it, is too small) is still replayed: its goodput counts what it serves
        res = replay(sol.to_dict(timing=False), inst, trace, coeffs=coeffs)
        t2 = time.perf_counter()
        misses, kinds = slo_misses(res, float(inst.epochs.length_s))
        runs.append(
            Run(
                case.label,
                method,
                objective,
                t1 - t0,
                t2 - t1,
                float(sol.objective_value),
                float(sol.totals["unserved_rps"]),
                dict(sol.totals["chips_by_version"]),
                dict(res.totals),
                bounds[objective],
                forecast=forecast,
                misses_by_epoch=misses,
                miss_kinds=kinds,
            )
        )
        t = res.totals
        print(
            f"  {method} ({objective}): goodput/J {t['goodput_tokens_per_joule']:.4g}, goodput/$ "
            f"{t['goodput_tokens_per_usd']:.4g}, SLO {t['slo_attainment']:.3f} ({t1 - t0:.1f} + {t2 - t1:.1f} s)",
            flush=True,
        )

    for objective in OBJECTIVES:
        opts = base_opts.replace(objective=objective)
        for method, fc in (("milp", forecast_of(inst)), ("oracle", "oracle")):
            record(
                method,
                objective,
                lambda o=opts, f=fc, m=method: plan_rolling(coeffs, o, params, f, WINDOW, inv, method=m),
                fc,
            )
        for bco, tag in sizings:
            record(f"neuscale-autoscaler{tag}", objective, lambda o=opts, c=bco: neuscale_autoscaler(c, o, params, inv))
            for chip, sol in homogeneous_each(bco, opts, params, inv).items():
                record(f"homogeneous-autoscaler {chip}{tag}", objective, lambda s=sol: s)
    for objective in OBJECTIVES:
        if not unsettled(runs, objective):
            continue
        t0 = time.perf_counter()
        ib = integer_bound(
            coeffs,
            base_opts.replace(objective=objective, node_limit=INTEGER_NODES, time_limit_s=INTEGER_SECONDS),
            params,
            demand,
            inv,
            serve_all=True,
        )
        lp = bounds[objective]
        print(
            f"  full-service bound ({objective}): LP {lp:.6g}, integer {ib.value} ({ib.status}, {ib.nodes} nodes, "
            f"gap {ib.gap:.3g}, {time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
        if ib.value is not None and ib.value > lp:
            kind = f"integer, {ib.status}, {ib.nodes} nodes"
            runs = [
                replace(r, full_service_bound=ib.value, full_service_kind=kind) if r.objective == objective else r
                for r in runs
            ]
    for objective in OBJECTIVES:
        if not unsettled(runs, objective):
            continue
        t0 = time.perf_counter()
        best = best_full_service(coeffs, base_opts.replace(objective=objective), params, demand, inv)
        print(
            f"  best full-service schedule ({objective}): {best.incumbent} ({best.status}, {best.nodes} nodes, "
            f"gap {best.gap:.3g}, {time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
        if math.isfinite(best.incumbent):
            kind = f"{best.status}, {best.nodes} nodes, gap {best.gap:.2g}"
            runs = [
                replace(r, best_schedule=best.incumbent, best_schedule_kind=kind) if r.objective == objective else r
                for r in runs
            ]
    tokens, requests = offered_by_class(trace, inst)
    for objective in OBJECTIVES:
        milp = next((r for r in runs if r.method == "milp" and r.objective == objective), None)
        if milp is None:
            continue
        got: dict[str, float | None] = {}
        keys = {share_key(v["slo_base"]) for v in verdicts(runs) if CEILING_OF.get(v["metric"]) == objective}
        for key in sorted(keys):
            t0 = time.perf_counter()
            rb = ratio_bound(
                coeffs,
                base_opts.replace(objective=objective),
                params,
                demand,
                inv,
                tokens,
                requests,
                float(key),
            )
            got[key] = rb.value
            print(
                f"  ratio ceiling ({objective}, share >= {key}): {rb.value} per unit, its maximiser serving "
                f"{rb.served_share:.4f} ({rb.iterations} LPs, {time.perf_counter() - t0:.1f} s)",
                flush=True,
            )
        runs = [replace(r, ratio_bounds=got) if r is milp else r for r in runs]
    return runs


def share_key(slo_base: float) -> str:
    """The served share a plan needs to meet a criterion against a baseline of replayed SLO
    attainment ``slo_base`` (at least the baseline's minus the slack), as a key."""
    return f"{max(slo_base - SLO_SLACK, 0.0):.4f}"


#: the node limit of the integer full-service bound (``integer_bound``; deterministic, unlike a
#: clock) and the clock behind it (a safety net: the bound when it stops is still proven)
INTEGER_NODES = 1000
INTEGER_SECONDS = 300.0


def best_full_service(coeffs: Any, options: PlanOptions, params: HorizonParams, demand: dict, inv: dict) -> Any:
    """The best schedule that serves the whole demand that came, found by one solve of the
    full-horizon MILP (perfect foresight, no rolling windows; the same rules, inventory and
    placement rows) with the tail classes planned as ordinary classes, so that its objective is
    that of a schedule (``integer_bound``'s incumbent; its ``value`` bounds this model only, which
    the tail rule relaxes), searched to at most ``INTEGER_NODES`` x 5 nodes. Where even this
    schedule falls short of a criterion's target, neither a better forecast nor a longer window
    would meet it."""
    opts = options.replace(tail_rate_rps=None, node_limit=5 * INTEGER_NODES, time_limit_s=INTEGER_SECONDS)
    return integer_bound(coeffs, opts, params, demand, inv, serve_all=True)


def unsettled(rs: list[Run], objective: str) -> bool:
    """Does a criterion on ``objective``'s plans fail while its LP ceiling is at or above its target
    (so that the LP does not show the target out of reach and a tighter bound may)?"""
    return any(
        not v["met"] and not v["info"] and v["ceiling"] >= v["target"]
        for v in verdicts(rs)
        if CEILING_OF.get(v["metric"]) == objective and not math.isnan(v["ceiling"])
    )


OBJECTIVES = ("energy", "cost")
#: criterion of issue 11: (objective of the plans, metric, least ratio)
CRITERIA = (("energy", "gp_j", 1.15), ("energy", "gp_j_op", 1.15), ("cost", "gp_usd", 1.5))
METRIC_NAME = {
    "gp_j": "goodput tokens/J (plain)",
    "gp_j_op": "goodput tokens/J (operator's view: idle fleet chips charged)",
    "gp_usd": "goodput tokens/$",
}
SLO_SLACK = 0.005
PROVISION: str | None = None  # --provision-for, named in the results' header


def _ratio(a: float, b: float) -> float:
    return a / b if b and math.isfinite(a) and math.isfinite(b) else math.nan


#: the baselines' sizing as NeuScale publishes it (``workload.provision_for``)
PUBLISHED_SIZING = "peak"
#: tag of a baseline run on the instance's own demand where that is not sized as published
SAME_DEMAND = " on the MILP's demand"


def best_homogeneous(rs: list[Run], objective: str, metric: str, same_demand: bool = False) -> Run | None:
    """The homogeneous auto-scaler an operator would pick among those planned with ``objective``:
    of the generations that serve the trace about as well as any (replayed SLO attainment within
    the slack of the best one's), the one of highest replayed ``metric``. A generation whose
    inventory cannot carry the demand (it serves a fraction of it at full load, whence a high
    goodput per unit) is no deployment and no baseline. ``same_demand``: among the runs on the
    MILP's demand (``SAME_DEMAND``) instead of the published sizing."""
    hs = [
        r
        for r in rs
        if r.objective == objective and r.method.startswith("homogeneous") and (SAME_DEMAND in r.method) == same_demand
    ]
    if not hs:
        return None
    top = max(r.slo for r in hs)
    return max((r for r in hs if r.slo >= top - SLO_SLACK), key=lambda r: (r.metric(metric), r.method))


#: the bound each metric's ceiling divides by (the objective of its plans); none for the operator's view
CEILING_OF = {"gp_j": "energy", "gp_usd": "cost"}


def ceiling(milp: Run, base: Run, metric: str) -> float:
    """The most any schedule serving the trace's whole demand can reach against ``base`` on
    ``metric``: every offered output token as goodput over the full-service bound of the objective
    (``relaxation_bound(serve_all=True)`` on the demand the instance sizes for, the same scaling
    rules and inventory), over the baseline's replayed value. NaN without such a bound (no schedule
    serves the whole demand, or a metric without one)."""
    return _offered_ratio(milp, milp.full_service_bound, base, metric)


def _offered_ratio(milp: Run, objective: float | None, base: Run, metric: str) -> float:
    """Every offered output token (``milp``'s replay) over ``objective`` (J or USD of a full-service
    schedule or bound), over ``base``'s replayed ``metric``; NaN without an objective or a bound."""
    if metric not in CEILING_OF or objective is None or not objective > 0:
        return math.nan
    return _ratio(float(milp.replay.get("tokens_out_offered", math.nan)) / objective, base.metric(metric))


def best_ratio(milp: Run, base: Run, metric: str) -> float:
    """The best full-service schedule's ratio against ``base`` on ``metric`` (every offered output
    token over its objective, ``best_full_service``), NaN where it was not run."""
    return _offered_ratio(milp, milp.best_schedule, base, metric)


def ratio_ceiling(milp: Run, base: Run, metric: str) -> float:
    """The most any schedule serving at least the share of requests the criterion needs against
    ``base`` (its SLO attainment minus the slack) can reach on ``metric``, over the baseline's
    replayed value: ``ratio_bound`` (served output tokens per objective unit, the LP relaxation),
    an upper bound on goodput per unit. NaN where none was computed or no such schedule exists."""
    if metric not in CEILING_OF:
        return math.nan
    v = milp.ratio_bounds.get(share_key(base.slo))
    return math.nan if v is None else _ratio(float(v), base.metric(metric))


def verdicts(rs: list[Run]) -> list[dict[str, Any]]:
    """One row per (criterion, baseline): ratio, ceiling, SLOs, met or not."""
    out = []
    for objective, metric, target in CRITERIA:
        milp = next((r for r in rs if r.method == "milp" and r.objective == objective), None)
        bases = [
            (next((r for r in rs if r.method == "neuscale-autoscaler" and r.objective == objective), None), False),
            (best_homogeneous(rs, objective, metric), False),
            (
                next(
                    (
                        r
                        for r in rs
                        if r.method.startswith("neuscale-autoscaler" + SAME_DEMAND) and r.objective == objective
                    ),
                    None,
                ),
                True,
            ),
            (best_homogeneous(rs, objective, metric, same_demand=True), True),
        ]
        oracle = next((r for r in rs if r.method == "oracle" and r.objective == objective), None)
        for b, info in bases:
            if milp is None or b is None:
                continue
            ratio = _ratio(milp.metric(metric), b.metric(metric))
            slo_ok = milp.slo >= b.slo - SLO_SLACK
            out.append(
                {
                    "objective": objective,
                    "metric": metric,
                    "target": target,
                    "baseline": b.method,
                    "milp": milp.metric(metric),
                    "base": b.metric(metric),
                    "ratio": ratio,
                    "ceiling": ceiling(milp, b, metric),
                    "ceiling_mark": "" if milp.full_service_kind == "LP" else " (integer)",
                    "ceiling_share": ratio_ceiling(milp, b, metric),
                    "slo_milp": milp.slo,
                    "slo_base": b.slo,
                    "met": bool(ratio >= target and slo_ok),
                    "slo_ok": slo_ok,
                    "info": info,
                    "oracle": math.nan if oracle is None else _ratio(oracle.metric(metric), b.metric(metric)),
                    "best": best_ratio(milp, b, metric),
                    "best_kind": milp.best_schedule_kind,
                    "oracle_slo_ok": oracle is not None and oracle.slo >= b.slo - SLO_SLACK,
                    "idle_share": _idle_share(milp) if metric == "gp_j_op" else math.nan,
                }
            )
    return out


def _idle_share(r: Run) -> float:
    """The share of ``r``'s operator's-view energy that is the idle fleet chips' static power."""
    t = r.replay
    return float(t["pue"]) * float(t["energy_idle_fleet_j"]) / r.energy_op_j if r.energy_op_j > 0 else math.nan


def shortfall_reason(v: dict[str, Any]) -> str:
    """Why a failed criterion row of :func:`verdicts` fails, with its numbers; the first that
    applies of: the operator's view (the idle fleet's static power, the same for every plan, is
    most of the energy), the fleet (no schedule serves the whole demand), the SLO condition, a
    target above a ceiling (no plan that sizes for the provisioned demand reaches it), the forecast
    (the same rolling MILP on the demand that came, ``oracle``, meets it), else what is left between
    the oracle's plan and the ceiling: the rolling windows, the scaling rules and the vPod rounding
    that the bound relaxes. "" for a met row."""
    if v["met"]:
        return ""
    if v["metric"] == "gp_j_op":
        return (
            f"the idle fleet: {v['idle_share']:.0%} of the MILP's operator energy is the static power of "
            "fleet chips no vPod holds, paid alike under every plan"
        )
    if not v["slo_ok"]:
        return f"the SLO condition: MILP {v['slo_milp']:.4f} < baseline {v['slo_base']:.4f} - {SLO_SLACK:.3f}"
    if v["ceiling_share"] < v["target"]:
        return f"above the ceiling at the baseline's SLO ({v['ceiling_share']:.2f}x)"
    if v["ceiling"] < v["target"]:
        shed = (
            ""
            if math.isnan(v["ceiling_share"])
            else f"; only a plan that leaves requests unserved could (at most {v['ceiling_share']:.2f}x at the "
            "baseline's share)"
        )
        return f"above the full-service ceiling ({v['ceiling']:.2f}x{v['ceiling_mark']}){shed}"
    oracle = "no oracle run" if math.isnan(v["oracle"]) else f"the oracle {v['oracle']:.2f}x"
    if math.isnan(v["ceiling"]):
        shed = (
            ""
            if math.isnan(v["ceiling_share"])
            else f"; a plan serving only the baseline's share of requests could reach at most {v['ceiling_share']:.2f}x"
        )
        return (
            "the fleet: no schedule serves the whole demand (no full-service ceiling); "
            f"on the demand that came {oracle}{shed}"
        )
    if v["oracle"] >= v["target"] and v["oracle_slo_ok"]:
        return f"the forecast: on the demand that came the same MILP reaches {v['oracle']:.2f}x"
    if v["best"] < v["target"]:
        return (
            f"out of reach with perfect foresight: the best full-service schedule of the whole horizon on the "
            f"demand that came reaches {v['best']:.2f}x ({v['best_kind']}; {oracle} in rolling windows); the "
            f"proven ceiling {v['ceiling']:.2f}x{v['ceiling_mark']} relaxes the tail classes"
        )
    if not math.isnan(v["best"]):
        return (
            f"rolling windows: the best full-service schedule of the whole horizon on the demand that came "
            f"reaches {v['best']:.2f}x, {oracle} in rolling windows"
        )
    return (
        f"rolling windows, rules and rounding: on the demand that came {oracle}, "
        f"against a proven ceiling of {v['ceiling']:.2f}x{v['ceiling_mark']}"
    )


def dominance(rs: list[Run]) -> list[str]:
    """Baseline plans better than the MILP's on the MILP's own objective (replayed energy, resp.
    money) at an equal or higher replayed SLO attainment; one line each, with numbers."""
    out = []
    for objective in OBJECTIVES:
        key = {"energy": "energy_j", "cost": "cost_usd"}[objective]
        milp = next((r for r in rs if r.method == "milp" and r.objective == objective), None)
        if milp is None:
            continue
        for b in rs:
            if b.method in ("milp", "oracle") or b.slo < milp.slo:
                continue
            if float(b.replay[key]) < float(milp.replay[key]) * (1 - 1e-9):
                unit = "MJ" if objective == "energy" else "USD"
                scale = 1e-6 if objective == "energy" else 1.0
                out.append(
                    f"{objective}: {b.method} ({b.objective} plan) {float(b.replay[key]) * scale:.4g} {unit} at SLO "
                    f"{b.slo:.3f} < milp {float(milp.replay[key]) * scale:.4g} {unit} at SLO {milp.slo:.3f}"
                )
    return out


def table(runs: list[Run]) -> str:
    lines = []
    for label in dict.fromkeys(r.case for r in runs):
        rs = [r for r in runs if r.case == label]
        lines.append(f"\n### {label}\n")
        lines.append(
            "| method | objective | goodput tokens/J | goodput tokens/J (operator) | goodput tokens/$ | SLO attainment "
            "| tokens/J (all served) | replayed energy (MJ) | idle fleet (MJ, PUE) | replayed cost (USD) "
            "| planned unserved req/s | chips (peak per generation) | surge vPods (chip-h beyond the plan) "
            "| plan s | replay s |"
        )
        lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
        for r in rs:
            t = r.replay
            chips = ", ".join(f"{c.replace('tpu-', '')} {n}" for c, n in r.chips.items() if n)
            lines.append(
                f"| {r.method} | {r.objective} | {r.metric('gp_j'):.4g} | {r.metric('gp_j_op'):.4g} | "
                f"{r.metric('gp_usd'):.4g} | {r.slo:.3f} | {float(t['tokens_per_joule']):.4g} | "
                f"{float(t['energy_j']) / 1e6:.4g} | {float(t['pue']) * float(t['energy_idle_fleet_j']) / 1e6:.4g} | "
                f"{float(t['cost_usd']):.4g} | {r.planned_unserved_rps:.3g} | {chips} | "
                f"{int(t.get('surge_vpods', 0))} ({float(t.get('surge_chip_hours', 0.0)):.3g}) | {r.plan_s:.2f} | "
                f"{r.replay_s:.2f} |"
            )
        lines.append("\n**Criterion** (MILP energy plan for tokens/J, cost plan for tokens/$; SLO slack 0.5 point):\n")
        lines.append(
            "| metric | baseline | MILP | baseline | ratio | oracle's ratio | target | ceiling (full service) "
            "| ceiling (at the baseline's SLO) | SLO MILP / baseline | met |"
        )
        lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        vs = verdicts(rs)
        for v in vs:
            ceil = "-" if math.isnan(v["ceiling"]) else f"{v['ceiling']:.2f}x{v['ceiling_mark']}"
            share = "-" if math.isnan(v["ceiling_share"]) else f"{v['ceiling_share']:.2f}x"
            orc = "-" if math.isnan(v["oracle"]) else f"{v['oracle']:.2f}x"
            if v["info"]:
                verdict = ("yes" if v["met"] else "no") + " (baseline on the MILP's demand: not a criterion)"
            else:
                verdict = "yes" if v["met"] else f"NO: {shortfall_reason(v)}"
            lines.append(
                f"| {METRIC_NAME[v['metric']]} | {v['baseline']} | {v['milp']:.4g} | {v['base']:.4g} | "
                f"{v['ratio']:.2f}x | {orc} | {v['target']:.2f}x | {ceil} | {share} | "
                f"{v['slo_milp']:.3f} / {v['slo_base']:.3f} | "
                f"{verdict} |"
            )
        lines.append(CEILING_NOTE)
        dom = dominance(rs)
        lines.append(
            "\n**Baselines better than the MILP on its own objective at equal or higher replayed SLO:** "
            + ("none." if not dom else f"{len(dom)}:\n\n" + "\n".join(f"- {d}" for d in dom))
        )
        short = slo_shortfalls(rs, vs)
        if short:
            lines.append("\n**Criteria lost on the SLO condition**, where the misses lie:\n")
            lines.extend(short)
        by = {(r.method, r.objective): r for r in rs}
        for objective, metric, name in (("energy", "gp_j", "goodput tokens/J"), ("cost", "gp_usd", "goodput tokens/$")):
            if ("milp", objective) in by and ("oracle", objective) in by:
                f, o = by[("milp", objective)], by[("oracle", objective)]
                lines.append(
                    f"\nForecast ({f.forecast}) vs oracle, same rolling MILP ({objective}): {name} "
                    f"{_ratio(f.metric(metric), o.metric(metric)):.3f}x, SLO attainment {f.slo:.3f} vs {o.slo:.3f}."
                )
    return "\n".join(lines) + "\n"


def shortfalls(runs: list[Run]) -> str:
    """Every failed criterion (the baselines as published, not the informative rows) of every
    scenario, one line each with its ratio, target and :func:`shortfall_reason`."""
    lines = []
    met = total = 0
    for label in dict.fromkeys(r.case for r in runs):
        for v in verdicts([r for r in runs if r.case == label]):
            if v["info"] or v["metric"] == "gp_j_op":
                continue
            total += 1
            met += v["met"]
            if not v["met"]:
                lines.append(
                    f"- {label}, {METRIC_NAME[v['metric']]} against {v['baseline']}: {v['ratio']:.2f}x "
                    f"(target {v['target']:.2f}x; SLO {v['slo_milp']:.3f} / {v['slo_base']:.3f}): {shortfall_reason(v)}"
                )
    head = (
        f"\n## Criteria met: {met} of {total}\n\n(The energy plan's goodput tokens/J and the cost plan's "
        "goodput tokens/$ against NeuScale's auto-scaler and the best homogeneous one; the operator's view "
        "is reported in each scenario's table, not counted.)"
    )
    return head + ("\n\nShort, and why:\n\n" + "\n".join(lines) if lines else "") + "\n"


CEILING_NOTE = (
    "\n*Ceiling (full service)*: the most any schedule that serves the trace's whole demand (as the "
    "instance sizes it, every epoch) under the same scaling rules and inventory can reach against that "
    "baseline: every offered output token counted as goodput, over the proven lower bound on its "
    "energy, resp. money (the full-horizon LP relaxation with nothing unserved, "
    "`relaxation_bound(serve_all=True)`; *(integer)*: where that LP left a failed criterion's target "
    "within reach, the proven bound of the full-horizon integer model, `integer_bound(serve_all=True)`, "
    f"searched to at most {INTEGER_NODES} nodes); the model agrees with the replay within 3 % "
    "(`consistency_results.md`). `-`: no such schedule exists (the fleet cannot serve the demand) or "
    "the metric has no bound (operator's view). A target above the ceiling cannot be met by a plan "
    "that serves everything; only by one that serves less. *Ceiling (at the baseline's SLO)*: the most "
    "any schedule under the same rules and inventory that serves at least the share of requests the "
    "criterion allows (the baseline's replayed SLO attainment minus 0.5 point) can reach: the largest "
    "served output tokens per J, resp. per USD, over the full-horizon LP relaxation "
    "(`ratio_bound`, Dinkelbach's iteration; a class-epoch left partly unserved credited the same "
    "share of its offered tokens and requests), over the baseline's replayed value; an upper bound on "
    "goodput per unit as far as the model agrees with the replay. Below the target: no plan that sizes "
    "for the provisioned demand and meets the criterion's SLO condition reaches it. Both ceilings take "
    "demand as the instance provisions it (each class's rate per epoch, `workload.provision_for`): a "
    "plan sized below that rate may still serve most requests in the replay (the lower forecasts of "
    "`forecast_gap_results.md`, e.g. EWMA, trade SLO for it), so a ceiling bounds the plans that size "
    "for the provisioned demand, not every plan.\n"
)


def order(r: Run, labels: list[str]) -> tuple:
    """Rows by scenario, objective, then milp, oracle, NeuScale, homogeneous (by chip)."""
    rank = next((i for i, m in enumerate(("milp", "oracle", "neuscale", "homogeneous")) if r.method.startswith(m)), 9)
    case = labels.index(r.case) if r.case in labels else len(labels)
    return (case, OBJECTIVES.index(r.objective), rank, r.method)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 epochs of azure-conv x1 (a smoke run)")
    ap.add_argument("--no-deepseek", action="store_true", help="leave DeepSeek-V3 out")
    ap.add_argument("--only", default=None, help="comma-separated scenario labels to run (default: all)")
    ap.add_argument("--epochs", type=int, default=None, help="plan only the first N epochs")
    ap.add_argument(
        "--provision-for",
        choices=("peak", "mean", "burst"),
        default=None,
        help="override workload.provision_for in every scenario (e.g. burst: the sizing window of the trace)",
    )
    ap.add_argument("--forecast", default=None, help="the MILP's forecaster (default: the shipped instances')")
    ap.add_argument(
        "--reserve-forecast",
        default=None,
        help="the MILP's guard-reserve forecaster, 'none' for none (default: the instances')",
    )
    ap.add_argument("--methods", default=None, help="comma-separated method prefixes to run (default: all)")
    ap.add_argument("--keep", default=None, help="a results .json whose scenarios not run now are kept")
    ap.add_argument(
        "--extra",
        action="store_true",
        help="run the scenarios outside the shipped ones (EXTRA) instead; default --out headline_extra_results.md",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.out is None:
        name = "headline_extra_results.md" if args.extra else "headline_results.md"
        args.out = str(ROOT / "benchmarks" / name)
    global PROVISION, FORECAST, RESERVE
    PROVISION = args.provision_for
    FORECAST = args.forecast
    RESERVE = args.reserve_forecast
    if args.quick:
        args.epochs = args.epochs or 2
        args.only = args.only or "azure-conv x1"
    only = {s.strip() for s in args.only.split(",")} if args.only else None
    methods = [m.strip() for m in args.methods.split(",")] if args.methods else None
    start = time.perf_counter()
    runs: list[Run] = []
    labels = [c.label for c in cases(not args.no_deepseek, None, extra=args.extra)]
    if args.keep:  # rows of scenarios run before (same JSON layout), kept unless run again
        kept = [Run(**r) for r in json.loads(Path(args.keep).read_text(encoding="utf-8"))]
        runs = kept
    for case in cases(not args.no_deepseek, args.epochs, args.provision_for, extra=args.extra):
        if only is not None and case.label not in only:
            continue
        t0 = time.perf_counter()
        print(case.label, flush=True)
        new = run_case(case, methods)
        redo = {(r.case, r.method, r.objective) for r in new}
        runs = [r for r in runs if (r.case, r.method, r.objective) not in redo] + new
        runs.sort(key=lambda r: order(r, labels))
        print(f"{case.label}: {time.perf_counter() - t0:.1f} s", flush=True)
        write(runs, args.out, time.perf_counter() - start)
    body = write(runs, args.out, time.perf_counter() - start)
    print(body)
    print(f"written {args.out} in {time.perf_counter() - start:.1f} s")
    return 0


def write(runs: list[Run], out: str, total: float) -> str:
    body = shortfalls(runs) + table(runs)
    header = (
        "# Headline experiment on goodput: horizon MILP vs NeuScale auto-scaler vs homogeneous auto-scaler\n\n"
        "Generated by `benchmarks/headline.py` (see its docstring for the set-up). Every plan is replayed "
        "against the trace (`neuscale_opt.replay`, 30-s vPod creation delay, warm start, each class split "
        "over its groups as the plan says, the surge guard under every plan); "
        "goodput = output tokens of requests that met their SLO; "
        "energy at the facility (PUE 1.1), *plain* = held vPods, "
        "*operator* = plus the static power of idle fleet chips; money = chip-hours held x on-demand price. "
        f"Total run time {total:.0f} s."
        + (f' Every scenario with `workload.provision_for = "{PROVISION}"`.' if PROVISION else "")
        + (f" The MILP's forecaster in every scenario: `{FORECAST}`." if FORECAST else "")
        + (f" The MILP's guard-reserve forecaster in every scenario: `{RESERVE}`." if RESERVE else "")
        + "\n"
    )
    Path(out).write_text(header + body, encoding="utf-8")
    Path(out).with_suffix(".json").write_text(
        json.dumps([{**r.__dict__} for r in runs], indent=1, sort_keys=True, default=float) + "\n", encoding="utf-8"
    )
    return body


if __name__ == "__main__":
    raise SystemExit(main())
