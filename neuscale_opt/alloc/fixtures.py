"""Small hand-made :class:`~neuscale_opt.coefficients.Coefficients`, for tests, examples and
benchmarks: give only the numbers that matter, the rest is filled with neutral defaults.

>>> c = make_coefficients(
...     configs=[vpod("v5e", "A", rate=10, dyn_j=1, static_w=100, price=1.2, chips=4)],
...     demand={"A": 12.0},
...     inventory={"v5e": 16},
... )
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from neuscale_opt.coefficients import CONFIG_COLUMNS, Coefficients


def vpod(
    chip: str,
    bucket: str,
    rate: float,
    dyn_j: float = 0.0,
    static_w: float = 0.0,
    price: float = 0.0,
    chips: int = 1,
    embodied: float = 0.0,
    phase: str = "colocated",
    shape: str | None = None,
    batch: int = 1,
    tp: int | None = None,
    ttft_s: float = math.nan,
    tpot_s: float = math.nan,
    e2e_s: float = math.nan,
    kv_bytes: float = 0.0,
    name: str | None = None,
) -> dict[str, Any]:
    """One configuration row (vPod type x class). ``name`` overrides the vPod type key."""
    shape = shape if shape is not None else str(chips)
    tp = tp if tp is not None else chips
    vtype = name or f"{chip}:{shape}:tp{tp}:b{batch}:{phase}"
    return {
        "config_id": f"{vtype}|{bucket}",
        "vpod_type": vtype,
        "bucket": bucket,
        "phase": phase,
        "chip": chip,
        "shape": shape,
        "chips_per_vpod": int(chips),
        "tp": int(tp),
        "pp": 1,
        "ep": 1,
        "batch": int(batch),
        "max_rate_rps": float(rate),
        "dyn_energy_j_per_req": float(dyn_j),
        "static_power_w": float(static_w),
        "price_usd_per_hour": float(price),
        "embodied_kg_per_hour": float(embodied),
        "ttft_s": float(ttft_s),
        "tpot_s": float(tpot_s),
        "e2e_s": float(e2e_s),
        "bound": "hbm",
        "kv_bytes_per_req": float(kv_bytes),
        "energy_j_per_req": float(dyn_j) + float(static_w) / float(rate),
        "cost_usd_per_req": float(price) / 3600.0 / float(rate),
    }


def make_coefficients(
    configs: list[dict[str, Any]],
    demand: dict[str, float] | dict[tuple[int, str], float],
    inventory: dict[str, float] | None = None,
    slo: dict[str, dict[str, float]] | None = None,
    tokens: dict[str, tuple[float, float]] | None = None,
    dcn_bytes_per_s: dict[str, float] | None = None,
    dcn_energy_j_per_byte: dict[str, float] | None = None,
    epoch_s: float = 300.0,
    pue: float = 1.0,
    carbon_kg_per_kwh: float = 0.5,
    util_cap: float = 1.0,
    pods: dict[str, list[tuple[tuple[int, ...], list[tuple[int, ...]]]]] | None = None,
) -> Coefficients:
    """Coefficients from rows made by :func:`vpod`.

    ``demand`` maps a class (epoch 0) or an (epoch, class) pair to req/s; ``inventory`` maps a
    generation to healthy chips (absent = unlimited); ``slo`` maps a class to
    ``{"ttft_slo_s": ..., "tpot_slo_s": ..., "e2e_slo_s": ...}``. ``pods`` maps a catalog TPU
    generation to its pods ``[(dims, failed chip coordinates), ...]`` (ids ``chip/i``); such a
    generation's inventory defaults to its healthy chips.
    """
    cfg = pd.DataFrame(configs, columns=list(CONFIG_COLUMNS))
    dem_items = [((0, k) if isinstance(k, str) else k, float(v)) for k, v in demand.items()]
    classes = sorted({b for (_, b), _ in dem_items} | set(cfg["bucket"]))
    epochs = sorted({e for (e, _), _ in dem_items})
    given = dict(dem_items)
    dem = pd.DataFrame([{"epoch": e, "bucket": b, "rate_rps": given.get((e, b), 0.0)} for e in epochs for b in classes])
    slo = slo or {}
    tokens = tokens or {}
    buckets = pd.DataFrame(
        {
            "bucket": classes,
            "input_tokens": [tokens.get(b, (100.0, 100.0))[0] for b in classes],
            "output_tokens": [tokens.get(b, (100.0, 100.0))[1] for b in classes],
            "ttft_slo_s": [slo.get(b, {}).get("ttft_slo_s", math.nan) for b in classes],
            "tpot_slo_s": [slo.get(b, {}).get("tpot_slo_s", math.nan) for b in classes],
            "e2e_slo_s": [slo.get(b, {}).get("e2e_slo_s", math.nan) for b in classes],
        }
    )
    inventory = dict(inventory or {})
    pod_rows = [
        {"pod": f"{chip}/{i}", "chip": chip, "dims": tuple(dims), "failed": tuple(tuple(c) for c in failed)}
        for chip, lst in (pods or {}).items()
        for i, (dims, failed) in enumerate(lst)
    ]
    for chip, lst in (pods or {}).items():
        inventory.setdefault(chip, float(sum(math.prod(d) - len(set(map(tuple, f))) for d, f in lst)))
    names = sorted(set(cfg["chip"]))
    chips = pd.DataFrame(
        {
            "chip": names,
            "healthy_chips": [float(inventory.get(c, math.inf)) for c in names],
            "dcn_bytes_per_s": [float((dcn_bytes_per_s or {}).get(c, 12.5e9)) for c in names],
            "dcn_energy_j_per_byte": [float((dcn_energy_j_per_byte or {}).get(c, 0.0)) for c in names],
            "price_usd_per_chip_hour": 0.0,
            "static_power_w_per_chip": 0.0,
            "embodied_kg_per_chip_hour": 0.0,
        }
    )
    return Coefficients(
        configs=cfg,
        demand=dem,
        buckets=buckets,
        chips=chips,
        epoch_s=epoch_s,
        pue=pue,
        carbon_kg_per_kwh=carbon_kg_per_kwh,
        util_cap=util_cap,
        source="fixture",
        pods=pd.DataFrame(pod_rows, columns=["pod", "chip", "dims", "failed"]) if pods else None,
    )
