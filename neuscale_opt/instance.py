"""The instance file: a TOML description of a fleet, a model, a workload and the planning options.

Validated once, here, by frozen pydantic models with ``extra="forbid"``; every problem found is
reported in one line naming the file and the field (``fleet[1].pods[0].failed_chips[2]: ...``).
Inside the package the :class:`Instance` is trusted. The file format is documented field by field
in ``instances/README.md``.
"""

from __future__ import annotations

import math
import os
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, model_validator

from neuscale_opt.alloc.options import DEFAULT_NODE_LIMIT, DEFAULT_TIME_LIMIT_S, MAX_NODE_LIMIT
from neuscale_opt.catalog import DTYPE_BYTES, ENERGY_PROFILES, load_chips, load_models
from neuscale_opt.errors import InputError
from neuscale_opt.forecast_names import FORECAST_METHODS
from neuscale_opt.readers import check_path, read_toml
from neuscale_opt.roofline import HBM_USABLE_FRACTION_DEFAULT
from neuscale_opt.schema import MAX_EPOCHS, Frozen
from neuscale_opt.traces.spec import BucketSpec, TraceSpec

Objective = Literal["energy", "cost", "carbon"]
Phase = Literal["colocated", "prefill", "decode"]
SloMetric = Literal["ttft", "tpot", "e2e"]

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class _Frozen(Frozen):
    """The boundary rules of :class:`neuscale_opt.schema.Frozen`."""


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


class Derate(_Frozen):
    """Runtime derating of a generation: deliverable = nominal x thermal x availability x load
    (D-PIN SCU, arXiv:2610.16374: nominal specifications do not give deliverable compute).

    * ``thermal``: share of nominal speed the chips sustain (clock throttling under heat or power
      caps): scales the achievable compute and HBM rates of every vPod;
    * ``availability``: share of the healthy chips up at any time (faults, maintenance, repairs
      not modelled as failed chips): scales the inventory;
    * ``load``: share of the chips' time left to this workload (other tenants, background jobs):
      scales the inventory.

    ``csv``: measured derates, a file with columns ``chip,thermal,availability,load`` (one row per
    chip, relative to the instance); its row for this chip replaces the three fields.
    """

    thermal: float = Field(default=1.0, gt=0, le=1)
    availability: float = Field(default=1.0, gt=0, le=1)
    load: float = Field(default=1.0, gt=0, le=1)
    csv: str | None = None

    @property
    def capacity(self) -> float:
        """Deliverable chip-equivalents per healthy chip."""
        return self.thermal * self.availability * self.load


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
    derate: Derate = Derate()

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

    epoch: int = Field(ge=0, lt=MAX_EPOCHS)
    bucket: str
    rate_rps: float = Field(ge=0)


class Workload(_Frozen):
    """Where demand comes from: a trace (bucketed by ``buckets``) or explicit classes and demand.

    ``provision_for``: ``peak`` (each class's peak over ``subwindow_s`` windows), ``mean`` (the
    epoch's mean), or ``burst`` (each class's share of the pooled peak over a window chosen from the
    trace's burstiness, ``formulations/forecast.md`` D7-D10).
    ``rate_scale`` multiplies every planned rate (a what-if for traffic growth: the trace's token mix
    and its shape over time are kept, its level is scaled). ``arrivals``: the arrival process the
    safe loads assume (``modulated`` from the trace, or ``poisson``)."""

    trace: TraceSpec | None = None
    buckets: BucketSpec | None = None
    classes: tuple[RequestClass, ...] = ()
    demand: tuple[DemandRow, ...] = ()
    provision_for: Literal["peak", "mean", "burst"] = "peak"
    subwindow_s: float = Field(default=10.0, gt=0)
    #: ``provision_for = "burst"``: the relative rate movement inside the sizing window the capacity
    #: headroom absorbs (``neuscale_opt.traces.demand.sizing_window``)
    burst_headroom: float = Field(default=0.1, ge=0)
    rate_scale: float = Field(default=1.0, gt=0)
    #: the arrivals the safe loads assume (``neuscale_opt.alloc.attainment``): ``modulated``, Poisson
    #: at a rate that moves inside the sizing window as the trace's does (AT4, D12; ``burst`` and
    #: ``mean`` sizing), or ``poisson`` at the sized rate; explicit classes have no trace to measure
    #: and ``peak`` sizing plans above the movement: both Poisson
    arrivals: Literal["modulated", "poisson"] = "modulated"

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
    """Epoch length and, optionally, how many epochs are planned (at most :data:`MAX_EPOCHS`).
    With ``horizon`` given, a trace is cut to ``horizon x length_s`` seconds, and planning, the
    evaluation and the replay all cover exactly epochs ``0 .. horizon - 1``."""

    length_s: float = Field(default=300.0, gt=0)
    horizon: int | None = Field(default=None, gt=0, le=MAX_EPOCHS)


