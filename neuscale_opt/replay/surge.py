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

from collections.abc import Sequence

from neuscale_opt.instance import Instance, inventory_schedule
from neuscale_opt.replay.engine import EpochGroup
from neuscale_opt.replay.plan import VpodType
from neuscale_opt.topology.greedy import FirstFitPlacer, first_fit
from neuscale_opt.topology.pods import pod_states
from neuscale_opt.topology.slices import shape_str


class SurgeRoom:
    """``room(e, type_index)``: True (and the room is taken) when one more vPod of plan type
    ``type_index`` fits the fleet during epoch ``e``; what was taken stays taken until the epoch ends."""

    def __init__(self, instance: Instance, types: Sequence[VpodType], schedule: Sequence[Sequence[EpochGroup]]):
        self._types = tuple(types)
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
