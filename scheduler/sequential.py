"""Anytime-valid statistics for stopping an evaluation once its answer is known.

An evaluation's episodes are a finite population: the manifest's N episodes, whose success rate
is the number a full run reports. When the scheduler hands out its tasks in a seeded random order
(``scheduler.store.dispatch``) and results are read in that order (never in the order they
finish: successes end early), the results seen so far are a simple random sample drawn without
replacement, and two statistics stay valid however often they are looked at and whenever the
evaluation is stopped:

- ``TotalSequence``: a confidence sequence for the population's total (successes, or for a paired
  comparison the difference of the two checkpoints' successes): the hedged betting confidence
  sequence for sampling without replacement (Waudby-Smith & Ramdas, "Confidence sequences for
  sampling without replacement", NeurIPS 2020, arXiv 2006.04347, section 3 with the predictable
  plug-in empirical-Bernstein bets of arXiv 2010.09686, eq. 26-27). For each candidate total j it
  keeps two wealth processes betting that the next unit is above, or below, the mean the remaining
  units must have if the total is j; under the true total both are nonnegative martingales, so by
  Ville's inequality their average reaches 1/alpha with probability at most alpha, ever. Every
  candidate the data rule out stays out (the running intersection), and at the last unit only the
  true total is left. Candidates are the integers the total can take, so nothing is lost to a grid.
- ``mcnemar_e_value``: a sequential McNemar test of "the two checkpoints do not differ" (the
  exact McNemar's null: each discordant pair goes either way with probability 1/2): the
  likelihood ratio of the discordant pairs' split, averaged over Beta(c, c) alternatives for a few
  c (``MIXTURE``). It is a test martingale under the null in any order fixed before the results, so
  "reject once E >= 1/alpha" has a type I error of at most alpha at any stopping time; the
  always-valid p is 1 / (the largest E so far).

The stopping rules built on them (``Rule``) are what the scheduler checks as results come in. Only
the standard library (``math``), like ``scheduler.differences``; the tests check these against the
definitions computed another way and against simulation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.differences import PairedCounts, exact_mcnemar

# Bets are capped at this share of what the candidate mean allows (1 + lambda (x - mu) >= 1 - C):
# the paper's truncation (c = 1/2), so no single unit can take more than half the wealth.
BET_CAP = 0.5
# The Beta(c, c) alternatives the sequential McNemar averages over: c = 1/2 (Jeffreys) spends its
# power on large splits, 32 on near-even ones; each gets a quarter of the prior.
MIXTURE = (0.5, 2.0, 8.0, 32.0)


@dataclass(frozen=True)
class Bounds:
    """The smallest and largest total the confidence sequence still holds, after ``units`` units."""

    low: int
    high: int
    units: int


class TotalSequence:
    """A confidence sequence for the total of a finite population of ``units`` units, each adding
    an integer in [0, ``unit_capacity``] to the total, observed one unit at a time in a uniformly
    random order without replacement; the total lies in [0, ``capacity``] (``capacity``: the sum
    of every unit's own largest value, at most ``units`` times ``unit_capacity``).

    A unit is a task of the evaluation. For one checkpoint, a task of n episodes adds its
    successes (capacity n, total: the manifest's successes); for a paired comparison it adds
    n + (B's successes - A's) (capacity 2n, total: N + the difference). ``observe`` takes the
    unit's value and its own capacity, which bounds what the units not yet seen can still add.
    """

    def __init__(self, units: int, unit_capacity: int, capacity: int, alpha: float) -> None:
        if units < 1 or unit_capacity < 1 or not 0 < capacity <= units * unit_capacity:
            raise ValueError(
                f"need units >= 1, unit_capacity >= 1, 0 < capacity <= units * unit_capacity, got "
                f"{units}, {unit_capacity}, {capacity}"
            )
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        self.units, self.unit_capacity, self.capacity, self.alpha = units, unit_capacity, capacity, alpha
        self.seen = 0
        self.total_seen = 0  # the sum of the values observed
        self.remaining_capacity = capacity
        # Candidate totals low..high; alive[j - low] is False once the data rule j out.
        self.low, self.high = 0, capacity
        self._alive = [True] * (capacity + 1)
        self._log_up = [0.0] * (capacity + 1)
        self._log_down = [0.0] * (capacity + 1)
        self._threshold = math.log(1.0 / alpha)
        self._log_bet_scale = math.log(2.0 / alpha)  # log(1 / (alpha * theta)) with theta = 1/2
        # The predictable plug-in variance: 1/4 (one imagined observation) plus the squared
        # deviations of each observation from the running mean that included it.
        self._sum_x = 0.0
        self._squares = 0.25
        # Set once the bets ruled out every total still possible (a miss, at most alpha of runs):
        # from then on the bounds are only what the data make certain, and may widen.
        self.missed = False

    def bounds(self) -> Bounds:
        return Bounds(self.low, self.high, self.seen)

    def observe(self, value: int, capacity: int) -> Bounds:
        """Adds one unit's value (an integer in [0, capacity], capacity <= unit_capacity)."""
        if self.seen >= self.units:
            raise ValueError(f"all {self.units} units have been observed")
        if not 0 <= value <= capacity <= self.unit_capacity:
            raise ValueError(
                f"a unit's value must lie in [0, {capacity}] and its capacity in [0, "
                f"{self.unit_capacity}], got {value} of {capacity}"
            )
        t = self.seen + 1
        scale = self.unit_capacity
        x = value / scale
        variance = self._squares / t
        bet = math.sqrt(2.0 * self._log_bet_scale / (variance * t * math.log(1.0 + t)))
        left = scale * (self.units - t + 1)  # what the unseen units, this one included, could add at most
        for j in range(self.low, self.high + 1):
            if not self._alive[j]:
                continue
            mean = (j - self.total_seen) / left  # the mean the units left must have if the total is j
            up = min(bet, BET_CAP / mean) if mean > 0 else bet
            down = min(bet, BET_CAP / (1.0 - mean)) if mean < 1 else bet
            self._log_up[j] += math.log1p(up * (x - mean))
            self._log_down[j] += math.log1p(-down * (x - mean))
            if _log_mean_exp(self._log_up[j], self._log_down[j]) >= self._threshold:
                self._alive[j] = False
        self.seen = t
        self.total_seen += value
        self.remaining_capacity -= capacity
        # What the data already say for certain: the total is at least what was seen, at most that
        # plus what the units left can still add.
        for j in range(self.low, min(self.total_seen, self.high + 1)):
            self._alive[j] = False
        for j in range(max(self.total_seen + self.remaining_capacity + 1, self.low), self.high + 1):
            self._alive[j] = False
        self._sum_x += x
        running_mean = (0.5 + self._sum_x) / (t + 1)
        self._squares += (x - running_mean) ** 2
        self._shrink()
        return self.bounds()

    def _shrink(self) -> None:
        while self.low < self.high and not self._alive[self.low]:
            self.low += 1
        while self.high > self.low and not self._alive[self.high]:
            self.high -= 1
        if not self._alive[self.low]:
            # Every candidate the bets allowed is ruled out by what was seen: the rare run (at most
            # alpha of them) on which the sequence missed. What is certain is all that is left.
            self.missed = True
            self.low = self.total_seen
            self.high = self.total_seen + self.remaining_capacity
            for j in range(self.low, self.high + 1):
                self._alive[j] = True


def _log_mean_exp(a: float, b: float) -> float:
    high = max(a, b)
    return high + math.log((math.exp(a - high) + math.exp(b - high)) / 2.0)


def mcnemar_e_value(a_only: int, b_only: int) -> float:
    """The e-value of "each discordant pair goes either way with probability 1/2" after ``a_only``
    pairs where only A succeeded and ``b_only`` where only B did: the mixture over ``MIXTURE`` of
    2^k B(b + c, a + c) / B(c, c), the marginal likelihood of the split under Beta(c, c) over its
    likelihood under 1/2. Its order of arrival does not matter, only the counts."""
    if a_only < 0 or b_only < 0:
        raise ValueError(f"counts must be >= 0, got {a_only}, {b_only}")
    k = a_only + b_only
    logs = [k * math.log(2.0) + _log_beta(b_only + c, a_only + c) - _log_beta(c, c) for c in MIXTURE]
    high = max(logs)
    return math.exp(high) * sum(math.exp(v - high) for v in logs) / len(logs)


def _log_beta(x: float, y: float) -> float:
    return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)


def always_valid_p(e_values: Iterable[float]) -> float:
    """The always-valid p of a test martingale observed at these times: 1 / its largest value."""
    return min(1.0, 1.0 / max(e_values, default=1.0))


# -- stopping rules ---------------------------------------------------------------------------------

# The sequential McNemar's early boundary and the exact McNemar's level if the run reaches its end:
# a Haybittle-Peto split whose union bound keeps the whole test at 0.05.
EARLY_ALPHA = 0.01
FINAL_ALPHA = 0.04
# The confidence sequences' miscoverage.
INTERVAL_ALPHA = 0.05


@dataclass(frozen=True)
class RateRule:
    """When one checkpoint's evaluation may stop: once its rate is decided to be at least, or
    below, ``threshold``; once the interval's half-width is at most ``precision``; else at the end.
    Neither set: it runs to the end, with the interval reported as it narrows."""

    threshold: float | None = None
    precision: float | None = None
    alpha: float = INTERVAL_ALPHA


@dataclass(frozen=True)
class RateStatus:
    """Where a sequential evaluation of one checkpoint stands after ``units`` tasks of the prefix."""

    episodes: int  # episodes in the prefix
    successes: int
    low: float  # the confidence sequence's interval of the manifest's rate
    high: float
    verdict: str  # "" while undecided; else "at_least", "below", "precise" or "complete"
    words: str


def rate_status(bounds: Bounds, episodes: int, successes: int, population: int, rule: RateRule) -> RateStatus:
    """The rule's verdict on a ``TotalSequence`` of successes over ``population`` episodes."""
    low, high = bounds.low / population, bounds.high / population
    interval = f"rate in [{low:.1%}, {high:.1%}] (anytime-valid {1 - rule.alpha:.0%})"
    verdict, words = "", f"undecided after {episodes} of {population} episodes: {interval}"
    if rule.threshold is not None and low >= rule.threshold:
        verdict, words = "at_least", f"rate at least {rule.threshold:.1%}: {interval}"
    elif rule.threshold is not None and high < rule.threshold:
        verdict, words = "below", f"rate below {rule.threshold:.1%}: {interval}"
    elif rule.precision is not None and bounds.high - bounds.low <= 2 * rule.precision * population + 1e-9:
        verdict, words = "precise", f"rate known to +-{rule.precision:.1%}: {interval}"
    elif episodes == population:
        verdict, words = "complete", f"every episode ran: {interval}"
    return RateStatus(episodes, successes, low, high, verdict, words)


@dataclass(frozen=True)
class PairedRule:
    """When a paired comparison may stop: once the sequential McNemar's e-value reaches
    1 / ``early_alpha`` (different), once the whole interval of the difference lies within
    +-``margin`` (equivalent; no margin: never), else at the end, where the exact McNemar decides
    at ``final_alpha``."""

    margin: float | None = None
    early_alpha: float = EARLY_ALPHA
    final_alpha: float = FINAL_ALPHA
    alpha: float = INTERVAL_ALPHA


@dataclass(frozen=True)
class PairedStatus:
    """Where a sequential comparison of B against A stands after the prefix's episode pairs."""

    pairs: int
    a_only: int
    b_only: int
    e_value: float
    p_value: float  # always-valid: 1 / the largest e-value so far
    low: float  # the confidence sequence's interval of B's rate minus A's
    high: float
    verdict: str  # "" while undecided; else "different", "equivalent", or at the end "final"
    words: str


def paired_status(
    bounds: Bounds, counts: PairedCounts, largest_e: float, population: int, rule: PairedRule
) -> PairedStatus:
    """The rule's verdict on a comparison over ``population`` episode pairs: ``bounds`` of a
    ``TotalSequence`` of population + (B's successes - A's), the prefix's paired ``counts``, and the
    largest sequential McNemar e-value the prefix has reached so far (``largest_e``)."""
    low, high = (bounds.low - population) / population, (bounds.high - population) / population
    e_value = mcnemar_e_value(counts.a_only, counts.b_only)
    p_value = always_valid_p([largest_e, e_value])
    interval = f"B - A in [{_points(low)}, {_points(high)}] points (anytime-valid {1 - rule.alpha:.0%})"
    better = "B better than A" if counts.b_only > counts.a_only else "A better than B"
    split = f"{counts.a_only} pairs only A succeeded, {counts.b_only} only B"
    verdict, words = "", f"undecided after {counts.pairs} of {population} pairs ({split}): {interval}"
    within = rule.margin is not None and -rule.margin < low and high < rule.margin
    if max(largest_e, e_value) >= 1.0 / rule.early_alpha:
        verdict = "different"
        words = (
            f"{better} (sequential McNemar, always-valid p {p_value:.2g} <= {rule.early_alpha}; {split}): {interval}"
        )
    elif counts.pairs == population:
        # At the end the exact McNemar decides, before equivalence: both may hold (a difference
        # shown, smaller than the margin), and then both are said.
        verdict = "final"
        final_p = exact_mcnemar(counts.a_only, counts.b_only)
        if final_p < rule.final_alpha:
            words = f"{better} (exact McNemar at the end, p {final_p:.2g} < {rule.final_alpha}; {split}): {interval}"
        else:
            words = f"no difference shown (exact McNemar at the end, p {final_p:.2g}; {split}): {interval}"
        if within:
            assert rule.margin is not None
            words += f"; within +-{100 * rule.margin:.1f} points"
    elif within:
        assert rule.margin is not None
        verdict = "equivalent"
        words = f"equivalent within +-{100 * rule.margin:.1f} points: {interval}"
    return PairedStatus(counts.pairs, counts.a_only, counts.b_only, e_value, p_value, low, high, verdict, words)


def _points(fraction: float) -> str:
    return f"{fraction * 100:+.1f}"
