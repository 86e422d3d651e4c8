"""Seeded multi-day demand: a synthetic composition of two real sources.

The shipped per-request traces (Azure 2023, Mooncake) cover about one hour, so they hold no daily
cycle; the only multi-day shape is the ServeGen rate series (14 days, 600-s windows, no tokens).
:func:`compose_trace` joins them:

1. **Shape** from the rate series ``r_w`` (missing windows already filled by
   :func:`~neuscale_opt.traces.loaders.load_rate_series`), scaled by ``c = mean_rps / mean_w r_w``
   so the composition keeps ServeGen's *shape* (its absolute level is undocumented) at the level
   ``mean_rps`` (default: the per-request trace's own mean rate, rows / horizon).
2. **Arrivals**: each window is cut into sub-windows of ``w`` s (default 10). Sub-window ``j`` of
   window ``w`` gets ``N_j ~ Poisson(c r_w w)`` requests at times uniform in the sub-window, i.e. a
   Poisson process with a piecewise-constant rate. Burstiness inside a window is therefore Poisson
   (CV = 1), not ServeGen's per-client CV, which is not in the shipped file.
3. **Tokens**: each request draws one row of the per-request trace uniformly with replacement and
   takes its (input, output) pair, so the joint length distribution is the trace's. The mix does
   not change with time of day (the source has no such information).

Everything is drawn from ``numpy.random.Generator(PCG64(seed))`` in a fixed order, so a seed gives
the same rows. Outputs carry ``attrs["synthetic"] = True``, ``attrs["label"]`` (naming both
sources) and a categorical ``provenance`` column with that label, so the composition cannot be
mistaken for a measured trace wherever it is written.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from neuscale_opt.errors import InputError
from neuscale_opt.traces.demand import DEFAULT_EPOCH_S, DEFAULT_SUBWINDOW_S, epoch_demand
from neuscale_opt.traces.spec import BucketSpec

SYNTHETIC_PREFIX = "synthetic composition of two real sources"


def _name(attrs: dict, fallback: str) -> str:
    src = attrs.get("source") or fallback
    return str(src).replace("\\", "/").rsplit("/", 1)[-1]


def composition_label(rates: pd.DataFrame, tokens: pd.DataFrame) -> str:
    """The label every output of this module carries."""
    series = rates.attrs.get("series")
    shape = _name(rates.attrs, "rate series") + (f" [{series}]" if series else "")
    return f"{SYNTHETIC_PREFIX}: arrival-rate shape of {shape} x token mix of {_name(tokens.attrs, 'trace')}"


def compose_trace(
    rates: pd.DataFrame,
    tokens: pd.DataFrame,
    *,
    seed: int = 0,
    mean_rps: float | None = None,
    days: float | None = None,
    subwindow_s: float = DEFAULT_SUBWINDOW_S,
) -> pd.DataFrame:
    """A per-request table (canonical columns + ``provenance``) shaped by ``rates``, mixed by ``tokens``.

    ``rates``: output of :func:`~neuscale_opt.traces.loaders.load_rate_series`; ``tokens``: a
    canonical per-request trace; ``days`` keeps the first ``days x 86400`` s of the series.
    """
    if len(tokens) == 0:
        raise InputError("the token-mix trace has no rows", where=str(tokens.attrs.get("source", "tokens")))
    window = float(rates["window_s"].iloc[0])
    k = window / subwindow_s
    if abs(k - round(k)) > 1e-9 or k < 1:
        raise InputError(f"the window ({window:g} s) must be a whole number of sub-windows", where="synth")
    k = round(k)
    r = rates["rate_rps"].to_numpy(np.float64)
    if days is not None:
        n_w = int(round(days * 86400.0 / window))
        if n_w < 1 or n_w > len(r):
            raise InputError(f"days={days} is outside the series (1 window .. {len(r)} windows)", where="synth")
        r = r[:n_w]
    if mean_rps is None:
        horizon = float(tokens.attrs.get("horizon_s") or tokens["arrival_s"].max())
        mean_rps = len(tokens) / horizon if horizon > 0 else float(len(tokens))
    if not mean_rps > 0:
        raise InputError(f"mean_rps must be > 0, got {mean_rps}", where="synth")
    scale = mean_rps / float(r.mean())
    lam = np.repeat(r * scale * subwindow_s, k)  # expected requests per sub-window
    rng = np.random.Generator(np.random.PCG64(seed))
    n_j = rng.poisson(lam)
    j = np.repeat(np.arange(lam.size, dtype=np.int64), n_j)
    arrival = np.sort((j + rng.random(j.size)) * subwindow_s)
    pick = rng.integers(0, len(tokens), size=j.size)
    label = composition_label(rates, tokens)
    out = pd.DataFrame(
        {
            "arrival_s": arrival,
            "input_tokens": tokens["input_tokens"].to_numpy(np.int64)[pick],
            "output_tokens": tokens["output_tokens"].to_numpy(np.int64)[pick],
            "provenance": pd.Categorical.from_codes(np.zeros(j.size, np.int8), categories=[label]),
        }
    )
    out.attrs.update(
        source=label,
        format="synthetic",
        synthetic=True,
        label=label,
        seed=int(seed),
        scale=scale,
        mean_rps=float(mean_rps),
        horizon_s=float(r.size * window),
        rows_in_file=int(j.size),
        repaired=[],
    )
    return out


def compose_demand(
    rates: pd.DataFrame,
    tokens: pd.DataFrame,
    spec: BucketSpec | None,
    *,
    seed: int = 0,
    mean_rps: float | None = None,
    days: float | None = None,
    epoch_s: float = DEFAULT_EPOCH_S,
    subwindow_s: float = DEFAULT_SUBWINDOW_S,
) -> pd.DataFrame:
    """:func:`~neuscale_opt.traces.demand.epoch_demand` of :func:`compose_trace`, labelled."""
    trace = compose_trace(rates, tokens, seed=seed, mean_rps=mean_rps, days=days, subwindow_s=subwindow_s)
    demand = epoch_demand(trace, spec, epoch_s=epoch_s, subwindow_s=subwindow_s, horizon_s=trace.attrs["horizon_s"])
    label = trace.attrs["label"]
    demand["provenance"] = pd.Categorical.from_codes(np.zeros(len(demand), np.int8), categories=[label])
    demand.attrs.update(synthetic=True, label=label, seed=int(seed), scale=trace.attrs["scale"], source=label)
    return demand
