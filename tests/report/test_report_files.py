"""``neuscale-opt plan --out DIR``: the report files, self-contained HTML, numbers equal to plan.json."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from conftest import md_tables

from neuscale_opt.cli import main
from neuscale_opt.report.fmt import parse

INSTANCES = Path(__file__).resolve().parents[2] / "instances"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "report"
    code = main(["plan", str(INSTANCES / "small.toml"), "--out", str(out), "--quiet"])
    assert code == 0
    return out


def test_files_exist(report_dir):
    for name in ("report.md", "report.html", "plan.json", "allocations.csv", "epochs.csv"):
        assert (report_dir / name).is_file(), name
    figs = sorted(p.name for p in (report_dir / "figures").iterdir())
    assert {
        "deployment_over_time.png",
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
    """The rounded tables carry plan.json's numbers (three significant digits, units in the headers)."""
    plan = json.loads((report_dir / "plan.json").read_text())
    md = (report_dir / "report.md").read_text()
    tables = md_tables(md)
    assert plan["status"] == "optimal" and "Status `optimal`" in md
    hours = 300.0 / 3600.0  # one five-minute epoch
    g = {r["at a glance"]: r["value"] for r in next(t for t in tables if t and "at a glance" in t[0])}
    assert parse(g["energy over the horizon"]) == pytest.approx(plan["totals"]["energy_j"] / 3.6e6, rel=5e-3)
    assert parse(g["cost per hour"]) == pytest.approx(plan["totals"]["cost_usd"] / hours, rel=5e-3)
    assert parse(g["carbon over the horizon"]) == pytest.approx(plan["totals"]["carbon_kg"], rel=5e-3)
    alloc = next(t for t in tables if t and "vPods" in t[0] and "req/s" in t[0])
    assert len(alloc) == len(plan["allocations"]) > 0
    for row, ref in zip(alloc, plan["allocations"], strict=True):
        assert (row["class"], row["generation"], row["slice"]) == (ref["bucket"], ref["chip"], ref["shape"])
        assert int(row["vPods"]) == ref["n_vpods"]
        assert parse(row["req/s"]) == pytest.approx(ref["rate_rps"], rel=5e-3)
    csv = pd.read_csv(report_dir / "allocations.csv")
    assert csv["n_vpods"].tolist() == [r["n_vpods"] for r in plan["allocations"]]
    baselines = next(t for t in tables if t and "planned energy vs plan" in t[0])
    assert [r["method"] for r in baselines] == ["milp", "greedy", "homogeneous", "unlimited"]
    assert all(parse(r["planned energy vs plan"]) >= 1 - 5e-3 for r in baselines if r["method"] != "milp")
    assert "replayed SLO" not in baselines[0]  # no trace: nothing replayed, no empty columns


def test_report_is_byte_identical_except_timing(tiny_report, tmp_path):
    """The tiny horizon report (replays, pod maps, counted generation) built twice: same bytes."""
    first, _, inst = tiny_report
    again = tmp_path / "again"
    assert main(["plan", str(inst), "--out", str(again), "--quiet"]) == 0
    files = sorted(p.relative_to(first).as_posix() for p in first.rglob("*") if p.is_file())
    assert {"report.md", "report.html", "plan.json", "replays.json", "timing.json", "figures/pod_maps.png"} <= set(
        files
    )
    assert files == sorted(p.relative_to(again).as_posix() for p in again.rglob("*") if p.is_file())
    for name in files:
        if name != "timing.json":
            assert (again / name).read_bytes() == (first / name).read_bytes(), name
    plan = json.loads((first / "plan.json").read_text())
    assert "solve_seconds" not in plan and all("solve_seconds" not in e for e in plan["epochs"])
    timing = json.loads((first / "timing.json").read_text())
    assert timing["plan"]["method"] == "milp" and timing["plan"]["solve_seconds"] >= 0
    assert [e["epoch"] for e in timing["plan"]["epochs"]] == [e["epoch"] for e in plan["epochs"]]
    assert set(timing["baselines"]) == {"neuscale-autoscaler", "homogeneous-autoscaler", "oracle"}


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
    # one figure of small multiples for every pod over the epochs (not one file per pod, epoch 0 only)
    assert (out / "figures" / "pod_maps.png").read_bytes().startswith(PNG)
    assert not list((out / "figures").glob("pod_tpu*"))
    assert "(figures/pod_maps.png)" in (out / "report.md").read_text()


def test_trace_instances_report_replayed_slo_attainment(tmp_path):
    out = tmp_path / "conv"
    assert main(["plan", str(INSTANCES / "azure-conv.toml"), "--out", str(out), "--quiet"]) == 0
    tables = md_tables((out / "report.md").read_text())
    comp = {r["method"]: r for r in next(t for t in tables if t and "replayed SLO" in t[0])}
    replays = json.loads((out / "replays.json").read_text())
    assert set(replays) == {"milp", "greedy", "homogeneous"}
    for m in ("milp", "greedy"):
        assert 0.9 <= parse(comp[m]["replayed SLO"]) <= 1.0
        assert parse(comp[m]["goodput tokens/J"]) == pytest.approx(replays[m]["goodput_tokens_per_joule"], rel=5e-3)
    assert comp["unlimited"]["replayed SLO"] == "–"  # holds more chips than the fleet: not replayed
    # the classes' rate movement the safe loads took (AT4) is recorded with the plan, one per class
    prov = json.loads((out / "plan.json").read_text())["provenance"]
    from neuscale_opt.instance import load_instance
    from neuscale_opt.traces.buckets import bucket_names

    assert set(prov["rate_cv2"]) == set(bucket_names(load_instance(INSTANCES / "azure-conv.toml").workload.buckets))
    assert all(v >= 0 for v in prov["rate_cv2"].values()) and any(v > 0 for v in prov["rate_cv2"].values())
