"""``workload.trace.spread_s``: a trace recorded at a coarse resolution, each arrival moved to a
uniform point of its tick (``traces.loaders.spread_arrivals``), and what it does to the clumps the
safe loads read (D13)."""

from __future__ import annotations

import numpy as np
import pytest

from neuscale_opt.errors import InputError
from neuscale_opt.instance import load_instance
from neuscale_opt.traces.demand import clump_sizes
from neuscale_opt.traces.loaders import load_trace, load_trace_file
from neuscale_opt.traces.spec import TraceSpec

TICK_MS = 3000
INSTANTS = 400
PER_INSTANT = 5


def _clumped_file(tmp_path):
    """A Mooncake-format trace of INSTANTS instants TICK_MS apart, PER_INSTANT requests each; the
    prompt length is the row's number (so each request can be followed through a sort)."""
    n = INSTANTS * PER_INSTANT
    t = np.repeat(np.arange(INSTANTS) * TICK_MS, PER_INSTANT)
    lines = ["timestamp_ms,input_length,output_length"] + [f"{t[i]},{i + 1},7" for i in range(n)]
    p = tmp_path / "clumped.csv"
    p.write_text("\n".join(lines) + "\n")
    return p, t / 1000.0


def test_each_arrival_moves_within_its_tick(tmp_path):
    p, t0 = _clumped_file(tmp_path)
    plain = load_trace(TraceSpec(path=str(p), format="mooncake"))
    spread = load_trace(TraceSpec(path=str(p), format="mooncake", spread_s=3.0))
    assert len(spread) == len(plain)
    assert np.all(np.diff(spread["arrival_s"].to_numpy()) >= 0)  # sorted
    orig = t0[spread["input_tokens"].to_numpy() - 1]
    shift = spread["arrival_s"].to_numpy() - orig
    assert np.all((shift >= 0) & (shift < 3.0))
    # uniform on [0, 3): mean 1.5, standard error 3 / sqrt(12 n) = 0.019
    assert shift.mean() == pytest.approx(1.5, abs=0.06)
    assert sorted(spread["input_tokens"]) == sorted(plain["input_tokens"])
    assert spread.attrs["spread_s"] == 3.0
    # the same file gives the same requests every run
    again = load_trace_file(p, "mooncake", spread_s=3.0)
    assert np.array_equal(again["arrival_s"].to_numpy(), spread["arrival_s"].to_numpy())


def test_spreading_removes_the_clumps_the_safe_loads_read(tmp_path):
    p, _t0 = _clumped_file(tmp_path)
    plain = load_trace(TraceSpec(path=str(p), format="mooncake"))
    assert clump_sizes(plain, None)["all"] == pytest.approx((0.0,) * (PER_INSTANT - 1) + (1.0,))
    spread = load_trace(TraceSpec(path=str(p), format="mooncake", spread_s=3.0))
    assert clump_sizes(spread, None)["all"] == (1.0,)


def test_a_cut_window_keeps_its_length(tmp_path):
    p, _t0 = _clumped_file(tmp_path)
    cut = load_trace(TraceSpec(path=str(p), format="mooncake", duration_s=600.0, spread_s=3.0))
    assert cut.attrs["horizon_s"] == 600.0
    assert cut["arrival_s"].max() < 600.0 and cut["arrival_s"].min() >= 0.0
    assert len(cut) == 200 * PER_INSTANT  # the instants 0, 3, ..., 597 s
    whole = load_trace(TraceSpec(path=str(p), format="mooncake", spread_s=3.0))
    assert whole.attrs["horizon_s"] == pytest.approx(whole["arrival_s"].max())


BASE = """
name = "spread"
[model]
name = "Llama-3-8B"
[[fleet]]
chip = "tpu-v6e"
chips = 8
[workload]
trace = { path = "clumped.csv", format = "mooncake", spread_s = SPREAD }
"""


@pytest.mark.parametrize("bad", ["-1.0", "inf", "nan", '"x"'])
def test_a_bad_spread_is_named(tmp_path, bad):
    _clumped_file(tmp_path)
    p = tmp_path / "i.toml"
    p.write_text(BASE.replace("SPREAD", bad))
    with pytest.raises(InputError) as err:
        load_instance(p)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(str(p)) and "spread_s" in msg, msg


def test_an_instance_spreads_its_trace(tmp_path):
    _clumped_file(tmp_path)
    p = tmp_path / "i.toml"
    p.write_text(BASE.replace("SPREAD", "3.0"))
    inst = load_instance(p)
    assert inst.workload.trace.spread_s == 3.0
    from neuscale_opt.candidates import instance_trace

    tr = instance_trace(inst)
    assert len(np.unique(tr["arrival_s"])) == len(tr)


def test_an_infeasible_plan_of_clumps_says_so(tmp_path, capsys):
    """100 requests of one class at one instant on 8 chips (a clump counted at MAX_CLUMP = 64): the
    safe loads (AT5) leave the fleet short; the one-line error names the clumps and the setting that
    reads the timestamps as coarse."""
    from neuscale_opt.cli import main
    from neuscale_opt.errors import EXIT_INFEASIBLE

    lines = ["timestamp_ms,input_length,output_length"] + [f"0,{1000 + i},60" for i in range(100)]
    (tmp_path / "clumped.csv").write_text("\n".join(lines) + "\n")
    p = tmp_path / "i.toml"
    p.write_text(BASE.replace(", spread_s = SPREAD", ""))
    code = main(["plan", str(p), "--quiet", "--json", str(tmp_path / "plan.json")])
    err = capsys.readouterr().err
    assert code == EXIT_INFEASIBLE
    line = err.strip().splitlines()[-1]
    assert line.startswith("neuscale-opt: infeasible: ") and "64 or more requests of one class at one instant" in line
    assert "workload.trace.spread_s" in line
    # the plan's provenance records each class's mean clump (hand: 100 requests of one class at one instant,
    # counted as one clump of 64, MAX_CLUMP)
    import json

    prov = json.loads((tmp_path / "plan.json").read_text())["provenance"]
    assert prov["clump_mean"]["s1024-2048"] == 64.0


def test_trace_stats_counts_shared_instants(tmp_path, capsys):
    """trace-stats says how the arrivals share instants (hand: 400 instants of 5), and --spread
    separates them."""
    import json

    from neuscale_opt.cli import main

    p, _t0 = _clumped_file(tmp_path)
    assert main(["trace-stats", str(p), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["shared_instants"]
    assert s == {"instants": INSTANTS, "share_together": 1.0, "mean_per_instant": PER_INSTANT, "largest": PER_INSTANT}
    assert main(["trace-stats", str(p)]) == 0
    assert "400 distinct arrival times; 100.0% of the requests arrive with another" in capsys.readouterr().out
    assert main(["trace-stats", str(p), "--spread", "3", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["shared_instants"]
    assert s["instants"] == INSTANTS * PER_INSTANT and s["share_together"] == 0.0


def test_a_bad_spread_on_the_command_line_or_in_the_api_is_refused(tmp_path, capsys):
    from neuscale_opt.cli import main

    p, _t0 = _clumped_file(tmp_path)
    for bad in ("-1", "inf", "nan"):
        assert main(["trace-stats", str(p), "--spread", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "--spread: spread_s must be a finite number >= 0" in err, err
        with pytest.raises(InputError, match=r"clumped\.csv: spread_s must be a finite number >= 0"):
            load_trace_file(p, "mooncake", spread_s=float(bad))
