"""Bounded, safe reading of every input file (instances, traces, plans, Mélange configs, tables).

Every loader of the package reads its file through this module, so the same rules hold for all:

* **regular files only.** The path is checked with ``stat`` *before* it is opened: a directory, a
  FIFO, a socket or a device (``/dev/zero``, ``/dev/stdin``) is refused with one line, so nothing
  blocks on a pipe or reads an endless device. The file is then opened non-blocking and checked
  again on the open descriptor (a path swapped in between is caught too). Symbolic links are
  followed; what counts is the file they point to.
* **a NUL byte in a path** is refused (the operating system cannot take it).
* **a size cap**: at most :data:`DEFAULT_MAX_BYTES` (1 GiB) are read; the environment variable
  ``NEUSCALE_MAX_INPUT_BYTES`` or the ``max_bytes`` argument overrides it. A larger file is refused
  before it is read; at most ``max_bytes + 1`` bytes are ever read, even from a file that grows.
* **UTF-8, strictly.** Text is decoded as UTF-8 (a leading byte-order mark is allowed). Bytes that
  are not UTF-8 are refused with their byte offset, and a hint when they look like Latin-1
  (Windows-1252) text, the usual case: the package never guesses an encoding, because a wrong
  guess silently changes names and numbers.
* **bounded nesting** of JSON and TOML: at most :data:`MAX_DEPTH` levels of ``[``/``{``, checked
  by a scan before parsing (so deep input never reaches the recursive parsers, and no
  ``RecursionError`` escapes) and again on the parsed data (dotted TOML keys nest without brackets).

Every refusal is an :class:`~neuscale_opt.errors.InputError` (exit code 2) naming the file.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from neuscale_opt.errors import InputError

#: Default cap on the bytes read from one input file (1 GiB); see :func:`max_input_bytes`.
DEFAULT_MAX_BYTES = 1 << 30
#: Environment variable overriding :data:`DEFAULT_MAX_BYTES` (a positive integer of bytes).
MAX_BYTES_ENV = "NEUSCALE_MAX_INPUT_BYTES"
#: Deepest nesting of arrays/tables/objects accepted in a JSON or TOML file.
MAX_DEPTH = 64

_KINDS = (
    (stat.S_ISDIR, "is a directory, not a file"),
    (stat.S_ISFIFO, "is a FIFO (named pipe), not a regular file"),
    (stat.S_ISCHR, "is a character device, not a regular file"),
    (stat.S_ISBLK, "is a block device, not a regular file"),
    (stat.S_ISSOCK, "is a socket, not a regular file"),
)


def max_input_bytes(max_bytes: int | None = None) -> int:
    """The size cap in force: ``max_bytes`` when given, else ``$NEUSCALE_MAX_INPUT_BYTES``, else
    :data:`DEFAULT_MAX_BYTES`."""
    if max_bytes is not None:
        return int(max_bytes)
    env = os.environ.get(MAX_BYTES_ENV)
    if env is None:
        return DEFAULT_MAX_BYTES
    try:
        value = int(env)
    except ValueError:
        value = 0
    if value <= 0:
        raise InputError(f"must be a positive number of bytes, got {env!r}", where=MAX_BYTES_ENV)
    return value


def _kind_problem(mode: int) -> str | None:
    for test, message in _KINDS:
        if test(mode):
            return message
    return None if stat.S_ISREG(mode) else "is not a regular file"


def check_path(path: str | Path, where: str | None = None, max_bytes: int | None = None) -> Path:
    """``path`` as a :class:`Path` once it is known to name an existing regular file within the
    size cap (nothing is opened)."""
    where = where or str(path)
    text = os.fspath(path)
    if "\0" in text:
        raise InputError("the path contains a NUL byte", where=repr(text.replace("\0", "\\0")))
    if not text:
        raise InputError("empty path", where="path")
    p = Path(text)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError("no such file", where=where) from None
    except NotADirectoryError:
        raise InputError("no such file (a parent is not a directory)", where=where) from None
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", where=where) from None
    problem = _kind_problem(st.st_mode)
    if problem is not None:
        raise InputError(problem, where=where)
    cap = max_input_bytes(max_bytes)
    if st.st_size > cap:
        raise InputError(f"{st.st_size} bytes, more than the {cap}-byte input limit ({MAX_BYTES_ENV})", where=where)
    return p


def read_bytes(path: str | Path, where: str | None = None, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file, at most the size cap (see the module docstring)."""
    where = where or str(path)
    p = check_path(path, where, max_bytes)
    cap = max_input_bytes(max_bytes)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", where=where) from None
    try:
        problem = _kind_problem(os.fstat(fd).st_mode)
        if problem is not None:
            raise InputError(problem, where=where)
        chunks: list[bytes] = []
        total = 0
        while total <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", where=where) from None
    finally:
        os.close(fd)
    if total > cap:
        raise InputError(f"more than the {cap}-byte input limit ({MAX_BYTES_ENV})", where=where)
    return b"".join(chunks)


