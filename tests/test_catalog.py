"""The shipped catalogs: sources, units and hand-checked derived quantities."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from neuscale_opt.catalog import (
    ENERGY_PROFILES,
    catalog_frames,
    energy_spec,
    get_chip,
    get_model,
    load_chips,
    load_models,
    neusim_energy,
)
from neuscale_opt.errors import InputError

REQUIRED_CHIPS = ("tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e")
REQUIRED_MODELS = ("Llama-3-8B", "Llama-3-70B", "Llama-3.1-405B", "DeepSeek-V3-671B", "Qwen3-32B", "Mixtral-8x7B")


@pytest.mark.parametrize("table", ["chips", "models", "energy_profiles"])
def test_every_catalog_row_carries_a_source(table):
    df = catalog_frames()[table]
    assert len(df) > 0
    assert df["source"].notna().all()
    assert (df["source"].astype(str).str.len() > 20).all(), df.loc[df["source"].astype(str).str.len() <= 20]


def test_inferred_fields_name_real_columns_and_are_marked_in_the_source():
    df = catalog_frames()["chips"]
    for r in df.itertuples():
        for field in (x for x in str(r.inferred).split(";") if x and x != "nan"):
            assert field in df.columns, (r.name, field)
        if str(r.inferred) not in ("", "nan"):
            assert "inferred" in r.source, r.name


def test_required_chips_and_models_present_optional_marked():
    chips = load_chips()
    for c in REQUIRED_CHIPS:
        assert not chips[c].optional
    for c in ("tpu7x", "nvidia-a100-80gb", "nvidia-h100", "nvidia-h200", "nvidia-b200"):
        assert chips[c].optional
    assert set(REQUIRED_MODELS) <= set(load_models())


def test_chip_values_match_public_specs():
    v5p = get_chip("tpu-v5p")
    assert v5p.peak_flops == pytest.approx(459e12)
    assert v5p.hbm_bytes == 95 * 2**30
    assert v5p.hbm_bytes_per_s == pytest.approx(2765e9)
    assert v5p.dcn_bytes_per_s == pytest.approx(50e9 / 8)
    v5e = get_chip("tpu-v5e")
    assert v5e.pod_dims == (16, 16) and v5e.topology == "torus2d"
    assert "8x16" in v5e.slice_shapes and v5e.host_shape == (2, 4)
    assert get_chip("tpu-v4").topology == "torus3d_cubes"


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_parameter_counts_match_published_values(name):
    m = get_model(name)
    assert m.params_total / 1e9 == pytest.approx(m.params_total_b_published, rel=2e-3)
    assert m.params_active / 1e9 == pytest.approx(m.params_active_b_published, rel=2e-3)


def test_kv_bytes_per_token_match_the_hardware_notes():
    raw = pd.read_csv(__import__("io").StringIO(catalog_frames()["models"].to_csv(index=False)))
    for r in raw.itertuples():
        assert get_model(r.name).kv_bytes_per_token == r.kv_bytes_per_token_bf16
    # DeepSeek-V3 MLA: 61 layers x (512 latent + 64 rope) x 2 bytes
    assert get_model("DeepSeek-V3-671B").kv_bytes_per_token == 61 * 576 * 2
    assert get_model("DeepSeek-V3-671B").moe_imbalance == 7.0


def test_neuscale_profile_uses_the_papers_efficiencies():
    for chip, tflop_j, gb_j in (
        ("tpu-v4", 1.07, 11.06),
        ("tpu-v5e", 0.72, 6.94),
        ("tpu-v5p", 1.16, 18.51),
        ("tpu-v6e", 3.50, 13.52),
    ):
        # read all-in at full load (static included), capped at TDP, static subtracted
        c = get_chip(chip)
        e = energy_spec(c, "neuscale")
        assert e.profile == "neuscale"
        p_flop = min(c.peak_flops / (tflop_j * 1e12), c.tdp_w)
        p_hbm = min(c.hbm_bytes_per_s / (gb_j * 1e9), c.tdp_w)
        assert e.j_per_flop == pytest.approx((p_flop - e.static_w) / c.peak_flops)
        assert e.j_per_hbm_byte == pytest.approx((p_hbm - e.static_w) / c.hbm_bytes_per_s)


def test_neusim_profile_by_hand_for_v5p():
    e = neusim_energy(get_chip("tpu-v5p"))
    # static: 8 SA x 1.35869 + 6 VU x 0.47508 + VMEM 24.2135 + ICI 6.1141 + HBM mc 10.2640 + phy 15.3961 + other 44.8281
    static = 8 * 1.35868996 + 6 * 0.475076728 + 24.21353615 + 6.114104803 + 10.264041296 + 15.396061944 + 44.82811018
    assert e.static_w == pytest.approx(static)
    dyn = 8 * 28.19413333 + 6 * 2.65216 + 50.18368
    peak = 8 * 128**2 * 2 * 1.7e9
    assert e.j_per_flop == pytest.approx(dyn / peak)
    assert e.j_per_hbm_byte == pytest.approx(0.01261538462e-9)


def test_chips_without_profile_figures_fall_back_to_the_tdp_split():
    e = energy_spec(get_chip("nvidia-h100"), "neuscale")
    assert e.profile == "genz"
    assert e.static_w == pytest.approx(0.30 * 700)
    assert e.j_per_flop == pytest.approx(0.40 * 700 / 989e12)
    for p in ENERGY_PROFILES:
        assert all(math.isfinite(x) for x in (e.j_per_flop, e.j_per_hbm_byte, e.j_per_ici_byte, e.static_w)), p


def test_unknown_names_list_the_known_ones():
    with pytest.raises(InputError, match="known chips: tpu-v4, tpu-v5e"):
        get_chip("tpu-v9")
    with pytest.raises(InputError, match="known models: Llama-3-8B"):
        get_model("gpt-5")
