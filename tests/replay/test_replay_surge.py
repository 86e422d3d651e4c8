"""The surge guard (``ReplayOptions.surge``): a run-time scale-up under the plan.

Hand cases on one v6e chip per vPod: of three prompts arriving together the second waits for the
first's prefill and the third for both, so with a TTFT target of 1.5 lone prefills both would be
late: two late arrivals of three, more than a 1 % late rate explains, which is the guard's
trigger. The room the fleet leaves (``replay.surge.SurgeRoom``) is checked on a pod whose failed
chips leave enough chips but no free aligned slice.
"""

from __future__ import annotations

import math

import pytest
from replay_builders import plan_of, row, tiny_instance, trace_of

from neuscale_opt.errors import InputError
from neuscale_opt.instance import InventoryEvent, parse_instance
from neuscale_opt.replay import ReplayOptions, replay
from neuscale_opt.replay.engine import EpochGroup
from neuscale_opt.replay.plan import VpodType
from neuscale_opt.replay.surge import SurgeRoom

LEN = 100.0  # epoch length of the tiny instances (s)


def _lone_prefill() -> float:
    res = replay(plan_of([row(0, "a", 1)]), tiny_instance(), trace_of([(0.0, 2048, 4, "a")]), ReplayOptions())
    return float(res.requests["ttft_s"].iloc[0])


P = _lone_prefill()


def _inst(epochs: int = 1, v6e_chips: int = 8, attainment: float = 0.99, v5e_chips: int = 16):
    return tiny_instance(
        {"a": 1.0, "b": 1.0},
        epochs=epochs,
        v6e_chips=v6e_chips,
        v5e_chips=v5e_chips,
        slo={"mode": "absolute", "ttft_s": 1.5 * P, "tpot_s": 1.0, "attainment": attainment},
    )


def _run(arrivals, epochs: int = 1, v6e_chips: int = 8, n: int = 1, attainment: float = 0.99, v5e_chips: int = 16,
         groups: list[str] | None = None, **opts):  # fmt: skip
    groups = groups or ["ga"] * epochs
    plan = plan_of([row(e, "a", n, vpod_group=groups[e]) for e in range(epochs)])
    trace = trace_of([(t, 2048, 4, "a") for t in arrivals])
    inst = _inst(epochs, v6e_chips, attainment, v5e_chips)
    return replay(plan, inst, trace, ReplayOptions(create_delay_s=5.0, prewarm=False, **opts))


def _surge_rows(res):
    return res.vpods[res.vpods["surge"]]


#: three prompts together: the second waits for the first's prefill, the third for both (late);
#: two late arrivals of three are more than a 1 % late rate explains (P(L >= 2) = 3e-4 < 0.01)
TRIPLE = (0.0, 0.0, 0.0)


def at(t: float) -> list[float]:
    return [t + x for x in TRIPLE]


def allowed(n: int, tol: float, alpha: float = 0.01) -> int:
    """The most late arrivals among ``n`` that a late rate ``tol`` explains at level ``alpha``:
    the smallest ``k`` with P(Binomial(n, tol) > k) <= alpha (summed by hand)."""
    tail = 1.0
    for k in range(n + 1):
        tail -= math.comb(n, k) * tol**k * (1 - tol) ** (n - k)
        if tail <= alpha:
            return k
    return n


def test_allowed_counts():
    assert allowed(2, 0.01) == 1 and allowed(3, 0.01) == 1
    assert allowed(10, 0.01) == 1  # one late in ten is chance, two are not


