"""``plan --out``: the baselines planned in a second thread beside the plan (``--jobs 2``) give the
same report, byte for byte, as planned after it (``--jobs 1``); an error in a baseline reaches
the user as the same one-line error, but a baseline plan the replay refuses leaves the report
written without that replay (a warning and a note); a plan that ends without a report stops its
baselines; a disaggregated instance gets its report with every baseline replayed."""

from __future__ import annotations

import argparse
import json
import threading

import pytest
from conftest import run_plan, write_tiny

from neuscale_opt import planning
from neuscale_opt.cli.plan import Baselines
from neuscale_opt.errors import EXIT_BAD_INPUT, InputError


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_baselines_beside_the_plan_give_the_same_report(tiny_report, tmp_path):
    out1, out2 = tmp_path / "one", tmp_path / "two"
    assert run_plan(["plan", str(tiny_report[2]), "--out", str(out1), "--quiet", "--jobs", "1"])[0] == 0
    assert run_plan(["plan", str(tiny_report[2]), "--out", str(out2), "--quiet", "--jobs", "2"])[0] == 0
    a, b = _files(out1), _files(out2)
    assert sorted(a) == sorted(b)
    # timing.json holds wall-clock seconds; --jobs is not recorded as part of the command
    for name in set(a) - {"timing.json"}:
        assert a[name] == b[name], name
    # the baselines were planned and replayed in both
    assert set(json.loads(a["replays.json"])) == {"milp", "neuscale-autoscaler", "homogeneous-autoscaler", "oracle"}


def test_an_error_in_a_baseline_is_the_users_one_line_error(tiny_report, tmp_path, monkeypatch, capsys):
    real = planning.plan_any

    def failing(inst, coeffs, method, *a, **k):
        if method == "oracle":
            raise InputError("no oracle today", where="oracle.toml")
        return real(inst, coeffs, method, *a, **k)

    monkeypatch.setattr(planning, "plan_any", failing)
    out = tmp_path / "report"
    code, _ = run_plan(["plan", str(tiny_report[2]), "--out", str(out), "--quiet", "--jobs", "2"])
    assert code == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "oracle.toml" in err[0] and "no oracle today" in err[0]
    assert not out.exists()  # nothing half-written


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_baseline_plan_the_replay_refuses_leaves_the_report_written_without_it(
    tiny_report, tmp_path, monkeypatch, capsys, jobs
):
    import neuscale_opt.cli.plan as cli_plan

    real = cli_plan.replay_totals

    def refusing(sol, *a, **k):
        if sol.method == "neuscale-autoscaler":
            raise InputError("epoch 0, class 'x': prefill rows but no decode rows", where="<plan>")
        return real(sol, *a, **k)

    monkeypatch.setattr(cli_plan, "replay_totals", refusing)
    out = tmp_path / "report"
    code, _ = run_plan(["plan", str(tiny_report[2]), "--out", str(out), "--quiet", "--jobs", jobs])
    assert code == 0
    assert set(json.loads((out / "replays.json").read_text())) == {"milp", "homogeneous-autoscaler", "oracle"}
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("neuscale-opt: warning: neuscale-autoscaler was not replayed")
    assert "prefill rows but no decode rows" in err[0]
    md = (out / "report.md").read_text()
    assert "Note: neuscale-autoscaler was not replayed: the replay refused its plan" in md


def test_stop_ends_the_baselines_at_their_next_epoch(monkeypatch):
    started, epochs = threading.Event(), []

    def endless(inst, coeffs, method, options, progress=None, **k):
        started.set()
        while True:  # a plan that would never end, reporting each epoch
            progress(1)
            epochs.append(method)
            threading.Event().wait(0.001)

    monkeypatch.setattr(planning, "plan_any", endless)
    args = argparse.Namespace(no_baselines=False, method="milp", jobs=2, window=None, forecast=None)

    class Opts:
        solver_log = False

        def replace(self, **k):
            return self

        def start_budget(self, what):
            return self

    base = Baselines(args, None, None, Opts(), horizon=True)
    assert base.names == ["neuscale-autoscaler", "homogeneous-autoscaler", "oracle"]
    assert started.wait(10), base._error
    base.stop()
    base._thread.join(10)
    assert not base._thread.is_alive()
    # the first baseline was given up, and no later one was started
    assert set(epochs) == {"neuscale-autoscaler"}


@pytest.mark.parametrize("jobs", ["0", "3"])
def test_jobs_is_one_or_two(jobs, capsys):
    code, _ = run_plan(["plan", "--jobs", jobs, "--quiet"])
    assert code == EXIT_BAD_INPUT
    assert "--jobs" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [[], ["--no-baselines"]])
