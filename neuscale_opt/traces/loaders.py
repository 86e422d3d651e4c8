"""Read request traces and rate series into one canonical, validated table.

Canonical per-request table (what every loader returns)
--------------------------------------------------------
=================  =======  ============================================================
column             dtype    meaning
=================  =======  ============================================================
``arrival_s``      float64  s since the horizon start (the first arrival when
                            ``start_s = 0``), sorted ascending
``input_tokens``   int64    prompt tokens, >= 0
``output_tokens``  int64    generated tokens, >= 0
=================  =======  ============================================================

``df.attrs`` carries ``source`` (file), ``format``, ``rows_in_file``, ``horizon_s`` (the length of
the horizon the rows were cut to: ``duration_s`` when given, else the last arrival) and
``repaired`` (a list of the repairs made, see below).

Formats
-------
=============  ==================================================================  =========
format         columns read                                                        time
=============  ==================================================================  =========
``azure``      ``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``               datetime
``mooncake``   ``timestamp_ms`` (CSV) or ``timestamp`` (JSONL), ``input_length``,  ms
               ``output_length`` (``hash_ids`` is ignored)
``burstgpt``   ``Timestamp``, ``Request tokens``, ``Response tokens``              s
``generic``    the :class:`~neuscale_opt.traces.spec.ColumnMap` of the instance    s/ms/dt
=============  ==================================================================  =========

Files may be gzipped (detected from the magic bytes, whatever the name); JSONL is detected from a
first character ``{``. ``format="auto"`` picks the format from the header.

Bad input: refused or repaired
------------------------------
Refused with :class:`~neuscale_opt.errors.InputError` (exit code 2), one line naming the file,
the row (1-based data row; the header is row 0, so row ``r`` is file line ``r + 1`` of a CSV)
and the column:

* an empty file, a header without rows, a file that claims gzip but is not (or is truncated);
* a missing or misnamed column (named with the columns that were found);
* a token count that is empty/NaN, non-numeric, non-integer, infinite or negative;
* a timestamp that is empty or cannot be parsed;
* a row with the wrong number of fields (reported by line).

Repaired with a :class:`TraceWarning`:

* rows not sorted by arrival are stably sorted (traces merged from several front-ends are often
  slightly out of order; the order carries no meaning once arrivals are binned into epochs);
* negative relative timestamps are allowed: times are re-based to the first arrival anyway.

Zero token counts are kept (BurstGPT logs failed requests with 0 response tokens; they still
arrived and still cost a prefill).
"""

from __future__ import annotations

import io
import json
import math
import re
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from neuscale_opt.errors import InputError
from neuscale_opt.readers import decode_utf8, max_input_bytes, read_bytes
from neuscale_opt.schema import MAX_DEMAND_CELLS
from neuscale_opt.traces.spec import ColumnMap, TraceFormat, TraceSpec

TRACE_COLUMNS: tuple[str, ...] = ("arrival_s", "input_tokens", "output_tokens")
RATE_COLUMNS: tuple[str, ...] = ("window_start_s", "window_s", "rate_rps", "filled")
GZIP_MAGIC = b"\x1f\x8b"

AZURE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


class TraceWarning(UserWarning):
    """A trace was repaired while loading (e.g. rows were re-sorted by arrival)."""


@dataclass(frozen=True)
class _Schema:
    """Where a per-request format keeps arrival and token counts."""

    arrival: tuple[str, ...]  # accepted names of the arrival column, first match wins
    input_tokens: str
    output_tokens: str
    time_unit: Literal["s", "ms", "datetime"]
    time_format: str | None = None


SCHEMAS: dict[str, _Schema] = {
    "azure": _Schema(("TIMESTAMP",), "ContextTokens", "GeneratedTokens", "datetime", AZURE_TIME_FORMAT),
    "mooncake": _Schema(("timestamp_ms", "timestamp"), "input_length", "output_length", "ms"),
    "burstgpt": _Schema(("Timestamp",), "Request tokens", "Response tokens", "s"),
}
RATE_COLUMN_NAMES: tuple[str, ...] = ("rate_rps", "total_rate_rps")