def test_late_arrivals_add_one_vpod_held_to_the_epoch_end():
    res = _run(at(0.0))
    assert res.meta["options"]["surge"] is True  # on by default
    assert res.totals["surge_vpods"] == 1
    s = _surge_rows(res).iloc[0]
    assert s["vpod_group"] == "ga" and s["held_from_s"] == 0.0 and s["held_to_s"] == LEN
    assert res.totals["surge_chip_hours"] == pytest.approx(LEN / 3600.0)
    assert res.totals["chip_hours"] == pytest.approx(2 * LEN / 3600.0)  # the plan's vPod and the guard's
    # the late requests stay where they were routed: the new vPod is ready 5 s later
    assert res.requests["slo_met"].tolist() == [True, False, False]
    off = _run(at(0.0), surge=False)
    assert off.totals["surge_vpods"] == 0 and not off.meta["options"]["surge"]
    assert off.totals["chip_hours"] == pytest.approx(LEN / 3600.0)
    # one late arrival of two is what a 1 % late rate may give: no vPod
    assert _run([0.0, 0.0]).totals["surge_vpods"] == 0


def test_the_added_vpod_serves_the_next_pair_in_time():
    # a pair at 10 s: the guard's vPod (ready at 5 s) takes one of them
    on = _run([*at(0.0), 10.0, 10.0])
    off = _run([*at(0.0), 10.0, 10.0], surge=False)
    assert on.requests["slo_met"].tolist() == [True, False, False, True, True]
    assert off.requests["slo_met"].tolist() == [True, False, False, True, False]
    assert on.requests["vpod"].iloc[3] != on.requests["vpod"].iloc[4]


def _first_surge(steady: list[float], starts: list[float], tol: float) -> float:
    """When the rule grows the group: triples at ``starts`` after ``steady`` prompts that are never
    late (two late arrivals per triple), counted over the 60 s before each arrival."""
    arrived: list[float] = []
    late: list[float] = []
    for t0 in starts:
        for j in range(3):
            arrived.append(t0)
            if j:
                late.append(t0)
            n = sum(1 for x in [*steady, *arrived] if x >= t0 - 60.0)
            if sum(1 for x in late if x >= t0 - 60.0) > allowed(n, tol):
                return t0
    return math.inf


def test_late_arrivals_within_the_attainment_target_are_tolerated():
    # 150 prompts alone over the first 60 s (0.4 s apart, each served in under 0.1 s), then a
    # triple every second: the group grows at the triple whose late arrivals first exceed what a
    # late rate of 1 - attainment explains among the window's arrivals
    steady = [0.4 * i for i in range(150)]
    starts = [60.0 + j for j in range(8)]
    trace = [*steady, *(t for s in starts for t in at(s))]
    first = {a: _first_surge(steady, starts, 1.0 - a) for a in (0.99, 0.999)}
    assert 60.0 < first[0.999] < first[0.99] < 67.0  # a stricter target tolerates fewer
    for attainment, expected in first.items():
        res = _run(trace, attainment=attainment)
        assert res.totals["surge_vpods"] == 1
        assert _surge_rows(res)["held_from_s"].iloc[0] == expected
    # one triple after them: within what the target explains at 0.99
    assert _run([*steady, *at(60.0)]).totals["surge_vpods"] == 0
    # the window forgets: 150 s later the steady arrivals no longer count
    assert _run([*steady, *at(210.0)], epochs=3).totals["surge_vpods"] == 1
    with pytest.raises(InputError, match="surge_window_s"):
        ReplayOptions(surge_window_s=0.0)
    with pytest.raises(InputError, match="surge_alpha"):
        ReplayOptions(surge_alpha=1.0)


def test_no_room_in_the_fleet_no_vpod():
    # the plan's vPod holds the only v6e chip, and Llama-3-8B needs 4 v5e chips (16 GB each)
    assert _run(at(0.0), v6e_chips=1, v5e_chips=2).totals["surge_vpods"] == 0
    # with 16 v5e chips still none: a stand-in holds at most the chips of the vPod it stands for
    # (1 here), whatever generations it may take (below, a 4-chip group)
    for standins in ("plan", "fleet", "off"):
        assert _run(at(0.0), v6e_chips=1, standins=standins).totals["surge_vpods"] == 0
    with pytest.raises(InputError, match="standins"):
        ReplayOptions(standins="anywhere")


