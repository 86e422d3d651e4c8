"""Deployable output: GKE node pools, Kubernetes workloads and scale actions from a plan JSON.

``neuscale-opt export PLAN.json --format gke|csv --out DIR`` reads a plan as written by
``neuscale-opt plan --json`` (the allocation-row contract of :mod:`neuscale_opt.alloc.solution`; epoch
plans, horizon schedules with many epochs, TPU and GPU generations) and writes, for every epoch:

* **node pools** - one per (generation, slice shape). A TPU slice of ``c`` chips lies on
  ``hosts = c / chips_per_node`` nodes of the generation's GKE machine type; a slice that fits one
  machine is *single-host* (the pool holds one node per slice and is resized between epochs), a larger
  one is *multi-host*: each slice is its own node pool of exactly ``hosts`` nodes (GKE treats it as an
  atomic, immutable unit: it is created or deleted whole, never resized). GPU vPods share one pool per
  generation of 8-GPU machines, packed first-fit decreasing.
* **workloads** - one per vPod group (the plan's ``vpod_group``): a ``Deployment`` when a vPod is one
  pod (single-host slice, GPU vPod within a node), a ``LeaderWorkerSet`` with ``size`` = hosts per
  vPod otherwise; ``replicas`` = the group's ``n_vpods``; a vLLM container with
  ``--tensor-parallel-size`` = ``tp`` (``--pipeline-parallel-size`` when ``pp`` > 1,
  ``--enable-expert-parallel`` when ``ep`` > 1, ``--max-num-seqs`` = the planned batch) requesting
  ``google.com/tpu`` = the chips of its TPU VM (a pod holds its whole node), or ``nvidia.com/gpu`` =
  the vPod's GPUs (at most one node's 8 per pod).
* **scale actions** between consecutive epochs: pools and workloads to create, resize, scale or
  delete (a shape change is a new pool), in a make-before-break order.

Machine types (``neuscale_opt/data/gke_machine_types.csv``, each row with its public source): a slice
whose chip count equals a machine type's chips per node is single-host on it (v5e/v6e ``1x1``, ``2x2``,
``2x4`` on the ``1t``/``4t``/``8t`` machines; v4/v5p ``2x2x1``); any other slice is multi-host on
the generation's multi-host machine (the ``4t`` one: 4 chips per VM on every TPU generation, so a v5e
``4x4`` is 4 nodes and a v5p ``2x2x2`` 2 nodes). ``machine_types`` overrides the choice per
generation. Note the naming: GKE machine types (``ct5p-hightpu-4t``) count chips per VM on every
generation, while Cloud TPU *accelerator types* count TensorCores on v4/v5p (``v5p-8`` = 4 chips) and
chips on v5e/v6e (``v5litepod-16`` = 16 chips); both are written (``accelerator_type``).

Everything is computed from the plan alone; output is deterministic and written all or nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from neuscale_opt.errors import InputError
from neuscale_opt.io import frame_to_csv_text, to_json

FORMATS: tuple[str, ...] = ("gke", "csv")
MANIFEST = "neuscale-export.json"
#: Default container images (parameters of :class:`ExportOptions`). vLLM's published images: GPU
#: ``vllm/vllm-openai`` (https://docs.vllm.ai/en/latest/deployment/docker.html), TPU ``vllm/vllm-tpu``
#: (used by https://cloud.google.com/kubernetes-engine/docs/tutorials/serve-vllm-tpu).
DEFAULT_IMAGE_GPU = "vllm/vllm-openai:latest"
DEFAULT_IMAGE_TPU = "vllm/vllm-tpu:latest"
VLLM_PORT = 8000
RAY_PORT = 6379
#: LeaderWorkerSet API (https://github.com/kubernetes-sigs/lws, ``leaderworkerset.x-k8s.io/v1``).
LWS_API = "leaderworkerset.x-k8s.io/v1"
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
GPU_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
#: TensorCores per chip where Cloud TPU accelerator-type names count cores (v4, v5p, 7x: 2 per chip,
#: https://cloud.google.com/tpu/docs/v4, https://cloud.google.com/tpu/docs/v5p); v5e/v6e count chips.
_CORES_PER_CHIP = {"tpu-v4": 2, "tpu-v5p": 2, "tpu7x": 2, "tpu-v5e": 1, "tpu-v6e": 1}
_ACCEL_PREFIX = {"tpu-v4": "v4", "tpu-v5p": "v5p", "tpu7x": "tpu7x", "tpu-v5e": "v5litepod", "tpu-v6e": "v6e"}

NODEPOOL_COLUMNS: tuple[str, ...] = (
    "epoch",
    "pool",
    "generation",
    "kind",
    "gke_accelerator",
    "accelerator_type",
    "topology",
    "machine_type",
    "chips_per_node",
    "nodes",
    "multi_host",
    "slice",
    "slices",
    "chips",
)
WORKLOAD_COLUMNS: tuple[str, ...] = (
    "epoch",
    "workload",
    "api_kind",
    "vpod_group",
    "generation",
    "shape",
    "topology",
    "machine_type",
    "phase",
    "buckets",
    "rate_rps",
    "replicas",
    "pods_per_replica",
    "chips_per_pod",
    "resource",
    "tp",
    "pp",
    "ep",
    "batch",
    "pool",
)
ACTION_COLUMNS: tuple[str, ...] = ("from_epoch", "to_epoch", "step", "action", "object", "name", "before", "after")
#: Make before break: grow capacity, then move workloads up, then down, then release capacity.
_STEP = {
    ("pool", "create"): 1,
    ("pool", "resize-up"): 1,
    ("workload", "create"): 2,
    ("workload", "scale-up"): 2,
    ("workload", "scale-down"): 3,
    ("workload", "delete"): 3,
    ("pool", "resize-down"): 4,
    ("pool", "delete"): 4,
}


class ExportOptions(BaseModel):
    """What the plan does not say: the served model, the images and the machine type per generation.

    ``model`` is what vLLM's ``--model`` gets (a Hugging Face id); ``max_model_len`` its context
    (``None``: vLLM's default). ``machine_types`` maps a generation to a machine type listed for it in
    ``gke_machine_types.csv`` and replaces the default choice for every slice of that generation.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1)
    max_model_len: int | None = Field(default=None, gt=0)
    image_tpu: str = Field(default=DEFAULT_IMAGE_TPU, min_length=1)
    image_gpu: str = Field(default=DEFAULT_IMAGE_GPU, min_length=1)
    machine_types: dict[str, str] = Field(default_factory=dict)


