"""The coefficient contract: the numbers every planner reads.

The roofline engine (``neuscale_opt.candidates.build_coefficients``), the profile-table importers
(Mélange) and hand-written test fixtures all produce a :class:`Coefficients`. The MILP, the greedy
heuristic, the baselines and the independent evaluator only ever read one. No Pyomo in here: plain,
frozen pandas tables with units in the column names.

Tables
------
``configs`` - one row per (vPod type, request class) that is memory-feasible, meets the SLO and has a
positive sustainable rate. Columns:

=====================  =======  ==============================================================
column                 unit     meaning
=====================  =======  ==============================================================
config_id              -        unique key, ``f"{vpod_type}|{bucket}"``
vpod_type              -        key of the vPod type: chip, shape, parallelism, batch and phase
bucket                 -        request class (sequence-length bucket) name
phase                  -        ``colocated`` (prefill+decode on one vPod), ``prefill`` or ``decode``
chip                   -        chip generation name (catalog key)
shape                  -        slice shape, e.g. ``4x4``, ``2x2x4``; ``8`` for a switched GPU node
chips_per_vpod         chips    chips one vPod holds
tp, pp, ep, batch      -        tensor / pipeline / expert parallelism, batch (sequences in flight)
max_rate_rps           req/s    requests/s one vPod sustains for this class at 100 % busy
dyn_energy_j_per_req   J        dynamic chip energy per request (compute + HBM + ICI), before PUE
static_power_w         W        static power of the whole vPod while it is held, before PUE
price_usd_per_hour     USD/h    price of the whole vPod per hour held
embodied_kg_per_hour   kgCO2e/h embodied carbon of the vPod's chips amortised per hour held
ttft_s, tpot_s, e2e_s  s        latencies of the class on this configuration (NaN if n/a)
bound                  -        binding roof of the dominant step: ``compute``, ``hbm`` or ``ici``
kv_bytes_per_req       B        KV cache a request hands from prefill to decode
energy_j_per_req       J        dyn + static x busy time per request, at full load, before PUE
cost_usd_per_req       USD      price x busy time per request at full load
=====================  =======  ==============================================================

Optional columns of the load-dependent energy model (``neuscale_opt.energy.ENERGY_COLUMNS``,
``formulations/allocation.md`` "Load-dependent energy"; tables without them keep
``dyn_energy_j_per_req`` as the energy per request): ``step_fixed_energy_j`` (J, the energy of a
batched step that does not scale with its batch: weights streamed), ``marginal_energy_j_per_req``
(J, the rest of a request's dynamic energy), ``steps_per_req`` (-, batched steps per request),
``step_s_b1`` and ``step_s`` (s, pipeline occupancy of a step at batch 1 and at ``batch``),
``stall_s_per_req`` (s, time a colocated prefill stalls the batch). MoE models add
(``neuscale_opt.energy.ROUTED_COLUMNS``) ``step_routed_energy_j`` (J to stream every routed expert
once; ``step_fixed_energy_j`` is then the dense weights only), ``step_routed_s`` (s of a stage's HBM
time to do so) and ``routed_miss_per_seq`` (-, probability that one sequence's tokens of a step
miss a given routed expert).

``demand`` - the rate to provision for: columns ``epoch`` (int), ``bucket``, ``rate_rps`` (req/s).
Every (epoch, bucket) pair of the horizon is present (zeros included). Optional ``mean_rps``
(req/s): the trace's mean rate of the epoch, the traffic that arrives on average (the evaluator
accounts energy and tokens on it; absent = ``rate_rps`` x the class's ``mean_rate_ratio``).
Optional ``observed_rps`` (req/s): the same rate as seen the pre-warm lead ``attrs["observed_lead_s"]``
before the epoch ends (D11 of ``formulations/forecast.md``), the history a pre-warmed plan reads;
absent = ``rate_rps`` (a table made without a trace is read as observed).

``buckets`` - the request classes: ``bucket``, ``input_tokens``, ``output_tokens`` (representative
lengths the roofline used), and the class's SLO targets ``ttft_slo_s``, ``tpot_slo_s``, ``e2e_slo_s``
(s; NaN = no target), ordered as the user gave them. A configuration meets the SLO of its class when
each of its latencies that has a target is at most that target (``neuscale_opt.coefficients.meets_slo``).
Optional ``mean_rate_ratio`` (-): the class's mean arrival rate over its provisioned rate across the
horizon (phi_b of the energy model; absent = 1). Optional ``output_nodes`` (tuple of tokens): the
class's output lengths at equal-weight quantile nodes, from the trace (the SLO-attainment model's
TPOT tail, AT3; absent or empty = every request of ``output_tokens``). Optional ``input_nodes`` (tuple
of tokens), ``prompt_hi_tokens`` (its largest node) and ``prompt_reach`` (-): the class's prompt lengths
at the same nodes, and the largest share of them one configuration prefills within the TTFT target (the
model's AT0; absent = every prompt of ``input_tokens``, reach 1). Optional ``rate_cv2`` (-): the squared
coefficient of variation of the class's arrival rate inside the sizing window beyond Poisson's (D12 of
``formulations/forecast.md``; the model's AT4; absent or 0 = Poisson at a steady rate). Optional
``clump_sizes`` (tuple of shares) and ``clump_rate_rps`` (req/s): the law of the class's clumps of
requests that arrive at one instant (share of clumps of 1, 2, ... requests; D13) and the class's
planned rate, which sets how many vPods a clump is split over (the model's AT5; absent or ``(1.0,)`` =
no clumps). Configurations may carry
``ttft_hi_s``, the prefill of the class's ``prompt_hi_tokens`` (colocated rows).

``chips`` - per chip generation: ``chip``, ``healthy_chips`` (inventory; ``inf`` for unlimited),
``dcn_bytes_per_s`` (per chip), ``dcn_energy_j_per_byte``, ``price_usd_per_chip_hour``,
``static_power_w_per_chip``, ``embodied_kg_per_chip_hour``.

``pods`` (optional) - the physical pods of generations given with geometry: ``pod`` (id
``f"{chip}/{i}"`` in fleet order), ``chip``, ``dims`` (tuple), ``failed`` (tuple of coordinate
tuples). Generations given as plain chip counts have no rows (they are counted, not placed).

Scalars: ``epoch_s`` (s), ``pue`` (-), ``carbon_kg_per_kwh`` (kgCO2e/kWh), ``util_cap`` (-, the
fraction of a vPod's sustainable rate the plan may load it to; queueing headroom).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from neuscale_opt.errors import InputError

CONFIG_COLUMNS: tuple[str, ...] = (
    "config_id",
    "vpod_type",
    "bucket",
    "phase",
    "chip",
    "shape",
    "chips_per_vpod",
    "tp",
    "pp",
    "ep",
    "batch",
    "max_rate_rps",
    "dyn_energy_j_per_req",
    "static_power_w",
    "price_usd_per_hour",
    "embodied_kg_per_hour",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "bound",
    "kv_bytes_per_req",
    "energy_j_per_req",
    "cost_usd_per_req",
)
DEMAND_COLUMNS: tuple[str, ...] = ("epoch", "bucket", "rate_rps")
BUCKET_COLUMNS: tuple[str, ...] = (
    "bucket",
    "input_tokens",
    "output_tokens",
    "ttft_slo_s",
    "tpot_slo_s",
    "e2e_slo_s",
)
CHIP_COLUMNS: tuple[str, ...] = (
    "chip",
    "healthy_chips",
    "dcn_bytes_per_s",
    "dcn_energy_j_per_byte",
    "price_usd_per_chip_hour",
    "static_power_w_per_chip",
    "embodied_kg_per_chip_hour",
)
PHASES: tuple[str, ...] = ("colocated", "prefill", "decode")

J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class Coefficients:
    """Frozen bundle of planner inputs. See the module docstring for every column and unit."""

    configs: pd.DataFrame
    demand: pd.DataFrame
    buckets: pd.DataFrame
    chips: pd.DataFrame
    epoch_s: float = 300.0
    pue: float = 1.1
    carbon_kg_per_kwh: float = 0.5
    util_cap: float | None = 0.9
    source: str = "roofline"
    meta: dict = field(default_factory=dict)
    pods: pd.DataFrame | None = None

    def __post_init__(self) -> None:
        check_coefficients(self)

    @property
    def epochs(self) -> list[int]:
        return sorted(int(e) for e in self.demand["epoch"].unique())

    @property
    def bucket_names(self) -> list[str]:
        return [str(b) for b in self.buckets["bucket"]]

    def inventory(self) -> dict[str, float]:
        """Healthy chips per generation (``math.inf`` where unlimited)."""
        return dict(
            zip(
                (str(c) for c in self.chips["chip"].tolist()),
                (float(h) for h in self.chips["healthy_chips"].tolist()),
                strict=True,
            )
        )

    def with_unlimited_inventory(self) -> Coefficients:
        """A copy with every generation's inventory set to infinity (the ``unlimited`` reference)."""
        chips = self.chips.copy()
        chips["healthy_chips"] = math.inf
        return replace(self, chips=chips, meta=dict(self.meta))

    def restrict_chips(self, chips: list[str]) -> Coefficients:
        """A copy whose configurations use only the named generations (the ``homogeneous`` baseline)."""
        return replace(
            self,
            configs=self.configs[self.configs["chip"].isin(chips)].reset_index(drop=True),
            chips=self.chips[self.chips["chip"].isin(chips)].reset_index(drop=True),
            meta=dict(self.meta),
            pods=None if self.pods is None else self.pods[self.pods["chip"].isin(chips)].reset_index(drop=True),
        )


