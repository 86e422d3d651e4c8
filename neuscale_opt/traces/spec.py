"""Validated specifications of a trace and of its request classes (buckets).

These frozen models are embedded in the instance file's ``[workload]`` table
(``neuscale_opt.instance``) and are the arguments of the loaders and bucketers in this package.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from neuscale_opt.schema import Frozen

TraceFormat = Literal["azure", "mooncake", "burstgpt", "generic", "rate-series"]
Representative = Literal["mean", "upper", "p50", "p90", "p99"]


class _Frozen(Frozen):
    """The boundary rules of :class:`neuscale_opt.schema.Frozen`."""


class ColumnMap(_Frozen):
    """Column names of a ``generic`` CSV trace.

    ``time_unit`` says how the arrival column is written: ``s`` or ``ms`` since an origin, or
    ``datetime`` (parsed by pandas).
    """

    arrival: str
    input_tokens: str
    output_tokens: str
    time_unit: Literal["s", "ms", "datetime"] = "s"


class TraceSpec(_Frozen):
    """A request trace file. ``path`` is relative to the instance file that names it."""

    path: str
    format: TraceFormat = "azure"
    columns: ColumnMap | None = None
    # rate-series only: which series (e.g. ServeGen ``model`` column value) to read
    series: str | None = None
    # optional horizon cut: only rows with arrival in [start_s, start_s + duration_s) are used
    start_s: float = Field(default=0.0, ge=0)
    duration_s: float | None = Field(default=None, gt=0)
    # the recording's time resolution, when it is coarse: each request's arrival is moved to a
    # uniform point of [t, t + spread_s) (seeded, the same every run); 0 = as recorded
    spread_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _generic_needs_columns(self) -> TraceSpec:
        if self.format == "generic" and self.columns is None:
            raise ValueError("format 'generic' needs a [columns] mapping")
        return self


class BucketSpec(_Frozen):
    """How requests are grouped into classes.

    ``kind = "total"``: 1-D buckets over input + output tokens (as NeuScale), edges in ``edges``.
    ``kind = "input_output"``: 2-D buckets over input x output tokens (as Mélange), edges in
    ``input_edges`` and ``output_edges``. Edges are strictly increasing positive token counts, the
    upper bounds of the buckets: bucket i covers ``(edges[i-1], edges[i]]`` (with ``edges[-1]``
    read as 0 for the first), and one open bucket ``(edges[-1], inf)`` always follows, so every
    request falls in exactly one bucket and the bucket set does not depend on the data.
    ``representative`` is the length the roofline uses for a bucket's requests.
    """

    kind: Literal["total", "input_output"] = "total"
    edges: tuple[int, ...] | None = None
    input_edges: tuple[int, ...] | None = None
    output_edges: tuple[int, ...] | None = None
    representative: Representative = "mean"

    @model_validator(mode="after")
    def _edges_given(self) -> BucketSpec:
        def check(name: str, e: tuple[int, ...] | None) -> None:
            if e is None or len(e) < 1:
                raise ValueError(f"{name} needs at least one edge")
            if any(b <= a for a, b in zip(e, e[1:], strict=False)):
                raise ValueError(f"{name} must be strictly increasing")
            if e[0] <= 0:
                raise ValueError(f"{name} must be > 0")

        if self.kind == "total":
            check("edges", self.edges)
        else:
            check("input_edges", self.input_edges)
            check("output_edges", self.output_edges)
        return self
