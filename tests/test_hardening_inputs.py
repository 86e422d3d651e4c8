"""Hostile and malformed input, one test per hazard class: non-regular files (FIFO, device,
directory), NUL in a path, the size cap, deep nesting, encoding, non-finite numbers, booleans,
fractional counts, huge spans and horizons, demand beyond the horizon, a trace window outside the
trace, a plan the evaluator finds infeasible, the one loader, shipped names, and the Mélange exact
optimum against a brute force."""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import math
import os
import random
import signal
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from neuscale_opt.alloc.melange import (
    MelangeConfig,
    ProfileInstance,
    load_melange,
    melange_to_profile,
    profile_to_toml,
    solve_melange,
)
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.solution import solution_from_dict
from neuscale_opt.errors import InfeasibleError, InputError
from neuscale_opt.instance import Instance, load_instance, parse_instance, shipped_instances
from neuscale_opt.readers import MAX_BYTES_ENV, MAX_DEPTH, parse_json, parse_toml, read_bytes, read_text
from neuscale_opt.schema import MAX_EPOCHS
from neuscale_opt.traces.demand import epoch_demand
from neuscale_opt.traces.loaders import load_trace_file

ROOT = Path(__file__).resolve().parents[1]
INSTANCES = ROOT / "instances"
SMALL = tomllib.loads((INSTANCES / "small.toml").read_text())
MELANGE = json.loads((INSTANCES / "alloc" / "melange_example.json").read_text())


