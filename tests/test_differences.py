"""The comparison statistics against independent references: scipy and published worked examples.

Every expected number here comes from somewhere other than ``scheduler.differences``: scipy's
``binomtest`` (Wilson interval, exact binomial test) and ``fisher_exact``, the reference formulas
written out again from the papers, and the worked examples of Fagerland, Lydersen and Laake,
"Statistical Analysis of Contingency Tables" (2017), as their R package contingencytables prints
them.
"""

from __future__ import annotations

import math
import random

import pytest

from evalfleet.scheduler_api.vocabulary import Z_95, interval_text, rate_fields, wilson_interval
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler.differences import (
    PairedCounts,
    exact_mcnemar,
    fisher_exact,
    paired_difference,
    unpaired_difference,
)
from scheduler.report import compare

stats = pytest.importorskip("scipy.stats", reason="the reference values come from scipy (pip install evalfleet[test])")
pytestmark = pytest.mark.timeout(60)

CASES = [(0, 10), (10, 10), (1, 1), (3, 7), (23, 80), (500, 1000), (999, 1000), (1, 2000)]


@pytest.mark.parametrize(("succeeded", "completed"), CASES)
def test_wilson_interval_is_scipys(succeeded, completed):
    reference = stats.binomtest(succeeded, completed).proportion_ci(confidence_level=0.95, method="wilson")
    interval = wilson_interval(succeeded, completed)
    assert interval is not None
    assert interval.low == pytest.approx(reference.low, abs=1e-12)
    assert interval.high == pytest.approx(reference.high, abs=1e-12)
    assert 0.0 <= interval.low <= succeeded / completed <= interval.high <= 1.0


def test_no_completed_episode_has_no_interval():
    assert wilson_interval(0, 0) is None and interval_text(None) == "-"
    assert rate_fields(0, 0) == {"success_rate": None, "success_rate_low": None, "success_rate_high": None}
    assert rate_fields(0, 10)["success_rate_low"] == 0.0 and rate_fields(10, 10)["success_rate_high"] == 1.0
    assert interval_text(wilson_interval(23, 80)) == "[20.0, 39.5]"


def test_paired_interval_matches_the_published_example():
    """Cavo et al. 2012 (Fagerland et al. ch. 8): rows before, columns after; n11=59, n12=6, n21=16,
    n22=80. Newcombe's square-and-add: -0.0621 (95% CI -0.1186 to -0.0046) for before minus after,
    so after (B) minus before (A) is +0.0621 (0.0046 to 0.1186)."""
    difference = paired_difference(PairedCounts(both=59, a_only=6, b_only=16, neither=80))
    assert difference is not None and difference.paired
    assert round(difference.estimate, 4) == 0.0621
    assert (round(difference.interval.low, 4), round(difference.interval.high, 4)) == (0.0046, 0.1186)
    assert difference.p_value == pytest.approx(stats.binomtest(6, 22, 0.5).pvalue, rel=1e-12)
    # p = 0.0525 while the interval excludes 0: said, not hidden.
    assert not difference.significant
    assert difference.words() == "not significant, borderline: the interval excludes 0"


def test_unpaired_interval_matches_the_published_example():
    """Perondi et al. 2004 (Fagerland et al. ch. 4): 7/34 vs 1/34; Newcombe hybrid score
    0.1765 (95% CI 0.0189 to 0.3404)."""
    difference = unpaired_difference(1, 34, 7, 34)
    assert difference is not None and not difference.paired
    assert round(difference.estimate, 4) == 0.1765
    assert (round(difference.interval.low, 4), round(difference.interval.high, 4)) == (0.0189, 0.3404)
    assert difference.p_value == pytest.approx(stats.fisher_exact([[1, 33], [7, 27]]).pvalue, rel=1e-9)