@dataclass(frozen=True)
class MachineType:
    """One row of ``gke_machine_types.csv``."""

    generation: str
    gke_accelerator: str
    machine_type: str
    chips_per_node: int
    single_host: bool
    multi_host: bool
    is_gpu: bool
    source: str


@dataclass(frozen=True)
class SliceSpec:
    """How one vPod of a (generation, shape) lands on GKE."""

    generation: str
    kind: Literal["tpu", "gpu"]
    gke_accelerator: str
    accelerator_type: str
    topology: str
    machine_type: str
    chips_per_node: int
    chips: int
    hosts: int  # nodes (pods) per vPod
    multi_host: bool


@dataclass(frozen=True)
class Export:
    """The tidy tables of an export (units: chips, nodes, req/s) and the files they render to."""

    epochs: tuple[int, ...]
    nodepools: pd.DataFrame
    workloads: pd.DataFrame
    actions: pd.DataFrame
    machine_types: tuple[MachineType, ...]
    notes: tuple[str, ...]


# ----------------------------------------------------------------------------------------- tables
@cache
def machine_table() -> tuple[MachineType, ...]:
    """The GKE machine types per generation, with their sources (``data/gke_machine_types.csv``)."""
    text = resources.files("neuscale_opt.data").joinpath("gke_machine_types.csv").read_text(encoding="utf-8")
    import io

    df = pd.read_csv(io.StringIO(text), dtype=str)
    out = []
    for r in df.to_dict("records"):
        scope = r["scope"].split()
        out.append(
            MachineType(
                generation=r["generation"],
                gke_accelerator=r["gke_accelerator"],
                machine_type=r["machine_type"],
                chips_per_node=int(r["chips_per_node"]),
                single_host="single-host" in scope or "node" in scope,
                multi_host="multi-host" in scope or "node" in scope,
                is_gpu="node" in scope,
                source=r["source"],
            )
        )
    return tuple(out)


def _machines(generation: str) -> list[MachineType]:
    return [m for m in machine_table() if m.generation == generation]


def check_machine_types(overrides: dict[str, str], where: str = "--machine-type") -> None:
    """Every override names a known generation and one of its listed machine types."""
    for gen, mt in sorted(overrides.items()):
        ms = _machines(gen)
        if not ms:
            known = ", ".join(sorted({m.generation for m in machine_table()}))
            raise InputError(f"unknown generation {gen!r}; known: {known}", where=where)
        if mt not in {m.machine_type for m in ms}:
            listed = ", ".join(m.machine_type for m in ms)
            raise InputError(f"{mt!r} is not a machine type of {gen}; listed: {listed}", where=where)


