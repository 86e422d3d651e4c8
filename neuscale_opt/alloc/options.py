"""Planning options: which objective, which formulation variant, which solver and how long.

:class:`PlanOptions` is the allocation package's own, frozen view of the settings it needs, so that
the core API does not depend on the instance schema. :meth:`PlanOptions.from_instance` reads them
from a validated ``Instance``.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from neuscale_opt.errors import InputError

Objective = Literal["energy", "cost", "carbon"]
Variant = Literal["dedicated", "pooled"]
Serving = Literal["colocated", "disaggregated"]
Backend = Literal["highs", "ortools"]
Method = Literal["milp", "greedy", "homogeneous", "unlimited"]
Placement = Literal["pattern", "exact", "none"]
TimeLimitScope = Literal["per-solve", "per-window", "total"]

OBJECTIVES: tuple[str, ...] = ("energy", "cost", "carbon")
VARIANTS: tuple[str, ...] = ("dedicated", "pooled")
SERVINGS: tuple[str, ...] = ("colocated", "disaggregated")
BACKENDS: tuple[str, ...] = ("highs", "ortools")
METHODS: tuple[str, ...] = ("milp", "greedy", "homogeneous", "unlimited")
PLACEMENTS: tuple[str, ...] = ("pattern", "exact", "none")
TIME_LIMIT_SCOPES: tuple[str, ...] = ("per-solve", "per-window", "total")

#: Default tail rate (req/s): a class below it in an epoch (under one request per 5 s at the peak the
#: plan provisions for) gets no vPod group of its own (``formulations/allocation.md``, "Tail classes").
DEFAULT_TAIL_RATE_RPS = 0.2

#: Default work limit: branch-and-bound nodes per MILP solve (HiGHS ``mip_max_nodes``, SCIP
#: ``limits/totalnodes``). The primary stop rule: a count, not a clock, so a solve it stops ends the
#: same on any machine at any load (one thread, fixed seed). Set by measurement well above what the
#: shipped instances' solves need to prove optimality (``formulations/allocation.md``, "Solver
#: limits"; ``benchmarks/bench_horizon.py``, case (e)).
DEFAULT_NODE_LIMIT = 20_000

#: Largest node limit the solvers take (HiGHS's ``mip_max_nodes`` is a 32-bit integer).
MAX_NODE_LIMIT = 2**31 - 1

#: Default wall-clock limit per solve (s): a safety net behind the work limit, not the stop rule
#: (on a loaded machine a 60-s limit stopped rolling windows of the default instance; the plan then
#: depended on the load).
DEFAULT_TIME_LIMIT_S = 1800.0

#: Default multiple of the dearest per-request cost used as the unserved-demand penalty
#: (see ``formulations/allocation.md``, parameter ``penalty``).
DEFAULT_PENALTY_FACTOR = 10.0


def _number(v: Any) -> bool:
    """A real number (not a boolean, not NaN)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and v == v


