"""``neuscale-opt export``: GKE node pools, workloads and scale actions checked against the plan rows.

Expected values are computed here from the plan JSON and from Google's published tables (constants
below), not from the export module.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import pytest
import yaml

from neuscale_opt.alloc.options import PlanOptions
from neuscale_opt.alloc.plan import plan
from neuscale_opt.candidates import build_coefficients
from neuscale_opt.catalog import load_chips
from neuscale_opt.cli import main
from neuscale_opt.export import gke_topology, machine_table
from neuscale_opt.instance import parse_instance

# Google's tables: https://cloud.google.com/tpu/docs/v5e, /v5p, /v6e (machine type per topology) and
# https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus (accelerator labels).
ACCELERATOR = {
    "tpu-v4": "tpu-v4-podslice",
    "tpu-v5e": "tpu-v5-lite-podslice",
    "tpu-v5p": "tpu-v5p-slice",
    "tpu-v6e": "tpu-v6e-slice",
}
SINGLE_HOST = {  # (generation, chips of the slice) -> the one machine holding it
    ("tpu-v4", 4): "ct4p-hightpu-4t",
    ("tpu-v5p", 4): "ct5p-hightpu-4t",
    ("tpu-v5e", 1): "ct5lp-hightpu-1t",
    ("tpu-v5e", 4): "ct5lp-hightpu-4t",
    ("tpu-v5e", 8): "ct5lp-hightpu-8t",
    ("tpu-v6e", 1): "ct6e-standard-1t",
    ("tpu-v6e", 4): "ct6e-standard-4t",
    ("tpu-v6e", 8): "ct6e-standard-8t",
}
MULTI_HOST = {"tpu-v4": "ct4p-hightpu-4t", "tpu-v5p": "ct5p-hightpu-4t", "tpu-v5e": "ct5lp-hightpu-4t",
              "tpu-v6e": "ct6e-standard-4t"}  # fmt: skip
CHIPS_PER_MULTI_HOST_VM = 4  # every multi-host slice is built of 4-chip VMs (same pages)
GPU_ACCELERATOR = {"nvidia-h100": "nvidia-h100-80gb", "nvidia-a100-80gb": "nvidia-a100-80gb"}
GPUS_PER_NODE = 8  # a3-highgpu-8g, a2-ultragpu-8g


def expected_hosts(chip: str, chips: int) -> tuple[str, int]:
    """(machine type, nodes per slice) of a TPU slice, from the tables above."""
    if (chip, chips) in SINGLE_HOST:
        return SINGLE_HOST[(chip, chips)], 1
    return MULTI_HOST[chip], chips // CHIPS_PER_MULTI_HOST_VM


def plan_groups(plan_json: dict) -> dict[tuple[int, str], dict]:
    """(epoch, vpod_group) -> its vPod type and count, straight from the plan rows."""
    out: dict[tuple[int, str], dict] = {}
    for r in plan_json["allocations"]:
        if r["n_vpods"] == 0:
            continue
        g = out.setdefault((r["epoch"], r["vpod_group"]), {k: r[k] for k in ("chip", "shape", "chips_per_vpod",
                                                                           "tp", "pp", "n_vpods")})  # fmt: skip
        assert g["n_vpods"] == r["n_vpods"]
    return out


def load_yaml(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def vllm_flag(args: list[str], flag: str) -> int | None:
    hits = [a.split("=", 1)[1] for a in args if a.startswith(f"{flag}=")]
    assert len(hits) <= 1
    return int(hits[0]) if hits else None


def serving_container(doc: dict) -> dict:
    if doc["kind"] == "Deployment":
        return doc["spec"]["template"]["spec"]["containers"][0]
    return doc["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]


def pod_specs(doc: dict) -> list[dict]:
    if doc["kind"] == "Deployment":
        return [doc["spec"]["template"]["spec"]]
    t = doc["spec"]["leaderWorkerTemplate"]
    return [t["leaderTemplate"]["spec"], t["workerTemplate"]["spec"]]


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def export(tmp: Path, plan_path: Path, *extra: str, fmt: str = "gke", name: str = "out") -> Path:
    out = tmp / name
    assert main(["export", str(plan_path), "--format", fmt, "--out", str(out), *extra]) == 0
    return out


INSTANCES = Path(__file__).resolve().parents[1] / "instances"


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


@pytest.fixture(scope="module")
def default_plan(tmp_path_factory) -> Path:
    """The default instance (its fleet, trace and rules) planned over its first 4 epochs with 2-epoch
    windows: a schedule with creations, single- and multi-host slices, in seconds instead of the
    12-epoch plan's minute and more."""
    d = tmp_path_factory.mktemp("default")
    text = (INSTANCES / "default.toml").read_text(encoding="utf-8")
    text = replace_once(text, "\nhorizon = 12\n", "\nhorizon = 4\n")
    text = replace_once(text, "\nwindow = 3\n", "\nwindow = 2\n")
    text = replace_once(
        text, '"data/azure_llm_2023_conv.csv"', json.dumps(str(INSTANCES / "data" / "azure_llm_2023_conv.csv"))
    )
    (d / "default4.toml").write_text(text, encoding="utf-8")
    p = d / "plan.json"
    assert main(["plan", str(d / "default4.toml"), "--json", str(p), "--quiet"]) == 0
    return p