# ----------------------------------------------------------------------------------------------
# raw reading
# ----------------------------------------------------------------------------------------------
def _open_bytes(path: Path) -> bytes:
    """The file's bytes, decompressed when it is gzip; refuse empty, missing and fake gzip."""
    where = str(path)
    raw = read_bytes(path, where)  # regular files only, within the size cap
    is_gz = raw[:2] == GZIP_MAGIC
    if path.suffix == ".gz" and not is_gz:
        raise InputError("row 0, column -: named .gz but is not gzip (bad magic bytes)", where=where)
    if is_gz:
        raw = _gunzip(raw, where)
    if not raw.strip():
        raise InputError("row 0, column -: empty file (no header, no rows)", where=where)
    decode_utf8(raw, where)  # strict UTF-8: bad bytes are named by offset before any parser sees them
    return raw


def _gunzip(raw: bytes, where: str) -> bytes:
    """Decompressed gzip bytes, at most the input size cap (a small file cannot inflate without
    bound)."""
    cap = max_input_bytes()
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out: list[bytes] = []
    total = 0
    data = raw
    try:
        while data:
            chunk = d.decompress(data, cap + 1 - total)
            out.append(chunk)
            total += len(chunk)
            if total > cap:
                raise InputError(f"row 0, column -: decompresses to more than the {cap}-byte input limit", where=where)
            data = d.unconsumed_tail
            if d.eof:
                rest = d.unused_data
                if rest.strip(b"\0"):  # another gzip member follows (concatenated gzip)
                    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
                    data = rest
                else:
                    break
        if not d.eof:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"row 0, column -: corrupt or truncated gzip ({exc})", where=where) from None
    return b"".join(out)


def _first_line(raw: bytes) -> str:
    return raw.lstrip()[:4096].split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()


def _is_jsonl(raw: bytes) -> bool:
    return raw.lstrip()[:1] == b"{"


def _read_jsonl(raw: bytes, where: str) -> pd.DataFrame:
    """JSON lines, each an object; a line that is not (an array, a number) is refused by line."""
    starts = [ln.lstrip()[:1] for ln in raw.split(b"\n")]
    for i, first in enumerate(starts, start=1):
        if first and first != b"{":
            raise InputError(f"row {i}, column -: line {i} is not a JSON object", where=where)
    try:
        df = pd.read_json(io.BytesIO(raw), lines=True, dtype=False)
    except ValueError:
        # locate the first bad line for the message (error path only)
        for i, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                json.loads(line)
            except ValueError as exc:
                raise InputError(f"row {i}, column -: not valid JSON ({exc.msg})", where=where) from None
        raise InputError("row -, column -: not valid JSON lines", where=where) from None
    if df.empty:
        raise InputError("row 0, column -: no rows", where=where)
    return df


def _read_csv(raw: bytes, where: str) -> pd.DataFrame:
    """Fast pyarrow read; on a parse error re-read with the C parser to report the bad line."""
    try:
        df = pd.read_csv(io.BytesIO(raw), engine="pyarrow")
    except (ValueError, OSError):  # pyarrow's ArrowInvalid is a ValueError; re-read to locate it
        try:
            df = pd.read_csv(io.BytesIO(raw), engine="c", low_memory=False)
        except pd.errors.EmptyDataError:
            raise InputError("row 0, column -: empty file", where=where) from None
        except pd.errors.ParserError as exc2:
            msg = str(exc2).strip().splitlines()[-1]
            line = re.search(r"line (\d+)", msg)
            row = str(int(line.group(1)) - 1) if line else "-"
            raise InputError(f"row {row}, column -: malformed CSV ({msg})", where=where) from None
        except (ValueError, UnicodeDecodeError) as exc2:
            raise InputError(f"row -, column -: unreadable CSV ({exc2})", where=where) from None
    if df.empty:
        raise InputError("row 0, column -: header only, no data rows", where=where)
    return df


def _header_columns(raw: bytes) -> list[str]:
    if _is_jsonl(raw):
        try:
            return list(json.loads(_first_line(raw)).keys())
        except (ValueError, AttributeError):
            return []
    return [c.strip().strip('"') for c in _first_line(raw).split(",")]


