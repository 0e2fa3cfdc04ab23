"""Whether two submissions' success rates really differ: the difference, its 95% interval, a test.

Two checkpoints evaluated on the same manifests ran the same episodes (same seeds, same initial
states), so their results pair up episode by episode and the comparison is of a paired 2x2 table:
``both`` succeeded, only A, only B, ``neither``. The interval of B's rate minus A's is Newcombe's
square-and-add interval for paired data (Newcombe 1998, Statistics in Medicine 17:2635, method 10:
Wilson intervals of both rates combined with the correlation of the pairs), and the test is the
exact McNemar test: under "no difference" the discordant pairs split like fair coin flips, so the
two-sided p is a binomial tail. Submissions of different manifests cannot be paired; they are
compared as independent samples, and marked so: Newcombe's hybrid score interval (Newcombe 1998,
Statistics in Medicine 17:873, method 10) and Fisher's exact test.

Closed forms on the standard library only (``math``), like ``wilson_interval``: the scheduler stays
free of scipy; the tests check every number against scipy and published worked examples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evalfleet.scheduler_api.vocabulary import Z_95, Interval, wilson_interval

# A difference is called significant when its test's two-sided p is below this.
ALPHA = 0.05
MCNEMAR = "exact McNemar"
FISHER = "Fisher exact"


@dataclass(frozen=True)
class PairedCounts:
    """Episodes both submissions completed, by outcome (A is the first submission, B the second)."""

    both: int = 0
    a_only: int = 0
    b_only: int = 0
    neither: int = 0

    @property
    def pairs(self) -> int:
        return self.both + self.a_only + self.b_only + self.neither

    def __add__(self, other: PairedCounts) -> PairedCounts:
        return PairedCounts(
            self.both + other.both,
            self.a_only + other.a_only,
            self.b_only + other.b_only,
            self.neither + other.neither,
        )


@dataclass(frozen=True)
class Difference:
    """B's success rate minus A's (fractions), its 95% interval, and the test of "no difference"."""

    estimate: float
    interval: Interval
    test: str
    p_value: float
    paired: bool

    @property
    def significant(self) -> bool:
        """The test's answer: p below ALPHA."""
        return self.p_value < ALPHA

    @property
    def borderline(self) -> bool:
        """The interval and the test disagree: Newcombe's interval is not the exact test inverted,
        and at the margin one can exclude 0 while the other does not reject."""
        excludes_zero = self.interval.low > 0.0 or self.interval.high < 0.0
        return excludes_zero != self.significant

    def words(self) -> str:
        """ "significant" or "not significant" (by the test), and what the interval says when borderline."""
        words = "significant" if self.significant else "not significant"
        if self.borderline:
            words += f", borderline: the interval {'includes' if self.significant else 'excludes'} 0"
        return words

    def verdict(self) -> str:
        """In words: "+3.0 pts [-1.2, +7.1], not significant (exact McNemar p = 0.21)"."""
        low, high = _points(self.interval.low), _points(self.interval.high)
        return f"{_points(self.estimate)} pts [{low}, {high}], {self.words()} ({self.test} p = {self.p_value:.3g})"


def _points(fraction: float) -> str:
    return f"{100.0 * fraction:+.1f}"


def paired_difference(counts: PairedCounts, z: float = Z_95) -> Difference | None:
    """The paired comparison of B with A over episodes both completed; None when there is no pair.

    The interval is at the two-sided level of the normal quantile ``z`` (95% by default); a series
    of comparisons passes a larger one for simultaneous intervals (``scheduler.series``). The test
    does not depend on it.
    """
    n = counts.pairs
    if n == 0:
        return None
    a_rate, b_rate = (counts.both + counts.a_only) / n, (counts.both + counts.b_only) / n
    a_ci = wilson_interval(counts.both + counts.a_only, n, z)
    b_ci = wilson_interval(counts.both + counts.b_only, n, z)
    assert a_ci is not None and b_ci is not None  # n > 0
    phi = _pair_correlation(counts)
    # Square-and-add: each side's distance to the bound that moves the difference the same way.
    below = _combine(b_rate - b_ci.low, a_ci.high - a_rate, phi)
    above = _combine(b_ci.high - b_rate, a_rate - a_ci.low, phi)
    estimate = b_rate - a_rate
    interval = Interval(max(-1.0, estimate - below), min(1.0, estimate + above))
    return Difference(estimate, interval, MCNEMAR, exact_mcnemar(counts.a_only, counts.b_only), paired=True)


def _combine(b_distance: float, a_distance: float, phi: float) -> float:
    return math.sqrt(max(0.0, b_distance**2 + a_distance**2 - 2.0 * phi * b_distance * a_distance))


def _pair_correlation(counts: PairedCounts) -> float:
    """Newcombe's phi: the correlation of the pairs, its positive part continuity-corrected by n/2."""
    n = counts.pairs
    margins = (
        (counts.both + counts.a_only)
        * (counts.b_only + counts.neither)
        * (counts.both + counts.b_only)
        * (counts.a_only + counts.neither)
    )
    if margins == 0:
        return 0.0
    cross = counts.both * counts.neither - counts.a_only * counts.b_only
    if cross > n / 2:
        return (cross - n / 2) / math.sqrt(margins)
    return cross / math.sqrt(margins) if cross < 0 else 0.0


def exact_mcnemar(a_only: int, b_only: int) -> float:
    """Two-sided p of the exact McNemar test: twice the binomial(a_only + b_only, 1/2) tail, at most 1."""
    n = a_only + b_only
    tail, term = 0, 1  # term = C(n, k), exact integers
    for k in range(min(a_only, b_only) + 1):
        tail += term
        term = term * (n - k) // (k + 1)
    return min(1.0, 2 * tail / (1 << n))


def unpaired_difference(a_succeeded: int, a_completed: int, b_succeeded: int, b_completed: int) -> Difference | None:
    """B's rate minus A's as independent samples; None when either side completed nothing."""
    a_ci, b_ci = wilson_interval(a_succeeded, a_completed), wilson_interval(b_succeeded, b_completed)
    if a_ci is None or b_ci is None:
        return None
    a_rate, b_rate = a_succeeded / a_completed, b_succeeded / b_completed
    estimate = b_rate - a_rate
    low = estimate - math.hypot(b_rate - b_ci.low, a_ci.high - a_rate)
    high = estimate + math.hypot(b_ci.high - b_rate, a_rate - a_ci.low)
    p_value = fisher_exact(a_succeeded, a_completed, b_succeeded, b_completed)
    return Difference(estimate, Interval(max(-1.0, low), min(1.0, high)), FISHER, p_value, paired=False)


def fisher_exact(a_succeeded: int, a_completed: int, b_succeeded: int, b_completed: int) -> float:
    """Two-sided p of Fisher's exact test: the tables with the same margins no likelier than this one."""
    total, successes = a_completed + b_completed, a_succeeded + b_succeeded

    def log_p(x: int) -> float:  # A has x successes: hypergeometric probability, in logs
        return (
            _log_choose(successes, x)
            + _log_choose(total - successes, a_completed - x)
            - _log_choose(total, a_completed)
        )

    observed = log_p(a_succeeded)
    support = range(max(0, a_completed - (total - successes)), min(successes, a_completed) + 1)
    # The relative tolerance scipy uses, so that tables as likely as this one count despite rounding.
    p_value = sum(math.exp(value) for x in support if (value := log_p(x)) <= observed + 1e-7)
    return min(1.0, p_value)


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