def decode_utf8(raw: bytes, where: str) -> str:
    """``raw`` decoded as strict UTF-8 (a leading BOM dropped); bad bytes are reported by offset."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.start + 4]
        line = raw.count(b"\n", 0, exc.start) + 1
        hint = ""
        if _looks_latin1(raw):
            hint = "; it looks like Latin-1/Windows-1252 text: re-save it as UTF-8"
        raise InputError(
            f"not UTF-8: byte 0x{raw[exc.start]:02x} at byte offset {exc.start} (line {line}, bytes {bad!r}){hint}",
            where=where,
        ) from None


def _looks_latin1(raw: bytes) -> bool:
    """Whether the bytes read as Windows-1252 (Latin-1) text: every byte decodes, no NUL."""
    if b"\0" in raw:
        return False
    try:
        raw.decode("cp1252")
    except UnicodeDecodeError:
        return False
    return True


def read_text(path: str | Path, where: str | None = None, max_bytes: int | None = None) -> str:
    """The text of a regular UTF-8 file (see :func:`read_bytes` and :func:`decode_utf8`)."""
    where = where or str(path)
    return decode_utf8(read_bytes(path, where, max_bytes), where)


# -- nesting depth ------------------------------------------------------------------------------


_JSON_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?')
_TOML_SKIPPED = re.compile(
    r'"""[\s\S]*?(?:"""|\Z)|\'\'\'[\s\S]*?(?:\'\'\'|\Z)|"(?:[^"\\\n]|\\.)*"?|\'[^\'\n]*\'?|#[^\n]*'
)


def bracket_depth(text: str, toml: bool = False) -> tuple[int, int]:
    """The deepest nesting of ``[``/``{`` outside strings (and TOML comments), and the 0-based
    line where it is first reached. Vectorised: strings and comments are blanked out (their
    newlines kept) by one regular expression, then the depth is a cumulative sum over the bytes."""
    import numpy as np

    if toml:
        bare = _TOML_SKIPPED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    else:  # JSON strings hold no raw newline: drop them whole
        bare = _JSON_STRINGS.sub("", text)
    if bare.count("[") + bare.count("{") == 0:
        return 0, 0
    raw = bare.encode("utf-8", errors="replace")
    code = np.frombuffer(raw, dtype=np.uint8)
    step = ((code == 91) | (code == 123)).astype(np.int32) - ((code == 93) | (code == 125)).astype(np.int32)
    depth = np.cumsum(step, dtype=np.int64)
    at = int(np.argmax(depth))
    return int(depth[at]), raw.count(b"\n", 0, at)


def data_depth(obj: Any) -> int:
    """Nesting depth of parsed data (lists and dicts), computed without recursion."""
    best = 0
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            best = max(best, d)
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            best = max(best, d)
            stack.extend((v, d + 1) for v in o)
    return best


def _check_depth(text: str, where: str, toml: bool, max_depth: int) -> None:
    depth, at = bracket_depth(text, toml)
    if depth > max_depth:
        line = at + 1
        raise InputError(f"nested {depth} levels deep at line {line}; at most {max_depth} are accepted", where=where)


def parse_json(text: str, where: str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON text parsed with bounded depth; errors name the line and column."""
    _check_depth(text, where, False, max_depth)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", where=where) from None
    except RecursionError:  # pragma: no cover - the depth scan refuses such input first
        raise InputError(f"nested more than {max_depth} levels deep", where=where) from None
    return data  # brackets are JSON's only nesting: the scan bounded the parsed depth exactly


def parse_toml(text: str, where: str, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """TOML text parsed with bounded depth (bracket nesting and dotted keys alike)."""
    _check_depth(text, where, True, max_depth)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"malformed TOML: {exc}", where=where) from None
    except RecursionError:  # pragma: no cover - the depth scan refuses such input first
        raise InputError(f"nested more than {max_depth} levels deep", where=where) from None
    if data_depth(data) > max_depth:
        raise InputError(f"nested more than {max_depth} levels deep (dotted keys or tables)", where=where)
    return data


def read_json(path: str | Path, where: str | None = None, max_bytes: int | None = None) -> Any:
    """A JSON file read by the rules of this module."""
    where = where or str(path)
    return parse_json(read_text(path, where, max_bytes), where)


def read_toml(path: str | Path, where: str | None = None, max_bytes: int | None = None) -> dict[str, Any]:
    """A TOML file read by the rules of this module."""
    where = where or str(path)
    return parse_toml(read_text(path, where, max_bytes), where)