class ChipEnergy(_Frozen):
    """This instance's value of the energy profile's per-chip efficiencies (e.g. one scenario of a
    sensitivity sweep over the inferred NeuScale figures); ``None`` keeps the profile's value."""

    chip: str
    tflop_per_j: float | None = Field(default=None, gt=0)
    hbm_gb_per_j: float | None = Field(default=None, gt=0)


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
    chip_overrides: tuple[ChipEnergy, ...] = ()

    @model_validator(mode="after")
    def _profile(self) -> Energy:
        if self.profile not in ENERGY_PROFILES:
            raise ValueError(f"profile {self.profile!r} unknown; known: {', '.join(ENERGY_PROFILES)}")
        names = [o.chip for o in self.chip_overrides]
        if len(set(names)) != len(names):
            raise ValueError("chip_overrides lists a chip twice")
        return self


class Search(_Frozen):
    """Bounds of the design-space exploration."""

    max_chips_per_vpod: int = Field(default=256, gt=0)
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    phases: tuple[Phase, ...] = ("colocated", "prefill", "decode")
    hbm_usable_fraction: float = Field(default=HBM_USABLE_FRACTION_DEFAULT, gt=0, le=1)
    # latency of one collective step; None: the calibration profile's fitted value (the pure
    # roofline's HOP_LATENCY_S_DEFAULT under calibration = "none"). None rather than a default
    # number, so that an instance written back and read again keeps meaning the profile's value.
    hop_latency_s: float | None = Field(default=None, ge=0)
    # roofline calibration profile: "default" (shipped, fitted on published measurements), "none"
    # (the pure roofline) or a profile TOML path (relative to the instance); see calibrate.py
    calibration: str = "default"

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
    """Solver settings. ``node_limit`` (branch-and-bound nodes per MILP solve) is the deterministic
    stop rule; ``time_limit_s`` the wall-clock safety net behind it (``alloc.options``).
    ``restarts``: HiGHS's root restarts (``alloc.options.PlanOptions.restarts``); unset, they are
    off in the windows of a horizon plan and on elsewhere."""

    backend: Literal["highs", "ortools"] = "highs"
    time_limit_s: float = Field(default=DEFAULT_TIME_LIMIT_S, gt=0)
    node_limit: int = Field(default=DEFAULT_NODE_LIMIT, gt=0, le=MAX_NODE_LIMIT)
    mip_gap: float = Field(default=1e-6, ge=0)
    threads: int = Field(default=1, gt=0)
    restarts: bool | None = None


ForecastName = Literal[FORECAST_METHODS]  # noqa: PYI047 (pydantic reads it from the module)


class Horizon(_Frozen):
    """Horizon planning (``formulations/horizon.md``): a multi-epoch model over a rolling window with
    the NeuScale auto-scaling rules as coupling constraints. Defaults are the paper's values
    (section 3.4: 5-minute epochs, a 30-minute monitoring window, at most 2x growth per epoch,
    halving after 30 minutes below need, coalescing threshold 0.5); the creation delay is the
    replay's (``ReplayOptions.create_delay_s``)."""

    window: int | None = Field(default=None, gt=0)
    forecast: ForecastName = "last-peak"
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
    prewarm: bool = True
    reserve_forecast: ForecastName | None = None


class InventoryEvent(_Frozen):
    """Chips of a generation failing (``delta_chips < 0``) or returning (``> 0``) from the start of
    ``epoch`` on; the inventory of every later epoch is the fleet's healthy chips plus the sum of
    the events so far."""

    epoch: int = Field(ge=0, lt=MAX_EPOCHS)
    chip: str
    delta_chips: int
    note: str = ""