def gke_topology(shape: str) -> str:
    """The ``cloud.google.com/gke-tpu-topology`` spelling of a slice shape: 2-D ascending (``4x2`` ->
    ``2x4``), 3-D ascending with a single-chip axis last (``1x2x2`` -> ``2x2x1``), as in Google's
    topology tables (https://cloud.google.com/tpu/docs/v5p, .../v6e)."""
    dims = sorted(int(x) for x in shape.split("x"))
    if len(dims) == 3 and dims[0] == 1:
        dims = dims[1:] + [1]
    return "x".join(str(d) for d in dims)


def slice_spec(generation: str, shape: str, chips: int, overrides: dict[str, str], where: str) -> SliceSpec:
    """Machine type, nodes per vPod and labels of one vPod of ``chips`` chips (module docstring)."""
    ms = _machines(generation)
    if not ms:
        known = ", ".join(sorted({m.generation for m in machine_table()}))
        raise InputError(f"no GKE machine type known for generation {generation!r}; known: {known}", where=where)
    if ms[0].is_gpu:
        m = next((x for x in ms if x.machine_type == overrides.get(generation)), ms[0])
        if chips > m.chips_per_node and chips % m.chips_per_node:
            raise InputError(
                f"a {chips}-GPU vPod is not a whole number of {m.chips_per_node}-GPU nodes ({m.machine_type})",
                where=where,
            )
        hosts = max(1, chips // m.chips_per_node)
        return SliceSpec(
            generation, "gpu", m.gke_accelerator, "", shape, m.machine_type, m.chips_per_node, chips, hosts, hosts > 1
        )
    if math.prod(int(x) for x in shape.split("x")) != chips:
        raise InputError(f"shape {shape} does not hold chips_per_vpod = {chips}", where=where)
    if generation in overrides:
        m = next(x for x in ms if x.machine_type == overrides[generation])
    else:
        m = next((x for x in ms if x.single_host and x.chips_per_node == chips), None) or next(
            x for x in ms if x.multi_host
        )
    if chips % m.chips_per_node:
        raise InputError(
            f"a {shape} slice ({chips} chips) is not a whole number of {m.machine_type} nodes "
            f"({m.chips_per_node} chips each)",
            where=where,
        )
    hosts = chips // m.chips_per_node
    cores = chips * _CORES_PER_CHIP.get(generation, 1)
    accel = f"{_ACCEL_PREFIX.get(generation, generation)}-{cores}"
    return SliceSpec(
        generation, "tpu", m.gke_accelerator, accel, gke_topology(shape), m.machine_type, m.chips_per_node, chips,
        hosts, hosts > 1,
    )  # fmt: skip


def dns_name(text: str, limit: int = 52) -> str:
    """A DNS-1123 label from ``text`` (lowercase alphanumerics and '-'), at most ``limit`` characters
    (52 leaves room for the suffixes Kubernetes adds to pod names); longer names keep a stable hash."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"
    if len(name) > limit:
        digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
        name = name[: limit - 9].rstrip("-") + "-" + digest
    if not name[0].isalpha():
        name = ("w" + name)[:limit]
    return name


# ---------------------------------------------------------------------------------- reading a plan
def read_plan(path: str | Path) -> dict[str, Any]:
    """The plan JSON at ``path`` (one-line :class:`InputError` when missing or malformed)."""
    where = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("no such file", where=where) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a plan JSON", where=where) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"malformed JSON: {exc}", where=where) from None
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", where=where) from None
    return data


def plan_groups(plan: dict[str, Any], where: str = "plan") -> tuple[pd.DataFrame, tuple[int, ...]]:
    """One row per (epoch, vPod group) holding vPods, and every epoch the plan covers.

    Rows are read with the evaluator's reader (:func:`neuscale_opt.alloc.solution.solution_from_dict`,
    which derives ``vpod_group``); a group's rows must agree on its vPod type and ``n_vpods``.
    """
    from neuscale_opt.alloc.options import PlanOptions
    from neuscale_opt.alloc.solution import solution_from_dict

    if not isinstance(plan, dict) or not isinstance(plan.get("allocations"), list):
        raise InputError("not a plan: no 'allocations' list", where=where)
    if plan.get("status") == "infeasible":
        raise InputError(
            f"the plan is infeasible, nothing to deploy ({plan.get('diagnosis') or 'no diagnosis'})", where=where
        )
    for i, r in enumerate(plan["allocations"]):
        if not isinstance(r, dict):
            raise InputError(f"allocations[{i}]: not an object", where=where)
        for k in ("n_vpods", "chips_per_vpod", "tp", "pp", "ep", "batch"):
            v = r.get(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v):
                if k in r:
                    raise InputError(f"allocations[{i}].{k}: {v!r} is not a whole number", where=where)
            elif (k == "n_vpods" and v < 0) or (k != "n_vpods" and v < 1):
                raise InputError(f"allocations[{i}].{k}: {v!r} is out of range", where=where)
        if isinstance(r.get("epoch"), int) and r["epoch"] < 0:
            raise InputError(f"allocations[{i}].epoch: {r['epoch']} is negative", where=where)
        if "shape" in r and not re.fullmatch(r"[1-9][0-9]*(x[1-9][0-9]*){0,2}", str(r["shape"])):
            raise InputError(f"allocations[{i}].shape: {r['shape']!r} is not a shape N, AxB or AxBxC", where=where)
        if (
            all(isinstance(r.get(k), int) for k in ("tp", "pp", "chips_per_vpod"))
            and r["tp"] * r["pp"] != (r["chips_per_vpod"])
        ):
            raise InputError(
                f"allocations[{i}]: tp {r['tp']} x pp {r['pp']} != chips_per_vpod {r['chips_per_vpod']}", where=where
            )
    sol = solution_from_dict(plan, PlanOptions(), where=where)
    a = sol.allocations
    epochs = {int(e) for e in a["epoch"]} if len(a) else set()
    for e in plan.get("epochs") or []:
        if isinstance(e, dict) and isinstance(e.get("epoch"), int) and not isinstance(e["epoch"], bool):
            epochs.add(int(e["epoch"]))
    if not len(a):
        return pd.DataFrame(columns=["epoch", "vpod_group"]), tuple(sorted(epochs))
    keys = ["chip", "shape", "chips_per_vpod", "tp", "pp", "ep", "batch", "phase", "n_vpods"]
    by = a.groupby(["epoch", "vpod_group"], sort=True)
    mixed = by[keys].nunique().gt(1).any(axis=1)
    if mixed.any():
        epoch, group = mixed[mixed].index[0]
        raise InputError(
            f"allocations: the rows of group {group!r} in epoch {epoch} disagree on its vPod type or n_vpods",
            where=where,
        )
    groups = by[keys].first().reset_index()
    groups["buckets"] = by["bucket"].agg(lambda b: "+".join(sorted(set(map(str, b))))).to_numpy()
    groups["rate_rps"] = by["rate_rps"].sum().to_numpy(dtype=float)
    groups["epoch"] = groups["epoch"].astype(int)
    groups = groups[groups["n_vpods"] > 0].reset_index(drop=True)
    for c in ("chips_per_vpod", "tp", "pp", "ep", "batch", "n_vpods"):
        groups[c] = groups[c].astype(int)
    return groups, tuple(sorted(epochs))


# ------------------------------------------------------------------------------------ the export
def _pack_nodes(sizes: list[int], per_node: int) -> int:
    """Nodes of ``per_node`` GPUs holding pods of ``sizes`` GPUs, first-fit decreasing (optimal when
    every size divides ``per_node``, as the catalog's 1/2/4/8-GPU vPods do)."""
    free: list[int] = []
    for s in sorted(sizes, reverse=True):
        for i, f in enumerate(free):
            if f >= s:
                free[i] -= s
                break
        else:
            free.append(per_node - s)
    return len(free)


def build_export(plan: dict[str, Any], options: ExportOptions, where: str = "plan") -> Export:
    """Node pools, workloads and scale actions of every epoch of ``plan`` (module docstring)."""
    check_machine_types(options.machine_types)
    groups, epochs = plan_groups(plan, where=where)
    specs: dict[tuple[str, str, int], SliceSpec] = {}
    for r in groups.itertuples(index=False):
        key = (r.chip, r.shape, r.chips_per_vpod)
        if key not in specs:
            specs[key] = slice_spec(
                r.chip, r.shape, r.chips_per_vpod, options.machine_types, where=f"{where}: group {r.vpod_group}"
            )
    pools: list[dict[str, Any]] = []
    loads: list[dict[str, Any]] = []
    for epoch in epochs:
        g = groups[groups["epoch"] == epoch] if len(groups) else groups
        tpu_slices: dict[tuple[str, str], int] = {}
        gpu_pods: dict[str, list[int]] = {}
        for r in g.itertuples(index=False):
            sp = specs[(r.chip, r.shape, r.chips_per_vpod)]
            if sp.kind == "tpu":
                k = (sp.generation, sp.topology)
                tpu_slices[k] = tpu_slices.get(k, 0) + r.n_vpods
                pool = dns_name(f"{sp.generation}-{sp.topology}", 40)
            else:
                per_pod = min(sp.chips, sp.chips_per_node)
                gpu_pods.setdefault(sp.generation, []).extend([per_pod] * (r.n_vpods * sp.hosts))
                pool = dns_name(sp.generation, 40)
            loads.append(
                {
                    "epoch": epoch,
                    "workload": dns_name(r.vpod_group),
                    "api_kind": "LeaderWorkerSet" if sp.hosts > 1 else "Deployment",
                    "vpod_group": r.vpod_group,
                    "generation": sp.generation,
                    "shape": r.shape,
                    "topology": sp.topology,
                    "machine_type": sp.machine_type,
                    "phase": r.phase,
                    "buckets": r.buckets,
                    "rate_rps": r.rate_rps,
                    "replicas": r.n_vpods,
                    "pods_per_replica": sp.hosts,
                    "chips_per_pod": min(sp.chips, sp.chips_per_node),
                    "resource": "nvidia.com/gpu" if sp.kind == "gpu" else "google.com/tpu",
                    "tp": r.tp,
                    "pp": r.pp,
                    "ep": r.ep,
                    "batch": r.batch,
                    "pool": pool,
                }
            )
        for (gen, topo), n in sorted(tpu_slices.items()):
            sp = next(s for s in specs.values() if s.generation == gen and s.topology == topo)
            base = dns_name(f"{gen}-{topo}", 40)
            row = {
                "epoch": epoch,
                "generation": gen,
                "kind": "tpu",
                "gke_accelerator": sp.gke_accelerator,
                "accelerator_type": sp.accelerator_type,
                "topology": topo,
                "machine_type": sp.machine_type,
                "chips_per_node": sp.chips_per_node,
                "multi_host": sp.multi_host,
                "slices": n,
            }
            if sp.multi_host:  # one immutable pool per slice
                for i in range(n):
                    pools.append({**row, "pool": f"{base}-s{i}", "nodes": sp.hosts, "slice": i, "chips": sp.chips})
            else:
                pools.append({**row, "pool": base, "nodes": n * sp.hosts, "slice": -1, "chips": n * sp.chips})
        for gen, sizes in sorted(gpu_pods.items()):
            sp = next(s for s in specs.values() if s.generation == gen)
            nodes = _pack_nodes(sizes, sp.chips_per_node)
            pools.append(
                {
                    "epoch": epoch,
                    "pool": dns_name(gen, 40),
                    "generation": gen,
                    "kind": "gpu",
                    "gke_accelerator": sp.gke_accelerator,
                    "accelerator_type": "",
                    "topology": "",
                    "machine_type": sp.machine_type,
                    "chips_per_node": sp.chips_per_node,
                    "nodes": nodes,
                    "multi_host": False,
                    "slice": -1,
                    "slices": len(sizes),
                    "chips": sum(sizes),
                }
            )
    nodepools = _frame(pools, NODEPOOL_COLUMNS, ["epoch", "pool"])
    workloads = _frame(loads, WORKLOAD_COLUMNS, ["epoch", "workload"])
    if len(workloads) and (workloads.groupby("workload")["vpod_group"].nunique() > 1).any():
        raise InputError("two vPod groups map to the same workload name", where=where)
    actions = scale_actions(nodepools, workloads, epochs)
    used = {(s.generation, s.machine_type) for s in specs.values()}
    notes = _notes(groups, specs)
    unserved = [u for u in plan.get("unserved") or [] if isinstance(u, dict) and (u.get("unserved_rps") or 0) > 0]
    if unserved:
        eps = sorted({int(u["epoch"]) for u in unserved if isinstance(u.get("epoch"), int)})
        notes += (f"the plan leaves demand unserved in epochs {', '.join(map(str, eps))}: the export deploys only "
                  "what the plan serves",)  # fmt: skip
    return Export(
        epochs=epochs,
        nodepools=nodepools,
        workloads=workloads,
        actions=actions,
        machine_types=tuple(m for m in machine_table() if (m.generation, m.machine_type) in used),
        notes=notes,
    )


def _frame(rows: list[dict[str, Any]], columns: tuple[str, ...], sort: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(columns))
    return df.sort_values(sort, kind="mergesort").reset_index(drop=True) if len(df) else df


def _notes(groups: pd.DataFrame, specs: dict[tuple[str, str, int], SliceSpec]) -> tuple[str, ...]:
    notes = []
    if any(s.kind == "tpu" and s.multi_host for s in specs.values()):
        notes.append(
            "multi-host TPU vPods run vLLM over Ray in a LeaderWorkerSet (kubernetes-sigs/lws TPU example); "
            "GKE's own vLLM-on-TPU tutorial covers single-host serving only"
        )
    if len(groups) and (groups["phase"] != "colocated").any():
        notes.append(
            "disaggregated plan: prefill and decode groups are separate workloads (label neuscale.io/phase); "
            "the KV-transfer connector between them is not generated"
        )
    return tuple(notes)


def _diff(frame: pd.DataFrame, key: str, value: str, a: int | None, b: int) -> dict[str, tuple[int, int]]:
    before = {} if a is None else dict(zip(*(frame.loc[frame["epoch"] == a, c] for c in (key, value)), strict=True))
    after = dict(zip(*(frame.loc[frame["epoch"] == b, c] for c in (key, value)), strict=True))
    return {n: (int(before.get(n, 0)), int(after.get(n, 0))) for n in sorted(set(before) | set(after))}


def scale_actions(nodepools: pd.DataFrame, workloads: pd.DataFrame, epochs: tuple[int, ...]) -> pd.DataFrame:
    """What changes from each epoch to the next (the first epoch from an empty cluster).

    Pools: ``create`` (0 -> n nodes), ``delete`` (n -> 0), ``resize-up``/``resize-down`` (single-host
    and GPU pools only: a multi-host pool is one slice and never changes size). Workloads: ``create``,
    ``delete``, ``scale-up``/``scale-down`` of their replicas. ``step`` orders them make-before-break.
    """
    rows = []
    prev: int | None = None
    for e in epochs:
        for obj, frame, key, val in (
            ("pool", nodepools, "pool", "nodes"),
            ("workload", workloads, "workload", "replicas"),
        ):
            for name, (a, b) in _diff(frame, key, val, prev, e).items():
                if a == b:
                    continue
                if a == 0:
                    act = "create"
                elif b == 0:
                    act = "delete"
                else:
                    act = ("resize-" if obj == "pool" else "scale-") + ("up" if b > a else "down")
                rows.append(
                    {
                        "from_epoch": -1 if prev is None else prev,
                        "to_epoch": e,
                        "step": _STEP[(obj, act)],
                        "action": act,
                        "object": obj,
                        "name": name,
                        "before": a,
                        "after": b,
                    }
                )
        prev = e
    return _frame(rows, ACTION_COLUMNS, ["to_epoch", "step", "object", "name"])


# ------------------------------------------------------------------------------------- rendering
def _vllm_args(w: dict[str, Any], options: ExportOptions) -> list[str]:
    args = [f"--model={options.model}", f"--tensor-parallel-size={w['tp']}"]
    if w["pp"] > 1:
        args.append(f"--pipeline-parallel-size={w['pp']}")
    if w["ep"] > 1:
        args.append("--enable-expert-parallel")
    args.append(f"--max-num-seqs={w['batch']}")
    if options.max_model_len:
        args.append(f"--max-model-len={options.max_model_len}")
    if w["pods_per_replica"] > 1:
        args.append("--distributed-executor-backend=ray")
    args.append(f"--port={VLLM_PORT}")
    return args


def _node_selector(w: dict[str, Any]) -> dict[str, str]:
    accel = next(m.gke_accelerator for m in _machines(w["generation"]) if m.machine_type == w["machine_type"])
    if w["resource"] == "google.com/tpu":
        return {TPU_ACCELERATOR_LABEL: accel, TPU_TOPOLOGY_LABEL: w["topology"]}
    return {GPU_ACCELERATOR_LABEL: accel}


def _container(name: str, image: str, w: dict[str, Any], command: list[str], args: list[str]) -> dict[str, Any]:
    res = {w["resource"]: int(w["chips_per_pod"])}
    c: dict[str, Any] = {"name": name, "image": image, "command": command}
    if args:
        c["args"] = args
    c["ports"] = [{"containerPort": VLLM_PORT if name != "ray-worker" else RAY_PORT}]
    c["resources"] = {"requests": dict(res), "limits": dict(res)}
    return c


def workload_manifest(w: dict[str, Any], options: ExportOptions) -> dict[str, Any]:
    """The Deployment or LeaderWorkerSet of one workload row."""
    image = options.image_gpu if w["resource"] == "nvidia.com/gpu" else options.image_tpu
    labels = {
        "app.kubernetes.io/name": w["workload"],
        "app.kubernetes.io/part-of": "neuscale-opt",
        "neuscale.io/generation": w["generation"],
        "neuscale.io/phase": w["phase"],
    }
    meta = {
        "name": w["workload"],
        "labels": labels,
        "annotations": {
            "neuscale.io/vpod-group": w["vpod_group"],
            "neuscale.io/buckets": w["buckets"],
            "neuscale.io/rate-rps": f"{w['rate_rps']:.6g}",
            "neuscale.io/epoch": str(w["epoch"]),
        },
    }
    select = {"app.kubernetes.io/name": w["workload"]}
    node_selector = _node_selector(w)
    serve = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    args = _vllm_args(w, options)
    if w["pods_per_replica"] == 1:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": int(w["replicas"]),
                "selector": {"matchLabels": select},
                "template": {
                    "metadata": {"labels": dict(select)},
                    "spec": {"nodeSelector": node_selector, "containers": [_container("vllm", image, w, serve, args)]},
                },
            },
        }
    leader_cmd = ["sh", "-c", f'ray start --head --port={RAY_PORT} && exec {" ".join(serve)} "$@"', "--"]
    worker_cmd = ["sh", "-c", f"ray start --address=$(LWS_LEADER_ADDRESS):{RAY_PORT} --block"]
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": meta,
        "spec": {
            "replicas": int(w["replicas"]),
            "leaderWorkerTemplate": {
                "size": int(w["pods_per_replica"]),
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": {**select, "role": "leader"}},
                    "spec": {
                        "nodeSelector": dict(node_selector),
                        "containers": [_container("vllm-leader", image, w, leader_cmd, args)],
                    },
                },
                "workerTemplate": {
                    "metadata": {"labels": {**select, "role": "worker"}},
                    "spec": {
                        "nodeSelector": dict(node_selector),
                        "containers": [_container("ray-worker", image, w, worker_cmd, [])],
                    },
                },
            },
        },
    }


