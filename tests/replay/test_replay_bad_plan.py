"""A plan that does not match the instance is refused: InputError (exit code 2), one line naming
the file and the field."""

from __future__ import annotations

import json

import pytest
from replay_builders import plan_of, row, tiny_instance, trace_of

from neuscale_opt.errors import EXIT_BAD_INPUT, InputError
from neuscale_opt.replay import load_plan

INST = tiny_instance(epochs=2)  # 8 v6e, 16 v5e chips; classes a, b; 2 epochs of 100 s
TRACE = trace_of([(10.0, 100, 2, "a"), (150.0, 100, 2, "b")])
GOOD = [row(0, "a", 1), row(1, "b", 1)]


def refused(rows_or_plan, match: str, tmp_path=None) -> InputError:
    plan = rows_or_plan if isinstance(rows_or_plan, dict) else plan_of(rows_or_plan)
    with pytest.raises(InputError, match=match) as exc:
        load_plan(plan, INST, TRACE)
    assert exc.value.exit_code == EXIT_BAD_INPUT
    assert "\n" not in str(exc.value)
    return exc.value


def test_good_plan_loads():
    p = load_plan(plan_of(GOOD), INST, TRACE)
    assert p.n_epochs == 2
    assert list(p.groups["n_vpods"]) == [1, 1]
    assert p.types[0].key == "tpu-v6e:1x1:tp1pp1ep1:b2:colocated"


def test_unknown_chip():
    refused([row(0, "a", 1, chip="tpu-v9"), row(1, "b", 1)], r"allocations\[0\]\.chip: unknown chip 'tpu-v9'")


def test_chip_of_catalog_but_not_of_fleet():
    refused(
        [row(0, "a", 1, chip="tpu-v5p", shape="2x2x1", chips_per_vpod=4, tp=4), row(1, "b", 1)],
        r"allocations\[0\]\.chip: unknown chip 'tpu-v5p' \(fleet: tpu-v6e, tpu-v5e\)",
    )


def test_more_chips_than_the_fleet():
    refused(
        [row(0, "a", 5, shape="2x2", chips_per_vpod=4, tp=4), row(1, "b", 1)], r"epoch 0: 20 tpu-v6e chips .* 8 healthy"
    )


def test_pooled_group_counted_once_against_the_fleet():
    pooled = {"vpod_group": "g", "shape": "2x2", "chips_per_vpod": 4, "tp": 4}
    p = load_plan(plan_of([row(0, "a", 2, **pooled), row(0, "b", 2, **pooled), row(1, "b", 1)]), INST, TRACE)
    assert int(p.groups[p.groups["epoch"] == 0]["n_vpods"].sum()) == 2  # 8 chips, not 16


def test_missing_epoch():
    e = refused([row(0, "a", 1)], r"missing epochs: .*epoch\(s\) 1 ")
    assert e.where == "<plan>"


def test_an_epoch_planned_unserved_needs_no_allocation_row():
    # a plan that serves nothing in epoch 1 (a generation that has no configuration for its class)
    # says so in its unserved rows; the replay then serves none of that epoch's arrivals
    from neuscale_opt.replay import replay

    plan = {**plan_of([row(0, "a", 1)]), "unserved": [{"epoch": 1, "bucket": "b", "unserved_rps": 0.01}]}
    p = load_plan(plan, INST, TRACE)
    assert p.n_epochs == 2 and set(p.groups["epoch"]) == {0}
    res = replay(plan, INST, TRACE)
    assert res.totals["requests"] == 2 and res.totals["served"] == 1 and res.totals["unserved"] == 1
    assert list(res.requests["vpod"] >= 0) == [True, False]
    # an unserved row of another epoch does not excuse the missing one
    other = {**plan, "unserved": [{"epoch": 0, "bucket": "b", "unserved_rps": 0.01}]}
    refused(other, r"missing epochs: .*epoch\(s\) 1 ")


def test_unknown_bucket():
    refused([row(0, "zz", 1), row(1, "b", 1)], r"allocations\[0\]\.bucket: unknown class 'zz'")


@pytest.mark.parametrize("field", ["n_vpods", "epoch"])
def test_negative_count(field):
    r = row(0, "a", 1)
    r[field] = -1
    refused([r, row(1, "b", 1)], rf"allocations\[0\]\.{field}: negative \(-1\)")