def gpu_plan_json(model: str, fleet: list[dict], demand: list[tuple[int, str, float]]) -> dict:
    inst = parse_instance(
        {
            "model": {"name": model},
            "fleet": fleet,
            "workload": {
                "classes": [
                    {"name": "short", "input_tokens": 512, "output_tokens": 128},
                    {"name": "long", "input_tokens": 4096, "output_tokens": 512},
                ],
                "demand": [{"epoch": e, "bucket": b, "rate_rps": r} for e, b, r in demand],
            },
            "slo": {"reference_chip": "nvidia-h100"},
        }
    )
    sol = plan(build_coefficients(inst), PlanOptions.from_instance(inst), "milp")
    assert sol.has_plan
    return sol.to_dict(timing=False)


@pytest.fixture(scope="module")
def gpu_plan(tmp_path_factory) -> Path:
    d = gpu_plan_json(
        "Llama-3-70B",
        [{"chip": "nvidia-h100", "chips": 32}, {"chip": "nvidia-a100-80gb", "chips": 32}],
        [(0, "short", 20.0), (0, "long", 4.0), (1, "short", 60.0), (1, "long", 1.0)],
    )
    p = tmp_path_factory.mktemp("gpu") / "gpu_plan.json"
    p.write_text(json.dumps(d), encoding="utf-8")
    return p


