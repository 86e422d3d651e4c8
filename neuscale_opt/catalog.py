"""Hardware, energy and model catalogs shipped as package data.

Every row of ``data/chips.csv``, ``data/models.csv`` and ``data/energy_profiles.csv`` carries a
``source`` column; values we inferred are listed in the chip's ``inferred`` column (and marked
``[inferred]`` in its source). The NeuSim chip configurations (Apache-2.0, platformxlab/NeuSim) are
copied unchanged in ``data/neusim/``; the ``neusim`` energy profile is derived from them here.

Units: FLOP/s, bytes, bytes/s, W, J, USD, kgCO2e. Names carry the unit where it helps.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from neuscale_opt.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

GIB = 2**30
DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
ENERGY_PROFILES: tuple[str, ...] = ("neuscale", "neusim", "genz")
TOPOLOGIES: tuple[str, ...] = ("torus2d", "torus3d_cubes", "switched")

# GenZ-LLM-Analyzer GenZ/power.py splits TDP as 0.30 static + 0.40 compute + 0.20 memory + 0.10
# network. The ``genz`` profile (and the fallback for chips that a profile does not cover) uses it.
GENZ_STATIC, GENZ_COMPUTE, GENZ_MEMORY, GENZ_NETWORK = 0.30, 0.40, 0.20, 0.10


def _data_path(name: str):
    return resources.files("neuscale_opt.data").joinpath(name)


def _read_csv(name: str) -> pd.DataFrame:  # the whole table, for listings
    import pandas as pd

    with _data_path(name).open("r", encoding="utf-8") as fh:
        return pd.read_csv(fh, keep_default_na=True)


def _records(name: str) -> list[dict[str, Any]]:
    """The rows of a catalog CSV as dicts of strings, an empty cell as NaN (as pandas reads it);
    read with the standard csv module so that loading the catalogs does not import pandas (CLI
    start-up)."""
    import csv

    with _data_path(name).open("r", encoding="utf-8", newline="") as fh:
        return [{k: (math.nan if v == "" else v) for k, v in row.items()} for row in csv.DictReader(fh)]


@dataclass(frozen=True)
class ChipSpec:
    """One accelerator generation. Raw catalog units in the field names; SI helpers as properties."""

    name: str
    label: str
    vendor: str
    optional: bool
    peak_bf16_tflops: float
    hbm_capacity_gib: float
    hbm_bandwidth_gbps: float  # GB/s, 1e9 B/s
    sram_mib: float
    ici_links: int
    ici_link_gbps_oneway: float  # GB/s per link per direction
    topology: str
    pod_dims: tuple[int, ...]
    dcn_gbit_per_chip: float  # Gb/s (bits)
    slice_shapes: tuple[str, ...]
    chips_per_host: int
    host_shape: tuple[int, ...]
    tdp_w: float
    idle_w: float
    price_usd_per_chip_hour: float
    price_3y_usd_per_chip_hour: float
    embodied_kgco2_per_chip: float
    eff_compute: float
    eff_hbm: float
    eff_ici: float
    neusim_config: str
    inferred: tuple[str, ...]
    source: str
    peak_8bit_tflops: float = math.nan  # dense int8 / fp8 (W8A8) peak, TFLOP/s

    @property
    def peak_flops(self) -> float:
        return self.peak_bf16_tflops * 1e12

    @property
    def peak_8bit_flops(self) -> float:
        """Peak FLOP/s with 8-bit weights and activations (bf16 peak where none is published)."""
        return self.peak_flops if math.isnan(self.peak_8bit_tflops) else self.peak_8bit_tflops * 1e12

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_capacity_gib * GIB

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_bandwidth_gbps * 1e9

    @property
    def ici_link_bytes_per_s(self) -> float:
        return self.ici_link_gbps_oneway * 1e9

    @property
    def dcn_bytes_per_s(self) -> float:
        return self.dcn_gbit_per_chip * 1e9 / 8.0

    @property
    def pod_chips(self) -> int:
        return math.prod(self.pod_dims)


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in str(text).split("x"))


def _missing(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _num(v, default: float = math.nan) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(f) else f


@cache
def load_chips() -> dict[str, ChipSpec]:
    """The chip catalog keyed by name (``tpu-v4``, ``tpu-v5e``, ``tpu-v5p``, ``tpu-v6e``, ...)."""
    out: dict[str, ChipSpec] = {}
    for r in _records("chips.csv"):
        out[r["name"]] = ChipSpec(
            name=r["name"],
            label=r["label"],
            vendor=r["vendor"],
            optional=str(r["optional"]).lower() == "true",
            peak_bf16_tflops=float(r["peak_bf16_tflops"]),
            hbm_capacity_gib=float(r["hbm_capacity_gib"]),
            hbm_bandwidth_gbps=float(r["hbm_bandwidth_gbps"]),
            sram_mib=_num(r["sram_mib"]),
            ici_links=int(r["ici_links"]),
            ici_link_gbps_oneway=float(r["ici_link_gbps_oneway"]),
            topology=r["topology"],
            pod_dims=_shape(r["pod_dims"]),
            dcn_gbit_per_chip=float(r["dcn_gbit_per_chip"]),
            slice_shapes=tuple(str(r["slice_shapes"]).split()),
            chips_per_host=int(r["chips_per_host"]),
            host_shape=_shape(r["host_shape"]),
            tdp_w=_num(r["tdp_w"]),
            idle_w=_num(r["idle_w"]),
            price_usd_per_chip_hour=_num(r["price_usd_per_chip_hour"]),
            price_3y_usd_per_chip_hour=_num(r["price_3y_usd_per_chip_hour"]),
            embodied_kgco2_per_chip=_num(r["embodied_kgco2_per_chip"]),
            eff_compute=float(r["eff_compute"]),
            eff_hbm=float(r["eff_hbm"]),
            eff_ici=float(r["eff_ici"]),
            neusim_config="" if _missing(r["neusim_config"]) else str(r["neusim_config"]),
            inferred=tuple(x for x in str(r["inferred"]).split(";") if x and x != "nan"),
            source=str(r["source"]),
            peak_8bit_tflops=_num(r["peak_8bit_tflops"]),
        )
    return out


def get_chip(name: str, where: str | None = None) -> ChipSpec:
    chips = load_chips()
    if name not in chips:
        raise InputError(f"unknown chip {name!r}; known chips: {', '.join(chips)}", where=where)
    return chips[name]


# --------------------------------------------------------------------------------------------
# Models


@dataclass(frozen=True)
class ModelSpec:
    """An LLM architecture and the per-token quantities the roofline needs.

    Parameter counts follow the layer formulas of ``formulations/roofline.md`` section 2
    (SwiGLU MLP = 3 D F; GQA attention = 2 D H d + 2 D K d; MLA as in DeepSeek-V3).
    """

    name: str
    arch: str  # dense-gqa | moe-gqa | moe-mla
    n_layers: int
    n_dense_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    moe_ffn_dim: int
    n_experts: int
    n_shared_experts: int
    experts_per_token: int
    vocab: int
    max_context: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    weight_dtype: str
    kv_dtype: str
    moe_imbalance: float
    params_total_b_published: float
    params_active_b_published: float
    source: str

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.arch == "moe-mla"

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers if self.is_moe else 0

    @property
    def attn_params_per_layer(self) -> float:
        D, H = self.d_model, self.n_heads
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            return (
                D * self.q_lora_rank
                + self.q_lora_rank * H * qk
                + D * (self.kv_lora_rank + self.qk_rope_head_dim)
                + self.kv_lora_rank * H * (self.qk_nope_head_dim + self.v_head_dim)
                + H * self.v_head_dim * D
                + self.q_lora_rank
                + self.kv_lora_rank
            )
        d, K = self.head_dim, self.n_kv_heads
        return 2 * D * H * d + 2 * D * K * d

    @property
    def dense_mlp_params(self) -> float:
        return 3.0 * self.d_model * self.ffn_dim

    @property
    def expert_params(self) -> float:
        """Parameters of one routed (or shared) expert (SwiGLU: 3 D F_e)."""
        return 3.0 * self.d_model * self.moe_ffn_dim

    @property
    def router_params(self) -> float:
        return float(self.d_model * self.n_experts)

    @property
    def embed_params(self) -> float:
        return float(self.vocab * self.d_model)

    @property
    def always_loaded_params(self) -> float:
        """Parameters read in every forward step: attention, dense MLPs, shared experts, routers, LM head."""
        L, D = self.n_layers, self.d_model
        p = L * (self.attn_params_per_layer + 2 * D) + self.n_dense_layers * self.dense_mlp_params
        if not self.is_moe:
            p = L * (self.attn_params_per_layer + 2 * D + self.dense_mlp_params)
        p += self.n_moe_layers * (self.n_shared_experts * self.expert_params + self.router_params)
        return p + self.embed_params + D  # LM head and final norm

    @property
    def routed_expert_params_total(self) -> float:
        return self.n_moe_layers * self.n_experts * self.expert_params

    @property
    def params_total(self) -> float:
        return self.always_loaded_params + self.routed_expert_params_total + self.embed_params

    @property
    def params_active(self) -> float:
        """Parameters touched by one token (published 'active' counts include the embedding)."""
        return (
            self.always_loaded_params
            + self.n_moe_layers * self.experts_per_token * self.expert_params
            + self.embed_params
        )

    @property
    def linear_flops_per_token(self) -> float:
        """2 FLOP per MAC over every matmul one token passes through (LM head included)."""
        return 2.0 * (self.params_active - self.embed_params)

    @property
    def attn_flops_per_pair_per_layer(self) -> float:
        """FLOPs of QK^T and AV for one (query token, context token) pair in one layer."""
        H = self.n_heads
        if self.is_mla:
            return 2.0 * H * (self.qk_nope_head_dim + self.qk_rope_head_dim) + 2.0 * H * self.v_head_dim
        return 4.0 * H * self.head_dim

    @property
    def attn_flops_per_cached_pair_per_layer(self) -> float:
        """FLOPs of one (query token, *cached* context token) pair in one layer.

        MLA caches the compressed latent, so decode works in the absorbed form (DeepSeek-V2 paper,
        section 2.1.2): scores on the ``kv_r + d_rope`` (576) wide latent, values gathered on the
        ``kv_r`` (512) wide latent, per head: ``2 H (kv_r + d_rope) + 2 H kv_r`` = 278,528 FLOPs for
        DeepSeek-V3 against the naive form's 81,920. GQA: the same as a fresh pair."""
        if self.is_mla:
            H = self.n_heads
            return 2.0 * H * (self.kv_lora_rank + self.qk_rope_head_dim) + 2.0 * H * self.kv_lora_rank
        return self.attn_flops_per_pair_per_layer

    @property
    def kv_elems_per_token(self) -> float:
        """KV-cache elements per token over all layers (MLA caches the latent + RoPE key)."""
        if self.is_mla:
            return float(self.n_layers * (self.kv_lora_rank + self.qk_rope_head_dim))
        return float(2 * self.n_layers * self.n_kv_heads * self.head_dim)

    @property
    def kv_bytes_per_token(self) -> float:
        return self.kv_elems_per_token * DTYPE_BYTES[self.kv_dtype]

    @property
    def kv_shard_max(self) -> int:
        """How many ways the KV cache can be split by tensor parallelism (KV heads; 1 for MLA)."""
        return 1 if self.is_mla else self.n_kv_heads

    @property
    def bytes_per_weight(self) -> float:
        return DTYPE_BYTES[self.weight_dtype]

    @property
    def weight_bytes(self) -> float:
        return self.params_total * self.bytes_per_weight

    @property
    def ffn_active_width(self) -> float:
        """Width of the MLP activations one token produces (for activation traffic)."""
        if self.is_moe:
            return float((self.experts_per_token + self.n_shared_experts) * self.moe_ffn_dim)
        return float(self.ffn_dim)