def meets_slo(configs: pd.DataFrame, buckets: pd.DataFrame, rtol: float = 1e-9) -> pd.Series:
    """Boolean Series (aligned to ``configs``): does each configuration meet its class's SLO?

    Phase matters: a ``prefill`` vPod is held to the TTFT target only, a ``decode`` vPod to the TPOT
    target only, a ``colocated`` vPod to all three (TTFT, TPOT, end-to-end). A class absent from
    ``buckets`` has no target. Plain numpy on the columns (the planner calls it on every plan).
    """
    return pd.Series(slo_ok(configs, buckets, rtol), index=configs.index, name="slo_ok")


def serving_rows(configs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``configs`` whose vPod type serves their class within its SLO and memory: every
    row of a coefficient table (its contract), those marked ``feasible`` where the column is kept
    (the candidate search's own table). What a vPod type may take of another class's requests at run
    time: the replay's overflow router and the evaluator's guard estimate read this one rule."""
    if "feasible" not in configs.columns:
        return configs
    return configs[configs["feasible"].to_numpy(bool)]


def slo_ok(configs: pd.DataFrame | Any, buckets: pd.DataFrame, rtol: float = 1e-9) -> np.ndarray:
    """:func:`meets_slo` as a boolean array, ``configs`` a table or anything whose columns read as
    arrays by name (e.g. :class:`neuscale_opt.alloc.table.Table`)."""
    names = buckets["bucket"].tolist()
    where = {b: i for i, b in enumerate(names)}
    if len(where) != len(names):
        raise ValueError("buckets: a class is listed twice")
    missing = len(names)  # a class without a row in ``buckets`` reads the NaN row: no target
    codes, classes = pd.factorize(np.asarray(configs["bucket"], dtype=object))
    pos = np.array([where.get(b, missing) for b in classes] + [missing], dtype=np.int64)[codes]
    phase = np.asarray(configs["phase"])
    return slo_within(configs, buckets, pos, phase == "decode", phase == "prefill", phase == "colocated", rtol)


def slo_within(
    configs: pd.DataFrame | dict[str, np.ndarray],
    buckets: pd.DataFrame | dict[str, np.ndarray],
    pos: np.ndarray,
    decode: np.ndarray,
    prefill: np.ndarray,
    colocated: np.ndarray,
    rtol: float = 1e-9,
) -> np.ndarray:
    """The rule of :func:`meets_slo` on arrays (``configs`` and ``buckets`` tables or dicts of their
    columns): ``pos`` is each row's class as a row of ``buckets`` (the number of classes: no
    target), ``decode`` / ``prefill`` / ``colocated`` mark the rows of each phase."""
    cols = [np.append(np.asarray(buckets[c], dtype=float), np.nan) for c in ("ttft_slo_s", "tpot_slo_s", "e2e_slo_s")]

    def ok(col: str, target: np.ndarray, applies: np.ndarray) -> np.ndarray:
        v = np.asarray(configs[col], dtype=float)
        with np.errstate(invalid="ignore"):
            return np.isnan(target) | ~applies | (v <= target * (1 + rtol))

    return (
        ok("ttft_s", cols[0][pos], ~decode)
        & ok("tpot_s", cols[1][pos], ~prefill)
        & ok("e2e_s", cols[2][pos], colocated)
    )


def _missing(df: pd.DataFrame, cols: tuple[str, ...]) -> list[str]:
    return [c for c in cols if c not in df.columns]


def check_coefficients(c: Coefficients) -> None:
    """Raise :class:`InputError` listing every structural problem of the tables at once."""
    problems: list[str] = []
    for name, df, cols in (
        ("configs", c.configs, CONFIG_COLUMNS),
        ("demand", c.demand, DEMAND_COLUMNS),
        ("buckets", c.buckets, BUCKET_COLUMNS),
        ("chips", c.chips, CHIP_COLUMNS),
    ):
        miss = _missing(df, cols)
        if miss:
            problems.append(f"{name} lacks columns {miss}")
    if problems:
        raise InputError("; ".join(problems), where="coefficients")
    if c.configs["config_id"].duplicated().any():
        dup = c.configs.loc[c.configs["config_id"].duplicated(), "config_id"].iloc[0]
        problems.append(f"configs: duplicate config_id {dup!r}")
    bad_phase = set(c.configs["phase"]) - set(PHASES)
    if bad_phase:
        problems.append(f"configs: unknown phase {sorted(bad_phase)}")
    unknown_b = set(c.demand["bucket"]) - set(c.buckets["bucket"])
    if unknown_b:
        problems.append(f"demand: unknown bucket {sorted(unknown_b)}")
    unknown_chip = set(c.configs["chip"]) - set(c.chips["chip"])
    if unknown_chip:
        problems.append(f"configs: chip without a chips row {sorted(unknown_chip)}")
    if (c.demand["rate_rps"] < 0).any():
        problems.append("demand: negative rate_rps")
    if (c.configs["max_rate_rps"] <= 0).any():
        problems.append("configs: max_rate_rps must be > 0 (drop infeasible rows)")
    if "rate_cv2" in c.buckets.columns:
        cv2 = pd.to_numeric(c.buckets["rate_cv2"], errors="coerce").to_numpy(dtype=float)
        if not (np.isfinite(cv2) & (cv2 >= 0)).all():
            problems.append("buckets: rate_cv2 must be a finite number >= 0")
    if "clump_sizes" in c.buckets.columns:
        for name, law in zip(c.buckets["bucket"], c.buckets["clump_sizes"], strict=True):
            p = np.asarray(law if isinstance(law, tuple | list) else [np.nan], dtype=float)
            if len(p) and not (np.isfinite(p).all() and (p >= 0).all() and abs(p.sum() - 1.0) <= 1e-6):
                problems.append(f"buckets: clump_sizes of class {name!r} must be shares >= 0 summing to 1")
                break
    if "clump_rate_rps" in c.buckets.columns:
        cr = pd.to_numeric(c.buckets["clump_rate_rps"], errors="coerce").to_numpy(dtype=float)
        if not (np.isfinite(cr) & (cr >= 0)).all():
            problems.append("buckets: clump_rate_rps must be a finite number >= 0")
    if c.util_cap is not None and not (0 < c.util_cap <= 1):
        problems.append(f"util_cap must be in (0, 1], got {c.util_cap}")
    if c.epoch_s <= 0:
        problems.append(f"epoch_s must be > 0, got {c.epoch_s}")
    if problems:
        raise InputError("; ".join(problems), where="coefficients")