def inventory_schedule(base: dict[str, float], events: Any, epochs: list[int]) -> dict[tuple[str, int], float]:
    """H_{c,t}: healthy chips of generation c in epoch t = base_c + sum of the events of c at
    epochs <= t (``events``: objects with ``epoch``, ``chip``, ``delta_chips``, as
    :class:`InventoryEvent`)."""
    out: dict[tuple[str, int], float] = {}
    for c, h in base.items():
        for t in epochs:
            delta = sum(float(ev.delta_chips) for ev in events if ev.chip == c and ev.epoch <= t)
            out[(c, t)] = h + delta if not math.isinf(h) else math.inf
    return out


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
        for i, o in enumerate(self.energy.chip_overrides):
            if o.chip not in healthy:
                raise ValueError(f"energy.chip_overrides[{i}].chip {o.chip!r} is not in the fleet ({', '.join(names)})")
        level = dict(healthy)
        for ev in sorted(self.inventory_events, key=lambda e: e.epoch):
            if ev.chip not in healthy:
                raise ValueError(f"inventory_events: chip {ev.chip!r} is not in the fleet ({', '.join(names)})")
            level[ev.chip] += ev.delta_chips
            if level[ev.chip] < 0:
                raise ValueError(
                    f"inventory_events: {ev.chip} would have {level[ev.chip]} chips from epoch {ev.epoch} on"
                )
        horizon = self.epochs.horizon
        if horizon is not None:
            beyond = sorted({d.epoch for d in self.workload.demand if d.epoch >= horizon})
            if beyond:
                shown = ", ".join(map(str, beyond[:8])) + (" ..." if len(beyond) > 8 else "")
                raise ValueError(
                    f"workload.demand: rows for epoch(s) {shown} lie beyond epochs.horizon = {horizon} "
                    f"(epochs 0 .. {horizon - 1} are planned); raise the horizon or drop the rows"
                )
            late = [i for i, ev in enumerate(self.inventory_events) if ev.epoch >= horizon]
            if late:
                ev = self.inventory_events[late[0]]
                raise ValueError(
                    f"inventory_events[{late[0]}]: epoch {ev.epoch} lies beyond epochs.horizon = {horizon} "
                    f"(epochs 0 .. {horizon - 1} are planned)"
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

    def derate(self, chip: str) -> Derate:
        """The runtime derating of ``chip``: the fleet entry's, or its row of the derate CSV."""
        d = self.fleet_entry(chip).derate
        return d if d.csv is None else _derate_row(self.base_dir / d.csv, chip)

    def normalised(self) -> dict:
        """The validated instance with defaults filled in, plus derived inventory totals."""
        d = self.model_dump(mode="json")
        d["derived"] = {
            "healthy_chips": self.healthy_chips(),
            "total_chips": {
                f.chip: (f.chips if f.chips is not None else sum(math.prod(p.dims) for p in f.pods)) for f in self.fleet
            },
            "failed_chips": {f.chip: sum(len(p.failed_chips) for p in f.pods) for f in self.fleet},
            "chip_equivalents": {
                f.chip: {
                    "nominal": float(f.healthy_chips),
                    "deliverable": f.healthy_chips * self.derate(f.chip).capacity,
                }
                for f in self.fleet
            },
            "path": str(self._path) if self._path else None,
        }
        return d


def _derate_row(path: Path, chip: str) -> Derate:
    """The row of ``chip`` in a measured-derate CSV (columns chip, thermal, availability, load)."""
    import csv

    try:
        with path.open(encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise InputError(f"cannot read derate CSV ({exc.strerror})", where=str(path)) from None
    for i, r in enumerate(rows, start=1):
        if r.get("chip") == chip:
            try:
                return Derate(**{k: float(r[k]) for k in ("thermal", "availability", "load")})
            except (KeyError, TypeError, ValueError, ValidationError):
                raise InputError(
                    "thermal, availability and load must be numbers in (0, 1]", where=f"{path}: row {i}"
                ) from None
    raise InputError(f"no row for chip {chip}", where=str(path))


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
        elif err["type"] == "finite_number":
            msg = "must be a finite number"
        msgs.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(msgs)


def parse_instance(data: dict, where: str = "<instance>") -> Instance:
    try:
        return Instance.model_validate(data)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc), where=where) from None


