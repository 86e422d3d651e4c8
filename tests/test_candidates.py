"""Design-space exploration: enumeration, feasibility, Pareto fronts, coefficients."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from neuscale_opt.candidates import build_coefficients, candidates, parallelisms, pareto_mask, slice_shapes
from neuscale_opt.catalog import get_chip, get_model
from neuscale_opt.coefficients import CONFIG_COLUMNS, meets_slo
from neuscale_opt.instance import load_instance, parse_instance

INSTANCES = Path(__file__).resolve().parents[1] / "instances"


@pytest.fixture(scope="module")
def small():
    inst = load_instance(INSTANCES / "small.toml")
    return inst, candidates(inst)


def test_slice_enumeration_follows_the_catalog():
    assert slice_shapes(get_chip("tpu-v5e"), 16) == [(1, 1), (2, 2), (2, 4), (4, 4)]
    v4 = slice_shapes(get_chip("tpu-v4"), 128)
    assert (2, 2, 4) in v4 and (4, 4, 4) in v4 and (4, 4, 8) in v4 and (4, 8, 8) not in v4
    assert all(np.prod(s) <= 128 for s in v4)


def test_parallelisms_cover_tp_times_pp():
    par = parallelisms(get_model("Llama-3-70B"), 16)
    assert (16, 1, 1) in par and (1, 16, 1) in par and (4, 4, 1) in par
    assert all(tp * pp == 16 for tp, pp, _ in par)
    moe = parallelisms(get_model("Mixtral-8x7B"), 8)
    assert (8, 1, 8) in moe and (8, 1, 1) in moe


def test_memory_infeasible_configurations_are_never_offered():
    text = (INSTANCES / "small.toml").read_text().replace('name = "Llama-3-8B"', 'name = "Llama-3-70B"', 1)
    inst = parse_instance(tomllib.loads(text))
    cs = candidates(inst)
    t = cs.table
    # 70B in bf16 (141 GB) cannot sit on fewer than 5 v5e (16 GiB) or 5 v6e (32 GiB) chips
    m = get_model("Llama-3-70B")
    hbm = t["chip"].map({"tpu-v5e": 16 * 2**30, "tpu-v6e": 32 * 2**30})
    too_small = m.weight_bytes / t["chips_per_vpod"] > hbm
    assert too_small.any()
    assert not t.loc[too_small, "memory_ok"].any()
    coeffs = build_coefficients(inst, cs)
    assert (m.weight_bytes / coeffs.configs["chips_per_vpod"] <= 32 * 2**30).all()
    assert set(coeffs.configs["config_id"]) <= set(t.loc[t["memory_ok"], "config_id"])


def test_energy_is_at_least_static_power_times_time(small):
    _, cs = small
    t = cs.table
    assert (t["energy_j_per_req"] >= t["static_power_w"] / t["max_rate_rps"] * (1 - 1e-12)).all()
    assert (t["dyn_energy_j_per_req"] > 0).all()


def test_colocated_rate_and_latencies_by_hand(small):
    """R12: busy time per request = prefill stage + S_out decode stages / B."""
    _, cs = small
    t = cs.table.set_index("config_id")
    co = t.loc["tpu-v6e:2x2:tp4pp1ep1:b16:colocated|short"]
    pre = t.loc["tpu-v6e:2x2:tp4pp1ep1:b1:prefill|short"]
    dec = t.loc["tpu-v6e:2x2:tp4pp1ep1:b16:decode|short"]
    busy = pre["ttft_s"] + 128 * dec["tpot_s"] / 16
    assert co["max_rate_rps"] == pytest.approx(1 / busy)
    assert co["ttft_s"] == pytest.approx(pre["ttft_s"])
    assert co["e2e_s"] == pytest.approx(co["ttft_s"] + 128 * co["tpot_s"])
    assert co["tpot_s"] == pytest.approx(dec["tpot_s"] * (1 + 16 * pre["ttft_s"] / (128 * dec["tpot_s"])))
    assert co["cost_usd_per_req"] == pytest.approx(4 * 2.70 / 3600 * busy)


def test_pareto_front_equals_brute_force(small):
    _, cs = small
    f = cs.table[cs.table["feasible"]].reset_index(drop=True)
    for metric in ("energy_j_per_req", "cost_usd_per_req"):
        mask = pareto_mask(f, metric)
        for (_b, _p), g in f.groupby(["bucket", "phase"]):
            lat, val = g["latency_s"].to_numpy(), g[metric].to_numpy()
            for i, idx in enumerate(g.index):
                dominated = np.any(((lat <= lat[i]) & (val < val[i])) | ((lat < lat[i]) & (val <= val[i])))
                if dominated:
                    assert not mask[idx]
                else:
                    # undominated: on the front unless an identical point came first
                    same = (lat == lat[i]) & (val == val[i])
                    first = g.index[same][0]
                    assert mask[idx] == (idx == first)


def test_slo_targets_are_five_times_the_reference(small):
    inst, cs = small
    b = cs.buckets.set_index("bucket")
    assert "tpu-v5p:2x2x1:tp4" in cs.slo_note
    assert (b["ttft_slo_s"] > 0).all() and b["e2e_slo_s"].isna().all()
    t = cs.table
    assert (t["slo_ok"] == meets_slo(t, cs.buckets)).all()
    assert not t.loc[(t["phase"] == "decode") & (t["tpot_s"] > t["bucket"].map(b["tpot_slo_s"])), "slo_ok"].any()


def test_coefficients_hold_the_feasible_rows_of_every_phase(small):
    inst, cs = small
    c = build_coefficients(inst, cs)
    assert set(CONFIG_COLUMNS) <= set(c.configs.columns)
    assert set(c.configs["phase"]) == {"colocated", "prefill", "decode"}
    assert len(c.configs) == int(cs.table["feasible"].sum())
    assert c.configs["config_id"].is_unique
    assert c.inventory() == {"tpu-v5e": 16.0, "tpu-v6e": 8.0}
    assert list(c.demand.columns) == ["epoch", "bucket", "rate_rps"]
    assert pd.api.types.is_integer_dtype(c.demand["epoch"])


def test_candidates_are_deterministic(small):
    inst, cs = small
    again = candidates(inst).table
    pd.testing.assert_frame_equal(cs.table, again)


def test_classes_beyond_the_context_window_are_noted():
    cs = candidates(load_instance(INSTANCES / "default.toml"))
    assert any("s8192-inf" in n and "8192-token context" in n for n in cs.notes)
    assert candidates(load_instance(INSTANCES / "small.toml")).notes == ()


def test_gpu_vpods_beyond_a_node_pipeline_over_the_dcn():
    inst = parse_instance(
        {
            "model": {"name": "Llama-3.1-405B"},
            "fleet": [{"chip": "nvidia-h100", "chips": 64}],
            "workload": {
                "classes": [{"name": "a", "input_tokens": 1000, "output_tokens": 200}],
                "demand": [{"epoch": 0, "bucket": "a", "rate_rps": 1.0}],
            },
            "slo": {"reference_chip": "nvidia-h100"},
        }
    )
    t = candidates(inst).table
    fits = t[t["memory_ok"]]
    assert len(fits) and (fits["chips_per_vpod"] >= 16).all()
    multi = t[t["chips_per_vpod"] > 8]
    assert (multi["tp"] <= 8).all() and (multi["pp"] % (multi["chips_per_vpod"] // 8) == 0).all()
    assert (multi["dcn_bytes"] > 0).all() and (t.loc[t["chips_per_vpod"] <= 8, "dcn_bytes"] == 0).all()


def test_text_column_is_the_column_pandas_makes_of_the_strings():
    from neuscale_opt.candidates import text_column

    values = np.array(["colocated", "prefill", "decode"])
    codes = np.array([2, 0, 0, 1, 2])
    got = pd.Series(text_column(values, codes))
    want = pd.Series(["decode", "colocated", "colocated", "prefill", "decode"])  # inferred by pandas
    pd.testing.assert_series_equal(got, want, check_exact=True)
    # a missing value (None) among the distinct values stays missing
    got = pd.Series(text_column(np.array(["a", None], dtype=object), np.array([1, 0])))
    pd.testing.assert_series_equal(got, pd.Series([None, "a"]), check_exact=True)


def test_meets_slo_by_phase_and_missing_class():
    buckets = pd.DataFrame(
        {"bucket": ["a", "b"], "ttft_slo_s": [1.0, np.nan], "tpot_slo_s": [0.1, 0.1], "e2e_slo_s": [10.0, np.nan]}
    )
    configs = pd.DataFrame(
        {
            "bucket": ["a", "a", "a", "b", "zz"],
            "phase": ["colocated", "prefill", "decode", "colocated", "colocated"],
            "ttft_s": [0.5, 2.0, 2.0, 5.0, 9.0],
            "tpot_s": [0.2, 9.0, 0.05, 0.1, 9.0],
            "e2e_s": [5.0, np.nan, np.nan, 50.0, 99.0],
        }
    )
    # row 0: TPOT 0.2 > 0.1; row 1: prefill held to TTFT only (2 > 1); row 2: decode to TPOT only;
    # row 3: class b has a TPOT target only (0.1 meets it); row 4: class zz has no targets at all
    assert meets_slo(configs, buckets).tolist() == [False, False, True, True, True]


def _trace_instance(trace: Path, provision_for: str = "peak"):
    return parse_instance(
        {
            "name": "t",
            "model": {"name": "Llama-3-8B"},
            "fleet": [{"chip": "tpu-v5e", "chips": 16}],
            "workload": {
                "trace": {"path": str(trace), "format": "azure"},
                "buckets": {"kind": "total", "edges": [512]},
                "provision_for": provision_for,
                "subwindow_s": 10.0,
            },
            "epochs": {"length_s": 300.0, "horizon": 2},
            "search": {"max_chips_per_vpod": 4},
        }
    )


def _write_azure(path: Path, rows: list[tuple[float, int, int]]) -> None:
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [f"2023-11-16 18:{int(t // 60):02d}:{t % 60:09.6f},{i},{o}" for t, i, o in rows]
    path.write_text("\n".join(lines) + "\n")


def _rates(cs) -> dict[tuple[int, str], float]:
    d = cs.demand
    return {(int(e), str(b)): float(r) for e, b, r in zip(d["epoch"], d["bucket"], d["rate_rps"], strict=True)}


def test_trace_demand_follows_the_file_and_is_handed_out_as_copies(tmp_path):
    # the classes and demand of a trace are read once per file content: a rewritten file is read
    # again, and what one caller changes in its tables never reaches the next caller
    trace = tmp_path / "t.csv"
    _write_azure(trace, [(0.0, 100, 20), (1.0, 100, 20), (2.0, 100, 20), (400.0, 100, 20)])
    inst = _trace_instance(trace)
    first = candidates(inst)
    # peak 10-s window per epoch: 3 requests in [0, 10) of epoch 0, 1 in epoch 1 (hand-counted)
    assert _rates(first) == pytest.approx(
        {(0, "s0-512"): 0.3, (0, "s512-inf"): 0.0, (1, "s0-512"): 0.1, (1, "s512-inf"): 0.0}
    )
    first.demand.loc[:, "rate_rps"] = -1.0
    first.buckets.loc[:, "input_tokens"] = 0
    first.demand.attrs["rows_beyond_horizon"] = 99
    again = candidates(inst)
    assert _rates(again) == _rates(candidates(_trace_instance(trace)))
    assert _rates(again)[(0, "s0-512")] == pytest.approx(0.3)
    assert again.buckets["input_tokens"].tolist()[0] == 100 and again.demand.attrs["rows_beyond_horizon"] == 0
    pd.testing.assert_frame_equal(again.table, candidates(_trace_instance(trace)).table)
    _write_azure(trace, [(0.0, 700, 50), (5.0, 700, 50)])  # same path, other requests
    changed = candidates(inst)
    assert _rates(changed) == pytest.approx(
        {(0, "s0-512"): 0.0, (0, "s512-inf"): 0.2, (1, "s0-512"): 0.0, (1, "s512-inf"): 0.0}
    )
    # the now empty class s0-512: its midpoint 256 split in the trace's 700:50 ratio, 256 x 700/750 = 238.9
    assert changed.buckets["input_tokens"].tolist() == [239, 700]


def test_mean_provisioning_sizes_for_the_mean_rate(tmp_path):
    trace = tmp_path / "t.csv"
    _write_azure(trace, [(0.0, 100, 20), (1.0, 100, 20), (2.0, 100, 20), (400.0, 100, 20)])
    cs = candidates(_trace_instance(trace, provision_for="mean"))
    # 3 and 1 requests over 300-s epochs (hand-counted); provisioned rate = arriving rate, ratio 1
    assert _rates(cs)[(0, "s0-512")] == pytest.approx(3 / 300) and _rates(cs)[(1, "s0-512")] == pytest.approx(1 / 300)
    assert cs.buckets["mean_rate_ratio"].tolist() == [1.0, 1.0]


def test_pareto_front_of_several_metrics_with_ties_equals_brute_force():
    # integer-valued points with many exact ties, three groups numbered sparsely
    from neuscale_opt.candidates import pareto_front

    rng = np.random.default_rng(3)
    n = 300
    group = rng.choice([7, 40, 1000], size=n)
    lat = rng.integers(0, 12, size=n).astype(float)
    metrics = [rng.integers(0, 9, size=n).astype(float) for _ in range(2)]
    fronts = pareto_front(group, lat, *metrics)
    for val, mask in zip(metrics, fronts, strict=True):
        for i in range(n):
            same_g = group == group[i]
            dominated = np.any(same_g & (((lat <= lat[i]) & (val < val[i])) | ((lat < lat[i]) & (val <= val[i]))))
            twin_before = np.any(same_g[:i] & (lat[:i] == lat[i]) & (val[:i] == val[i]))
            assert mask[i] == (not dominated and not twin_before)
    assert pareto_front(group, lat, metrics[0]).tolist() == fronts[0].tolist()


def test_trace_hash_is_kept_per_file_identity_and_redone_when_the_file_changes(tmp_path, monkeypatch):
    import hashlib

    import neuscale_opt.candidates as cand
    import neuscale_opt.readers as readers

    reads = []
    real = readers.read_bytes
    monkeypatch.setattr(readers, "read_bytes", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    monkeypatch.setattr(cand, "_TRACE_DIGESTS", {})
    path = tmp_path / "t.csv"
    # a file written just now is hashed on every call: a second write in the same clock tick, of
    # the same size, could leave its size and times unchanged
    path.write_bytes(b"a,b\n1,2\n")
    assert cand._trace_digest(path) == hashlib.sha256(b"a,b\n1,2\n").hexdigest()
    path.write_bytes(b"a,b\n3,4\n")
    assert cand._trace_digest(path) == hashlib.sha256(b"a,b\n3,4\n").hexdigest()
    assert len(reads) == 2
    # a settled file is hashed once per (size, times, inode); a rewrite is a new key
    monkeypatch.setattr(cand, "_TRACE_DIGEST_SETTLED_NS", -1)
    assert cand._trace_digest(path) == hashlib.sha256(b"a,b\n3,4\n").hexdigest()
    assert cand._trace_digest(path) == hashlib.sha256(b"a,b\n3,4\n").hexdigest()
    assert len(reads) == 3
    path.write_bytes(b"a,b\n5,6\n7,8\n")
    assert cand._trace_digest(path) == hashlib.sha256(b"a,b\n5,6\n7,8\n").hexdigest()
    assert len(reads) == 4


def test_pareto_front_with_nan_inf_and_signed_zeros_equals_brute_force():
    # the rule's order: group, latency, metric, position; NaN after every number (NaNs tie), -0.0 == 0.0
    from neuscale_opt.candidates import pareto_front

    rng = np.random.default_rng(11)
    pool = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0, 2.5])
    for _ in range(20):
        n = int(rng.integers(1, 120))
        group = rng.choice([3, 5, 900], size=n)
        lat, metric = rng.choice(pool, size=n), rng.choice(pool, size=n)

        def key(v):
            return (1, 0.0) if np.isnan(v) else (0, v)

        mask = pareto_front(group, lat, metric)
        for i in range(n):
            earlier = [
                j
                for j in range(n)
                if group[j] == group[i] and (key(lat[j]), key(metric[j]), j) < (key(lat[i]), key(metric[i]), i)
            ]
            assert mask[i] == all(key(metric[j]) > key(metric[i]) for j in earlier)


def _reference_by_hand(inst, name: str) -> dict[str, np.ndarray]:
    """Batch-1 TTFT, TPOT and e2e of every class on the named reference configuration
    (``chip:AxBxC:tpN``), from the roofline step directly: prefill of the prompt, decode at half
    the output past the prompt."""
    from neuscale_opt.candidates import chip_context, effective_model, instance_buckets_and_demand
    from neuscale_opt.roofline import for_slice, step_cost

    chip_name, shape_s, tp_s = name.split(":")
    shape, tp = tuple(int(x) for x in shape_s.split("x")), int(tp_s[2:])
    chip, model = get_chip(chip_name), effective_model(inst)
    buckets, _ = instance_buckets_and_demand(inst)
    si = buckets["input_tokens"].to_numpy(dtype=float)
    so = buckets["output_tokens"].to_numpy(dtype=float)
    hw = for_slice(chip_context(inst, chip_name).hw, chip, shape, tp)
    pre = step_cost(model, hw, tp, 1, 1, 1.0, si, 0.0).latency_s
    dec = step_cost(model, hw, tp, 1, 1, 1.0, 1.0, si + so / 2.0).latency_s
    return {"ref_ttft_s": pre, "ref_tpot_s": dec, "ref_e2e_s": pre + so * dec}


def test_slo_reference_follows_every_input_it_depends_on():
    """The reference latencies are kept between calls: a change of any input (classes, model,
    reference chip or shape, calibration, usable HBM, the chip's fleet settings) gives the new
    latencies, equal to the roofline's computed by hand on the named configuration."""
    from neuscale_opt.candidates import (
        _reference_of,
        apply_slo,
        chip_context,
        effective_model,
        instance_buckets_and_demand,
        reference_latencies,
    )

    base = tomllib.loads((INSTANCES / "small.toml").read_text())

    def variant(path: tuple, value):
        d = tomllib.loads((INSTANCES / "small.toml").read_text())
        node = d
        for k in path[:-1]:
            node = node.setdefault(k, {}) if isinstance(k, str) else node[k]
        node[path[-1]] = value
        return d

    variants = [
        base,
        variant(("workload", "classes", 0, "input_tokens"), 1024),
        variant(("workload", "classes", 1, "output_tokens"), 64),
        variant(("model", "weight_dtype"), "fp8"),
        variant(("slo", "reference_chip"), "tpu-v5e"),
        variant(("slo", "reference_shape"), "2x2x2"),
        variant(("search", "calibration"), "none"),
        variant(("search", "hop_latency_s"), 5e-6),
        variant(("fleet", 0, "eff_compute"), 0.3),
        variant(("fleet", 0, "eff_hbm"), 0.4),
        variant(("energy", "profile"), "neusim"),
    ]
    variants[-3]["slo"] = {"reference_chip": "tpu-v5e"}
    variants[-2]["slo"] = {"reference_chip": "tpu-v5e"}
    variants[-1]["slo"] = {"reference_chip": "tpu-v5e"}
    seen = {}
    _reference_of.cache_clear()
    for d in variants + variants:  # the second pass is served from the cache
        inst = parse_instance(d)
        model, buckets = effective_model(inst), instance_buckets_and_demand(inst)[0]
        ref = reference_latencies(inst, model, buckets)
        name = ref.attrs["reference"]
        want = _reference_by_hand(inst, name)
        for col, v in want.items():
            np.testing.assert_allclose(ref[col].to_numpy(), v, rtol=1e-12)
        # through the fleet's chip settings (as candidates() calls it), the same targets
        ctxs = {c: chip_context(inst, c) for c in inst.chip_names}
        b1, note1 = apply_slo(inst, model, buckets, ctxs)
        b2, note2 = apply_slo(inst, model, buckets)
        pd.testing.assert_frame_equal(b1, b2)
        assert note1 == note2
        seen.setdefault(repr(d), tuple(ref["ref_ttft_s"]) + tuple(ref["ref_tpot_s"]))
    assert _reference_of.cache_info().hits >= len(variants)
    # every variant changes the reference but the energy profile (not a latency input)
    assert len(set(seen.values())) == len(variants) - 1


def test_config_ids_follow_the_classes_batches_and_kinds_of_each_call():
    """The kinds' columns and the config ids are kept between calls: renamed classes, other batch
    sizes, phases or a larger vPod limit give the new ids, each written out by hand from the row's
    columns."""
    d = tomllib.loads((INSTANCES / "small.toml").read_text())
    runs = [d]
    for change in (
        lambda x: x["workload"]["classes"][0].update(name="tiny"),
        lambda x: x["search"].update(batch_sizes=[1, 3, 16]),
        lambda x: x["search"].update(phases=["prefill", "decode"]),
        lambda x: x["search"].update(max_chips_per_vpod=8),
    ):
        nxt = copy.deepcopy(runs[-1])
        change(nxt)
        if "demand" in nxt["workload"]:
            for row in nxt["workload"]["demand"]:
                row["bucket"] = "tiny" if row["bucket"] == "short" else row["bucket"]
        runs.append(nxt)
    for d in runs + runs:
        inst = parse_instance(d)
        t = candidates(inst).table
        kind = t["chip"] + ":" + t["shape"] + ":tp" + t["tp"].astype(str) + "pp" + t["pp"].astype(str)
        kind = kind + "ep" + t["ep"].astype(str)
        vpod = kind + ":b" + t["batch"].astype(str) + ":" + t["phase"].astype(str)
        assert list(t["vpod_type"]) == list(vpod)
        assert list(t["config_id"]) == list(vpod + "|" + t["bucket"].astype(str))
        assert set(t["bucket"]) == {c["name"] for c in d["workload"]["classes"]}
        assert set(t["batch"]) == set(d["search"].get("batch_sizes", t["batch"].unique()))
        assert set(t["phase"]) == set(d["search"].get("phases", ("colocated", "prefill", "decode")))
        assert t["chips_per_vpod"].max() <= d["search"]["max_chips_per_vpod"]
        assert t["config_id"].is_unique


def test_table_from_blocks_is_the_table_of_its_columns(monkeypatch):
    """The table made of the grid's dtype blocks (pandas 3) equals the constructor's table of the
    same columns, values, dtypes, column and row labels alike; a column replaced after the grid
    was made is the replacement's."""
    import neuscale_opt.candidates as cand

    inst = load_instance(INSTANCES / "small.toml")
    got = candidates(inst).table
    monkeypatch.setattr(cand, "_FROM_BLOCKS", None)
    want = candidates(inst).table
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    pd.testing.assert_index_equal(got.columns, want.columns, exact=True)
    pd.testing.assert_index_equal(got.index, want.index, exact=True)
    monkeypatch.undo()
    if cand._FROM_BLOCKS is None:
        pytest.skip("pandas 2: no table from blocks")
    model = cand.effective_model(inst)
    ctxs = {c: cand.chip_context(inst, c) for c in inst.chip_names}
    kinds = [k for c in inst.chip_names for k in cand.vpod_kinds(model, ctxs[c].chip, inst.search.max_chips_per_vpod)]
    buckets, _ = cand.instance_buckets_and_demand(inst)
    grid = cand._grid_columns(model, ctxs, kinds, buckets, inst.search.batch_sizes, inst.search.phases)
    cols = dict(grid.columns)
    cols["tp"] = np.arange(len(cols["tp"]), dtype=np.int64)  # no longer a row of the int64 block
    t = cand._frame(cols, grid.blocks)
    assert t["tp"].tolist() == list(range(len(t)))
    assert t["pp"].tolist() == grid.columns["pp"].tolist() and t._mgr.nblocks < len(t.columns)
    assert list(t.columns) == list(cols)


def test_phase_and_energy_profile_columns_follow_each_call():
    """The phase and energy-profile columns are kept per (values, run lengths): each row's phase is
    the one its config id names, its energy profile its chip's, after changes of the phases,
    batch sizes, chips and energy profile; a column changed by one caller is not the next's."""
    d = tomllib.loads((INSTANCES / "small.toml").read_text())
    variants = [d]
    for change in (
        lambda x: x["search"].update(phases=["decode", "prefill"]),
        lambda x: x["search"].update(batch_sizes=[2, 4]),
        lambda x: x.update(
            fleet=[{"chip": c, "chips": 64, "price_usd_per_chip_hour": 2.0} for c in ("tpu-v6e", "tpu7x", "tpu-v5e")]
        ),
        lambda x: x.setdefault("energy", {}).update(profile="neusim"),
    ):
        nxt = copy.deepcopy(variants[-1])
        change(nxt)
        variants.append(nxt)
    from neuscale_opt.candidates import chip_context

    profiles = set()
    for v in variants + variants:
        inst = parse_instance(v)
        t = candidates(inst).table
        assert t["phase"].tolist() == [c.split("|")[0].rsplit(":", 1)[1] for c in t["config_id"]]
        want = {c: chip_context(inst, c).energy_profile for c in inst.chip_names}
        assert t["energy_profile"].tolist() == [want[c] for c in t["chip"]]
        profiles |= set(want.values())
        t.loc[:, "phase"] = "x"
        t.loc[:, "energy_profile"] = "y"
    assert profiles == {"neuscale", "neusim", "genz"}  # the catalog's fallback for tpu7x: genz


def test_slo_targets_leave_the_given_classes_as_they_were():
    """apply_slo hands out a table of its own: the input keeps its missing targets, and what the
    caller changes in the output (in place or by column) never reaches the input."""
    from neuscale_opt.candidates import apply_slo, effective_model, instance_buckets_and_demand

    inst = load_instance(INSTANCES / "small.toml")
    buckets, _ = instance_buckets_and_demand(inst)
    before = buckets.copy(deep=True)
    out, _ = apply_slo(inst, effective_model(inst), buckets)
    assert out["ttft_slo_s"].notna().all() and buckets["ttft_slo_s"].isna().all()
    out.loc[:, "input_tokens"] = 1
    out["bucket"] = "x"
    out.loc[0, "e2e_slo_s"] = 3.0
    pd.testing.assert_frame_equal(buckets, before, check_exact=True)


@pytest.mark.parametrize("provision_for", ["peak", "mean"])
def test_a_prewarmed_forecast_never_reads_the_last_lead_seconds(tmp_path, provision_for):
    # the plan of epoch 1 is made L = 30 s before it (the default pre-warm): arrivals in [270, 300)
    # s may change it only when the plan is made at the boundary. (Burst sizing's window w* is a
    # calibration over the whole trace, D9, so two traces may get different windows; D11 given a
    # window is tested in tests/traces/test_sizing_window.py.)
    from neuscale_opt.candidates import build_coefficients
    from neuscale_opt.horizon.rolling import forecast_window

    base = [(float(t), 100, 20) for t in range(0, 260, 7)] + [(400.0, 100, 20)]
    late = [(271.0 + 0.5 * k, 100, 20) for k in range(40)]
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    _write_azure(a, base)
    _write_azure(b, sorted(base + late))
    ca, cb = (build_coefficients(_trace_instance(p, provision_for)) for p in (a, b))
    assert ca.demand.attrs["observed_lead_s"] == 30.0
    seen = [forecast_window(c, "last-peak", 1, [1], prewarm=True) for c in (ca, cb)]
    assert seen[0] == pytest.approx(seen[1])
    blind = [forecast_window(c, "last-peak", 1, [1], prewarm=False) for c in (ca, cb)]
    assert blind[0][("s0-512", 1)] < blind[1][("s0-512", 1)]
    # the same trace and workload without pre-warming: no observed history (not the cached one)
    from neuscale_opt.instance import Horizon

    plain = _trace_instance(a, provision_for)
    plain = plain.model_copy(update={"horizon": Horizon(prewarm=False)})
    cp = build_coefficients(plain)
    assert cp.demand.attrs["observed_lead_s"] == 0.0 and "observed_rps" not in cp.demand.columns
    assert "observed_rps" in build_coefficients(_trace_instance(a, provision_for)).demand.columns
