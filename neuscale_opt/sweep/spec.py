"""The sweep specification: a TOML file validated like an instance.

A sweep names a base instance, fixed settings applied to every scenario (``[set]``), the uncertain
parameters (each addressed by a dotted path, see :mod:`neuscale_opt.sweep.apply`), a design that
turns them into scenarios, the planning methods run in each scenario, and the analysis options::

    base = "../default.toml"            # relative to this file
    design = "lhs"                      # grid | lhs | mc | oat
    samples = 20                        # lhs and mc
    seed = 7
    methods = ["milp", "greedy", "homogeneous"]
    time_limit_s = 30                   # per MILP solve, inside the task
    replay = false

    [set]                               # the same value in every scenario
    "slo.multiplier" = 5.0

    [[parameter]]
    name = "slo"                        # column name in the rows (default: the path)
    path = "slo.multiplier"
    values = [2.0, 5.0, 10.0]           # a list ...

    [[parameter]]
    path = "catalog.energy_profiles[neuscale][tpu-v6e].tflop_per_j"
    scale = "relative"                  # values multiply the base value
    low = 0.7                           # ... or a range: a grid of `num` points for grid/oat,
    high = 1.3                          #     a distribution for lhs/mc
    num = 3
    distribution = "uniform"            # uniform | loguniform | triangular | normal

Validated once, here, with frozen pydantic models (``extra="forbid"``); problems are reported in
one line naming the file and the field.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from neuscale_opt.alloc.options import METHODS
from neuscale_opt.errors import InputError
from neuscale_opt.instance import format_validation_error

Design = Literal["grid", "lhs", "mc", "oat"]
Distribution = Literal["uniform", "loguniform", "triangular", "normal"]
Scalar = float | int | str | bool


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Parameter(_Frozen):
    """One uncertain number: where it goes (``path``, or several ``paths`` set together) and which
    values it takes (``values``; or ``low``/``high`` with ``num`` grid points and a ``distribution``
    for sampled designs). ``scale = "relative"``: the values multiply each path's base value.
    ``nominal``: the value of the nominal scenario (default: 1 when relative, else the base
    instance's value). ``integer``: round to whole numbers (inventories)."""

    name: str | None = None
    path: str | None = None
    paths: tuple[str, ...] = ()
    scale: Literal["absolute", "relative"] = "absolute"
    values: tuple[float, ...] = ()
    low: float | None = None
    high: float | None = None
    num: int | None = Field(default=None, ge=2)
    distribution: Distribution = "uniform"
    mode: float | None = None
    sd: float | None = Field(default=None, gt=0)
    nominal: float | None = None
    integer: bool = False

    @model_validator(mode="after")
    def _check(self) -> Parameter:
        if (self.path is None) == (not self.paths):
            raise ValueError("give path or paths (exactly one)")
        ranged = self.low is not None or self.high is not None
        if bool(self.values) == ranged:
            raise ValueError("give values, or low and high (exactly one)")
        if ranged:
            if self.low is None or self.high is None or not self.low < self.high:
                raise ValueError("a range needs low < high")
            if self.distribution == "loguniform" and self.low <= 0:
                raise ValueError("loguniform needs low > 0")
            if self.mode is not None and not self.low <= self.mode <= self.high:
                raise ValueError("mode must lie in [low, high]")
        elif len(set(self.values)) != len(self.values):
            raise ValueError("values has duplicates")
        return self

    @property
    def targets(self) -> tuple[str, ...]:
        return (self.path,) if self.path is not None else self.paths

    @property
    def label(self) -> str:
        return self.name or self.targets[0]

    def levels(self) -> tuple[float, ...]:
        """The values of a grid or one-at-a-time design: the list, or ``num`` (default 3) points."""
        if self.values:
            return tuple(float(v) for v in self.values)
        n = self.num or 3
        step = (self.high - self.low) / (n - 1)
        return tuple(self._round(self.low + i * step) for i in range(n))

    def _round(self, v: float) -> float:
        return float(round(v)) if self.integer else float(v)


class Robust(_Frozen):
    """The robust analysis: candidate plans are the distinct scenario optima (at most
    ``max_candidates``, the most frequent first); the scenario-based MILP is solved over the first
    ``max_scenarios`` scenarios by id (all when they are fewer)."""

    enabled: bool = True
    max_candidates: int = Field(default=8, ge=1)
    max_scenarios: int = Field(default=40, ge=1)
    time_limit_s: float = Field(default=120.0, gt=0)


class SweepSpec(_Frozen):
    """The root of a sweep TOML file."""

    name: str = "sweep"
    description: str = ""
    base: str | None = None
    design: Design = "grid"
    samples: int = Field(default=16, ge=1)
    seed: int = 0
    methods: tuple[str, ...] = ("milp", "greedy", "homogeneous")
    time_limit_s: float = Field(default=60.0, gt=0)
    mip_gap: float = Field(default=1e-6, ge=0, lt=1)
    replay: bool = False
    set: dict[str, Scalar] = Field(default_factory=dict)
    parameter: tuple[Parameter, ...] = Field(min_length=1)
    robust: Robust = Robust()

    _path: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check(self) -> SweepSpec:
        bad = [m for m in self.methods if m not in METHODS]
        if bad:
            raise ValueError(f"methods: {bad[0]!r} unknown; known: {', '.join(METHODS)}")
        if "milp" not in self.methods:
            raise ValueError("methods must include milp (the scenario optimum)")
        labels = [p.label for p in self.parameter]
        if len(set(labels)) != len(labels):
            raise ValueError("two parameters have the same name; give each a distinct name")
        if self.design in ("grid", "oat"):
            for i, p in enumerate(self.parameter):
                if not p.values and p.num is None:
                    raise ValueError(f"parameter[{i}] ({p.label}): design {self.design!r} needs values or num")
        return self

    @property
    def path(self) -> Path | None:
        return self._path

    def base_path(self) -> Path | None:
        """The base instance file (relative to the spec file), ``None`` = the embedded default."""
        if self.base is None:
            return None
        p = Path(self.base)
        if not p.is_absolute() and self._path is not None:
            p = self._path.parent / p
        return p


def parse_sweep(data: dict, where: str = "<sweep>") -> SweepSpec:
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc), where=where) from None


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and validate a sweep TOML file."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("no such file", where=str(path)) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a sweep file", where=str(path)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"malformed TOML: {exc}", where=str(path)) from None
    spec = parse_sweep(data, where=str(path))
    spec._path = p.resolve()
    return spec