# ------------------------------------------------------------------------------ default instance
def test_default_plan_yaml_matches_the_plan_rows(default_plan, tmp_path):
    plan_json = json.loads(default_plan.read_text())
    groups = plan_groups(plan_json)
    epochs = sorted({e for e, _ in groups})
    assert len(epochs) > 1  # the default instance is planned as a schedule
    out = export(tmp_path, default_plan)
    kinds_seen = set()
    for e in epochs:
        docs = load_yaml(out / f"epoch-{e:03d}" / "workloads.yaml")
        by_group = {d["metadata"]["annotations"]["neuscale.io/vpod-group"]: d for d in docs}
        mine = {g: v for (ep, g), v in groups.items() if ep == e}
        assert set(by_group) == set(mine)
        slices: dict[tuple[str, str], int] = {}
        for g, v in mine.items():
            doc = by_group[g]
            machine, hosts = expected_hosts(v["chip"], v["chips_per_vpod"])
            kinds_seen.add(doc["kind"])
            assert doc["kind"] == ("Deployment" if hosts == 1 else "LeaderWorkerSet")
            assert doc["spec"]["replicas"] == v["n_vpods"]
            if hosts > 1:
                assert doc["spec"]["leaderWorkerTemplate"]["size"] == hosts
            args = serving_container(doc)["args"]
            assert vllm_flag(args, "--tensor-parallel-size") == v["tp"]
            assert vllm_flag(args, "--pipeline-parallel-size") == (v["pp"] if v["pp"] > 1 else None)
            for spec in pod_specs(doc):
                sel = spec["nodeSelector"]
                assert sel["cloud.google.com/gke-tpu-accelerator"] == ACCELERATOR[v["chip"]]
                assert sel["cloud.google.com/gke-tpu-topology"] == v["shape"]  # the plan's shapes are canonical
                res = spec["containers"][0]["resources"]
                assert (
                    res["requests"]["google.com/tpu"] == v["chips_per_vpod"] // hosts == res["limits"]["google.com/tpu"]
                )
            key = (v["chip"], v["shape"])
            slices[key] = slices.get(key, 0) + v["n_vpods"]
        pools = load_yaml(out / f"epoch-{e:03d}" / "nodepools.yaml")
        for (chip, shape), n in slices.items():
            chips = math.prod(int(x) for x in shape.split("x"))
            machine, hosts = expected_hosts(chip, chips)
            mine_pools = [p for p in pools if p["name"].startswith(f"{chip}-{shape}")]
            assert {p["config"]["machineType"] for p in mine_pools} == {machine}
            assert sum(p["initialNodeCount"] for p in mine_pools) == n * hosts
            if hosts > 1:  # one immutable pool per multi-host slice
                assert len(mine_pools) == n
                assert all(p["initialNodeCount"] == hosts for p in mine_pools)
                assert all(p["placementPolicy"]["tpuTopology"] == shape for p in mine_pools)
            else:
                assert len(mine_pools) == 1 and "placementPolicy" not in mine_pools[0]
        assert len(pools) == sum(n if expected_hosts(c, math.prod(map(int, s.split("x"))))[1] > 1 else 1
                                 for (c, s), n in slices.items())  # fmt: skip
    assert kinds_seen == {"Deployment", "LeaderWorkerSet"}  # v6e 2x4 single-host, v5p 2x2x2 on two hosts


def test_default_schedule_scale_actions_agree_with_the_planners_vpod_changes(default_plan, tmp_path):
    """The horizon planner reports the vPods it creates and deletes per epoch; the workload actions
    of the export add up to the same numbers."""
    plan_json = json.loads(default_plan.read_text())
    out = export(tmp_path, default_plan, fmt="csv")
    actions = [r for r in read_csv(out / "scale_actions.csv") if r["object"] == "workload"]
    assert any(e["created_vpods"] for e in plan_json["epochs"])
    for e in plan_json["epochs"][1:]:
        mine = [(int(r["before"]), int(r["after"])) for r in actions if int(r["to_epoch"]) == e["epoch"]]
        assert sum(max(b - a, 0) for a, b in mine) == e["created_vpods"]
        assert sum(max(a - b, 0) for a, b in mine) == e["deleted_vpods"]


def test_csv_carries_the_same_counts_as_the_yaml(default_plan, tmp_path):
    gke = export(tmp_path, default_plan, name="gke")
    tab = export(tmp_path, default_plan, fmt="csv", name="csv")
    assert sorted(p.name for p in tab.iterdir()) == [
        "neuscale-export.json", "nodepools.csv", "scale_actions.csv", "workloads.csv"]  # fmt: skip
    pools = {(int(r["epoch"]), r["pool"]): int(r["nodes"]) for r in read_csv(tab / "nodepools.csv")}
    loads = {(int(r["epoch"]), r["vpod_group"]): r for r in read_csv(tab / "workloads.csv")}
    groups = plan_groups(json.loads(default_plan.read_text()))
    assert set(loads) == set(groups)
    for key, v in groups.items():
        assert int(loads[key]["replicas"]) == v["n_vpods"] and int(loads[key]["tp"]) == v["tp"]
    yaml_pools = {}
    for d in sorted(gke.glob("epoch-*")):
        e = int(d.name.split("-")[1])
        yaml_pools.update({(e, p["name"]): p["initialNodeCount"] for p in load_yaml(d / "nodepools.yaml")})
    assert pools == yaml_pools
    n_actions = sum(len(t["actions"]) for t in load_yaml(gke / "scale-actions.yaml")[0]["transitions"])
    assert n_actions == len(read_csv(tab / "scale_actions.csv"))