#: a 4-chip v6e vPod (tp 4, batch 2) for the stand-in cases: a 4-chip v5e one may stand for it
V6E4 = {"shape": "2x2", "chips_per_vpod": 4, "tp": 4}
V5E4 = {"chip": "tpu-v5e", "shape": "2x2", "chips_per_vpod": 4, "tp": 4, "batch": 128}


def _lone_prefill4() -> float:
    plan = plan_of([row(0, "a", 1, **V6E4)])
    res = replay(plan, tiny_instance(), trace_of([(0.0, 2048, 4, "a")]), ReplayOptions())
    return float(res.requests["ttft_s"].iloc[0])


def _run4(arrivals, epochs: int = 1, groups: list[str] | None = None, other: bool = False, **opts):
    """The hand cases on a 4-chip v6e group ``ga`` of class ``a`` holding the only 4 v6e chips (TTFT
    target 1.5 of its lone prefill), 16 v5e chips; ``other``: a v5e group of class ``b`` too."""
    groups = groups or ["ga"] * epochs
    rows = [row(e, "a", 1, vpod_group=groups[e], **V6E4) for e in range(epochs)]
    if other:
        rows += [row(e, "b", 1, vpod_group="gb", **V5E4) for e in range(epochs)]
    slo = {"mode": "absolute", "ttft_s": 1.5 * _lone_prefill4(), "tpot_s": 1.0, "attainment": 0.99}
    inst = tiny_instance({"a": 1.0, "b": 1.0}, epochs=epochs, v6e_chips=4, v5e_chips=16, slo=slo)
    trace = trace_of([(t, 2048, 4, "a") for t in arrivals])
    return replay(plan_of(rows), inst, trace, ReplayOptions(create_delay_s=5.0, prewarm=False, **opts))


SURGE = [*at(0.0), 6.0, 6.0, 6.0]  # a triple (the guard grows), then three more at 6 s


def _smallest_v5e_type_for_a() -> int:
    """Fewest chips of a v5e configuration that serves class ``a`` (brute force over the table)."""
    from neuscale_opt.candidates import build_coefficients
    from neuscale_opt.coefficients import serving_rows

    ok = serving_rows(build_coefficients(_inst(1, 1)).configs)
    ok = ok[(ok["chip"] == "tpu-v5e") & (ok["bucket"] == "a") & (ok["phase"] == "colocated")]
    return int(ok["chips_per_vpod"].min())


def test_by_default_a_stand_in_is_on_a_generation_the_plan_deploys():
    # a plan on v6e alone (as a homogeneous auto-scaler's) stays on it; with a v5e group of class b
    # in the plan, the v6e group's guard vPod stands in on v5e; "off": never
    assert _run4(SURGE).totals["surge_vpods"] == 0
    sv = _surge_rows(_run4(SURGE, other=True))
    assert len(sv) == 1 and sv["chip"].iloc[0] == "tpu-v5e" and sv["vpod_group"].iloc[0] == "ga"
    assert _run4(SURGE, other=True, standins="off").totals["surge_vpods"] == 0


def test_a_stand_in_of_another_generation_where_its_own_has_no_room():
    # the only v6e chips are the plan's: the guard's vPod is a v5e configuration serving class a, of
    # the fewest chips (4: every 4-chip v5e one is stronger than the plan's b2 vPod); the triple at
    # 6 s is served there and on the plan's vPod
    res = _run4(SURGE, standins="fleet")
    sv = _surge_rows(res)
    assert len(sv) == 1 and res.totals["surge_vpods"] == 1 == res.totals["surge_standin_vpods"]
    assert sv["standin"].iloc[0] and not res.vpods.loc[~res.vpods["surge"], "standin"].any()
    assert sv["chip"].iloc[0] == "tpu-v5e"
    assert sv["chips"].iloc[0] == _smallest_v5e_type_for_a() == 4
    assert sv["vpod_group"].iloc[0] == "ga"
    vid = int(sv["vpod"].iloc[0])
    assert (res.requests["vpod"] == vid).sum() == 2  # two of the three at 6 s (least loaded first)
    # held from its creation to the end of the epoch, all of it beyond the plan
    assert sv["held_to_s"].iloc[0] == LEN
    assert res.totals["surge_chip_hours"] == pytest.approx(4 * (LEN - sv["held_from_s"].iloc[0]) / 3600.0)
    # counted in the energy and money like any other vPod
    assert res.totals["cost_usd"] == pytest.approx(res.vpods["cost_usd"].sum())