def test_the_command_replays_in_worker_processes_and_writes_the_same_report(tiny_report, tmp_path, extra):
    # as a process of its own (the console script) with --jobs 2 the replays and the pod maps run
    # in two forked worker processes (with or without baselines); the report is the same bytes as
    # with --jobs 1 (every replay and figure in turn, in this process)
    import subprocess
    import sys

    outs = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}"
        cmd = [sys.executable, "-m", "neuscale_opt.cli", "plan", str(tiny_report[2]), "--out", str(out)]
        subprocess.run([*cmd, "--quiet", "--jobs", jobs, *extra], check=True, capture_output=True)
        outs[jobs] = _files(out)
    assert sorted(outs["1"]) == sorted(outs["2"])
    assert "figures/pod_maps.png" in outs["2"]
    for name in set(outs["1"]) - {"timing.json"}:
        assert outs["1"][name] == outs["2"][name], name
    want = {"milp"} if extra else {"milp", "neuscale-autoscaler", "homogeneous-autoscaler", "oracle"}
    assert set(json.loads(outs["2"]["replays.json"])) == want


def test_a_worker_replays_a_plan_as_this_process_does(tiny_report, monkeypatch):
    from neuscale_opt import cli
    from neuscale_opt.cli.plan import Workers, replay_totals, replay_trace
    from neuscale_opt.planning import load_plan_input, plan_any

    coeffs, inst = load_plan_input(str(tiny_report[2]))
    trace = replay_trace(inst, coeffs)[0]
    args = argparse.Namespace(no_baselines=False, jobs=1)
    assert Workers.start(args, inst, coeffs, trace) is None  # --jobs 1: no workers
    args.jobs = 2
    assert Workers.start(args, inst, coeffs, trace) is None  # called from Python: no workers
    monkeypatch.setattr(cli, "_CONSOLE", [True])
    from neuscale_opt.alloc.options import PlanOptions

    sol = plan_any(inst, coeffs, "neuscale-autoscaler", PlanOptions.from_instance(inst))
    workers = Workers.start(args, inst, coeffs, trace)
    assert workers is not None
    from neuscale_opt.candidates import candidates
    from neuscale_opt.planning import evaluate_any
    from neuscale_opt.report.build import figure_jobs

    pods = coeffs.pods.to_dict("records")
    jobs = figure_jobs(inst, candidates(inst), coeffs, sol, evaluate_any(sol, coeffs, inst), sol.placements, pods)
    assert jobs[-1].name == "pod_maps.png"
    try:
        got = workers.replay(sol, detail=True).get(timeout=120)
        drawn = [workers.draw(j).get(timeout=120) for j in (jobs[0], jobs[-1])]
    finally:
        workers.close()
    want = replay_totals(sol, inst, trace, coeffs, detail=True)
    assert got[0] == want[0]
    for k in ("by_bucket", "by_epoch"):
        assert got[1][k].equals(want[1][k])
    # a figure drawn in a worker is the same PNG as drawn here
    assert drawn == [j.png() for j in (jobs[0], jobs[-1])]
    assert drawn[0] != drawn[1]


def test_ctrl_c_ends_the_command_and_its_workers_without_tracebacks(tmp_path):
    # a terminal's Ctrl-C reaches the whole process group: the command says it was interrupted
    # (exit 130) and ends its workers, which print nothing of their own
    import os
    import signal
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "neuscale_opt.cli", "plan", "--out", str(tmp_path / "report"), "--quiet"]
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(5.0)  # the default plan takes longer than this; its workers are forked by now
    os.killpg(p.pid, signal.SIGINT)
    try:
        _out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err.decode()[-3000:]  # what the command printed, if it did not end so
    assert "Traceback" not in err.decode() and "interrupted" in err.decode()
    assert not (tmp_path / "report").exists()
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):  # no process of the group is left
        os.killpg(p.pid, 0)


def test_a_disaggregated_instance_gets_its_report_with_every_baseline_replayed(tmp_path):
    # disaggregated serving end to end: the plan and its horizon baselines (whose prefill and
    # decode halves carry the same rates) are all evaluated, replayed and reported
    path = write_tiny(tmp_path)
    path.write_text(path.read_text() + '\n[planning]\nserving = "disaggregated"\n')
    out = tmp_path / "report"
    code, stdout = run_plan(["plan", str(path), "--out", str(out), "--quiet"])
    assert code == 0, stdout
    replays = json.loads((out / "replays.json").read_text())
    assert set(replays) == {"milp", "neuscale-autoscaler", "homogeneous-autoscaler", "oracle"}
    for name, r in replays.items():
        assert r["requests"] > 0 and r["served"] > 0, name
    plan = json.loads((out / "plan.json").read_text())
    assert {r["phase"] for r in plan["allocations"]} == {"prefill", "decode"}
