"""The reactive policies and the door: every plan of every method keeps the coupling rules
(checked by the independent evaluator), also when chips fail; coalescing; instance sections."""

from __future__ import annotations

from pathlib import Path

import pytest
from horizon_support import OPTS, ROOT

from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.candidates import build_coefficients
from neuscale_opt.errors import InputError
from neuscale_opt.horizon import (
    HORIZON_METHODS,
    HorizonParams,
    evaluate_schedule,
    instance_inventory,
    neuscale_autoscaler,
    plan_horizon,
    uses_horizon,
)
from neuscale_opt.horizon.autoscaler import reactive_need
from neuscale_opt.instance import InventoryEvent, load_instance, parse_instance

AZURE = ROOT / "instances" / "azure-conv.toml"


@pytest.fixture(scope="module")
def azure():
    inst = load_instance(AZURE)
    # two v6e chips fail at epoch 4 and come back at epoch 8; the v5p cube loses 16 chips at epoch 6
    events = (
        InventoryEvent(epoch=4, chip="tpu-v6e", delta_chips=-16),
        InventoryEvent(epoch=8, chip="tpu-v6e", delta_chips=16),
        InventoryEvent(epoch=6, chip="tpu-v5p", delta_chips=-16),
    )
    # nine epochs hold every event (the v6e chips come back at the last one); shorter than the trace's
    # twelve so that the coupled MILPs below solve in seconds
    inst = inst.model_copy(update={"inventory_events": events, "epochs": inst.epochs.model_copy(update={"horizon": 9})})
    return inst, build_coefficients(inst)


@pytest.mark.parametrize("method", HORIZON_METHODS)
def test_coupling_holds_in_every_plan(azure, method):
    inst, coeffs = azure
    sol = plan_horizon(inst, method, coeffs=coeffs, window=2)
    inv = instance_inventory(coeffs, inst.inventory_events)
    planned = [(e["epoch"], b, r) for e in sol.epochs for b, r in e["forecast_rps"].items()]
    import pandas as pd

    demand = pd.DataFrame(planned, columns=["epoch", "bucket", "rate_rps"])
    ev = evaluate_schedule(sol, coeffs, HorizonParams.from_instance(inst, window=2), demand=demand, inventory=inv)
    assert ev.feasible, ev.violations[:3]
    assert sol.totals["coupling_violations"] == 0
    assert sorted({e["epoch"] for e in sol.epochs}) == coeffs.epochs
    # inventory over time: v6e holds at most 16 chips in epochs 4..7
    for e in sol.epochs:
        if 4 <= e["epoch"] < 8:
            assert e["chips_by_generation"]["tpu-v6e"] <= 16


def test_reactive_need_is_the_peak_of_the_last_window():
    d = {("A", t): r for t, r in enumerate([5.0, 9.0, 2.0, 1.0, 1.0, 1.0])}
    assert reactive_need(d, ["A"], 0, 2) == {"A": 5.0}
    assert reactive_need(d, ["A"], 2, 2) == {"A": 9.0}
    assert reactive_need(d, ["A"], 4, 2) == {"A": 2.0}


def _coalescing(threshold: float):
    rows = [vpod("x", "A", rate=10, static_w=100, name="t"), vpod("x", "B", rate=10, static_w=100, name="t")]
    coeffs = make_coefficients(rows, {(0, "A"): 8.0, (0, "B"): 1.0}, epoch_s=300.0, util_cap=1.0)
    return neuscale_autoscaler(coeffs, OPTS, HorizonParams(coalesce_threshold=threshold)), coeffs


def test_an_under_used_class_joins_a_group_with_room():
    # B needs 0.1 of a vPod (< 0.5): it runs on A's vPod, which has room for 0.2
    sol, coeffs = _coalescing(0.5)
    rows = sol.allocations.set_index("bucket")
    assert rows.loc["B", "vpod_group"] == rows.loc["A", "vpod_group"] == "t|A"
    assert rows.loc["B", "n_vpods"] == 1
    assert sol.totals["energy_j"] == pytest.approx(30_000.0)
    assert evaluate_schedule(sol, coeffs, HorizonParams()).feasible


