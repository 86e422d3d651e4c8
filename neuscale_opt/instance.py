"""The instance file: a TOML description of a fleet, a model, a workload and the planning options.

Validated once, here, by frozen pydantic models with ``extra="forbid"``; every problem found is
reported in one line naming the file and the field (``fleet[1].pods[0].failed_chips[2]: ...``).
Inside the package the :class:`Instance` is trusted. The file format is documented field by field
in ``instances/README.md``.
"""

from __future__ import annotations

import math
import tomllib
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from neuscale_opt.catalog import DTYPE_BYTES, ENERGY_PROFILES, load_chips, load_models
from neuscale_opt.errors import InputError
from neuscale_opt.traces.spec import BucketSpec, TraceSpec

Objective = Literal["energy", "cost", "carbon"]
Phase = Literal["colocated", "prefill", "decode"]
SloMetric = Literal["ttft", "tpot", "e2e"]

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelChoice(_Frozen):
    """The served model (a catalog name) and optional overrides of its dtypes and MoE skew."""

    name: str
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    moe_imbalance: float | None = Field(default=None, ge=1.0)

    @model_validator(mode="after")
    def _known(self) -> ModelChoice:
        models = load_models()
        if self.name not in models:
            raise ValueError(f"unknown model {self.name!r}; known models: {', '.join(models)}")
        for f in ("weight_dtype", "kv_dtype"):
            v = getattr(self, f)
            if v is not None and v not in DTYPE_BYTES:
                raise ValueError(f"{f} {v!r} unknown; known: {', '.join(DTYPE_BYTES)}")
        return self


class Pod(_Frozen):
    """One physical pod: its torus dimensions and the coordinates of failed chips."""

    dims: tuple[int, ...]
    failed_chips: tuple[tuple[int, ...], ...] = ()

    @model_validator(mode="after")
    def _coords(self) -> Pod:
        if any(d <= 0 for d in self.dims):
            raise ValueError("dims must be positive")
        for i, c in enumerate(self.failed_chips):
            if len(c) != len(self.dims):
                raise ValueError(f"failed_chips[{i}] {list(c)} has {len(c)} coordinates, pod has {len(self.dims)}")
            if any(x < 0 or x >= d for x, d in zip(c, self.dims, strict=True)):
                raise ValueError(f"failed_chips[{i}] {list(c)} lies outside the pod {list(self.dims)}")
        if len(set(self.failed_chips)) != len(self.failed_chips):
            raise ValueError("failed_chips lists a chip twice")
        return self

    @property
    def healthy_chips(self) -> int:
        return math.prod(self.dims) - len(self.failed_chips)


class FleetEntry(_Frozen):
    """Inventory of one chip generation: physical pods, or a plain chip count.

    Optional fields override the catalog value for this instance (e.g. a negotiated price, a
    measured achievable fraction of peak).
    """

    chip: str
    pods: tuple[Pod, ...] = ()
    chips: int | None = Field(default=None, gt=0)
    price_usd_per_chip_hour: float | None = Field(default=None, ge=0)
    embodied_kgco2_per_chip: float | None = Field(default=None, ge=0)
    eff_compute: float | None = Field(default=None, gt=0, le=1)
    eff_hbm: float | None = Field(default=None, gt=0, le=1)
    eff_ici: float | None = Field(default=None, gt=0, le=1)

    @model_validator(mode="after")
    def _check(self) -> FleetEntry:
        chips = load_chips()
        if self.chip not in chips:
            raise ValueError(f"unknown chip {self.chip!r}; known chips: {', '.join(chips)}")
        if bool(self.pods) == (self.chips is not None):
            raise ValueError("give either pods or chips (exactly one)")
        spec = chips[self.chip]
        for i, pod in enumerate(self.pods):
            _check_pod_dims(spec, pod, f"pods[{i}]")
        return self

    @property
    def healthy_chips(self) -> int:
        if self.chips is not None:
            return self.chips
        return sum(p.healthy_chips for p in self.pods)