def _int(v, default: int = 0) -> int:
    f = _num(v)
    return default if math.isnan(f) else int(f)


@cache
def load_models() -> dict[str, ModelSpec]:
    out: dict[str, ModelSpec] = {}
    for r in _records("models.csv"):
        hd = _int(r["head_dim"])
        out[r["name"]] = ModelSpec(
            name=r["name"],
            arch=r["arch"],
            n_layers=_int(r["n_layers"]),
            n_dense_layers=_int(r["n_dense_layers"]),
            d_model=_int(r["hidden_size"]),
            n_heads=_int(r["n_heads"]),
            n_kv_heads=_int(r["n_kv_heads"]),
            head_dim=hd,
            ffn_dim=_int(r["intermediate_size"]),
            moe_ffn_dim=_int(r["moe_intermediate_size"]),
            n_experts=_int(r["n_routed_experts"]),
            n_shared_experts=_int(r["n_shared_experts"]),
            experts_per_token=_int(r["experts_per_token"]),
            vocab=_int(r["vocab_size"]),
            max_context=_int(r["max_context"]),
            q_lora_rank=_int(r["q_lora_rank"]),
            kv_lora_rank=_int(r["kv_lora_rank"]),
            qk_nope_head_dim=_int(r["qk_nope_head_dim"]),
            qk_rope_head_dim=_int(r["qk_rope_head_dim"]),
            v_head_dim=_int(r["v_head_dim"]),
            weight_dtype=str(r["weight_dtype"]),
            kv_dtype=str(r["kv_dtype"]),
            moe_imbalance=_num(r["moe_imbalance"], 1.0),
            params_total_b_published=float(r["params_total_b"]),
            params_active_b_published=float(r["params_active_b"]),
            source=str(r["source"]),
        )
    return out


