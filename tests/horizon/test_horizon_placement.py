"""Placement in the horizon model: every epoch's vPods of generations given as pods fit the pods, the
plan carries their placement rows and the independent checks accept them; where counting chips
alone would over-pack a fragmented pod the plan changes; ``placement = "none"`` is the count-only
plan; plans with placements are deterministic. The reactive policies place first fit, never move a
kept vPod and fail over when a shape no longer fits."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from horizon_support import ROOT

from neuscale_opt.alloc.evaluate import evaluate
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.solution import PLACEMENT_COLUMNS
from neuscale_opt.candidates import build_coefficients
from neuscale_opt.horizon import plan_horizon
from neuscale_opt.horizon.autoscaler import autoscale, fleet_total_inventory
from neuscale_opt.horizon.evaluate import evaluate_schedule
from neuscale_opt.horizon.params import HorizonParams
from neuscale_opt.horizon.rolling import plan_full
from neuscale_opt.instance import load_instance, parse_instance
from neuscale_opt.topology.check import check_placements
from neuscale_opt.topology.patterns import brute_force_feasible
from neuscale_opt.topology.pods import state_of

UNPLACEABLE = ROOT / "instances" / "placement" / "unplaceable.toml"
V5E, V6E = "tpu-v5e", "tpu-v6e"
RATES = [480.0, 240.0, 480.0]


@pytest.fixture(scope="module")
def stretched():
    """``unplaceable.toml`` over three epochs: 480, 240, 480 req/s of ``chat``."""
    raw = load_instance(UNPLACEABLE).model_dump(mode="python", exclude_none=True)
    raw["workload"]["demand"] = [{"epoch": e, "bucket": "chat", "rate_rps": r} for e, r in enumerate(RATES)]
    raw["epochs"] = {**raw.get("epochs", {}), "horizon": len(RATES)}
    inst = parse_instance(raw)
    return inst, build_coefficients(inst)


def _opts(inst, placement: str) -> PlanOptions:
    return PlanOptions.from_instance(inst, placement=placement)


def _counts(sol) -> dict[tuple[int, str, str], int]:
    g = sol.allocations.drop_duplicates(["epoch", "vpod_group"])
    sums = g.groupby(["epoch", "chip", "shape"])["n_vpods"].sum()
    return {(int(e), str(c), str(s)): int(n) for (e, c, s), n in sums.items()}


def _pods(coeffs) -> dict:
    return {str(r.pod): state_of(r.chip, r.dims, r.failed) for r in coeffs.pods.itertuples()}


def _v6e(counts: dict, t: int) -> dict[str, int]:
    return {s: n for (e, c, s), n in counts.items() if e == t and c == V6E}


def _fits(coeffs, counts: dict[str, int]) -> bool:
    """Exact search over the fragmented v6e pod's placements."""
    return brute_force_feasible(_pods(coeffs)["tpu-v6e/0"], counts)


def _placeable_and_full(sol, coeffs) -> None:
    """Every epoch's v6e slices fit the pod at once (exact search), and the pod's undamaged hosts
    are full: one more 2x4 slice would not fit. The rest is served on the counted v5e reservation."""
    counts = _counts(sol)
    for t in range(len(RATES)):
        v6 = _v6e(counts, t)
        assert _fits(coeffs, v6), (t, v6)
        assert not _fits(coeffs, {**v6, "2x4": v6.get("2x4", 0) + 1}), (t, v6)
        assert sum(n for (e, c, _), n in counts.items() if e == t and c == V5E) > 0, t


def _over_packed(sol, coeffs) -> bool:
    counts = _counts(sol)
    return any(not _fits(coeffs, _v6e(counts, t)) for t in range(len(RATES)))


def _check(sol, coeffs) -> None:
    """Placement rows pass the topology check, count what the allocation holds per epoch, shape and
    group, and both evaluators accept the plan."""
    pl = sol.placements
    assert list(pl.columns) == list(PLACEMENT_COLUMNS)
    placed = {k: v for k, v in _counts(sol).items() if k[1] == V6E}
    assert check_placements(pl, _pods(coeffs), placed) == []
    held = sol.allocations.drop_duplicates(["epoch", "vpod_group"])
    want = {(int(r.epoch), str(r.vpod_group)): int(r.n_vpods) for r in held.itertuples() if r.chip == V6E}
    got = pl.groupby(["epoch", "vpod_group"]).size().to_dict()
    assert {(int(e), str(g)): int(n) for (e, g), n in got.items()} == want
    assert sol.totals["placement"] == "checked"
    assert sol.totals["coupling_violations"] == 0, sol.meta["violations"]
    assert sol.to_dict()["placements"] and len(sol.to_dict()["placements"]) == len(pl)


@pytest.mark.parametrize("variant", ["pattern", "exact"])
def test_full_horizon_places_every_epoch(stretched, variant):
    inst, coeffs = stretched
    sol = plan_full(coeffs, _opts(inst, variant), HorizonParams())
    # the undamaged hosts of the v6e pod full in every epoch; the rest on v5e vPods (counted)
    _placeable_and_full(sol, coeffs)
    _check(sol, coeffs)
    assert set(sol.placements["epoch"]) == {0, 1, 2}
    assert all(o[0] % 2 == 0 and o[1] % 4 == 0 for o in sol.placements["origin"])
    # alloc.evaluate on the actual demand checks the same rows
    ev = evaluate(sol, coeffs)
    assert ev.feasible, ev.violations
    assert ev.totals["placement"] == "checked"