@dataclass(frozen=True)
class PlanOptions:
    """Settings of one planning run.

    Attributes
    ----------
    objective:
        ``energy`` (J), ``cost`` (USD) or ``carbon`` (kgCO2e), totalled over each epoch.
    variant:
        ``pooled`` (the default) - a vPod type's capacity is shared by the classes that can share
        it within their SLOs, in fractional loads (coalescing; ``alloc.context.shared_groups``);
        ``dedicated`` - a vPod group serves one request class (NeuScale's vPod groups).
    serving:
        ``colocated`` - prefill and decode on the same vPod; ``disaggregated`` - separate prefill
        and decode vPods, the KV cache crossing the data-centre network.
    allow_unserved:
        Allow demand to stay unserved at ``unserved_penalty`` per request instead of declaring the
        instance infeasible.
    unserved_penalty:
        Penalty per unserved request in objective units (J, USD or kg). ``None`` = default: ten times
        the dearest per-request cost of any usable configuration at full (capped) load.
    util_cap:
        Override of the utilisation cap (queueing headroom), one share for every configuration;
        ``None`` keeps the coefficients' cap, and when that is ``None`` too each configuration gets
        the safe load of ``attainment`` (``alloc.attainment``).
    attainment:
        SLO-attainment target (share of requests within their TTFT target) the safe loads are
        derived for; read from ``slo.attainment``, default 0.99.
    bounds:
        Epsilon constraints: ``(metric, limit)`` pairs, each bounding another objective's total of
        an epoch (``("cost", 12.5)``: at most 12.5 USD per epoch) while ``objective`` is minimised;
        ``parse_bound`` reads the CLI's ``cost<=12.5``.
    tail_rate_rps:
        Classes below this rate in an epoch are served best-effort on spare capacity of the nearest
        held group meeting their SLO instead of getting a group of their own (``alloc.tail``);
        ``None`` or 0 turns it off. Default ``DEFAULT_TAIL_RATE_RPS``.
    slice_factor:
        ``None`` lets a class's rate be split continuously across vPod groups. An integer ``S``
        splits each class into ``S`` equal slices each served by one group (Mélange's slices).
    prune_dominated:
        Drop configurations another one of the same generation dominates before modelling (an exact
        presolve, see the formulation); off only to check that it is exact.
    placement:
        How the vPods of generations given as pods (``Coefficients.pods``) must fit their tori:
        ``pattern`` - packing patterns per distinct pod state (symmetry-free, the default);
        ``exact`` - one binary per aligned slice position (small fleets only); ``none`` - count chips
        only (no placements in the plan). Generations given as a plain chip count, GPUs and unlimited
        inventories are counted only, whatever the setting (``formulations/allocation.md``).
    backend, time_limit_s, mip_gap, threads, seed:
        Solver settings. One thread and a fixed seed keep plans identical run to run.
    node_limit:
        Work limit: branch-and-bound nodes per MILP solve (``DEFAULT_NODE_LIMIT``; ``None`` = none).
        The primary, deterministic stop rule: a solve it stops has status ``work_limit`` and ends
        the same on any machine. ``time_limit_s`` (default ``DEFAULT_TIME_LIMIT_S``) is the safety
        net behind it; a solve the clock stops has status ``time_limit`` and may differ between
        machines (:data:`neuscale_opt.alloc.solution.STOPPED_BY`).
    time_limit_scope:
        What ``time_limit_s`` bounds: ``per-solve`` - every solver call (the default);
        ``per-window`` - all solves of one epoch (independent epochs) or one window (rolling
        horizon) together; ``total`` - all solves of the plan together. A solve gets what is left
        of its budget (:meth:`solve_time_limit`).
    restarts:
        HiGHS's restarts after the root node (``mip_allow_restart``). ``None`` (the default): off
        in the windows of a horizon plan (``horizon.context.horizon_options``), on elsewhere; why,
        with the measurements: ``formulations/allocation.md``, "Solver limits".
    solver_log:
        Stream the solver's log to stderr.
    save_lp, save_mps:
        Write each solved model to this path (LP or MPS format, via Pyomo); the k-th further solve
        of the same run to ``<stem>-<k><suffix>``.
    jobs:
        Processes a plan may use: with 2, a rolling plan computes its proven bound (the full-horizon
        LP, ``horizon.rolling.relaxation_bound``) in a forked process beside its windows (Linux, a
        process without other threads; the same bound either way, so not a planning setting).
        ``neuscale-opt plan --jobs`` sets it; default 1.
    deadline:
        Set by :meth:`start_budget`, not by users: the ``time.monotonic()`` at which the running
        budget ends.
    """

    objective: Objective = "energy"
    variant: Variant = "pooled"
    serving: Serving = "colocated"
    allow_unserved: bool = False
    unserved_penalty: float | None = None
    util_cap: float | None = None
    attainment: float = 0.99
    bounds: tuple[tuple[str, float], ...] = ()
    tail_rate_rps: float | None = DEFAULT_TAIL_RATE_RPS
    slice_factor: int | None = None
    prune_dominated: bool = True
    placement: Placement = "pattern"
    backend: Backend = "highs"
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S
    mip_gap: float = 1e-6
    threads: int = 1
    seed: int = 0
    node_limit: int | None = DEFAULT_NODE_LIMIT
    restarts: bool | None = None
    time_limit_scope: TimeLimitScope = "per-solve"
    solver_log: bool = False
    save_lp: str | None = None
    save_mps: str | None = None
    jobs: int = field(default=1, compare=False)  # how, not what: the plan is the same
    deadline: float | None = field(default=None, compare=False)  # a budget, not a setting

    def __post_init__(self) -> None:
        problems: list[str] = []
        for name, value, allowed in (
            ("objective", self.objective, OBJECTIVES),
            ("variant", self.variant, VARIANTS),
            ("serving", self.serving, SERVINGS),
            ("backend", self.backend, BACKENDS),
            ("placement", self.placement, PLACEMENTS),
            ("time_limit_scope", self.time_limit_scope, TIME_LIMIT_SCOPES),
        ):
            if value not in allowed:
                problems.append(f"{name} must be one of {list(allowed)}, got {value!r}")
        if self.unserved_penalty is not None and not (
            math.isfinite(self.unserved_penalty) and self.unserved_penalty > 0
        ):
            problems.append(f"unserved_penalty must be a positive number, got {self.unserved_penalty}")
        if self.tail_rate_rps is not None and not (
            _number(self.tail_rate_rps) and math.isfinite(self.tail_rate_rps) and self.tail_rate_rps >= 0
        ):
            problems.append(f"tail_rate_rps must be a number >= 0, got {self.tail_rate_rps}")
        if not (_number(self.attainment) and 0 < self.attainment < 1):
            problems.append(f"attainment must be in (0, 1), got {self.attainment}")
        for metric, limit in self.bounds:
            if metric not in OBJECTIVES or metric == self.objective:
                problems.append(f"a bound must name another objective than {self.objective!r}, got {metric!r}")
            if not (math.isfinite(limit) and limit >= 0):
                problems.append(f"bound {metric}<= must be a finite number >= 0, got {limit}")
        if len({m for m, _ in self.bounds}) != len(self.bounds):
            problems.append("a metric is bounded twice")
        if self.util_cap is not None and not (_number(self.util_cap) and 0 < self.util_cap <= 1):
            problems.append(f"util_cap must be in (0, 1], got {self.util_cap}")
        sf = self.slice_factor
        if sf is not None and not (_number(sf) and math.isfinite(sf) and sf >= 1 and int(sf) == sf):
            problems.append(f"slice_factor must be a positive integer, got {self.slice_factor}")
        if self.time_limit_s is not None and not (_number(self.time_limit_s) and 0 < self.time_limit_s < math.inf):
            problems.append(f"time_limit_s must be a finite number > 0, got {self.time_limit_s}")
        if self.restarts is not None and not isinstance(self.restarts, bool):
            problems.append(f"restarts must be true, false or unset, got {self.restarts!r}")
        nl = self.node_limit
        if nl is not None and (isinstance(nl, bool) or not isinstance(nl, int) or not 1 <= nl <= MAX_NODE_LIMIT):
            problems.append(f"node_limit must be an integer in [1, {MAX_NODE_LIMIT}], got {nl!r}")
        if not (_number(self.mip_gap) and 0 <= self.mip_gap < 1):
            problems.append(f"mip_gap must be in [0, 1), got {self.mip_gap}")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
            problems.append(f"threads must be an integer >= 1, got {self.threads}")
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            problems.append(f"jobs must be an integer >= 1, got {self.jobs}")
        if problems:
            raise InputError("; ".join(problems), where="plan options")

    def replace(self, **changes: Any) -> PlanOptions:
        """A copy with some fields changed (the original is never modified)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def planning_dict(self) -> dict[str, Any]:
        """The settings that shape the plan (what a plan's provenance records): every field but
        the output and log settings and the running deadline."""
        d = asdict(self)
        for k in ("solver_log", "save_lp", "save_mps", "jobs", "deadline"):
            d.pop(k)
        return d

    def start_budget(self, scope: str) -> PlanOptions:
        """Options whose solves share one time budget from now, when ``scope`` is this options'
        ``time_limit_scope``: the planners call ``start_budget("per-window")`` at each epoch or
        window, the caller of a whole plan ``start_budget("total")``. Otherwise unchanged."""
        if self.time_limit_s is None or self.time_limit_scope != scope:
            return self
        return replace(self, deadline=time.monotonic() + float(self.time_limit_s))

    def solve_time_limit(self) -> float | None:
        """Seconds the next solve may take: the time limit, or what is left of the running budget
        (at least 1 ms, so that a spent budget ends the solve at once)."""
        if self.time_limit_s is None:
            return None
        if self.deadline is None:
            return float(self.time_limit_s)
        return max(min(float(self.time_limit_s), self.deadline - time.monotonic()), 1e-3)

    def limit_text(self, stopped_by: str) -> str:
        """The limit that stopped a solve, in words: ``stopped_by`` is ``work_limit`` or ``time_limit``."""
        if stopped_by == "work_limit":
            return "the work limit" + (f" of {self.node_limit} nodes" if self.node_limit is not None else "")
        return "the wall-clock limit" + (f" of {self.time_limit_s:g} s" if self.time_limit_s is not None else "")

    def no_plan_text(self, stopped_by: str) -> str:
        """Why a solve ended without a plan and what to try, in words (the end of the exit-3 line):
        the limit that stopped it (:meth:`limit_text`), then a larger limit and, unless demand may
        go unserved already, ``--allow-unserved`` (an over-subscribed epoch the search cannot prove
        infeasible within the limit ends this way too)."""
        flag = "--node-limit" if stopped_by == "work_limit" else "--time-limit"
        hint = f"a larger {flag} may find one"
        if not self.allow_unserved:
            hint += "; if the inventory is too small, --allow-unserved plans what fits"
        return f"the solver hit {self.limit_text(stopped_by)} without a plan ({hint})"

    @classmethod
    def from_instance(cls, instance: Any, **overrides: Any) -> PlanOptions:
        """Read the options from a validated ``neuscale_opt.instance.Instance``.

        Fields absent from the instance keep their defaults; ``overrides`` (e.g. from CLI flags)
        win over the instance. ``None`` overrides are ignored.
        """
        planning = getattr(instance, "planning", None)
        solver = getattr(instance, "solver", None)
        values: dict[str, Any] = {}
        if getattr(instance, "objective", None) is not None:
            values["objective"] = instance.objective
        for key in (
            "variant",
            "serving",
            "allow_unserved",
            "unserved_penalty",
            "slice_factor",
            "util_cap",
            "placement",
            "tail_rate_rps",
        ):
            v = getattr(planning, key, None) if planning is not None else None
            if v is not None:
                values[key] = v
        for key, field_name in (
            ("backend", "backend"),
            ("time_limit_s", "time_limit_s"),
            ("mip_gap", "mip_gap"),
            ("threads", "threads"),
            ("seed", "seed"),
            ("node_limit", "node_limit"),
            ("restarts", "restarts"),
        ):
            v = getattr(solver, key, None) if solver is not None else None
            if v is not None:
                values[field_name] = v
        slo = getattr(instance, "slo", None)
        if getattr(slo, "attainment", None) is not None:
            values["attainment"] = float(slo.attainment)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


_BOUND = re.compile(r"^\s*(energy|cost|carbon)\s*<=\s*([-+0-9.eE]+)\s*$")


def parse_bound(text: str, where: str = "--bound") -> tuple[str, float]:
    """``"cost<=12.5"`` -> ``("cost", 12.5)`` (units of the metric: J, USD, kgCO2e per epoch)."""
    m = _BOUND.match(text)
    try:
        value = float(m.group(2)) if m else math.nan
    except ValueError:
        value = math.nan
    if m is None or not math.isfinite(value):
        raise InputError(f"expected METRIC<=NUMBER with METRIC one of {list(OBJECTIVES)}, got {text!r}", where=where)
    return m.group(1), value
