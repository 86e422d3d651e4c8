"""``report.html`` in a real browser: headless Chromium renders the tiny horizon report and the
test fails on any console message from the page, an image that does not decode or a local link
without a target. Skipped, with the reason, where no Chromium is installed (CI may lack one)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((b for b in BROWSERS if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no headless Chromium installed (chromium, google-chrome)")

# The report has no script of its own: this wrapper loads it in a frame and writes what it finds
# into its own DOM, which --dump-dom prints.
WRAPPER = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
<iframe id="r" src="{page}" style="width:1280px;height:900px"></iframe><pre id="out">not loaded</pre>
<script>
document.getElementById("r").addEventListener("load", function () {{
  var d = this.contentDocument, imgs = Array.from(d.images);
  var broken = imgs.filter(function (i) {{ return !(i.complete && i.naturalWidth > 0); }}).length;
  var ids = new Set(Array.from(d.querySelectorAll("[id]")).map(function (e) {{ return e.id; }}));
  var dead = Array.from(d.querySelectorAll('a[href^="#"]'))
    .filter(function (a) {{ return !ids.has(a.getAttribute("href").slice(1)); }}).length;
  document.getElementById("out").textContent = "RESULT images=" + imgs.length + " broken=" + broken + " dead=" + dead;
}});
</script></body></html>
"""


def render(page: Path) -> tuple[dict[str, int], list[str]]:
    """(counts of images, broken images and dead links; console lines of the page) in Chromium."""
    wrap = page.parent / "_browser_check.html"
    wrap.write_text(WRAPPER.format(page=page.name))
    proc = subprocess.run(
        [
            BROWSER,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--allow-file-access-from-files",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            "--dump-dom",
            wrap.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    wrap.unlink()
    m = re.search(r"RESULT images=(\d+) broken=(\d+) dead=(\d+)", proc.stdout)
    assert m, f"the page did not load: {proc.stderr[-500:]}"
    counts = dict(zip(("images", "broken", "dead"), map(int, m.groups()), strict=True))
    console = [
        line
        for line in proc.stderr.splitlines()
        if (":CONSOLE" in line and page.name in line) or "Failed to load resource" in line
    ]
    return counts, console


def test_report_renders_without_console_errors_or_missing_images(tiny_report):
    out, _, _ = tiny_report
    counts, console = render(out / "report.html")
    figures = len(list((out / "figures").glob("*.png")))
    assert counts == {"images": figures, "broken": 0, "dead": 0}
    assert figures >= 6
    assert console == []


def test_the_check_catches_a_broken_page(tmp_path):
    """The same check on a page with an undecodable image, a dead link and a script error."""
    bad = tmp_path / "report.html"
    bad.write_text(
        '<!DOCTYPE html><html><body><img src="data:image/png;base64,AAAA"><a href="#nowhere">x</a>'
        "<script>missing();</script></body></html>"
    )
    counts, console = render(bad)
    assert counts == {"images": 1, "broken": 1, "dead": 1}
    assert any("missing is not defined" in line for line in console)
