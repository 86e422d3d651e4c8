"""A sweep's summary in the plan report's risks: which parameter changes the chip mix and at which
value, the share of scenarios keeping the nominal mix, the nominal plan's largest regret; a folder
that is not a sweep's output is refused with one line before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuscale_opt.cli import main
from neuscale_opt.cli.plan import read_sweep_summary
from neuscale_opt.errors import InputError
from neuscale_opt.report.build import sweep_risk

SUMMARY = {
    "sweep": "referee-slo",
    "solved": 7,
    "objective": "energy",
    "nominal_mix_share": 1 / 7,
    "nominal_regret_max": 5.4e6,  # J: 1.5 kWh
    "nominal_infeasible_in": 3,
    "flips": [
        {"parameter": "slo", "nominal_value": 5.0, "changes_below_at": 4.0, "changes_above_at": 6.0},
        {"parameter": "moe", "nominal_value": 7.0, "changes_below_at": None, "changes_above_at": None},
    ],
}


def test_sweep_risk_names_each_parameter_and_where_the_mix_changes():
    s = sweep_risk(SUMMARY)
    assert s.startswith("sweep `referee-slo` (7 scenarios with a plan)")
    assert "slo (nominal 5) changes it at 4 and below and at 6 and above" in s
    assert "moe (nominal 7) never changes it" in s
    assert "holds in 14.3 % of the scenarios" in s  # 1 of 7
    assert "largest regret is 1.50 kWh" in s  # 5.4 MJ / 3.6 MJ per kWh
    assert "cannot carry 3 scenario(s)" in s


def test_only_one_side_flipping_is_said_as_such():
    one = {**SUMMARY, "nominal_infeasible_in": 0, "flips": [{**SUMMARY["flips"][0], "changes_below_at": None}]}
    s = sweep_risk(one)
    assert "slo (nominal 5) changes it at 6 and above" in s and "below" not in s and "cannot carry" not in s


def test_a_folder_without_a_sweep_summary_is_refused(tmp_path):
    with pytest.raises(InputError, match="not a sweep output folder"):
        read_sweep_summary(str(tmp_path / "missing"))
    with pytest.raises(InputError, match="summary.json"):
        read_sweep_summary(str(tmp_path))  # no summary.json in it
    (tmp_path / "summary.json").write_text(json.dumps({"flips": "x"}), encoding="utf-8")
    with pytest.raises(InputError, match="not a sweep summary"):
        read_sweep_summary(str(tmp_path))
    (tmp_path / "summary.json").write_text(json.dumps(SUMMARY), encoding="utf-8")
    assert read_sweep_summary(str(tmp_path))["flips"][0]["parameter"] == "slo"


def test_plan_sweep_without_out_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "summary.json").write_text(json.dumps(SUMMARY), encoding="utf-8")
    code = main(["plan", str(Path(__file__).parents[2] / "instances" / "small.toml"), "--sweep", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--sweep needs --out" in err[0]
