"""Planning options: which objective, which formulation variant, which solver and how long.

:class:`PlanOptions` is the allocation package's own, frozen view of the settings it needs, so that
the core API does not depend on the instance schema. :meth:`PlanOptions.from_instance` reads them
from a validated ``Instance``.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from neuscale_opt.errors import InputError

Objective = Literal["energy", "cost", "carbon"]
Variant = Literal["dedicated", "pooled"]
Serving = Literal["colocated", "disaggregated"]
Backend = Literal["highs", "ortools"]
Method = Literal["milp", "greedy", "homogeneous", "unlimited"]
Placement = Literal["pattern", "exact", "none"]

OBJECTIVES: tuple[str, ...] = ("energy", "cost", "carbon")
VARIANTS: tuple[str, ...] = ("dedicated", "pooled")
SERVINGS: tuple[str, ...] = ("colocated", "disaggregated")
BACKENDS: tuple[str, ...] = ("highs", "ortools")
METHODS: tuple[str, ...] = ("milp", "greedy", "homogeneous", "unlimited")
PLACEMENTS: tuple[str, ...] = ("pattern", "exact", "none")

#: Default tail rate (req/s): a class below it in an epoch (under one request per 5 s at the peak the
#: plan provisions for) gets no vPod group of its own (``formulations/allocation.md``, "Tail classes").
DEFAULT_TAIL_RATE_RPS = 0.2

#: Default multiple of the dearest per-request cost used as the unserved-demand penalty
#: (see ``formulations/allocation.md``, parameter ``penalty``).
DEFAULT_PENALTY_FACTOR = 10.0


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
    time_limit_s: float | None = 60.0
    mip_gap: float = 1e-6
    threads: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        problems: list[str] = []
        for name, value, allowed in (
            ("objective", self.objective, OBJECTIVES),
            ("variant", self.variant, VARIANTS),
            ("serving", self.serving, SERVINGS),
            ("backend", self.backend, BACKENDS),
            ("placement", self.placement, PLACEMENTS),
        ):
            if value not in allowed:
                problems.append(f"{name} must be one of {list(allowed)}, got {value!r}")
        if self.unserved_penalty is not None and not (
            math.isfinite(self.unserved_penalty) and self.unserved_penalty > 0
        ):
            problems.append(f"unserved_penalty must be a positive number, got {self.unserved_penalty}")
        if self.tail_rate_rps is not None and not (math.isfinite(self.tail_rate_rps) and self.tail_rate_rps >= 0):
            problems.append(f"tail_rate_rps must be a number >= 0, got {self.tail_rate_rps}")
        if not (0 < self.attainment < 1):
            problems.append(f"attainment must be in (0, 1), got {self.attainment}")
        for metric, limit in self.bounds:
            if metric not in OBJECTIVES or metric == self.objective:
                problems.append(f"a bound must name another objective than {self.objective!r}, got {metric!r}")
            if not (math.isfinite(limit) and limit >= 0):
                problems.append(f"bound {metric}<= must be a finite number >= 0, got {limit}")
        if len({m for m, _ in self.bounds}) != len(self.bounds):
            problems.append("a metric is bounded twice")
        if self.util_cap is not None and not (0 < self.util_cap <= 1):
            problems.append(f"util_cap must be in (0, 1], got {self.util_cap}")
        if self.slice_factor is not None and (int(self.slice_factor) != self.slice_factor or self.slice_factor < 1):
            problems.append(f"slice_factor must be a positive integer, got {self.slice_factor}")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            problems.append(f"time_limit_s must be > 0, got {self.time_limit_s}")
        if not (0 <= self.mip_gap < 1):
            problems.append(f"mip_gap must be in [0, 1), got {self.mip_gap}")
        if self.threads < 1:
            problems.append(f"threads must be >= 1, got {self.threads}")
        if problems:
            raise InputError("; ".join(problems), where="plan options")

    def replace(self, **changes: Any) -> PlanOptions:
        """A copy with some fields changed (the original is never modified)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

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