def test_a_stand_in_drains_at_the_next_boundary():
    # the same group in the next epoch: the stand-in drains at the boundary all the same (the next
    # plan's room is its own vPods' first), beyond the plan all its life
    sv = _surge_rows(_run4(SURGE, epochs=2, surge_retire=False, standins="fleet"))
    assert len(sv) == 1 and sv["held_to_s"].iloc[0] == LEN
    assert sv["surge_held_s"].iloc[0] == pytest.approx(LEN - sv["held_from_s"].iloc[0])


def test_one_vpod_being_created_at_a_time():
    # five together: the fourth and fifth are late too, but the group has a vPod being created
    assert _run([0.0] * 5).totals["surge_vpods"] == 1


def test_growth_bound():
    # late arrivals again at 10 s and 20 s: the group holds 2 vPods = 2x its planned one, no third
    arrivals = [*at(0.0), *[10.0] * 4, *[20.0] * 5]
    assert _run(arrivals).totals["surge_vpods"] == 1
    assert _run(arrivals, surge_growth=3.0).totals["surge_vpods"] == 2
    # 2 planned (up to 4): none late enough at 0 s, one added at 10 s and one at 20 s
    assert _run(arrivals, n=2).totals["surge_vpods"] == 2
    with pytest.raises(InputError, match="surge_growth"):
        ReplayOptions(surge_growth=0.5)


def test_no_vpod_that_would_be_ready_after_the_epoch():
    # late at 96 s with a 5-s creation delay: the vPod would be ready after the boundary
    assert _run(at(96.0)).totals["surge_vpods"] == 0
    assert _run(at(94.0)).totals["surge_vpods"] == 1


def test_the_next_boundary_takes_the_group_back_to_the_plan():
    res = _run(at(0.0), epochs=2)
    s = _surge_rows(res)
    assert len(s) == 1 and s["held_to_s"].iloc[0] == LEN  # retired (idle) at the boundary
    assert res.totals["chip_hours"] == pytest.approx(3 * LEN / 3600.0)


# ---- the room: chips and slices --------------------------------------------------------------


def _pod_instance(failed: list[list[int]], placement: str = "pattern"):
    return parse_instance(
        {
            "name": "pod",
            "model": {"name": "Llama-3-8B"},
            "fleet": [{"chip": "tpu-v6e", "pods": [{"dims": [16, 16], "failed_chips": failed}]}],
            "workload": {
                "classes": [{"name": "a", "input_tokens": 512, "output_tokens": 128}],
                "demand": [{"epoch": 0, "bucket": "a", "rate_rps": 1.0}],
            },
            "epochs": {"length_s": 100.0, "horizon": 2},
            "planning": {"placement": placement},
        }
    )


def _vt(shape: tuple[int, int]) -> VpodType:
    return VpodType("tpu-v6e", shape, shape[0] * shape[1], 1, 1, 8, "colocated")


