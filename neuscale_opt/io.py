"""Output helpers: deterministic JSON and atomic writes (nothing half-written on failure)."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from neuscale_opt.errors import InputError


def _default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return _clean_float(float(o))
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _clean_float(x: float) -> float | str | None:
    if math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _clean(obj: Any) -> Any:
    """Recursively replace NaN by null and inf by the string "inf" (JSON has neither)."""
    if isinstance(obj, float):
        return _clean_float(obj)
    if isinstance(obj, np.floating):
        return _clean_float(float(obj))
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def to_json(obj: Any) -> str:
    """Deterministic JSON text (sorted keys, fixed separators, NaN -> null)."""
    return json.dumps(_clean(obj), default=_default, sort_keys=True, indent=2, allow_nan=False) + "\n"


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename, so a failure leaves nothing partial."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError("directory does not exist", where=str(parent))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=parent)
    except OSError as exc:
        raise InputError(f"cannot write here ({exc.strerror})", where=str(parent)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def emit(text: str, dest: str | None) -> None:
    """Send ``text`` to stdout when ``dest`` is ``"-"``, else atomically to the file ``dest``."""
    if dest is None:
        return
    if dest == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        atomic_write_text(dest, text)


def write_json(obj: Any, dest: str | None) -> None:
    emit(to_json(obj), dest)


def frame_to_csv_text(df: pd.DataFrame) -> str:
    """CSV text with a fixed float format so that the same frame gives the same bytes."""
    return df.to_csv(index=False, float_format="%.10g", lineterminator="\n")


def write_csv(df: pd.DataFrame, dest: str | None) -> None:
    emit(frame_to_csv_text(df), dest)