def detect_format(raw_or_path: bytes | str | Path, where: str | None = None) -> TraceFormat:
    """The trace format implied by the header (``azure``, ``mooncake``, ``burstgpt``, ``rate-series``).

    ``where`` names the source in error messages when ``raw_or_path`` is the file's bytes.
    """
    if isinstance(raw_or_path, bytes):
        raw, where = raw_or_path, where or "<bytes>"
    else:
        raw, where = _open_bytes(Path(raw_or_path)), str(raw_or_path)
    cols = set(_header_columns(raw))
    # (format, required column groups: any name of a group will do)
    required: list[tuple[TraceFormat, list[tuple[str, ...]]]] = [
        ("azure", [("TIMESTAMP",), ("ContextTokens",), ("GeneratedTokens",)]),
        ("mooncake", [("timestamp_ms", "timestamp"), ("input_length",), ("output_length",)]),
        ("burstgpt", [("Timestamp",), ("Request tokens",), ("Response tokens",)]),
        ("rate-series", [("window_start_s",), RATE_COLUMN_NAMES]),
    ]
    best: tuple[int, TraceFormat, list[tuple[str, ...]]] | None = None
    for fmt, groups in required:
        missing = [g for g in groups if not cols & set(g)]
        if not missing:
            return fmt
        hits = len(groups) - len(missing)
        if hits and (best is None or hits > best[0]):
            best = (hits, fmt, missing)
    if best is not None:
        _, fmt, missing = best
        want = " or ".join(repr(n) for n in missing[0])
        raise InputError(f"row 0 (header), column {want}: missing for format {fmt} (found {sorted(cols)})", where=where)
    raise InputError(
        f"row 0 (header), column -: cannot detect the trace format from header {sorted(cols)}; "
        "expected azure (TIMESTAMP, ContextTokens, GeneratedTokens), "
        "mooncake (timestamp_ms, input_length, output_length), "
        "burstgpt (Timestamp, Request tokens, Response tokens), rate-series (window_start_s, rate_rps) "
        "or --format generic with --columns",
        where=where,
    )


# ----------------------------------------------------------------------------------------------
# validation of columns (vectorised; the loop below is over the 3 columns, never over rows)
# ----------------------------------------------------------------------------------------------
def _require(df: pd.DataFrame, names: tuple[str, ...], where: str) -> str:
    for n in names:
        if n in df.columns:
            return n
    want = " or ".join(repr(n) for n in names)
    raise InputError(f"row 0 (header), column {want}: missing (found {list(map(str, df.columns))})", where=where)


def _row_of(mask: np.ndarray) -> int:
    """1-based data row of the first True in ``mask``."""
    return int(np.flatnonzero(mask)[0]) + 1


def _tokens(col: pd.Series, name: str, where: str) -> np.ndarray:
    """Validated non-negative integer token counts as int64."""
    if pd.api.types.is_integer_dtype(col.dtype) and not col.isna().any():
        values = col.to_numpy(dtype=np.int64)
    else:
        num = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        missing = col.isna().to_numpy()
        if missing.any():
            r = _row_of(missing)
            raise InputError(f"row {r}, column {name!r}: missing value (empty or NaN)", where=where)
        bad = np.isnan(num)
        if bad.any():
            r = _row_of(bad)
            raise InputError(f"row {r}, column {name!r}: not a number ({col.iloc[r - 1]!r})", where=where)
        inf = ~np.isfinite(num)
        if inf.any():
            r = _row_of(inf)
            raise InputError(f"row {r}, column {name!r}: infinite token count", where=where)
        frac = num != np.floor(num)
        if frac.any():
            r = _row_of(frac)
            raise InputError(f"row {r}, column {name!r}: token count {num[r - 1]!r} is not an integer", where=where)
        values = num.astype(np.int64)
    neg = values < 0
    if neg.any():
        r = _row_of(neg)
        raise InputError(f"row {r}, column {name!r}: negative token count {int(values[r - 1])}", where=where)
    return values


def _arrivals(col: pd.Series, name: str, unit: str, fmt: str | None, where: str) -> np.ndarray:
    """Arrival times in seconds (float64, arbitrary origin), validated."""
    missing = col.isna().to_numpy()
    if missing.any():
        r = _row_of(missing)
        raise InputError(f"row {r}, column {name!r}: missing timestamp", where=where)
    if unit == "datetime":
        if pd.api.types.is_datetime64_any_dtype(col.dtype):
            ts = col
        else:
            ts = pd.to_datetime(col.astype(str), format=fmt or "ISO8601", errors="coerce")
        bad = ts.isna().to_numpy()
        if bad.any():
            r = _row_of(bad)
            raise InputError(f"row {r}, column {name!r}: unparseable timestamp {col.iloc[r - 1]!r}", where=where)
        ns = ts.to_numpy(dtype="datetime64[ns]").astype(np.int64)
        return (ns - ns.min()).astype(np.float64) / 1e9
    num = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(num)
    if bad.any():
        r = _row_of(bad)
        raise InputError(f"row {r}, column {name!r}: unparseable timestamp {col.iloc[r - 1]!r}", where=where)
    return num / 1000.0 if unit == "ms" else num


