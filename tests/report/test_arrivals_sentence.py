"""The report's Replay section says which arrivals the safe loads assumed (AT4 of
``formulations/allocation.md``): the classes' rate movement when they carry it, else Poisson."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from neuscale_opt.report.build import _arrivals_words


def _coeffs(**cols) -> SimpleNamespace:
    return SimpleNamespace(buckets=pd.DataFrame({"bucket": ["a", "b", "c"], **cols}))


def test_moving_classes_name_the_largest_movement():
    words = _arrivals_words(_coeffs(rate_cv2=[0.01, 0.0213, 0.0]))
    assert "up to 0.0213, class b" in words and "AT4" in words


def test_steady_or_unmeasured_classes_are_poisson():
    assert _arrivals_words(_coeffs()) == "Poisson arrivals at the sized rate"
    words = _arrivals_words(_coeffs(rate_cv2=[0.0, 0.0, 0.0]))
    assert words.startswith("Poisson arrivals at the sized rate (")


def test_the_tiny_report_says_it(tiny_report):
    """The tiny instance sizes for each class's peak: no movement is carried, Poisson is said."""
    out, _stdout, _inst = tiny_report
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "attainment under Poisson arrivals at the sized rate." in text


def test_clumped_classes_name_the_largest_mean_clump():
    """Classes that arrive in clumps (AT5): the largest mean clump (hand: (0.5, 0.5) has mean 1.5,
    (0.2, 0.3, 0.5) has 2.3) and its class."""
    laws = [(1.0,), (0.5, 0.5), (0.2, 0.3, 0.5)]
    words = _arrivals_words(_coeffs(rate_cv2=[0.0, 0.0, 0.0], clump_sizes=laws))
    assert "mean clump up to 2.3 requests, class c" in words and "AT5" in words
    assert words.startswith("Poisson arrivals at the sized rate (")