def get_model(name: str, where: str | None = None) -> ModelSpec:
    models = load_models()
    if name not in models:
        raise InputError(f"unknown model {name!r}; known models: {', '.join(models)}", where=where)
    return models[name]


# --------------------------------------------------------------------------------------------
# Energy profiles


@dataclass(frozen=True)
class EnergySpec:
    """Energy coefficients of one chip under one profile (before PUE)."""

    chip: str
    profile: str
    j_per_flop: float
    j_per_hbm_byte: float
    j_per_ici_byte: float
    static_w: float
    source: str


@cache
def _neusim_config(name: str) -> dict:
    """A shipped NeuSim chip configuration (read once; callers only read it)."""
    with _data_path(f"neusim/{name}").open("r", encoding="utf-8") as fh:
        return json.load(fh)


def neusim_energy(chip: ChipSpec) -> EnergySpec:
    """Energy coefficients derived from NeuSim's per-component power model.

    * J/FLOP = (systolic arrays' + vector units' + VMEM dynamic power at full load) / NeuSim's peak
      FLOP/s (``num_sa * sa_dim^2 * 2 * freq``);
    * J/byte of HBM and ICI = ``dynamic_power_{hbm,ici}_W_per_GBps`` / 1e9 (W per GB/s = J per GB);
    * static W = sum of the per-component static powers (HBM counted as controller + PHY).
    """
    c = _neusim_config(chip.neusim_config)
    peak = c["num_sa"] * c["sa_dim"] ** 2 * 2 * c["freq_GHz"] * 1e9
    dyn_compute_w = (
        c["num_sa"] * c["dynamic_power_W_per_SA"]
        + c["num_vu"] * c["dynamic_power_W_per_VU"]
        + c["dynamic_power_vmem_W"]
    )
    static_w = (
        c["num_sa"] * c["static_power_W_per_sa"]
        + c["num_vu"] * c["static_power_W_per_vu"]
        + c["static_power_vmem_W"]
        + c["static_power_ici_W"]
        + c["static_power_hbm_mc_W"]
        + c["static_power_hbm_phy_W"]
        + c["static_power_other_W"]
    )
    return EnergySpec(
        chip=chip.name,
        profile="neusim",
        j_per_flop=dyn_compute_w / peak,
        j_per_hbm_byte=c["dynamic_power_hbm_W_per_GBps"] / 1e9,
        j_per_ici_byte=c["dynamic_power_ici_W_per_GBps"] / 1e9,
        static_w=static_w,
        source=f"derived from NeuSim configs/chips/{chip.neusim_config} (platformxlab/NeuSim, Apache-2.0)",
    )