def test_room_counts_the_plan_and_the_next_epoch():
    types = [_vt((8, 16))]
    inst = _pod_instance([])
    room = SurgeRoom(inst, types, [[EpochGroup("g", 0, 1, (0,))], [EpochGroup("g", 0, 1, (0,))]])
    assert room(0, 0) is True  # the other half of the pod
    assert room(0, 0) is False  # taken
    assert room(1, 0) is True  # a new epoch starts from the plan again
    # the next epoch holds two: its pre-warm takes the half the guard would have used
    room = SurgeRoom(inst, types, [[EpochGroup("g", 0, 1, (0,))], [EpochGroup("g", 0, 2, (0,))]])
    assert room(0, 0) is False


def test_room_needs_a_free_slice_not_only_free_chips():
    # the plan's 8x16 takes rows 0-7; a failed chip every 4 columns of row 8 leaves 124 free
    # chips but no 8x8 slice
    failed = [[8, 0], [8, 4], [8, 8], [8, 12]]
    types = [_vt((8, 16)), _vt((8, 8))]
    sched = [[EpochGroup("g", 0, 1, (0,))]]
    assert SurgeRoom(_pod_instance(failed), types, sched)(0, 1) is False
    assert SurgeRoom(_pod_instance(failed), types, sched)(0, 0) is False
    # counted in chips only (an instance planned without placement): 124 >= 64
    assert SurgeRoom(_pod_instance(failed, placement="none"), types, sched)(0, 1) is True


def test_room_respects_inventory_events():
    # 8 v6e chips, the plan holds one: room for the guard, unless an event has failed the rest in
    # this epoch or fails them in the next (its pre-warm could need them)
    types = [VpodType("tpu-v6e", (1, 1), 1, 1, 1, 2, "colocated")]
    sched = [[EpochGroup("g", 0, 1, (0,))]] * 3
    base = _inst(epochs=3, v6e_chips=8)
    assert SurgeRoom(base, types, sched)(0, 0) is True
    failing = base.model_copy(update={"inventory_events": (InventoryEvent(epoch=1, chip="tpu-v6e", delta_chips=-7),)})
    room = SurgeRoom(failing, types, sched)
    assert room(0, 0) is False  # epoch 1 has 1 chip: none to spare in epoch 0's last seconds either
    assert room(1, 0) is False
    assert SurgeRoom(failing, types, sched)(2, 0) is False
    back = base.model_copy(
        update={
            "inventory_events": (
                InventoryEvent(epoch=1, chip="tpu-v6e", delta_chips=-7),
                InventoryEvent(epoch=2, chip="tpu-v6e", delta_chips=7),
            )
        }
    )
    assert SurgeRoom(back, types, [[EpochGroup("g", 0, 1, (0,))]] * 4)(2, 0) is True


# ---- retirement once the surge is over ------------------------------------------------------


def test_a_surge_vpod_is_retired_once_the_surge_is_over():
    # a triple at 0 s grows the group (the guard's vPod is ready at 5 s); then one prompt every 2 s,
    # half the plan's 1 req/s, none late: at the first arrival at least 65 s in (ready for a window,
    # the late arrivals of 0 s forgotten) the guard's vPod, idle, is released
    steady = [2.0 * i for i in range(1, 50)]
    on = _run([*at(0.0), *steady])
    assert on.meta["options"]["surge_retire"] is True  # on by default
    s = _surge_rows(on)
    assert len(s) == 1 and s["held_to_s"].iloc[0] == 66.0
    assert on.totals["surge_chip_hours"] == pytest.approx(66.0 / 3600.0)
    assert on.requests["slo_met"].iloc[3:].all()
    held = _run([*at(0.0), *steady], surge_retire=False)
    assert _surge_rows(held)["held_to_s"].iloc[0] == LEN
    # arrivals above the plan's rate (2 req/s against 1): the guard's vPod stays to the boundary
    busy = [0.5 * i for i in range(1, 199)]
    res = _run([*at(0.0), *busy])
    assert res.requests["slo_met"].iloc[3:].all()
    assert _surge_rows(res)["held_to_s"].iloc[0] == LEN