def _instances_root() -> Path:
    return Path(str(resources.files("neuscale_opt.instances")))


def default_instance_path() -> Path:
    """The embedded default instance (``instances/default.toml``, shipped inside the package)."""
    return _instances_root() / "default.toml"


def shipped_instances() -> dict[str, Path]:
    """The instances shipped with the package by name: the file's path below ``instances/``
    without ``.toml`` (``small``, ``horizon/azure-code``, ``alloc/two_gens``), sorted."""
    root = _instances_root()
    files = sorted([*root.glob("*.toml"), *root.glob("*/*.toml")])
    return {p.relative_to(root).with_suffix("").as_posix(): p for p in files}


def resolve_instance_path(path: str | Path | None) -> tuple[Path, str]:
    """The file an instance argument names, and the name used in messages.

    ``None`` is the embedded default; an existing path is that file; otherwise a shipped name
    (``small``, ``small.toml``, ``horizon/azure-code``) is the shipped file. Anything else is
    "no such file" (with the shipped names, when the argument looks like a name).
    """
    if path is None:
        return default_instance_path(), "default.toml"
    text = os.fspath(path)
    if "\0" in text:
        check_path(text)  # refuses it with the one-line NUL message
    p = Path(text)
    if text and not p.exists():
        shipped = shipped_instances()
        key = text[: -len(".toml")] if text.endswith(".toml") else text
        if key in shipped:
            return shipped[key], text
        if "/" not in text and "." not in text:  # reads as a name, not a path
            raise InputError(f"no such file, and no shipped instance of that name ({', '.join(shipped)})", where=text)
    return p, text


def load_instance(path: str | Path | None = None, *, profile: bool = False):
    """Read and validate an instance; ``None`` loads the embedded default, a shipped name
    (``small``) the shipped file (see :func:`resolve_instance_path`).

    The one loader of every command. The file is read by :mod:`neuscale_opt.readers` (regular
    files only, size cap, strict UTF-8, bounded nesting) and the files it references (the trace)
    must exist and be regular files. ``profile=True`` also accepts what ``plan`` plans without
    roofline coefficients: a profile instance (a TOML with a ``[profile]`` table, as
    ``import-melange`` writes) or a Mélange JSON configuration; both are returned as a
    :class:`~neuscale_opt.alloc.melange.ProfileInstance`. Otherwise the result is an
    :class:`Instance`.
    """
    p, where = resolve_instance_path(path)
    if p.suffix.lower() == ".json":
        if not profile:
            raise InputError("a Mélange configuration (JSON): this command needs an instance TOML", where=where)
        from neuscale_opt.alloc.melange import load_melange, melange_to_profile

        return melange_to_profile(load_melange(p, where=where), name=p.stem)
    data = read_toml(p, where)
    if "profile" in data:
        if not profile:
            raise InputError(
                "a profile instance ([profile] tables of measured rates): only plan, evaluate and validate "
                "read it; this command needs a roofline instance",
                where=where,
            )
        from neuscale_opt.alloc.melange import parse_profile_instance

        return parse_profile_instance(data, where=where)
    inst = parse_instance(data, where=where)
    inst._path = p.resolve()
    check_referenced_files(inst, where)
    return inst


def check_referenced_files(inst: Instance, where: str) -> None:
    """The files an instance names (``workload.trace.path``) exist and are regular files.

    A relative path is resolved against the instance file's folder; when it is missing there (an
    instance copied without its data), the message says so and names ``neuscale-opt init``, which
    copies a shipped instance together with its data.
    """
    trace = inst.workload.trace
    if trace is None:
        return
    text = trace.path
    if "\0" in text:
        raise InputError("the path contains a NUL byte", where=f"{where}: workload.trace.path")
    p = Path(text)
    full = p if p.is_absolute() else inst.base_dir / p
    if not full.exists() and not p.is_absolute():
        raise InputError(
            f"{text}: no such file (relative paths are read from the instance's folder {inst.base_dir}); "
            "copy an instance with its data by `neuscale-opt init NAME DIR`, or give an absolute path",
            where=f"{where}: workload.trace.path",
        )
    check_path(full, where=f"{where}: workload.trace.path {text}")
