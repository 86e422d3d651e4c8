"""``neuscale-opt replay`` through :func:`neuscale_opt.cli.main`: output, JSON and exit codes."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from replay_builders import DEFAULT_INSTANCE

from neuscale_opt import cli
from neuscale_opt.candidates import build_coefficients
from neuscale_opt.cli.replay import HEADLINE
from neuscale_opt.instance import load_instance
from neuscale_opt.replay import ReplayOptions, replay, simple_plan

REQUIRED = (
    "slo_attainment",
    "energy_j",
    "cost_usd",
    "carbon_kg",
    "requests",
    "tokens_out",
    "tokens_per_joule",
    "tokens_per_usd",
    "p50_ttft_s",
    "p99_ttft_s",
    "p50_tpot_s",
    "p99_tpot_s",
)


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable:
    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> str:
    inst = load_instance(DEFAULT_INSTANCE)
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(json.dumps(simple_plan(build_coefficients(inst))), encoding="utf-8")
    return str(path)


def test_replay_is_wired():
    assert "replay" in cli.commands()


def test_prints_the_headline(run_cli, plan_file):
    code, out, err = run_cli("replay", plan_file, "--instance", str(DEFAULT_INSTANCE))
    assert code == 0, err
    values = dict(line.split() for line in out.splitlines())
    assert set(REQUIRED) <= set(values) == set(HEADLINE)
    assert values["requests"] == "19366"
    # the printed attainment is the replay's (the Python API on the same plan and instance)
    res = replay(json.loads(open(plan_file, encoding="utf-8").read()), load_instance(DEFAULT_INSTANCE))
    assert float(values["slo_attainment"]) == pytest.approx(res.totals["slo_attainment"], abs=1e-6)
    assert res.totals["slo_attainment"] >= 0.999  # the simple plan at the 0.9 cap: ample capacity


def test_json_to_stdout_is_deterministic(run_cli, plan_file, tmp_path):
    code, out, _ = run_cli("replay", plan_file, "--instance", str(DEFAULT_INSTANCE), "--json", "-")
    assert code == 0
    data = json.loads(out)
    assert set(REQUIRED) <= set(data)
    assert {"by_generation", "by_bucket", "by_epoch", "meta"} <= set(data)
    f = tmp_path / "r.json"
    assert run_cli("replay", plan_file, "--instance", str(DEFAULT_INSTANCE), "--json", str(f))[0] == 0
    assert f.read_text(encoding="utf-8") == out


def test_requests_csv(run_cli, plan_file, tmp_path):
    f = tmp_path / "req.csv"
    code, _, _ = run_cli("replay", plan_file, "--instance", str(DEFAULT_INSTANCE), "--requests", str(f))
    assert code == 0
    lines = f.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 19367
    assert lines[0].startswith("arrival_s,bucket,input_tokens,output_tokens,vpod,chip,queue_s,ttft_s,tpot_s")


def test_trace_override(run_cli, plan_file, tmp_path):
    src = (DEFAULT_INSTANCE.parent / "data" / "azure_llm_2023_conv.csv").read_text(encoding="utf-8").splitlines()
    short = tmp_path / "short.csv"
    short.write_text("\n".join(src[:1001]) + "\n", encoding="utf-8")  # header + first 1000 requests
    code, out, err = run_cli("replay", plan_file, "--instance", str(DEFAULT_INSTANCE), "--trace", str(short))
    assert code == 0, err
    assert dict(line.split() for line in out.splitlines())["requests"] == "1000"


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda p: p["allocations"][0].update(chip="tpu-v9"), "allocations[0].chip: unknown chip 'tpu-v9'"),
        (lambda p: [r.update(n_vpods=9) for r in p["allocations"]], "tpu-v6e chips planned, the fleet has 32"),
        (lambda p: p.update(allocations=[r for r in p["allocations"] if r["epoch"] != 3]), "missing epochs"),
    ],
    ids=["unknown-chip", "too-many-chips", "missing-epoch"],
)
def test_bad_plan_exits_2_with_one_line(run_cli, plan_file, tmp_path, edit, needle):
    plan = json.loads(open(plan_file, encoding="utf-8").read())
    edit(plan)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(plan), encoding="utf-8")
    code, out, err = run_cli("replay", str(bad), "--instance", str(DEFAULT_INSTANCE))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and needle in err and str(bad) in err


def test_malformed_plan_exits_2(run_cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    code, _, err = run_cli("replay", str(bad), "--instance", str(DEFAULT_INSTANCE))
    assert code == 2 and "malformed JSON" in err and err.count("\n") == 1


def test_admission_plan_rejects_the_unserved_share(run_cli, plan_file, tmp_path):
    plan = json.loads(open(plan_file, encoding="utf-8").read())
    first = plan["allocations"][0]  # leave as much of that class unserved as the row serves: a = 1/2
    plan["unserved"] = [{"epoch": first["epoch"], "bucket": first["bucket"], "unserved_rps": first["rate_rps"]}]
    f = tmp_path / "short.json"
    f.write_text(json.dumps(plan), encoding="utf-8")
    code, out, err = run_cli("replay", str(f), "--instance", str(DEFAULT_INSTANCE), "--admission", "plan")
    assert code == 0, err
    values = dict(line.split() for line in out.splitlines())
    inst = load_instance(DEFAULT_INSTANCE)
    trace = replay(plan, inst).requests
    in_epoch = trace["arrival_s"] // inst.epochs.length_s == first["epoch"]
    n = int((in_epoch & (trace["bucket"] == first["bucket"])).sum())
    assert int(values["rejected"]) == n - n // 2  # floor(n / 2) of the n arrivals admitted
    _, out_all, _ = run_cli("replay", str(f), "--instance", str(DEFAULT_INSTANCE))
    assert "rejected" not in dict(line.split() for line in out_all.splitlines())  # default: every arrival


def test_routing_flag_reaches_the_replay(run_cli, plan_file):
    plan = json.loads(open(plan_file, encoding="utf-8").read())
    inst = load_instance(DEFAULT_INSTANCE)
    for routing in ("plan", "load"):
        code, out, err = run_cli(
            "replay", plan_file, "--instance", str(DEFAULT_INSTANCE), "--routing", routing, "--json", "-"
        )
        assert code == 0, err
        data = json.loads(out)
        assert data["meta"]["options"]["routing"] == routing
        lib = replay(plan, inst, options=ReplayOptions(routing=routing)).totals
        assert data["energy_j"] == pytest.approx(lib["energy_j"], rel=1e-12)
    code, _, err = run_cli("replay", plan_file, "--instance", str(DEFAULT_INSTANCE), "--routing", "random")
    assert code == 2 and "invalid choice" in err


def test_no_surge_flag_reaches_the_replay(run_cli, plan_file):
    plan = json.loads(open(plan_file, encoding="utf-8").read())
    inst = load_instance(DEFAULT_INSTANCE)
    cases = (((), True, "plan"), (("--no-surge",), False, "plan"), (("--stand-ins", "fleet"), True, "fleet"))
    for flags, surge, standins in cases:
        code, out, err = run_cli("replay", plan_file, "--instance", str(DEFAULT_INSTANCE), *flags, "--json", "-")
        assert code == 0, err
        data = json.loads(out)
        assert data["meta"]["options"]["surge"] is surge
        assert data["meta"]["options"]["standins"] == standins
        lib = replay(plan, inst, options=ReplayOptions(surge=surge, standins=standins)).totals
        assert data["chip_hours"] == pytest.approx(lib["chip_hours"], rel=1e-12)
        assert data["surge_vpods"] == lib["surge_vpods"]


def test_cli_choices_are_the_replays_own_lists():
    # the CLI spells the choices out (it does not import the replay to print --help): they must stay
    # the library's
    import argparse

    from neuscale_opt.cli import build_parser
    from neuscale_opt.replay.simulate import ADMISSIONS, ROUTINGS, STANDINS

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    replay_parser = sub.choices["replay"]
    opts = {a.dest: a.choices for a in replay_parser._actions if a.choices}
    assert tuple(opts["routing"]) == ROUTINGS and tuple(opts["admission"]) == ADMISSIONS
    assert tuple(opts["stand_ins"]) == STANDINS
