"""Progress bars: on a terminal unless --quiet; silent when stderr is not a terminal."""

from __future__ import annotations

import io
import sys

from neuscale_opt.report.progress import progress_bar


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_draws_on_a_terminal(monkeypatch):
    err = _Tty()
    monkeypatch.setattr(sys, "stderr", err)
    with progress_bar(total=3, desc="plan") as bar:
        for _ in range(3):
            bar.update(1)
    assert "plan" in err.getvalue() and "/3" in err.getvalue()


def test_quiet_and_non_terminal_are_silent(monkeypatch):
    err = _Tty()
    monkeypatch.setattr(sys, "stderr", err)
    with progress_bar(total=3, desc="plan", quiet=True) as bar:
        bar.update(3)
    assert err.getvalue() == ""
    plain = io.StringIO()
    monkeypatch.setattr(sys, "stderr", plain)
    with progress_bar(total=3, desc="plan") as bar:
        bar.update(3)
    assert plain.getvalue() == ""


def test_the_bar_starts_no_thread(monkeypatch):
    # tqdm's monitor thread would keep a rolling plan from computing its bound in a forked
    # process beside the windows (horizon.rolling.BoundBeside needs a process with one thread)
    import threading

    from tqdm._monitor import TMonitor

    monkeypatch.setattr(sys, "stderr", _Tty())
    with progress_bar(total=3, desc="plan") as bar:
        bar.update(1)
        assert not any(isinstance(t, TMonitor) for t in threading.enumerate())