def test_counting_chips_alone_over_packs_the_pod(stretched):
    inst, coeffs = stretched
    count_only = plan_full(coeffs, _opts(inst, "none"), HorizonParams())
    placed = plan_full(coeffs, _opts(inst, "pattern"), HorizonParams())
    assert _over_packed(count_only, coeffs) and not _over_packed(placed, coeffs)
    assert {c for (_, c, _) in _counts(count_only)} == {V6E}  # all on the most efficient generation
    assert len(count_only.placements) == 0 and count_only.to_dict()["placements"] == []
    assert placed.objective_value > count_only.objective_value * (1 + 1e-6)


def test_pattern_and_exact_reach_the_same_horizon_optimum(stretched):
    inst, coeffs = stretched
    a = plan_full(coeffs, _opts(inst, "pattern"), HorizonParams())
    b = plan_full(coeffs, _opts(inst, "exact"), HorizonParams())
    assert a.objective_value == pytest.approx(b.objective_value, rel=1e-6)


def test_rolling_plan_places_each_committed_epoch(stretched):
    inst, coeffs = stretched
    sol = plan_horizon(inst, "milp", coeffs=coeffs, window=2, options=_opts(inst, "pattern"))
    assert sol.meta["solves"] == 3
    _placeable_and_full(sol, coeffs)
    _check(sol, coeffs)
    ev = evaluate_schedule(sol, coeffs, HorizonParams(), demand=None)
    assert ev.totals["placement"] == "checked"


def test_placement_none_is_the_count_only_plan(stretched):
    """``none`` builds no placement component: its plan is the plan of the same fleet without pod
    geometry, and its objective is the one the count-only model had before placement existed."""
    inst, coeffs = stretched
    opts = _opts(inst, "none")
    sol = plan_horizon(inst, "milp", coeffs=coeffs, window=2, options=opts)
    bare = plan_horizon(inst, "milp", coeffs=replace(coeffs, pods=None), window=2, options=opts)
    dump = lambda s: json.dumps(s.to_dict(timing=False), sort_keys=True)  # noqa: E731
    assert dump(sol) == dump(bare)
    other = plan_horizon(inst, "milp", coeffs=coeffs, window=2, options=opts.replace(backend="ortools"))
    assert sol.objective_value == pytest.approx(other.objective_value, rel=1e-6)  # cross-solver
    assert _over_packed(sol, coeffs)
    assert len(sol.placements) == 0 and sol.totals["placement"] == "not applicable"


def test_plans_with_placements_are_deterministic(stretched):
    inst, coeffs = stretched
    runs = [
        json.dumps(plan_horizon(inst, "milp", coeffs=coeffs, window=2).to_dict(timing=False), sort_keys=True)
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    assert json.loads(runs[0])["placements"]


def test_tampered_placements_are_caught(stretched):
    inst, coeffs = stretched
    sol = plan_full(coeffs, _opts(inst, "pattern"), HorizonParams())
    pl = sol.placements.copy()
    pl = pl[pl["epoch"] != 1].reset_index(drop=True)  # epoch 1 left unplaced
    bad = replace(sol, placements=pl)
    ev = evaluate_schedule(bad, coeffs, HorizonParams())
    assert not ev.feasible
    assert any(v.startswith("placement:") and "epoch 1" in v for v in ev.violations)


# -- reactive policies -------------------------------------------------------------------------------


def _positions(sol) -> dict[tuple[int, str], set[tuple[str, tuple]]]:
    out: dict[tuple[int, str], set[tuple[str, tuple]]] = {}
    for r in sol.placements.itertuples():
        out.setdefault((int(r.epoch), str(r.vpod_group)), set()).add((str(r.pod), tuple(r.origin)))
    return out


def test_autoscaler_places_first_fit_and_never_moves_a_vpod(stretched):
    inst, coeffs = stretched
    sol = plan_horizon(inst, "neuscale-autoscaler", coeffs=coeffs, options=_opts(inst, "pattern"))
    _check(sol, coeffs)
    # first fit fills the fragmented pod's undamaged hosts; the rest fails over to the v5e reservation
    _placeable_and_full(sol, coeffs)
    assert sol.totals["unserved_rps"] == 0
    pos = _positions(sol)
    for (t, g), here in pos.items():
        before = pos.get((t - 1, g), set())
        assert len(here & before) == min(len(here), len(before)), (t, g)


def test_autoscaler_without_placement_is_count_only(stretched):
    inst, coeffs = stretched
    opts = _opts(inst, "none")
    sol = plan_horizon(inst, "neuscale-autoscaler", coeffs=coeffs, options=opts)
    bare = plan_horizon(inst, "neuscale-autoscaler", coeffs=replace(coeffs, pods=None), options=opts)
    assert sol.to_dict(timing=False) == bare.to_dict(timing=False)
    assert len(sol.placements) == 0
    assert _over_packed(sol, coeffs)


def test_counterfactual_fleet_is_counted_only(stretched):
    inst, coeffs = stretched
    inv = fleet_total_inventory(coeffs, V6E)
    sol = autoscale(coeffs, _opts(inst, "pattern"), HorizonParams(), V6E, inv, "homogeneous-autoscaler")
    assert len(sol.placements) == 0 and sol.totals["placement"] == "unplaced"
    assert sol.totals["coupling_violations"] == 0