def _check_pod_dims(spec, pod: Pod, where: str) -> None:
    """A pod must have the geometry of its generation (section 2 of hardware.md)."""
    if spec.topology == "torus2d":
        if tuple(pod.dims) != tuple(spec.pod_dims):
            raise ValueError(f"{where}.dims {list(pod.dims)}: a {spec.name} pod is {list(spec.pod_dims)}")
    elif spec.topology == "torus3d_cubes":
        if len(pod.dims) != 3 or any(d % 4 for d in pod.dims):
            raise ValueError(f"{where}.dims {list(pod.dims)}: a {spec.name} pod is 3-D, built of 4x4x4 cubes")
        if math.prod(pod.dims) > spec.pod_chips:
            raise ValueError(
                f"{where}.dims {list(pod.dims)}: more than the {spec.pod_chips} chips of a {spec.name} pod"
            )
    else:  # switched GPU nodes
        if len(pod.dims) != 1 or pod.dims[0] > spec.pod_dims[0]:
            raise ValueError(f"{where}.dims {list(pod.dims)}: a {spec.name} node is [{spec.pod_dims[0]}]")


class RequestClass(_Frozen):
    """A request class given directly (instead of buckets from a trace)."""

    name: str = Field(min_length=1)
    input_tokens: int = Field(gt=0)
    output_tokens: int = Field(gt=0)
    ttft_slo_s: float | None = Field(default=None, gt=0)
    tpot_slo_s: float | None = Field(default=None, gt=0)
    e2e_slo_s: float | None = Field(default=None, gt=0)


class DemandRow(_Frozen):
    """Explicit demand: requests/s of one class in one epoch."""

    epoch: int = Field(ge=0)
    bucket: str
    rate_rps: float = Field(ge=0)


class Workload(_Frozen):
    """Where demand comes from: a trace (bucketed by ``buckets``) or explicit classes and demand.

    ``rate_scale`` multiplies every planned rate (a what-if for traffic growth: the trace's token mix
    and its shape over time are kept, its level is scaled)."""

    trace: TraceSpec | None = None
    buckets: BucketSpec | None = None
    classes: tuple[RequestClass, ...] = ()
    demand: tuple[DemandRow, ...] = ()
    provision_for: Literal["peak", "mean"] = "peak"
    subwindow_s: float = Field(default=10.0, gt=0)
    rate_scale: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _one_source(self) -> Workload:
        if self.trace is None and not self.classes:
            raise ValueError("give a trace or classes")
        if self.trace is not None and self.classes:
            raise ValueError("give a trace or classes, not both")
        if self.classes:
            names = [c.name for c in self.classes]
            if len(set(names)) != len(names):
                raise ValueError("class names must be unique")
            if not self.demand:
                raise ValueError("classes need demand rows ([[workload.demand]])")
            for i, d in enumerate(self.demand):
                if d.bucket not in names:
                    raise ValueError(f"demand[{i}].bucket {d.bucket!r} is not a class ({', '.join(names)})")
            keys = [(d.epoch, d.bucket) for d in self.demand]
            if len(set(keys)) != len(keys):
                raise ValueError("demand lists an (epoch, bucket) pair twice")
        return self


class Slo(_Frozen):
    """Latency targets: absolute (``ttft_s``, ``tpot_s``, ``e2e_s``) or ``multiplier`` x the
    single-request latency on a reference configuration (the NeuScale paper's 5x, section 2.4, on
    its minimal NPU-C/NPU-D configuration; our default reference is the smallest v5p slice that
    holds the model)."""

    mode: Literal["multiplier", "absolute"] = "multiplier"
    multiplier: float = Field(default=5.0, gt=0)
    reference_chip: str = "tpu-v5p"
    reference_shape: str | None = None
    metrics: tuple[SloMetric, ...] = ("ttft", "tpot")
    ttft_s: float | None = Field(default=None, gt=0)
    tpot_s: float | None = Field(default=None, gt=0)
    e2e_s: float | None = Field(default=None, gt=0)
    #: share of requests to keep within their TTFT target; sizes each configuration's safe load
    #: (``neuscale_opt.alloc.attainment``) unless ``planning.util_cap`` overrides it
    attainment: float = Field(default=0.99, gt=0, lt=1)

    @model_validator(mode="after")
    def _check(self) -> Slo:
        if self.reference_chip not in load_chips():
            raise ValueError(f"reference_chip {self.reference_chip!r} unknown; known: {', '.join(load_chips())}")
        if self.reference_shape is not None:
            chip = load_chips()[self.reference_chip]
            try:
                dims = tuple(sorted(int(x) for x in self.reference_shape.lower().split("x")))
            except ValueError:
                raise ValueError(f"reference_shape {self.reference_shape!r} is not AxB or AxBxC") from None
            allowed = {tuple(sorted(int(x) for x in s.split("x"))) for s in chip.slice_shapes if s != "cubes"}
            cube_ok = "cubes" in chip.slice_shapes and len(dims) == 3 and all(d % 4 == 0 for d in dims)
            if dims not in allowed and not cube_ok:
                raise ValueError(
                    f"reference_shape {self.reference_shape} is not allowed on {chip.name}; "
                    f"allowed: {' '.join(chip.slice_shapes)}"
                )
        if self.mode == "absolute" and all(v is None for v in (self.ttft_s, self.tpot_s, self.e2e_s)):
            raise ValueError("mode 'absolute' needs at least one of ttft_s, tpot_s, e2e_s")
        if not self.metrics:
            raise ValueError("metrics must name at least one of ttft, tpot, e2e")
        return self


