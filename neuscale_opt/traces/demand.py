"""Per-epoch, per-bucket demand: the table the forecasters read and the planner provisions for.

For a trace with arrivals ``t_r`` (s from the horizon start), buckets ``b(r)``, epoch length ``T``
(default 300 s) and sub-window length ``w`` (default 10 s, ``T / w`` must be an integer):

* epoch of a request ``e(r) = floor(t_r / T)``; sub-window ``j(r) = floor((t_r - e T) / w)``;
* ``count[e, b]  = #{r : e(r) = e, b(r) = b}``;
* ``mean_rps[e, b] = count[e, b] / d_e``, with ``d_e`` the part of epoch ``e`` inside the horizon
  (``T`` except for the trailing epoch, see below);
* ``peak_rps[e, b] = max_j #{r : e(r) = e, j(r) = j, b(r) = b} / w``: the highest rate over the
  epoch's sub-windows. This is NeuScale's ``R_peak`` at sub-window resolution and the number the
  planner provisions for (a plan sized for the mean rate queues during every burst);
* ``input_tokens[e, b]``, ``output_tokens[e, b]``: token sums of those requests.

Every pair ``(e, b)`` for ``e = 0 .. E-1`` and every bucket name is present, with zeros when empty.

Horizon and the trailing partial epoch
--------------------------------------
The horizon is ``[0, H)``. With ``horizon_s`` given, rows at ``t >= H`` are left out and
``E = ceil(H / T)``. Without it, ``H`` is the trace's horizon (``df.attrs["horizon_s"]``: the cut
``duration_s`` or the last arrival) and *every* row is kept: ``E = max(ceil(H/T), floor(t_max/T)+1)``.
The trailing epoch is kept even when partial (``partial="keep"``, the default), so
``sum(count) = rows in the horizon`` always holds. Its ``duration_s = d_E-1 = H - (E-1) T`` (at
least one sub-window, so a sliver does not turn one request into a huge rate), its ``mean_rps``
divides by that, and its sub-windows beyond ``H`` simply hold nothing. ``partial="drop"`` instead
ends the horizon at the last full epoch (``H := floor(H/T) T``) and drops the rows after it.
Backtests score full epochs only (:func:`neuscale_opt.traces.forecast.backtest`).

Sizing window chosen from the trace's burstiness (``provision_for = "burst"``)
-----------------------------------------------------------------------------
:func:`sizing_window` picks the window ``w*`` over which capacity is sized, from the pooled arrival
counts (all classes together: the demand a pooled group sees), and :func:`burst_demand` sizes each
class for its share of the pooled peak over ``w*`` (D7-D10 of ``formulations/forecast.md``):

* candidates ``w`` are the multiples of the base sub-window ``w0`` that divide the epoch ``T``
  (``w0, 2 w0, ..., T``);
* ``N`` are the pooled counts per base sub-window; ``V0`` (:func:`base_variance`) their variance
  at a steady rate: the Poisson ``mean(N)``, or more when arrivals come in clumps (robust
  estimate from consecutive sub-windows);
* for a candidate ``w``, ``M_w``, ``V_w`` are the mean and variance of ``N`` *inside* windows of
  length ``w`` (each window around its own mean, pooled over all windows of all epochs, ``dof_w``
  = sub-windows minus windows). The variance beyond ``V0``, less a two-standard-error allowance
  for the estimate (``2 V0 sqrt(2 / dof_w)``), is the rate's own movement inside a window:
  ``cv_x(w) = sqrt(max(V_w - V0 - 2 V0 sqrt(2 / dof_w), 0)) / M_w``;
* the queueing model behind the safe loads (``alloc.attainment``) absorbs Poisson fluctuation at
  the sized rate, and the capacity headroom ``h`` (default :data:`DEFAULT_BURST_HEADROOM` = 0.1,
  the ``1 / 0.9 - 1`` of the 0.9 cap) absorbs rate movements up to ``h`` of the rate;
* ``w*`` = the largest candidate such that ``cv_x(w) <= h`` for it and every shorter candidate
  (the search stops at the first window that fails): within windows that long the rate moves
  less than the headroom absorbs, so sizing for the busiest such window is enough. Poisson
  arrivals give ``w* = T`` (size for the epoch's mean); arrivals whose rate jumps every ``tau``
  seconds give ``w* <= tau``. When even ``w0`` fails (``cv_x(w0)`` is 0 by construction, one
  sub-window per window, so only the next candidate can), ``w* = w0``, the finest the data allows.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pandas as pd

from neuscale_opt.errors import InputError
from neuscale_opt.schema import MAX_DEMAND_CELLS, MAX_EPOCHS
from neuscale_opt.traces.buckets import bucket_codes, bucket_names
from neuscale_opt.traces.spec import BucketSpec

ALL = "all"
DEFAULT_EPOCH_S = 300.0
DEFAULT_SUBWINDOW_S = 10.0
#: relative rate movement inside a sizing window that the capacity headroom absorbs (1 / 0.9 - 1)
DEFAULT_BURST_HEADROOM = 0.1
DEMAND_COLUMNS: tuple[str, ...] = (
    "epoch",
    "bucket",
    "start_s",
    "duration_s",
    "count",
    "mean_rps",
    "peak_rps",
    "input_tokens",
    "output_tokens",
)
UNITS = {
    "start_s": "s",
    "duration_s": "s",
    "count": "requests",
    "mean_rps": "req/s",
    "peak_rps": "req/s",
    "input_tokens": "tokens",
    "output_tokens": "tokens",
}


def _subwindows(epoch_s: float, subwindow_s: float) -> int:
    if not (epoch_s > 0 and subwindow_s > 0):
        raise InputError(f"epoch ({epoch_s}) and sub-window ({subwindow_s}) must be > 0", where="demand")
    ratio = epoch_s / subwindow_s
    n = round(ratio)
    if n < 1 or abs(ratio - n) > 1e-9 * max(1.0, ratio):
        raise InputError(
            f"the epoch ({epoch_s:g} s) must be a whole number of sub-windows ({subwindow_s:g} s)",
            where="demand",
        )
    return int(n)


def check_epoch_count(n_epochs: int, epoch_s: float, span_s: float, cells: int = 0) -> None:
    """Refuse, before any per-epoch array is allocated, a span that holds more than
    :data:`~neuscale_opt.schema.MAX_EPOCHS` epochs, or arrays of more than
    :data:`~neuscale_opt.schema.MAX_DEMAND_CELLS` cells (a trace spanning decades, an epoch of a
    microsecond, a sub-window far shorter than the epoch)."""
    if n_epochs > MAX_EPOCHS:
        raise InputError(
            f"the trace spans {span_s:.6g} s = {n_epochs} epochs of {epoch_s:g} s, more than the {MAX_EPOCHS} "
            "epochs a plan may have; use longer epochs or cut the trace (start_s, duration_s, epochs.horizon)",
            where="demand",
        )
    if cells > MAX_DEMAND_CELLS:
        raise InputError(
            f"{n_epochs} epochs x sub-windows x classes = {cells} cells, more than {MAX_DEMAND_CELLS}; "
            "use longer sub-windows or fewer epochs",
            where="demand",
        )


def epoch_demand(
    trace: pd.DataFrame,
    spec: BucketSpec | None,
    epoch_s: float = DEFAULT_EPOCH_S,
    subwindow_s: float = DEFAULT_SUBWINDOW_S,
    horizon_s: float | None = None,
    partial: Literal["keep", "drop"] = "keep",
) -> pd.DataFrame:
    """Long table of demand per (epoch, bucket); see the module docstring for every column.

    ``trace`` is the canonical table of :func:`neuscale_opt.traces.loaders.load_trace`;
    ``spec=None`` puts every request in one class named ``all`` (the aggregate demand). Vectorised:
    one ``np.bincount`` per statistic over the flat index ``e * B + b`` (and ``(e * J + j) * B + b``
    for the sub-window counts).
    """
    n_sub = _subwindows(epoch_s, subwindow_s)
    names = bucket_names(spec) if spec is not None else [ALL]
    nb = len(names)
    t = trace["arrival_s"].to_numpy(np.float64)
    t_max = float(t.max()) if len(t) else 0.0
    if horizon_s is not None:
        if not horizon_s > 0:
            raise InputError(f"horizon must be > 0 s, got {horizon_s}", where="demand")
        h = float(horizon_s)
        n_ep = math.ceil(h / epoch_s - 1e-12)
        keep = (t >= 0) & (t < h)
    else:
        h = max(float(trace.attrs.get("horizon_s", t_max)), t_max)
        n_ep = max(math.ceil(h / epoch_s - 1e-12), math.floor(t_max / epoch_s) + 1 if len(t) else 1)
        keep = t >= 0
    if partial == "drop":
        n_ep = math.floor(h / epoch_s + 1e-12)
        h = n_ep * epoch_s
        keep &= t < h
        if n_ep == 0:
            raise InputError(f"the horizon ({h:g} s) is shorter than one epoch ({epoch_s:g} s)", where="demand")
    n_ep = max(n_ep, 1)
    check_epoch_count(n_ep, epoch_s, h, cells=n_ep * n_sub * nb)

    t = t[keep]
    codes = (bucket_codes(trace, spec) if spec is not None else np.zeros(len(keep), np.int64))[keep]
    inp = trace["input_tokens"].to_numpy(np.int64)[keep]
    out = trace["output_tokens"].to_numpy(np.int64)[keep]
    e = np.minimum((t // epoch_s).astype(np.int64), n_ep - 1)
    j = np.minimum(((t - e * epoch_s) // subwindow_s).astype(np.int64), n_sub - 1)

    flat = e * nb + codes
    size = n_ep * nb
    count = np.bincount(flat, minlength=size)
    in_sum = np.bincount(flat, weights=inp, minlength=size)
    out_sum = np.bincount(flat, weights=out, minlength=size)
    sub = np.bincount((e * n_sub + j) * nb + codes, minlength=n_ep * n_sub * nb).reshape(n_ep, n_sub, nb)
    peak = sub.max(axis=1).reshape(-1) / subwindow_s

    starts = np.arange(n_ep, dtype=np.float64) * epoch_s
    dur = np.clip(h - starts, subwindow_s, epoch_s)
    demand = pd.DataFrame(
        {
            "epoch": np.repeat(np.arange(n_ep, dtype=np.int64), nb),
            "bucket": pd.Categorical(np.tile(names, n_ep), categories=names),
            "start_s": np.repeat(starts, nb),
            "duration_s": np.repeat(dur, nb),
            "count": count.astype(np.int64),
            "mean_rps": count / np.repeat(dur, nb),
            "peak_rps": peak,
            "input_tokens": np.rint(in_sum).astype(np.int64),
            "output_tokens": np.rint(out_sum).astype(np.int64),
        }
    )
    demand.attrs.update(
        epoch_s=float(epoch_s),
        subwindow_s=float(subwindow_s),
        horizon_s=float(h),
        rows=int(keep.sum()),
        rows_outside_horizon=int((~keep).sum()),
        bucket_kind=spec.kind if spec is not None else ALL,
        source=trace.attrs.get("source"),
        unit=dict(UNITS),
    )
    return demand


def _data_horizon(trace: pd.DataFrame) -> float:
    """Where the trace's record ends (s): ``df.attrs["horizon_s"]`` (the cut ``duration_s`` or the
    last arrival), at least the last arrival."""
    t = trace["arrival_s"].to_numpy(np.float64)
    return max(float(trace.attrs.get("horizon_s", 0.0)), float(t.max()) if len(t) else 0.0)


def recorded_seconds(
    trace: pd.DataFrame, epochs: np.ndarray, duration_s: np.ndarray, epoch_s: float, base_s: float
) -> np.ndarray:
    """Per epoch, the seconds of it the trace recorded: its ``duration_s`` cut at the trace's end
    (:func:`_data_horizon`), at least one sub-window (as D2). Equal to ``duration_s`` except for
    epochs a horizon set past the trace's end reaches into."""
    start = np.asarray(epochs, dtype=np.float64) * float(epoch_s)
    rec = np.clip(_data_horizon(trace) - start, 0.0, np.asarray(duration_s, dtype=np.float64))
    return np.maximum(rec, min(float(base_s), float(epoch_s)))