def test_non_integer_count():
    refused([row(0, "a", 1.5), row(1, "b", 1)], r"allocations\[0\]\.n_vpods: 1\.5 is not an integer")


def test_missing_field():
    r = row(0, "a", 1)
    del r["tp"]
    refused([r, row(1, "b", 1)], r"allocations\[0\]: missing tp")


def test_shape_disagrees_with_parallelism():
    refused([row(0, "a", 1, shape="2x2"), row(1, "b", 1)], r"allocations\[0\]\.shape: 2x2 has 4 chips")


def test_shape_not_a_slice_of_the_chip():
    refused(
        [row(0, "a", 1, shape="1x2", chips_per_vpod=2, tp=2), row(1, "b", 1)],
        r"allocations\[0\]\.shape: 1x2 is not a slice shape of tpu-v6e",
    )


def test_group_rows_disagree_on_count():
    refused(
        [row(0, "a", 1, vpod_group="g"), row(0, "b", 2, vpod_group="g"), row(1, "b", 1)],
        r"allocations\[1\]\.n_vpods: 2 but allocations\[0\] gives group 'g' 1 vPods",
    )


def test_prefill_without_decode_is_refused():
    refused([row(0, "a", 1, phase="prefill"), row(1, "b", 1)], r"epoch 0, class 'a': prefill rows but no decode rows")


def test_prefill_serving_a_rate_without_decode_is_refused():
    refused(
        [row(0, "a", 1, phase="prefill", rate_rps=0.5), row(1, "b", 1)],
        r"epoch 0, class 'a': prefill rows but no decode rows",
    )


def test_held_prefill_vpod_planning_no_rate_needs_no_decode_half():
    # a rolling plan's hold rule keeps a class's prefill group through epochs without demand; its
    # row plans 0 req/s for the class, so it serves nothing and needs no decode row
    held = row(1, "a", 1, phase="prefill", rate_rps=0.0)
    p = load_plan(plan_of([row(0, "a", 1), row(1, "b", 1), held]), INST, TRACE)
    assert sorted(p.rows["phase"]) == ["colocated", "colocated", "prefill"]
    # with a positive rate it is half a disaggregated class again
    refused([row(0, "a", 1), row(1, "b", 1), {**held, "rate_rps": 0.1}], r"epoch 1, class 'a': prefill rows but no")


def test_decode_without_prefill_is_refused():
    refused([row(0, "a", 1, phase="decode"), row(1, "b", 1)], r"epoch 0, class 'a': decode rows but no prefill rows")


def test_colocated_beside_disaggregated_is_refused():
    rows = [row(1, "b", 1), row(1, "b", 1, phase="prefill"), row(1, "b", 1, phase="decode"), row(0, "a", 1)]
    refused(rows, r"epoch 1, class 'b': colocated and disaggregated \(prefill/decode\) rows")


def test_malformed_json(tmp_path):
    f = tmp_path / "plan.json"
    f.write_text('{"allocations": [', encoding="utf-8")
    with pytest.raises(InputError, match=r"plan\.json: malformed JSON"):
        load_plan(f, INST, TRACE)


def test_not_an_object_and_no_allocations(tmp_path):
    f = tmp_path / "plan.json"
    f.write_text(json.dumps([1, 2]), encoding="utf-8")
    with pytest.raises(InputError, match="must be a JSON object"):
        load_plan(f, INST, TRACE)
    with pytest.raises(InputError, match="'allocations' is missing"):
        load_plan({"status": "optimal"}, INST, TRACE)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_plan(tmp_path / "nope.json", INST, TRACE)


def test_all_problems_in_one_line():
    e = refused([row(0, "zz", -1, chip="tpu-v9"), row(1, "b", 1)], r"chip: unknown chip")
    msg = str(e)
    assert "bucket: unknown class" in msg and "n_vpods: negative" in msg


def test_data_parallel_attention_needs_an_mla_model():
    # Llama-3-8B has no latent attention: a ":dpa" type cannot be run as named
    dpa = row(0, "a", 1, shape="2x2", chips_per_vpod=4, tp=4, ep=4, vpod_type="tpu-v6e:2x2:tp4pp1ep4:dpa:b2:colocated")
    refused([dpa, row(1, "b", 1)], r"allocations\[0\]\.vpod_type: the :dpa layout needs an MLA model and ep = tp > 1")
