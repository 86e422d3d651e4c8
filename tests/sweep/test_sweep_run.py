"""Running sweeps: executors agree, a killed sweep resumes, rows match direct plans, robust plans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from neuscale_opt.alloc.evaluate import evaluate
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.candidates import build_coefficients
from neuscale_opt.cli import main
from neuscale_opt.sweep.analysis import robust_plans
from neuscale_opt.sweep.report import write_sweep_report
from neuscale_opt.sweep.run import TIMING_COLUMNS, RowStore, held_objective, prepare, run_sweep
from neuscale_opt.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "instances" / "small.toml"
SPEC = f"""
name = "tiny"
base = "{SMALL}"
design = "grid"
methods = ["milp"]
time_limit_s = 30

[set]
"catalog.energy_profiles[neuscale][tpu-v6e].tflop_per_j" = 4.55

[[parameter]]
name = "rate"
path = "workload.rate_scale"
values = [0.8, 1.25]

[[parameter]]
name = "slo"
path = "slo.multiplier"
values = [3.0, 8.0]
"""


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("spec") / "tiny.toml"
    p.write_text(SPEC, encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def pool_rows(spec_path, tmp_path_factory) -> pd.DataFrame:
    rows, stats = run_sweep(prepare(load_sweep(spec_path)), tmp_path_factory.mktemp("pool"), workers=2)
    assert len(stats.computed) == 5 and not stats.skipped
    return rows


def _comparable(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.drop(columns=list(TIMING_COLUMNS)).reset_index(drop=True)


def test_rows_are_complete_and_sorted(pool_rows):
    assert list(pool_rows["scenario_id"]) == ["nominal", "s0001", "s0002", "s0003", "s0004"]
    assert set(pool_rows["status"]) == {"optimal"} and pool_rows["feasible"].all()
    assert (pool_rows["error"] == "").all()


def test_dask_local_cluster_gives_the_same_rows_as_the_process_pool(spec_path, pool_rows, tmp_path):
    pytest.importorskip("distributed")
    rows, _ = run_sweep(prepare(load_sweep(spec_path)), tmp_path / "dask", workers=2, scheduler="dask")
    pd.testing.assert_frame_equal(_comparable(rows), _comparable(pool_rows))
    on_disk = pd.read_parquet(tmp_path / "dask" / "scenarios.parquet")
    pd.testing.assert_frame_equal(_comparable(on_disk), _comparable(pool_rows))
    csv = pd.read_csv(tmp_path / "dask" / "scenarios.csv", keep_default_na=False)
    assert list(csv["scenario_id"]) == list(pool_rows["scenario_id"])


def test_a_killed_sweep_resumes_with_only_the_missing_scenarios(spec_path, pool_rows, tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-c", "import sys; from neuscale_opt.cli import main; sys.exit(main(sys.argv[1:]))"]
    cmd += ["sweep", str(spec_path), "--out", str(out), "--scheduler", "local", "--quiet", "--no-robust"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if len(list((out / "rows").glob("*.parquet"))) >= 1:
                break
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = {p.stem for p in (out / "rows").glob("*.parquet")}
    assert 1 <= len(done) < 5, done
    rows, stats = run_sweep(prepare(load_sweep(spec_path)), out, scheduler="local")
    assert sorted(stats.skipped) == sorted(done)
    assert sorted(stats.computed) == sorted(set(pool_rows["scenario_id"]) - done)
    pd.testing.assert_frame_equal(_comparable(rows), _comparable(pool_rows))
    # a third run has nothing left to do
    _, again = run_sweep(prepare(load_sweep(spec_path)), out, scheduler="local")
    assert again.computed == [] and len(again.skipped) == 5


def test_a_rerun_into_the_folder_of_another_sweep_is_refused(spec_path, tmp_path):
    out = tmp_path / "o"
    prepared = prepare(load_sweep(spec_path))
    from neuscale_opt.sweep.run import _check_out

    _check_out(out, prepared)
    other = tmp_path / "other.toml"
    changed = SPEC.replace("[0.8, 1.25]", "[0.9, 1.25]")
    assert changed != SPEC
    other.write_text(changed, encoding="utf-8")
    assert main(["sweep", str(other), "--out", str(out), "--quiet"]) == 2


def test_a_half_written_csv_line_is_dropped_on_resume(tmp_path):
    cols = ("scenario_id", "varied", "status", "objective")
    store = RowStore(tmp_path, cols)
    store.add({"scenario_id": "nominal", "varied": "", "status": "optimal", "objective": 1.5})
    with (tmp_path / "rows.csv").open("a") as fh:
        fh.write("s0001,,opti")
    RowStore(tmp_path, cols)
    lines = (tmp_path / "rows.csv").read_text().splitlines()
    assert lines == ["scenario_id,varied,status,objective", "nominal,,optimal,1.5"]


def test_a_sweep_row_equals_a_direct_plan_of_the_same_modified_instance(pool_rows, tmp_path, capsys):
    # s0003 = rate 1.25, SLO 3x, v6e at 4.55 TFLOP/J: written by hand as an instance file, planned by `plan`
    row = pool_rows.set_index("scenario_id").loc["s0003"]
    assert (row["p:rate"], row["p:slo"]) == (1.25, 3.0)
    text = SMALL.read_text(encoding="utf-8").replace("[workload]\n", "[workload]\nrate_scale = 1.25\n", 1)
    text += '\n[slo]\nmultiplier = 3.0\n\n[energy]\nchip_overrides = [{ chip = "tpu-v6e", tflop_per_j = 4.55 }]\n'
    inst_file = tmp_path / "s0004.toml"
    inst_file.write_text(text, encoding="utf-8")
    assert main(["plan", str(inst_file), "--json", str(tmp_path / "plan.json"), "--quiet"]) == 0
    capsys.readouterr()
    direct = json.loads((tmp_path / "plan.json").read_text())
    assert direct["status"] == row["status"]
    assert direct["objective_value"] == pytest.approx(row["objective"], rel=1e-9)
    assert direct["totals"]["energy_j"] == pytest.approx(row["energy_j"], rel=1e-9)
    chips = direct["totals"]["chips_by_version"]
    assert {c: float(chips.get(c, 0)) for c in ("tpu-v5e", "tpu-v6e")} == {
        "tpu-v5e": row["chips:tpu-v5e"],
        "tpu-v6e": row["chips:tpu-v6e"],
    }


def test_robust_plans_and_report(spec_path, pool_rows, tmp_path):
    prepared = prepare(load_sweep(spec_path))
    rp = robust_plans(prepared, pool_rows, scheduler="local")
    res = rp.milp
    assert res.status == "optimal" and res.vpods and len(rp.milp_scenarios) == 5
    # the robust MILP's plan is feasible in every scenario, checked by the independent evaluator
    opts = PlanOptions.from_instance(prepared.base, threads=1)
    held = []
    for t in prepared.tasks:
        c = build_coefficients(t.instance)
        obj, sol = held_objective(c, opts, res.vpods)
        ev = evaluate(sol, c)
        assert ev.feasible, ev.violations
        # the evaluator charges weight streaming at each group's own load (formulation E8): never
        # below the planner's design-load objective of the same vPods, which held_objective reports
        assert ev.objective_value >= obj * (1 - 1e-9)
        assert obj == pytest.approx(sol.objective_value, rel=1e-12)
        held.append(obj)
    assert sum(held) / len(held) == pytest.approx(res.objective, rel=1e-6)
    # every scenario optimum is a candidate (5 scenarios <= max_candidates); the robust MILP's
    # expected objective is no worse than any of them held across the scenarios
    summary = rp.summary.set_index("candidate")
    assert set(" ".join(rp.candidates["optimum_in"]).split()) == set(pool_rows["scenario_id"])
    assert summary.loc["robust MILP", "infeasible_in"] == 0
    assert summary.loc["robust MILP", "expected_objective"] == pytest.approx(res.objective, rel=1e-6)
    for cand, e in summary["expected_objective"].items():
        assert res.objective <= e * (1 + 1e-6), cand
    # some optimum cannot carry every scenario (the robust plan is not trivially any optimum), and
    # some can: the comparison above is not only against inf
    assert (summary["infeasible_in"] > 0).any()
    assert np.isfinite(summary.drop(index="robust MILP")["expected_objective"]).any()
    # the held vPods are counted per vPod type: the optimum of s0003 (SLO 3x, where the pooled
    # classes of its vPod types sit in separate SLO clusters) carries the SLO-8x scenarios, where
    # the same classes share one group of each type
    s3 = rp.candidates.loc[rp.candidates["optimum_in"].str.split().apply(lambda ids: "s0003" in ids), "candidate"]
    assert np.isfinite(rp.objectives.loc[s3.iloc[0], ["s0002", "s0004"]].astype(float)).all()
    # wait-and-see bound: no single plan beats every scenario's own optimum on average
    assert res.objective >= pool_rows["objective"].mean() * (1 - 1e-6)
    # a scenario's own optimum, held in that scenario, gives back its objective
    for cand, holders in zip(rp.candidates["candidate"], rp.candidates["optimum_in"], strict=True):
        for sid in holders.split():
            own = pool_rows.set_index("scenario_id").loc[sid, "objective"]
            assert rp.objectives.loc[cand, sid] == pytest.approx(own, rel=1e-6)
    out = tmp_path / "rep"
    out.mkdir()
    md = write_sweep_report(prepared, pool_rows, out, rp)
    text = md.read_text()
    assert "## Tornado" in text and "## Robust plans" in text and (out / "tornado.png").stat().st_size > 0
    s = json.loads((out / "summary.json").read_text())
    assert s["scenarios"] == 5 and s["robust"]["milp_status"] == "optimal"
    # where the chip mix flips, per parameter: the nearest values to the nominal one at which
    # stability.csv says the mix differs from the nominal mix
    st = pd.read_csv(out / "stability.csv")
    assert [f["parameter"] for f in s["flips"]] == [p.label for p in prepared.spec.parameter]
    for f in s["flips"]:
        sub = st[(st["parameter"] == f["parameter"]) & (st["same_as_nominal"] < 1.0)]
        below = sub.loc[sub["value"] < f["nominal_value"], "value"]
        above = sub.loc[sub["value"] > f["nominal_value"], "value"]
        assert f["changes_below_at"] == (float(below.max()) if len(below) else None)
        assert f["changes_above_at"] == (float(above.min()) if len(above) else None)
    # the nominal row's regret is zero; every regret is >= 0 (the optimum is optimal)
    reg = pd.read_csv(out / "regret.csv")
    assert reg.loc[reg["scenario_id"] == "nominal", "regret"].iloc[0] == 0
    assert (reg["regret"].astype(float) >= -1e-6 * reg["objective"]).all()


def test_a_sweep_without_any_plan_reports_why_instead_of_failing(tmp_path, capsys):
    # Every scenario asks for 400x the small instance's traffic: no scenario, not even the nominal
    # one, has a plan. The sweep must still finish with its report (no robust plan, no advantage,
    # each scenario's reason given) instead of failing in the analysis.
    spec = tmp_path / "none.toml"
    spec.write_text(
        f'name = "none"\nbase = "{SMALL}"\ndesign = "grid"\nmethods = ["milp", "homogeneous"]\n'
        'time_limit_s = 30\n[set]\n"workload.rate_scale" = 400.0\n'
        '[[parameter]]\nname = "slo"\npath = "slo.multiplier"\nvalues = [3.0]\n',
        encoding="utf-8",
    )
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--scheduler", "local", "--quiet"]) == 0
    assert "statuses {'infeasible': 2}" in capsys.readouterr().out
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "Scenarios without a MILP plan: 2 of 2" in md
    assert md.count("but the whole inventory serves at most") == 2  # the planner's own diagnosis, per scenario
    assert "The nominal scenario has no MILP plan" in md
    assert "No robust plan" in md
    assert "over **homogeneous**: not measured: no scenario has a MILP plan." in md
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["solved"] == 0
    assert summary["advantage"]["homogeneous"]["survives"] is False
    assert summary["robust"]["minimax_regret"] is None and summary["robust"]["candidates"] == []