def _canonical(
    arrival: np.ndarray,
    inp: np.ndarray,
    out: np.ndarray,
    *,
    where: str,
    fmt: str,
    arrival_col: str,
    start_s: float,
    duration_s: float | None,
) -> pd.DataFrame:
    """Sort (with a warning when needed), re-base to the first arrival, apply the horizon cut."""
    repaired: list[str] = []
    steps = np.diff(arrival)
    if (steps < 0).any():
        r = int(np.flatnonzero(steps < 0)[0]) + 2
        n_bad = int((steps < 0).sum())
        msg = f"row {r}, column {arrival_col!r}: rows not sorted by arrival ({n_bad} inversions); sorted them"
        warnings.warn(f"{where}: {msg}", TraceWarning, stacklevel=3)
        repaired.append(msg)
        order = np.argsort(arrival, kind="stable")
        arrival, inp, out = arrival[order], inp[order], out[order]
    rel = arrival - arrival[0]
    n_file = len(rel)
    keep = rel >= start_s
    if duration_s is not None:
        keep &= rel < start_s + duration_s
    df = pd.DataFrame(
        {
            "arrival_s": (rel[keep] - start_s).astype(np.float64),
            "input_tokens": inp[keep].astype(np.int64),
            "output_tokens": out[keep].astype(np.int64),
        }
    )
    if not keep.any():
        end = "" if duration_s is None else f", duration_s = {duration_s:g} s"
        raise InputError(
            f"the window (start_s = {start_s:g} s{end}) covers no request: the trace's {n_file} requests span "
            f"0 .. {float(rel[-1]):g} s from its first arrival",
            where=where,
        )
    horizon = float(duration_s) if duration_s is not None else float(max(rel[-1] - start_s, 0.0))
    df.attrs.update(
        source=where,
        format=fmt,
        rows_in_file=n_file,
        horizon_s=horizon,
        start_s=float(start_s),
        repaired=repaired,
    )
    return df


# ----------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------
def resolve_path(path: str | Path, base_dir: Path | None) -> Path:
    """``path`` relative to ``base_dir`` (the instance file's folder) unless absolute."""
    p = Path(path)
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    return p


def load_trace(spec: TraceSpec, base_dir: Path | None = None) -> pd.DataFrame:
    """Load the per-request trace of ``spec`` as the canonical table (see the module docstring).

    Rows kept: those with ``start_s <= t - t_0 < start_s + duration_s`` where ``t_0`` is the first
    arrival of the file; their ``arrival_s = t - t_0 - start_s`` so epoch 0 starts at the horizon
    start. A ``rate-series`` spec is refused here: use :func:`load_rate_series`.
    """
    path = resolve_path(spec.path, base_dir)
    where = str(path)
    if spec.format == "rate-series":
        raise InputError("a rate-series has no per-request rows; use load_rate_series", where=where)
    raw = _open_bytes(path)
    return _load_raw(raw, where, spec.format, spec.columns, spec.start_s, spec.duration_s, spec.spread_s)


def _load_raw(
    raw: bytes,
    where: str,
    fmt: str,
    columns: ColumnMap | None,
    start_s: float,
    duration_s: float | None,
    spread_s: float = 0.0,
) -> pd.DataFrame:
    if fmt == "generic":
        if columns is None:
            raise InputError("format 'generic' needs a column mapping", where=where)
        schema = _Schema((columns.arrival,), columns.input_tokens, columns.output_tokens, columns.time_unit)
    elif fmt in SCHEMAS:
        schema = SCHEMAS[fmt]
    else:
        raise InputError(f"unknown per-request trace format {fmt!r}", where=where)
    header = pd.DataFrame(columns=_header_columns(raw))
    a_col = _require(header, schema.arrival, where)
    i_col = _require(header, (schema.input_tokens,), where)
    o_col = _require(header, (schema.output_tokens,), where)
    if _is_jsonl(raw):
        df = _read_jsonl(raw, where)
        for c in (a_col, i_col, o_col):
            _require(df, (c,), where)
    else:
        # all columns are parsed (not ``usecols``) so that a row with too many fields is refused
        df = _read_csv(raw, where)
    arrival = _arrivals(df[a_col], a_col, schema.time_unit, schema.time_format, where)
    inp = _tokens(df[i_col], i_col, where)
    out = _tokens(df[o_col], o_col, where)
    df = _canonical(arrival, inp, out, where=where, fmt=fmt, arrival_col=a_col, start_s=start_s, duration_s=duration_s)
    return df if spread_s == 0 else spread_arrivals(df, spread_s, cut=duration_s is not None, where=where)


