"""The load-dependent energy model: one module for the planner, the evaluator and the replay.

Spec: ``formulations/allocation.md``, section "Load-dependent energy" (IDs E1-E7 below are used
verbatim there). A vPod's energy over a time ``T`` it is held is

* **E1 static**: ``P_static x T`` (``static_power_w`` x seconds held), whatever it serves;
* **E2 busy (weight streaming)**: every step of the batched phase (a decode round; a batched
  prefill step) streams the weights once whatever its batch (an MoE step: its dense weights and the
  routed experts its tokens touch), so it costs ``e_w`` (J per step, E4) on top of its per-sequence
  share. Steps per second are
  ``lambda x steps_per_req / n_busy`` (``n_busy`` sequences advance per step on average), i.e. busy
  power ``e_w / tau`` times the busy fraction ``lambda x steps_per_req x tau / n_busy``;
* **E3 marginal**: the per-request energy that scales with tokens and requests, without the
  weights share of the batched steps: FLOPs, KV reads/writes, activations, ICI of every token, and
  the colocated batch-1 prefill whole (it is never batched).

``e_w`` (E4) is the weights a step streams: for a dense model the two-point intercept of the step
energy in the batch, exact (every roofline term but the weights is linear in the batch at fixed
context); for an MoE model that intercept of the dense remainder plus the routed experts the step
touches, ``R (1 - q^n)`` at ``n`` sequences (roofline R3: each sequence misses a given expert with
probability ``q``), so weight streaming per sequence falls more slowly with the batch than ``1/n``;
the step time carries the same touched-expert term (E5). The decode batch a vPod runs (E5, E6)
follows from Little's law at its arrival rate, so the energy per request (E7) is linear in the served rate once the
per-vPod arrival rate is fixed: the planner fixes it at the expected load of a vPod filled to its
capacity (``mean_rate_ratio x c_k``), which keeps its objective linear.

Everything here is plain numpy on arrays or pandas columns; no Pyomo, no solver.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from neuscale_opt.alloc.table import floats, texts

#: Optional configuration columns of the model (``neuscale_opt.coefficients`` documents them).
#: Tables without them (hand fixtures, Mélange profiles) keep ``dyn_energy_j_per_req`` as is.
ENERGY_COLUMNS: tuple[str, ...] = (
    "step_fixed_energy_j",
    "marginal_energy_j_per_req",
    "steps_per_req",
    "step_s_b1",
    "step_s",
    "stall_s_per_req",
)

#: Optional columns of MoE configurations (the touched-expert terms of E4 and E5):
#: ``step_routed_energy_j`` (J to stream every routed expert once), ``step_routed_s`` (s of a
#: stage's HBM time to do so) and ``routed_miss_per_seq`` (probability that one sequence's tokens of
#: a step miss a given routed expert). Absent = no routed term (dense).
ROUTED_COLUMNS: tuple[str, ...] = ("step_routed_energy_j", "step_routed_s", "routed_miss_per_seq")


def static_energy_j(static_power_w, held_s):
    """E1: static energy (J, before PUE) of vPods of ``static_power_w`` held ``held_s`` seconds."""
    return np.asarray(static_power_w, dtype=float) * np.asarray(held_s, dtype=float)


def fixed_step_energy_j(energy_small_j, energy_large_j, batch_small, batch_large, routed_j=0.0, miss_per_seq=1.0):
    """E4: the energy of a step that does not scale with its batch (J) less its routed experts: the
    intercept of the line through (``batch_small``, ``energy_small_j``) and (``batch_large``,
    ``energy_large_j``) once the routed experts the step touches, ``routed_j (1 - miss_per_seq^b)``,
    are taken off each point, clipped to [0, that remainder at ``batch_small``]. With equal batches
    it is the whole remainder. Dense (``routed_j = 0``): the intercept of the step energies."""
    b1 = np.asarray(batch_small, dtype=float)
    b2 = np.asarray(batch_large, dtype=float)
    e1 = np.asarray(energy_small_j, dtype=float) - routed_step_energy_j(routed_j, miss_per_seq, b1)
    e2 = np.asarray(energy_large_j, dtype=float) - routed_step_energy_j(routed_j, miss_per_seq, b2)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(b2 > b1, (e2 - e1) / np.where(b2 > b1, b2 - b1, 1.0), 0.0)
    return np.clip(e1 - slope * b1, 0.0, np.maximum(e1, 0.0))


def routed_step_energy_j(routed_j, miss_per_seq, batch):
    """E4's routed term: energy of the routed experts a step of ``batch`` sequences touches,
    ``routed_j (1 - miss_per_seq^batch)`` (roofline R3); 0 for dense rows (``routed_j = 0``)."""
    r = np.asarray(routed_j, dtype=float)
    q = np.asarray(miss_per_seq, dtype=float)
    return r * -np.expm1(np.asarray(batch, dtype=float) * np.log(np.clip(q, 1e-300, 1.0)))


def weight_step_energy_j(fixed_j, routed_j, miss_per_seq, batch):
    """E4: weights one step of ``batch`` sequences streams (J): the fixed part ``fixed_j``
    (:func:`fixed_step_energy_j`) plus the routed experts it touches (:func:`routed_step_energy_j`)."""
    return np.asarray(fixed_j, dtype=float) + routed_step_energy_j(routed_j, miss_per_seq, batch)


def _routed(configs: pd.DataFrame) -> tuple[np.ndarray | float, np.ndarray | float, np.ndarray | float]:
    """(``step_routed_energy_j``, ``step_routed_s``, ``routed_miss_per_seq``) of the rows; (0, 0, 1)
    for tables without them."""
    defaults = (0.0, 0.0, 1.0)
    if not all(c in configs for c in ROUTED_COLUMNS):
        return defaults
    r, t, q = (np.nan_to_num(floats(configs, c), nan=v) for c, v in zip(ROUTED_COLUMNS, defaults, strict=True))
    return r, t, q


def mean_decode_batch(
    rate_rps, steps_per_req, stall_s_per_req, step_s_b1, step_s, batch, routed_s=0.0, miss_per_seq=1.0
):
    """E5: mean number of sequences a step of a vPod carries at arrival rate ``rate_rps`` (Little's law).

    A request spends ``steps_per_req`` steps in the batch; prefill stalls (``stall_s_per_req`` per
    request) take ``rate x stall`` of the time, so a step lasts ``tau(n) / (1 - rate x stall)`` of
    wall time. ``tau`` is affine in the batch through its values at 1 and at ``batch``:
    ``tau(n) = tau_1 + (n - 1) s``, ``s = (tau_B - tau_1) / (B - 1)``. Little's law
    ``n = a tau(n)`` with ``a = rate x steps / (1 - rate x stall)`` gives
    ``n = a (tau_1 - s) / (1 - a s)``, capped at ``batch`` (saturated when ``1 - a s <= 0`` or the
    stalls fill the vPod).

    MoE rows (``routed_s > 0``: a stage's HBM time for every routed expert, ``miss_per_seq`` as in
    E4) add the experts the step touches, ``tau(n) = tau_1 + (n - 1) s + routed_s (u(n) - u(1))``
    with ``u(n) = 1 - miss^n`` and ``s`` the rest of the slope (at least 0): concave in ``n``, so
    ``n = a tau(n)`` has one root, found by bisection on [0, batch] (``batch`` when
    ``a tau(batch) >= batch``).
    """
    lam = np.asarray(rate_rps, dtype=float)
    steps = np.asarray(steps_per_req, dtype=float)
    stall = np.asarray(stall_s_per_req, dtype=float)
    t1 = np.asarray(step_s_b1, dtype=float)
    tb = np.asarray(step_s, dtype=float)
    b = np.asarray(batch, dtype=float)
    tr = np.asarray(routed_s, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        free = 1.0 - lam * stall
        a = np.where(free > 0, lam * steps / np.where(free > 0, free, 1.0), np.inf)
        if not np.any(tr > 0):
            s = np.where(b > 1, (tb - t1) / np.where(b > 1, b - 1.0, 1.0), 0.0)
            den = 1.0 - a * s
            n = np.where((den > 0) & np.isfinite(a), a * (t1 - s) / np.where(den > 0, den, 1.0), np.inf)
            return np.clip(np.nan_to_num(n, nan=0.0, posinf=np.inf), 0.0, b)
        n = _routed_fixed_point(a, t1, tb, b, tr, np.asarray(miss_per_seq, dtype=float))
    return np.clip(np.nan_to_num(n, nan=0.0), 0.0, b)


def _routed_fixed_point(a, t1, tb, b, tr, q, iterations: int = 48):
    """E5's root of ``n = a tau(n)`` with the touched-expert term (see :func:`mean_decode_batch`)."""
    shape = np.broadcast_shapes(*(np.shape(x) for x in (a, t1, tb, b, tr, q)))
    a, t1, tb, b, tr, q = (np.broadcast_to(x, shape) for x in (a, t1, tb, b, tr, q))
    logq = np.log(np.clip(q, 1e-300, 1.0))

    def touched(n):
        return -np.expm1(n * logq)

    s = np.where(b > 1, (tb - t1 - tr * (touched(b) - touched(1.0))) / np.where(b > 1, b - 1.0, 1.0), 0.0)
    s = np.maximum(s, 0.0)

    def gap(n):  # a tau(n) - n: positive below the root
        return a * (t1 + (n - 1.0) * s + tr * (touched(n) - touched(1.0))) - n

    lo, hi = np.zeros(shape), b.astype(float).copy()
    full = ~np.isfinite(a) | (gap(hi) >= 0)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        up = gap(mid) >= 0
        lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
    return np.where(full, b, np.where(a > 0, 0.5 * (lo + hi), 0.0))


def busy_batch(mean_batch, batch):
    """E6: mean batch of the steps actually executed: the time-averaged batch ``n`` conditioned on
    the vPod having a sequence, ``n / (1 - exp(-n))`` (Poisson occupancy), in [1, ``batch``]."""
    n = np.asarray(mean_batch, dtype=float)
    b = np.asarray(batch, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        cond = np.where(n > 1e-12, n / -np.expm1(-np.where(n > 1e-12, n, 1.0)), 1.0)
    return np.clip(cond, 1.0, np.maximum(b, 1.0))


def _columns_and_batch(configs: pd.DataFrame, rate_per_vpod_rps) -> tuple[dict, np.ndarray]:
    """The rows' energy columns (with ``routed_j``, ``routed_s``, ``miss`` of :func:`_routed`) and
    their E5 mean batch when each vPod receives ``rate_per_vpod_rps`` requests/s."""
    col = {c: floats(configs, c) for c in (*ENERGY_COLUMNS, "batch")}
    col["routed_j"], col["routed_s"], col["miss"] = _routed(configs)
    nbar = mean_decode_batch(
        rate_per_vpod_rps,
        col["steps_per_req"],
        col["stall_s_per_req"],
        col["step_s_b1"],
        col["step_s"],
        col["batch"],
        col["routed_s"],
        col["miss"],
    )
    return col, nbar


def request_energy_split_j(configs: pd.DataFrame, rate_per_vpod_rps) -> tuple[np.ndarray, np.ndarray]:
    """E7: (busy, marginal) dynamic energy per request (J, before PUE) of each configuration row
    when each of its vPods receives ``rate_per_vpod_rps`` requests/s:
    busy = ``steps_per_req x e_w(n_busy) / n_busy`` (E4 at ``n_busy`` sequences, E5-E6), marginal =
    ``marginal_energy_j_per_req``. Rows of a table without :data:`ENERGY_COLUMNS` get
    (0, ``dyn_energy_j_per_req``)."""
    if not all(c in configs for c in ENERGY_COLUMNS):
        dyn = floats(configs, "dyn_energy_j_per_req")
        return np.zeros(len(configs)), np.where(np.isnan(dyn), 0.0, dyn)
    col, nbar = _columns_and_batch(configs, rate_per_vpod_rps)
    nb = busy_batch(nbar, col["batch"])
    busy = (
        col["steps_per_req"] * weight_step_energy_j(col["step_fixed_energy_j"], col["routed_j"], col["miss"], nb) / nb
    )
    return np.nan_to_num(busy), np.nan_to_num(col["marginal_energy_j_per_req"])


def mean_rate_ratio(configs: pd.DataFrame, buckets: pd.DataFrame) -> np.ndarray:
    """phi_b of each row's class: mean arrival rate / provisioned rate (``buckets.mean_rate_ratio``,
    1 where the column is absent). The share of a provisioned request that arrives on average."""
    if "mean_rate_ratio" not in buckets.columns:
        return np.ones(len(configs))
    phi = buckets.set_index("bucket")["mean_rate_ratio"].astype(float)
    return pd.Series(texts(configs, "bucket")).map(phi).astype(float).fillna(1.0).to_numpy()


def expected_energy_j_per_planned_req(
    configs: pd.DataFrame, buckets: pd.DataFrame, cap_rps, extra_j_per_req=0.0
) -> tuple[np.ndarray, np.ndarray]:
    """(busy, marginal + extra) dynamic energy (J, before PUE) per request/s *provisioned* on each
    row, the planner's linear coefficient (E7 at the design load): a vPod filled to its capacity
    ``cap_rps`` receives on average ``phi_b x cap_rps`` requests/s, each costing E7 at that rate,
    and a provisioned request arrives ``phi_b`` times on average. ``extra_j_per_req`` (e.g. the KV
    hand-off energy) is charged per request that arrives."""
    phi = mean_rate_ratio(configs, buckets)
    busy, marg = request_energy_split_j(configs, phi * np.asarray(cap_rps, dtype=float))
    return phi * busy, phi * (marg + np.asarray(extra_j_per_req, dtype=float))


def busy_energy_rate_w(configs: pd.DataFrame, arriving_rps, n_vpods, group) -> np.ndarray:
    """E2 at a plan's own load (W, before PUE, per row): weight streaming of the rows' batched steps
    when row k's ``arriving_rps`` requests/s spread over the ``n_vpods`` vPods of its ``group`` (rows
    of one group share the vPods and their steps). Little's law adds up over the classes a vPod
    serves: the group's time-averaged batch is ``sum_k n_k`` with ``n_k`` of E5 at ``arriving_k /
    n_vpods``; its busy batch (E6) divides every row's steps. 0 for tables without
    :data:`ENERGY_COLUMNS`."""
    if not all(c in configs for c in ENERGY_COLUMNS):
        return np.zeros(len(configs))
    lam = np.asarray(arriving_rps, dtype=float)
    n = np.asarray(n_vpods, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam_v = np.where(n > 0, lam / np.where(n > 0, n, 1.0), 0.0)
    col, nbar = _columns_and_batch(configs, lam_v)
    n_group = pd.Series(nbar).groupby(pd.Series(list(group))).transform("sum").to_numpy()
    nb = busy_batch(np.minimum(n_group, col["batch"]), col["batch"])
    e_w = weight_step_energy_j(col["step_fixed_energy_j"], col["routed_j"], col["miss"], nb)
    return np.nan_to_num(lam * col["steps_per_req"] * e_w / nb)


def arrival_ratio(frame: pd.DataFrame, demand: pd.DataFrame, buckets: pd.DataFrame) -> np.ndarray:
    """Share of each row's provisioned rate that arrives on average (rows with ``epoch`` and
    ``bucket``): ``demand.mean_rps / demand.rate_rps`` of the row's epoch and class when the demand
    table carries the trace's mean rates (``mean_rps``; a rolling plan's forecast demand gets the
    actual epoch's mean), else phi_b (:func:`mean_rate_ratio`); 0 where nothing is provisioned."""
    if "mean_rps" not in demand.columns:
        return mean_rate_ratio(frame, buckets)
    d = demand.set_index([demand["epoch"].astype(int), demand["bucket"].astype(str)])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (d["mean_rps"].astype(float) / d["rate_rps"].astype(float)).where(d["rate_rps"] > 0, 0.0)
    epochs = pd.Series(np.asarray(frame["epoch"])).astype(int)  # a table or its columns by name
    key = pd.MultiIndex.from_arrays([epochs, pd.Series(texts(frame, "bucket")).astype(str)])
    return ratio.reindex(key).fillna(0.0).to_numpy(dtype=float)
