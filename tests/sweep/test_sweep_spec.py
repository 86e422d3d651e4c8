"""The sweep file, the designs and the dotted paths: no solver needed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from neuscale_opt.candidates import build_coefficients, chip_context
from neuscale_opt.catalog import get_chip, neusim_energy
from neuscale_opt.cli import main
from neuscale_opt.errors import InputError
from neuscale_opt.instance import load_instance
from neuscale_opt.sweep.apply import apply_values, base_value, tokens
from neuscale_opt.sweep.designs import NOMINAL
from neuscale_opt.sweep.run import prepare
from neuscale_opt.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "instances" / "small.toml"
SWEEPS = ROOT / "instances" / "sweeps"


def _spec(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "s.toml"
    p.write_text(f'base = "{SMALL}"\n' + body, encoding="utf-8")
    return p


def test_paths_tokenise():
    assert tokens("fleet[tpu-v5e].chips") == ["fleet", "tpu-v5e", "chips"]
    assert tokens("catalog.models[Llama-3.1-405B].moe_imbalance") == [
        "catalog",
        "models",
        "Llama-3.1-405B",
        "moe_imbalance",
    ]
    for bad in ("", ".a", "a..b", "a[b", "a b"):
        with pytest.raises(InputError):
            tokens(bad)


def test_apply_returns_a_new_instance_and_leaves_the_base_alone():
    base = load_instance(SMALL)
    before = base.model_dump()
    new = apply_values(base, {"slo.multiplier": 3.0, "fleet[tpu-v6e].chips": 12, "workload.rate_scale": 2.0})
    assert base.model_dump() == before
    assert (new.slo.multiplier, new.fleet_entry("tpu-v6e").chips, new.workload.rate_scale) == (3.0, 12, 2.0)
    assert new.path == base.path


def test_energy_path_changes_the_chip_coefficients_as_the_profile_would():
    base = load_instance(SMALL)
    tflop = base_value(base, "catalog.energy_profiles[neuscale][tpu-v6e].tflop_per_j")
    # the catalog's row for v6e: 3.50 TFLOP/J (data/energy_profiles.csv)
    assert tflop == pytest.approx(3.50)
    new = apply_values(base, {"catalog.energy_profiles[neuscale][tpu-v6e].tflop_per_j": 7.0})
    j_old = float(chip_context(base, "tpu-v6e").hw.j_flop)
    j_new = float(chip_context(new, "tpu-v6e").hw.j_flop)
    # the neuscale reading (catalog.neuscale_energy): all-in power peak / (TFLOP/J), capped at the
    # 350 W TDP, less the static power, per peak FLOP/s (918 TFLOP/s)
    static = neusim_energy(get_chip("tpu-v6e")).static_w
    assert j_new == pytest.approx((min(918e12 / 7e12, 350.0) - static) / 918e12)
    assert j_old == pytest.approx((min(918e12 / 3.5e12, 350.0) - static) / 918e12)
    # the other generation and the HBM figure keep their values
    assert chip_context(new, "tpu-v5e").hw.j_flop == chip_context(base, "tpu-v5e").hw.j_flop
    assert chip_context(new, "tpu-v6e").hw.j_hbm == chip_context(base, "tpu-v6e").hw.j_hbm
    dyn_old = build_coefficients(base).configs.set_index("config_id")["dyn_energy_j_per_req"]
    dyn_new = build_coefficients(new).configs.set_index("config_id")["dyn_energy_j_per_req"]
    # the candidate lists are Pareto fronts in energy, so compare the configurations both keep
    v6e = [k for k in dyn_new.index if k.startswith("tpu-v6e") and k in dyn_old.index]
    assert v6e and all(dyn_new[k] < dyn_old[k] for k in v6e)


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"slo.multipler": 1.0}, "slo.multipler"),
        ({"fleet[tpu-v4].chips": 1}, "no fleet entry"),
        ({"slo.multiplier": -1.0}, "greater than 0"),
        ({"catalog.energy_profiles[genz][tpu-v6e].tflop_per_j": 1.0}, "energy profile"),
        ({"catalog.models[DeepSeek-V3-671B].moe_imbalance": 2.0}, "serves"),
    ],
)
def test_bad_paths_and_values_are_input_errors(values, needle):
    with pytest.raises(InputError, match=needle):
        apply_values(load_instance(SMALL), values)


def test_grid_oat_and_nominal(tmp_path):
    p = _spec(
        tmp_path,
        'design = "grid"\n[[parameter]]\npath = "workload.rate_scale"\nvalues = [0.5, 1.0, 2.0]\n'
        '[[parameter]]\npath = "slo.multiplier"\nlow = 2.0\nhigh = 10.0\nnum = 5\n',
    )
    prep = prepare(load_sweep(p))
    ids = [s.scenario_id for s in prep.scenarios]
    assert ids[0] == NOMINAL and len(ids) == 1 + 3 * 5 and ids == sorted(ids)
    assert prep.scenarios[0].values == {"workload.rate_scale": 1.0, "slo.multiplier": 5.0}
    grid = {(s.values["workload.rate_scale"], s.values["slo.multiplier"]) for s in prep.scenarios[1:]}
    assert grid == {(a, b) for a in (0.5, 1.0, 2.0) for b in (2.0, 4.0, 6.0, 8.0, 10.0)}
    t = {x.scenario_id: x for x in prep.tasks}["s0015"]
    assert (t.instance.workload.rate_scale, t.instance.slo.multiplier) == (2.0, 10.0)
    oat = _spec(tmp_path, p.read_text().split("\n", 1)[1].replace('"grid"', '"oat"'))
    scs = prepare(load_sweep(oat)).scenarios
    # nominal + the 2 rate values off nominal (1.0 is nominal) + all 5 multipliers (5.0 is not on 2, 4, .., 10)
    assert len(scs) == 1 + 2 + 5
    assert all(sum(s.values[k] != scs[0].values[k] for k in s.values) == 1 for s in scs[1:])


def test_lhs_is_seeded_and_stratified(tmp_path):
    body = (
        'design = "lhs"\nsamples = 10\nseed = {seed}\n[[parameter]]\nname = "v6e"\nscale = "relative"\n'
        'path = "catalog.energy_profiles[neuscale][tpu-v6e].tflop_per_j"\nlow = 0.7\nhigh = 1.3\n'
        '[[parameter]]\npath = "workload.rate_scale"\nlow = 0.5\nhigh = 1.5\n'
    )
    a = prepare(load_sweep(_spec(tmp_path, body.format(seed=3)))).scenarios[1:]
    b = prepare(load_sweep(_spec(tmp_path, body.format(seed=3)))).scenarios[1:]
    c = prepare(load_sweep(_spec(tmp_path, body.format(seed=4)))).scenarios[1:]
    assert [s.values for s in a] == [s.values for s in b] != [s.values for s in c]
    for key, lo, hi in (("v6e", 0.7, 1.3), ("workload.rate_scale", 0.5, 1.5)):
        x = np.array([s.values[key] for s in a])
        strata = np.floor((x - lo) / (hi - lo) * 10).astype(int)
        assert sorted(strata) == list(range(10))  # one sample in each tenth: a Latin hypercube
    # relative: the instance holds factor x the catalog's 3.50 TFLOP/J
    prep = prepare(load_sweep(_spec(tmp_path, body.format(seed=3))))
    t = prep.tasks[1]
    ov = t.instance.energy.chip_overrides[0]
    assert ov.chip == "tpu-v6e" and ov.tflop_per_j == pytest.approx(3.5 * t.values["v6e"])


def test_monte_carlo_is_seeded_and_in_range(tmp_path):
    body = 'design = "mc"\nsamples = 50\nseed = 1\n[[parameter]]\npath = "slo.multiplier"\nlow = 2.0\nhigh = 10.0\n'
    body += 'distribution = "triangular"\nmode = 5.0\n'
    s1 = prepare(load_sweep(_spec(tmp_path, body))).scenarios[1:]
    x = np.array([s.values["slo.multiplier"] for s in s1])
    assert len(x) == 50 and x.min() >= 2.0 and x.max() <= 10.0
    assert x == pytest.approx(
        np.array([s.values["slo.multiplier"] for s in prepare(load_sweep(_spec(tmp_path, body))).scenarios[1:]])
    )
    # triangular(2, 5, 10) has mean 17/3; 50 draws land within 1 of it
    assert abs(x.mean() - 17.0 / 3.0) < 1.0


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("[[parameter]]\npath = 'slo.multiplier'\n", "give values, or low and high"),
        ("[[parameter]]\npath = 'slo.multiplier'\nvalues = [1.0]\nbogus = 1\n", "unknown key"),
        ("methods = ['greedy']\n[[parameter]]\npath = 'slo.multiplier'\nvalues = [1.0]\n", "must include milp"),
        ("[[parameter]]\npath = 'slo.multiplier'\nlow = 3.0\nhigh = 2.0\nnum = 2\n", "low < high"),
        ("[[parameter]]\npath = 'slo.multiplier'\nlow = 1.0\nhigh = 2.0\n", "needs values or num"),
    ],
)
def test_bad_spec_fields_are_one_line_input_errors(tmp_path, body, needle):
    with pytest.raises(InputError, match=needle) as exc:
        load_sweep(_spec(tmp_path, body))
    assert "\n" not in str(exc.value) and "s.toml" in str(exc.value)


def test_bad_scenario_value_names_the_scenario(tmp_path):
    p = _spec(tmp_path, "[[parameter]]\npath = 'slo.multiplier'\nvalues = [2.0, -1.0]\n")
    with pytest.raises(InputError, match="scenario s0002: slo.multiplier"):
        prepare(load_sweep(p))


def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys):
    p = _spec(tmp_path, "[[parameter]]\npath = 'fleet[tpu-v6e].chipz'\nvalues = [2.0]\n")
    assert main(["sweep", str(p), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "chipz" in err
    assert main(["sweep", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "o")]) == 2
    assert main(["sweep", str(p), "--out", str(tmp_path / "o"), "--scheduler", "bogus"]) == 2


def test_shipped_sweep_specs_are_valid():
    specs = sorted(SWEEPS.glob("*.toml"))
    assert {p.stem for p in specs} >= {"example", "referee-energy", "referee-moe", "referee-slo"}
    for p in specs:
        prep = prepare(load_sweep(p))
        assert prep.scenarios[0].scenario_id == NOMINAL
        assert tomllib.loads(p.read_text())["parameter"]
    assert len(prepare(load_sweep(SWEEPS / "example.toml")).scenarios) <= 8


def test_robust_model_components_match_the_formulation_document():
    import pyomo.environ as pyo

    from neuscale_opt.alloc.context import build_context, resolve_options
    from neuscale_opt.alloc.context import prepare as prepare_ctx
    from neuscale_opt.alloc.options import PlanOptions
    from neuscale_opt.sweep.robust import build_robust_model

    doc = (ROOT / "formulations" / "robust.md").read_text()
    inst = load_instance(SMALL)
    c = build_coefficients(inst)
    o = resolve_options(c, PlanOptions.from_instance(inst).replace(prune_dominated=False))
    ctx = build_context(c, o, 0, prepare_ctx(c, o))
    m = build_robust_model([ctx, ctx], [0.5, 0.5])
    top = {x.local_name for x in m.component_objects(descend_into=False)}
    assert top == {"ALL_TYPES", "n_shared", "scenario", "LINK", "link", "total_objective"}
    for name in top:
        assert f"`{name}`" in doc or f"**{name}**" in doc, name
    assert isinstance(m.scenario[1].demand_coverage, pyo.Constraint)