def test_a_retired_surge_vpod_still_draining_is_taken_back():
    # two long answers at 64 s (one on each vPod); at 66 s the guard's vPod is retired while it
    # decodes; five prompts at 70 s are late again on the planned vPod alone, and the group takes
    # the draining vPod back instead of making another
    steady = [2.0 * i for i in range(1, 32)]
    arrivals = [*at(0.0), *steady, 64.0, 64.0, 66.0, *[70.0] * 5]
    plan = plan_of([row(0, "a", 1, vpod_group="ga")])
    lens = {64.0: 3000}
    trace = trace_of([(t, 2048, lens.get(t, 4), "a") for t in sorted(arrivals)])
    res = replay(plan, _inst(), trace, ReplayOptions(create_delay_s=5.0, prewarm=False))
    s = _surge_rows(res)
    assert res.totals["surge_vpods"] == 1 and s["held_to_s"].iloc[0] == LEN
    surge_vid = s["vpod"].iloc[0]
    burst = res.requests[res.requests["arrival_s"] == 70.0]
    # retired at 66 s: the first four of the burst queue on the planned vPod (three of them late,
    # more than the window's 35 arrivals explain), the fifth goes to the vPod taken back
    assert burst["vpod"].tolist() == [0, 0, 0, 0, surge_vid] and (~burst["slo_met"]).sum() == 3
    # held to the boundary without retirement: the burst is shared from the start
    held = replay(plan, _inst(), trace, ReplayOptions(create_delay_s=5.0, prewarm=False, surge_retire=False))
    assert held.totals["surge_vpods"] == 1
    assert (held.requests[held.requests["arrival_s"] == 70.0]["vpod"] == surge_vid).sum() == 2


def test_room_given_to_a_group_stays_its_own_until_the_epoch_ends():
    # two v6e chips: the plan's vPod and the guard's; the guard's is released at 66 s, and when the
    # group is late again at 80 s it makes a new one on the chip it was given (the fleet has no
    # other), while another group could not have taken that chip meanwhile
    steady = [2.0 * i for i in range(1, 40)]
    res = _run([*at(0.0), *steady, *[80.0] * 5], v6e_chips=2)
    s = _surge_rows(res).sort_values("held_from_s")
    assert s["held_from_s"].tolist() == [0.0, 80.0] and s["held_to_s"].tolist() == [66.0, LEN]
    types = [VpodType("tpu-v6e", (1, 1), 1, 1, 1, 2, "colocated")]
    room = SurgeRoom(_inst(v6e_chips=2), types, [[EpochGroup("g", 0, 1, (0,))]])
    assert room(0, 0) is True and room(0, 0) is False  # the fleet alone gives one


def test_a_surge_vpod_the_next_epoch_keeps_counts_as_surge_only_until_then():
    # the plan grows to 2 vPods in epoch 1: the guard's vPod of epoch 0 is kept as one of them, so
    # it is held 200 s but beyond the plan only for the first 100
    plan = plan_of([row(0, "a", 1, vpod_group="ga"), row(1, "a", 2, vpod_group="ga")])
    trace = trace_of([(t, 2048, 4, "a") for t in at(0.0)])
    res = replay(plan, _inst(epochs=2), trace, ReplayOptions(create_delay_s=5.0, prewarm=False))
    s = _surge_rows(res).iloc[0]
    assert s["held_from_s"] == 0.0 and s["held_to_s"] == 2 * LEN and s["surge_held_s"] == LEN
    assert res.totals["surge_chip_hours"] == pytest.approx(LEN / 3600.0)
    assert res.totals["chip_hours"] == pytest.approx(4 * LEN / 3600.0)  # two vPods for both epochs
    # shrinking back to 1 at the boundary: retired there, its whole hold beyond the plan
    res = _run(at(0.0), epochs=2)
    assert _surge_rows(res)["surge_held_s"].tolist() == [LEN]


