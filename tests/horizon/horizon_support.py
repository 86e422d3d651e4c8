"""Shared builders of the horizon tests: hand-sized coefficients whose optimum is solved by hand."""

from __future__ import annotations

from pathlib import Path

from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.coefficients import Coefficients

ROOT = Path(__file__).resolve().parents[2]
OPTS = PlanOptions(objective="energy", variant="dedicated", time_limit_s=30.0)  # hand-solved per-class groups


def one_class(rates: list[float], inventory: dict[str, float] | None = None, second: bool = False) -> Coefficients:
    """Class ``A`` over ``len(rates)`` 300-s epochs; chip ``x``: 1 chip, 10 req/s, 100 W per vPod;
    with ``second`` also chip ``y``: 1 chip, 10 req/s, 200 W. util_cap 1, PUE 1, no dynamic energy:
    a vPod held for an epoch costs 30 kJ on x, 60 kJ on y; the default unserved penalty is
    10 x the dearest cost per request at full load (y: 60 kJ / 3000 req = 20 J) = 200 J/req
    (100 J/req with x alone)."""
    rows = [vpod("x", "A", rate=10, static_w=100, chips=1)]
    if second:
        rows.append(vpod("y", "A", rate=10, static_w=200, chips=1))
    return make_coefficients(
        rows, {(t, "A"): r for t, r in enumerate(rates)}, inventory=inventory, epoch_s=300.0, util_cap=1.0
    )


def two_class(rates_a: list[float], rates_b: list[float]) -> Coefficients:
    """Classes ``A`` and ``B`` on chips ``x`` (1 chip/vPod) and ``y`` (2 chips/vPod), limited inventory:
    a small instance where the window matters (growth limits before a peak)."""
    rows = [
        vpod("x", "A", rate=10, static_w=100, dyn_j=1.0, chips=1),
        vpod("x", "B", rate=4, static_w=100, dyn_j=3.0, chips=1),
        vpod("y", "A", rate=25, static_w=300, dyn_j=0.5, chips=2),
        vpod("y", "B", rate=9, static_w=300, dyn_j=2.0, chips=2),
    ]
    dem = {(t, "A"): r for t, r in enumerate(rates_a)} | {(t, "B"): r for t, r in enumerate(rates_b)}
    return make_coefficients(rows, dem, inventory={"x": 6, "y": 8}, epoch_s=300.0, util_cap=1.0)


def tiny_instance(rates: dict[str, float], epochs: int, length_s: float, horizon: dict | None = None):
    """Llama-3-8B, classes ``a`` (512 in / 128 out) and ``b`` (2048 / 256), 128 v6e and 64 v5e chips."""
    from neuscale_opt.instance import parse_instance

    return parse_instance(
        {
            "name": "tiny-horizon",
            "model": {"name": "Llama-3-8B"},
            "fleet": [{"chip": "tpu-v6e", "chips": 128}, {"chip": "tpu-v5e", "chips": 64}],
            "workload": {
                "classes": [
                    {"name": "a", "input_tokens": 512, "output_tokens": 128},
                    {"name": "b", "input_tokens": 2048, "output_tokens": 256},
                ],
                "demand": [
                    {"epoch": e, "bucket": b, "rate_rps": r} for e in range(epochs) for b, r in sorted(rates.items())
                ],
            },
            "epochs": {"length_s": length_s, "horizon": epochs},
            "search": {"max_chips_per_vpod": 8},
            **({"horizon": horizon} if horizon is not None else {}),
        }
    )


def poisson_trace(rates: dict[str, tuple[float, int, int]], horizon_s: float, seed: int = 0):
    """Poisson arrivals per class ``name -> (rate_rps, input_tokens, output_tokens)``, fixed lengths."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    parts = []
    for name, (rate, s_in, s_out) in sorted(rates.items()):
        n = int(rng.poisson(rate * horizon_s))
        t = np.sort(rng.random(n) * horizon_s)
        parts.append(pd.DataFrame({"arrival_s": t, "input_tokens": s_in, "output_tokens": s_out, "bucket": name}))
    df = pd.concat(parts).sort_values("arrival_s", kind="mergesort").reset_index(drop=True)
    df["input_tokens"] = df["input_tokens"].astype(np.int64)
    df["output_tokens"] = df["output_tokens"].astype(np.int64)
    df.attrs["source"] = "poisson-test-trace"
    return df