class Epochs(_Frozen):
    length_s: float = Field(default=300.0, gt=0)
    horizon: int | None = Field(default=None, gt=0)


class Energy(_Frozen):
    """Energy, carbon and price settings. Defaults: PUE 1.1 and 0.5 kgCO2e/kWh (NeuSim
    ``system_config.json``); embodied carbon amortised over 6 years (the six-year functional unit of
    Schneider et al., arXiv:2502.01671)."""

    profile: str = "neuscale"
    pue: float = Field(default=1.1, ge=1.0)
    carbon_kg_per_kwh: float = Field(default=0.5, ge=0)
    electricity_usd_per_kwh: float | None = Field(default=None, ge=0)
    embodied_lifetime_years: float = Field(default=6.0, gt=0)
    price: Literal["on_demand", "commit_3y"] = "on_demand"
    dcn_pj_per_byte: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _profile(self) -> Energy:
        if self.profile not in ENERGY_PROFILES:
            raise ValueError(f"profile {self.profile!r} unknown; known: {', '.join(ENERGY_PROFILES)}")
        return self


class Search(_Frozen):
    """Bounds of the design-space exploration."""

    max_chips_per_vpod: int = Field(default=256, gt=0)
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    phases: tuple[Phase, ...] = ("colocated", "prefill", "decode")
    hbm_usable_fraction: float = Field(default=1.0, gt=0, le=1)
    hop_latency_s: float = Field(default=1e-6, ge=0)

    @model_validator(mode="after")
    def _check(self) -> Search:
        if not self.batch_sizes or any(b <= 0 for b in self.batch_sizes):
            raise ValueError("batch_sizes must be positive integers")
        if len(set(self.batch_sizes)) != len(self.batch_sizes):
            raise ValueError("batch_sizes has duplicates")
        if not self.phases:
            raise ValueError("phases must not be empty")
        return self


class Planning(_Frozen):
    """Allocation options. ``placement``: how vPods of generations given as pods must fit their
    tori (``pattern``: packing patterns per distinct pod state; ``exact``: one binary per possible
    slice position, small fleets only; ``none``: count chips only)."""

    variant: Literal["dedicated", "pooled"] = "pooled"
    placement: Literal["pattern", "exact", "none"] = "pattern"
    serving: Literal["colocated", "disaggregated"] = "colocated"
    allow_unserved: bool = False
    unserved_penalty: float | None = Field(default=None, gt=0)
    util_cap: float | None = Field(default=None, gt=0, le=1)
    #: classes below this rate (req/s) in an epoch get no vPod group of their own (``alloc.tail``)
    tail_rate_rps: float = Field(default=0.2, ge=0)


class Solver(_Frozen):
    backend: Literal["highs", "ortools"] = "highs"
    time_limit_s: float = Field(default=60.0, gt=0)
    mip_gap: float = Field(default=1e-6, ge=0)
    threads: int = Field(default=1, gt=0)


class Horizon(_Frozen):
    """Horizon planning (``formulations/horizon.md``): a multi-epoch model over a rolling window with
    the NeuScale auto-scaling rules as coupling constraints. Defaults are the paper's values
    (section 3.4: 5-minute epochs, a 30-minute monitoring window, at most 2x growth per epoch,
    halving after 30 minutes below need, coalescing threshold 0.5); the creation delay is the
    replay's (``ReplayOptions.create_delay_s``)."""

    window: int | None = Field(default=None, gt=0)
    forecast: Literal["last-peak", "ewma", "seasonal-naive", "quantile", "oracle"] = "last-peak"
    coupling: bool = True
    growth_max: float = Field(default=2.0, ge=1.0)
    new_group_vpods: int = Field(default=1, ge=0)
    shrink_factor: float = Field(default=0.5, ge=0.0, le=1.0)
    shrink_after_s: float = Field(default=1800.0, ge=0.0)
    monitor_window_s: float = Field(default=1800.0, gt=0.0)
    coalesce_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    create_delay_s: float = Field(default=30.0, ge=0.0)
    create_energy_j_per_chip: float = Field(default=0.0, ge=0.0)
    delete_energy_j_per_chip: float = Field(default=0.0, ge=0.0)