def nodepool_manifest(p: dict[str, Any]) -> dict[str, Any]:
    """A GKE API ``NodePool`` object (the body of ``projects.locations.clusters.nodePools.create``)."""
    config: dict[str, Any] = {
        "machineType": p["machine_type"],
        "labels": {"neuscale.io/generation": p["generation"], "app.kubernetes.io/part-of": "neuscale-opt"},
    }
    if p["kind"] == "gpu":
        config["accelerators"] = [
            {"acceleratorType": p["gke_accelerator"], "acceleratorCount": int(p["chips_per_node"])}
        ]
    out: dict[str, Any] = {"name": p["pool"], "initialNodeCount": int(p["nodes"]), "config": config}
    if p["multi_host"]:
        out["placementPolicy"] = {"type": "COMPACT", "tpuTopology": p["topology"]}
    return out


def _gcloud(p: dict[str, Any]) -> str:
    cmd = [
        "gcloud container node-pools create",
        p["pool"],
        '--cluster="$CLUSTER"',
        '--location="$LOCATION"',
        '--node-locations="$ZONE"',
        f"--machine-type={p['machine_type']}",
        f"--num-nodes={int(p['nodes'])}",
    ]
    if p["multi_host"]:
        cmd.append(f"--tpu-topology={p['topology']}")
    if p["kind"] == "gpu":
        cmd.append(f"--accelerator=type={p['gke_accelerator']},count={int(p['chips_per_node'])}")
    return " ".join(cmd)