def test_the_guard_adds_what_the_arrival_rate_asks_for():
    # 2 vPods planned for 1 req/s (0.5 each); 3 req/s arrive for a minute, none late, then twelve
    # prompts at once: ten are late, more than the window's ~190 arrivals explain. The group's
    # window rate is about 3.2 req/s, so it asks for ceil(2 x 3.2 / 1) = 7 vPods: 5 more at once,
    # as many as the growth bound allows (2x: 2 more), one without ``surge_to_rate``
    steady = [i / 3.0 for i in range(1, 181)]
    arrivals = [*steady, *[61.0] * 12]
    assert _run(arrivals, n=2).requests["slo_met"].iloc[:180].all()
    assert _run(arrivals, n=2, surge_growth=5.0).totals["surge_vpods"] == 5
    res = _run(arrivals, n=2)
    assert res.totals["surge_vpods"] == 2 and (_surge_rows(res)["held_from_s"] == 61.0).all()
    assert _run(arrivals, n=2, surge_to_rate=False).totals["surge_vpods"] == 1
    # the fleet's room caps it too: 8 chips, 2 planned, 5 asked, 6 free -> 5; 5 chips -> 3 (a v5e
    # vPod needs 4 chips, more than the 1-chip vPod it would stand for: no stand-in)
    assert _run(arrivals, n=2, surge_growth=5.0, v6e_chips=5, standins="fleet").totals["surge_vpods"] == 3


def _tpot_run(tpot_s: float, k: int = 8, at_s: float = 0.0, **opts):
    # k long answers together (at ``at_s``) on one b8 vPod (TTFT target out of reach of any wait):
    # each one's decode shares its rounds with the others' prefill stalls, so its TPOT is above a
    # lone one's
    inst = tiny_instance(
        {"a": 1.0}, epochs=1, slo={"mode": "absolute", "ttft_s": 100.0, "tpot_s": tpot_s, "attainment": 0.99}
    )
    plan = plan_of([row(0, "a", 1, batch=8)])
    trace = trace_of([(at_s, 512, 200, "a")] * k)
    return replay(plan, inst, trace, ReplayOptions(create_delay_s=5.0, prewarm=False, **opts))


def test_requests_finished_past_their_tpot_count_late_when_the_load_made_them_late():
    lone = float(_tpot_run(1.0, k=1).requests["tpot_s"].iloc[0])
    loaded = _tpot_run(1.0, surge=False).requests["tpot_s"]
    target = lone + 0.25 * (float(loaded.min()) - lone)  # alone in time, together late
    assert loaded.min() > target > lone
    res = _tpot_run(target)
    assert res.totals["tpot_attainment"] == 0.0 and res.totals["ttft_attainment"] == 1.0
    # the second late finish (one of eight is what a 1 % late rate explains) grows the group
    second = float(res.requests["e2e_s"].sort_values().iloc[1])
    s = _surge_rows(res)
    assert len(s) == 1 and s["held_from_s"].iloc[0] == pytest.approx(second)
    # a target the vPod misses even alone: more vPods would not help, none is made
    assert _tpot_run(0.9 * lone).totals["surge_vpods"] == 0
    # a target every request meets: nothing late
    assert _tpot_run(1.1 * float(loaded.max())).totals["surge_vpods"] == 0
    # the same late finishes after the plan's last epoch (the vPods drain what is left): no growth
    end = LEN - 0.01
    res = _tpot_run(target, at_s=end)
    assert (res.requests["arrival_s"] + res.requests["e2e_s"]).min() > LEN and res.totals["tpot_attainment"] == 0.0
    assert res.totals["surge_vpods"] == 0