class InventoryEvent(_Frozen):
    """Chips of a generation failing (``delta_chips < 0``) or returning (``> 0``) from the start of
    ``epoch`` on; the inventory of every later epoch is the fleet's healthy chips plus the sum of
    the events so far."""

    epoch: int = Field(ge=0)
    chip: str
    delta_chips: int
    note: str = ""


class Instance(_Frozen):
    """A whole planning instance (the root of the TOML file)."""

    name: str = "instance"
    description: str = ""
    objective: Objective = "energy"
    model: ModelChoice
    fleet: tuple[FleetEntry, ...] = Field(min_length=1)
    workload: Workload
    slo: Slo = Slo()
    epochs: Epochs = Epochs()
    energy: Energy = Energy()
    search: Search = Search()
    planning: Planning = Planning()
    solver: Solver = Solver()
    horizon: Horizon | None = None
    inventory_events: tuple[InventoryEvent, ...] = ()

    _path: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _unique_chips(self) -> Instance:
        names = [f.chip for f in self.fleet]
        if len(set(names)) != len(names):
            raise ValueError("fleet lists a chip generation twice")
        healthy = {f.chip: f.healthy_chips for f in self.fleet}
        level = dict(healthy)
        for ev in sorted(self.inventory_events, key=lambda e: e.epoch):
            if ev.chip not in healthy:
                raise ValueError(f"inventory_events: chip {ev.chip!r} is not in the fleet ({', '.join(names)})")
            level[ev.chip] += ev.delta_chips
            if level[ev.chip] < 0:
                raise ValueError(
                    f"inventory_events: {ev.chip} would have {level[ev.chip]} chips from epoch {ev.epoch} on"
                )
        return self

    @property
    def path(self) -> Path | None:
        return self._path

    @property
    def base_dir(self) -> Path:
        """Folder that relative paths in the file (traces) are resolved against."""
        return self._path.parent if self._path is not None else Path.cwd()

    @property
    def chip_names(self) -> list[str]:
        return [f.chip for f in self.fleet]

    def fleet_entry(self, chip: str) -> FleetEntry:
        for f in self.fleet:
            if f.chip == chip:
                return f
        raise KeyError(chip)

    def healthy_chips(self) -> dict[str, int]:
        return {f.chip: f.healthy_chips for f in self.fleet}

    def normalised(self) -> dict:
        """The validated instance with defaults filled in, plus derived inventory totals."""
        d = self.model_dump(mode="json")
        d["derived"] = {
            "healthy_chips": self.healthy_chips(),
            "total_chips": {
                f.chip: (f.chips if f.chips is not None else sum(math.prod(p.dims) for p in f.pods)) for f in self.fleet
            },
            "failed_chips": {f.chip: sum(len(p.failed_chips) for p in f.pods) for f in self.fleet},
            "path": str(self._path) if self._path else None,
        }
        return d


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def format_validation_error(exc: ValidationError) -> str:
    """All problems of a pydantic error in one line: ``field.path: message; ...``."""
    msgs = []
    for err in exc.errors():
        loc = _loc(tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))))
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        msgs.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(msgs)


def parse_instance(data: dict, where: str = "<instance>") -> Instance:
    try:
        return Instance.model_validate(data)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc), where=where) from None


def default_instance_path() -> Path:
    """The embedded default instance (``instances/default.toml``, shipped inside the package)."""
    return Path(str(resources.files("neuscale_opt.instances").joinpath("default.toml")))


def load_instance(path: str | Path | None = None) -> Instance:
    """Read and validate an instance file; ``None`` loads the embedded default."""
    p = default_instance_path() if path is None else Path(path)
    where = str(path) if path is not None else "default.toml"
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InputError("no such file", where=where) from None
    except IsADirectoryError:
        raise InputError("is a directory, not an instance file", where=where) from None
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", where=where) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", where=where) from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"malformed TOML: {exc}", where=where) from None
    inst = parse_instance(data, where=where)
    inst._path = p.resolve()
    return inst