#: libyaml's safe dumper when PyYAML was built with it (same output, much faster), else the pure one.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _yaml(docs: list[dict[str, Any]], header: str) -> str:
    body = yaml.dump_all(
        docs, Dumper=_DUMPER, sort_keys=False, default_flow_style=False, width=4096, explicit_start=True
    )
    return "".join(f"# {line}\n" for line in header.splitlines()) + (body if docs else "")


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in df.to_dict("records")]


def render(export: Export, options: ExportOptions, fmt: str, plan_name: str) -> dict[str, bytes]:
    """The files of the export in ``fmt`` (``gke``: YAML per epoch; ``csv``: tidy tables), by path."""
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}", where="--format")
    files: dict[str, str] = {}
    if fmt == "csv":
        files["nodepools.csv"] = frame_to_csv_text(export.nodepools)
        files["workloads.csv"] = frame_to_csv_text(export.workloads)
        files["scale_actions.csv"] = frame_to_csv_text(export.actions)
    else:
        for e in export.epochs:
            d = f"epoch-{e:03d}"
            pools = _records(export.nodepools[export.nodepools["epoch"] == e])
            loads = _records(export.workloads[export.workloads["epoch"] == e])
            files[f"{d}/nodepools.yaml"] = _yaml(
                [nodepool_manifest(p) for p in pools],
                f"epoch {e}: GKE node pools (GKE API NodePool objects) planned from {plan_name}",
            )
            files[f"{d}/nodepools.sh"] = (
                "#!/bin/sh\n"
                f"# epoch {e}: create the node pools from scratch; set CLUSTER, LOCATION and ZONE first.\n"
                "set -eu\n" + "".join(_gcloud(p) + "\n" for p in pools)
            )
            files[f"{d}/workloads.yaml"] = _yaml(
                [workload_manifest(w, options) for w in loads],
                f"epoch {e}: one workload per vPod group, planned from {plan_name}",
            )
        steps = []
        acts = export.actions
        for a, b in zip((None, *export.epochs[:-1]), export.epochs, strict=True):  # every transition, even a quiet one
            g = acts[acts["to_epoch"] == b]
            keep = ("step", "action", "object", "name", "before", "after")
            steps.append({"from_epoch": a, "to_epoch": b, "actions": [{k: r[k] for k in keep} for r in _records(g)]})
        files["scale-actions.yaml"] = _yaml(
            [{"transitions": steps}],
            "scale actions between consecutive epochs (pools in nodes, workloads in replicas);\n"
            "step 1 grow pools, 2 create or scale up workloads, 3 scale down or delete workloads, 4 shrink pools",
        )
    manifest = {
        "format": fmt,
        "plan": plan_name,
        "model": options.model,
        "epochs": list(export.epochs),
        "machine_types": [
            {
                "generation": m.generation,
                "machine_type": m.machine_type,
                "gke_accelerator": m.gke_accelerator,
                "chips_per_node": m.chips_per_node,
                "source": m.source,
            }
            for m in export.machine_types
        ],
        "notes": list(export.notes),
        "files": sorted(files),
    }
    files[MANIFEST] = to_json(manifest)
    return {k: v.encode("utf-8") for k, v in sorted(files.items())}