@contextlib.contextmanager
def deadline(seconds: int = 10):
    """Fail (instead of hanging the suite) when the body blocks longer than ``seconds``."""

    def _alarm(_sig, _frame):
        raise TimeoutError(f"blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _instance_error(mutate) -> str:
    data = copy.deepcopy(SMALL)
    mutate(data)
    with pytest.raises(InputError) as exc:
        parse_instance(data, where="x.toml")
    assert "\n" not in str(exc.value)
    return str(exc.value)


def _azure_csv(path: Path, times: list[str]) -> Path:
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [f"{t},100,20" for t in times]
    path.write_text("\n".join(rows) + "\n")
    return path


# -- non-regular files -------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    with deadline(), pytest.raises(InputError, match="FIFO"):
        load_instance(fifo)
    with deadline(), pytest.raises(InputError, match="FIFO"):
        load_trace_file(fifo)
    with deadline(), pytest.raises(InputError, match="FIFO"):
        load_melange(fifo)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_character_device_is_refused():
    with deadline(), pytest.raises(InputError, match="character device") as exc:
        load_trace_file("/dev/zero")
    assert str(exc.value).startswith("/dev/zero:")
    with deadline(), pytest.raises(InputError, match="character device"):
        load_instance("/dev/zero")


def test_directory_is_refused(tmp_path):
    for loader in (load_instance, load_trace_file, load_melange, read_bytes):
        with pytest.raises(InputError, match="is a directory"):
            loader(tmp_path)


def test_symlink_to_a_regular_file_is_read(tmp_path):
    link = tmp_path / "link.toml"
    link.symlink_to(INSTANCES / "small.toml")
    assert load_instance(link).name == "small"


def test_nul_in_a_path_is_one_line():
    for loader in (load_instance, load_trace_file, read_bytes):
        with pytest.raises(InputError, match="NUL byte") as exc:
            loader("instances/sm\0all.toml")
        assert "\n" not in str(exc.value)


def test_size_cap_is_checked_before_reading(tmp_path, monkeypatch):
    f = tmp_path / "big.csv"
    f.write_bytes(b"x" * 1000)
    assert read_bytes(f, max_bytes=1000) == b"x" * 1000
    with pytest.raises(InputError, match="1000 bytes, more than the 999-byte input limit"):
        read_bytes(f, max_bytes=999)
    monkeypatch.setenv(MAX_BYTES_ENV, "500")
    with pytest.raises(InputError, match="500-byte input limit"):
        load_trace_file(f)
    monkeypatch.setenv(MAX_BYTES_ENV, "lots")
    with pytest.raises(InputError, match=MAX_BYTES_ENV):
        read_bytes(f)


def test_gzip_bomb_is_bounded(tmp_path, monkeypatch):
    import gzip

    f = tmp_path / "bomb.csv.gz"
    f.write_bytes(gzip.compress(b"TIMESTAMP,ContextTokens,GeneratedTokens\n" + b"0" * 100_000))
    monkeypatch.setenv(MAX_BYTES_ENV, "50000")
    with pytest.raises(InputError, match="decompresses to more than the 50000-byte input limit"):
        load_trace_file(f)


# -- nesting and encoding ----------------------------------------------------------------------


def test_deep_nesting_is_refused_without_recursion_error(tmp_path):
    deep = 100_000
    with pytest.raises(InputError, match=f"nested {deep} levels deep at line 1"):
        parse_json("[" * deep + "]" * deep, "x.json")
    f = tmp_path / "deep.toml"
    f.write_text("name = 'x'\nnest = " + "[" * deep + "]" * deep + "\n")
    with pytest.raises(InputError, match=f"nested {deep} levels deep at line 2"):
        load_instance(f)
    with pytest.raises(InputError, match="dotted keys"):
        parse_toml("a" + ".a" * (MAX_DEPTH + 5) + " = 1", "x.toml")
    # brackets inside strings and comments do not count; the limit itself is accepted
    assert parse_json('{"a": "[[[[[[", "b": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}", "x")
    assert parse_toml('a = "[[[[" # ' + "[" * 200 + "\nb = '{{{{'", "x") == {"a": "[[[[", "b": "{{{{"}


def test_latin1_bytes_are_refused_with_their_offset(tmp_path):
    cfg = dict(MELANGE)
    rest = {k: v for k, v in cfg.items() if k != "gpu_info"}
    text = json.dumps({"gpu_info": {"A10G-caf\u00e9": cfg["gpu_info"]["A10G"]}, **rest}, ensure_ascii=False)
    raw = text.encode("latin-1")
    f = tmp_path / "latin1.json"
    f.write_bytes(raw)
    offset = raw.index(b"\xe9")
    with pytest.raises(InputError) as exc:
        load_melange(f)
    msg = str(exc.value)
    assert f"byte 0xe9 at byte offset {offset} (line 1" in msg and "Latin-1" in msg and "\n" not in msg
    # the same text in UTF-8 (with a byte-order mark) is read
    f.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert "A10G-caf\u00e9" in load_melange(f).gpu_info
    g = tmp_path / "binary.toml"
    g.write_bytes(b'name = "\xff\xfe\x00"\n')
    with pytest.raises(InputError, match="not UTF-8: byte 0xff at byte offset 8") as exc:
        read_text(g)
    assert "Latin-1" not in str(exc.value)


def test_latin1_trace_is_refused_with_its_offset(tmp_path):
    f = tmp_path / "t.csv"
    raw = "TIMESTAMP,ContextTokens,GeneratedTokens,note\n2024-01-01 00:00:00.000000,5,2,caf\u00e9\n".encode("latin-1")
    f.write_bytes(raw)
    with pytest.raises(InputError, match=f"not UTF-8: byte 0xe9 at byte offset {raw.index(0xE9)} \\(line 2"):
        load_trace_file(f)


def test_jsonl_line_that_is_not_an_object_names_the_line(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n[1, 2, 3]\n')
    with pytest.raises(InputError, match="row 2, column -: line 2 is not a JSON object"):
        load_trace_file(f, format="mooncake")


# -- numbers -----------------------------------------------------------------------------------


def test_non_finite_numbers_name_the_field_written():
    assert _instance_error(lambda d: d.__setitem__("energy", {"pue": math.inf})) == (
        "x.toml: energy.pue: must be a finite number"
    )
    msg = _instance_error(lambda d: d["workload"].__setitem__("rate_scale", math.inf))
    assert msg == "x.toml: workload.rate_scale: must be a finite number"
    msg = _instance_error(lambda d: d["workload"]["demand"][1].__setitem__("rate_rps", math.inf))
    assert msg == "x.toml: workload.demand[1].rate_rps: must be a finite number"
    msg = _instance_error(lambda d: d.__setitem__("planning", {"unserved_penalty": math.nan}))
    assert msg == "x.toml: planning.unserved_penalty: must be a finite number"


def test_infinity_in_a_melange_config_names_the_field(tmp_path):
    f = tmp_path / "inf.json"
    f.write_text(json.dumps(MELANGE).replace('"total_request_rate": 30.0', '"total_request_rate": Infinity'))
    with pytest.raises(InputError, match="total_request_rate: must be a finite number"):
        load_melange(f)
    f.write_text(json.dumps(MELANGE).replace('"cost": 1.01', '"cost": -Infinity'))
    with pytest.raises(InputError, match="gpu_info.A10G.cost: must be a finite number"):
        load_melange(f)


def test_booleans_are_not_numbers():
    assert _instance_error(lambda d: d["fleet"][0].__setitem__("chips", True)) == (
        "x.toml: fleet[0].chips: must be a number, not a boolean (true/false)"
    )
    msg = _instance_error(lambda d: d.__setitem__("search", {"batch_sizes": [1, True, 4]}))
    assert "search.batch_sizes: must be a number, not a boolean" in msg
    msg = _instance_error(lambda d: d.__setitem__("epochs", {"length_s": False}))
    assert "epochs.length_s: must be a number, not a boolean" in msg
    # a boolean field still takes booleans
    data = copy.deepcopy(SMALL)
    data["planning"] = {"allow_unserved": True}
    assert parse_instance(data).planning.allow_unserved is True


def test_counts_must_be_integral():
    msg = _instance_error(lambda d: d["fleet"][1].__setitem__("chips", 1.5))
    assert msg.startswith("x.toml: fleet[1].chips:") and "fractional" in msg
    data = copy.deepcopy(SMALL)
    data["fleet"][1]["chips"] = 8.0  # a whole float is a count
    assert parse_instance(data).fleet[1].chips == 8


def _plan_row(**changes) -> dict:
    row = {
        "epoch": 0,
        "bucket": "short",
        "phase": "colocated",
        "chip": "tpu-v6e",
        "shape": "2x2",
        "chips_per_vpod": 4,
        "tp": 4,
        "pp": 1,
        "ep": 1,
        "batch": 64,
        "n_vpods": 1,
        "rate_rps": 20.0,
    }
    row.update(changes)
    return row


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"n_vpods": 1.5}, "allocations[1].n_vpods: 1.5 is not an integer"),
        ({"n_vpods": True}, "allocations[1].n_vpods: True is not an integer"),
        ({"tp": 0}, "allocations[1].tp: must be >= 1"),
        ({"batch": -32}, "allocations[1].batch: negative (-32)"),
        ({"rate_rps": math.inf}, "allocations[1].rate_rps: inf is not a finite number"),
        ({"epoch": 10**12}, f"allocations[1].epoch: {10**12} is beyond the {MAX_EPOCHS} epochs"),
    ],
)
def test_plan_rows_are_checked_by_both_readers(changes, expected):
    """The evaluator's reader and the replay's reader apply the same number rules (exit 2)."""
    from neuscale_opt.replay.plan import load_plan

    plan = {"status": "feasible", "allocations": [_plan_row(), _plan_row(**changes)]}
    with pytest.raises(InputError, match=expected.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        solution_from_dict(plan, PlanOptions(), where="p.json")
    with pytest.raises(InputError, match=expected.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        load_plan(plan, load_instance(INSTANCES / "small.toml"))


def test_plan_rows_naming_unknown_chips_or_classes_are_malformed():
    from neuscale_opt.candidates import build_coefficients

    coeffs = build_coefficients(load_instance(INSTANCES / "small.toml"))
    plan = {"allocations": [_plan_row(chip="tpu-v9"), _plan_row(bucket="huge"), _plan_row(phase="both")]}
    with pytest.raises(InputError) as exc:
        solution_from_dict(plan, PlanOptions(), where="p.json", coeffs=coeffs)
    msg = str(exc.value)
    assert "allocations[0].chip: unknown chip 'tpu-v9' (fleet: tpu-v5e, tpu-v6e)" in msg
    assert "allocations[1].bucket: unknown class 'huge' (short, long)" in msg
    assert "allocations[2].phase: unknown phase 'both'" in msg
    assert solution_from_dict({"allocations": [_plan_row()]}, PlanOptions(), coeffs=coeffs).allocations.shape[0] == 1


def test_plan_header_numbers_and_status_are_checked():
    plan = {"status": "great", "allocations": [_plan_row()]}
    with pytest.raises(InputError, match="status: 'great' is not one of"):
        solution_from_dict(plan, PlanOptions())
    plan = {"status": "feasible", "objective_value": "cheap", "allocations": [_plan_row()]}
    with pytest.raises(InputError, match="objective_value: 'cheap' is not a number"):
        solution_from_dict(plan, PlanOptions())


# -- sizes -------------------------------------------------------------------------------------


def test_horizon_is_bounded():
    msg = _instance_error(lambda d: d.__setitem__("epochs", {"horizon": 10**9}))
    assert msg.startswith("x.toml: epochs.horizon:") and str(MAX_EPOCHS) in msg.replace(",", "").replace("_", "")


def test_rate_scale_is_bounded_by_the_rows_it_makes():
    from neuscale_opt.traces.scale import scale_trace

    trace = pd.DataFrame({"arrival_s": [0.0, 1.0], "input_tokens": [1, 1], "output_tokens": [1, 1]})
    with pytest.raises(InputError, match="workload.rate_scale: 1e\\+12 x 2 requests is more than"):
        scale_trace(trace, 1e12)
    assert len(scale_trace(trace, 3.0)) == 6


def test_trace_spanning_decades_is_refused_before_allocating(tmp_path):
    f = _azure_csv(tmp_path / "decades.csv", ["1990-01-01 00:00:00.000000", "2024-01-01 00:00:00.000000"])
    trace = load_trace_file(f)
    with pytest.raises(InputError, match=r"more than the 100000 epochs a plan may have"):
        epoch_demand(trace, None, epoch_s=300.0, subwindow_s=10.0)


def test_microsecond_epoch_is_refused(tmp_path):
    f = _azure_csv(tmp_path / "hour.csv", ["2024-01-01 00:00:00.000000", "2024-01-01 01:00:00.000000"])
    trace = load_trace_file(f)
    with pytest.raises(InputError, match="epochs of 1e-06 s"):
        epoch_demand(trace, None, epoch_s=1e-6, subwindow_s=1e-6)
    with pytest.raises(InputError, match="cells, more than"):
        epoch_demand(trace, None, epoch_s=300.0, subwindow_s=1e-6)


# -- semantics ---------------------------------------------------------------------------------


def test_demand_beyond_the_horizon_names_the_epochs():
    def mutate(d):
        d["epochs"] = {"horizon": 2}
        d["workload"]["demand"].append({"epoch": 5, "bucket": "short", "rate_rps": 1.0})
        d["workload"]["demand"].append({"epoch": 2, "bucket": "long", "rate_rps": 1.0})

    msg = _instance_error(mutate)
    assert "epoch(s) 2, 5 lie beyond epochs.horizon = 2 (epochs 0 .. 1 are planned)" in msg

    def late_event(d):
        d["epochs"] = {"horizon": 2}
        d["inventory_events"] = [{"epoch": 1, "chip": "tpu-v5e", "delta_chips": -4}]
        d["inventory_events"].append({"epoch": 3, "chip": "tpu-v5e", "delta_chips": 4})

    assert "inventory_events[1]: epoch 3 lies beyond epochs.horizon = 2" in _instance_error(late_event)


def test_trace_window_outside_the_trace_names_window_and_span(tmp_path):
    f = _azure_csv(
        tmp_path / "t.csv",
        ["2024-01-01 00:00:00.000000", "2024-01-01 00:01:00.000000", "2024-01-01 00:10:00.000000"],
    )
    with pytest.raises(
        InputError, match=r"start_s = 1000 s\) covers no request: the trace's 3 requests span 0 .. 600 s"
    ):
        load_trace_file(f, start_s=1000.0)
    with pytest.raises(InputError, match=r"start_s = 100 s, duration_s = 50 s\) covers no request"):
        load_trace_file(f, start_s=100.0, duration_s=50.0)
    assert len(load_trace_file(f, start_s=30.0)) == 2


def test_fewer_epochs_than_the_trace_plan_and_replay_cover_the_same_epochs(tmp_path):
    """With epochs.horizon = 2 on an hour-long trace, the demand the planner reads and the epochs
    the replay runs are both 0 and 1, and no request after 600 s reaches either."""
    from neuscale_opt.candidates import build_coefficients, candidates, instance_trace
    from neuscale_opt.replay.fixtures import simple_plan
    from neuscale_opt.replay.plan import load_plan
    from neuscale_opt.replay.simulate import instance_trace as replay_trace

    text = (INSTANCES / "azure-conv.toml").read_text().replace('path = "data/', f'path = "{INSTANCES}/data/')
    text = text.replace("horizon = 12", "horizon = 2")
    f = tmp_path / "short.toml"
    f.write_text(text)
    inst = load_instance(f)
    full = pd.read_csv(INSTANCES / "data" / "azure_llm_2023_conv.csv")
    t = pd.to_datetime(full["TIMESTAMP"]).astype("int64") / 1e9
    in_horizon = int(((t - t.min()) < 600.0).sum())
    assert len(instance_trace(inst)) == in_horizon < len(full)
    assert instance_trace(inst).attrs["rows_beyond_horizon"] == len(full) - in_horizon
    cset = candidates(inst)
    assert f"cut to epochs.horizon = 2 epochs (600 s): {len(full) - in_horizon} later requests" in " ".join(cset.notes)
    coeffs = build_coefficients(inst, cset)
    assert sorted(coeffs.demand["epoch"].unique()) == [0, 1]
    trace = replay_trace(inst)
    assert float(trace["arrival_s"].max()) < 600.0
    plan = load_plan(simple_plan(coeffs), inst, trace)
    assert plan.n_epochs == 2


def test_all_chips_removed_is_not_feasible(tmp_path):
    """Inventory events remove every chip from epoch 1 on, unserved demand not allowed: every
    horizon method reports ``infeasible`` (the evaluator's verdict), naming the epochs."""
    from neuscale_opt.horizon import plan_horizon

    data = copy.deepcopy(SMALL)
    data["workload"]["demand"] = [{"epoch": e, "bucket": "short", "rate_rps": 20.0} for e in range(3)]
    data["workload"]["classes"] = data["workload"]["classes"][:1]
    data["epochs"] = {"horizon": 3}
    data["horizon"] = {"window": 2}
    data["inventory_events"] = [
        {"epoch": 1, "chip": "tpu-v5e", "delta_chips": -16},
        {"epoch": 1, "chip": "tpu-v6e", "delta_chips": -8},
    ]
    inst = parse_instance(data)
    for method in ("milp", "neuscale-autoscaler"):
        sol = plan_horizon(inst, method)
        assert sol.status == "infeasible", method
        assert "unserved in epoch(s) 1, 2" in sol.diagnosis and "\n" not in sol.diagnosis
        assert "--allow-unserved" in sol.diagnosis and "planning.allow_unserved" in sol.diagnosis
    # allowing unserved demand makes the same schedule a plan
    data["planning"] = {"allow_unserved": True}
    assert plan_horizon(parse_instance(data), "milp").status in ("feasible", "optimal")


# -- one loader --------------------------------------------------------------------------------


def test_shipped_names_resolve_wherever_a_path_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = shipped_instances()
    assert {"default", "small", "horizon/azure-code", "alloc/two_gens"} <= set(names)
    assert load_instance("small").name == "small"
    assert load_instance("small.toml").path == (INSTANCES / "small.toml").resolve()
    assert load_instance("horizon/azure-code").workload.trace is not None
    # an existing file of that name wins over the shipped one
    (tmp_path / "small").write_text((INSTANCES / "small.toml").read_text().replace('name = "small"', 'name = "mine"'))
    assert load_instance("small").name == "mine"
    with pytest.raises(InputError, match="no such file"):
        load_instance("no-such-instance")


def test_copied_instance_with_a_missing_trace_suggests_init(tmp_path):
    f = tmp_path / "azure-conv.toml"
    f.write_text((INSTANCES / "azure-conv.toml").read_text())
    with pytest.raises(InputError) as exc:
        load_instance(f)
    msg = str(exc.value)
    assert "workload.trace.path" in msg and "data/azure_llm_2023_conv.csv: no such file" in msg
    assert "neuscale-opt init" in msg and "\n" not in msg


def test_referenced_trace_must_be_a_regular_file(tmp_path):
    f = tmp_path / "dir.toml"
    (tmp_path / "data").mkdir()
    f.write_text((INSTANCES / "azure-conv.toml").read_text().replace("data/azure_llm_2023_conv.csv", "data"))
    with pytest.raises(InputError, match="workload.trace.path data: is a directory"):
        load_instance(f)


def test_the_imported_melange_toml_validates(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text(profile_to_toml(melange_to_profile(load_melange(INSTANCES / "alloc" / "melange_example.json"))))
    prof = load_instance(f, profile=True)
    assert isinstance(prof, ProfileInstance) and prof.planning.slice_factor is None
    assert isinstance(load_instance(INSTANCES / "alloc" / "melange_example.json", profile=True), ProfileInstance)
    with pytest.raises(InputError, match="a profile instance"):
        load_instance(f)
    assert isinstance(load_instance(INSTANCES / "small.toml", profile=True), Instance)


# -- Mélange: exact continuous-share optimum ---------------------------------------------------


def _continuous_brute_force(cfg: MelangeConfig) -> float:
    """min sum_g cost_g n_g over integer counts n, enumerated, such that the demand can be shared
    continuously: an LP (scipy's linprog) finds shares x_{b,g} >= 0 with sum_g x_{b,g} = d_b and
    sum_b x_{b,g} / tput_{b,g} <= n_g. Independent of the package's model."""
    from scipy.optimize import linprog

    gpus = list(cfg.gpu_info)
    cells = [(i, j) for i in range(len(cfg.workload_distribution)) for j in range(len(cfg.workload_distribution[0]))]
    dem = [cfg.workload_distribution[i][j] * cfg.total_request_rate for i, j in cells]
    tput = [[cfg.gpu_info[g].tputs[i][j] for g in gpus] for i, j in cells]
    nb, ng = len(cells), len(gpus)
    top = [math.ceil(sum(d / t[k] for d, t in zip(dem, tput, strict=True) if t[k] > 0) + 1e-9) for k in range(ng)]
    best = math.inf
    for n in itertools.product(*(range(t + 1) for t in top)):
        cost = sum(cfg.gpu_info[g].cost * c for g, c in zip(gpus, n, strict=True))
        if cost >= best:
            continue
        a_eq = np.zeros((nb, nb * ng))
        a_ub = np.zeros((ng, nb * ng))
        bounds = []
        for b in range(nb):
            for k in range(ng):
                a_eq[b, b * ng + k] = 1.0
                ok = tput[b][k] > 0
                if ok:
                    a_ub[k, b * ng + k] = 1.0 / tput[b][k]
                bounds.append((0, None if ok else 0))
        res = linprog(np.zeros(nb * ng), A_ub=a_ub, b_ub=list(n), A_eq=a_eq, b_eq=dem, bounds=bounds, method="highs")
        if res.status == 0:
            best = cost
    return best


def _random_config(
    rng: random.Random, rows: int, cols: int, gpus: int, slice_factor: int = 1, rates=(5.0, 9.0, 14.0, 23.0)
) -> MelangeConfig:
    w = [[rng.choice([0.0, 0.1, 0.2, 0.3, 0.5]) for _ in range(cols)] for _ in range(rows)]
    w[0][0] += 0.1
    return MelangeConfig.model_validate(
        {
            "gpu_info": {
                f"G{k}": {
                    "cost": round(rng.uniform(0.5, 4.0), 2),
                    "tputs": [[rng.choice([1, 2, 3, 5, 8, 13, 20]) for _ in range(cols)] for _ in range(rows)],
                }
                for k in range(gpus)
            },
            "workload_distribution": w,
            "total_request_rate": rng.choice(rates),
            "slice_factor": slice_factor,
        }
    )


def test_melange_example_exact_and_sliced_answers():
    res = solve_melange(load_melange(INSTANCES / "alloc" / "melange_example.json"))
    # exact by hand: one A100 (3.67) carries all but 5 req/s of in1_out0, one A10G (1.01) those 5
    assert res.exact_usd_per_hour == pytest.approx(4.68, rel=1e-9)
    assert res.sliced_usd_per_hour == pytest.approx(6.70, rel=1e-9)  # Mélange's published S = 1 answer
    assert res.slice_factor == 1
    assert "4.68 USD/h" in res.summary() and "6.7 USD/h" in res.summary()


def test_melange_exact_matches_brute_force_on_tiny_configs():
    rng = random.Random(1515)
    for _ in range(6):
        cfg = _random_config(rng, 1, 2, 2)
        res = solve_melange(cfg)
        assert res.exact_usd_per_hour == pytest.approx(_continuous_brute_force(cfg), rel=1e-9), cfg.model_dump()


@pytest.mark.parametrize("slice_factor", [1, 2])
def test_melange_exact_never_dearer_than_slices(slice_factor):
    """Every slice assignment is one continuous share, so the exact optimum is at most Mélange's
    answer; on loads that need several accelerators it is strictly cheaper on some configs."""
    rng = random.Random(42 + slice_factor)
    cheaper = 0
    for _ in range(5):
        cfg = _random_config(rng, 2, 2, 3, slice_factor=slice_factor, rates=(37.0, 60.0))
        res = solve_melange(cfg)
        assert res.slice_factor == slice_factor
        assert res.exact_usd_per_hour <= res.sliced_usd_per_hour * (1 + 1e-9)
        cheaper += res.exact_usd_per_hour < res.sliced_usd_per_hour * (1 - 1e-9)
    assert cheaper >= 1


def test_melange_infeasible_config_names_the_bucket(tmp_path):
    data = copy.deepcopy(MELANGE)
    for g in data["gpu_info"].values():
        g["tputs"][1][0] = 0
    cfg = MelangeConfig.model_validate(data)
    with pytest.raises(InfeasibleError, match="class 'in1_out0'"):
        solve_melange(cfg)
    f = tmp_path / "uncoverable.json"
    f.write_text(json.dumps(data))
    from neuscale_opt.cli import main

    assert main(["plan", str(f), "--quiet"]) == 1


def test_melange_slice_factor_keyword_is_checked():
    cfg = load_melange(INSTANCES / "alloc" / "melange_example.json")
    assert melange_to_profile(cfg).planning.slice_factor is None
    assert melange_to_profile(cfg, slice_factor=3).planning.slice_factor == 3
    for bad in (0, 1.5, True):
        with pytest.raises(InputError, match="slice_factor"):
            melange_to_profile(cfg, slice_factor=bad)


# -- end to end: the commands answer with one line and the documented exit code -------------------


def _run(argv: list[str], capsys) -> tuple[int, str]:
    from neuscale_opt.cli import main

    code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_cli_answers_non_regular_inputs_with_one_line(tmp_path, capsys):
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    for argv in (["validate", str(fifo)], ["trace-stats", str(fifo)], ["validate", str(tmp_path)]):
        with deadline():
            code, err = _run(argv, capsys)
        assert code == 2 and err.count("\n") == 1 and ("FIFO" in err or "directory" in err), (argv, err)


def test_cli_evaluate_refuses_a_fractional_plan_row_with_exit_2(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"status": "feasible", "allocations": [_plan_row(n_vpods=1.5)]}))
    code, err = _run(["evaluate", str(plan), "--instance", str(INSTANCES / "small.toml")], capsys)
    assert code == 2 and "allocations[0].n_vpods: 1.5 is not an integer" in err and err.count("\n") == 1


def test_cli_validate_names_the_non_finite_field(tmp_path, capsys):
    f = tmp_path / "inf.toml"
    f.write_text((INSTANCES / "small.toml").read_text() + "\n[energy]\npue = inf\n")
    code, err = _run(["validate", str(f)], capsys)
    assert code == 2 and err.strip().endswith("inf.toml: energy.pue: must be a finite number")
