"""``neuscale-opt plan --out DIR``: the report files, self-contained HTML, numbers equal to plan.json."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from neuscale_opt.cli import main

INSTANCES = Path(__file__).resolve().parents[1] / "instances"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "report"
    code = main(["plan", str(INSTANCES / "small.toml"), "--out", str(out), "--quiet"])
    assert code == 0
    return out


def md_tables(text: str) -> list[list[dict[str, str]]]:
    """Every pipe table of a Markdown text as a list of row dicts."""
    tables, cur, head = [], None, None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if head is None:
                head, cur = cells, []
            elif set(line.replace("|", "")) <= {"-"}:
                continue
            else:
                cur.append(dict(zip(head, cells, strict=True)))
        elif head is not None:
            tables.append(cur)
            head, cur = None, None
    if head is not None:
        tables.append(cur)
    return tables


def test_files_exist(report_dir):
    for name in ("report.md", "report.html", "plan.json", "allocations.csv", "epochs.csv"):
        assert (report_dir / name).is_file(), name
    figs = sorted(p.name for p in (report_dir / "figures").iterdir())
    assert {
        "vpods_over_epochs.png",
        "chips_vs_inventory.png",
        "energy_money_per_epoch.png",
        "pareto_candidates.png",
        "rooflines.png",
    } <= set(figs)
    for f in figs:
        assert (report_dir / "figures" / f).read_bytes().startswith(PNG)


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.tables, self.links = [], 0, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if tag == "table":
            self.tables += 1
        if tag in ("link", "script") or (tag == "a" and a.get("href", "").startswith("http")):
            self.links.append(tag)


def test_html_is_self_contained_and_parses(report_dir):
    p = _Collect()
    p.feed((report_dir / "report.html").read_text())
    p.close()
    assert len(p.imgs) >= 5 and p.tables >= 4
    assert not p.links
    for src in p.imgs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG)


def test_markdown_numbers_equal_plan_json(report_dir):
    plan = json.loads((report_dir / "plan.json").read_text())
    tables = md_tables((report_dir / "report.md").read_text())
    summary = next(t for t in tables if t and "objective_value" in t[0])[0]
    assert summary["status"] == plan["status"] == "optimal"
    for key in ("objective_value", "bound", "gap"):
        assert float(summary[key]) == pytest.approx(plan[key], rel=1e-9, abs=1e-12)
    totals = next(t for t in tables if t and "energy_j" in t[0] and "cost_usd" in t[0] and "epoch" not in t[0])[0]
    for key in ("energy_j", "cost_usd", "carbon_kg"):
        assert float(totals[key]) == pytest.approx(plan["totals"][key], rel=1e-9)
    alloc = next(t for t in tables if t and "n_vpods" in t[0])
    assert len(alloc) == len(plan["allocations"]) > 0
    for row, ref in zip(alloc, plan["allocations"], strict=True):
        assert (row["bucket"], row["chip"], row["shape"]) == (ref["bucket"], ref["chip"], ref["shape"])
        assert int(row["n_vpods"]) == ref["n_vpods"]
        assert float(row["rate_rps"]) == pytest.approx(ref["rate_rps"], rel=1e-9)
    csv = pd.read_csv(report_dir / "allocations.csv")
    assert csv["n_vpods"].tolist() == [r["n_vpods"] for r in plan["allocations"]]
    baselines = next(t for t in tables if t and "ratio" in t[0])
    assert [r["method"] for r in baselines] == ["milp", "greedy", "homogeneous", "unlimited"]
    assert all(float(r["ratio"]) >= 1 - 1e-9 for r in baselines if r["method"] in ("greedy", "homogeneous"))


def test_report_is_byte_identical_except_timing(report_dir, tmp_path):
    again = tmp_path / "again"
    assert main(["plan", str(INSTANCES / "small.toml"), "--out", str(again), "--quiet"]) == 0
    files = sorted(p.relative_to(report_dir).as_posix() for p in report_dir.rglob("*") if p.is_file())
    assert {"report.md", "report.html", "plan.json", "timing.json"} <= set(files)
    assert files == sorted(p.relative_to(again).as_posix() for p in again.rglob("*") if p.is_file())
    for name in files:
        if name != "timing.json":
            assert (again / name).read_bytes() == (report_dir / name).read_bytes(), name
    plan = json.loads((report_dir / "plan.json").read_text())
    assert "solve_seconds" not in plan and all("solve_seconds" not in e for e in plan["epochs"])
    timing = json.loads((report_dir / "timing.json").read_text())
    assert timing["plan"]["method"] == "milp" and timing["plan"]["solve_seconds"] >= 0
    assert [e["epoch"] for e in timing["plan"]["epochs"]] == [e["epoch"] for e in plan["epochs"]]
    assert set(timing["baselines"]) == {"greedy", "homogeneous", "unlimited"}


@pytest.mark.parametrize("make", ["file_parent", "existing_file", "missing_parent"])
def test_unwritable_out_is_exit_2_and_nothing_written(tmp_path, capsys, make):
    if make == "file_parent":
        (tmp_path / "f").write_text("x")
        out = tmp_path / "f" / "report"
    elif make == "existing_file":
        out = tmp_path / "report"
        out.write_text("x")
    else:
        out = tmp_path / "no" / "such" / "report"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code = main(["plan", str(INSTANCES / "small.toml"), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "--out" in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_placed_plans_get_occupancy_maps_and_placements_csv(tmp_path):
    out = tmp_path / "placed"
    assert main(["plan", str(INSTANCES / "placement" / "unplaceable.toml"), "--out", str(out), "--quiet"]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["placements"]
    csv = pd.read_csv(out / "placements.csv")
    assert len(csv) == len(plan["placements"])
    assert (out / "figures" / "pod_tpu-v6e_0.png").read_bytes().startswith(PNG)
    assert "Occupancy of tpu-v6e/0" in (out / "report.md").read_text()


def test_trace_instances_report_replayed_slo_attainment(tmp_path):
    out = tmp_path / "conv"
    assert main(["plan", str(INSTANCES / "azure-conv.toml"), "--out", str(out), "--quiet"]) == 0
    tables = md_tables((out / "report.md").read_text())
    comp = {r["method"]: r for r in next(t for t in tables if t and "replay_slo_attainment" in t[0])}
    for m in ("milp", "greedy"):
        assert 0.9 <= float(comp[m]["replay_slo_attainment"]) <= 1.0
        assert float(comp[m]["replay_tokens_per_joule"]) > 0
    assert comp["unlimited"]["replay_slo_attainment"] == ""
