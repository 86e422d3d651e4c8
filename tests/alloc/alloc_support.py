"""Shared fixtures and runners of the allocation tests (imported by the test modules of this folder)."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from neuscale_opt.alloc.attainment import _prompt_args, _tail_args
from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.candidates import build_coefficients
from neuscale_opt.cli import main
from neuscale_opt.coefficients import meets_slo
from neuscale_opt.planning import load_plan_input

ROOT = Path(__file__).resolve().parents[2]
INSTANCES = ROOT / "instances" / "alloc"
EXPECTED = json.loads((INSTANCES / "expected.json").read_text())

sys.path.insert(0, str(ROOT / "tests" / "replay"))
from replay_builders import row, tiny_instance  # noqa: E402


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """Run a subcommand through ``neuscale_opt.cli.main``: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def case_inputs(case: dict):
    coeffs, inst = load_plan_input(str(INSTANCES / case["instance"]))
    return coeffs, PlanOptions.from_instance(inst).replace(**case["overrides"])


def one_vpod(r, lam: float, bucket: str = "a") -> dict:
    """The plan row of one vPod of configuration ``r`` (a candidate row) serving ``bucket`` at ``lam`` req/s."""
    ints = {c: int(getattr(r, c)) for c in ("chips_per_vpod", "tp", "pp", "ep", "batch")}
    return row(0, bucket, 1, chip=r.chip, shape=r.shape, rate_rps=lam, **ints)


def one_class_picks(horizon_s: float):
    """``(instance, coefficients, picks)`` of the one-class calibration cases: a tiny one-class
    Llama-3-8B instance of one epoch of ``horizon_s`` and, among its colocated SLO-feasible rows,
    the least-energy configuration of each batch size from 2 to 64 slots (index reset)."""
    inst = tiny_instance({"a": 1.0}, epochs=1, length_s=horizon_s)
    coeffs = build_coefficients(inst)
    cfg = coeffs.configs
    cfg = cfg[(cfg["phase"] == "colocated") & (cfg["bucket"] == "a") & meets_slo(cfg, coeffs.buckets)]
    pick = cfg.sort_values(["energy_j_per_req", "config_id"]).drop_duplicates("batch")
    pick = pick[(pick["batch"] * pick["pp"] >= 2) & (pick["batch"] * pick["pp"] <= 64)].sort_values("batch")
    return inst, coeffs, pick.reset_index(drop=True).copy()


def attainment_inputs(cfg: pd.DataFrame, buckets: pd.DataFrame) -> tuple:
    """:func:`attainment`'s arguments for the rows of ``cfg`` (as the safe loads build them)."""
    slo = buckets.set_index("bucket")
    b = cfg["bucket"].astype(str).reset_index(drop=True)
    idx = np.arange(len(cfg))
    out_tok = b.map(slo["output_tokens"]).astype(float).to_numpy()
    args = (
        cfg["phase"].to_numpy(dtype=object),
        (cfg["batch"] * cfg["pp"]).to_numpy(float),
        cfg["ttft_s"].to_numpy(float),
        cfg["tpot_s"].to_numpy(float),
        out_tok,
        b.map(slo["ttft_slo_s"]).astype(float).to_numpy(),
        cfg["max_rate_rps"].to_numpy(float),
    )
    cfg = cfg.reset_index(drop=True)
    return args, _tail_args(cfg, slo, b, idx, out_tok), _prompt_args(cfg, slo, b, idx)
