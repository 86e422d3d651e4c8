"""Provenance of a plan: which instance (and files) it was made from, by which software, how.

``plan.json`` (``neuscale-opt plan --json`` and the report's ``plan.json``) carries::

    "provenance": {
      "instance": {"path": "/abs/small.toml", "sha256": "...",
                   "files": [{"field": "workload.trace.path", "path": "/abs/trace.csv", "sha256": "..."}]},
      "software": {"neuscale-opt": "0.1.0", "python": "3.11.9", "pyomo": "6.8.0", "highspy": "1.7.2",
                   "ortools": "9.10.4067"},
      "method": "milp",
      "options": {...},            # the planning options used (objective, variant, solver settings)
      "command": ["plan", "small.toml", "--method", "milp"]
    }

``command`` is the command line without output destinations (``--json``, ``--out``, ...): they do
not change the plan, and a report is byte-identical wherever it is written. Nothing here depends on
the time of day or on solve times (those go to the report's ``timing.json``).

``evaluate`` and ``replay`` read the instance back from ``provenance.instance`` when no
``--instance`` is given, and refuse an instance whose SHA-256 differs from the recorded one unless
``--force`` (:func:`instance_for_plan`).
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from neuscale_opt import __version__
from neuscale_opt.errors import InputError

#: Flags whose value is where output goes (left out of the recorded command line).
OUTPUT_FLAGS: frozenset[str] = frozenset(
    {"--json", "--out", "--csv", "--md", "--requests", "--save-lp", "--save-mps", "-o", "--output"}
)
#: Flags that only change how the run is shown, not the plan.
DISPLAY_FLAGS: frozenset[str] = frozenset({"--quiet", "--debug", "--solver-log"})
#: Flags (with a value) that only change how the run is carried out, not the plan.
EXECUTION_FLAGS: frozenset[str] = frozenset({"--jobs"})
#: Solver packages whose versions are recorded.
SOLVER_PACKAGES: tuple[str, ...] = ("pyomo", "highspy", "ortools")


def sha256_file(path: str | Path) -> str:
    """SHA-256 (hex) of the bytes of the file at ``path``."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def software_versions() -> dict[str, str]:
    """Versions of this package, Python and the solver packages (from the installed metadata)."""
    out = {"neuscale-opt": __version__, "python": platform.python_version()}
    for pkg in SOLVER_PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def command_line(argv: Sequence[str] | None) -> list[str]:
    """``argv`` without output destinations, display-only and execution-only flags."""
    out: list[str] = []
    it = iter(list(argv or []))
    for a in it:
        flag = a.split("=", 1)[0]
        if flag in OUTPUT_FLAGS or flag in EXECUTION_FLAGS:
            if "=" not in a:
                next(it, None)
            continue
        if flag in DISPLAY_FLAGS:
            continue
        out.append(a)
    return out


def _referenced_files(inst: Any) -> list[dict[str, str]]:
    """The data files an instance names (its trace), resolved against the instance's folder."""
    workload = getattr(inst, "workload", None)
    trace = getattr(workload, "trace", None) if workload is not None else None
    if trace is None or not hasattr(inst, "base_dir"):
        return []
    p = (Path(inst.base_dir) / trace.path).resolve()
    if not p.is_file():
        return []
    return [{"field": "workload.trace.path", "path": str(p), "sha256": sha256_file(p)}]


def instance_path(path: str | None, inst: Any) -> Path:
    """The file an instance was read from (the embedded default's path when ``path`` is None)."""
    recorded = getattr(inst, "path", None)
    if recorded is not None:
        return Path(recorded)
    if path is None:
        from neuscale_opt.instance import default_instance_path

        return default_instance_path().resolve()
    return Path(path).resolve()


def plan_provenance(
    path: str | None, inst: Any, method: str, options: dict[str, Any], argv: Sequence[str] | None
) -> dict[str, Any]:
    """The ``provenance`` object of a plan made from the instance file ``path`` (see the module)."""
    p = instance_path(path, inst)
    return {
        "instance": {"path": str(p), "sha256": sha256_file(p), "files": _referenced_files(inst)},
        "software": software_versions(),
        "method": method,
        "options": options,
        "command": command_line(argv),
    }


def recorded_instance(plan: Any) -> dict[str, Any] | None:
    """``provenance.instance`` of a plan's JSON dict (``None`` for a plan without provenance)."""
    prov = plan.get("provenance") if isinstance(plan, dict) else None
    rec = prov.get("instance") if isinstance(prov, dict) else None
    return rec if isinstance(rec, dict) and isinstance(rec.get("path"), str) else None


def instance_to_use(plan: Any, given: str | None, where: str) -> str | None:
    """The instance to check or replay ``plan`` against: ``--instance`` when given, else the one the
    plan recorded (which must still be there), else ``None`` (the embedded default)."""
    rec = recorded_instance(plan)
    if given is not None or rec is None:
        return given
    if not Path(rec["path"]).is_file():
        raise InputError(
            f"the instance the plan was made for, {rec['path']}, is no longer there; give --instance", where=where
        )
    return rec["path"]


def check_instance(plan: Any, used: Path, force: bool, where: str) -> None:
    """Refuse (InputError) the instance file ``used`` when its SHA-256 is not the one ``plan``
    recorded, unless ``force``. Plans without provenance are not checked."""
    rec = recorded_instance(plan)
    if rec is None or force or not isinstance(rec.get("sha256"), str):
        return
    have = sha256_file(used)
    if have != rec["sha256"]:
        raise InputError(
            f"instance {used} has SHA-256 {have[:12]}..., not the {rec['sha256'][:12]}... of the instance "
            f"the plan was made for ({rec['path']}); pass --force to use it anyway",
            where=where,
        )
