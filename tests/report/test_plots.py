"""Figure helpers: log axes ticked so that every panel has readable labels."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from neuscale_opt.report import plots  # noqa: E402


def _labels(axis) -> dict[float, str]:
    lo, hi = sorted(axis.get_view_interval())
    return {t.get_loc(): t.label1.get_text() for t in axis.get_major_ticks() if lo <= t.get_loc() <= hi}


@pytest.mark.parametrize(
    ("x", "y", "want_x", "want_y"),
    [
        # five decades on x, one on y: decades only on x, 1-2-5 steps on y
        ([0.1, 1e4], [2.5, 12.0], {0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0}, {5.0, 10.0}),
        # under a decade on both axes (the panel that had no labels): 1-2-5 steps, printed plainly
        ([1.6, 7.5], [1800.0, 21000.0], {2.0, 5.0}, {2000.0, 5000.0, 10000.0, 20000.0}),
    ],
)
def test_log_axes_label_every_panel(x, y, want_x, want_y):
    fig, ax = plt.subplots()
    ax.scatter(x, y)
    plots._log_axes(ax)
    fig.canvas.draw()
    got_x, got_y = _labels(ax.xaxis), _labels(ax.yaxis)
    plt.close(fig)
    assert sorted(got_x) == pytest.approx(sorted(want_x))
    assert sorted(got_y) == pytest.approx(sorted(want_y))
    assert all(got_x.values()) and all(got_y.values())  # every tick in view is labelled
    assert not ax.xaxis.get_minor_locator()() and not ax.yaxis.get_minor_locator()()  # no minor ticks