#: seed of :func:`spread_arrivals` (fixed: the same trace gives the same requests every run)
SPREAD_SEED = 0


def spread_arrivals(df: pd.DataFrame, spread_s: float, cut: bool = False, where: str = "spread_s") -> pd.DataFrame:
    """The canonical table ``df`` with each arrival moved to a uniform point of ``[t, t +
    spread_s)`` (``np.random.default_rng(SPREAD_SEED)``, one draw per row in file order), sorted
    again (stably) and kept inside the horizon: a window cut to ``duration_s`` (``cut``) keeps its
    length, the arrivals that would pass its end wrap to its start; without one the horizon grows
    to the last arrival. For a trace recorded at a coarse resolution (the Mooncake conversation trace's
    3-s grid, ``instances/data/README.md``), whose requests of one instant would otherwise arrive
    together. ``attrs["spread_s"]`` records it."""
    if not (math.isfinite(spread_s) and spread_s >= 0):
        raise InputError(f"spread_s must be a finite number >= 0, got {spread_s!r}", where=where)
    t = df["arrival_s"].to_numpy(np.float64) + np.random.default_rng(SPREAD_SEED).random(len(df)) * spread_s
    horizon = float(df.attrs.get("horizon_s", 0.0))
    if cut and horizon > 0:
        t = np.where(t >= horizon, t - horizon, t)
    order = np.argsort(t, kind="stable")
    out = df.iloc[order].reset_index(drop=True)
    out["arrival_s"] = t[order]
    out.attrs = dict(df.attrs)
    if not cut:
        out.attrs["horizon_s"] = max(horizon, float(t.max()) if len(t) else 0.0)
    out.attrs["spread_s"] = float(spread_s)
    return out


def load_trace_file(
    path: str | Path,
    format: TraceFormat | Literal["auto"] = "auto",  # noqa: A002 - mirrors TraceSpec.format
    columns: ColumnMap | None = None,
    start_s: float = 0.0,
    duration_s: float | None = None,
    spread_s: float = 0.0,
) -> pd.DataFrame:
    """Load a per-request trace file given by path (the CLI's TRACE argument).

    ``format="auto"`` detects the format from the header (:func:`detect_format`); ``spread_s`` as
    :func:`spread_arrivals`.
    """
    path = Path(path)
    raw = _open_bytes(path)
    fmt = detect_format(raw, where=str(path)) if format == "auto" else format
    if fmt == "rate-series":
        raise InputError("a rate-series has no per-request rows; use load_rate_series", where=str(path))
    return _load_raw(raw, str(path), fmt, columns, start_s, duration_s, spread_s)