def test_a_request_late_for_a_wait_its_arrival_could_not_see_counts_at_its_prefill():
    """A two-slot vPod decoding a long answer: a prompt arriving meanwhile finds a free slot and no
    prompt waiting, so the router takes the vPod as it is (no estimate at arrival), and its prefill
    waits for the decode round in progress to end. With a TTFT target a hair above a lone prefill
    that wait makes it late: the guard counts it when its prefill starts (alone it would have met
    the target), and two late of three arrivals add a vPod then."""
    inst = tiny_instance(
        {"a": 1.0}, epochs=1, slo={"mode": "absolute", "ttft_s": 1.0005 * P, "tpot_s": 1.0, "attainment": 0.99}
    )
    plan = plan_of([row(0, "a", 1, vpod_group="ga")])
    trace = trace_of([(0.0, 2048, 400, "a"), (0.5, 2048, 4, "a"), (1.0, 2048, 4, "a")])
    res = replay(plan, inst, trace, ReplayOptions(create_delay_s=5.0, prewarm=False))
    rq = res.requests
    assert rq["ttft_s"].iloc[0] == pytest.approx(P)
    assert rq["slo_met"].tolist() == [True, False, False]
    # each waited for a decode round only (a few ms), not for a slot or a prefill
    assert ((rq["queue_s"].iloc[1:] > 0.0005 * P) & (rq["queue_s"].iloc[1:] < 0.5 * P)).all()
    surge = _surge_rows(res)
    assert len(surge) == 1 and surge["vpod_group"].iloc[0] == "ga"
    # grown when the third request's prefill starts (its arrival plus its wait)
    assert surge["held_from_s"].iloc[0] == pytest.approx(1.0 + rq["queue_s"].iloc[2])
    # one late of two is chance at a 1 % late rate: no vPod
    two = replay(plan, inst, trace.iloc[:2], ReplayOptions(create_delay_s=5.0, prewarm=False))
    assert two.totals["surge_vpods"] == 0 and not two.requests["slo_met"].iloc[1]


def test_an_arrival_that_waits_for_a_slot_is_estimated_on_arrival():
    """A one-slot vPod decoding a long answer: a prompt arriving meanwhile waits for the slot, and the
    estimate at arrival (the rounds until the slot frees, then its prefill) counts it late at once:
    two such arrivals add a vPod at the second one's arrival."""
    plan = plan_of([row(0, "a", 1, vpod_group="ga", batch=1)])
    trace = trace_of([(0.0, 2048, 400, "a"), (0.5, 2048, 4, "a"), (1.0, 2048, 4, "a")])
    res = replay(plan, _inst(), trace, ReplayOptions(create_delay_s=5.0, prewarm=False))
    rq = res.requests
    assert rq["slo_met"].tolist() == [True, False, False]
    assert (rq["ttft_s"].iloc[1:] > 1.5 * P).all()  # both waited for the long answer's slot
    surge = _surge_rows(res)
    assert len(surge) == 1 and surge["held_from_s"].iloc[0] == pytest.approx(1.0)


def test_the_guard_takes_back_a_draining_vpod_of_its_own_first():
    # two vPods in epoch 0, one in epoch 1: at the boundary the less loaded one drains a long answer;
    # a triple just after it is late on the other, so the guard takes the draining one back (ready at
    # once, no creation delay), beyond the plan from then on
    plan = plan_of([row(0, "a", 2, vpod_group="ga"), row(1, "a", 1, vpod_group="ga")])
    long = [(90.0, 2048, 3000, "a"), (90.0, 2048, 3000, "a"), (95.0, 2048, 3000, "a")]
    trace = trace_of([*long, *[(LEN + 1.0, 2048, 4, "a")] * 3])
    res = replay(plan, _inst(2), trace, ReplayOptions(create_delay_s=5.0, prewarm=False))
    sv = _surge_rows(res)
    assert len(sv) == 1 and sv["held_from_s"].iloc[0] == 0.0  # one of the plan's vPods of epoch 0
    back_at = LEN + 1.0
    assert sv["surge_held_s"].iloc[0] == pytest.approx(sv["held_to_s"].iloc[0] - back_at)
    late = res.requests.iloc[3:]
    assert (late["vpod"] == int(sv["vpod"].iloc[0])).any()  # served there before a new vPod could be
