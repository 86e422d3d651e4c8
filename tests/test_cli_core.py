"""The CLI contract of the core commands: outputs, exit codes, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuscale_opt.cli import main

INSTANCES = Path(__file__).resolve().parents[1] / "instances"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_roofline_json_has_the_contract_fields(capsys):
    code, out, err = run(
        capsys,
        "roofline",
        "--model",
        "Llama-3-8B",
        "--chip",
        "tpu-v5p",
        "--chips",
        "1",
        "--phase",
        "decode",
        "--seq-len",
        "1",
        "--batch",
        "1",
        "--calibration",
        "none",
        "--json",
        "-",
    )
    assert code == 0, err
    d = json.loads(out)
    for key in (
        "latency_s",
        "throughput_tokens_s",
        "energy_j",
        "cost_usd",
        "bound",
        "memory_ok",
        "flops",
        "hbm_bytes",
        "ici_bytes",
    ):
        assert key in d
    assert d["bound"] == "hbm" and d["memory_ok"] is True
    assert d["latency_s"] == pytest.approx(5.43e-3, rel=0.01)
    assert d["throughput_tokens_s"] == pytest.approx(1 / d["latency_s"])
    # energy = dynamic + static power x time; money = price x chips x time
    assert d["energy_j"] >= d["energy_static_j"] > 0
    assert d["cost_usd"] == pytest.approx(4.20 * d["latency_s"] / 3600)


def test_roofline_memory_infeasible_is_reported(capsys):
    code, out, _ = run(
        capsys,
        "roofline",
        "--model",
        "Llama-3-70B",
        "--chip",
        "tpu-v5p",
        "--chips",
        "1",
        "--phase",
        "decode",
        "--seq-len",
        "128",
        "--batch",
        "1",
    )
    assert code == 0 and json.loads(out)["memory_ok"] is False


@pytest.mark.parametrize(
    "argv, needle",
    [
        (
            [
                "roofline",
                "--model",
                "GPT-9",
                "--chip",
                "tpu-v5p",
                "--chips",
                "1",
                "--phase",
                "decode",
                "--seq-len",
                "1",
                "--batch",
                "1",
            ],
            "known models: Llama-3-8B",
        ),
        (
            [
                "roofline",
                "--model",
                "Llama-3-8B",
                "--chip",
                "tpu-v9",
                "--chips",
                "1",
                "--phase",
                "decode",
                "--seq-len",
                "1",
                "--batch",
                "1",
            ],
            "known chips: tpu-v4",
        ),
        (
            [
                "roofline",
                "--model",
                "Llama-3-8B",
                "--chip",
                "tpu-v5e",
                "--chips",
                "12",
                "--shape",
                "3x4",
                "--phase",
                "decode",
                "--seq-len",
                "1",
                "--batch",
                "1",
            ],
            "--shape: shape 3x4 is not allowed",
        ),
        (
            [
                "roofline",
                "--model",
                "Llama-3-8B",
                "--chip",
                "tpu-v5e",
                "--chips",
                "4",
                "--phase",
                "decode",
                "--seq-len",
                "1",
                "--batch",
                "0",
            ],
            "--batch: must be > 0",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and needle in err, err
    assert "Traceback" not in err


def test_validate_prints_normalised_json(capsys):
    code, out, _ = run(capsys, "validate", str(INSTANCES / "small.toml"), "--json", "-")
    assert code == 0
    d = json.loads(out)
    assert d["derived"]["healthy_chips"] == {"tpu-v5e": 16, "tpu-v6e": 8}
    assert d["planning"]["util_cap"] == 0.9


def test_validate_bad_file_names_file_and_field(capsys, tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text((INSTANCES / "small.toml").read_text().replace("chips = 16", "chips = -16"))
    code, _, err = run(capsys, "validate", str(p))
    assert code == 2 and str(p) in err and "fleet[0].chips" in err and err.count("\n") == 1


def test_candidates_csv_and_json_agree_and_write_atomically(capsys, tmp_path):
    csv_p, json_p = tmp_path / "c.csv", tmp_path / "c.json"
    code, _, err = run(capsys, "candidates", str(INSTANCES / "small.toml"), "--csv", str(csv_p), "--json", str(json_p))
    assert code == 0, err
    import pandas as pd

    df = pd.read_csv(csv_p)
    d = json.loads(json_p.read_text())
    assert len(df) == len(d["candidates"]) > 0
    assert (df["pareto_energy"] | df["pareto_cost"]).all()
    assert d["feasible"] <= d["evaluated"]
    # an unwritable destination leaves nothing behind and exits 2
    code, _, err = run(capsys, "candidates", str(INSTANCES / "small.toml"), "--csv", str(tmp_path / "no" / "c.csv"))
    assert code == 2 and "directory does not exist" in err
    assert not (tmp_path / "no").exists()


def test_debug_shows_traceback(capsys):
    code, _, err = run(capsys, "--debug", "validate", "/nonexistent.toml")
    assert code == 2 and "Traceback" in err


def test_catalog_lists_chips(capsys):
    code, out, _ = run(capsys, "catalog", "chips")
    assert code == 0 and out.splitlines()[0].startswith("name,label,vendor")
    assert "tpu-v6e" in out
