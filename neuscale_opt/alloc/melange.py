"""Profile tables as the coefficient source, and the Mélange importer.

Instead of roofline coefficients, a plan can read *measured* throughput tables: for each accelerator
type a price and, per request class, the maximum request rate that meets the SLO (what Mélange and
AIBrix profile into). Such a table becomes :class:`~neuscale_opt.coefficients.Coefficients` with one
single-chip vPod per accelerator type (``chips_per_vpod = 1``, ``shape = "1"``), the profiled rate
as ``max_rate_rps``, the hourly price as ``price_usd_per_hour``, latencies unknown (the profile
already meets the SLO) and energy unknown (0: only the ``cost`` objective is meaningful).

Mélange configuration (``tyler-griggs/melange-release``, ``melange/config/example.json`` and the
solver ``melange/solver.py``)::

    {"gpu_info": {"A10G": {"cost": 1.01, "tputs": [[2, 1], [5, 2]]}, ...},
     "workload_distribution": [[0.2, 0.1], [0.5, 0.2]],
     "total_request_rate": 30.0,
     "slice_factor": 1}

``tputs[i][j]`` is the max rate (req/s) of the accelerator for requests of input-size bucket ``i``
and output-size bucket ``j``; ``workload_distribution[i][j]`` the fraction of requests in that
bucket. Mélange minimises the hourly cost of integer accelerator counts, each bucket cut in
``slice_factor`` slices assigned whole to one accelerator type, loads adding up fractionally on an
accelerator type. That is this package's ``pooled`` variant with ``objective = "cost"``, no
inventory limit, a utilisation cap of 1, a one-hour epoch and the same slice factor.

Profile instance file (TOML, written by ``neuscale-opt import-melange``)::

    name = "..."; objective = "cost"
    [planning]  variant, serving, allow_unserved, unserved_penalty, util_cap, slice_factor
    [solver]    backend, time_limit_s, node_limit, mip_gap, threads
    [profile]   epoch_s, pue, carbon_kg_per_kwh, inventory = {chip = healthy chips} (absent = unlimited)
    [[profile.classes]]      name, input_tokens?, output_tokens?
    [[profile.accelerators]] name, chip? (generation, default name), chips_per_vpod? (1),
                             price_usd_per_hour, static_power_w?, embodied_kg_per_hour?,
                             max_rate_rps = {class = req/s, ...}, dyn_energy_j_per_req? = {class = J}
    [[profile.demand]]       epoch, bucket, rate_rps
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import Field, ValidationError, model_validator

from neuscale_opt.alloc.options import DEFAULT_NODE_LIMIT, DEFAULT_TIME_LIMIT_S, MAX_NODE_LIMIT, PlanOptions
from neuscale_opt.alloc.solution import Solution
from neuscale_opt.coefficients import CONFIG_COLUMNS, Coefficients
from neuscale_opt.errors import InfeasibleError, InputError
from neuscale_opt.readers import read_json, read_toml
from neuscale_opt.schema import Frozen


class _Frozen(Frozen):
    """The boundary rules of :class:`neuscale_opt.schema.Frozen`."""


def _fmt_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "finite_number":
            msg = "must be a finite number"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


# -- Mélange configuration ------------------------------------------------------------------------


class MelangeGpu(_Frozen):
    cost: float = Field(ge=0)
    tputs: tuple[tuple[float, ...], ...]


class MelangeConfig(_Frozen):
    """A Mélange solver configuration (``melange/config/*.json``)."""

    gpu_info: dict[str, MelangeGpu] = Field(min_length=1)
    workload_distribution: tuple[tuple[float, ...], ...] = Field(min_length=1)
    total_request_rate: float = Field(ge=0)
    slice_factor: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _shapes(self) -> MelangeConfig:
        rows = len(self.workload_distribution)
        cols = {len(r) for r in self.workload_distribution}
        if len(cols) != 1:
            raise ValueError("workload_distribution rows have different lengths")
        ncol = cols.pop()
        if any(v < 0 for r in self.workload_distribution for v in r):
            raise ValueError("workload_distribution has a negative entry")
        for name, gpu in self.gpu_info.items():
            if len(gpu.tputs) != rows or any(len(r) != ncol for r in gpu.tputs):
                raise ValueError(f"gpu_info.{name}.tputs is not {rows}x{ncol} like workload_distribution")
            if any(v < 0 for r in gpu.tputs for v in r):
                raise ValueError(f"gpu_info.{name}.tputs has a negative entry")
        return self


def load_melange(path: str | Path, where: str | None = None) -> MelangeConfig:
    """Read and validate a Mélange JSON configuration (errors name the file and the field).

    Read by :mod:`neuscale_opt.readers`: a regular file within the size cap, strict UTF-8 (Latin-1
    bytes are refused with their offset), bounded nesting; JSON's ``Infinity``/``NaN`` are refused
    by the field that holds them."""
    where = where or str(path)
    data = read_json(path, where)
    if not isinstance(data, dict):
        raise InputError("a Mélange configuration is a JSON object (gpu_info, workload_distribution, ...)", where=where)
    try:
        return MelangeConfig.model_validate(data)
    except ValidationError as exc:
        raise InputError(_fmt_error(exc), where=where) from None


def bucket_name(i: int, j: int) -> str:
    """Name of Mélange bucket (input-size row i, output-size column j)."""
    return f"in{i}_out{j}"


# -- profile instances -------------------------------------------------------------------------


class ProfileClass(_Frozen):
    name: str = Field(min_length=1)
    input_tokens: float | None = Field(default=None, ge=0)
    output_tokens: float | None = Field(default=None, ge=0)


class ProfileAccelerator(_Frozen):
    """A vPod type with profiled rates: by default one accelerator (``chips_per_vpod = 1``) of
    generation ``chip`` (= ``name`` when absent). Energy columns are optional (0 when unknown)."""

    name: str = Field(min_length=1)
    chip: str | None = None
    chips_per_vpod: int = Field(default=1, gt=0)
    price_usd_per_hour: float = Field(ge=0)
    static_power_w: float = Field(default=0.0, ge=0)
    embodied_kg_per_hour: float = Field(default=0.0, ge=0)
    max_rate_rps: dict[str, float]
    dyn_energy_j_per_req: dict[str, float] = {}

    @property
    def generation(self) -> str:
        return self.chip if self.chip is not None else self.name


class ProfileDemand(_Frozen):
    epoch: int = Field(default=0, ge=0)
    bucket: str
    rate_rps: float = Field(ge=0)


class Profile(_Frozen):
    epoch_s: float = Field(default=3600.0, gt=0)
    pue: float = Field(default=1.0, ge=1.0)
    carbon_kg_per_kwh: float = Field(default=0.0, ge=0)
    inventory: dict[str, int] = {}
    classes: tuple[ProfileClass, ...] = Field(min_length=1)
    accelerators: tuple[ProfileAccelerator, ...] = Field(min_length=1)
    demand: tuple[ProfileDemand, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _refs(self) -> Profile:
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError("classes: names must be unique")
        accs = [a.name for a in self.accelerators]
        if len(set(accs)) != len(accs):
            raise ValueError("accelerators: names must be unique")
        for a in self.accelerators:
            for b, v in a.max_rate_rps.items():
                if b not in names:
                    raise ValueError(f"accelerators.{a.name}.max_rate_rps: unknown class {b!r}")
                if v < 0:
                    raise ValueError(f"accelerators.{a.name}.max_rate_rps.{b}: negative rate")
            for b in a.dyn_energy_j_per_req:
                if b not in names:
                    raise ValueError(f"accelerators.{a.name}.dyn_energy_j_per_req: unknown class {b!r}")
        gens = {a.generation for a in self.accelerators}
        for chip in self.inventory:
            if chip not in gens:
                raise ValueError(f"inventory: {chip!r} is not the chip of any accelerator")
        for i, d in enumerate(self.demand):
            if d.bucket not in names:
                raise ValueError(f"demand[{i}].bucket {d.bucket!r} is not a class")
        keys = [(d.epoch, d.bucket) for d in self.demand]
        if len(set(keys)) != len(keys):
            raise ValueError("demand lists an (epoch, bucket) pair twice")
        return self


class ProfilePlanning(_Frozen):
    variant: Literal["dedicated", "pooled"] = "pooled"
    serving: Literal["colocated"] = "colocated"
    allow_unserved: bool = False
    unserved_penalty: float | None = Field(default=None, gt=0)
    util_cap: float = Field(default=1.0, gt=0, le=1)
    slice_factor: int | None = Field(default=None, ge=1)


class ProfileSolver(_Frozen):
    backend: Literal["highs", "ortools"] = "highs"
    time_limit_s: float = Field(default=DEFAULT_TIME_LIMIT_S, gt=0)
    node_limit: int = Field(default=DEFAULT_NODE_LIMIT, gt=0, le=MAX_NODE_LIMIT)
    mip_gap: float = Field(default=1e-6, ge=0)
    threads: int = Field(default=1, gt=0)


class ProfileInstance(_Frozen):
    """A planning instance whose coefficients are measured profile tables."""

    name: str = "profile"
    description: str = ""
    objective: Literal["energy", "cost", "carbon"] = "cost"
    planning: ProfilePlanning = ProfilePlanning()
    solver: ProfileSolver = ProfileSolver()
    profile: Profile


def is_profile_instance(data: dict[str, Any]) -> bool:
    return "profile" in data


def parse_profile_instance(data: dict[str, Any], where: str = "<profile instance>") -> ProfileInstance:
    try:
        return ProfileInstance.model_validate(data)
    except ValidationError as exc:
        raise InputError(_fmt_error(exc), where=where) from None


def load_profile_instance(path: str | Path) -> ProfileInstance:
    """Read a profile instance TOML (by :mod:`neuscale_opt.readers`)."""
    where = str(path)
    return parse_profile_instance(read_toml(path, where), where=where)


def profile_coefficients(inst: ProfileInstance) -> Coefficients:
    """Coefficients from a profile instance: one single-chip vPod type per accelerator."""
    p = inst.profile
    rows = []
    for a in p.accelerators:
        vtype = f"{a.name}:colocated"
        for c in p.classes:
            mu = float(a.max_rate_rps.get(c.name, 0.0))
            if mu <= 0:
                continue
            rows.append(
                {
                    "config_id": f"{vtype}|{c.name}",
                    "vpod_type": vtype,
                    "bucket": c.name,
                    "phase": "colocated",
                    "chip": a.generation,
                    "shape": str(a.chips_per_vpod),
                    "chips_per_vpod": a.chips_per_vpod,
                    "tp": 1,
                    "pp": 1,
                    "ep": 1,
                    "batch": 1,
                    "max_rate_rps": mu,
                    "dyn_energy_j_per_req": float(a.dyn_energy_j_per_req.get(c.name, 0.0)),
                    "static_power_w": float(a.static_power_w),
                    "price_usd_per_hour": float(a.price_usd_per_hour),
                    "embodied_kg_per_hour": float(a.embodied_kg_per_hour),
                    "ttft_s": math.nan,
                    "tpot_s": math.nan,
                    "e2e_s": math.nan,
                    "bound": "profile",
                    "kv_bytes_per_req": 0.0,
                    "energy_j_per_req": float(a.dyn_energy_j_per_req.get(c.name, 0.0)) + float(a.static_power_w) / mu,
                    "cost_usd_per_req": float(a.price_usd_per_hour) / 3600.0 / mu,
                }
            )
    # the table contract's columns, kept when no accelerator serves anything, so that an infeasible
    # profile is diagnosed by the planner instead of refused as malformed
    configs = pd.DataFrame(rows, columns=list(CONFIG_COLUMNS))
    buckets = pd.DataFrame(
        {
            "bucket": [c.name for c in p.classes],
            "input_tokens": [math.nan if c.input_tokens is None else c.input_tokens for c in p.classes],
            "output_tokens": [math.nan if c.output_tokens is None else c.output_tokens for c in p.classes],
            "ttft_slo_s": math.nan,
            "tpot_slo_s": math.nan,
            "e2e_slo_s": math.nan,
        }
    )
    given = {(d.epoch, d.bucket): d.rate_rps for d in p.demand}
    epochs = sorted({d.epoch for d in p.demand})
    demand = pd.DataFrame(
        [
            {"epoch": e, "bucket": c.name, "rate_rps": float(given.get((e, c.name), 0.0))}
            for e in epochs
            for c in p.classes
        ]
    )
    gens: dict[str, ProfileAccelerator] = {}
    for a in p.accelerators:
        gens.setdefault(a.generation, a)
    chips = pd.DataFrame(
        {
            "chip": list(gens),
            "healthy_chips": [float(p.inventory[g]) if g in p.inventory else math.inf for g in gens],
            "dcn_bytes_per_s": math.nan,
            "dcn_energy_j_per_byte": 0.0,
            "price_usd_per_chip_hour": [a.price_usd_per_hour / a.chips_per_vpod for a in gens.values()],
            "static_power_w_per_chip": [a.static_power_w / a.chips_per_vpod for a in gens.values()],
            "embodied_kg_per_chip_hour": [a.embodied_kg_per_hour / a.chips_per_vpod for a in gens.values()],
        }
    )
    return Coefficients(
        configs=configs,
        demand=demand,
        buckets=buckets,
        chips=chips,
        epoch_s=float(p.epoch_s),
        pue=float(p.pue),
        carbon_kg_per_kwh=float(p.carbon_kg_per_kwh),
        util_cap=float(inst.planning.util_cap),
        source="profile",
        meta={"name": inst.name},
    )


def melange_to_profile(cfg: MelangeConfig, name: str = "melange", slice_factor: int | None = None) -> ProfileInstance:
    """The profile instance of a Mélange configuration (see the module docstring).

    ``slice_factor=None`` (the default) plans the **exact continuous-share optimum**: each
    bucket's load may be split across accelerator types in any proportion, accelerator counts
    integer. An integer ``S`` cuts each bucket in ``S`` equal slices assigned whole to one type,
    which reproduces Mélange's own answer with its slice factor (``cfg.slice_factor``, 1 in its
    example). The exact optimum is never dearer: every slice assignment is one continuous share.
    """
    if slice_factor is not None and (
        isinstance(slice_factor, bool) or int(slice_factor) != slice_factor or slice_factor < 1
    ):
        raise InputError(f"must be a positive integer, got {slice_factor!r}", where="slice_factor")
    rows, cols = len(cfg.workload_distribution), len(cfg.workload_distribution[0])
    classes = [ProfileClass(name=bucket_name(i, j)) for i in range(rows) for j in range(cols)]
    accs = [
        ProfileAccelerator(
            name=gpu,
            price_usd_per_hour=info.cost,
            max_rate_rps={bucket_name(i, j): float(info.tputs[i][j]) for i in range(rows) for j in range(cols)},
        )
        for gpu, info in cfg.gpu_info.items()
    ]
    demand = [
        ProfileDemand(
            epoch=0, bucket=bucket_name(i, j), rate_rps=cfg.workload_distribution[i][j] * cfg.total_request_rate
        )
        for i in range(rows)
        for j in range(cols)
    ]
    return ProfileInstance(
        name=name,
        description="imported from a Mélange configuration",
        objective="cost",
        planning=ProfilePlanning(variant="pooled", util_cap=1.0, slice_factor=slice_factor),
        profile=Profile(epoch_s=3600.0, classes=tuple(classes), accelerators=tuple(accs), demand=tuple(demand)),
    )


def melange_coefficients(cfg: MelangeConfig) -> Coefficients:
    return profile_coefficients(melange_to_profile(cfg))


@dataclass(frozen=True)
class MelangeResult:
    """Both answers to a Mélange configuration: ``exact`` (the continuous-share optimum) and
    ``sliced`` (Mélange's answer with ``slice_factor`` slices per bucket), each a plan of
    :func:`~neuscale_opt.alloc.plan.plan`; costs in USD per hour."""

    exact: Solution
    sliced: Solution
    slice_factor: int

    @property
    def exact_usd_per_hour(self) -> float:
        return float(self.exact.objective_value)

    @property
    def sliced_usd_per_hour(self) -> float:
        return float(self.sliced.objective_value)

    @property
    def saving(self) -> float:
        """Relative saving of the exact optimum over the sliced answer (0.042 = 4.2 % cheaper)."""
        return 1.0 - self.exact_usd_per_hour / self.sliced_usd_per_hour if self.sliced_usd_per_hour > 0 else 0.0

    def summary(self) -> str:
        """Two lines comparing the answers (for the command's summary)."""
        return (
            f"exact continuous-share optimum: {self.exact_usd_per_hour:.6g} USD/h\n"
            f"Mélange slice factor {self.slice_factor}: {self.sliced_usd_per_hour:.6g} USD/h "
            f"(the exact optimum is {100 * self.saving:.3g} % cheaper)\n"
        )


def _solved_with(solved: Solution | None, options: PlanOptions) -> Solution | None:
    """``solved`` when it is the MILP plan of these options (its own options carry the resolved
    default penalty, which ``options`` leaves to the planner), else None."""
    if solved is None or solved.method != "milp" or not solved.has_plan:
        return None
    mine = solved.options
    if options.unserved_penalty is None:
        mine = mine.replace(unserved_penalty=None)
    return solved if mine.planning_dict() == options.planning_dict() else None


def solve_melange(
    cfg: MelangeConfig,
    slice_factor: int | None = None,
    options: PlanOptions | None = None,
    solved: Solution | None = None,
) -> MelangeResult:
    """Plan a Mélange configuration both ways: the exact continuous-share optimum and Mélange's
    slice answer with ``slice_factor`` slices (default the configuration's own ``slice_factor``).
    ``solved``: a plan already made of this configuration's coefficients (``plan CONFIG.json``),
    used for whichever answer it is (same options) instead of solving it again.

    Raises :class:`~neuscale_opt.errors.InfeasibleError` naming the bucket that no accelerator
    type can serve (a configuration that is valid but cannot be covered).
    """
    from neuscale_opt.alloc.plan import plan

    s = cfg.slice_factor if slice_factor is None else slice_factor
    base = melange_to_profile(cfg)
    opts = options or PlanOptions.from_instance(base)
    coeffs = profile_coefficients(base)
    exact_opts, sliced_opts = opts.replace(slice_factor=None), opts.replace(slice_factor=s)
    exact = _solved_with(solved, exact_opts) or plan(coeffs, exact_opts, "milp")
    if exact.status == "infeasible":
        raise InfeasibleError(exact.diagnosis or "the configuration cannot be covered")
    sliced = _solved_with(solved, sliced_opts) or plan(coeffs, sliced_opts, "milp")
    if sliced.status == "infeasible":  # pragma: no cover - a slice of a coverable bucket fits one type
        raise InfeasibleError(sliced.diagnosis or f"no slice-factor-{s} answer")
    return MelangeResult(exact=exact, sliced=sliced, slice_factor=int(s))


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(float(v)) if isinstance(v, float) else str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v).__name__)


def profile_to_toml(inst: ProfileInstance) -> str:
    """TOML text of a profile instance (read back by :func:`load_profile_instance`)."""
    out = [
        f"name = {_toml_value(inst.name)}",
        f"description = {_toml_value(inst.description)}",
        f"objective = {_toml_value(inst.objective)}",
        "",
        "[planning]",
    ]
    for k, v in inst.planning.model_dump().items():
        if v is not None:
            out.append(f"{k} = {_toml_value(v)}")
    out += ["", "[solver]"]
    out += [f"{k} = {_toml_value(v)}" for k, v in inst.solver.model_dump().items()]
    prof = inst.profile
    out += ["", "[profile]", f"epoch_s = {_toml_value(prof.epoch_s)}", f"pue = {_toml_value(prof.pue)}"]
    out.append(f"carbon_kg_per_kwh = {_toml_value(prof.carbon_kg_per_kwh)}")
    if prof.inventory:
        out.append(f"inventory = {_toml_value(dict(prof.inventory))}")
    for c in inst.profile.classes:
        out += ["", "[[profile.classes]]", f"name = {_toml_value(c.name)}"]
        for k in ("input_tokens", "output_tokens"):
            if getattr(c, k) is not None:
                out.append(f"{k} = {_toml_value(float(getattr(c, k)))}")
    for a in inst.profile.accelerators:
        out += ["", "[[profile.accelerators]]", f"name = {_toml_value(a.name)}"]
        if a.chip is not None:
            out.append(f"chip = {_toml_value(a.chip)}")
        if a.chips_per_vpod != 1:
            out.append(f"chips_per_vpod = {a.chips_per_vpod}")
        out.append(f"price_usd_per_hour = {_toml_value(float(a.price_usd_per_hour))}")
        for k in ("static_power_w", "embodied_kg_per_hour"):
            if getattr(a, k):
                out.append(f"{k} = {_toml_value(float(getattr(a, k)))}")
        out.append(f"max_rate_rps = {_toml_value({k: float(v) for k, v in a.max_rate_rps.items()})}")
        if a.dyn_energy_j_per_req:
            out.append(f"dyn_energy_j_per_req = {_toml_value(dict(a.dyn_energy_j_per_req))}")
    for d in inst.profile.demand:
        out += [
            "",
            "[[profile.demand]]",
            f"epoch = {d.epoch}",
            f"bucket = {_toml_value(d.bucket)}",
            f"rate_rps = {_toml_value(float(d.rate_rps))}",
        ]
    return "\n".join(out) + "\n"