# --------------------------------------------------------------------------------------- writing
def _check_earlier_export(out: Path, where: str) -> None:
    """``out`` holds an earlier export and nothing else (so replacing it deletes no other file)."""
    try:
        listed = set(json.loads((out / MANIFEST).read_text(encoding="utf-8"))["files"]) | {MANIFEST}
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(f"directory is not empty and holds no earlier export ({MANIFEST})", where=where) from None
    extra = sorted(
        str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and str(p.relative_to(out)) not in listed
    )
    if extra:
        raise InputError(f"holds files that are not part of the earlier export (e.g. {extra[0]})", where=where)


def write_export(out_dir: str | Path, files: dict[str, bytes]) -> Path:
    """Write ``files`` as the directory ``out_dir``, all or nothing.

    The files go into a temporary directory next to ``out_dir``, which is then renamed into place. An
    existing ``out_dir`` is replaced only when it is empty or holds an earlier export and nothing else
    (the files its ``neuscale-export.json`` lists); anything else is refused (exit 2), so no other
    file is ever deleted.
    """
    out = Path(out_dir)
    where = f"--out {out}"
    parent = out.parent if str(out.parent) else Path(".")
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a directory", where=where)
    if out.is_dir() and any(out.iterdir()):
        _check_earlier_export(out, where)
    if not parent.is_dir():
        raise InputError("parent directory does not exist", where=where)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    except OSError as exc:
        raise InputError(f"cannot write here ({exc.strerror})", where=where) from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would otherwise become DIR's mode
    old: Path | None = None
    try:
        for name, data in files.items():
            p = tmp / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=parent))
            os.replace(out, old / "prev")
        os.replace(tmp, out)
    except OSError as exc:
        if old is not None and (old / "prev").exists() and not out.exists():
            os.replace(old / "prev", out)
        raise InputError(f"cannot write here ({exc.strerror})", where=where) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return out


def export_plan(
    plan_path: str | Path, out_dir: str | Path, fmt: str, options: ExportOptions
) -> tuple[Export, dict[str, bytes]]:
    """Read ``plan_path``, build the export, render it in ``fmt`` and write it to ``out_dir``."""
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}", where="--format")
    exp = build_export(read_plan(plan_path), options, where=str(plan_path))
    files = render(exp, options, fmt, Path(plan_path).name)
    write_export(out_dir, files)
    return exp, files


def make_options(
    model: str, machine_types: list[str] | None = None, max_model_len: int | None = None, **images: str
) -> ExportOptions:
    """:class:`ExportOptions` from CLI-style values (``GEN=MACHINE`` strings), one-line errors."""
    pairs: dict[str, str] = {}
    for item in machine_types or []:
        gen, sep, mt = item.partition("=")
        if not sep or not gen or not mt:
            raise InputError(f"{item!r} is not GENERATION=MACHINE_TYPE", where="--machine-type")
        pairs[gen.strip()] = mt.strip()
    check_machine_types(pairs)
    try:
        return ExportOptions(model=model, machine_types=pairs, max_model_len=max_model_len, **images)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(err["msg"], where=f"export option {'.'.join(str(x) for x in err['loc'])}") from None
