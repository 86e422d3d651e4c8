"""Request classes: buckets over sequence length, and the representative lengths the roofline uses.

Two kinds (:class:`~neuscale_opt.traces.spec.BucketSpec`):

* ``total`` (1-D, as NeuScale): over ``L = input_tokens + output_tokens``.
* ``input_output`` (2-D, as Mélange): over ``input_tokens`` x ``output_tokens``.

For edges ``e_0 < e_1 < ... < e_{K-1}`` a length ``x`` falls in bucket ``k`` when
``e_{k-1} < x <= e_k`` (``e_{-1} := -inf``, so the first bucket also holds 0), and in the open
bucket ``k = K`` when ``x > e_{K-1}``. So there are ``K + 1`` buckets per axis, every request has
exactly one, and the bucket set depends on the edges only, never on the data.

Names (deterministic, ordered as the planner indexes them): ``s0-512``, ``s512-1024``, ...,
``s32768-inf`` for ``total``; ``i0-256_o0-64``, ``i0-256_o64-256``, ... (input-major) for
``input_output``.

Defaults
--------
:data:`DEFAULT_TOTAL_EDGES` = 512, 1024, ..., 32768 (powers of two): 7 edges, 8 buckets. Doubling
edges keep the relative width of every bucket equal (a request's cost is linear-to-quadratic in
its length, so equal *relative* width keeps the representative's error similar in every bucket),
512 is the KV-cache block of Mooncake's trace and 32768 a common context limit; the open bucket
holds the long-context tail (Mooncake reaches 126k input tokens).

:data:`DEFAULT_INPUT_EDGES` = 256, 1024, 4096, 16384 and :data:`DEFAULT_OUTPUT_EDGES` = 64, 256,
1024 (powers of four): 5 x 4 = 20 classes, the coarsest grid that still separates Azure code
(short outputs, median 13) from Azure conversation (median output 129) and Mooncake (median input
6,909) in both dimensions while keeping the MILP's class count small.

Representative lengths
----------------------
``BucketSpec.representative`` picks the statistic, taken per axis over the requests of the bucket
and **rounded up** to an integer (so it is never below the statistic and always >= 1):

* ``mean`` (default): the mean input and the mean output length. The planner provisions
  throughput; a vPod's time per request is (close to) linear in the input length (prefill) and in
  the output length (decode steps), so the mean makes ``rate x work(representative)`` equal the
  bucket's total work. It is the unbiased choice for capacity and energy.
* ``p50``/``p90``/``p99``: per-axis quantiles (numpy linear interpolation); a quantile above the
  mean is a latency-conservative choice (the SLO must hold for most requests, not the average).
* ``upper``: the bucket's upper edge (the worst case the bucket admits): for ``input_output`` the
  upper input and output edges, for ``total`` the upper total edge split in the bucket's mean
  input:output ratio. For the open bucket the observed maximum is used.

Empty buckets still get representatives (the planner needs every class): the midpoint of the
bucket's range, ``(lo + hi) / 2`` with ``hi := 2 lo`` for an open bucket (``lo`` = 0 for the first),
and for ``total`` the midpoint is split in the trace-wide input:output token ratio (1:1 when the
trace is empty).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from neuscale_opt.traces.spec import BucketSpec

DEFAULT_TOTAL_EDGES: tuple[int, ...] = (512, 1024, 2048, 4096, 8192, 16384, 32768)
DEFAULT_INPUT_EDGES: tuple[int, ...] = (256, 1024, 4096, 16384)
DEFAULT_OUTPUT_EDGES: tuple[int, ...] = (64, 256, 1024)

DEFAULT_BUCKETS = BucketSpec(kind="total", edges=DEFAULT_TOTAL_EDGES)
DEFAULT_BUCKETS_2D = BucketSpec(kind="input_output", input_edges=DEFAULT_INPUT_EDGES, output_edges=DEFAULT_OUTPUT_EDGES)

_QUANTILE = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


def _ranges(edges: tuple[int, ...]) -> list[tuple[float, float]]:
    lo = (0.0, *map(float, edges))
    hi = (*map(float, edges), np.inf)
    return list(zip(lo, hi, strict=True))


def _label(lo: float, hi: float) -> str:
    return f"{int(lo)}-{'inf' if np.isinf(hi) else int(hi)}"


def bucket_names(spec: BucketSpec) -> list[str]:
    """Bucket names in planner order; a function of the edges only."""
    if spec.kind == "total":
        return [f"s{_label(lo, hi)}" for lo, hi in _ranges(spec.edges)]
    return [
        f"i{_label(ilo, ihi)}_o{_label(olo, ohi)}"
        for ilo, ihi in _ranges(spec.input_edges)
        for olo, ohi in _ranges(spec.output_edges)
    ]


def bucket_codes(trace: pd.DataFrame, spec: BucketSpec) -> np.ndarray:
    """Integer bucket index (position in :func:`bucket_names`) of every row, vectorised.

    ``np.searchsorted(edges, x, side="left")`` is the ``k`` with ``e_{k-1} < x <= e_k``.
    """
    inp = trace["input_tokens"].to_numpy(np.int64)
    out = trace["output_tokens"].to_numpy(np.int64)
    if spec.kind == "total":
        return np.searchsorted(np.asarray(spec.edges), inp + out, side="left").astype(np.int64)
    ki = np.searchsorted(np.asarray(spec.input_edges), inp, side="left")
    ko = np.searchsorted(np.asarray(spec.output_edges), out, side="left")
    return (ki * (len(spec.output_edges) + 1) + ko).astype(np.int64)


def assign_buckets(trace: pd.DataFrame, spec: BucketSpec) -> pd.Series:
    """Categorical Series (aligned to ``trace``) whose categories are exactly :func:`bucket_names`."""
    names = bucket_names(spec)
    cat = pd.Categorical.from_codes(bucket_codes(trace, spec), categories=names)
    return pd.Series(cat, index=trace.index, name="bucket")


def _bounds(spec: BucketSpec) -> pd.DataFrame:
    """Per-bucket edges on each axis (unused axes are ``[0, inf)``)."""
    inf = np.inf
    if spec.kind == "total":
        r = np.array(_ranges(spec.edges))
        n = len(r)
        return pd.DataFrame(
            {
                "total_lo": r[:, 0],
                "total_hi": r[:, 1],
                "input_lo": np.zeros(n),
                "input_hi": np.full(n, inf),
                "output_lo": np.zeros(n),
                "output_hi": np.full(n, inf),
            }
        )
    ri, ro = np.array(_ranges(spec.input_edges)), np.array(_ranges(spec.output_edges))
    ii, oo = np.repeat(np.arange(len(ri)), len(ro)), np.tile(np.arange(len(ro)), len(ri))
    n = len(ii)
    return pd.DataFrame(
        {
            "total_lo": np.zeros(n),
            "total_hi": np.full(n, inf),
            "input_lo": ri[ii, 0],
            "input_hi": ri[ii, 1],
            "output_lo": ro[oo, 0],
            "output_hi": ro[oo, 1],
        }
    )


def _mid(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    hi = np.where(np.isinf(hi), 2.0 * np.maximum(lo, 1.0), hi)
    return (lo + hi) / 2.0


def bucket_table(trace: pd.DataFrame, spec: BucketSpec) -> pd.DataFrame:
    """One row per bucket (all buckets, in name order), with the histogram and representatives.

    Columns: ``bucket``, ``count``, ``share`` (count / rows), the edges ``total_lo/hi``,
    ``input_lo/hi``, ``output_lo/hi`` (tokens; ``lo`` exclusive, ``hi`` inclusive), the observed
    ``mean_input``/``mean_output``, ``p50|p90|p99_input``/``_output``, ``max_input``/``max_output``/
    ``max_total`` (NaN for an empty bucket), and the representatives ``input_tokens``, ``output_tokens``
    (int64 >= 1; see the module docstring for the rule) with ``representative`` naming it.
    """
    names = bucket_names(spec)
    k = len(names)
    codes = bucket_codes(trace, spec)
    inp = trace["input_tokens"].to_numpy(np.float64)
    out = trace["output_tokens"].to_numpy(np.float64)
    count = np.bincount(codes, minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_in = np.bincount(codes, weights=inp, minlength=k) / count
        mean_out = np.bincount(codes, weights=out, minlength=k) / count
    stats = pd.DataFrame(index=pd.RangeIndex(k))
    sorted_in, sorted_out = _sorted_by_bucket(codes, inp), _sorted_by_bucket(codes, out)
    for q_name, q in _QUANTILE.items():
        stats[f"{q_name}_input"] = _bucket_quantile(sorted_in, count, q)
        stats[f"{q_name}_output"] = _bucket_quantile(sorted_out, count, q)
    stats["max_input"] = _bucket_quantile(sorted_in, count, 1.0)
    stats["max_output"] = _bucket_quantile(sorted_out, count, 1.0)
    stats["max_total"] = _bucket_quantile(_sorted_by_bucket(codes, inp + out), count, 1.0)

    b = _bounds(spec)
    n = int(count.sum())
    table = pd.DataFrame({"bucket": names, "count": count.astype(np.int64)})
    table["share"] = count / n if n else np.zeros(k)
    table = pd.concat([table, b], axis=1)
    table["mean_input"] = mean_in
    table["mean_output"] = mean_out
    table = pd.concat([table, stats.reset_index(drop=True)], axis=1)

    rep_in, rep_out = _representatives(table, spec, inp, out)
    table["input_tokens"] = rep_in
    table["output_tokens"] = rep_out
    table["representative"] = spec.representative
    table.attrs["unit"] = {"count": "requests", "input_tokens": "tokens", "output_tokens": "tokens"}
    return table


#: Quantile nodes of a class's lengths that the SLO-attainment model averages over (AT0: prompts,
#: AT3: answers).
LENGTH_NODES = 32


def length_nodes(
    trace: pd.DataFrame, spec: BucketSpec, column: str = "output_tokens", nodes: int = LENGTH_NODES
) -> list[tuple[float, ...]]:
    """Per bucket (in :func:`bucket_names` order) the trace's ``column`` (``input_tokens`` or
    ``output_tokens``) at the ``nodes`` mid-quantiles ``(i + 0.5) / nodes``: an equal-weight
    discrete stand-in for the class's length distribution (``alloc.attainment``, AT0 and AT3); an
    empty tuple for an empty bucket."""
    k = len(bucket_names(spec))
    codes = bucket_codes(trace, spec)
    vals = trace[column].to_numpy(np.float64)
    count = np.bincount(codes, minlength=k)
    srt = _sorted_by_bucket(codes, vals)
    qs = [_bucket_quantile(srt, count, (i + 0.5) / nodes) for i in range(nodes)]
    grid = np.column_stack(qs) if qs else np.zeros((k, 0))
    return [tuple(float(v) for v in grid[i]) if count[i] > 0 else () for i in range(k)]


def _sorted_by_bucket(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` ordered by bucket code, ascending within each bucket. Token counts (whole numbers
    below 2^40) in one sort of the integer key ``code x 2^40 + value``; other values sorted by
    value, then stably by code."""
    shift = 2**40
    if len(values) and np.all((values >= 0) & (values < shift) & (values == np.floor(values))):
        key = np.sort(codes.astype(np.int64) * shift + values.astype(np.int64))
        return (key % shift).astype(np.float64)
    by_value = np.argsort(values)
    return values[by_value][np.argsort(codes[by_value], kind="stable")]


