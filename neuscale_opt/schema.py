"""The one base class of every validated input model (instances, trace specs, profiles, Mélange).

:class:`Frozen` is a pydantic model that is frozen, refuses unknown keys and applies the number
rules of the input boundary once, for every field of every model:

* **finite**: ``inf``, ``-inf`` and ``nan`` (TOML ``inf``/``nan``, JSON ``Infinity``/``NaN``) are
  refused for every number, with the field the user wrote (``energy.pue: must be a finite
  number``);
* **no booleans as numbers**: ``true``/``false`` is accepted only where the field is a boolean
  (pydantic's lax mode would read ``true`` as ``1``);
* **integral counts**: an ``int`` field takes ``3`` or ``3.0`` but refuses ``1.5`` (pydantic).

Ranges (``gt``, ``ge``, ``le``) are declared per field with ``Field``.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

#: Most epochs an instance may plan (``epochs.horizon``) and highest epoch a row may name: 100,000
#: five-minute epochs are about a year, far beyond any planning horizon, and keep per-epoch arrays
#: (epochs x classes x sub-windows) in memory.
MAX_EPOCHS = 100_000
#: Most cells (epochs x sub-windows x classes) of the per-epoch demand arrays built from a trace:
#: 50 million int64 counts are 400 MB, the most a planning run should hold for them.
MAX_DEMAND_CELLS = 50_000_000

#: Most requests a (scaled) trace may hold: 50 million rows of three 8-byte columns are 1.2 GB,
#: and a replay of them runs for hours.
MAX_TRACE_ROWS = 50_000_000

#: Message of a boolean given where a number (or a string) is expected.
BOOL_NOT_NUMBER = "must be a number, not a boolean (true/false)"


def admits_bool(annotation: Any) -> bool:
    """Whether a field annotation accepts a boolean anywhere in it (``bool``, ``bool | None``,
    ``dict[str, bool]``, ...)."""
    if annotation is bool:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return any(isinstance(a, bool) for a in typing.get_args(annotation))
    if origin is None and not isinstance(annotation, types.UnionType):
        return False
    return any(admits_bool(a) for a in typing.get_args(annotation))


def contains_bool(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is a boolean or a list/tuple/dict holding one (nested models aside: their
    own fields are checked by their own validator)."""
    if isinstance(value, bool):
        return True
    if depth > 4:
        return False
    if isinstance(value, (list, tuple)):
        return any(contains_bool(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(contains_bool(v, depth + 1) for v in value.values() if not isinstance(v, dict))
    return False


class Frozen(BaseModel):
    """Frozen, ``extra="forbid"``, finite numbers only, booleans only where a field is boolean."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and not admits_bool(field.annotation) and _shallow_bool(value, field.annotation):
            raise ValueError(BOOL_NOT_NUMBER)
        return value


def _shallow_bool(value: Any, annotation: Any) -> bool:
    """A boolean in ``value`` that is not inside a nested model's table."""
    if isinstance(value, bool):
        return True
    if isinstance(value, dict) and _is_model(annotation):
        return False  # a sub-table: its model checks its own fields
    if isinstance(value, (list, tuple)):
        return any(isinstance(v, bool) or (isinstance(v, (list, tuple)) and contains_bool(v)) for v in value)
    if isinstance(value, dict):
        return any(isinstance(v, bool) for v in value.values())
    return False


def _is_model(annotation: Any) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_is_model(a) for a in typing.get_args(annotation))
