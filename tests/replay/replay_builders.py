"""Shared builders of the replay tests: tiny instances, traces with known arrivals, plan rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from neuscale_opt.instance import Instance, parse_instance

ROOT = Path(__file__).resolve().parents[2]
INSTANCES = ROOT / "instances"
DEFAULT_INSTANCE = INSTANCES / "azure-conv.toml"


def tiny_instance(
    rates: dict[str, float] | None = None,
    epochs: int = 1,
    length_s: float = 100.0,
    v6e_chips: int = 8,
    v5e_chips: int = 16,
    slo: dict[str, Any] | None = None,
    input_tokens: dict[str, int] | None = None,
) -> Instance:
    """Llama-3-8B, classes ``a`` (512 in / 128 out) and ``b`` (2048 / 256), v6e and v5e chips;
    ``input_tokens`` overrides a class's prompt length."""
    rates = rates or {"a": 1.0, "b": 1.0}
    prompt = {"a": 512, "b": 2048, **(input_tokens or {})}
    return parse_instance(
        {
            "name": "tiny",
            "model": {"name": "Llama-3-8B"},
            "fleet": [{"chip": "tpu-v6e", "chips": v6e_chips}, {"chip": "tpu-v5e", "chips": v5e_chips}],
            "workload": {
                "classes": [
                    {"name": "a", "input_tokens": prompt["a"], "output_tokens": 128},
                    {"name": "b", "input_tokens": prompt["b"], "output_tokens": 256},
                ],
                "demand": [
                    {"epoch": e, "bucket": b, "rate_rps": r} for e in range(epochs) for b, r in sorted(rates.items())
                ],
            },
            "epochs": {"length_s": length_s, "horizon": epochs},
            "search": {"max_chips_per_vpod": 8, "calibration": "none"},  # pure roofline: pinned capacities
            **({"slo": slo} if slo else {}),
        }
    )


def trace_of(rows: list[tuple[float, int, int, str]]) -> pd.DataFrame:
    """A canonical trace (plus a ``bucket`` column) from (arrival_s, input, output, class) rows."""
    df = pd.DataFrame(rows, columns=["arrival_s", "input_tokens", "output_tokens", "bucket"])
    df["input_tokens"] = df["input_tokens"].astype(np.int64)
    df["output_tokens"] = df["output_tokens"].astype(np.int64)
    df.attrs["source"] = "test-trace"
    return df


def poisson_trace(rates: dict[str, tuple[float, int, int]], horizon_s: float, seed: int = 0) -> pd.DataFrame:
    """Poisson arrivals per class ``name -> (rate_rps, input_tokens, output_tokens)``, fixed lengths."""
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


def row(epoch: int, bucket: str, n_vpods: int, **kw: Any) -> dict[str, Any]:
    """One allocation row; defaults: a v6e 1x1 vPod, tp 1, batch 2, colocated."""
    r = {
        "epoch": epoch,
        "bucket": bucket,
        "phase": "colocated",
        "chip": "tpu-v6e",
        "shape": "1x1",
        "chips_per_vpod": 1,
        "tp": 1,
        "pp": 1,
        "ep": 1,
        "batch": 2,
        "n_vpods": n_vpods,
        "rate_rps": 1.0,
    }
    r.update(kw)
    return r


def plan_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"status": "feasible", "method": "hand", "objective": "energy", "allocations": rows}
