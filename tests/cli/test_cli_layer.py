"""The CLI is one layer on top: the domain packages never import it, the report or the horizon."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

DOMAIN = {
    "neuscale_opt.alloc": ("evaluate", "heuristics", "melange", "model", "options", "plan", "solution", "solve"),
    "neuscale_opt.replay": ("engine", "plan", "simulate", "tables"),
    "neuscale_opt.traces": ("buckets", "demand", "forecast", "loaders", "scale", "shipped", "spec"),
}
FORBIDDEN = ("neuscale_opt.cli", "neuscale_opt.report", "neuscale_opt.horizon")


def _imported_after(modules: list[str]) -> list[str]:
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@pytest.mark.parametrize("package", sorted(DOMAIN))
def test_domain_packages_do_not_reach_up(package: str) -> None:
    mods = [package] + [f"{package}.{m}" for m in DOMAIN[package]]
    loaded = _imported_after(mods)
    assert package in loaded  # the probe itself ran
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert bad == []


def test_building_the_parser_imports_no_heavy_library() -> None:
    code = "from neuscale_opt.cli import build_parser; build_parser(None)"
    probe = code + "\nimport sys; mods = sorted(sys.modules)\nimport json; print(json.dumps(mods))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out)
    assert "neuscale_opt.cli.plan" in loaded and "argparse" in loaded
    assert [m for m in loaded if m.split(".")[0] in ("numpy", "pandas", "pyomo", "pydantic", "highspy")] == []
    assert "json" not in loaded  # the commands import what they need when they run


def test_every_command_builds(capsys) -> None:
    from neuscale_opt.cli import build_parser, commands

    parser = build_parser("*")
    for name in commands():
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([name, "--help"])
        assert exc.value.code == 0
        assert f"neuscale-opt {name}" in capsys.readouterr().out
