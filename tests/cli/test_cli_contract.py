"""The CLI contract: one-line argparse errors, evaluate's exit codes, provenance and the recorded
instance, shipped instances, every method on every instance."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from neuscale_opt.cli import main

ROOT = Path(__file__).resolve().parents[2]
INSTANCES = ROOT / "instances"
SMALL = str(INSTANCES / "small.toml")
TWO_GENS = str(INSTANCES / "alloc" / "two_gens.toml")


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------------------------
# argparse errors: one line, exit 2
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, cmd, words",
    [
        (["plan", "--nope"], "plan", "unrecognized arguments: --nope"),
        (["plan", "--method", "magic"], "plan", "invalid choice: 'magic'"),
        (["roofline", "--chip", "tpu-v6e"], "roofline", "the following arguments are required"),
        (["roofline", "--chips", "x"], "roofline", "invalid int value: 'x'"),
        (["evaluate"], "evaluate", "the following arguments are required: plan"),
        (["plon"], None, "invalid choice: 'plon'"),
        ([], None, "the following arguments are required: COMMAND"),
    ],
)
def test_argparse_errors_are_one_line(capsys, argv, cmd, words):
    code, out, err = run(capsys, *argv)
    see = f"neuscale-opt {cmd} --help" if cmd else "neuscale-opt --help"
    assert code == 2 and out == ""
    assert err == f"neuscale-opt: error: {err.split('error: ', 1)[1]}" and err.count("\n") == 1
    assert words in err and err.endswith(f"(see {see})\n")


def test_help_and_version_exit_0(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out == f"neuscale-opt {metadata.version('neuscale-opt')}\n"
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "instances" in out and "init" in out and "plan" in out


# ----------------------------------------------------------------------------------------------
# provenance and the recorded instance
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_plan(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "small-plan.json"
    assert main(["plan", SMALL, "--json", str(path), "--quiet", "--objective", "energy"]) == 0
    return path


def test_provenance_records_instance_software_options_and_command(small_plan):
    prov = json.loads(small_plan.read_text())["provenance"]
    assert prov["instance"]["path"] == str(Path(SMALL).resolve())
    assert prov["instance"]["sha256"] == hashlib.sha256(Path(SMALL).read_bytes()).hexdigest()
    assert prov["instance"]["files"] == []  # explicit classes, no trace
    for pkg in ("pyomo", "highspy", "ortools"):
        assert prov["software"][pkg] == metadata.version(pkg)
    assert prov["software"]["neuscale-opt"] == metadata.version("neuscale-opt")
    assert prov["method"] == "milp" and prov["options"]["objective"] == "energy"
    assert prov["command"] == ["plan", SMALL, "--objective", "energy"]  # no output path, no --quiet


def test_provenance_hashes_the_trace_file(tmp_path, capsys):
    code, out, err = run(capsys, "plan", INSTANCES / "azure-conv.toml", "--method", "greedy", "--json", "-")
    assert code == 0, err
    files = json.loads(out)["provenance"]["instance"]["files"]
    trace = INSTANCES / "data" / "azure_llm_2023_conv.csv"
    assert files == [
        {
            "field": "workload.trace.path",
            "path": str(trace.resolve()),
            "sha256": hashlib.sha256(trace.read_bytes()).hexdigest(),
        }
    ]


def test_plan_json_is_byte_identical_but_for_solve_seconds(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["plan", SMALL, "--json", str(a), "--quiet"]) == 0
    assert main(["plan", SMALL, "--json", str(b), "--quiet"]) == 0
    da, db = json.loads(a.read_text()), json.loads(b.read_text())
    for d in (da, db):
        d.pop("solve_seconds")
        for e in d["epochs"]:
            e.pop("solve_seconds", None)
    assert da == db


def test_evaluate_defaults_to_the_recorded_instance(small_plan, capsys):
    code, out, err = run(capsys, "evaluate", small_plan)
    assert code == 0, err
    assert f"{small_plan}: feasible" in out


def test_evaluate_refuses_another_instance_unless_forced(small_plan, capsys):
    code, _, err = run(capsys, "evaluate", small_plan, "--instance", TWO_GENS)
    assert code == 2 and err.count("\n") == 1 and "--force" in err and "SHA-256" in err
    code, out, err = run(capsys, "evaluate", small_plan, "--instance", TWO_GENS, "--force")
    # checked against the other instance, whose fleet and classes the plan's rows do not name: a
    # plan malformed for it (exit 2, one line naming the row and field), not a traceback
    assert code == 2 and err.count("\n") == 1 and "allocations[0].chip: unknown chip 'tpu-v6e'" in err


def test_an_edited_instance_is_refused(tmp_path, capsys):
    inst = tmp_path / "small.toml"
    inst.write_text(Path(SMALL).read_text())
    plan = tmp_path / "p.json"
    assert run(capsys, "plan", inst, "--json", plan, "--quiet")[0] == 0
    inst.write_text(Path(SMALL).read_text().replace("rate_rps = 4.0", "rate_rps = 5.0"))
    code, _, err = run(capsys, "evaluate", plan)
    assert code == 2 and "SHA-256" in err
    inst.unlink()
    code, _, err = run(capsys, "evaluate", plan)
    assert code == 2 and "no longer there" in err and err.count("\n") == 1


def test_replay_defaults_to_the_recorded_instance(tmp_path, capsys):
    conv = str(INSTANCES / "azure-conv.toml")
    plan = tmp_path / "p.json"
    assert run(capsys, "plan", conv, "--method", "greedy", "--json", plan, "--quiet")[0] == 0
    code, out, err = run(capsys, "replay", plan, "--quiet")
    assert code == 0, err
    assert dict(line.split() for line in out.splitlines())["requests"] == "19366"  # azure-conv's trace
    code, _, err = run(capsys, "replay", plan, "--instance", INSTANCES / "default.toml", "--quiet")
    assert code == 2 and "--force" in err


# ----------------------------------------------------------------------------------------------
# evaluate: 2 for a malformed plan, 1 for a well-formed infeasible one
# ----------------------------------------------------------------------------------------------
def test_evaluate_exit_codes(small_plan, tmp_path, capsys):
    good = json.loads(small_plan.read_text())
    bad = dict(good, allocations=[{k: v for k, v in good["allocations"][0].items() if k != "n_vpods"}])
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    code, _, err = run(capsys, "evaluate", tmp_path / "bad.json")
    assert code == 2 and "n_vpods" in err and err.count("\n") == 1
    (tmp_path / "notjson.json").write_text("{")
    code, _, err = run(capsys, "evaluate", tmp_path / "notjson.json")
    assert code == 2 and "malformed JSON" in err
    # 50 vPods of 4 v6e chips: well formed, but 200 chips of the 8 the instance has
    over = dict(good, allocations=[dict(good["allocations"][0], n_vpods=50)] + good["allocations"][1:])
    (tmp_path / "over.json").write_text(json.dumps(over))
    code, out, err = run(capsys, "evaluate", tmp_path / "over.json")
    assert code == 1 and "violation" in out and err == ""


# ----------------------------------------------------------------------------------------------
# shipped instances
# ----------------------------------------------------------------------------------------------
def test_instances_lists_every_shipped_toml(capsys):
    code, out, _ = run(capsys, "instances", "--json", "-")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    on_disk = {p.relative_to(INSTANCES).with_suffix("").as_posix() for p in INSTANCES.rglob("*.toml")}
    assert set(rows) == on_disk
    assert rows["small"]["description"].startswith("Llama-3-8B, two explicit request classes")
    assert Path(rows["horizon/azure-code"]["path"]).samefile(INSTANCES / "horizon" / "azure-code.toml")


def test_init_copies_an_instance_that_plans(tmp_path, capsys):
    code, out, err = run(capsys, "init", "small", tmp_path / "mine")
    assert code == 0, err
    copy = Path(out.strip())
    assert copy == tmp_path / "mine" / "small.toml" and copy.read_bytes() == Path(SMALL).read_bytes()
    code, out, err = run(capsys, "plan", copy, "--json", "-", "--quiet")
    assert code == 0 and json.loads(out)["status"] == "optimal"
    code, _, err = run(capsys, "init", "small", tmp_path / "mine")  # never overwrites
    assert code == 2 and "would overwrite" in err
    code, _, err = run(capsys, "init", "no-such", tmp_path / "x")
    assert code == 2 and "small" in err and err.count("\n") == 1


def test_init_copies_the_trace_and_rewrites_its_path(tmp_path, capsys):
    from neuscale_opt.candidates import instance_trace
    from neuscale_opt.instance import load_instance

    code, out, err = run(capsys, "init", "horizon/azure-code", tmp_path / "h")
    assert code == 0, err
    copy = Path(out.strip())
    trace = tmp_path / "h" / "data" / "azure_llm_2023_code.csv"
    assert trace.read_bytes() == (INSTANCES / "data" / "azure_llm_2023_code.csv").read_bytes()
    assert (tmp_path / "h" / "data" / "licenses" / "CC-BY-4.0.txt").is_file()
    mine, shipped = load_instance(copy), load_instance(INSTANCES / "horizon" / "azure-code.toml")
    assert mine.workload.trace.path == "data/azure_llm_2023_code.csv"
    assert len(instance_trace(mine)) == len(instance_trace(shipped)) > 0


# ----------------------------------------------------------------------------------------------
# every method on every instance
# ----------------------------------------------------------------------------------------------
def test_epoch_methods_on_a_horizon_instance(tmp_path, capsys):
    hz = str(INSTANCES / "default.toml")  # has a [horizon] table
    code, out, err = run(capsys, "plan", hz, "--method", "greedy", "--json", tmp_path / "g.json", "--quiet")
    assert code == 0, err
    assert "note: greedy plans every epoch independently" in err and err.count("\n") == 1
    plan = json.loads((tmp_path / "g.json").read_text())
    assert plan["method"] == "greedy" and not any("forecast_rps" in e for e in plan["epochs"])
    assert len({a["epoch"] for a in plan["allocations"]}) == 12
    code, out, err = run(capsys, "evaluate", tmp_path / "g.json")
    assert code == 0, out + err
    code, _, err = run(capsys, "plan", hz, "--independent", "--window", "3")
    assert code == 2 and "--independent" in err and err.count("\n") == 1


def test_independent_milp_plans_epoch_by_epoch(capsys):
    from neuscale_opt.instance import load_instance
    from neuscale_opt.planning import uses_schedule

    hz = load_instance(INSTANCES / "horizon" / "azure-code.toml")
    assert uses_schedule(hz, "milp") is True
    assert uses_schedule(hz, "milp", independent=True) is False
    assert uses_schedule(hz, "homogeneous") is False
    assert uses_schedule(load_instance(SMALL), "milp") is False
    assert uses_schedule(load_instance(SMALL), "oracle") is True


def test_horizon_only_methods_are_the_horizon_policies():
    from neuscale_opt.horizon import HORIZON_METHODS
    from neuscale_opt.planning import HORIZON_ONLY, HORIZON_POLICIES
    from neuscale_opt.report.bench import METHODS

    assert set(HORIZON_METHODS) == {"milp", *HORIZON_ONLY}
    assert set(HORIZON_POLICIES) == {"rolling-milp", *HORIZON_ONLY}
    assert METHODS == ("milp", "greedy", "homogeneous", "unlimited", *HORIZON_POLICIES)


def test_bench_skips_a_plan_over_the_fleet_when_replaying(tmp_path, capsys):
    from neuscale_opt.report.bench import _over_fleet

    class Sol:
        totals = {"chips_by_version": {"tpu-v6e": 40, "tpu-v5e": 3}}

    class Coeffs:
        @staticmethod
        def inventory():
            return {"tpu-v6e": 32, "tpu-v5e": 253}

    assert _over_fleet(Sol(), Coeffs()) == "tpu-v6e 40 > 32"
    Sol.totals = {"chips_by_version": {"tpu-v6e": 32}}
    assert _over_fleet(Sol(), Coeffs()) == ""


def test_help_is_fast_to_build():
    """Building the parser for --help imports none of the numerical stack (a fresh interpreter)."""
    code = (
        "import sys\nfrom neuscale_opt.cli import main\nmain(['--version'])\n"
        "print(sorted(m for m in ('numpy', 'pandas', 'pyomo', 'pydantic') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False).stdout
    assert out.splitlines()[-1] == "[]"


def test_report_of_a_horizon_shorter_than_the_trace(tmp_path, capsys):
    """epochs.horizon = 3 on a 12-epoch trace: the plan covers 3 epochs and so do the replays."""
    src = (INSTANCES / "azure-conv.toml").read_text()
    trace = (INSTANCES / "data" / "azure_llm_2023_conv.csv").as_posix()
    assert "horizon = 12" in src and '"data/azure_llm_2023_conv.csv"' in src
    inst = tmp_path / "short.toml"
    inst.write_text(src.replace("horizon = 12", "horizon = 3").replace('"data/azure_llm_2023_conv.csv"', f'"{trace}"'))
    out = tmp_path / "rep"
    code, _, err = run(capsys, "plan", inst, "--method", "greedy", "--no-baselines", "--out", out, "--quiet")
    assert code == 0, err
    plan = json.loads((out / "plan.json").read_text())
    assert sorted({a["epoch"] for a in plan["allocations"]}) == [0, 1, 2]
    import pandas as pd

    t = pd.read_csv(trace)  # the raw trace, counted here independently of the package's loader
    arrival_s = pd.to_datetime(t.iloc[:, 0], format="mixed") - pd.to_datetime(t.iloc[:, 0], format="mixed").min()
    inside = int((arrival_s.dt.total_seconds() < 3 * 300.0).sum())
    assert 0 < inside < len(t)
    assert f"the replays cover the planned epochs ({inside} of {len(t)} requests)" in (out / "report.md").read_text()


def test_import_melange_slice_factor(tmp_path, capsys):
    import tomllib

    cfg = INSTANCES / "alloc" / "melange_example.json"
    assert json.loads(cfg.read_text())["slice_factor"] == 1
    code, out, err = run(capsys, "import-melange", cfg, "--slice-factor", "3")
    assert code == 0, err
    assert tomllib.loads(out)["planning"]["slice_factor"] == 3
    code, out, err = run(capsys, "import-melange", cfg)
    assert "slice_factor" not in tomllib.loads(out)["planning"]  # the exact continuous-share optimum
    # both answers in the summary: Mélange's published 6.70 USD/h (slice factor 1) and the exact
    # optimum 1 A100 + 1 A10G = 3.67 + 1.01 = 4.68 USD/h
    assert "exact continuous-share optimum: 4.68 USD/h" in err
    assert "Mélange slice factor 1: 6.7 USD/h" in err


@pytest.mark.parametrize("name", ["two_gens.toml", "oversubscribed.toml"])
def test_disaggregated_serving_of_a_colocated_profile_is_bad_input(capsys, tmp_path, name):
    """A coefficient profile lists colocated accelerators only: planning it disaggregated is a
    one-line input error (exit 2) naming the setting, not a crash and not a plan that serves
    nothing (``oversubscribed`` allows unserved demand); nothing is written."""
    out_json = tmp_path / "plan.json"
    path = INSTANCES / "alloc" / name
    code, out, err = run(capsys, "plan", path, "--serving", "disaggregated", "--json", out_json, "--quiet")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "planning.serving" in err and "prefill and decode configurations" in err and "colocated only" in err
    assert not out_json.exists()
    assert run(capsys, "plan", path, "--serving", "colocated", "--json", out_json, "--quiet")[0] in (0, 1)
