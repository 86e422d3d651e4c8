"""Scaling a per-request trace to a higher (or lower) request rate, keeping its token mix.

``scale_trace(trace, factor)`` superposes ``floor(factor)`` copies of the trace plus a seeded
Bernoulli(``factor - floor(factor)``) thinning of one more copy. The original requests stay where
they are; every further copy is shifted by a seeded uniform jitter in ``[0, jitter_s)`` so that
copies do not arrive at the same instant. The demand shape over epochs is kept and the rate of
every epoch and sub-window scales by about ``factor``. For ``factor < 1`` it is a seeded thinning.

The result is a synthetic transformation of a real trace: it is labelled in ``attrs["label"]``
and ``attrs["rate_scale"]``, which the planner and the replay report.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from neuscale_opt.errors import InputError
from neuscale_opt.schema import MAX_TRACE_ROWS

DEFAULT_JITTER_S = 1.0


def scale_trace(trace: pd.DataFrame, factor: float, seed: int = 0, jitter_s: float = DEFAULT_JITTER_S) -> pd.DataFrame:
    """``trace`` (``arrival_s``, ``input_tokens``, ``output_tokens``) at ``factor`` times its rate."""
    if not (factor > 0 and math.isfinite(factor)):
        raise InputError(f"rate_scale must be a positive number, got {factor}", where="workload.rate_scale")
    if factor == 1.0:
        return trace
    if len(trace) * factor > MAX_TRACE_ROWS:
        raise InputError(
            f"{factor:g} x {len(trace)} requests is more than the {MAX_TRACE_ROWS} requests a trace may hold",
            where="workload.rate_scale",
        )
    rng = np.random.default_rng(seed)
    n = len(trace)
    whole = int(math.floor(factor))
    frac = factor - whole
    parts = []
    if whole >= 1:
        parts.append(np.arange(n))
    idx_list = [np.arange(n)] * max(whole - 1, 0)
    shifts = [rng.uniform(0.0, jitter_s, size=n) for _ in idx_list]
    if frac > 0:
        keep = np.flatnonzero(rng.random(n) < frac)
        idx_list.append(keep)
        shifts.append(rng.uniform(0.0, jitter_s, size=len(keep)) if whole >= 1 else np.zeros(len(keep)))
    cols = {c: [] for c in trace.columns}
    arrivals = []
    if whole >= 1:
        arrivals.append(trace["arrival_s"].to_numpy())
        for c in trace.columns:
            cols[c].append(trace[c].to_numpy())
    for idx, sh in zip(idx_list, shifts, strict=True):
        arrivals.append(trace["arrival_s"].to_numpy()[idx] + sh)
        for c in trace.columns:
            cols[c].append(trace[c].to_numpy()[idx])
    data = {c: np.concatenate(v) for c, v in cols.items()}
    data["arrival_s"] = np.concatenate(arrivals)
    horizon = trace.attrs.get("horizon_s")
    if horizon is not None:
        keep = data["arrival_s"] < float(horizon)
        data = {c: v[keep] for c, v in data.items()}
    order = np.argsort(data["arrival_s"], kind="stable")  # by arrival, copies in stable order
    out = pd.DataFrame({c: v[order] for c, v in data.items()})
    out.attrs = dict(trace.attrs)
    out.attrs["rate_scale"] = factor
    out.attrs["label"] = (
        f"{trace.attrs.get('source', 'trace')} at {factor:g}x its request rate "
        f"(superposed copies jittered by up to {jitter_s:g} s, seed {seed}; a synthetic scaling of a real trace)"
    )
    return out
