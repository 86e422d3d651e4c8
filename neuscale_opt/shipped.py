"""The instances shipped with the package (``instances/``): list them, copy one so that it runs.

A shipped instance is named by its path below ``instances/`` without ``.toml``: ``small``,
``default``, ``horizon/azure-code``, ``alloc/two_gens``. :func:`copy_instance` copies one into a
folder with the data files it references (its trace, under ``data/``, with the data README and
licenses), rewriting the paths in the copy so that it runs from there.
"""

from __future__ import annotations

import shutil
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from neuscale_opt.errors import InputError

#: The folder of the shipped instances (the package data ``neuscale_opt.instances``).
INSTANCES_DIR = Path(str(resources.files("neuscale_opt.instances")))


@dataclass(frozen=True)
class ShippedInstance:
    name: str
    description: str
    path: Path


def shipped_instances() -> list[ShippedInstance]:
    """Every shipped instance TOML, by name (the names :func:`neuscale_opt.instance.load_instance`
    resolves), with the first line of its description."""
    from neuscale_opt.instance import shipped_instances as shipped_files

    out = []
    for name, p in shipped_files().items():
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):  # pragma: no cover - shipped files parse
            continue
        desc = str(data.get("description") or data.get("name") or "")
        out.append(ShippedInstance(name, desc.splitlines()[0] if desc else "", p))
    return out


def shipped_path(name: str) -> Path | None:
    """The file of the shipped instance ``name`` (``None`` when there is none of that name)."""
    return next((s.path for s in shipped_instances() if s.name == name), None)


def _trace_path(data: dict) -> str | None:
    trace = (data.get("workload") or {}).get("trace")
    return trace.get("path") if isinstance(trace, dict) and isinstance(trace.get("path"), str) else None


def copy_instance(name: str, dest_dir: str | Path) -> Path:
    """Copy the shipped instance ``name`` and the data files it references into ``dest_dir``
    (created if missing); returns the copied instance file. An existing file is never overwritten."""
    src = shipped_path(name)
    if src is None:
        known = ", ".join(s.name for s in shipped_instances())
        raise InputError(f"no shipped instance {name!r}; shipped: {known}", where="init")
    if str(dest_dir) == "" or "\x00" in str(dest_dir):
        raise InputError("not a folder name", where=f"init {dest_dir!r}")
    dest = Path(dest_dir)
    if dest.exists() and not dest.is_dir():
        raise InputError("exists and is not a directory", where=f"init {dest}")
    text = src.read_text(encoding="utf-8")
    data = tomllib.loads(text)
    copies: list[tuple[Path, Path]] = []
    old = _trace_path(data)
    if old is not None:
        trace = (src.parent / old).resolve()
        new = f"data/{trace.name}"
        quoted = f'"{old}"'
        if text.count(quoted) != 1:  # pragma: no cover - the shipped files name each trace once
            raise InputError(f"cannot rewrite the trace path {old!r}", where=str(src))
        text = text.replace(quoted, f'"{new}"')
        assert _trace_path(tomllib.loads(text)) == new
        copies.append((trace, dest / new))
        for extra in ("README.md", *(f"licenses/{p.name}" for p in sorted((trace.parent / "licenses").glob("*")))):
            if (trace.parent / extra).is_file():
                copies.append((trace.parent / extra, dest / "data" / extra))
    target = dest / src.name
    clash = [str(p) for p in [target, *(d for _, d in copies)] if p.exists()]
    if clash:
        raise InputError(f"would overwrite {clash[0]}; choose an empty folder", where=f"init {dest}")
    try:
        for s, d in copies:
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(s, d)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
    except OSError as exc:
        raise InputError(f"cannot write ({exc.strerror})", where=f"init {dest}") from None
    return target
