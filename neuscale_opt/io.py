"""Output helpers: deterministic JSON and CSV text, and writes that are safe on any target.

The write rules (the README's "Outputs" section):

* ``-`` is stdout.
* A regular file (or a path that does not exist yet) is replaced atomically: the bytes go to a
  temporary file in the same directory, which is then renamed over the target, so a failure leaves
  the old file intact and nothing half-written. A new file gets the mode ``0666 & ~umask``; a
  replaced file keeps its mode.
* A non-regular target (a character device such as ``/dev/null``, a FIFO) and a name of an open
  descriptor (``/dev/stdout``, ``/dev/fd/N``, even when the shell sent it to a file) are written
  *through*: opened for appending and written, never replaced or truncated. A symbolic link is
  followed and its target written by these same rules; the link itself stays.
* A directory, an empty path, a path with a NUL byte, a missing parent directory or a socket is
  bad input (:class:`~neuscale_opt.errors.InputError`, exit 2), raised by :func:`check_output`
  before any work.
* A command with several outputs stages them all in one :class:`Outputs` and commits them
  together: if one cannot be written, nothing new is left behind and no existing file is touched.
* A report folder is built in a temporary sibling directory (mode ``0777 & ~umask``) and renamed
  into place; into an existing directory its files are moved one by one, other files are kept.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuscale_opt.errors import InputError

if TYPE_CHECKING:
    import pandas as pd


class _NoNumpy:
    """Stands in for numpy when it is not loaded: then no value can be a numpy value."""

    class integer: ...  # noqa: N801

    class floating: ...  # noqa: N801

    class bool_: ...  # noqa: N801

    class ndarray: ...  # noqa: N801


def _numpy() -> Any:
    """numpy if something loaded it (a numpy value exists only then), without importing it here."""
    return sys.modules.get("numpy") or _NoNumpy


def _default(o: Any) -> Any:
    np = _numpy()
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return _clean_float(float(o))
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _clean_float(x: float) -> float | str | None:
    if math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _clean(obj: Any) -> Any:
    """Recursively replace NaN by null and inf by the string "inf" (JSON has neither)."""
    if isinstance(obj, float):
        return _clean_float(obj)
    if isinstance(obj, _numpy().floating):
        return _clean_float(float(obj))
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def to_json(obj: Any) -> str:
    """Deterministic JSON text (sorted keys, fixed separators, NaN -> null)."""
    return json.dumps(_clean(obj), default=_default, sort_keys=True, indent=2, allow_nan=False) + "\n"


def frame_to_csv_text(df: pd.DataFrame) -> str:
    """CSV text with a fixed float format so that the same frame gives the same bytes."""
    return df.to_csv(index=False, float_format="%.10g", lineterminator="\n")


# ----------------------------------------------------------------------------------------------
# checking targets
# ----------------------------------------------------------------------------------------------
def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _label(dest: str, where: str | None) -> str:
    return f"{where} {dest}" if where else dest


def _resolve(dest: str, where: str | None) -> Path:
    """The path a write to ``dest`` lands on (symbolic links followed), or InputError."""
    if dest == "":
        raise InputError("empty path", where=where or "output")
    if "\x00" in dest:
        raise InputError("path contains a NUL byte", where=where or "output")
    try:
        return Path(os.path.realpath(dest))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot resolve the path ({exc})", where=_label(dest, where)) from None


def _check_parent(real: Path, label: str) -> None:
    parent = real.parent
    if not parent.exists():
        raise InputError("directory does not exist", where=f"{label} (in {parent})")
    if not parent.is_dir():
        raise InputError("parent is not a directory", where=f"{label} (in {parent})")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError("directory is not writable", where=f"{label} (in {parent})")


def _descriptor_link(dest: str, real: Path) -> bool:
    """``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``: names of an open descriptor, written
    through even when it is redirected to a regular file (``> out.json``), never replaced."""
    return os.path.abspath(dest).startswith(("/dev/", "/proc/")) or str(real).startswith("/proc/")


def _kind(dest: str, where: str | None) -> tuple[str, Path]:
    """``("file", real path)`` for a regular file or a path to create (symbolic links followed to
    where the file is), ``("through", dest)`` for an existing non-regular target (a device, a FIFO,
    ``/dev/stdout``: the kernel follows its links), or InputError."""
    label = _label(dest, where)
    real = _resolve(dest, where)
    try:
        st = os.stat(dest)
    except (FileNotFoundError, NotADirectoryError):
        _check_parent(real, label)
        return "file", real
    except OSError as exc:
        raise InputError(f"cannot write ({exc.strerror})", where=label) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError("is a directory", where=label)
    if stat.S_ISSOCK(st.st_mode):
        raise InputError("is a socket", where=label)
    if stat.S_ISREG(st.st_mode) and not _descriptor_link(dest, real):
        _check_parent(real, label)
        return "file", real
    if not os.access(dest, os.W_OK):
        raise InputError("is not writable", where=label)
    return "through", Path(dest)


def check_output(dest: str | None, where: str | None = None) -> None:
    """Raise :class:`InputError` now if ``dest`` (a file output; ``None`` = none, ``-`` = stdout)
    cannot be written by the rules of this module. ``where`` names the flag (``--json``)."""
    if dest is None or dest == "-":
        return
    _kind(dest, where)


def check_output_dir(dest: str, where: str | None = "--out") -> None:
    """Raise :class:`InputError` now if a report folder cannot be written at ``dest``."""
    label = _label(dest, where)
    real = _resolve(dest, where)
    if real.exists():
        if not real.is_dir():
            raise InputError("exists and is not a directory", where=label)
        if not os.access(real, os.W_OK | os.X_OK):
            raise InputError("directory is not writable", where=label)
        return
    _check_parent(real, label)


# ----------------------------------------------------------------------------------------------
# staging and committing
# ----------------------------------------------------------------------------------------------
@dataclass
class _Staged:
    kind: str  # "stdout", "file" (atomic replace), "through" (device/FIFO) or "folder"
    dest: str
    data: str | bytes
    real: Path | None = None
    tmp: Path | None = None  # the staged temporary (file or folder) renamed onto ``real``
    folder: tuple[str, ...] = ()  # relative file names of a staged folder


class Outputs:
    """Every output of one command, written all or nothing.

    :meth:`add` and :meth:`add_folder` check and stage one output (a regular target: a temporary
    file or folder beside it); :meth:`commit` renames the staged files and folders into place, then
    writes the non-regular targets through and stdout last. Used as a context manager it commits on
    success and removes every staged temporary on an error, so nothing new is left behind.
    """

    def __init__(self) -> None:
        self._staged: list[_Staged] = []

    def __enter__(self) -> Outputs:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()

    def add(self, data: str | bytes, dest: str | None, where: str | None = None) -> None:
        """Stage ``data`` (text is written as UTF-8) for ``dest`` (``None``: nothing, ``-``: stdout)."""
        if dest is None:
            return
        if dest == "-":
            self._staged.append(_Staged("stdout", dest, data))
            return
        kind, real = _kind(dest, where)
        label = _label(dest, where)
        raw = data.encode("utf-8") if isinstance(data, str) else data
        if kind == "through":  # a device or FIFO: written through at commit time
            self._staged.append(_Staged("through", label, raw, real=real))
            return
        mode = stat.S_IMODE(real.stat().st_mode) if real.exists() else 0o666 & ~_umask()
        item = _Staged("file", label, raw, real=real)
        self._staged.append(item)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
        except OSError as exc:
            raise InputError(f"cannot write here ({exc.strerror})", where=label) from None
        item.tmp = Path(tmp)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(raw)
            os.chmod(tmp, mode)
        except OSError as exc:
            raise InputError(f"cannot write ({exc.strerror})", where=label) from None

    def add_folder(self, files: dict[str, bytes], dest: str, where: str | None = "--out") -> None:
        """Stage a folder of ``files`` (relative name -> bytes) for ``dest``, built in a temporary sibling."""
        check_output_dir(dest, where)
        label = _label(dest, where)
        real = _resolve(dest, where)
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent))
        except OSError as exc:
            raise InputError(f"cannot write here ({exc.strerror})", where=label) from None
        self._staged.append(_Staged("folder", label, b"", real=real, tmp=tmp, folder=tuple(sorted(files))))
        try:
            os.chmod(tmp, 0o777 & ~_umask())
            for name, data in files.items():
                p = tmp / name
                p.parent.mkdir(parents=True, exist_ok=True)  # mkdir applies the umask to 0777
                with open(p, "wb") as fh:  # open applies the umask to 0666
                    fh.write(data)
        except OSError as exc:
            raise InputError(f"cannot write ({exc.strerror})", where=label) from None

    def discard(self) -> None:
        """Remove every staged temporary; nothing is written."""
        for item in self._staged:
            if item.tmp is not None:
                if item.tmp.is_dir():
                    shutil.rmtree(item.tmp, ignore_errors=True)
                elif item.tmp.exists():
                    item.tmp.unlink()
                item.tmp = None
        self._staged = []

    def commit(self) -> None:
        """Move staged files and folders into place, then write devices/FIFOs, then stdout."""
        try:
            for item in self._staged:
                if item.kind in ("file", "folder"):
                    self._place(item)
            for item in self._staged:
                if item.kind == "through":
                    try:
                        # append, never truncate: /dev/stdout may be a file the shell opened with >>
                        with open(item.real, "ab") as fh:  # type: ignore[arg-type]
                            fh.write(item.data)  # type: ignore[arg-type]
                    except OSError as exc:
                        raise InputError(f"cannot write ({exc.strerror})", where=item.dest) from None
            for item in self._staged:
                if item.kind == "stdout":
                    text = item.data if isinstance(item.data, str) else item.data.decode("utf-8")
                    sys.stdout.write(text)
                    sys.stdout.flush()
        finally:
            self.discard()

    @staticmethod
    def _place(item: _Staged) -> None:
        assert item.tmp is not None and item.real is not None
        try:
            if item.kind == "file":
                os.replace(item.tmp, item.real)
            elif not item.real.exists():
                os.rename(item.tmp, item.real)
            else:  # an existing folder: move the new files in (keeping their modes), keep the others
                for name in item.folder:
                    dst = item.real / name
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    if dst.is_file():
                        os.chmod(item.tmp / name, stat.S_IMODE(dst.stat().st_mode))
                    os.replace(item.tmp / name, dst)
                shutil.rmtree(item.tmp, ignore_errors=True)
        except OSError as exc:
            raise InputError(f"cannot write ({exc.strerror})", where=item.dest) from None
        item.tmp = None


def emit(text: str | bytes, dest: str | None, where: str | None = None) -> None:
    """Send ``text`` to stdout when ``dest`` is ``"-"``, else to the file ``dest`` (rules above)."""
    with Outputs() as out:
        out.add(text, dest, where)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` by the rules of this module (never to stdout)."""
    emit(text, str(path))


def write_json(obj: Any, dest: str | None, where: str | None = None) -> None:
    emit(to_json(obj), dest, where)


def write_csv(df: pd.DataFrame, dest: str | None, where: str | None = None) -> None:
    emit(frame_to_csv_text(df), dest, where)
