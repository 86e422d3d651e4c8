"""Room for the replay's surge guard: which vPods the fleet can still slice while an epoch runs.

The guard (``ReplayOptions.surge``, README section 2, "Surge guard") adds a vPod to a group whose
arrivals would miss their TTFT target; this module says whether the inventory allows it. During
epoch ``e`` the plan holds its own vPods and, in the pre-warm lead before the next boundary, those
epoch ``e + 1`` adds; the room is what is left once ``max(n_e, n_{e+1})`` vPods of every
(chip, shape) are placed. A generation given as pods (and planned with placement) is placed by the
greedy first-fit rule (``topology.greedy``) and every added vPod must find a free aligned slice in
the same placer; a generation given as a chip count, a switched GPU node, or an instance planned
without placement counts chips only. A generation whose planned vPods first-fit cannot place (the
plan's own placement was found by a model the greedy rule does not reproduce) gets no room: the
guard never takes a chip the plan might hold. Every generation's chips, placed or counted, are also
capped by its inventory in epochs ``e`` and ``e + 1`` (the fleet's healthy chips plus the
instance's ``[[inventory_events]]`` so far, ``instance.inventory_schedule``), so the guard
takes no chip an event has failed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from neuscale_opt.coefficients import serving_rows
from neuscale_opt.instance import Instance, inventory_schedule
from neuscale_opt.replay.engine import EpochGroup
from neuscale_opt.replay.plan import VpodType
from neuscale_opt.replay.tables import StepTable, build_table
from neuscale_opt.topology.greedy import FirstFitPlacer, first_fit
from neuscale_opt.topology.pods import pod_states
from neuscale_opt.topology.slices import shape_str


class SurgeRoom:
    """``room(e, type_index)``: True (and the room is taken) when one more vPod of plan type
    ``type_index`` fits the fleet during epoch ``e``; what was taken stays taken until the epoch ends."""

    def __init__(self, instance: Instance, types: Sequence[VpodType], schedule: Sequence[Sequence[EpochGroup]]):
        self._types = types  # a stand-in registry may append types while the replay runs
        self._schedule = schedule
        self._groups = pod_states(instance) if instance.planning.placement != "none" else []
        self._placeable = {g.state.chip for g in self._groups}
        self._healthy = {c: float(n) for c, n in instance.healthy_chips().items()}
        self._events = tuple(instance.inventory_events)
        self._epoch = -1
        self._placer = FirstFitPlacer({})
        self._free: dict[str, float] = {}  # chips of each generation neither held nor taken
        self._blocked: set[str] = set()

    def _held(self, e: int) -> dict[int, int]:
        """vPods of each plan type held during epoch ``e`` (its own, or the next one's if more)."""
        held: dict[int, int] = {}
        for k in (e, e + 1):
            if 0 <= k < len(self._schedule):
                n_k: dict[int, int] = {}
                for eg in self._schedule[k]:
                    n_k[eg.type_index] = n_k.get(eg.type_index, 0) + eg.n_vpods
                for ti, n in n_k.items():
                    held[ti] = max(held.get(ti, 0), n)
        return held

    def _start(self, e: int) -> None:
        self._epoch = e
        inv = inventory_schedule(self._healthy, self._events, [e, e + 1])
        self._free = {c: min(inv[(c, e)], inv[(c, e + 1)]) for c in self._healthy}
        self._blocked = set()
        counts: dict[tuple[str, str], int] = {}
        for ti, n in self._held(e).items():
            vt = self._types[ti]
            self._free[vt.chip] = self._free.get(vt.chip, 0.0) - n * vt.chips
            if vt.chip in self._placeable:
                key = (vt.chip, shape_str(vt.shape))
                counts[key] = counts.get(key, 0) + n
        self._placer = FirstFitPlacer.from_groups(self._groups)  # empty without placeable generations
        if counts:
            _, left = first_fit(self._placer, counts)
            self._blocked = {chip for chip, _ in left}

    def __call__(self, e: int, type_index: int) -> bool:
        if e != self._epoch:
            self._start(e)
        vt = self._types[type_index]
        if self._free.get(vt.chip, 0.0) < vt.chips:
            return False
        if vt.chip in self._placeable and (vt.chip in self._blocked or self._placer.place(vt.chip, vt.shape) is None):
            return False
        self._free[vt.chip] -= vt.chips
        return True


class StandIns:
    """The vPod types that may stand in for a group's own when the guard finds no room for another
    vPod of the group's type: colocated configurations of the candidate table (its feasible rows,
    :func:`~neuscale_opt.coefficients.serving_rows`) on a generation of the fleet that serve every
    class of the group within its SLO and memory, on at most as many chips as one of the group's own
    vPods (a stand-in stands for one of them: the guard's growth bound holds in chips too). The
    replay's guard and the evaluator's estimate of it (``formulations/horizon.md``, "The guard, as
    run", G3) read this one rule.

    Ranking (:meth:`order`): a type's capacity on the group's mix is ``1 / sum_b w_b / c_b`` with
    ``w_b`` the group's planned rate shares (equal where none is given) and ``c_b`` the type's
    req/s per vPod at the safe load (``alloc.attainment.capacity_share`` times ``max_rate_rps``).
    Types at least as strong as the group's own come first, the fewest chips first, then the
    strongest (the guard adds one vPod at a time, each to stand for one of the group's own, so the
    smallest that does holds the fewest chips beyond the plan); then the weaker ones, strongest
    first; remaining ties by the type key."""

    def __init__(self, configs: pd.DataFrame, buckets: pd.DataFrame, util_cap: float | None, attainment: float,
                 chips: Sequence[str]) -> None:  # fmt: skip
        self._args = (configs, buckets, util_cap, attainment, frozenset(chips))
        self._cap: dict[str, dict[str, float]] | None = None
        self._chips: dict[str, int] = {}
        self._row: dict[str, pd.Series] = {}
        self._cache: dict[tuple, tuple[str, ...]] = {}

    def _table(self) -> dict[str, dict[str, float]]:
        """Built on first use (the safe loads of every serving row: seconds on a large table, so
        not for a replay whose guard never needs a stand-in)."""
        if self._cap is None:
            from neuscale_opt.alloc.attainment import capacity_share

            configs, buckets, util_cap, attainment, chips = self._args
            ok = serving_rows(configs)
            keep = (ok["phase"].astype(str) == "colocated").to_numpy() & ok["chip"].astype(str).isin(chips).to_numpy()
            ok = ok[keep]
            cap = capacity_share(ok, buckets, util_cap, attainment) * ok["max_rate_rps"].to_numpy(np.float64)
            table: dict[str, dict[str, float]] = {}
            for i, (key, b, c, w) in enumerate(
                zip(ok["vpod_type"].astype(str), ok["bucket"].astype(str), cap, ok["chips_per_vpod"], strict=True)
            ):
                if c > 0 and math.isfinite(c):
                    if key not in self._row:
                        self._row[key] = ok.iloc[i]
                        self._chips[key] = int(w)
                    table.setdefault(key, {})[b] = float(c)
            self._cap = table
        return self._cap

    @property
    def cap(self) -> dict[str, dict[str, float]]:
        """Type key -> class -> req/s per vPod at the safe load."""
        return self._table()

    @property
    def chips(self) -> dict[str, int]:
        """Type key -> chips per vPod."""
        self._table()
        return self._chips

    @property
    def row(self) -> dict[str, pd.Series]:
        """Type key -> one of its rows (chip, shape, parallelism, prices)."""
        self._table()
        return self._row

    def mix_capacity(self, key: str, classes: Sequence[str], weights: Sequence[float]) -> float:
        """req/s per vPod of ``key`` on the mix (0 when it does not serve every class)."""
        caps = self.cap.get(key)
        if caps is None or any(b not in caps for b in classes):
            return 0.0
        w = [x if x == x and x > 0 else 0.0 for x in weights] if len(weights) == len(classes) else []
        total = math.fsum(w) if w else 0.0
        if total <= 0:
            w, total = [1.0] * len(classes), float(len(classes))
        return total / math.fsum(x / caps[b] for x, b in zip(w, classes, strict=True))

    def order(self, own: str, own_chips: int, classes: Sequence[str], weights: Sequence[float]) -> tuple[str, ...]:
        """The stand-in type keys for a group of type ``own`` (``own_chips`` chips per vPod) serving
        ``classes`` at planned rates ``weights``, best first (see the class)."""
        if len(weights) != len(classes):
            weights = [math.nan] * len(classes)
        pairs = sorted(zip(classes, weights, strict=True))  # the same ranking whatever the classes' order
        classes, weights = [b for b, _ in pairs], [w for _, w in pairs]
        key = (own, own_chips, tuple(classes), tuple(weights))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        mine = self.mix_capacity(own, classes, weights)
        strong, weak = [], []
        for k in self.cap:
            if k == own or self.chips[k] > own_chips:
                continue
            c = self.mix_capacity(k, classes, weights)
            if c <= 0:
                continue
            if c >= mine * (1 - 1e-9):
                strong.append((self.chips[k], -c, k))
            else:
                weak.append((-c, k))
        out = tuple(k for *_, k in sorted(strong)) + tuple(k for _, k in sorted(weak))
        self._cache[key] = out
        return out

    def vpod_type(self, key: str) -> VpodType:
        """The :class:`VpodType` of type ``key``."""
        r = self.row[key]
        shape = tuple(int(x) for x in str(r["shape"]).split("x"))
        vt = VpodType(str(r["chip"]), shape, int(r["tp"]), int(r["pp"]), int(r["ep"]), int(r["batch"]),
                      str(r["phase"]), ":dpa:" in key)  # fmt: skip
        if vt.key != key:  # the key format is candidates.evaluate_grid's; a mismatch is a bug
            raise ValueError(f"stand-in type {key!r} reads back as {vt.key!r}")
        return vt


class StandInTypes:
    """The replay's vPod types: the plan's (``types[:n_plan]``), then the stand-ins the guard asked
    for (:class:`StandIns`), registered as they are first ranked; step tables are built when a vPod
    of a type is first made. ``serves[i]``: the codes of the classes type ``i`` serves (the overflow
    router's hosts and the stand-ins' classes)."""

    def __init__(self, instance: Instance, types: Sequence[VpodType], serves: Sequence[frozenset[int]],
                 standins: StandIns | None, names: Sequence[str], max_input: int) -> None:  # fmt: skip
        self.types: list[VpodType] = list(types)
        self.tables: list[StepTable | None] = [build_table(instance, vt, max_input) for vt in types]
        self.serves: list[frozenset[int]] = list(serves)
        self.n_plan = len(self.types)
        self._instance = instance
        self._max_input = max_input
        self._standins = standins
        self._names = list(names)
        self._codes = {b: i for i, b in enumerate(self._names)}
        self._index = {vt.key: i for i, vt in enumerate(self.types)}

    def _register(self, key: str) -> int:
        i = self._index.get(key)
        if i is None:
            i = self._index[key] = len(self.types)
            self.types.append(self._standins.vpod_type(key))
            self.tables.append(None)
            self.serves.append(frozenset(self._codes[b] for b in self._standins.cap[key] if b in self._codes))
        return i

    def order(self, type_index: int, buckets: Sequence[int], rates: Sequence[float]) -> list[int]:
        """The stand-in types (indices) for a group of type ``type_index`` serving class codes
        ``buckets`` at planned rates ``rates``, best first; none without a stand-in table."""
        if self._standins is None:
            return []
        vt = self.types[type_index]
        keys = self._standins.order(vt.key, vt.chips, [self._names[b] for b in buckets], list(rates))
        return [self._register(k) for k in keys]

    def table(self, type_index: int) -> StepTable:
        tab = self.tables[type_index]
        if tab is None:
            tab = self.tables[type_index] = build_table(self._instance, self.types[type_index], self._max_input)
        return tab