def test_without_coalescing_each_class_holds_its_own_vpod():
    sol, _ = _coalescing(0.0)
    assert sorted(sol.allocations["vpod_group"]) == ["t|A", "t|B"]
    assert sol.totals["energy_j"] == pytest.approx(60_000.0)


def test_a_class_that_fills_its_own_vpods_does_not_split_onto_another_group():
    # A: 15 req/s every epoch, 2 vPods (room 0.5 = 5 req/s). B: 10 req/s in epoch 0, 11 from epoch 1:
    # its need (the last window's peak) is 10 at epoch 1 and 11 at epoch 2, where its own vPod (held
    # by the floors) takes 10 and 1 req/s is left, under 0.5 x 10. B's configuration already serves
    # on B's group, and a plan row is one configuration on one group: B grows its own group to 2
    # vPods instead of coalescing (which put all 11 req/s on A's group: load 1.5 + 1.1 > 2 vPods)
    rows = [vpod("x", "A", rate=10, static_w=100, name="t"), vpod("x", "B", rate=10, static_w=100, name="t")]
    dem = {(t, "A"): 15.0 for t in range(3)} | {(0, "B"): 10.0, (1, "B"): 11.0, (2, "B"): 11.0}
    coeffs = make_coefficients(rows, dem, epoch_s=300.0, util_cap=1.0)
    params = HorizonParams(prewarm=False)
    sol = neuscale_autoscaler(coeffs, OPTS, params)
    a = sol.allocations
    e2 = a[a["epoch"] == 2].set_index("bucket")
    assert e2.loc["B", "vpod_group"] == "t|B" and e2.loc["B", "n_vpods"] == 2
    assert e2.loc["B", "rate_rps"] == pytest.approx(11.0)
    assert e2.loc["A", "vpod_group"] == "t|A" and e2.loc["A", "n_vpods"] == 2
    planned = [(e["epoch"], b, r) for e in sol.epochs for b, r in e["forecast_rps"].items()]
    import pandas as pd

    demand = pd.DataFrame(planned, columns=["epoch", "bucket", "rate_rps"])
    ev = evaluate_schedule(sol, coeffs, params, demand=demand)
    assert ev.feasible, ev.violations[:3]


def test_homogeneous_autoscaler_uses_one_generation(azure):
    inst, coeffs = azure
    sol = plan_horizon(inst, "homogeneous-autoscaler", coeffs=coeffs, chip="tpu-v5e")
    assert set(sol.allocations["chip"]) == {"tpu-v5e"}
    best = plan_horizon(inst, "homogeneous-autoscaler", coeffs=coeffs)
    assert best.meta["chip"] in best.meta["each"]
    assert len(set(best.allocations["chip"])) == 1


def test_uses_horizon_and_instance_sections(tmp_path: Path):
    assert not uses_horizon(load_instance(AZURE))
    inst = load_instance(ROOT / "instances" / "horizon" / "azure-code.toml")
    assert uses_horizon(inst)
    assert HorizonParams.from_instance(inst).window == 3
    data = {
        "model": {"name": "Llama-3-8B"},
        "fleet": [{"chip": "tpu-v6e", "chips": 8}],
        "workload": {
            "classes": [{"name": "a", "input_tokens": 10, "output_tokens": 10}],
            "demand": [{"epoch": 0, "bucket": "a", "rate_rps": 1.0}],
        },
    }
    ok = parse_instance({**data, "inventory_events": [{"epoch": 1, "chip": "tpu-v6e", "delta_chips": -8}]})
    assert uses_horizon(ok)
    with pytest.raises(InputError, match="not in the fleet"):
        parse_instance({**data, "inventory_events": [{"epoch": 1, "chip": "tpu-v4", "delta_chips": -1}]})
    with pytest.raises(InputError, match="would have -1 chips"):
        parse_instance({**data, "inventory_events": [{"epoch": 1, "chip": "tpu-v6e", "delta_chips": -9}]})
    with pytest.raises(InputError, match="growth_max"):
        parse_instance({**data, "horizon": {"growth_max": 0.5}})


def test_unknown_method_is_bad_input(azure):
    inst, coeffs = azure
    with pytest.raises(InputError, match="method must be one of"):
        plan_horizon(inst, "greedy", coeffs=coeffs)
