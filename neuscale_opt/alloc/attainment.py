"""The load at which a vPod keeps an SLO-attainment target (``formulations/allocation.md``,
"SLO attainment and safe load").

A colocated vPod runs continuous batching with ``slots`` sequences (batch x pipeline stages) and
prefills one prompt at a time, stalling decode (``formulations/roofline.md`` section 4; the
replay's engine does the same). A request meets its TTFT target when the time it waits before its
prefill starts is at most the slack x = TTFT target - ttft - tpot (its own prefill, and one
decode round in progress). Two waits, at request rate lambda per vPod:

* AT1, **a free slot.** Sequences hold a slot for their lifetime L = out x tpot; slots form an
  M/M/c queue with c = slots and offered load A = lambda L: P(wait > x) = C(c, A) exp(-(c / L -
  lambda) x), C the Erlang-C probability of waiting (``erlang_c``).
* AT2, **the prompts ahead.** Prefills are served one at a time, an M/D/1 queue of service
  s = ttft at utilisation rho_p = lambda s; its waiting time has the exponential tail
  P(wait > x) = rho_p exp(-z x / s), z > 0 the root of rho_p (e^z - 1) = z (the Cramér-Lundberg
  exponent of deterministic service; ``md1_decay``).

* AT3, **the TPOT tail.** Every prefill on the vPod stalls the sequences decoding there for
  ``stall`` s. A request of ``o`` output tokens decodes ``o`` rounds of at most ``step`` s (the
  round at the configuration's batch), so its TPOT stays within the target ``tau`` when the
  prefills landing in its ``o tau`` s of decoding are at most ``k(o) = floor(o (tau - step) /
  stall)``. Prefills arrive at the request rate: P_AT3 = E_o[P(Poisson(lambda o tau) > k(o))],
  the expectation over the class's output lengths (``buckets.output_nodes``, equal-weight
  quantile nodes from the trace; ``output_tokens`` alone without them). Short answers fail first:
  one stall of a long prompt can break a 5-token answer's TPOT, while a long answer averages
  its stalls out. Colocated rows only (a decode vPod of disaggregated serving has no prefill).

* AT0, **the class's prompt lengths.** The row's ``ttft_s`` is the prefill of the class's
  representative prompt ``S_rep``; a longer prompt of the class takes longer and has less slack.
  Over the class's prompt lengths (``buckets.input_nodes``, equal-weight quantile nodes from the
  trace), the prefill of ``S`` tokens is bounded from above by the row's two computed points
  (:func:`prefill_time`): ``ttft_s`` up to ``S_rep``, the chord to ``ttft_hi_s`` (the prefill of
  the class's longest node ``buckets.prompt_hi_tokens``, computed by the candidate search) up to
  it (the roofline is convex in ``S``), proportional beyond. A prompt whose prefill alone exceeds
  the target misses at any load; the others see AT1 and AT2 with their own slack ``x(S)``, and
  the attainment is the mean over the nodes. Colocated rows (a prefill or decode vPod of
  disaggregated serving keeps the representative prompt). Where no configuration of the class
  prefills every prompt within the target (an open-ended class of very long prompts), the target
  applies to the share the best one reaches (``buckets.prompt_reach``, :func:`prompt_reach` over
  the whole candidate table): rows are judged against what the class allows, and the requests no
  configuration serves in time are left to the replay to count.

Attainment(lambda) = E_S[1(t(S) <= target) (1 - P_AT1(x(S))) (1 - P_AT2(x(S)))] (1 - P_AT3) (x clipped
at 0), decreasing in lambda.

* AT4, **the rate moves.** AT1-AT3 take Poisson arrivals at a steady rate. A trace's rate moves
  inside the window whose mean rate is planned (``buckets.rate_cv2`` = c2, the squared
  coefficient of variation of the slow part of the class's rate (adjacent slots share it), D12 of
  ``formulations/forecast.md``; thinning to one vPod keeps it). The vPod then sees Poisson
  arrivals at a rate Lambda = lambda G that varies slowly against its queues, G ~ Gamma(shape
  1 / c2, mean 1); a request arrives at rate G with probability proportional to G, so the share
  within target is E[G Attainment(lambda G)] / E[G] = E[Attainment(lambda G')], G' ~ Gamma(1 / c2
  + 1, scale c2) (the size-biased law), taken at :func:`modulation_nodes` (the conditional means
  of 26 pieces of it that resolve both tails to 2^-12; the 0.99 target is decided in the upper
  one), with Attainment 0 beyond the full rate. c2 = 0 is AT0-AT3 unchanged. The safe loads
  tabulate each row's Attainment on a grid of loads (``_GRID_POINTS``) and interpolate it at the
  nodes.

* AT5, **arrivals in clumps.** Where a trace records several requests of a class at one instant
  (``buckets.clump_sizes``, the law of the class's clump sizes, D13), the vPod receives clumps: the
  router hands a clump's requests to the group's least-loaded vPods in turn, so over n = ceil(class
  rate / lambda) vPods (``buckets.clump_rate_rps``, the class's planned rate) a vPod receives clumps
  Y of law :func:`vpod_clumps`; a request finds J of its clump ahead of it (:func:`clump_ahead`).
  AT2 becomes M^X/D/1 of the prefill's occupancy o (``stall_s_per_req``, the pipeline stage) with
  the clump's own J ahead: sum_j P(J = j) [j o > x ? 1 : rho_o e^{-z (x - j o) / o}], rho_o =
  lambda o, z = :func:`batch_decay`. AT1 takes the slots' occupancy at Hayward's peakedness h =
  E[Y^2] / E[Y] (M/M/c of c / h slots at offered A / h; deterministic lifetimes, the larger of the
  M^X/G/inf cases), a wait when fewer than j + 1 slots are free, then Erlang(j + 1) at the drain
  rate of :func:`slot_decay`. AT3 counts the prefills in a request's decoding as a negative
  binomial of mean lambda o tau and variance h times it, plus the followers of its own clump (J's
  law by symmetry). Rows whose vPods receive one request at a time keep AT1-AT3; every row keeps
  at most its attainment without clumps (clumps never help; AT2 without them charges the whole
  prefill latency, so the occupancy-based AT2 can come out higher); under AT4 the split is taken
  at each tabulated load.

The safe load of a configuration is u = lambda* / mu, lambda* the largest rate with attainment >=
the target (times ``prompt_reach``; bisection), mu = ``max_rate_rps`` (the coefficient table's
rate; a disaggregated prefill row's KV transfer, checked against TTFT separately, does not
enter). Prefill vPods (disaggregated) keep AT2 with service 1 / mu, decode vPods AT1 with the TTFT target as slack.
Rows without a TTFT target or without latencies (e.g. profiled Mélange tables) keep
``DEFAULT_UTIL_CAP``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import betainc, gammaincc, gammaln

from neuscale_opt.alloc.table import floats, texts

#: Utilisation cap of rows the queueing model cannot judge, and the override's historical default.
DEFAULT_UTIL_CAP = 0.9
#: Default SLO-attainment target (``slo.attainment``).
DEFAULT_ATTAINMENT = 0.99
_BISECT_STEPS = 50
#: AT4: loads at which a modulated row's attainment is tabulated (0 to the full rate, step 0.01)
_GRID_POINTS = 101
#: AT4: probability edges of the intervals of the size-biased rate behind its nodes: both tails
#: in halving steps down to 2^-12 (the 0.99 target is decided in the upper one), the body in eighths
_NODE_EDGES = np.array(
    [0.0, *(2.0 ** -np.arange(12, 2, -1)), 0.25, 0.375, 0.5, 0.625, 0.75, *(1.0 - 2.0 ** -np.arange(3, 13)), 1.0]
)


def erlang_c(servers: np.ndarray, offered: np.ndarray) -> np.ndarray:
    """Erlang-C probability that an arrival waits in an M/M/c queue (c = ``servers``, offered load
    A = lambda / service rate), 1 when A >= c. Through the Poisson distribution, stable for large
    c: Erlang-B = pmf(c; A) / cdf(c; A), C = c B / (c - A (1 - B))."""
    c = np.asarray(servers, dtype=float)
    a = np.maximum(np.asarray(offered, dtype=float), 1e-300)
    log_pmf = c * np.log(a) - a - gammaln(c + 1)
    cdf = gammaincc(c + 1, a)  # P(Poisson(a) <= c)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        erl_b = np.exp(log_pmf) / np.maximum(cdf, 1e-300)
        out = c * erl_b / (c - a * (1 - erl_b))
    return np.where(a >= c, 1.0, np.clip(np.nan_to_num(out, nan=1.0), 0.0, 1.0))


def md1_decay(rho: np.ndarray) -> np.ndarray:
    """z > 0 with rho (e^z - 1) = z (the tail exponent of the M/D/1 waiting time, per service
    time), by bisection: f(z) = rho (e^z - 1) - z is negative between 0 and the root (f'(0) =
    rho - 1 < 0) and positive beyond; 0 when rho >= 1."""
    r = np.clip(np.asarray(rho, dtype=float), 1e-12, 1.0)
    lo = np.zeros_like(r)
    hi = np.full_like(r, 60.0)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        neg = r * np.expm1(mid) - mid < 0
        lo = np.where(neg, mid, lo)
        hi = np.where(neg, hi, mid)
    return np.where(r >= 1.0, 0.0, lo)


def vpod_clumps(sizes: np.ndarray, class_rate_rps: np.ndarray, rate_rps: np.ndarray) -> np.ndarray:
    """AT5: per row, the law of the clumps one vPod receives (rows x K, the share of them holding
    1, ..., K requests) when its class's clumps have the law ``sizes`` (rows x K, D13) and the class's
    ``class_rate_rps`` is served by n = ceil(class rate / ``rate_rps``) vPods (1 where either rate is
    not positive): the router hands a clump's requests to the least-loaded vPods in turn, so a
    clump of k gives a vPod floor(k / n) requests, one more with probability (k mod n) / n; clumps
    that give it none are not its clumps."""
    p = np.asarray(sizes, dtype=float)
    lam = np.asarray(rate_rps, dtype=float)
    big = np.asarray(class_rate_rps, dtype=float)
    n = np.ones(len(lam))
    ok = np.isfinite(big) & (big > 0) & (lam > 0)
    n[ok] = np.maximum(np.ceil(big[ok] / lam[ok] - 1e-9), 1.0)
    rows, k_max = p.shape
    y = np.zeros((rows, k_max + 1))
    r = np.arange(rows)
    for k in range(1, k_max + 1):
        q = np.floor(k / n + 1e-12).astype(np.int64)
        frac = np.clip((k - q * n) / n, 0.0, 1.0)
        y[r, q] += p[:, k - 1] * (1.0 - frac)
        y[r, np.minimum(q + 1, k_max)] += p[:, k - 1] * frac
    y = y[:, 1:]
    tot = y.sum(axis=1, keepdims=True)
    single = np.zeros(k_max)
    single[0] = 1.0
    return np.where(tot > 0, y / np.maximum(tot, 1e-300), single)


def peakedness(y: np.ndarray) -> np.ndarray:
    """AT5: per row, D = E[Y^2] / E[Y] of clumps of law ``y`` (rows x K, sizes 1, ..., K): the
    variance over the mean of a count of their requests (1 for single requests)."""
    sizes = np.arange(1, np.asarray(y).shape[1] + 1, dtype=float)
    return (y @ sizes**2) / np.maximum(y @ sizes, 1e-300)


def clump_ahead(y: np.ndarray) -> np.ndarray:
    """AT5: per row, the law of J, the requests of its own clump a request finds ahead of it (rows
    x K, J = 0, ..., K - 1), for clumps of law ``y`` (rows x K, sizes 1, ..., K) in random order:
    P(J = j) = P(Y > j) / E[Y] (a request is in a clump of k with probability k y_k / E[Y], at each
    of its k places alike)."""
    y = np.asarray(y, dtype=float)
    k_max = y.shape[1]
    mean = y @ np.arange(1, k_max + 1)
    tail = np.cumsum(y[:, ::-1], axis=1)[:, ::-1]  # P(Y >= j + 1) = P(Y > j)
    return tail / np.maximum(mean, 1e-300)[:, None]


def _largest(y: np.ndarray) -> np.ndarray:
    """Per row of a clump law ``y`` (rows x K, sizes 1, ..., K), its largest size of positive share
    (1 for a row of no mass)."""
    pos = np.asarray(y) > 0
    last = y.shape[1] - 1 - np.argmax(pos[:, ::-1], axis=1)
    return np.where(pos.any(axis=1), last + 1.0, 1.0)


def slot_decay(rho: np.ndarray, y: np.ndarray) -> np.ndarray:
    """AT5: v in (0, 1 - rho] with rho (E[(1 - v)^{-Y}] - 1) / E[Y] = v: the drain rate, per c / L,
    of the wait for a slot when all c are held and clumps of law ``y`` (rows x K) arrive, each
    request holding an exponential lifetime L (the Cramer-Lundberg exponent of compound Poisson
    work, a clump bringing Gamma(Y, c / L) of it); 1 - rho for Y = 1 (M/M/c's c / L - lambda);
    0 when rho >= 1. Bisection on log E[(1 - v)^{-Y}] < log(1 + v E[Y] / rho)."""
    return _clump_root(rho, y, 1.0, lambda v: -np.log1p(-np.minimum(v, 1.0 - 1e-16)))  # -log(1 - v) >= 0


def batch_decay(rho: np.ndarray, y: np.ndarray) -> np.ndarray:
    """AT5: z > 0 with rho (E[e^{z Y}] - 1) / E[Y] = z, the tail exponent (per service time) of the
    waiting time of a clump of law ``y`` (rows x K, sizes 1, ..., K) in a queue of deterministic
    service at utilisation ``rho`` (the M^X/D/1 queue's Cramer-Lundberg exponent; ``md1_decay``'s
    for Y = 1), by bisection on log E[e^{z Y}] < log(1 + z E[Y] / rho); 0 when rho >= 1."""
    return _clump_root(rho, y, 60.0, lambda z: z)


def _clump_root(rho: np.ndarray, y: np.ndarray, upper: float, exponent: Any) -> np.ndarray:
    """The x in (0, ``upper``] of :func:`slot_decay` and :func:`batch_decay`: per row, the root of
    log E[e^{s(x) Y}] = log(1 + x E[Y] / rho), s = ``exponent`` (x for the prefill queue, -log(1 - x)
    for the slots), by 48 bisection steps; 0 when rho >= 1. log E[e^{s Y}] = s top + log E[e^{s (Y -
    top)}], top the row's largest clump (no overflow)."""
    r = np.clip(np.asarray(rho, dtype=float), 1e-12, 1.0)
    y = np.asarray(y, dtype=float)
    sizes = np.arange(1, y.shape[1] + 1, dtype=float)
    mean = y @ sizes
    lo = np.zeros_like(r)
    hi = np.full_like(r, upper)
    top = _largest(y)
    below = np.minimum(sizes[None, :] - top[:, None], 0.0)
    for _ in range(48):
        mid = 0.5 * (lo + hi)
        g = exponent(mid)
        log_m = g * top + np.log((y * np.exp(g[:, None] * below)).sum(axis=1))
        neg = log_m < np.log1p(mid * mean / r)
        lo = np.where(neg, mid, lo)
        hi = np.where(neg, hi, mid)
    return np.where(r >= 1.0, 0.0, lo)


def tpot_tail(
    rate_rps: np.ndarray,
    out_nodes: np.ndarray,
    tpot_slo_s: np.ndarray,
    step_s: np.ndarray,
    stall_s: np.ndarray,
    dispersion: np.ndarray | None = None,
    followers: np.ndarray | None = None,
) -> np.ndarray:
    """P_AT3 per row: the share of requests whose TPOT exceeds ``tpot_slo_s`` because more than
    ``k(o) = floor(o (tau - step) / stall)`` prefills land in their ``o tau`` s of decoding,
    ``P(Poisson(lambda o tau) > k(o))`` averaged over the row's output-length nodes ``out_nodes``
    (rows x nodes, NaN = no node; a node below one token has no TPOT). 0 where ``stall`` is 0 or
    there is no target, 1 where a round alone is longer than the target. With ``dispersion`` D > 1
    per row (prefills that arrive in clumps, AT5: D = E[Y^2] / E[Y] of the clumps a vPod receives)
    the count is the negative binomial of the same mean and variance D times it; ``followers``
    (rows x K, the law of the requests of its own clump prefilled right after it, 0, ..., K - 1)
    adds those to the count of those rows."""
    stall_all = np.asarray(stall_s, dtype=float)
    tau_all = np.asarray(tpot_slo_s, dtype=float)
    out = np.zeros(len(stall_all))
    rows = np.flatnonzero((stall_all > 0) & np.isfinite(tau_all))  # the others have no tail
    if len(rows) == 0:
        return out
    lam = np.asarray(rate_rps, dtype=float)[rows, None]
    o = np.asarray(out_nodes, dtype=float)[rows]
    tau = tau_all[rows, None]
    step = np.asarray(step_s, dtype=float)[rows, None]
    stall = stall_all[rows, None]
    live = np.isfinite(o) & (o >= 1.0)
    with np.errstate(invalid="ignore"):
        k = np.floor(o * (tau - step) / stall)
        mean = np.maximum(lam * o * tau, 0.0)
        p_ok = np.where(k >= 0, gammaincc(np.maximum(k, 0.0) + 1.0, mean), 0.0)  # P(N <= k)
        if dispersion is not None:
            d = np.asarray(dispersion, dtype=float)[rows]
            lr = np.flatnonzero(d > 1.0 + 1e-12)  # rows (of ``rows``) whose prefills come in clumps
            if len(lr):
                fl = np.ones((len(lr), 1)) if followers is None else np.asarray(followers, dtype=float)[rows[lr]]
                # P(N <= k) = sum_b P(B = b) P(NB <= k - b) over the followers B, each term only where
                # it is not 0 (k - b >= 0, P(B = b) > 0): the negative binomial of mean m and variance
                # D m (r = m / (D - 1), p = 1 / D) has P(NB <= k) = I_p(r, k + 1), the regularised
                # incomplete beta
                kk, mm = k[lr], mean[lr]
                dd = np.broadcast_to(d[lr, None], kk.shape)
                got = np.zeros(kk.shape)
                for b in range(fl.shape[1]):
                    wb = np.broadcast_to(fl[:, b : b + 1], kk.shape)
                    ii, jj = np.nonzero((wb > 0) & (kk - b >= 0))
                    if len(ii) == 0:
                        continue
                    m_ij, d_ij = mm[ii, jj], dd[ii, jj]
                    r_nb = np.maximum(m_ij / (d_ij - 1.0), 1e-300)
                    cdf = np.where(m_ij > 0, betainc(r_nb, kk[ii, jj] - b + 1.0, 1.0 / d_ij), 1.0)
                    got[ii, jj] += wb[ii, jj] * cdf
                p_ok[lr] = got
    p_fail = np.where(live, 1.0 - p_ok, 0.0)
    weight = np.isfinite(o).sum(axis=1)
    out[rows] = np.where(weight > 0, p_fail.sum(axis=1) / np.maximum(weight, 1), 0.0)
    return out


def prefill_time(
    ttft_s: np.ndarray,
    s_rep: np.ndarray,
    s_nodes: np.ndarray,
    ttft_hi_s: np.ndarray | None = None,
    s_hi: np.ndarray | None = None,
) -> np.ndarray:
    """AT0: an upper bound on the prefill latency of prompts of ``s_nodes`` tokens (rows x nodes),
    from the row's prefill of the class's representative ``s_rep`` (``ttft_s``) and of its longest
    prompt node ``s_hi`` (``ttft_hi_s``): ``ttft_s`` up to ``s_rep`` (a shorter prompt is not
    slower), the chord between the two points up to ``s_hi`` (the roofline is convex in the prompt,
    so the chord lies above it); beyond ``s_hi`` proportional to the prompt (an estimate, not a
    bound: attention grows faster; the planner's nodes end at ``s_hi``)."""
    t = np.asarray(ttft_s, dtype=float)[:, None]
    rep = np.maximum(np.asarray(s_rep, dtype=float), 1.0)[:, None]
    s = np.asarray(s_nodes, dtype=float)
    if ttft_hi_s is None or s_hi is None:
        t_hi, hi = t, rep
    else:
        t_hi = np.asarray(ttft_hi_s, dtype=float)[:, None]
        hi = np.asarray(s_hi, dtype=float)[:, None]
        usable = np.isfinite(t_hi) & (hi > rep) & (t_hi >= t)
        t_hi, hi = np.where(usable, t_hi, t), np.where(usable, hi, rep)
    with np.errstate(invalid="ignore", divide="ignore"):
        mid = t + (t_hi - t) * np.where(hi > rep, (s - rep) / (hi - rep), 0.0)
        beyond = t_hi * s / hi
    return np.where(s <= rep, t, np.where(s <= hi, mid, beyond))


def attainment(
    rate_rps: np.ndarray,
    phase: np.ndarray,
    slots: np.ndarray,
    ttft_s: np.ndarray,
    tpot_s: np.ndarray,
    out_tokens: np.ndarray,
    ttft_slo_s: np.ndarray,
    mu_rps: np.ndarray,
    tail: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
    prompt: tuple[np.ndarray, ...] | None = None,
    clumps: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Share of requests within their TTFT target at ``rate_rps`` per vPod (rules AT1, AT2); with
    ``prompt = (in_nodes, s_rep, ttft_hi_s, s_hi)`` over the class's prompt lengths (AT0, colocated
    rows; NaN nodes are absent), and with ``tail = (out_nodes, tpot_slo_s, step_s, stall_s)``
    within their TPOT target under prefill stalls (AT3, colocated rows); with ``clumps = (sizes,
    class_rate_rps, occupancy_s)`` (rows x K, rows, rows: the class's clump law and planned rate,
    the prefill's occupancy, NaN = its latency) for arrivals in clumps (AT5; rows whose vPods receive
    one request at a time keep AT1-AT3, and no row gets more than without clumps). A higher rate
    per vPod means fewer vPods to split a clump over, so under clumps the share still falls with
    the rate, in steps where n changes."""
    lam = np.asarray(rate_rps, dtype=float)
    colo = phase == "colocated"
    pre = phase == "prefill"
    dec = phase == "decode"
    tpot = np.where(pre, 0.0, tpot_s)
    # each row's prefill times at its prompt nodes (rows x nodes; the representative alone without AT0)
    if prompt is not None:
        in_nodes, s_rep, ttft_hi, s_hi = prompt
        t_at = prefill_time(ttft_s, s_rep, in_nodes, ttft_hi, s_hi)
        t_pre = np.where(colo[:, None], t_at, np.asarray(ttft_s)[:, None])
        t_pre = np.where(np.isfinite(in_nodes) | ~colo[:, None], t_pre, np.nan)
        reach = ~colo[:, None] | (t_pre <= np.asarray(ttft_slo_s)[:, None])
    else:
        t_pre = np.asarray(ttft_s, dtype=float)[:, None]
        reach = np.ones_like(t_pre, dtype=bool)
    slack = np.maximum(np.where(dec[:, None], ttft_slo_s[:, None], (ttft_slo_s - tpot)[:, None] - t_pre), 0.0)
    # AT1: slots (colocated and decode vPods)
    life = np.maximum(out_tokens * tpot, 1e-12)
    wait_slot = erlang_c(slots, lam * life)
    p_slot = wait_slot[:, None] * np.exp(-np.maximum(slots / life - lam, 0.0)[:, None] * slack)
    p_slot = np.where((colo | dec)[:, None], p_slot, 0.0)
    # AT2: prompts ahead (colocated and prefill vPods)
    service = np.where(pre, 1.0 / mu_rps, ttft_s)
    rho = np.minimum(lam * service, 1.0)
    p_pre = rho[:, None] * np.exp(-(md1_decay(rho) / np.maximum(service, 1e-12))[:, None] * slack)
    p_pre = np.where((colo | pre)[:, None], p_pre, 0.0)
    dispersion = followers = None
    p_slot_plain, p_pre_plain = p_slot.copy(), p_pre.copy()
    if clumps is not None:
        sizes = np.asarray(clumps[0], dtype=float)
        lumpy = np.flatnonzero(sizes[:, 1:].sum(axis=1) > 0) if sizes.shape[1] > 1 else np.zeros(0, np.int64)
        y = vpod_clumps(sizes[lumpy], np.asarray(clumps[1], dtype=float)[lumpy], lam[lumpy])
        # rows whose vPods receive one request at a time (the group splits every clump) keep AT1-AT3
        keep = y[:, 1:].sum(axis=1) > 0
        lumpy, y = lumpy[keep], y[keep]
        if len(lumpy):
            ahead = clump_ahead(y)[:, None, :]  # rows x 1 x J
            j = np.arange(y.shape[1], dtype=float)[None, None, :]
            x = slack[lumpy][:, :, None]
            # AT5 on AT1: clumps make the slots' occupancy peaked (peakedness h = D = E[Y^2] / E[Y],
            # the variance over the mean of M^X/D/inf; (1 + D) / 2 for exponential lifetimes), so it
            # is taken as M/M/c in units of h (Hayward: c / h slots, offered A / h); the j ahead in
            # the clump take slots first, so a request waits when fewer than j + 1 are free, and
            # then for j + 1 departures at the rate the queue drains under clumps (Erlang(j + 1) at
            # ``slot_decay``'s rate in place of the exponential at c / L - lambda)
            jj = j[0]  # 1 x J
            disp = peakedness(y)
            h = disp[:, None]
            c = np.asarray(slots, dtype=float)[lumpy][:, None] / h
            a = (lam * life)[lumpy][:, None] / h
            cw = erlang_c(c, a)
            below = gammaincc(c, a)  # P(Poisson(A) <= c - 1), continued to real c
            jh = jj / h
            above = np.where(c - jh >= 1, gammaincc(np.maximum(c - jh, 1.0), a), 0.0)  # <= c - 1 - j / h
            busy = np.where(jh < c, cw + (1.0 - cw) * (below - above) / np.maximum(below, 1e-300), 1.0)
            weight = ahead[:, 0, :] * np.minimum(busy, 1.0)  # rows x J
            # the Erlang tail only where its weight can matter (the rest adds at most 1e-12 each)
            rr, jw = np.nonzero(weight > 1e-12)
            full = (slots / life)[lumpy]
            drain = full * slot_decay(np.minimum(lam[lumpy] / np.maximum(full, 1e-300), 1.0), y)
            slot_c = np.zeros(x.shape[:2])
            if len(rr):
                terms = weight[rr, jw][:, None] * gammaincc(jw[:, None] + 1.0, drain[rr][:, None] * x[rr, :, 0])
                np.add.at(slot_c, rr, terms)
            p_slot[lumpy] = np.where((colo | dec)[lumpy][:, None], np.minimum(slot_c, 1.0), 0.0)
            # AT5 on AT2: the clump waits as a whole, then the j ahead of it are prefilled first.
            # A prefill holds a colocated vPod for its occupancy o (the pipeline stage,
            # ``stall_s_per_req``; the whole prefill s without pipelining or where not given), so
            # the prompts queue as M^X/D/1 of service o at utilisation rho_o = lambda o:
            # sum_j P(J = j) [j o > x ? 1 : rho_o e^{-z (x - j o) / o}], z = ``batch_decay``; with
            # m = floor(x / o): the ones beyond m plus rho_o e^{-z (x / o - m)} G_m, G_m = sum_{j
            # <= m} P(J = j) e^{-z (m - j)} = G_{m-1} e^{-z} + P(J = m)
            pj = ahead[:, 0, :]
            sv = np.maximum(service[lumpy], 1e-12)
            occ = np.asarray(clumps[2], dtype=float)[lumpy] if len(clumps) > 2 else sv
            occ = np.where(colo[lumpy] & np.isfinite(occ) & (occ > 0), np.minimum(occ, sv), sv)
            rho_o = np.minimum(lam[lumpy] * occ, 1.0)
            zb = batch_decay(rho_o, y)
            g = np.empty_like(pj)
            g[:, 0] = pj[:, 0]
            for col in range(1, pj.shape[1]):
                g[:, col] = g[:, col - 1] * np.exp(-zb) + pj[:, col]
            beyond = 1.0 - np.cumsum(pj, axis=1)
            ratio = np.nan_to_num(x[:, :, 0] / occ[:, None])  # absent nodes: any value (dropped below)
            m = np.minimum(np.floor(ratio), pj.shape[1] - 1).astype(np.int64)
            rows_l = np.arange(len(lumpy))[:, None]
            at = rho_o[:, None] * np.exp(-zb[:, None] * (ratio - m)) * g[rows_l, m]
            pre_c = np.maximum(beyond[rows_l, m], 0.0) + at
            p_pre[lumpy] = np.where((colo | pre)[lumpy][:, None], np.minimum(pre_c, 1.0), 0.0)
            dispersion = np.ones(len(lam))
            dispersion[lumpy] = disp
            followers = np.zeros((len(lam), y.shape[1]))
            followers[:, 0] = 1.0
            followers[lumpy] = pj  # the followers in its clump: J's law, by symmetry
    live = np.isfinite(t_pre)

    def share(p_s: np.ndarray, p_p: np.ndarray, disp: np.ndarray | None, follow: np.ndarray | None) -> np.ndarray:
        ok_s = np.where(reach, (1.0 - p_s) * (1.0 - p_p), 0.0)
        ok = np.where(live, ok_s, 0.0).sum(axis=1) / np.maximum(live.sum(axis=1), 1)
        if tail is not None:
            nodes, tau, step, stall = tail
            ok = ok * (1.0 - tpot_tail(lam, nodes, tau, step, np.where(colo, stall, 0.0), disp, follow))
        return ok

    if dispersion is None:
        return share(p_slot, p_pre, None, None)
    # clumps never help: a row keeps at most its attainment under Poisson arrivals (AT2 without
    # clumps charges a prefill's whole latency, not its occupancy, so it can be the lower one)
    return np.minimum(share(p_slot, p_pre, dispersion, followers), share(p_slot_plain, p_pre_plain, None, None))


def modulation_nodes(cv2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """AT4: nodes ``g`` (rows x nodes) and weights ``w`` (nodes, summing to 1) of the size-biased
    relative rate G' ~ Gamma(a = 1 / c2 + 1, scale c2) of each row's ``cv2`` = c2. The law is cut
    at its quantiles of probability ``_NODE_EDGES``; each piece's node is its conditional mean
    ``a c2 (F_{a+1}(hi) - F_{a+1}(lo)) / w`` (F_s the Gamma(s, scale c2) CDF), its weight ``w`` its
    probability, so the nodes' mean is G''s exactly, 1 + c2. A row with c2 = 0 gets every node at
    1 (a steady rate)."""
    from scipy.stats import gamma

    c2 = np.maximum(np.asarray(cv2, dtype=float), 0.0)
    weights = np.diff(_NODE_EDGES)
    vals, inv = np.unique(c2, return_inverse=True)
    g = np.ones((len(vals), len(weights)))
    live = vals > 0
    if live.any():
        v = vals[live][:, None]
        a = 1.0 / v + 1.0
        cuts = gamma.ppf(_NODE_EDGES[None, :], a, scale=v)  # 0 ... inf
        mass = gamma.cdf(cuts, a + 1.0, scale=v)
        g[live] = a * v * np.diff(mass, axis=1) / weights[None, :]
    return g[inv.reshape(-1)], weights


def _repeat(arrays: tuple | None, times: int) -> tuple | None:
    """Each row of every array in ``arrays`` (1-D per row, or rows x nodes) repeated ``times``
    times, in place (row 0 x times, row 1 x times, ...); None entries kept."""
    if arrays is None:
        return None
    return tuple(None if a is None else np.repeat(np.asarray(a), times, axis=0) for a in arrays)


def modulated_attainment(
    rate_rps: np.ndarray,
    cv2: np.ndarray,
    phase: np.ndarray,
    *args: np.ndarray,
    tail: tuple | None = None,
    prompt: tuple | None = None,
    clumps: tuple | None = None,
) -> np.ndarray:
    """AT4: :func:`attainment` when each row's rate moves with squared coefficient of variation
    ``cv2`` about ``rate_rps``, evaluated at the nodes of :func:`modulation_nodes` (exactly, not
    from the safe loads' grid); 0 at nodes beyond the full rate (``mu_rps``, the last of ``args``).
    ``args`` are :func:`attainment`'s after ``phase``."""
    lam = np.asarray(rate_rps, dtype=float)
    g, w = modulation_nodes(cv2)
    n, m = g.shape
    lam_g = (lam[:, None] * g).reshape(-1)
    rep = _repeat((np.asarray(phase, dtype=object), *args), m)
    a = attainment(lam_g, *rep, tail=_repeat(tail, m), prompt=_repeat(prompt, m), clumps=_repeat(clumps, m))
    a = a.reshape(n, m)
    a = np.where(lam[:, None] * g <= np.asarray(args[-1], dtype=float)[:, None] * (1 + 1e-12), a, 0.0)
    return a @ w


def prompt_reach(configs: pd.DataFrame, buckets: pd.DataFrame) -> pd.Series:
    """Per class (``buckets.bucket``), the largest share of its prompts (``buckets.input_nodes``)
    that one colocated row of ``configs`` prefills within the TTFT target at zero load (AT0's
    :func:`prefill_time`); 1 for a class without nodes, targets or colocated rows. The planner's
    coefficients carry it as ``buckets.prompt_reach`` (over the whole candidate table)."""
    slo = buckets.set_index("bucket")
    out = pd.Series(1.0, index=slo.index, dtype=float)
    if "input_nodes" not in slo.columns or "ttft_s" not in _columns(configs):
        return out
    b = pd.Series(texts(configs, "bucket")).astype(str)
    colo = np.array(texts(configs, "phase"), dtype=object) == "colocated"
    target = b.map(slo["ttft_slo_s"]).astype(float).to_numpy()
    rep = b.map(slo["input_tokens"]).astype(float).to_numpy()
    ttft = floats(configs, "ttft_s")
    rows = np.flatnonzero(colo & np.isfinite(target) & np.isfinite(ttft) & np.isfinite(rep))
    if len(rows) == 0:
        return out
    nodes, rep_rows, t_hi, s_hi = _prompt_args(configs, slo, b, rows)
    t = prefill_time(ttft[rows], rep_rows, nodes, t_hi, s_hi)
    live = np.isfinite(nodes)
    share = np.where(live, t <= target[rows, None], False).sum(axis=1) / np.maximum(live.sum(axis=1), 1)
    best = pd.Series(share).groupby(b.iloc[rows].to_numpy()).max()
    out.loc[best.index] = best.to_numpy()
    return out


#: safe loads already derived, by the content of their inputs (``_input_key``): a plan derives
#: the same tables again and again (one horizon plan of the default: 38 calls, 8 distinct tables)
_MEMO: dict[str, np.ndarray] = {}
_MEMO_SIZE = 64
_KEY_COLUMNS = (
    "bucket",
    "phase",
    "batch",
    "pp",
    "ttft_s",
    "tpot_s",
    "max_rate_rps",
    "step_s",
    "ttft_hi_s",
    "stall_s_per_req",
)
_BUCKET_KEY_COLUMNS = (
    "bucket",
    "ttft_slo_s",
    "tpot_slo_s",
    "input_tokens",
    "output_tokens",
    "input_nodes",
    "output_nodes",
    "prompt_reach",
    "rate_cv2",
    "clump_sizes",
    "clump_rate_rps",
)


def _columns(configs: pd.DataFrame | dict) -> set[str]:
    """The column names of a table or of a dict of its columns (what ``floats``/``texts`` read)."""
    return set(configs.columns) if hasattr(configs, "columns") else set(configs)


def _input_key(configs: pd.DataFrame, buckets: pd.DataFrame, target: float) -> str:
    """A digest of everything :func:`safe_load` reads (the rows' columns, the classes' targets,
    lengths and output nodes, the target)."""
    h = hashlib.sha256()
    cols = _columns(configs)
    for c in _KEY_COLUMNS:
        if c not in cols:
            h.update(f"-{c}".encode())
        elif c in ("bucket", "phase"):
            h.update("\x1f".join(map(str, texts(configs, c))).encode())
        else:
            h.update(np.ascontiguousarray(floats(configs, c)).tobytes())
    for c in _BUCKET_KEY_COLUMNS:
        if c in buckets.columns:
            h.update(repr(buckets[c].tolist()).encode())
    h.update(repr(float(target)).encode())
    return h.hexdigest()


def safe_load(configs: pd.DataFrame, buckets: pd.DataFrame, target: float) -> np.ndarray:
    """Per configuration row, the largest load u = lambda / mu in (0, 1] whose attainment is at
    least ``target`` (bisection on lambda); ``DEFAULT_UTIL_CAP`` where the model has no data.
    Remembered by the content of its inputs (the same tables give the same loads)."""
    n = len(configs)
    if n == 0:
        return np.zeros(0)
    key = _input_key(configs, buckets, target)
    hit = _MEMO.get(key)
    if hit is not None:
        return hit.copy()
    u = _safe_load(configs, buckets, target)
    if len(_MEMO) >= _MEMO_SIZE:
        _MEMO.pop(next(iter(_MEMO)))
    _MEMO[key] = u.copy()
    return u


def _safe_load(configs: pd.DataFrame, buckets: pd.DataFrame, target: float) -> np.ndarray:
    """:func:`safe_load` without the memo."""
    n = len(configs)
    slo = buckets.set_index("bucket")
    b = pd.Series(texts(configs, "bucket")).astype(str)  # a table or its columns by name
    target_s = b.map(slo["ttft_slo_s"]).astype(float).to_numpy()
    out_tok = b.map(slo["output_tokens"]).astype(float).to_numpy()
    ttft = floats(configs, "ttft_s")
    tpot = floats(configs, "tpot_s")
    phase = np.array(texts(configs, "phase"), dtype=object)
    slots = floats(configs, "batch") * floats(configs, "pp")
    mu = floats(configs, "max_rate_rps")
    known = np.isfinite(target_s) & np.isfinite(ttft) & (np.isfinite(tpot) | (phase == "prefill")) & (mu > 0)
    known &= np.isfinite(out_tok)
    u = np.full(n, DEFAULT_UTIL_CAP)
    if not known.any():
        return u
    idx = np.flatnonzero(known)
    args = (
        phase[idx],
        slots[idx],
        ttft[idx],
        np.nan_to_num(tpot[idx]),
        out_tok[idx],
        target_s[idx],
        mu[idx],
    )
    # the class's target on the share of its prompts that some configuration prefills in time (AT0)
    reach = b.map(slo["prompt_reach"]).astype(float).fillna(1.0).to_numpy() if "prompt_reach" in slo.columns else None
    goal = target * (np.clip(reach[idx], 0.0, 1.0) if reach is not None else np.ones(len(idx)))
    prompt = _prompt_args(configs, slo, b, idx)
    tail = _tail_args(configs, slo, b, idx, out_tok)
    clumps = _clump_args(configs, slo, b, idx)
    if tail is not None:
        # AT3 only where it can matter: rows whose TPOT tail at the full rate exceeds 1e-9 (the
        # tail grows with the rate, so below that it is below it at every load of the bisection);
        # the others get no stall, which ``tpot_tail`` skips
        nodes, tau, step, stall = tail
        stall = np.where(phase[idx] == "colocated", stall, 0.0)
        disp = follow = None
        if clumps is not None:  # AT5: the clumps at the full rate (the fewest vPods, the largest clumps)
            y = vpod_clumps(clumps[0], clumps[1], mu[idx])
            disp, follow = peakedness(y), clump_ahead(y)
        heavy = tpot_tail(mu[idx], nodes, tau, step, stall, disp, follow) > 1e-9
        tail = (nodes, tau, step, np.where(heavy, stall, 0.0))

    # AT4: the rows of classes whose rate moves (c2 > 0) are found on a grid, the others exactly
    cv2 = b.map(slo["rate_cv2"]).astype(float).fillna(0.0).to_numpy()[idx] if "rate_cv2" in slo.columns else None
    moving = np.flatnonzero(cv2 > 0) if cv2 is not None else np.zeros(0, dtype=np.int64)
    steady = np.setdiff1d(np.arange(len(idx)), moving)
    if len(steady):
        sub = (_take(args, steady), _take(tail, steady), _take(prompt, steady))
        u[idx[steady]] = _bisect_steady(*sub, goal[steady], clumps=_take(clumps, steady))
    if len(moving):
        sub = (_take(args, moving), _take(tail, moving), _take(prompt, moving))
        u[idx[moving]] = _bisect_modulated(*sub, goal[moving], cv2[moving], clumps=_take(clumps, moving))
    return u


def _take(arrays: tuple | None, rows: np.ndarray) -> tuple | None:
    """The rows ``rows`` of every array in ``arrays`` (None entries kept)."""
    if arrays is None:
        return None
    return tuple(None if a is None else np.asarray(a)[rows] for a in arrays)


def _bisect_steady(
    args: tuple, tail: tuple | None, prompt: tuple | None, goal: np.ndarray, clumps: tuple | None = None
) -> np.ndarray:
    """The safe loads of rows under Poisson arrivals at a steady rate (AT0-AT3; in clumps, AT5):
    bisection on the rate. ``args`` as :func:`attainment`'s after the rate, ``mu_rps`` last."""
    mu = args[-1]

    def meets(load: np.ndarray) -> np.ndarray:
        return attainment(load * mu, *args, tail=tail, prompt=prompt, clumps=clumps) >= goal

    return _largest_load(meets, len(mu))


def _largest_load(meets: Any, n: int) -> np.ndarray:
    """Per row, the largest load in (0, 1] at which ``meets(load)`` (rows' loads -> bool per row,
    decreasing in the load) holds: 1 where it holds at full load, else bisection from (0, 1)."""
    lo = np.zeros(n)
    hi = np.ones(n)
    full_ok = meets(np.ones(n))
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        ok = meets(mid)
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return np.where(full_ok, 1.0, lo)


def _bisect_modulated(
    args: tuple,
    tail: tuple | None,
    prompt: tuple | None,
    goal: np.ndarray,
    cv2: np.ndarray,
    clumps: tuple | None = None,
) -> np.ndarray:
    """The safe loads of rows whose rate moves (AT4): each row's attainment tabulated at
    ``_GRID_POINTS`` loads from 0 to 1 (linear in between, 0 beyond the full rate), averaged over
    the size-biased rate's nodes, and the largest load whose average keeps ``goal`` found by
    bisection (the average is decreasing in the load)."""
    mu = args[-1]
    grid = np.linspace(0.0, 1.0, _GRID_POINTS)
    table = np.column_stack([attainment(x * mu, *args, tail=tail, prompt=prompt, clumps=clumps) for x in grid])
    rows = np.arange(len(mu))[:, None]
    g, w = modulation_nodes(cv2)
    last = _GRID_POINTS - 1

    def average(load: np.ndarray) -> np.ndarray:
        x = load[:, None] * g * last
        j = np.minimum(np.floor(x).astype(np.int64), last - 1)
        f = x - j
        val = table[rows, j] * (1.0 - f) + table[rows, j + 1] * f
        return np.where(x <= last * (1 + 1e-12), val, 0.0) @ w

    return _largest_load(lambda load: average(load) >= goal, len(mu))


def node_matrix(buckets: pd.DataFrame, classes: pd.Series, rep: np.ndarray, column: str) -> np.ndarray:
    """Rows x nodes of each row's class lengths at quantile nodes (``buckets[column]``:
    ``input_nodes`` or ``output_nodes``, NaN-padded); a class without nodes has the one node
    ``rep`` (its representative length). ``buckets`` indexed by class."""
    nodes: dict[str, tuple[float, ...]] = {}
    if column in buckets.columns:
        nodes = {str(k): tuple(v) for k, v in buckets[column].items() if isinstance(v, tuple | list) and len(v)}
    width = max([len(v) for v in nodes.values()] + [1])
    out = np.full((len(classes), width), np.nan)
    out[:, 0] = rep
    for name, vals in nodes.items():
        rows = np.flatnonzero(classes.to_numpy() == name)
        if len(rows):
            out[rows, :] = np.nan
            out[np.ix_(rows, np.arange(len(vals)))] = np.asarray(vals, dtype=float)
    return out


def _prompt_args(configs: pd.DataFrame, slo: pd.DataFrame, b: pd.Series, idx: np.ndarray) -> tuple | None:
    """AT0's inputs for the rows ``idx`` (None without prompt nodes)."""
    if "input_nodes" not in slo.columns:
        return None
    rep = b.map(slo["input_tokens"]).astype(float).to_numpy()[idx]
    nodes = node_matrix(slo, b.iloc[idx].reset_index(drop=True), rep, "input_nodes")
    return (nodes, rep, *_hi(configs, idx, nodes))


def _hi(configs: pd.DataFrame, idx: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The rows' prefill of their class's longest prompt node and that node (``ttft_hi_s``, computed
    by the candidate search at ``buckets.prompt_hi_tokens``); ``(None, None)`` without the column."""
    if "ttft_hi_s" not in _columns(configs):
        return None, None
    return floats(configs, "ttft_hi_s")[idx], np.nanmax(np.where(np.isfinite(nodes), nodes, -np.inf), axis=1)


def _tail_args(
    configs: pd.DataFrame, slo: pd.DataFrame, b: pd.Series, idx: np.ndarray, out_tok: np.ndarray
) -> tuple | None:
    """AT3's inputs for the rows ``idx`` (None when the table has no step or stall times)."""
    if not {"step_s", "stall_s_per_req"} <= _columns(configs):
        return None
    tau = b.map(slo["tpot_slo_s"]).astype(float).to_numpy()
    nodes = node_matrix(slo, b.iloc[idx].reset_index(drop=True), out_tok[idx], "output_nodes")
    return (nodes, tau[idx], floats(configs, "step_s")[idx], np.nan_to_num(floats(configs, "stall_s_per_req")[idx]))


def _clump_args(configs: pd.DataFrame, slo: pd.DataFrame, b: pd.Series, idx: np.ndarray) -> tuple | None:
    """AT5's inputs for the rows ``idx``: their class's clump law (rows x K, zero-padded), planned
    rate, and the time a prefill holds the vPod (``stall_s_per_req``; NaN where the table has
    none); None when no class arrives in clumps (D13)."""
    if "clump_sizes" not in slo.columns:
        return None
    laws = {str(k): tuple(v) for k, v in slo["clump_sizes"].items() if isinstance(v, tuple | list) and len(v) > 1}
    if not laws:
        return None
    width = max(len(v) for v in laws.values())
    names = b.iloc[idx].astype(str).to_numpy()
    sizes = np.zeros((len(idx), width))
    sizes[:, 0] = 1.0
    for name, law in laws.items():
        rows = np.flatnonzero(names == name)
        if len(rows):
            sizes[rows, :] = 0.0
            sizes[np.ix_(rows, np.arange(len(law)))] = np.asarray(law, dtype=float)
    rate = slo["clump_rate_rps"] if "clump_rate_rps" in slo.columns else pd.Series(0.0, index=slo.index)
    occ = np.full(len(idx), np.nan)
    if "stall_s_per_req" in _columns(configs):
        occ = floats(configs, "stall_s_per_req")[idx]
    return sizes, pd.Series(names).map(rate).astype(float).fillna(0.0).to_numpy(), occ


def capacity_share(configs: pd.DataFrame, buckets: pd.DataFrame, util_cap: float | None, target: float) -> np.ndarray:
    """u_k of every row: the override ``util_cap`` when given, else the safe load for ``target``.
    The one rule the planner, the heuristics and the evaluators read."""
    if util_cap is not None:
        return np.full(len(configs), float(util_cap))
    return safe_load(configs, buckets, target)


def row_shares(configs: pd.DataFrame, coeffs: Any, options: Any) -> np.ndarray:
    """u_k of configuration rows for a planning run: ``options.util_cap`` when set, else the
    coefficients' ``util_cap`` when set, else the safe load for ``options.attainment``."""
    cap = options.util_cap if options.util_cap is not None else coeffs.util_cap
    return capacity_share(configs, coeffs.buckets, cap, float(options.attainment))