def test_output_is_deterministic_and_replaces_an_earlier_export(default_plan, tmp_path):
    a = export(tmp_path, default_plan, name="a")
    b = export(tmp_path, default_plan, name="b")
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files_a == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files_a)
    # a one-epoch plan exported over the 4-epoch export leaves no stale epoch directory behind
    d = json.loads(default_plan.read_text())
    d["allocations"] = [r for r in d["allocations"] if r["epoch"] == 0]
    d["epochs"] = [e for e in d["epochs"] if e["epoch"] == 0]
    one = tmp_path / "one.json"
    one.write_text(json.dumps(d))
    export(tmp_path, one, name="a")
    assert sorted(p.name for p in a.iterdir()) == ["epoch-000", "neuscale-export.json", "scale-actions.yaml"]
    assert not list(tmp_path.glob(".a.*"))  # no temporary directory left


def test_machine_type_override_makes_v6e_2x4_two_hosts(default_plan, tmp_path):
    """Google's v6e table: a 2x4 slice is also offered on two ct6e-standard-4t VMs (GKE API only)."""
    out = export(tmp_path, default_plan, "--machine-type", "tpu-v6e=ct6e-standard-4t")
    docs = load_yaml(out / "epoch-000" / "workloads.yaml")
    v6e = [
        d
        for d in docs
        if d["metadata"]["labels"]["neuscale.io/generation"] == "tpu-v6e"
        and pod_specs(d)[0]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x4"
    ]
    assert v6e and all(d["kind"] == "LeaderWorkerSet" and d["spec"]["leaderWorkerTemplate"]["size"] == 2 for d in v6e)
    assert all(s["containers"][0]["resources"]["requests"]["google.com/tpu"] == 4 for d in v6e for s in pod_specs(d))
    pools = [p for p in load_yaml(out / "epoch-000" / "nodepools.yaml") if p["name"].startswith("tpu-v6e-2x4")]
    assert pools and all(p["initialNodeCount"] == 2 and p["config"]["machineType"] == "ct6e-standard-4t" for p in pools)


# ------------------------------------------------------------------------------------- GPU plans
def test_gpu_plan_exports_deployments_with_nvidia_gpu_requests(gpu_plan, tmp_path):
    plan_json = json.loads(gpu_plan.read_text())
    groups = plan_groups(plan_json)
    out = export(tmp_path, gpu_plan, "--model", "Llama-3-70B")
    # (pipeline parallelism across GPU nodes is exercised by the 405B test below)
    for e in sorted({e for e, _ in groups}):
        docs = load_yaml(out / f"epoch-{e:03d}" / "workloads.yaml")
        by_group = {d["metadata"]["annotations"]["neuscale.io/vpod-group"]: d for d in docs}
        mine = {g: v for (ep, g), v in groups.items() if ep == e}
        assert set(by_group) == set(mine)
        gpus: dict[str, int] = {}
        for g, v in mine.items():
            doc = by_group[g]
            assert doc["kind"] == "Deployment" and doc["spec"]["replicas"] == v["n_vpods"]
            c = serving_container(doc)
            assert c["resources"]["requests"]["nvidia.com/gpu"] == v["chips_per_vpod"]
            assert "--model=meta-llama/Meta-Llama-3-70B" in c["args"]
            assert vllm_flag(c["args"], "--tensor-parallel-size") == v["tp"]
            assert vllm_flag(c["args"], "--pipeline-parallel-size") == (v["pp"] if v["pp"] > 1 else None)
            sel = doc["spec"]["template"]["spec"]["nodeSelector"]
            assert sel == {"cloud.google.com/gke-accelerator": GPU_ACCELERATOR[v["chip"]]}
            gpus[v["chip"]] = gpus.get(v["chip"], 0) + v["n_vpods"] * v["chips_per_vpod"]
        pools = {p["name"]: p for p in load_yaml(out / f"epoch-{e:03d}" / "nodepools.yaml")}
        assert set(pools) == set(gpus)
        for chip, n in gpus.items():  # 1/2/4/8-GPU vPods pack into ceil(n / 8) nodes
            assert pools[chip]["initialNodeCount"] == math.ceil(n / GPUS_PER_NODE)
            assert pools[chip]["config"]["accelerators"] == [
                {"acceleratorType": GPU_ACCELERATOR[chip], "acceleratorCount": GPUS_PER_NODE}]  # fmt: skip


