"""The discrete-event core of the replay: vPods with continuous batching, driven by events.

Events (a heap of vPod events merged with the sorted arrivals and the epoch boundaries; at equal
times: epoch boundary, then vPod events in the order they were scheduled, then arrivals):

* **epoch boundary** ``e L``: every group is resized to the plan's ``n_vpods`` of epoch ``e``
  (0 for groups the epoch does not list; all groups at the end of the horizon);
* **vPod ready**: a created vPod starts admitting ``create_delay_s`` after its epoch boundary;
* **prefill end** and **decode-segment end** of a vPod;
* **arrival** of a request.

A vPod is at an *iteration boundary* when it is not executing. There it (1) prefills the head of
its FIFO queue, batch 1, when fewer than ``slots`` sequences are decoding (the prompt stalls
decode, as in ``formulations/roofline.md`` section 4); else (2) decodes all its sequences for
``k`` rounds, ``k`` = rounds until the next sequence finishes; else (3) idles. Between two events
the batch is fixed, so the ``k`` rounds take ``k tau`` with ``tau`` the roofline round at the
batch's mean context at the middle of the segment (exact for an uninterrupted segment within one
roof, because the roofline is affine in the context, see :mod:`neuscale_opt.replay.tables`). An
arrival that can be admitted cuts a running segment at the next round boundary
(``ceil((t - t0) / tau)`` rounds); the energy of the rounds done is charged at their own mean
context. So the loop does O(log) work per event, never one iteration per token.

Context bookkeeping is O(1): a vPod counts decode rounds ``D``; a sequence that joined at ``d0``
with prompt ``S`` has past context ``S + D - d0`` and finishes at round ``d0 + S_out``, so the
sum of contexts is ``base + n D`` with ``base = sum(S - d0)``, and finishing rounds sit in a heap.

Lifecycle: a vPod is *held* (chip-hours, static power) from its creation at an epoch boundary to
the end of its drain. Retired vPods stop admitting, finish their batch and queue, then are
released; a vPod still draining when its group grows again is taken back before a new one is
created; a vPod retired before it was ready is released at once.

Disaggregated serving (groups of prefill and of decode vPods): an arrival joins a prefill vPod
(same routing). A prefill vPod at an iteration boundary takes up to ``batch`` prompts of its FIFO
queue into one step (ragged batch, :meth:`StepTable.prefill_batch`); it is occupied for the step's
``t_stage`` and the prompts are done at its latency (**hand-off** event). Each then picks the
least-loaded ready decode vPod of its class (or waits in the class's decode queue until one is
ready) and its KV cache (``S_in x kv_bytes_per_token``) crosses the DCN in ``kv / min(BW_prefill,
BW_decode)``; the first token counts as delivered when the transfer ends (**join** event), and the
sequence joins the decode vPod's queue. A decode vPod admits queued sequences into its batch at
each round boundary while fewer than ``slots`` decode (no prefill stall) and decodes as above. A
vPod is released only when no hand-off it sends or receives is pending.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import binom

from neuscale_opt.replay.tables import StepTable
from neuscale_opt.roofline import stage_time_float

K_READY, K_PREFILL, K_DECODE, K_HANDOFF, K_JOIN = 0, 1, 2, 3, 4
IDLE, PREFILLING, DECODING = 0, 1, 2
PH_COLOCATED, PH_PREFILL, PH_DECODE = 0, 1, 2
PHASE_CODE = {"colocated": PH_COLOCATED, "prefill": PH_PREFILL, "decode": PH_DECODE}


class _Vpod:
    __slots__ = (
        "vid", "group", "ti", "tab", "slots", "inv", "ready", "retired", "queue", "load", "n_act", "fin", "D", "base",
        "state", "t0", "tau", "k", "pm0", "ver", "rid", "cut", "held_from", "held_to", "busy_s", "work_s", "energy_j",
        "phase", "inflight", "kv_j", "fixed_j", "surge", "surge_from", "surge_s",
    )  # fmt: skip

    def __init__(self, vid: int, group: _Group, t: float, ti: int, tab: StepTable) -> None:
        self.vid = vid
        self.group = group
        self.ti = ti  # its vPod type: the group's, or a stand-in's (surge guard)
        self.tab = tab
        self.slots = tab.vtype.slots
        self.inv = 1.0 / self.slots
        self.ready = False
        self.retired = False
        self.queue: deque[int] = deque()
        self.load = 0  # sequences prefilling, decoding or queued here
        self.n_act = 0  # sequences decoding
        self.fin: list[tuple[int, int]] = []  # (finishing round, request)
        self.D = 0  # decode rounds done
        self.base = 0  # sum over decoding sequences of (prompt - joining round)
        self.state = IDLE
        self.t0 = 0.0
        self.tau = 0.0
        self.k = 0
        self.pm0 = 0.0
        self.ver = 0
        self.rid = -1
        self.cut = False
        self.held_from = t
        self.held_to = math.nan
        self.busy_s = 0.0  # s executing (prefill or decode)
        self.work_s = 0.0  # s of slot-weighted work: prefill time + decode time x n / slots
        self.energy_j = 0.0
        self.phase = group.phase
        self.inflight = 0  # KV hand-offs pending: prefilled, not yet sent (prefill) / in transit (decode)
        self.kv_j = 0.0  # J of DCN energy of KV hand-offs (already in energy_j)
        self.fixed_j = 0.0  # J of weight streaming of the batched steps (E2; already in energy_j)
        self.surge = False  # made (or taken back from draining) by the surge guard
        self.surge_from = math.nan  # since when it serves beyond the plan (NaN: it does not now)
        self.surge_s = 0.0  # s served beyond the plan before that (until a boundary kept it)


#: routing key of a vPod: prompts waiting x WAITING + sequences per slot (at most 1)
WAITING = 1e6


class _Group:
    __slots__ = (
        "key", "type_index", "tab", "live", "ready", "draining", "buckets", "phase", "planned", "full_in",
        "arrived", "late", "rate", "rates", "granted", "mine", "alts",
    )  # fmt: skip

    def __init__(self, key: str, type_index: int, tab: StepTable) -> None:
        self.key = key
        self.type_index = type_index
        self.tab = tab
        self.live: list[_Vpod] = []  # not retired (ready or being created), by vid
        self.ready: list[_Vpod] = []  # ready and admitting, by vid
        self.draining: list[_Vpod] = []  # retired, still working
        self.buckets: tuple[int, ...] = ()
        self.phase = PHASE_CODE[tab.vtype.phase]
        self.planned = 0  # vPods the plan gives the group in the current epoch
        self.full_in = -1  # the epoch boundary index (engine's ``ei``) in which the fleet had no room for one more
        self.arrived: deque[float] = deque()  # surge guard: arrival times routed here in its window
        self.late: deque[float] = deque()  # ... and those of them estimated late
        self.rate = math.inf  # req/s the plan routes to the group this epoch (inf: a rate not given)
        self.rates: tuple[float, ...] = ()  # planned req/s of each of its classes this epoch
        self.granted: dict[int, int] = {}  # surge vPods of each type the fleet gave the group room for in this epoch
        self.mine: list[_Vpod] = []  # surge vPods made in that room (live or draining or released)
        self.alts: list[int] | None = None  # stand-in types for this epoch's classes (None: not ranked yet)


class _Lanes:
    """The groups serving each class in the current epoch, with the class's planned rate on each
    (the split's weights) and the smooth weighted round-robin's credits (``routing = "plan"``)."""

    __slots__ = ("groups", "weight", "credit")

    def __init__(self, n_buckets: int) -> None:
        self.groups: list[list[_Group]] = [[] for _ in range(n_buckets)]
        self.weight: list[list[float]] = [[] for _ in range(n_buckets)]
        self.credit: list[list[float]] = [[] for _ in range(n_buckets)]

    def clear(self) -> None:
        for lists in (self.groups, self.weight, self.credit):
            for x in lists:
                x.clear()

    def add(self, b: int, g: _Group, weight: float) -> None:
        self.groups[b].append(g)
        self.weight[b].append(weight)
        self.credit[b].append(0.0)


@dataclass(frozen=True)
class EpochGroup:
    """One group of one epoch, as the engine reads it."""

    key: str
    type_index: int
    n_vpods: int
    buckets: tuple[int, ...]  # bucket codes
    rates: tuple[float, ...] = ()  # planned req/s of each of those classes on the group (NaN: none given)


@dataclass(frozen=True)
class EngineResult:
    """Raw outcome: per-request times (NaN when never served) and per-vPod holding records."""

    start_s: np.ndarray  # prefill start
    first_token_s: np.ndarray
    finish_s: np.ndarray
    vpod: np.ndarray  # vPod id (-1 = never served)
    vpod_group: list[str]  # per vPod
    vpod_type_index: np.ndarray
    held_from_s: np.ndarray
    held_to_s: np.ndarray
    busy_s: np.ndarray
    work_s: np.ndarray
    energy_dyn_j: np.ndarray
    events: int
    decode_vpod: np.ndarray  # disaggregated: decode vPod id (-1 = colocated or never decoded)
    kv_transfer_s: np.ndarray  # disaggregated: KV hand-off time (NaN otherwise)
    energy_kv_j: np.ndarray  # per vPod: DCN energy of KV hand-offs (part of energy_dyn_j)
    energy_busy_j: np.ndarray  # per vPod: weight streaming of the batched steps (E2, part of energy_dyn_j)
    vpod_surge: np.ndarray  # per vPod: made by the surge guard
    vpod_surge_s: np.ndarray  # per vPod: s held beyond the plan (until a boundary keeps it, or its release)
    vpod_standin: np.ndarray  # per vPod: a stand-in (the guard's vPod of another type than its group's)


def run(
    arrival: list[float],
    s_in: list[int],
    s_out: list[int],
    bucket: list[int],
    n_buckets: int,
    schedule: list[list[EpochGroup]],
    epoch_s: float,
    tables: list[StepTable],
    create_delay_s: float,
    warm_start: bool,
    on_epoch: Callable[[int], object] | None = None,
    routing: str = "plan",
    overflow: list[frozenset[int]] | None = None,
    ttft_target: list[float] | None = None,
    lead_s: float = 0.0,
    tpot_target: list[float] | None = None,
    e2e_target: list[float] | None = None,
    surge: Callable[[int, int], bool] | None = None,
    surge_growth: float = 2.0,
    surge_window_s: float = 60.0,
    surge_tolerance: float = 0.01,
    surge_alpha: float = 0.01,
    surge_retire: bool = True,
    surge_to_rate: bool = True,
    standin: Any | None = None,
) -> EngineResult:
    """Replay requests (sorted by arrival) against ``schedule[e]`` for epochs ``e = 0 .. E-1``;
    ``on_epoch(1)`` (e.g. a progress bar's ``update``) is called as each epoch boundary is reached.
    ``routing``: ``"plan"`` splits each class's requests over its groups in the proportions of the
    planned rates (smooth weighted round-robin over the groups with a ready vPod, then the best vPod
    of the chosen group; spilling over to another group's vPod without a waiting prompt when every
    vPod of the chosen group has one); ``"load"`` sends each to the best vPod of all its groups.
    ``overflow`` (per vPod type, the classes its configuration serves within their SLO) and
    ``ttft_target`` (per class, s): an arrival whose own vPod would give its first token after its
    TTFT target (``start_wait`` plus its prefill) joins instead the vPod of another class's colocated
    group, of a type that serves its class, that gives it soonest, if that one has no prompt waiting
    and meets the target (the router coalesces at run time what the plan sized apart); None: never.
    ``surge(e, type_index)`` (the surge guard; None: off): a request of a group is *late* when on
    arrival (not queued while its class had no vPod) it would get its first token after its TTFT
    target on the group's best vPod and no overflow host takes it, when its prefill starts on the
    colocated vPod it joined on arrival too late for its TTFT target (an arrival of the epoch
    running), or when it finishes on a colocated vPod past its ``tpot_target`` (per output token) or
    ``e2e_target`` (per class, s), where alone there (its prefill at once; rounds of batch 1 at its
    mean context) it would have met them, not counted already; when the late requests of the group's
    last ``surge_window_s`` are more than a share ``surge_tolerance`` (the SLO-attainment target's
    complement) of its ``n`` arrivals there explains (more than the ``1 - surge_alpha`` quantile of
    a binomial count of ``n`` draws at that share), the group gets the vPods its window's arrival
    rate asks for at the plan's rate per vPod (``surge_to_rate``; at least one, one where the plan
    gives no rate or without it), ready ``create_delay_s`` later (a guard vPod of the group still
    draining is taken back first), if no vPod of the group is being created, they are ready before
    the epoch ends, the group holds at most ``ceil(surge_growth x`` its planned vPods``)``, and
    ``surge`` says the fleet has room for each in epoch ``e`` (and takes it: room given to a group
    stays its own until the epoch ends); the next epoch boundary resizes every group to its plan
    again. ``standin`` (None: the group's own type only; see
    :class:`neuscale_opt.replay.surge.StandInTypes`): where ``surge`` has no room for a colocated
    group's own type, its vPod is of the first type of ``standin.order(type, classes, rates)`` with
    room (its step table ``standin.table(type)``, the classes it serves ``standin.serves[type]``,
    which the overflow router also reads for it); a stand-in drains at the next boundary (the next
    plan's room is its own vPods' first) and counts beyond the plan all its life. Late requests are
    counted only while the group may grow (none while a vPod of it is being created, none after
    the plan's last boundary), and the window runs across epoch boundaries. ``surge_retire``:
    before an arrival of one of its classes is routed, a group holding more vPods than planned
    retires (drains) its least-loaded guard vPod ready for ``surge_window_s`` once the surge is
    over: no late request and no prompt waiting in the group, and at most the plan's rate for the
    group (the sum of its classes' planned rates; never where the plan gives none) arrived in the
    last ``surge_window_s``."""
    n_req = len(arrival)
    nan = math.nan
    start = [nan] * n_req
    first = [nan] * n_req
    finish = [nan] * n_req
    where = [-1] * n_req
    where_dec = [-1] * n_req
    xfer = [nan] * n_req
    handoffs: list[list[int] | None] = []
    heap: list[tuple[float, int, int, int, int]] = []
    seq = 0
    vpods: list[_Vpod] = []
    groups: dict[str, _Group] = {}
    route = _Lanes(n_buckets)  # colocated / prefill groups of each class
    droute = _Lanes(n_buckets)  # decode groups
    split = routing == "plan"
    guard = surge is not None
    watch = guard and (tpot_target is not None or e2e_target is not None)
    flagged = bytearray(n_req)  # surge guard: counted late already
    routed = bytearray(n_req)  # surge guard: joined a vPod on arrival (not the class's queue)
    if tpot_target is None:
        tpot_target = [math.inf] * n_buckets
    if e2e_target is None:
        e2e_target = [math.inf] * n_buckets
    allowed: dict[int, int] = {}  # surge guard: late arrivals among n that the target explains
    ei = 0  # the next epoch boundary's index (the epoch running is ei - 1)
    alt: list[list[_Group]] = [[] for _ in range(n_buckets)]  # overflow hosts of each class this epoch
    if overflow is not None and standin is not None:
        overflow = standin.serves  # the plan's types, then each stand-in type as it is registered
    if ttft_target is None:
        ttft_target = [math.inf] * n_buckets
    pending: list[deque[int]] = [deque() for _ in range(n_buckets)]
    dpending: list[deque[int]] = [deque() for _ in range(n_buckets)]  # prefilled, waiting for a decode vPod
    push = heapq.heappush
    pop = heapq.heappop
    ceil = math.ceil
    n_events = 0

    def release(v: _Vpod, t: float) -> None:
        v.held_to = t
        g = v.group
        if v in g.draining:
            g.draining.remove(v)

    def next_step(v: _Vpod, t: float) -> None:
        """``v`` is at an iteration boundary at ``t``: prefill, decode or idle."""
        nonlocal seq
        tab = v.tab
        ph = v.phase
        if ph == PH_PREFILL:
            q = v.queue
            if q:
                rids = [q.popleft() for _ in range(min(len(q), tab.vtype.batch))]
                stall, lat, e = tab.prefill_batch([s_in[r] for r in rids])
                for r in rids:
                    start[r] = t
                v.energy_j += e
                v.fixed_j += tab.pre_fixed_j
                v.busy_s += stall
                v.work_s += stall * len(rids) / tab.vtype.batch
                v.state = PREFILLING
                v.inflight += len(rids)
                v.ver += 1
                seq += 1
                push(heap, (t + stall, seq, v.vid, v.ver, K_PREFILL))
                seq += 1
                push(heap, (t + lat, seq, v.vid, len(handoffs), K_HANDOFF))
                handoffs.append(rids)
            else:
                v.state = IDLE
                if v.retired and not v.inflight:
                    release(v, t)
            return
        if ph == PH_DECODE:
            q = v.queue
            while q and v.n_act < v.slots:
                rid = q.popleft()
                d = v.D
                heapq.heappush(v.fin, (d + s_out[rid], rid))
                v.base += s_in[rid] - d
                v.n_act += 1
        if ph == PH_COLOCATED and v.queue and v.n_act < v.slots:
            rid = v.queue.popleft()
            s = s_in[rid]
            stall = tab.pre_stall[s]
            start[rid] = t
            first[rid] = t + tab.pre_lat[s]
            if guard and routed[rid] and not flagged[rid]:
                ttft_late(v, rid, t)
            v.energy_j += tab.pre_energy[s]
            v.busy_s += stall
            v.work_s += stall
            v.state = PREFILLING
            v.rid = rid
            v.ver += 1
            seq += 1
            push(heap, (t + stall, seq, v.vid, v.ver, K_PREFILL))
        elif v.n_act:
            n = v.n_act
            k = v.fin[0][0] - v.D
            pm0 = (v.base + n * v.D) / n
            pm = pm0 + (k - 1) * 0.5
            c = tab.c0[n] + tab.c1[n] * pm
            h = tab.h0[n] + tab.h1[n] * pm
            i = tab.ici[n]
            tau = tab.vtype.pp * stage_time_float(c, h, i, tab.ici_serial, tab.stage_overhead_s) + tab.p2p[n]
            v.state = DECODING
            v.t0 = t
            v.tau = tau
            v.k = k
            v.pm0 = pm0
            v.cut = False
            v.ver += 1
            seq += 1
            push(heap, (t + k * tau, seq, v.vid, v.ver, K_DECODE))
        else:
            v.state = IDLE
            if v.retired and not v.queue and not v.inflight:
                release(v, t)

    def assign(rid: int, v: _Vpod, t: float) -> None:
        v.load += 1
        where[rid] = v.vid
        enqueue(rid, v, t)

    def enqueue(rid: int, v: _Vpod, t: float) -> None:
        nonlocal seq
        v.queue.append(rid)
        st = v.state
        if st == IDLE:
            next_step(v, t)
        elif st == DECODING and not v.cut and v.n_act < v.slots:
            # admit at the next round boundary
            v.cut = True
            m = ceil((t - v.t0) / v.tau)
            if m < v.k:
                v.k = m
                v.ver += 1
                seq += 1
                te = v.t0 + m * v.tau
                push(heap, (te if te > t else t, seq, v.vid, v.ver, K_DECODE))

    def best_in(gs) -> tuple[_Vpod | None, float]:
        """The vPod of groups ``gs`` with the fewest prompts waiting (queued or prefilling: a prompt
        routed behind others waits for their prefills), then the fewest sequences per slot."""
        best = None
        best_key = math.inf
        for g in gs:
            for v in g.ready:
                key = (len(v.queue) + (v.state == PREFILLING)) * WAITING + v.load * v.inv
                if key < best_key:
                    best, best_key = v, key
        return best, best_key

    def start_wait(v: _Vpod, t: float) -> float:
        """Estimated wait before a prompt routed to ``v`` at ``t`` starts its prefill: what is left
        of the prefill in progress, the prefill stalls of the prompts queued ahead, plus, when the
        slots are taken, the decode rounds until enough sequences finish to free one for it (at
        the current round time)."""
        tab = v.tab
        w = 0.0
        if v.state == PREFILLING and v.rid >= 0:  # the prompt in prefill (colocated: one at a time)
            left = start[v.rid] + tab.pre_stall[s_in[v.rid]] - t
            if left > 0.0:
                w = left
        for r in v.queue:
            w += tab.pre_stall[s_in[r]]
        need = v.n_act + len(v.queue) - v.slots + 1  # sequences that must finish to free a slot
        if need > 0 and v.fin:
            ahead = ((v.fin[0] if need == 1 else heapq.nsmallest(need, v.fin)[-1])[0] - v.D) * v.tau
            if v.state == DECODING:
                ahead -= t - v.t0
            if ahead > 0.0:
                w += ahead
        return w

    def best_vpod(b: int, lanes: _Lanes = route, rid: int = -1, t: float = 0.0, arriving: bool = False) -> _Vpod | None:
        """The vPod request ``rid`` of class ``b`` joins at ``t``: :func:`own_vpod`; with
        ``overflow``, when that one (or none ready) would give its first token after its TTFT
        target, the vPod of a group of another class whose type serves ``b`` that gives it soonest,
        if that one meets the target and has no prompt waiting. Not estimated where that one has a
        free slot and no prompt waiting or prefilling (it starts at the next round boundary)."""
        if arriving and surge_retire:
            for g in lanes.groups[b]:
                if len(g.live) > g.planned:
                    settle(g, t)
        v = own_vpod(b, lanes)
        if arriving and v is not None:
            seen(v.group, t)
        if rid < 0 or (v is not None and not v.queue and v.state != PREFILLING and v.n_act < v.slots):
            return v
        growing = arriving and v is not None and may_grow(v.group, t)
        if not (alt[b] or growing):
            return v
        s = s_in[rid]
        deadline = arrival[rid] + ttft_target[b]
        if v is not None and t + start_wait(v, t) + v.tab.pre_lat[s] <= deadline:
            return v
        host, first_at = None, deadline
        for g in alt[b]:
            for h in g.ready:
                if h.queue or h.state == PREFILLING or (h.ti != g.type_index and b not in overflow[h.ti]):
                    continue
                at = t + start_wait(h, t) + h.tab.pre_lat[s]
                if at <= first_at:
                    host, first_at = h, at
        if host is None and growing:
            flagged[rid] = 1
            late(v.group, t)
        return v if host is None else host

    def late(g: _Group, t: float) -> None:
        """A late arrival (or a request finished past its TPOT or end-to-end target) of ``g`` at
        ``t``, while ``g`` may grow: the guard's test, and its growth."""
        g.late.append(t)
        n = len(g.arrived)
        k = allowed.get(n)
        if k is None:
            k = allowed[n] = int(binom.isf(surge_alpha, n, surge_tolerance))
        if len(g.late) > k:
            add = 1
            if surge_to_rate and 0.0 < g.rate < math.inf:
                add = ceil(g.planned * n / (g.rate * surge_window_s)) - len(g.live)
            add = max(1, min(add, ceil(surge_growth * g.planned - 1e-9) - len(g.live)))
            for _ in range(add):
                if not grow(g, t):
                    break

    def finished(v: _Vpod, rid: int, t: float) -> None:
        """``rid`` finished on colocated ``v`` at ``t``: late if its TPOT or end-to-end time is over
        target while alone on ``v`` (decode rounds of batch 1 at its mean context) it would have met
        both, and its arrival was not already counted late (the guard's lagging signal)."""
        if flagged[rid]:
            return
        b = bucket[rid]
        so = s_out[rid]
        if (t - first[rid]) > tpot_target[b] * so or t - arrival[rid] > e2e_target[b]:
            # only a miss the load made: alone on the vPod the request would have met its targets
            tab = v.tab
            tau = tab.decode_step(1, s_in[rid] + 0.5 * (so - 1))[0]
            if tau > tpot_target[b] or tab.pre_lat[s_in[rid]] + so * tau > e2e_target[b]:
                return
            count_late(v.group, rid, t)

    def ttft_late(v: _Vpod, rid: int, t: float) -> None:
        """``rid``, routed to ``v`` on arrival, starts its prefill on colocated ``v`` at ``t``: late
        if its first token comes after its TTFT target while alone on ``v`` (its prefill at once)
        it would have met it, and its arrival was not already counted late (the estimate at
        arrival is skipped on a vPod with a free slot, and it forecasts the vPod's next seconds
        from what it holds then). Not counted: a request that waited in its class's queue for
        want of a vPod (its wait is no group's load), or that arrived before the epoch began (a
        backlog of an earlier plan's epoch, which clears; the guard judges the epoch's arrivals)."""
        b = bucket[rid]
        lat = v.tab.pre_lat[s_in[rid]]
        if first[rid] - arrival[rid] <= ttft_target[b] or lat > ttft_target[b]:
            return
        if arrival[rid] < (ei - 1) * epoch_s:  # a backlog of an earlier epoch's plan: it clears
            return
        count_late(v.group, rid, t)

    def count_late(g: _Group, rid: int, t: float) -> None:
        """``rid``, a miss the load of ``g`` made, found at ``t`` (after its arrival): late for the
        guard while ``g`` may grow."""
        forget(g, t)
        if may_grow(g, t):
            flagged[rid] = 1
            late(g, t)

    def seen(g: _Group, t: float) -> None:
        """An arrival routed to ``g`` at ``t``: the guard's window moves on."""
        g.arrived.append(t)
        forget(g, t)

    def forget(g: _Group, t: float) -> None:
        old = t - surge_window_s
        while g.arrived and g.arrived[0] < old:
            g.arrived.popleft()
        while g.late and g.late[0] < old:
            g.late.popleft()

    def settle(g: _Group, t: float) -> None:
        """Before routing an arrival of one of ``g``'s classes (``g`` holds more vPods than its
        plan): when the surge is over (see ``surge_retire`` above), retire its least-loaded surge
        vPod ready for ``surge_window_s``, if no prompt waits in the group."""
        forget(g, t)
        if g.late or len(g.arrived) > g.rate * surge_window_s:
            return
        pick = None
        for v in g.ready:
            if v.queue or v.state == PREFILLING:
                return
            old = t - v.held_from >= create_delay_s + surge_window_s
            if old and v in g.mine and (pick is None or v.load < pick.load):
                pick = v
        if pick is not None:
            retire(pick, t)

    def may_grow(g: _Group, t: float) -> bool:
        """The surge guard's conditions short of the fleet's room (see ``surge`` above): an epoch of
        the plan running (not the drain after the last boundary), no vPod of ``g`` being created,
        one created now ready before the epoch ends, the growth bound not reached, and the fleet
        not found full for its type in this epoch (nothing is freed within an epoch)."""
        return (
            ei <= n_epochs
            and len(g.live) == len(g.ready)
            and t + create_delay_s < ei * epoch_s
            and len(g.live) < surge_growth * g.planned
            and g.full_in != ei
        )

    def grow(g: _Group, t: float) -> bool:
        """The surge guard: one more vPod for ``g``: a vPod of it still draining taken back (a surge
        vPod first, else one of its own type a boundary retired; beyond the plan from now), else a
        new one in room the fleet gave the group earlier in this epoch or gives it now: of
        the group's type, else (a colocated group, ``standin`` given) of the first stand-in type
        with room (:class:`neuscale_opt.replay.surge.StandIns`)."""
        back = [v for v in g.draining if v in g.mine] or [v for v in g.draining if v.ti == g.type_index]
        if back:  # a draining vPod of its own serves again at once (it holds its chips still)
            v = min(back, key=_vid)
            take_back(v)
        else:
            ti = room_for(g)
            if ti < 0:
                g.full_in = ei
                return False
            v = create(g, ti, t, False)
        v.surge = True
        if math.isnan(v.surge_from):
            v.surge_from = t
        if v not in g.mine:
            g.mine.append(v)
        return True

    def room_for(g: _Group) -> int:
        """The type of the guard's next vPod for ``g`` (-1: no room): room granted to it earlier in
        this epoch and free again, or granted now; its own type first, then its stand-ins'."""
        for ti in (g.type_index, *alternatives(g)):
            held = sum(1 for v in g.mine if v.ti == ti and math.isnan(v.held_to))
            if held < g.granted.get(ti, 0):
                return ti
            if surge(ei - 1, ti):
                g.granted[ti] = g.granted.get(ti, 0) + 1
                return ti
        return -1

    def alternatives(g: _Group) -> list[int]:
        """Stand-in types of ``g`` for the classes it serves this epoch (none for a prefill or
        decode group, or without ``standin``)."""
        if g.alts is None:
            ok = standin is not None and g.phase == PH_COLOCATED and bool(g.buckets)
            g.alts = standin.order(g.type_index, g.buckets, g.rates) if ok else []
        return g.alts

    def create(g: _Group, ti: int, t: float, ready_now: bool, ready_at: float | None = None) -> _Vpod:
        """A new vPod of type ``ti`` in ``g``, ready now or at ``ready_at`` (default
        ``create_delay_s`` from ``t``)."""
        nonlocal seq
        tab = g.tab if ti == g.type_index else standin.table(ti)
        v = _Vpod(len(vpods), g, t, ti, tab)
        vpods.append(v)
        g.live.append(v)
        if ready_now:
            make_ready(v)
        else:
            v.ver += 1
            seq += 1
            push(heap, (t + create_delay_s if ready_at is None else ready_at, seq, v.vid, v.ver, K_READY))
        return v

    def own_vpod(b: int, lanes: _Lanes) -> _Vpod | None:
        gs = lanes.groups[b]
        if not (split and len(gs) > 1):
            return best_in(gs)[0]
        # the group whose credit is largest among those with a ready vPod, credits raised by their
        # planned rates (scaled by the share of the group's planned vPods that is ready: vPods
        # still being created take no share) and the chosen one lowered by their sum (nginx's
        # smooth weighted round-robin)
        ws, cr = lanes.weight[b], lanes.credit[b]
        pick, total = -1, 0.0
        for i, g in enumerate(gs):
            if g.ready:
                w = ws[i] * min(len(g.ready) / g.planned, 1.0) if g.planned > 0 else ws[i]
                cr[i] += w
                total += w
                if pick < 0 or cr[i] > cr[pick]:
                    pick = i
        if pick < 0:
            return None
        cr[pick] -= total
        v, key = best_in((gs[pick],))
        if key >= WAITING:  # every vPod of the chosen group has a prompt waiting: spill over to one without
            other, other_key = best_in(gs)
            if other_key < WAITING:
                j = gs.index(other.group)
                cr[pick] += total
                cr[j] -= total
                return other
        return v

    def drain_pending(bs: tuple[int, ...] | range, t: float) -> None:
        for b in bs:
            q = pending[b]
            while q:
                v = best_vpod(b, route, q[0], t)
                if v is None:
                    break
                assign(q.popleft(), v, t)

    def send(rid: int, dv: _Vpod, t: float) -> None:
        """Hand ``rid``'s KV cache from its prefill vPod to decode vPod ``dv`` over the DCN."""
        nonlocal seq
        pv = vpods[where[rid]]
        ptab, dtab = pv.tab, dv.tab
        kv = s_in[rid] * ptab.kv_bytes_per_token
        bw = ptab.dcn_bytes_per_s if ptab.dcn_bytes_per_s < dtab.dcn_bytes_per_s else dtab.dcn_bytes_per_s
        x = kv / bw
        e_send = kv * ptab.dcn_j_per_byte
        e_recv = kv * dtab.dcn_j_per_byte
        pv.energy_j += e_send
        pv.kv_j += e_send
        dv.energy_j += e_recv
        dv.kv_j += e_recv
        xfer[rid] = x
        first[rid] = t + x
        where_dec[rid] = dv.vid
        dv.load += 1
        dv.inflight += 1
        seq += 1
        push(heap, (t + x, seq, dv.vid, rid, K_JOIN))

    def hand_off(rid: int, t: float) -> None:
        if s_out[rid] == 0:  # nothing to decode: the answer is complete at the prefill
            first[rid] = t
            finish[rid] = t
            return
        dv = best_vpod(bucket[rid], droute)
        if dv is None:
            dpending[bucket[rid]].append(rid)
        else:
            send(rid, dv, t)

    def drain_dpending(bs: tuple[int, ...] | range, t: float) -> None:
        for b in bs:
            q = dpending[b]
            while q:
                dv = best_vpod(b, droute)
                if dv is None:
                    break
                send(q.popleft(), dv, t)

    def make_ready(v: _Vpod) -> None:
        v.ready = True
        g = v.group
        g.ready.append(v)
        g.ready.sort(key=_vid)

    def retire(v: _Vpod, t: float) -> None:
        g = v.group
        v.retired = True
        g.live.remove(v)
        if not v.ready:  # cancelled while being created: its ready event is dropped
            v.ver += 1
            v.held_to = t
            return
        g.ready.remove(v)
        if v.state == IDLE and not v.queue and not v.n_act and not v.inflight:
            v.held_to = t
        else:
            g.draining.append(v)

    def take_back(v: _Vpod) -> None:
        """A draining vPod of its group serves again, ready at once."""
        g = v.group
        g.draining.remove(v)
        v.retired = False
        g.live.append(v)
        g.live.sort(key=_vid)
        make_ready(v)

    def own(g: _Group) -> list[_Vpod]:
        """The live vPods of ``g``'s own type (not the guard's stand-ins)."""
        return [v for v in g.live if v.ti == g.type_index]

    def resize(g: _Group, n: int, t: float, ready_now: bool, ready_at: float | None = None) -> None:
        """``g`` to ``n`` live vPods of its own type (draining ones taken back first); its
        stand-ins are left as they are."""
        mine = own(g)
        while len(mine) < n:
            back = [v for v in g.draining if v.ti == g.type_index]
            if not back:
                break
            v = min(back, key=_vid)
            take_back(v)
            mine.append(v)
        while len(mine) < n:
            mine.append(create(g, g.type_index, t, ready_now, ready_at))
        excess = len(mine) - n
        if excess > 0:
            creating = sorted((v for v in mine if not v.ready), key=_vid, reverse=True)
            serving = sorted((v for v in mine if v.ready), key=lambda v: (v.load, -v.vid))
            for v in (creating + serving)[:excess]:
                retire(v, t)

    def group_of(eg: EpochGroup) -> _Group:
        """The replay's group of the plan's ``eg``, made the first time an epoch lists it."""
        g = groups.get(eg.key)
        if g is None:
            g = groups[eg.key] = _Group(eg.key, eg.type_index, tables[eg.type_index])
        return g

    def prewarm(e: int, t: float) -> None:
        """``lead_s`` before boundary ``e`` (>= 1): create the vPods epoch ``e`` adds to its groups
        (taking back draining ones first), ready at the boundary; nothing else changes (routes,
        shrinking, the classes served) until the boundary."""
        for eg in schedule[e]:
            g = group_of(eg)
            if eg.n_vpods > len(own(g)):
                resize(g, eg.n_vpods, t, False, ready_at=e * epoch_s)

    def epoch(e: int, t: float) -> None:
        target = schedule[e] if e < len(schedule) else []
        wanted = {eg.key for eg in target}
        for key in sorted(groups):
            if key not in wanted:
                g = groups[key]
                resize(g, 0, t, False)
                for v in list(g.live):  # its stand-ins
                    retire(v, t)
                g.buckets = ()
        ready_now = create_delay_s <= 0.0 or (e == 0 and warm_start)
        for eg in target:
            g = group_of(eg)
            g.buckets = eg.buckets
            g.planned = eg.n_vpods
            g.rates = eg.rates
            g.rate = math.fsum(eg.rates) if eg.rates and all(r >= 0.0 for r in eg.rates) else math.inf
            g.alts = None
            g.granted = {}
            g.mine = []
            for v in [v for v in g.live if v.ti != g.type_index]:  # a stand-in drains at the boundary
                retire(v, t)
            resize(g, eg.n_vpods, t, ready_now)
        for g in groups.values():  # a surge vPod of its own type a boundary keeps is one of the plan's from now on
            for v in g.live:
                if not math.isnan(v.surge_from) and v.ti == g.type_index:
                    v.surge_s += t - v.surge_from
                    v.surge_from = math.nan
        route.clear()
        droute.clear()
        for eg in target:
            g = groups[eg.key]
            lanes = droute if g.phase == PH_DECODE else route
            rates = eg.rates or (math.nan,) * len(eg.buckets)
            for b, r in zip(eg.buckets, rates, strict=True):
                lanes.add(b, g, r if r == r and r >= 0.0 else 1.0)  # no rate given: equal shares
        if overflow is not None:
            host = [groups[eg.key] for eg in target if groups[eg.key].phase == PH_COLOCATED]
            for b in range(n_buckets):
                own = route.groups[b]
                alt[b] = [g for g in host if b in overflow[g.type_index] and g not in own]
        drain_pending(range(n_buckets), t)
        drain_dpending(range(n_buckets), t)
        for g in groups.values():
            for v in g.ready:
                if v.state == IDLE and v.queue:
                    next_step(v, t)

    n_epochs = len(schedule)
    i_arr = 0
    inf = math.inf
    t_ep = 0.0  # the next epoch boundary (inf past the last)
    pre_done = 0  # epochs whose vPods were pre-warmed (boundaries 1 .. pre_done)
    while True:
        t_arr = arrival[i_arr] if i_arr < n_req else inf
        t_ev = heap[0][0] if heap else inf
        if lead_s > 0.0 and pre_done < ei < n_epochs:
            t_pre = ei * epoch_s - lead_s
            if t_pre <= t_ev and t_pre <= t_arr:
                pre_done = ei
                prewarm(ei, t_pre)
                continue
        if t_ep <= t_ev and t_ep <= t_arr:
            if t_ep == inf:
                break
            epoch(ei, t_ep)
            ei += 1
            t_ep = ei * epoch_s if ei <= n_epochs else inf
            if on_epoch is not None and ei <= n_epochs:
                on_epoch(1)
            continue
        if t_ev <= t_arr:
            t, _, vid, ver, kind = pop(heap)
            v = vpods[vid]
            if kind == K_HANDOFF:  # ver = batch index
                n_events += 1
                rids = handoffs[ver]
                handoffs[ver] = None
                v.inflight -= len(rids)
                v.load -= len(rids)
                for rid in rids:
                    hand_off(rid, t)
                if v.retired and v.state == IDLE and not v.queue and not v.inflight and math.isnan(v.held_to):
                    release(v, t)
                continue
            if kind == K_JOIN:  # ver = request
                n_events += 1
                v.inflight -= 1
                enqueue(ver, v, t)
                continue
            if ver != v.ver:
                continue
            n_events += 1
            if kind == K_DECODE:
                k = v.k
                if k:
                    n = v.n_act
                    tab = v.tab
                    v.energy_j += k * (tab.e0[n] + tab.e1[n] * (v.pm0 + (k - 1) * 0.5))
                    v.fixed_j += k * tab.fixed_j[n]
                    v.busy_s += t - v.t0
                    v.work_s += (t - v.t0) * n / v.slots
                    v.D += k
                fin = v.fin
                d = v.D
                while fin and fin[0][0] <= d:
                    fs, rid = pop(fin)
                    finish[rid] = t
                    if watch and v.phase == PH_COLOCATED:
                        finished(v, rid, t)
                    v.n_act -= 1
                    v.load -= 1
                    v.base -= s_in[rid] - (fs - s_out[rid])
                v.state = IDLE
                next_step(v, t)
            elif kind == K_PREFILL and v.phase == PH_PREFILL:
                v.state = IDLE
                next_step(v, t)
            elif kind == K_PREFILL:
                rid = v.rid
                v.rid = -1
                so = s_out[rid]
                if so > 0:
                    d = v.D
                    heapq.heappush(v.fin, (d + so, rid))
                    v.base += s_in[rid] - d
                    v.n_act += 1
                else:
                    finish[rid] = first[rid]
                    v.load -= 1
                v.state = IDLE
                next_step(v, t)
            else:  # K_READY
                make_ready(v)
                if v.phase == PH_DECODE:
                    drain_dpending(v.group.buckets, t)
                else:
                    drain_pending(v.group.buckets, t)
                if v.state == IDLE:
                    next_step(v, t)
            continue
        n_events += 1  # an arrival: to the best vPod of its class, or the class's queue
        b = bucket[i_arr]
        v = best_vpod(b, route, i_arr, t_arr, guard)
        if v is None:
            pending[b].append(i_arr)
        else:
            routed[i_arr] = 1
            assign(i_arr, v, t_arr)
        i_arr += 1

    for v in vpods:  # nothing should be left held; close defensively at the last event time
        if math.isnan(v.held_to):
            v.held_to = max(v.held_from, n_epochs * epoch_s)
    return EngineResult(
        start_s=np.asarray(start, dtype=np.float64),
        first_token_s=np.asarray(first, dtype=np.float64),
        finish_s=np.asarray(finish, dtype=np.float64),
        vpod=np.asarray(where, dtype=np.int64),
        vpod_group=[v.group.key for v in vpods],
        vpod_type_index=np.asarray([v.ti for v in vpods], dtype=np.int64),
        held_from_s=np.asarray([v.held_from for v in vpods], dtype=np.float64),
        held_to_s=np.asarray([v.held_to for v in vpods], dtype=np.float64),
        busy_s=np.asarray([v.busy_s for v in vpods], dtype=np.float64),
        work_s=np.asarray([v.work_s for v in vpods], dtype=np.float64),
        energy_dyn_j=np.asarray([v.energy_j for v in vpods], dtype=np.float64),
        events=n_events,
        decode_vpod=np.asarray(where_dec, dtype=np.int64),
        kv_transfer_s=np.asarray(xfer, dtype=np.float64),
        energy_kv_j=np.asarray([v.kv_j for v in vpods], dtype=np.float64),
        energy_busy_j=np.asarray([v.fixed_j for v in vpods], dtype=np.float64),
        vpod_surge=np.asarray([v.surge for v in vpods], dtype=bool),
        vpod_standin=np.asarray([v.ti != v.group.type_index for v in vpods], dtype=bool),
        vpod_surge_s=np.asarray(
            [v.surge_s + (0.0 if math.isnan(v.surge_from) else v.held_to - v.surge_from) for v in vpods],
            dtype=np.float64,
        ),
    )


def _vid(v: _Vpod) -> int:
    return v.vid
