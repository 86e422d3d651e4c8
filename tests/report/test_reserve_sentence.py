"""The report's guard-reserve sentence sums what the epochs asked and kept and names the epochs where
room fell short (``report.build.reserve_sentence``)."""

from __future__ import annotations

from neuscale_opt.report.build import reserve_sentence


def test_kept_and_short_epochs_are_summed_and_named():
    eps = [
        {"epoch": 0},
        {"epoch": 1, "reserve_rps": {"a": 1.5, "b": 0.5}, "reserve_kept_rps": {"a": 1.5, "b": 0.5}},
        {"epoch": 2, "reserve_rps": {"a": 2.0}, "reserve_kept_rps": {"a": 0.5}},
    ]
    text = reserve_sentence("last-peak", eps, 300.0)
    # asked 2 + 2 = 4 req/s, kept 2 + 0.5 = 2.5; epoch 2 (0:10) short: 0.5 of 2
    assert "room for 2.50 of the 4 req/s asked" in text
    assert "growth limit, at 0:10 (0.500 of 2)." in text
    assert "0:05" not in text
    assert text.count("\n") == 0 and text.endswith(".")


def test_no_reserve_asked_says_so():
    text = reserve_sentence("last-peak", [{"epoch": 0}, {"epoch": 1}], 300.0)
    assert "never above the plan's" in text and "room for" not in text


def test_every_reserve_kept_names_no_epoch():
    eps = [{"epoch": 3, "reserve_rps": {"a": 1.0}, "reserve_kept_rps": {"a": 1.0}}]
    text = reserve_sentence("quantile", eps, 300.0)
    assert "room for 1 of the 1 req/s asked" in text and "short" not in text and "`quantile`" in text