def _bucket_quantile(sorted_values: np.ndarray, count: np.ndarray, q: float) -> np.ndarray:
    """Per bucket the ``q`` quantile of its values (linear interpolation between the two nearest
    order statistics, as numpy's and pandas' default: position ``q x (count - 1)``); NaN for an
    empty bucket. ``sorted_values`` as :func:`_sorted_by_bucket` orders them."""
    start = np.concatenate(([0], np.cumsum(count)[:-1]))
    out = np.full(len(count), np.nan)
    has = count > 0
    pos = q * (count[has] - 1).astype(np.float64)
    lo = np.floor(pos).astype(np.int64)
    frac = pos % 1
    val = sorted_values[start[has] + lo]
    nxt = sorted_values[start[has] + np.minimum(lo + 1, count[has] - 1)]
    out[has] = np.where(frac == 0.0, val, val + (nxt - val) * frac)
    return out


def _representatives(
    t: pd.DataFrame, spec: BucketSpec, inp: np.ndarray, out: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Representative (input, output) per bucket as int64 >= 1 (rule in the module docstring)."""
    rep = spec.representative
    if rep == "mean":
        ri, ro = t["mean_input"].to_numpy(), t["mean_output"].to_numpy()
    elif rep in _QUANTILE:
        ri, ro = t[f"{rep}_input"].to_numpy(), t[f"{rep}_output"].to_numpy()
    else:  # upper
        if spec.kind == "input_output":
            ri = np.where(np.isinf(t["input_hi"]), t["max_input"], t["input_hi"])
            ro = np.where(np.isinf(t["output_hi"]), t["max_output"], t["output_hi"])
        else:
            tot = np.where(np.isinf(t["total_hi"]), t["max_total"], t["total_hi"])
            with np.errstate(invalid="ignore", divide="ignore"):
                share = t["mean_input"] / (t["mean_input"] + t["mean_output"])
            ri = np.round(tot * share)
            ro = tot - ri
    # empty buckets: the midpoint of the range
    empty = t["count"].to_numpy() == 0
    if spec.kind == "input_output":
        mi = _mid(t["input_lo"].to_numpy(), t["input_hi"].to_numpy())
        mo = _mid(t["output_lo"].to_numpy(), t["output_hi"].to_numpy())
    else:
        tot_in, tot_out = inp.sum(), out.sum()
        share = tot_in / (tot_in + tot_out) if tot_in + tot_out > 0 else 0.5
        m = _mid(t["total_lo"].to_numpy(), t["total_hi"].to_numpy())
        mi = np.round(m * share)
        mo = m - mi
    ri = np.where(empty, mi, ri)
    ro = np.where(empty, mo, ro)
    ri = np.maximum(np.ceil(np.asarray(ri, dtype=np.float64) - 1e-9), 1).astype(np.int64)
    ro = np.maximum(np.ceil(np.asarray(ro, dtype=np.float64) - 1e-9), 1).astype(np.int64)
    return ri, ro


def histogram(trace: pd.DataFrame, spec: BucketSpec) -> pd.Series:
    """Request count per bucket (all buckets, name order), int64."""
    names = bucket_names(spec)
    return pd.Series(np.bincount(bucket_codes(trace, spec), minlength=len(names)), index=names, name="count")
