"""HiGHS's root restarts (``PlanOptions.restarts``): off in the windows of a horizon plan unless
the options or the instance's ``[solver] restarts`` say otherwise, on (HiGHS's default) elsewhere;
the setting changes the search, not the optimum."""

from __future__ import annotations

import pytest
from horizon_support import OPTS, ROOT, one_class

import neuscale_opt.alloc.solve as solve_mod
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.errors import InputError
from neuscale_opt.horizon import HorizonParams, plan_rolling
from neuscale_opt.horizon.context import horizon_options
from neuscale_opt.instance import load_instance

X = "x:1:tp1:b1:colocated|A"


@pytest.fixture
def restart_settings(monkeypatch):
    """The ``mip_allow_restart`` of every HiGHS run, read back from the solver itself."""
    seen: list[bool] = []
    finish = solve_mod._finish

    def spy(h, form, start):
        status, value = h.getOptionValue("mip_allow_restart")
        seen.append(bool(value))
        return finish(h, form, start)

    monkeypatch.setattr(solve_mod, "_finish", spy)
    return seen


def test_horizon_options_turn_restarts_off_only_when_unset():
    assert horizon_options(PlanOptions()).restarts is False
    assert horizon_options(PlanOptions(restarts=True)).restarts is True
    assert horizon_options(PlanOptions(restarts=False)).restarts is False
    assert PlanOptions().restarts is None  # single-epoch solves keep HiGHS's default


@pytest.mark.parametrize("restarts, expected", [(None, False), (True, True), (False, False)])
def test_the_windows_are_solved_with_the_setting(restart_settings, restarts, expected):
    # hand-solved (test_horizon_hand): 10 then 45 req/s, one-epoch windows; growth n <= 2 x 1 + 1
    # and the created vPods' delay (created at the boundary, not pre-warmed) leave 17 req/s unserved
    # at epoch 1, whatever the search does
    coeffs = one_class([10.0, 45.0])
    params = HorizonParams(prewarm=False)
    sol = plan_rolling(coeffs, OPTS.replace(restarts=restarts), params, "oracle", window=1)
    rows = sol.allocations[sol.allocations["vpod_group"] == X]
    assert dict(zip(rows["epoch"], rows["n_vpods"], strict=True)) == {0: 1, 1: 3}
    assert sol.objective_value == pytest.approx(4 * 30_000.0 + 17 * 300 * 100.0, rel=1e-9)
    assert restart_settings and set(restart_settings) == {expected}


def test_the_instance_sets_restarts(tmp_path):
    assert PlanOptions.from_instance(load_instance(ROOT / "instances" / "fleet.toml")).restarts is True
    assert PlanOptions.from_instance(load_instance(ROOT / "instances" / "default.toml")).restarts is None
    text = (ROOT / "instances" / "small.toml").read_text()
    assert "[solver]" not in text  # the bad value below goes into a table of its own
    bad = tmp_path / "bad.toml"
    bad.write_text(text + '\n[solver]\nrestarts = "sometimes"\n')
    with pytest.raises(InputError, match="restarts"):
        load_instance(bad)


def test_restarts_must_be_a_bool():
    with pytest.raises(ValueError, match="restarts"):
        PlanOptions(restarts="yes")