def genz_energy(chip: ChipSpec) -> EnergySpec:
    """TDP-split energy model (GenZ-LLM-Analyzer ``GenZ/power.py``): static = 0.30 TDP, the compute
    share 0.40 TDP spent at peak FLOP/s, memory 0.20 TDP at peak HBM bandwidth, network 0.10 TDP at
    full ICI bandwidth. Used for chips without NeuScale or NeuSim figures (GPUs, TPU7x)."""
    ici_bw = chip.ici_links * chip.ici_link_bytes_per_s * 2
    return EnergySpec(
        chip=chip.name,
        profile="genz",
        j_per_flop=GENZ_COMPUTE * chip.tdp_w / chip.peak_flops,
        j_per_hbm_byte=GENZ_MEMORY * chip.tdp_w / chip.hbm_bytes_per_s,
        j_per_ici_byte=GENZ_NETWORK * chip.tdp_w / ici_bw,
        static_w=GENZ_STATIC * chip.tdp_w,
        source="TDP split 0.30/0.40/0.20/0.10 of GenZ-LLM-Analyzer GenZ/power.py applied to the catalog TDP [inferred]",
    )


@cache
def _neuscale_rows() -> dict[str, dict]:
    return {r["chip"]: r for r in _records("energy_profiles.csv") if r["profile"] == "neuscale"}