def _pooled_counts(
    trace: pd.DataFrame, epoch_s: float, base_s: float, horizon_s: float | None
) -> tuple[np.ndarray, float]:
    """Pooled arrival counts per (epoch, base sub-window) of the full epochs of the horizon, and
    the horizon (s). A trailing partial epoch is left out (its empty sub-windows are not demand),
    and so is an epoch the trace's data does not cover to its end: a horizon set longer than the
    trace (``epochs.horizon``) counts beyond ``df.attrs["horizon_s"]`` (the cut or the last arrival)
    sub-windows that hold nothing because nothing was recorded, not because the rate fell."""
    n_sub = _subwindows(epoch_s, base_s)
    t = trace["arrival_s"].to_numpy(np.float64)
    data_h = _data_horizon(trace)
    h = float(horizon_s) if horizon_s is not None else data_h
    n_ep = max(math.floor(min(h, data_h) / epoch_s + 1e-12), 0)
    check_epoch_count(max(n_ep, 1), epoch_s, h, cells=max(n_ep, 1) * n_sub)
    t = t[(t >= 0) & (t < n_ep * epoch_s)]
    k = np.minimum((t // base_s).astype(np.int64), n_ep * n_sub - 1) if n_ep else np.zeros(0, np.int64)
    return np.bincount(k, minlength=n_ep * n_sub).reshape(n_ep, n_sub).astype(np.float64), h


#: median of a chi-square variable of one degree of freedom: median(Z^2) for a standard normal Z
_CHI2_1_MEDIAN = 0.45493642311957283


def base_variance(counts: np.ndarray) -> float:
    """The variance of the base sub-window counts at a steady rate, ``V0``: at least the mean (the
    Poisson variance), or the robust estimate from consecutive sub-windows of an epoch,
    ``median((N_{j+1} - N_j)^2) / (2 x 0.4549)`` (the median of a chi-square of one degree of
    freedom), when larger: arrivals that come in clumps (a trace scaled by superposed copies)
    vary more than Poisson even at a steady rate, and the median leaves out the few differences
    that straddle a jump of the rate."""
    if counts.size == 0:
        return 0.0
    m = float(counts.mean())
    if counts.shape[1] < 2:
        return m
    d2 = np.diff(counts, axis=1).ravel() ** 2
    return max(m, float(np.median(d2)) / (2.0 * _CHI2_1_MEDIAN))


def movement_beyond(v: np.ndarray | float, v0: np.ndarray | float, dof: int) -> np.ndarray:
    """The count variance ``v`` inside windows (around each window's own mean, ``dof`` degrees of
    freedom) beyond the steady-rate variance ``v0``, less a two-standard-error allowance for the
    estimate: ``max(v - v0 - 2 v0 sqrt(2 / dof), 0)``. The one rule of D8 (``v0`` = D7) and D12
    (``v0`` = the Poisson mean) of ``formulations/forecast.md``."""
    return np.maximum(np.asarray(v, dtype=float) - v0 - 2.0 * np.asarray(v0, dtype=float) * math.sqrt(2.0 / dof), 0.0)


def sizing_window(
    trace: pd.DataFrame,
    epoch_s: float = DEFAULT_EPOCH_S,
    base_s: float = DEFAULT_SUBWINDOW_S,
    headroom: float = DEFAULT_BURST_HEADROOM,
    horizon_s: float | None = None,
) -> tuple[float, dict]:
    """The sizing window ``w*`` (s) and why (module docstring, "Sizing window"): ``(w*, reason)``
    with ``reason`` = ``{"rule", "headroom", "base_s", "candidates": [{"window_s", "cv_extra"}],
    "window_s", "why"}``."""
    if not (math.isfinite(headroom) and headroom >= 0):
        raise InputError(f"burst headroom must be a number >= 0, got {headroom}", where="demand")
    n_sub = _subwindows(epoch_s, base_s)
    counts, _h = _pooled_counts(trace, epoch_s, base_s, horizon_s)
    cands = [k for k in range(1, n_sub + 1) if n_sub % k == 0]
    v0 = base_variance(counts)
    rows = []
    for k in cands:
        if counts.size == 0 or k == 1:
            rows.append({"window_s": k * base_s, "cv_extra": 0.0})  # one sub-window: no movement inside
            continue
        c = counts.reshape(counts.shape[0], n_sub // k, k)
        m = float(c.mean())
        dof = c.size - c.shape[0] * c.shape[1]
        v = float(((c - c.mean(axis=2, keepdims=True)) ** 2).sum() / dof)
        extra = float(movement_beyond(v, v0, dof))  # D8
        rows.append({"window_s": k * base_s, "cv_extra": math.sqrt(extra) / m if m > 0 else 0.0})
    # D9: the longest window up to which every candidate keeps the movement within the headroom
    w = base_s
    first_bad = None
    for r in rows:
        if r["cv_extra"] > headroom + 1e-12:
            first_bad = r
            break
        w = r["window_s"]
    if counts.size == 0 or counts.sum() == 0:
        why = "no arrivals in a full epoch: the epoch mean"
        w = float(epoch_s)
    elif first_bad is None:
        why = f"the pooled rate moves less than the {headroom:g} headroom within whole epochs: the epoch mean"
    else:
        why = (
            f"the pooled rate moves {first_bad['cv_extra']:.3g} (> {headroom:g} headroom) within "
            f"{first_bad['window_s']:g}-s windows"
            + (f", at most {headroom:g} within {w:g}-s windows" if first_bad["window_s"] > base_s else "")
        )
    reason = {
        "rule": "longest window up to which the pooled rate's extra-Poisson movement stays <= headroom",
        "headroom": float(headroom),
        "base_s": float(base_s),
        "candidates": rows,
        "window_s": float(w),
        "why": why,
    }
    return float(w), reason


def burst_demand(
    trace: pd.DataFrame,
    spec: BucketSpec | None,
    epoch_s: float = DEFAULT_EPOCH_S,
    base_s: float = DEFAULT_SUBWINDOW_S,
    headroom: float = DEFAULT_BURST_HEADROOM,
    horizon_s: float | None = None,
) -> pd.DataFrame:
    """:func:`epoch_demand` at the sizing window ``w*`` of :func:`sizing_window`, with a column
    ``burst_rps``: each class's share of its epoch's requests times the pooled peak over ``w*``,
    ``burst_rps[e, b] = count[e, b] / count[e] x max_j N_pooled[e, j] / w*`` (D10; the epoch mean
    when ``w* = T``; a class's mean when the epoch is empty). ``attrs["sizing_window"]`` holds the
    window and its reason."""
    w, reason = sizing_window(trace, epoch_s, base_s, headroom, horizon_s)
    dem = epoch_demand(trace, spec, epoch_s=epoch_s, subwindow_s=w, horizon_s=horizon_s)
    pooled = epoch_demand(trace, None, epoch_s=epoch_s, subwindow_s=w, horizon_s=horizon_s)
    tot = dem.groupby("epoch", observed=True)["count"].transform("sum").to_numpy(np.float64)
    pe = pooled.set_index("epoch")
    # a trailing partial epoch no longer than w*: its pooled mean (its window is not filled), over
    # its own length (at base-window resolution: a table at w* resolution counts it as w* long);
    # its length is what the trace recorded of it: a horizon set past the trace's end
    # (epochs.horizon) adds time without arrivals that is not a lower rate
    fine = epoch_demand(trace, None, epoch_s=epoch_s, subwindow_s=base_s, horizon_s=horizon_s).set_index("epoch")
    rec = recorded_seconds(trace, fine.index.to_numpy(), fine["duration_s"].to_numpy(np.float64), epoch_s, base_s)
    with np.errstate(invalid="ignore", divide="ignore"):
        recorded_mean = fine["count"].to_numpy(np.float64) / rec
    peak = np.where(rec <= w, recorded_mean, pe["peak_rps"])
    peak = pd.Series(peak, index=pe.index).reindex(dem["epoch"]).to_numpy(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(tot > 0, dem["count"].to_numpy(np.float64) / tot, 0.0)
    dem["burst_rps"] = share * peak
    dem.attrs["sizing_window"] = reason
    dem.attrs["unit"] = {**dem.attrs.get("unit", {}), "burst_rps": "req/s"}
    return dem


#: the timescale (s) of the rate movement the safe loads take into account (``rate_modulation``):
#: the order of the TTFT targets, within which a backlog has to form to make requests late
DEFAULT_MODULATION_SCALE_S = 2.0


def rate_modulation(
    trace: pd.DataFrame,
    spec: BucketSpec | None,
    window_s: float,
    scale_s: float = DEFAULT_MODULATION_SCALE_S,
    horizon_s: float | None = None,
) -> pd.Series:
    """Per class, ``c2``: the squared coefficient of variation of the *slow* part of its arrival
    rate over ``scale_s`` inside the sizing windows of ``window_s`` (``spec=None``: one class ``all``;
    D12 of ``formulations/forecast.md``; the modulated arrivals of the safe loads, AT4 of
    ``formulations/allocation.md``).

    The horizon is tiled with windows of ``window_s`` from 0 (a trailing partial window is left out,
    and so is time the trace did not record); each holds ``k = floor(window_s / scale_s)`` slots of
    ``scale_s``. With ``N`` the class's counts per slot, ``M`` their mean, centred on each window's
    own mean, ``V`` their variance and ``C`` the covariance of adjacent slots (``P = windows x (k -
    1)`` pairs): ``c2 = min(max(C + V / k - 2 V / sqrt(P), 0), max(V - M - 2 M sqrt(2 / P), 0)) /
    M^2`` (``slow_movement``, no more than the whole movement beyond Poisson, ``movement_beyond``,
    which keeps a class of a few arrivals, whose one coincidence would pass for a movement, at 0).
    A rate that moves slowly against a slot raises adjacent counts together (``C`` = the rate's
    variance x ``scale_s^2``); Poisson arrivals, and requests that arrive in clumps (several at one
    instant, the clumps independent), add variance to each slot but nothing to ``C``, so they give
    0 (the clumps are the queues' to absorb, as AT1-AT2's own Poisson clumping is). ``V / k``
    undoes the centring's bias (``-V / k`` for independent slots) and ``2 V / sqrt(P)`` is a
    two-standard-error allowance. Thinning (routing a share of the class to a vPod) leaves ``c2``
    unchanged; a window of a single slot gives 0. Index: the class names (``bucket_names``)."""
    if not (math.isfinite(window_s) and window_s > 0 and math.isfinite(scale_s) and scale_s > 0):
        raise InputError(f"modulation window ({window_s}) and scale ({scale_s}) must be > 0", where="demand")
    names = bucket_names(spec) if spec is not None else [ALL]
    out = pd.Series(0.0, index=pd.Index(names, name="bucket"), dtype=float)
    k = int(math.floor(window_s / scale_s + 1e-9))
    data_h = _data_horizon(trace)
    h = min(float(horizon_s), data_h) if horizon_s is not None else data_h
    n_win = max(int(math.floor(h / window_s + 1e-12)), 0)
    if k < 2 or n_win < 1 or len(trace) == 0:
        return out
    t = trace["arrival_s"].to_numpy(np.float64)
    b = bucket_codes(trace, spec) if spec is not None else np.zeros(len(t), np.int64)
    win = np.floor(t / window_s)
    slot = np.floor((t - win * window_s) / scale_s)
    keep = (t >= 0) & (win < n_win) & (slot < k)
    b, win, slot = b[keep].astype(np.int64), win[keep].astype(np.int64), slot[keep].astype(np.int64)
    # sums over the occupied slots and windows only (empty ones add nothing): memory in arrivals,
    # not in slots. Per window of total T and mean m = T / k, centred on m:
    #   sum (N - m)^2 = sum N^2 - T^2 / k
    #   sum_{i < k-1} (N_i - m)(N_{i+1} - m) = sum N_i N_{i+1} - m (2 T - N_0 - N_{k-1}) + (k - 1) m^2
    n_cls = len(names)
    keys, slot_n = np.unique((b * n_win + win) * k + slot, return_counts=True)
    wkeys, win_n = np.unique(b * n_win + win, return_counts=True)
    cls_of_slot = keys // (n_win * k)
    pos = keys % k
    cls_of_win = wkeys // n_win
    cnt = slot_n.astype(np.float64)
    tot = win_n.astype(np.float64)
    sq = np.bincount(cls_of_slot, weights=cnt**2, minlength=n_cls)
    between = np.bincount(cls_of_win, weights=tot**2, minlength=n_cls) / k
    # adjacent occupied slots of one window: keys one apart, the first not the window's last slot
    adj = (np.diff(keys) == 1) & (pos[:-1] < k - 1)
    prod = np.bincount(cls_of_slot[:-1][adj], weights=(cnt[:-1] * cnt[1:])[adj], minlength=n_cls)
    w_index = np.searchsorted(wkeys, keys // k)
    edge = np.bincount(w_index, weights=np.where((pos == 0) | (pos == k - 1), cnt, 0.0), minlength=len(wkeys))
    m_w = tot / k
    cross = np.bincount(cls_of_win, weights=-m_w * (2.0 * tot - edge) + (k - 1) * m_w**2, minlength=n_cls)
    total = np.bincount(b, minlength=n_cls).astype(np.float64)
    pairs = n_win * (k - 1)
    m = total / (n_win * k)
    v = (sq - between) / pairs
    c = (prod + cross) / pairs
    with np.errstate(invalid="ignore", divide="ignore"):
        slow = np.minimum(slow_movement(c, v, k, pairs), movement_beyond(v, m, pairs))
        c2 = np.where(m > 0, slow / np.maximum(m, 1e-300) ** 2, 0.0)
    out[:] = c2
    return out


def slow_movement(c: np.ndarray | float, v: np.ndarray | float, k: int, pairs: int) -> np.ndarray:
    """D12's slow movement of a rate: the covariance ``c`` of adjacent slot counts (centred on each
    window's mean, ``k`` slots a window, ``pairs`` adjacent pairs in all) with the centring's bias
    ``-v / k`` undone (``v`` the counts' variance), less a two-standard-error allowance ``2 v /
    sqrt(pairs)`` (the standard error of ``c`` for independent slots): ``max(c + v / k - 2 v /
    sqrt(pairs), 0)``."""
    v = np.asarray(v, dtype=float)
    return np.maximum(np.asarray(c, dtype=float) + v / k - 2.0 * v / math.sqrt(pairs), 0.0)


#: D13: clumps larger than this are counted at this size (the recorded traces' largest is 28)
MAX_CLUMP = 64


def clump_sizes(trace: pd.DataFrame, spec: BucketSpec | None, horizon_s: float | None = None) -> pd.Series:
    """Per class, the law of its *clump* sizes: ``(p_1, ..., p_K)``, ``p_k`` the share of the
    class's clumps that hold ``k`` requests, a clump being the class's requests recorded at one
    same instant (equal ``arrival_s``; D13 of ``formulations/forecast.md``). A trace whose arrivals
    never coincide gives ``(1.0,)``; a class without arrivals ``()``. Arrivals at or beyond
    ``horizon_s`` are left out; clumps over ``MAX_CLUMP`` count as ``MAX_CLUMP``. The replay serves
    equal arrival times together, so this is the clumping it sees (the clumped arrivals of the safe
    loads, AT5 of ``formulations/allocation.md``). Index: the class names (``bucket_names``)."""
    names = bucket_names(spec) if spec is not None else [ALL]
    out = pd.Series([()] * len(names), index=pd.Index(names, name="bucket"), dtype=object)
    if len(trace) == 0:
        return out
    t = trace["arrival_s"].to_numpy(np.float64)
    b = bucket_codes(trace, spec) if spec is not None else np.zeros(len(t), np.int64)
    keep = t >= 0
    if horizon_s is not None:
        keep &= t < float(horizon_s)
    t, b = t[keep], b[keep].astype(np.int64)
    order = np.lexsort((t, b))
    t, b = t[order], b[order]
    # runs of equal (class, instant): a new clump wherever either changes
    start = np.ones(len(t), dtype=bool)
    start[1:] = (b[1:] != b[:-1]) | (t[1:] != t[:-1])
    first = np.flatnonzero(start)
    size = np.minimum(np.diff(np.append(first, len(t))), MAX_CLUMP)
    cls = b[first]
    for i, name in enumerate(names):
        sz = size[cls == i]
        if len(sz):
            counts = np.bincount(sz, minlength=int(sz.max()) + 1)[1:]
            out[name] = tuple((counts / counts.sum()).tolist())
    return out


def mean_clump(law: tuple | list | None) -> float:
    """The mean size of the clumps of a law of :func:`clump_sizes` (1 for an empty law)."""
    if law is None or len(law) == 0:
        return 1.0
    p = np.asarray(law, dtype=float)
    return float(p @ np.arange(1, len(p) + 1) / max(p.sum(), 1e-300))


def clumped(law: tuple | list | None) -> bool:
    """Whether a clump law of :func:`clump_sizes` has clumps of more than one request."""
    return law is not None and len(law) > 1 and float(sum(law[1:])) > 0.0


def prewarm_lead_s(create_delay_s: float, prewarm: bool, epoch_s: float) -> float:
    """The pre-warm lead L (s): ``create_delay_s`` when ``prewarm`` and ``0 < create_delay_s <
    epoch_s`` (the vPods are then ready exactly when the epoch starts), else 0. One rule for the
    planners, the demand history they read and the replay."""
    if prewarm and 0.0 < create_delay_s < epoch_s:
        return float(create_delay_s)
    return 0.0


def observed_demand(
    trace: pd.DataFrame,
    spec: BucketSpec | None,
    n_epochs: int,
    epoch_s: float,
    lead_s: float,
    provision_for: str,
    subwindow_s: float = DEFAULT_SUBWINDOW_S,
    window_s: float | None = None,
) -> np.ndarray:
    """D11: each epoch's provisioned rate as seen ``lead_s`` before the epoch ends (the history a
    plan made ``lead_s`` before the next epoch starts can read), shape ``(n_epochs, buckets)``.

    Over the observed part ``[e T, (e + 1) T - lead_s)`` of epoch ``e`` (length ``o = T - lead_s``):
    ``mean``: ``count_o[e, b] / o``; ``peak``: the largest count of the sub-windows of ``subwindow_s``
    that lie wholly inside it, over ``subwindow_s``; ``burst``: the class's share of the observed
    requests times the pooled peak over the windows of ``window_s`` (``w*``) wholly inside it, over
    ``w*``, or the pooled observed mean when none fits (``w* > o``). ``lead_s = 0`` gives D3 / D6 /
    D10 of the whole epoch (with the trailing epoch's own rule aside)."""
    if not (0 <= lead_s < epoch_s):
        raise InputError(f"lead must be in [0, {epoch_s:g}) s, got {lead_s}", where="demand")
    names = bucket_names(spec) if spec is not None else [ALL]
    nb = len(names)
    obs = epoch_s - lead_s
    t = trace["arrival_s"].to_numpy(np.float64)
    codes = bucket_codes(trace, spec) if spec is not None else np.zeros(len(t), np.int64)
    e = np.floor(t / epoch_s).astype(np.int64)
    off = t - e * epoch_s
    keep = (t >= 0) & (e < n_epochs) & (off < obs)
    e, off, codes = e[keep], off[keep], codes[keep]
    count = np.bincount(e * nb + codes, minlength=n_epochs * nb).reshape(n_epochs, nb).astype(np.float64)
    if provision_for == "mean":
        return count / obs
    if provision_for == "peak":
        n_sub = max(int(math.floor(obs / subwindow_s + 1e-9)), 1)
        j = (off // subwindow_s).astype(np.int64)
        inside = j < n_sub
        flat = (e[inside] * n_sub + j[inside]) * nb + codes[inside]
        sub = np.bincount(flat, minlength=n_epochs * n_sub * nb).reshape(n_epochs, n_sub, nb)
        return sub.max(axis=1) / subwindow_s
    if provision_for != "burst":
        raise InputError(f"provision_for must be peak, mean or burst, got {provision_for!r}", where="demand")
    w = float(window_s if window_s is not None else epoch_s)
    tot = count.sum(axis=1)
    n_win = int(math.floor(obs / w + 1e-9))
    if n_win >= 1:
        j = (off // w).astype(np.int64)
        inside = j < n_win
        pooled = np.bincount(e[inside] * n_win + j[inside], minlength=n_epochs * n_win).reshape(n_epochs, n_win)
        peak = pooled.max(axis=1) / w
    else:
        peak = tot / obs
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(tot[:, None] > 0, count / tot[:, None], 0.0)
    return share * peak[:, None]


def series_demand(
    rates: pd.DataFrame,
    epoch_s: float | None = None,
    bucket: str = ALL,
) -> pd.DataFrame:
    """Demand table (same columns as :func:`epoch_demand`) from a rate series, one bucket.

    ``epoch_s`` defaults to the series' window and must be a whole number ``k`` of windows. With
    only window rates ``r_w`` known: ``mean_rps = mean_w r_w``, ``peak_rps = max_w r_w`` (the peak
    at window resolution: sub-window bursts are not in the data), ``count = round(sum_w r_w x
    window_s)``. Token sums are unknown and written as 0 (``attrs["tokens_known"] = False``); a
    ``filled`` column is True where any window of the epoch was filled (missing in the source).
    """
    window = float(rates["window_s"].iloc[0])
    epoch_s = window if epoch_s is None else float(epoch_s)
    k = _subwindows(epoch_s, window)
    n_ep = len(rates) // k
    if n_ep == 0:
        raise InputError(f"the series is shorter than one epoch ({epoch_s:g} s)", where="demand")
    r = rates["rate_rps"].to_numpy(np.float64)[: n_ep * k].reshape(n_ep, k)
    filled = rates["filled"].to_numpy(bool)[: n_ep * k].reshape(n_ep, k).any(axis=1)
    demand = pd.DataFrame(
        {
            "epoch": np.arange(n_ep, dtype=np.int64),
            "bucket": pd.Categorical([bucket] * n_ep, categories=[bucket]),
            "start_s": np.arange(n_ep, dtype=np.float64) * epoch_s,
            "duration_s": np.full(n_ep, epoch_s),
            "count": np.rint(r.sum(axis=1) * window).astype(np.int64),
            "mean_rps": r.mean(axis=1),
            "peak_rps": r.max(axis=1),
            "input_tokens": np.zeros(n_ep, dtype=np.int64),
            "output_tokens": np.zeros(n_ep, dtype=np.int64),
            "filled": filled,
        }
    )
    demand.attrs.update(
        epoch_s=epoch_s,
        subwindow_s=window,
        horizon_s=n_ep * epoch_s,
        rows=None,
        bucket_kind="series",
        source=rates.attrs.get("source"),
        series=rates.attrs.get("series"),
        tokens_known=False,
        unit=dict(UNITS),
    )
    return demand


def demand_matrix(demand: pd.DataFrame, column: str = "peak_rps") -> pd.DataFrame:
    """Wide view ``epoch x bucket`` of one column (buckets in category order)."""
    wide = demand.pivot(index="epoch", columns="bucket", values=column)
    wide.columns = [str(c) for c in wide.columns]
    return wide
