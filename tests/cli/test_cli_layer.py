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


def test_the_heap_is_frozen_only_in_the_command_line_process(tmp_path):
    # main() called from Python never freezes the caller's objects; the console script does,
    # once the instance is loaded (gc.freeze: they stay for the whole command)
    import gc
    from pathlib import Path

    from neuscale_opt.cli import main

    small = str(Path(__file__).resolve().parents[2] / "instances" / "small.toml")
    before = gc.get_freeze_count()
    assert main(["plan", small, "--json", str(tmp_path / "p.json"), "--quiet"]) == 0
    assert gc.get_freeze_count() == before
    probe = (
        "import gc, sys\n"
        "import neuscale_opt.cli as cli\n"
        "import neuscale_opt.cli.plan as plan\n"
        "seen = []\n"
        "real = plan.settle_heap\n"
        "def spy():\n"
        "    real()\n"
        "    seen.append(gc.get_freeze_count())\n"
        "plan.settle_heap = spy\n"
        f"sys.argv = ['neuscale-opt', 'plan', {small!r}, '--json', {str(tmp_path / 'q.json')!r}, '--quiet']\n"
        "try:\n"
        "    cli.console()\n"
        "except SystemExit as e:\n"
        "    print(e.code, seen)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    code, seen = out.strip().splitlines()[-1].split(" ", 1)
    assert code == "0" and seen.startswith("[") and int(seen.strip("[]").split(",")[0]) > 0