def _newcombe_paired(a: int, b: int, c: int, d: int) -> tuple[float, float]:
    """Newcombe (1998) method 10 written out from the paper for the table [[a, b], [c, d]] (rows A
    success/failure, columns B success/failure), as B's rate minus A's, Wilson limits from scipy."""
    n = a + b + c + d
    pa, pb = (a + b) / n, (a + c) / n
    ci_a = stats.binomtest(a + b, n).proportion_ci(method="wilson")
    ci_b = stats.binomtest(a + c, n).proportion_ci(method="wilson")
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    corrected = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
    phi = corrected / math.sqrt(margins) if margins else 0.0
    dl, du = pb - ci_b.low, ci_a.high - pa  # lower: B low, A high
    el, eu = ci_b.high - pb, pa - ci_a.low
    low = (pb - pa) - math.sqrt(dl**2 - 2 * phi * dl * du + du**2)
    high = (pb - pa) + math.sqrt(el**2 - 2 * phi * el * eu + eu**2)
    return max(-1.0, low), min(1.0, high)


def test_random_tables_against_the_references():
    rng = random.Random(7)
    for _ in range(200):
        a, b, c, d = (rng.randint(0, 60) for _ in range(4))
        if a + b + c + d == 0:
            continue
        paired = paired_difference(PairedCounts(a, b, c, d))
        assert paired is not None
        assert paired.interval == pytest.approx(_newcombe_paired(a, b, c, d), abs=1e-9)
        expected_p = stats.binomtest(b, b + c, 0.5).pvalue if b + c else 1.0
        assert paired.p_value == pytest.approx(expected_p, rel=1e-9)
        assert exact_mcnemar(b, c) == pytest.approx(expected_p, rel=1e-9)
        na, nb = a + b + 1, c + d + 1
        assert fisher_exact(a, na, c, nb) == pytest.approx(
            stats.fisher_exact([[a, na - a], [c, nb - c]]).pvalue, rel=1e-6, abs=1e-12
        )


def test_large_runs_stay_exact_and_fast():
    """1,000 episodes a side (the seed release's scale): exact tails without floating underflow."""
    difference = paired_difference(PairedCounts(both=600, a_only=40, b_only=49, neither=311))
    assert difference is not None
    assert difference.p_value == pytest.approx(stats.binomtest(40, 89).pvalue, rel=1e-9)
    assert not difference.significant and "not significant" in difference.verdict()
    strong = paired_difference(PairedCounts(both=600, a_only=10, b_only=80, neither=310))
    assert strong is not None and strong.significant and strong.words() == "significant"
    assert strong.p_value == pytest.approx(stats.binomtest(10, 90).pvalue, rel=1e-9)
    assert exact_mcnemar(5000, 5100) == pytest.approx(stats.binomtest(5000, 10100).pvalue, rel=1e-9)


def test_nothing_to_compare_is_none_and_no_discordance_is_p_one():
    assert paired_difference(PairedCounts()) is None
    assert unpaired_difference(0, 0, 3, 5) is None
    same = paired_difference(PairedCounts(both=5, neither=5))
    assert same is not None and same.p_value == 1.0 and same.estimate == 0.0 and not same.significant
    assert Z_95 == pytest.approx(stats.norm.ppf(0.975), rel=1e-12)


def test_a_paired_comparison_needs_the_episode_lists():
    def summary(submission_id: str, listed: bool) -> pb.GetSummaryResponse:
        m = pb.ManifestSummary(manifest_hash="h", episodes_planned=2, episodes_completed=2, episodes_succeeded=1)
        if listed:
            m.succeeded_episodes.append(0)
            m.failed_episodes.append(1)
        return pb.GetSummaryResponse(submission_id=submission_id, complete=True, manifests=[m])

    with pytest.raises(ValueError, match="include_episodes=True"):
        compare(summary("a", listed=True), summary("b", listed=False), allow_incomplete=False)
    (row,) = compare(summary("a", True), summary("b", True), allow_incomplete=False).rows
    assert row.pairs == PairedCounts(both=1, neither=1)