def test_gpu_vpods_beyond_a_node_are_leader_worker_sets(tmp_path):
    d = gpu_plan_json("Llama-3.1-405B", [{"chip": "nvidia-h100", "chips": 64}], [(0, "short", 1.0), (1, "short", 3.0)])
    groups = plan_groups(d)
    assert all(v["chips_per_vpod"] > GPUS_PER_NODE for v in groups.values())
    p = tmp_path / "p.json"
    p.write_text(json.dumps(d))
    out = export(tmp_path, p, "--model", "Llama-3.1-405B")
    for (e, g), v in groups.items():
        doc = next(x for x in load_yaml(out / f"epoch-{e:03d}" / "workloads.yaml")
                   if x["metadata"]["annotations"]["neuscale.io/vpod-group"] == g)  # fmt: skip
        hosts = v["chips_per_vpod"] // GPUS_PER_NODE
        assert doc["kind"] == "LeaderWorkerSet" and doc["spec"]["leaderWorkerTemplate"]["size"] == hosts
        assert doc["spec"]["replicas"] == v["n_vpods"]
        assert all(s["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == GPUS_PER_NODE for s in pod_specs(doc))
        args = serving_container(doc)["args"]
        assert vllm_flag(args, "--tensor-parallel-size") == v["tp"]
        assert vllm_flag(args, "--pipeline-parallel-size") == v["pp"]
        pool = load_yaml(out / f"epoch-{e:03d}" / "nodepools.yaml")
        assert [x["initialNodeCount"] for x in pool] == [v["n_vpods"] * hosts]
    # one vPod in both epochs: the second transition is listed, with nothing to do
    n = [v["n_vpods"] for _, v in sorted(groups.items())]
    transitions = load_yaml(out / "scale-actions.yaml")[0]["transitions"]
    assert [(t["from_epoch"], t["to_epoch"]) for t in transitions] == [(None, 0), (0, 1)]
    assert (transitions[1]["actions"] == []) == (n[0] == n[1])


# --------------------------------------------------------------------------------- scale actions
def row(epoch: int, chip: str, shape: str, tp: int, n: int, bucket: str = "short") -> dict:
    chips = math.prod(int(x) for x in shape.split("x"))
    return {"epoch": epoch, "bucket": bucket, "phase": "colocated", "chip": chip, "shape": shape,
            "chips_per_vpod": chips, "tp": tp, "pp": chips // tp, "ep": 1, "batch": 64, "n_vpods": n,
            "rate_rps": 1.0}  # fmt: skip


def named(r: dict) -> dict:
    """``r`` with its dedicated vPod group named explicitly (the reader's default variant is pooled)."""
    return {**r, "vpod_group": f"{r['chip']}:{r['shape']}:tp{r['tp']}pp{r['pp']}ep1:b64:colocated|{r['bucket']}"}


def test_scale_actions_between_two_epochs_match_a_hand_built_example(tmp_path):
    """Epoch 0: two v6e 2x4, one v5e 4x4 (multi-host, 4 VMs), one v5p 2x2x1. Epoch 1: three v6e 2x4,
    the v5e 4x4 gone, two v5e 4x8 (a shape change: new pools), the v5p unchanged."""
    plan_json = {
        "allocations": [
            named(row(0, "tpu-v6e", "2x4", 8, 2)),
            named(row(0, "tpu-v5e", "4x4", 16, 1, "long")),
            named(row(0, "tpu-v5p", "2x2x1", 4, 1, "mid")),
            named(row(1, "tpu-v6e", "2x4", 8, 3)),
            named(row(1, "tpu-v5e", "4x8", 8, 2, "long")),
            named(row(1, "tpu-v5p", "2x2x1", 4, 1, "mid")),
        ]
    }
    p = tmp_path / "hand.json"
    p.write_text(json.dumps(plan_json))
    out = export(tmp_path, p, "--model", "Llama-3-8B", fmt="csv")
    name = {r["vpod_group"]: r["workload"] for r in read_csv(out / "workloads.csv")}
    v6e = name["tpu-v6e:2x4:tp8pp1ep1:b64:colocated|short"]
    v5e16 = name["tpu-v5e:4x4:tp16pp1ep1:b64:colocated|long"]
    v5e32 = name["tpu-v5e:4x8:tp8pp4ep1:b64:colocated|long"]
    got = {(r["action"], r["object"], r["name"], int(r["before"]), int(r["after"]))
           for r in read_csv(out / "scale_actions.csv") if r["to_epoch"] == "1"}  # fmt: skip
    assert got == {
        ("resize-up", "pool", "tpu-v6e-2x4", 2, 3),
        ("delete", "pool", "tpu-v5e-4x4-s0", 4, 0),
        ("create", "pool", "tpu-v5e-4x8-s0", 0, 8),
        ("create", "pool", "tpu-v5e-4x8-s1", 0, 8),
        ("scale-up", "workload", v6e, 2, 3),
        ("delete", "workload", v5e16, 1, 0),
        ("create", "workload", v5e32, 0, 2),
    }
    steps = {r["action"] + " " + r["object"]: int(r["step"]) for r in read_csv(out / "scale_actions.csv")}
    assert steps["create pool"] < steps["create workload"] < steps["delete workload"] < steps["delete pool"]
    first = [r for r in read_csv(out / "scale_actions.csv") if r["to_epoch"] == "0"]
    assert {r["from_epoch"] for r in first} == {"-1"} and {r["action"] for r in first} == {"create"}
    gke = export(tmp_path, p, "--model", "Llama-3-8B", name="gke")
    (t0, t1) = load_yaml(gke / "scale-actions.yaml")[0]["transitions"]
    assert t0["from_epoch"] is None and (t1["from_epoch"], t1["to_epoch"]) == (0, 1)
    assert {(a["action"], a["object"], a["name"], a["before"], a["after"]) for a in t1["actions"]} == got


# ------------------------------------------------------------------------ defaults and bad input
def test_every_catalog_chip_has_a_sourced_machine_type():
    rows = machine_table()
    assert {m.generation for m in rows} == set(load_chips())
    for m in rows:
        assert re.search(r"https://|xpk|Cyclenerd", m.source), m
    tpu = {(m.generation, m.machine_type): m.chips_per_node for m in rows if not m.is_gpu}
    assert {(g, mt) for (g, _), mt in SINGLE_HOST.items()} | {(g, mt) for g, mt in MULTI_HOST.items()} <= set(tpu)
    assert all(tpu[(g, mt)] == c for (g, c), mt in SINGLE_HOST.items())
    assert all(tpu[(g, mt)] == CHIPS_PER_MULTI_HOST_VM for g, mt in MULTI_HOST.items())


@pytest.mark.parametrize(
    ("shape", "topology"),
    [
        ("2x4", "2x4"),
        ("4x2", "2x4"),
        ("8x4", "4x8"),
        ("1x2x2", "2x2x1"),
        ("2x2x1", "2x2x1"),
        ("4x8x4", "4x4x8"),
    ],  # fmt: skip
)
def test_topology_labels_use_googles_spelling(shape, topology):
    assert gke_topology(shape) == topology


def bad(tmp_path: Path, capsys, plan_obj, *extra: str, raw: str | None = None) -> str:
    p = tmp_path / "bad.json"
    p.write_text(raw if raw is not None else json.dumps(plan_obj))
    out = tmp_path / "never"
    capsys.readouterr()
    code = main(["export", str(p), "--out", str(out), "--model", "Llama-3-8B", *extra])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists() and not list(tmp_path.glob(".never*"))
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_bad_plans_are_one_line_errors_and_write_nothing(tmp_path, capsys):
    good = row(0, "tpu-v6e", "2x4", 8, 1)
    assert "malformed JSON" in bad(tmp_path, capsys, None, raw="{not json")
    assert "no 'allocations' list" in bad(tmp_path, capsys, {"rows": []})
    assert "infeasible, nothing to deploy (v6e short)" in bad(
        tmp_path, capsys, {"status": "infeasible", "diagnosis": "v6e short", "allocations": []})  # fmt: skip
    assert "allocations[1]: missing n_vpods" in bad(
        tmp_path, capsys, {"allocations": [good, {k: v for k, v in good.items() if k != "n_vpods"}]})  # fmt: skip
    assert "allocations[0].n_vpods" in bad(tmp_path, capsys, {"allocations": [{**good, "n_vpods": -1}]})
    assert "allocations[0].tp" in bad(tmp_path, capsys, {"allocations": [{**good, "tp": 2.5}]})
    assert "allocations[0].batch" in bad(tmp_path, capsys, None, raw=json.dumps({"allocations": [good]}).replace(
        '"batch": 64', '"batch": NaN'))  # fmt: skip
    assert "allocations[0].shape" in bad(tmp_path, capsys, {"allocations": [{**good, "shape": "2xa"}]})
    assert "tp 4 x pp 1 != chips_per_vpod 8" in bad(tmp_path, capsys, {"allocations": [{**good, "tp": 4}]})
    assert "does not hold chips_per_vpod" in bad(
        tmp_path, capsys, {"allocations": [{**good, "shape": "4x4", "tp": 8}]})  # fmt: skip
    assert "no GKE machine type known for generation 'tpu-v9'" in bad(
        tmp_path, capsys, {"allocations": [{**good, "chip": "tpu-v9"}]})  # fmt: skip
    assert "--machine-type" in bad(
        tmp_path, capsys, {"allocations": [good]}, "--machine-type", "tpu-v6e=ct5p-hightpu-4t"
    )
    assert "--machine-type" in bad(tmp_path, capsys, {"allocations": [good]}, "--machine-type", "tpu-v6e")


def test_missing_plan_and_foreign_out_dir_are_refused(tmp_path, capsys):
    capsys.readouterr()
    assert main(["export", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o"), "--model", "x/y"]) == 2
    assert "nope.json: no such file" in capsys.readouterr().err
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"allocations": [row(0, "tpu-v6e", "2x4", 8, 1)]}))
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    assert main(["export", str(p), "--out", str(foreign), "--model", "x/y"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert [f.name for f in foreign.iterdir()] == ["notes.txt"]
    earlier = tmp_path / "deploy"
    assert main(["export", str(p), "--out", str(earlier), "--model", "x/y"]) == 0
    (earlier / "epoch-000" / "mine.yaml").write_text("kind: ConfigMap\n")
    capsys.readouterr()
    assert main(["export", str(p), "--out", str(earlier), "--model", "x/y"]) == 2
    assert "not part of the earlier export (e.g. epoch-000/mine.yaml)" in capsys.readouterr().err
    assert (earlier / "epoch-000" / "mine.yaml").exists()


@pytest.mark.parametrize(
    ("chip", "shape"),
    [("tpu-v5e", "1x1"), ("tpu-v5e", "2x2"), ("tpu-v5e", "2x4"), ("tpu-v5e", "8x8"), ("tpu-v6e", "1x1"),
     ("tpu-v6e", "2x2"), ("tpu-v6e", "4x4"), ("tpu-v4", "2x2x1"), ("tpu-v4", "2x2x4"), ("tpu-v5p", "2x4x4")],
)  # fmt: skip
def test_machine_type_and_nodes_per_slice_follow_googles_tables(chip, shape, tmp_path):
    chips = math.prod(int(x) for x in shape.split("x"))
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"allocations": [row(0, chip, shape, chips, 3)]}))
    out = export(tmp_path, p, "--model", "x/y", fmt="csv")
    machine, hosts = expected_hosts(chip, chips)
    pools = read_csv(out / "nodepools.csv")
    assert {r["machine_type"] for r in pools} == {machine}
    assert {r["gke_accelerator"] for r in pools} == {ACCELERATOR[chip]}
    assert sum(int(r["nodes"]) for r in pools) == 3 * hosts
    assert len(pools) == (3 if hosts > 1 else 1)
    (w,) = read_csv(out / "workloads.csv")
    assert (w["api_kind"], int(w["pods_per_replica"]), int(w["chips_per_pod"])) == (
        "Deployment" if hosts == 1 else "LeaderWorkerSet", hosts, chips // hosts)  # fmt: skip


def test_pooled_group_is_one_workload_and_phases_are_separate_workloads(tmp_path):
    """Pooled: two classes share one vPod group, whose n_vpods repeats on both rows (counted once).
    Disaggregated: prefill and decode vPods of one class are two workloads."""
    shared = [row(0, "tpu-v6e", "2x4", 8, 2, "a"), row(0, "tpu-v6e", "2x4", 8, 2, "b")]
    split = [{**row(0, "tpu-v5e", "2x2", 4, 1, "c"), "phase": "prefill"},
             {**row(0, "tpu-v5e", "2x2", 4, 3, "c"), "phase": "decode"}]  # fmt: skip
    p = tmp_path / "p.json"
    unserved = [{"epoch": 0, "bucket": "c", "unserved_rps": 1.5}]
    p.write_text(json.dumps({"variant": "pooled", "allocations": shared + split, "unserved": unserved}))
    out = export(tmp_path, p, "--model", "x/y")
    docs = load_yaml(out / "epoch-000" / "workloads.yaml")
    v6e = [d for d in docs if d["metadata"]["labels"]["neuscale.io/generation"] == "tpu-v6e"]
    assert len(v6e) == 1 and v6e[0]["spec"]["replicas"] == 2
    assert v6e[0]["metadata"]["annotations"]["neuscale.io/buckets"] == "a+b"
    phases = {d["metadata"]["labels"]["neuscale.io/phase"]: d["spec"]["replicas"] for d in docs if d not in v6e}
    assert phases == {"prefill": 1, "decode": 3}
    pools = {x["name"]: x["initialNodeCount"] for x in load_yaml(out / "epoch-000" / "nodepools.yaml")}
    assert pools == {"tpu-v6e-2x4": 2, "tpu-v5e-2x2": 4}
    notes = json.loads((out / "neuscale-export.json").read_text())["notes"]
    assert any("disaggregated" in n for n in notes) and any("unserved in epochs 0" in n for n in notes)


def test_rows_of_one_group_that_disagree_are_refused(tmp_path, capsys):
    a, b = row(0, "tpu-v6e", "2x4", 8, 2, "a"), row(0, "tpu-v6e", "2x4", 8, 3, "b")
    err = bad(tmp_path, capsys, {"variant": "pooled", "allocations": [a, b]})
    assert "disagree" in err and "epoch 0" in err
