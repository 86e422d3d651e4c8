"""Numbers as the report prints them for people: rounded to three significant digits, thousands
separated, one unit per quantity across every table and figure (kWh, USD, USD/h, kgCO2e, req/s).

The exact values stay in ``plan.json``, ``replays.json`` and the CSVs beside the report.
"""

from __future__ import annotations

import math
from typing import Any

J_PER_KWH = 3.6e6
SIG = 3
MISSING = "–"


def fmt(x: Any, sig: int = SIG) -> str:
    """``x`` rounded to ``sig`` significant digits (integers as they are), thousands separated."""
    if x is None:
        return MISSING
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, str):
        return x
    if isinstance(x, int) or (hasattr(x, "dtype") and getattr(x.dtype, "kind", "") in "iu"):
        return f"{int(x):,}"
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(f):
        return MISSING
    if math.isinf(f):
        return "∞" if f > 0 else "-∞"
    if abs(f) < 1e-9:  # solver noise around zero
        return "0"
    if f.is_integer() and abs(f) < 1000:
        return f"{int(f):,}"
    mag = math.floor(math.log10(abs(f)))
    decimals = sig - 1 - mag
    if decimals <= 0:
        return f"{round(f, decimals):,.0f}"
    return f"{f:,.{decimals}f}"


def pct(x: Any, sig: int = SIG) -> str:
    """A share as a percentage: 0.123 -> ``12.3 %``, 0.9996 -> ``99.96 %`` (shares in [0.99, 1) are
    truncated to two decimals, so only a perfect share reads 100 %)."""
    if x is None:
        return MISSING
    f = float(x)
    if math.isnan(f):
        return MISSING
    if 0.99 <= f < 1.0:  # near-perfect attainments keep two decimals (99.95 %, never a rounded 100 %)
        return f"{math.floor(1e4 * f) / 100:.2f} %"
    return f"{fmt(100.0 * f, sig)} %"


def kwh(joules: Any) -> float:
    return float(joules) / J_PER_KWH if joules is not None else math.nan


def clock(seconds: float) -> str:
    """Time from the start of the horizon as ``h:mm`` (``26:05`` past a day)."""
    m = int(round(float(seconds) / 60.0))
    return f"{m // 60}:{m % 60:02d}"


def parse(text: str) -> float:
    """The value of a cell :func:`fmt` or :func:`pct` wrote (percentages as shares); the tests' reader."""
    t = text.strip()
    if t in (MISSING, ""):
        return math.nan
    if t.endswith("%"):
        return float(t[:-1].strip().replace(",", "")) / 100.0
    if t == "∞":
        return math.inf
    return float(t.replace(",", ""))