def neuscale_energy(chip: ChipSpec, row: dict) -> EnergySpec:
    """The NeuScale paper's Table 2 efficiencies read as *all-in* figures.

    The paper's NPU-A..D TFLOP/J and HBM GB/J are efficiencies at full load including static power:
    ``peak / (TFLOP/J)`` is the chip's whole power at full compute, ``HBM bw / (GB/J)`` at full HBM
    bandwidth. Evidence: those powers minus NeuSim's static power reproduce NeuSim's dynamic
    HBM power of v4, v5e, v5p and v6e to 0.1 W and its compute power within 4 %. Read so, power is
    capped at TDP (v4: 257 W -> the measured 192 W maximum; v5p: 396 W -> 350 W) before the static
    power is subtracted:

    * ``j_per_flop = (min(peak / eff_flop, TDP) - static) / peak``;
    * ``j_per_hbm_byte = (min(bw / eff_hbm, TDP) - static) / bw``.

    The mapping NPU-A..D -> TPU v4, v5e, v5p, v6e is ours (energy_profiles.csv says why per row).
    The roofline also caps every step's power at TDP (R10), so no workload mix exceeds it.
    """
    static = neusim_energy(chip).static_w if chip.neusim_config else chip.idle_w
    tdp = chip.tdp_w if not math.isnan(chip.tdp_w) else math.inf
    p_flop = min(chip.peak_flops / (float(row["tflop_per_j"]) * 1e12), tdp)
    p_hbm = min(chip.hbm_bytes_per_s / (float(row["hbm_gb_per_j"]) * 1e9), tdp)
    return EnergySpec(
        chip=chip.name,
        profile="neuscale",
        j_per_flop=max(p_flop - static, 0.0) / chip.peak_flops,
        j_per_hbm_byte=max(p_hbm - static, 0.0) / chip.hbm_bytes_per_s,
        j_per_ici_byte=float(row["ici_pj_per_byte"]) * 1e-12,
        static_w=static,
        source=str(row["source"]) + "; read as all-in at full load, capped at TDP, static subtracted (ours)",
    )


def neuscale_row(chip: str) -> dict:
    """The ``neuscale`` row of ``energy_profiles.csv`` for ``chip`` (the paper's figures)."""
    return dict(_neuscale_rows()[chip])


def energy_spec_with(
    chip: ChipSpec, profile: str, tflop_per_j: float | None = None, hbm_gb_per_j: float | None = None
) -> EnergySpec:
    """:func:`energy_spec` with the chip's TFLOP/J and HBM GB/J replaced (sensitivity sweeps), read
    the way the profile reads its own figures: all-in and capped at TDP for ``neuscale``
    (:func:`neuscale_energy`), as dynamic energy per FLOP and per byte otherwise."""
    es = energy_spec(chip, profile)
    if tflop_per_j is None and hbm_gb_per_j is None:
        return es
    if es.profile == "neuscale":
        row = dict(_neuscale_rows()[chip.name])
        if tflop_per_j is not None:
            row["tflop_per_j"] = tflop_per_j
        if hbm_gb_per_j is not None:
            row["hbm_gb_per_j"] = hbm_gb_per_j
        return neuscale_energy(chip, row)
    from dataclasses import replace

    return replace(
        es,
        j_per_flop=es.j_per_flop if tflop_per_j is None else 1.0 / (tflop_per_j * 1e12),
        j_per_hbm_byte=es.j_per_hbm_byte if hbm_gb_per_j is None else 1.0 / (hbm_gb_per_j * 1e9),
    )


def energy_spec(chip: ChipSpec, profile: str) -> EnergySpec:
    """Energy coefficients of ``chip`` under ``profile``, falling back to ``genz`` where the
    profile has no figures for the chip (the returned ``profile`` field says which was used).

    ``neuscale`` (our reading, see :func:`neuscale_energy`): the paper's efficiencies are all-in
    (static included) at full compute and at full HBM bandwidth; the all-in power is capped at TDP
    and static power subtracted, which leaves the dynamic energy per FLOP and per HBM byte.
    """
    if profile not in ENERGY_PROFILES:
        raise InputError(f"unknown energy profile {profile!r}; known: {', '.join(ENERGY_PROFILES)}")
    if profile == "neuscale" and chip.name in _neuscale_rows():
        return neuscale_energy(chip, _neuscale_rows()[chip.name])
    if profile in ("neuscale", "neusim") and chip.neusim_config:
        return neusim_energy(chip)
    return genz_energy(chip)


def catalog_frames() -> dict[str, Any]:
    """The shipped catalogs as DataFrames (for listing, reports and the source-column test)."""
    return {
        "chips": _read_csv("chips.csv"),
        "models": _read_csv("models.csv"),
        "energy_profiles": _read_csv("energy_profiles.csv"),
    }
