"""Shared fixtures of the report tests: a tiny horizon instance with a trace (three one-minute
epochs of the Azure conversation trace, a v5p cube with one failed chip, 16 counted v6e chips
at 75 % availability) planned once with ``plan --out``."""

from __future__ import annotations

import contextlib
import io
from html.parser import HTMLParser
from pathlib import Path

import pytest

from neuscale_opt.cli import main

ROOT = Path(__file__).resolve().parents[2]
INSTANCES = ROOT / "instances"

TINY = """
name = "tiny-horizon"
description = "Llama-3-8B on three minutes of the Azure 2023 conversation trace"
objective = "energy"

[model]
name = "Llama-3-8B"

[[fleet]]
chip = "tpu-v5p"
[[fleet.pods]]
dims = [4, 4, 4]
failed_chips = [[1, 1, 3]]

[[fleet]]
chip = "tpu-v6e"
chips = 16
derate = {{ availability = 0.75 }}

[workload]
trace = {{ path = "{trace}", format = "azure" }}
buckets = {{ kind = "total", edges = [1024], representative = "mean" }}
provision_for = "peak"
subwindow_s = 10.0

[slo]
mode = "multiplier"
multiplier = 5.0
reference_chip = "tpu-v5p"
metrics = ["ttft", "tpot"]

[epochs]
length_s = 60.0
horizon = 3

[search]
max_chips_per_vpod = 4

[horizon]
window = 2
forecast = "last-peak"
"""


def write_tiny(folder: Path) -> Path:
    path = folder / "tiny.toml"
    path.write_text(TINY.format(trace=(INSTANCES / "data" / "azure_llm_2023_conv.csv").as_posix()))
    return path


def run_plan(argv: list[str]) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    return code, buf.getvalue()


@pytest.fixture(scope="session")
def tiny_report(tmp_path_factory):
    """(report folder, stdout) of ``plan tiny.toml --out DIR --quiet`` (progress bars off)."""
    base = tmp_path_factory.mktemp("tiny")
    inst = write_tiny(base)
    out = base / "report"
    code, stdout = run_plan(["plan", str(inst), "--out", str(out)])
    assert code == 0, stdout
    return out, stdout, inst


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


class HtmlTables(HTMLParser):
    """Tables of an HTML page by id: id -> list of row dicts; also every id and local link."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[dict[str, str]]] = {}
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.imgs: list[str] = []
        self._id = None
        self._head: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._in_head = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href", "").startswith("#"):
            self.links.append(a["href"][1:])
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if tag == "table":
            self._id, self._head = a.get("id", f"table{len(self.tables)}"), []
            self.tables[self._id] = []
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._in_head:
                self._head = self._row
            else:
                self.tables[self._id].append(dict(zip(self._head, self._row, strict=True)))
            self._row = None
        elif tag == "thead":
            self._in_head = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def html_tables(text: str) -> HtmlTables:
    p = HtmlTables()
    p.feed(text)
    p.close()
    return p