def load_rate_series(
    spec_or_path: TraceSpec | str | Path,
    series: str | None = None,
    base_dir: Path | None = None,
    zero_is_missing: bool = True,
) -> pd.DataFrame:
    """Load a rate series (one row per window: start, length, requests per second).

    Columns read: ``window_start_s``, ``rate_rps`` or ``total_rate_rps`` (ServeGen), optional
    ``window_s`` (else the step between starts) and, when several series share a file, a ``model``
    (or ``series``) column selected by ``series`` (or ``spec.series``).

    Returns ``window_start_s`` (s from the first window or from ``spec.start_s``), ``window_s``,
    ``rate_rps`` and ``filled`` on a complete regular grid.

    **Missing windows.** A window that is absent from the grid, or whose rate is 0 when
    ``zero_is_missing`` (the default, because the ServeGen release writes collection gaps as
    all-zero windows, see ``instances/data/README.md``), is *missing*. It is filled by linear
    interpolation in time between the nearest real windows on either side (the nearest real value
    at the ends), and flagged ``filled = True`` so that backtests can leave it out of the scores.
    Linear interpolation keeps the level continuous across gaps of up to a few hours; it does not
    invent a daily shape inside a gap.
    """
    if isinstance(spec_or_path, TraceSpec):
        path = resolve_path(spec_or_path.path, base_dir)
        series = series if series is not None else spec_or_path.series
        start_s, duration_s = spec_or_path.start_s, spec_or_path.duration_s
    else:
        path = resolve_path(spec_or_path, base_dir)
        start_s, duration_s = 0.0, None
    where = str(path)
    raw = _open_bytes(path)
    df = _read_csv(raw, where)
    _require(df, ("window_start_s",), where)
    rate_col = _require(df, RATE_COLUMN_NAMES, where)
    key = next((c for c in ("model", "series") if c in df.columns), None)
    row_no = np.arange(1, len(df) + 1)
    if key is not None:
        names = [str(s) for s in pd.unique(df[key].astype(str))]
        if series is None:
            if len(names) > 1:
                raise InputError(f"column {key!r}: several series {names}; choose one with --series", where=where)
            series = names[0]
        sel = (df[key].astype(str) == series).to_numpy()
        if not sel.any():
            raise InputError(f"column {key!r}: no series {series!r} (found {names})", where=where)
        df, row_no = df.loc[sel], row_no[sel]
    elif series is not None:
        raise InputError(f"series {series!r} asked for but the file has no 'model' column", where=where)
    start = pd.to_numeric(df["window_start_s"], errors="coerce").to_numpy(np.float64, na_value=np.nan)
    bad = ~np.isfinite(start)
    if bad.any():
        r = int(row_no[np.flatnonzero(bad)[0]])
        raise InputError(f"row {r}, column 'window_start_s': not a number", where=where)
    rate = pd.to_numeric(df[rate_col], errors="coerce").to_numpy(np.float64, na_value=np.nan)
    bad = ~np.isfinite(rate) | (rate < 0)
    if bad.any():
        r = int(row_no[np.flatnonzero(bad)[0]])
        raise InputError(f"row {r}, column {rate_col!r}: rate must be a finite number >= 0", where=where)
    if np.any(np.diff(start) <= 0):
        r = int(row_no[np.flatnonzero(np.diff(start) <= 0)[0] + 1])
        raise InputError(f"row {r}, column 'window_start_s': windows not strictly increasing", where=where)
    if "window_s" in df.columns:
        ws = pd.to_numeric(df["window_s"], errors="coerce").to_numpy(np.float64, na_value=np.nan)
        if not np.all(np.isfinite(ws)) or np.any(ws <= 0) or np.ptp(ws) > 1e-9:
            raise InputError("column 'window_s': must be one positive window length for the series", where=where)
        window = float(ws[0])
    elif len(start) > 1:
        window = float(np.min(np.diff(start)))
    else:
        raise InputError("column 'window_s': missing and cannot be inferred from one window", where=where)
    off = (start - start[0]) / window
    if np.any(np.abs(off - np.round(off)) > 1e-6):
        r = int(row_no[np.flatnonzero(np.abs(off - np.round(off)) > 1e-6)[0]])
        raise InputError(f"row {r}, column 'window_start_s': not on the {window:g}-s grid", where=where)
    if float(off[-1]) + 1 > MAX_DEMAND_CELLS:
        raise InputError(
            f"the windows span {float(start[-1] - start[0]):.6g} s = {float(off[-1]) + 1:.6g} windows of "
            f"{window:g} s, more than {MAX_DEMAND_CELLS}",
            where=where,
        )
    idx = np.round(off).astype(np.int64)
    n = int(idx[-1]) + 1
    grid = np.full(n, np.nan)
    grid[idx] = rate
    if zero_is_missing:
        grid[grid == 0] = np.nan
    filled = np.isnan(grid)
    if filled.all():
        raise InputError(f"column {rate_col!r}: every window is missing or zero", where=where)
    t = np.arange(n, dtype=np.float64)
    grid = np.interp(t, t[~filled], grid[~filled])
    out = pd.DataFrame(
        {
            "window_start_s": t * window,
            "window_s": np.full(n, window),
            "rate_rps": grid,
            "filled": filled,
        }
    )
    keep = out["window_start_s"] >= start_s
    if duration_s is not None:
        keep &= out["window_start_s"] < start_s + duration_s
    out = out.loc[keep].reset_index(drop=True)
    out["window_start_s"] -= start_s
    if out.empty:
        raise InputError("no window inside the horizon (start_s, duration_s)", where=where)
    out.attrs.update(source=where, format="rate-series", series=series, window_s=window)
    return out
