"""Forecasters of per-epoch demand, and their backtest.

Every forecaster reads the demand table of :mod:`neuscale_opt.traces.demand` and returns, for
every epoch ``e`` of the table and for ``steps`` epochs after it, a rate ``f[e, b]`` (req/s) to
provision for bucket ``b``, computed **only from epochs strictly before** ``e`` (the ``oracle`` is
the one exception, by design). The series forecast is ``x[e, b]`` = ``peak_rps`` by default:
the planner provisions vPods for the peak rate of an epoch (NeuScale: ``N_pod = ceil(R_peak /
T_pod)``), so the peak, not the mean, is what a forecast must cover. ``target="mean_rps"`` is
available for throughput studies.

Methods (``W = ceil(window_s / T)`` epochs, ``P = round(period_s / T)`` epochs, ``T`` the epoch):

=====  ==================  ===================================================================
ID     method              ``f[e]`` for ``e`` inside the table
=====  ==================  ===================================================================
FC1    ``last-peak``       ``max(x[e-W .. e-1])`` (NeuScale: peak of the last 30 min)
FC2    ``ewma``            ``s[e-1]`` with ``s[0] = x[0]``, ``s[k] = a x[k] + (1-a) s[k-1]``
FC3    ``seasonal-naive``  ``x[e-P]`` (same epoch one period earlier; daily by default)
FC4    ``quantile``        ``Q_q(x[e-W .. e-1])`` (numpy linear interpolation)
FC5    ``oracle``          ``x[e]``, the actual: an upper bound for evaluating plans
FC6    ``quantile-growth`` ``Q_q(x[e-W .. e-1]) g[e]``, ``g[e]`` the largest rise ``X[k]/X[k-1]``
                           of the total ``X = sum_b x`` over ``k = e-W+1 .. e-1``, in ``[1, g_max]``,
                           while ``X[e-1] >= X[e-2]`` (else 1)
=====  ==================  ===================================================================

Windows shorter than ``W`` at the start use the epochs available (``min_periods = 1``). Epochs
without enough history (``e = 0`` for FC1, FC2, FC4; ``e < P`` for FC3) get ``rate_rps = NaN``
and ``available = False``. Future epochs ``e = n .. n+steps-1`` use all ``n`` observed epochs: FC1,
FC2, FC4 and FC6 repeat their value for ``e = n``; FC3 reads ``x[e-P]`` while ``e - P < n``; the oracle
has no future.

Defaults and why: ``window_s = 1800`` (NeuScale's 30-minute monitoring window); ``a = 2/7``
(``a = 2 / (N + 1)`` gives an EWMA the centre of mass of an ``N``-epoch moving average; ``N = 6``
is the same 30 minutes at 300-s epochs); ``period_s = 86400`` (daily cycle); ``q = 0.9``;
``max_growth = 2`` (NeuScale's limit of 2x growth per epoch).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from neuscale_opt.errors import InputError
from neuscale_opt.schema import MAX_EPOCHS
from neuscale_opt.traces.demand import demand_matrix

Target = Literal["peak_rps", "mean_rps"]
FORECAST_COLUMNS: tuple[str, ...] = (
    "epoch",
    "bucket",
    "rate_rps",
    "actual_rps",
    "available",
    "future",
    "method",
)

Kernel = Callable[[pd.DataFrame, int, float, Mapping[str, float]], pd.DataFrame]


@dataclass(frozen=True)
class Method:
    """A registered forecaster: its document ID, kernel and default parameters."""

    name: str
    id: str
    kernel: Kernel
    defaults: Mapping[str, float] = field(default_factory=dict)
    reads_future: bool = False
    summary: str = ""


def _window_epochs(window_s: float, epoch_s: float) -> int:
    if not window_s > 0:
        raise InputError(f"window_s must be > 0, got {window_s}", where="forecast")
    return max(1, math.ceil(window_s / epoch_s - 1e-9))


def _extend(x: pd.DataFrame, steps: int) -> pd.DataFrame:
    n = len(x)
    return x.reindex(pd.RangeIndex(n + steps, name="epoch"))


def _hold_last(f: pd.DataFrame, n: int) -> pd.DataFrame:
    """Future rows ``e > n`` repeat the forecast for ``e = n`` (made from all observed epochs)."""
    f = f.copy()
    if len(f) > n + 1:
        f.iloc[n + 1 :] = f.iloc[n].to_numpy()
    return f


def _last_peak(x: pd.DataFrame, steps: int, epoch_s: float, p: Mapping[str, float]) -> pd.DataFrame:
    """FC1: ``f[e] = max(x[e-W .. e-1])``."""
    w = _window_epochs(p["window_s"], epoch_s)
    f = _extend(x, steps).rolling(w, min_periods=1).max().shift(1)
    return _hold_last(f, len(x))


def _ewma(x: pd.DataFrame, steps: int, epoch_s: float, p: Mapping[str, float]) -> pd.DataFrame:
    """FC2: ``f[e] = s[e-1]``, ``s[k] = a x[k] + (1 - a) s[k-1]``, ``s[0] = x[0]``."""
    a = p["alpha"]
    if not 0 < a <= 1:
        raise InputError(f"alpha must be in (0, 1], got {a}", where="forecast")
    f = _extend(x.ewm(alpha=a, adjust=False).mean(), steps).shift(1)
    return _hold_last(f, len(x))


def _seasonal_naive(x: pd.DataFrame, steps: int, epoch_s: float, p: Mapping[str, float]) -> pd.DataFrame:
    """FC3: ``f[e] = x[e - P]``."""
    if not p["period_s"] > 0:
        raise InputError(f"period_s must be > 0, got {p['period_s']}", where="forecast")
    lag = max(1, round(p["period_s"] / epoch_s))
    return _extend(x, steps).shift(lag)


def _quantile(x: pd.DataFrame, steps: int, epoch_s: float, p: Mapping[str, float]) -> pd.DataFrame:
    """FC4: ``f[e] = Q_q(x[e-W .. e-1])``."""
    q = p["q"]
    if not 0 <= q <= 1:
        raise InputError(f"q must be in [0, 1], got {q}", where="forecast")
    w = _window_epochs(p["window_s"], epoch_s)
    f = _extend(x, steps).rolling(w, min_periods=1).quantile(q, interpolation="linear").shift(1)
    return _hold_last(f, len(x))


def _quantile_growth(x: pd.DataFrame, steps: int, epoch_s: float, p: Mapping[str, float]) -> pd.DataFrame:
    """FC6: ``f[e] = Q_q(x[e-W .. e-1]) * g[e]``, ``g[e] = min(max(1, max_k X[k] / X[k-1]), g_max)``
    over ``k = e-W+1 .. e-1`` while the rate rises (``X[e-1] >= X[e-2]``), else 1; ``X`` the rate
    summed over buckets."""
    g_max = p["max_growth"]
    if not g_max >= 1:
        raise InputError(f"max_growth must be >= 1, got {g_max}", where="forecast")
    f = _quantile(x, steps, epoch_s, p)
    w = _window_epochs(p["window_s"], epoch_s)
    if w < 2:
        return f
    tot = x.sum(axis=1)
    prev = tot.shift(1)
    ratio = (tot / prev.where(prev > 0)).rename("g")
    g = _extend(ratio.to_frame(), steps).rolling(w - 1, min_periods=1).max().shift(1)
    g = _hold_last(g, len(x))["g"]
    # only while the rate rises: X[e-1] >= X[e-2] (a falling rate is carried by the quantile)
    up = (tot >= prev).astype(float).where(prev.notna()).rename("g").to_frame()
    up = _hold_last(_extend(up, steps).shift(1), len(x))["g"]
    g = g.where(up.to_numpy() == 1.0)
    g = g.clip(lower=1.0, upper=g_max).fillna(1.0)
    return f.mul(g.to_numpy(), axis=0)


def _oracle(x: pd.DataFrame, steps: int, epoch_s: float, p: Mapping[str, float]) -> pd.DataFrame:
    """FC5: ``f[e] = x[e]`` (reads the future: a bound, never a forecast)."""
    return _extend(x, steps)


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("last-peak", "FC1", _last_peak, {"window_s": 1800.0}, summary="peak of the last window (NeuScale)"),
        Method("ewma", "FC2", _ewma, {"alpha": 2.0 / 7.0}, summary="exponentially weighted moving average"),
        Method("seasonal-naive", "FC3", _seasonal_naive, {"period_s": 86400.0}, summary="one period earlier"),
        Method("quantile", "FC4", _quantile, {"q": 0.9, "window_s": 1800.0}, summary="quantile of the window"),
        Method(
            "quantile-growth",
            "FC6",
            _quantile_growth,
            {"q": 0.9, "window_s": 1800.0, "max_growth": 2.0},
            summary="quantile of the window times its largest rise",
        ),
        Method("oracle", "FC5", _oracle, {}, reads_future=True, summary="the actual future (upper bound)"),
    )
}


def _epoch_s(demand: pd.DataFrame, epoch_s: float | None) -> float:
    if epoch_s is not None:
        return float(epoch_s)
    if "epoch_s" in demand.attrs:
        return float(demand.attrs["epoch_s"])
    if "duration_s" in demand.columns and len(demand):
        return float(demand["duration_s"].max())
    raise InputError("cannot tell the epoch length; pass epoch_s", where="forecast")


def resolve_params(method: str, params: Mapping[str, Any]) -> tuple[Method, dict[str, float]]:
    """The method and its full parameter set (defaults overridden by ``params``), validated."""
    if method not in METHODS:
        raise InputError(f"unknown method {method!r} (known: {', '.join(METHODS)})", where="forecast")
    m = METHODS[method]
    unknown = set(params) - set(m.defaults)
    if unknown:
        raise InputError(
            f"method {method!r} takes {sorted(m.defaults) or 'no parameters'}, not {sorted(unknown)}",
            where="forecast",
        )
    return m, {**m.defaults, **{k: float(v) for k, v in params.items()}}


def forecast(
    demand: pd.DataFrame,
    method: str,
    *,
    steps: int = 1,
    target: Target = "peak_rps",
    epoch_s: float | None = None,
    **params: float,
) -> pd.DataFrame:
    """Forecast table: one row per (epoch, bucket) of ``demand`` plus ``steps`` future epochs.

    Columns: ``epoch``, ``bucket`` (same categories as ``demand``), ``rate_rps`` (the forecast,
    req/s; NaN where the method has no history yet), ``actual_rps`` (``demand[target]``; NaN for
    future epochs), ``available``, ``future`` and ``method``. ``attrs`` records the method, its
    parameters, ``target`` and ``epoch_s``.
    """
    m, p = resolve_params(method, params)
    if isinstance(steps, bool) or steps < 0 or steps > MAX_EPOCHS:
        raise InputError(f"steps must be an integer in 0 .. {MAX_EPOCHS}, got {steps}", where="forecast")
    if target not in ("peak_rps", "mean_rps"):
        raise InputError(f"target must be peak_rps or mean_rps, got {target!r}", where="forecast")
    ep = _epoch_s(demand, epoch_s)
    x = demand_matrix(demand, target).astype(np.float64)
    n = len(x)
    if not np.array_equal(x.index.to_numpy(), np.arange(n)):
        raise InputError("demand epochs must be 0 .. n-1 with none missing", where="forecast")
    f = m.kernel(x.rename_axis("epoch"), steps, ep, p)
    actual = _extend(x, steps)
    buckets = list(x.columns)
    cats = demand["bucket"].cat.categories if isinstance(demand["bucket"].dtype, pd.CategoricalDtype) else buckets
    fv = f.to_numpy(np.float64)
    out = pd.DataFrame(
        {
            "epoch": np.repeat(np.arange(n + steps, dtype=np.int64), len(buckets)),
            "bucket": pd.Categorical(np.tile(buckets, n + steps), categories=cats),
            "rate_rps": fv.reshape(-1),
            "actual_rps": actual.to_numpy(np.float64).reshape(-1),
            "available": ~np.isnan(fv).reshape(-1),
            "future": np.repeat(np.arange(n + steps) >= n, len(buckets)),
            "method": method,
        }
    )
    out.attrs.update(method=method, method_id=m.id, params=p, target=target, epoch_s=ep, unit={"rate_rps": "req/s"})
    for key in ("source", "series", "synthetic", "label"):
        if key in demand.attrs:
            out.attrs[key] = demand.attrs[key]
    return out


def planner_demand(fc: pd.DataFrame) -> pd.DataFrame:
    """The planner's ``demand`` table (``epoch``, ``bucket``, ``rate_rps``) from a forecast.

    Epochs without a forecast (warm-up) are dropped, so the planner never sees NaN.
    """
    keep = fc["available"].to_numpy()
    return fc.loc[keep, ["epoch", "bucket", "rate_rps"]].reset_index(drop=True)


POOLED = "pooled"
BACKTEST_COLUMNS: tuple[str, ...] = (
    "bucket",
    "n_epochs",
    "mae_rps",
    "mape_pct",
    "under_rate",
    "shortfall_rps",
    "over_pct",
    "mean_actual_rps",
    "mean_forecast_rps",
)


def _metrics(f: np.ndarray, a: np.ndarray) -> dict[str, float]:
    n = f.size
    if n == 0:
        return dict.fromkeys(BACKTEST_COLUMNS[1:], math.nan) | {"n_epochs": 0}
    err = f - a
    pos = a > 0
    return {
        "n_epochs": int(n),
        "mae_rps": float(np.mean(np.abs(err))),
        "mape_pct": float(100.0 * np.mean(np.abs(err[pos]) / a[pos])) if pos.any() else math.nan,
        "under_rate": float(np.mean(f < a)),
        "shortfall_rps": float(np.mean(np.maximum(a - f, 0.0))),
        "over_pct": float(100.0 * (f.sum() / a.sum() - 1.0)) if a.sum() > 0 else math.nan,
        "mean_actual_rps": float(a.mean()),
        "mean_forecast_rps": float(f.mean()),
    }


def scored_epochs(demand: pd.DataFrame, epoch_s: float | None = None) -> np.ndarray:
    """Epochs a backtest scores: full length (``duration_s = T``) and not filled from a gap."""
    ep = _epoch_s(demand, epoch_s)
    per_epoch = demand.groupby("epoch", sort=True)
    ok = per_epoch["duration_s"].min() >= ep * (1 - 1e-9) if "duration_s" in demand else None
    keep = ok if ok is not None else pd.Series(True, index=per_epoch.size().index)
    if "filled" in demand.columns:
        keep &= ~per_epoch["filled"].any()
    return keep.index.to_numpy()[keep.to_numpy()]


def backtest(
    demand: pd.DataFrame,
    method: str,
    *,
    target: Target = "peak_rps",
    score_from: int | None = None,
    epoch_s: float | None = None,
    **params: float,
) -> pd.DataFrame:
    """Score one-step-ahead forecasts against the actual ``target`` (peak_rps by default).

    Scored epochs ``S``: full epochs (not the trailing partial one), not filled from a gap in a rate
    series, with a forecast available, and ``e >= score_from`` (use it to score every method on the
    same epochs). Per bucket ``b``, with ``f = rate_rps`` and ``a = actual_rps`` over ``S``:

    * ``mae_rps = mean |f - a|``;
    * ``mape_pct = 100 mean_{a > 0} |f - a| / a`` (epochs with ``a = 0`` are left out of MAPE only);
    * ``under_rate = mean [f < a]``: the share of epochs under-provisioned, the ones that turn into
      SLO violations;
    * ``shortfall_rps = mean max(a - f, 0)``; ``over_pct = 100 (sum f / sum a - 1)``, the capacity
      bought beyond the actual peaks.

    The last row, ``bucket = "pooled"``, pools every scored (epoch, bucket) pair of the buckets that
    saw demand in a scored epoch (buckets that never do are trivially exact and would dilute it).
    """
    fc = forecast(demand, method, steps=0, target=target, epoch_s=epoch_s, **params)
    ok_epochs = scored_epochs(demand, epoch_s)
    mask = fc["available"].to_numpy() & np.isin(fc["epoch"].to_numpy(), ok_epochs)
    if score_from is not None:
        mask &= fc["epoch"].to_numpy() >= score_from
    sub = fc.loc[mask]
    rows = []
    used = []
    for b, g in sub.groupby("bucket", observed=False, sort=True):
        f, a = g["rate_rps"].to_numpy(), g["actual_rps"].to_numpy()
        rows.append({"bucket": str(b), **_metrics(f, a)})
        if (a > 0).any():
            used.append(str(b))
    pooled = sub[sub["bucket"].astype(str).isin(used)]
    rows.append({"bucket": POOLED, **_metrics(pooled["rate_rps"].to_numpy(), pooled["actual_rps"].to_numpy())})
    table = pd.DataFrame(rows, columns=list(BACKTEST_COLUMNS))
    table["n_epochs"] = table["n_epochs"].astype(np.int64)
    table.attrs.update(fc.attrs)
    table.attrs["scored_epochs"] = sorted(int(e) for e in np.unique(sub["epoch"]))
    return table
