"""A series of checkpoints on the same manifests: the learning curve, each against a baseline with
a multiplicity correction, and an honest choice of the best one.

The checkpoints of one training run are evaluated as submissions of the same manifests, so every
submission ran the same episodes (same seeds, same initial states). Each row of the curve is a
submission's success rate with its 95% Wilson interval, an interval of that submission alone: the
intervals are not simultaneous, and the eye that picks the highest point of the curve picks up
its luck too.

Against a baseline (by default the first submission) each other submission's difference is paired
episode by episode, as ``scheduler compare`` pairs two (``scheduler.report.compare``, which this
module calls: exact McNemar test, Newcombe's paired interval, ``scheduler.differences``). Asking
m questions at the 5% level finds about 0.05 m differences that are not there, so the answers are
corrected for the m comparisons: p-values by Holm's step-down method (Holm 1979, Scandinavian
Journal of Statistics 6:65; it keeps the chance of any false "significant" in the series at most
5% and rejects at least what Bonferroni rejects), intervals by Bonferroni (each at level 1 - 0.05/m,
so that all m cover their differences together with probability at least 95%). Holm has no
matching intervals, so the two can disagree at the margin; the output says which each is.

Choosing the best of N checkpoints by its rate and reporting that same rate overstates it: the
maximum of N noisy rates is biased upwards even when every checkpoint is equally good (papers that
report the best of many checkpoints, Isaac-GR00T#486, CogVLA#8, carry that bias). ``select``
splits the manifests into a selection set and a held-out set from a seed and a fraction, fixed
before any result is read (each manifest's place is the sha256 of the seed and its hash), chooses
on the selection set and reports the chosen one's rate on the held-out manifests only: episodes
the choice never saw, so its Wilson interval holds as for a checkpoint fixed in advance. The
split is recorded in the output.

Refused, with a ``SeriesError`` naming the field: fewer than two submissions, one given twice, a
baseline outside the series, submissions of different manifests (their episodes do not pair),
incomplete ones unless asked (then marked), and sequential submissions without a result for every
planned episode, even when asked (``scheduler.sequential_report.fixed_n_valid``: one that a rule
stopped early, ``GetSummaryResponse.sequential.stopped_at``, or one still running). Those are
refused rather than marked because nothing in this module could be shown for them honestly: a stop
lets the results choose the sample size, and past the prefix of the dispatch order the quick
episodes finish first, so the Wilson interval, the McNemar test, the Holm and Bonferroni
corrections built on it and the selection by rate are all invalid for them; a row without those
would still sit on the curve and invite the comparison. Their anytime-valid result is in
``scheduler status``. A sequential submission with every planned episode's result is a fixed
sample, and is taken as any other.

Standard library only (``math``, ``hashlib``, ``statistics``), like ``scheduler.differences``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from evalfleet.scheduler_api.vocabulary import Interval, success_rate, wilson_interval
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler import report, sequential_report
from scheduler.differences import ALPHA, Difference, PairedCounts, paired_difference
from scheduler.report import Comparison, Counts

HOLM = "Holm step-down"
BONFERRONI = "Bonferroni"
# Characters of the checkpoint digest shown beside a submission's id.
DIGEST_CHARS = 12


class SeriesError(ValueError):
    """A series that cannot be reported honestly; the message starts with the field it is about."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def check_request(submission_ids: Sequence[str], baseline: str | None, select_fraction: float | None) -> None:
    """Refuses what the submissions' ids and the options alone make meaningless, before anything is
    fetched: fewer than two submissions, one given twice, a baseline not in the series, a selection
    fraction outside (0, 1)."""
    if len(submission_ids) < 2:
        raise SeriesError("submissions", f"a series needs at least 2 submissions, got {len(submission_ids)}")
    repeated = sorted({s for s in submission_ids if submission_ids.count(s) > 1})
    if repeated:
        raise SeriesError("submissions", f"{', '.join(repeated)} given more than once")
    if baseline is not None and baseline not in submission_ids:
        raise SeriesError("baseline", f"{baseline} is not one of the series' submissions")
    if select_fraction is not None and not 0.0 < select_fraction < 1.0:
        raise SeriesError("select_fraction", f"{select_fraction} is outside (0, 1)")


def label(summary: pb.GetSummaryResponse) -> str:
    """A submission as the curve names it: its id and the first characters of its checkpoint digest."""
    digest = summary.checkpoint[:DIGEST_CHARS] if summary.checkpoint else "any checkpoint"
    return f"{summary.submission_id} ({digest})"


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values, in the order given (None stays None).

    With the m p-values sorted ascending, the i-th (from 1) is adjusted to the largest of
    ``min(1, (m - j + 1) p_(j))`` over j <= i: a hypothesis is rejected at level alpha exactly when
    Holm's procedure rejects it. A comparison without a test (None: no episode pair) still counts in
    m, as a p of 1: the family was asked, only its answer is missing.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (1.0 if p_values[i] is None else p_values[i], i))
    adjusted: list[float | None] = [None] * m
    running = 0.0
    for rank, index in enumerate(order):
        p = p_values[index]
        running = max(running, min(1.0, (m - rank) * (1.0 if p is None else p)))
        if p is not None:
            adjusted[index] = running
    return adjusted


def bonferroni_z(comparisons: int, alpha: float = ALPHA) -> float:
    """The normal quantile of a two-sided interval at level ``1 - alpha / comparisons``."""
    return NormalDist().inv_cdf(1.0 - alpha / (2 * max(1, comparisons)))


@dataclass(frozen=True)
class Point:
    """One submission of the series, and (except for the baseline) its paired difference from it."""

    summary: pb.GetSummaryResponse
    counts: Counts
    # None for the baseline; else the baseline as A and this submission as B.
    comparison: Comparison | None
    pairs: PairedCounts | None
    # At the simultaneous (Bonferroni) level; None for the baseline or without an episode pair.
    difference: Difference | None
    # Holm-adjusted p of the exact McNemar test; None as for ``difference``.
    p_holm: float | None

    @property
    def label(self) -> str:
        return label(self.summary)

    @property
    def interval(self) -> Interval | None:
        """The 95% Wilson interval of the rate (this submission alone)."""
        return wilson_interval(self.counts.succeeded, self.counts.completed)

    @property
    def significant(self) -> bool | None:
        """Holm's answer at 5% for the family of comparisons; None where there is no test."""
        return None if self.p_holm is None else self.p_holm < ALPHA

    @property
    def borderline(self) -> bool:
        """The simultaneous interval and Holm's answer disagree (Holm rejects more than the
        Bonferroni intervals exclude, and Newcombe's interval is not the exact test inverted)."""
        if self.difference is None or self.significant is None:
            return False
        low, high = self.difference.interval
        return (low > 0.0 or high < 0.0) != self.significant


@dataclass(frozen=True)
class Series:
    """Submissions of the same manifests, in the order given, and the baseline's position."""

    points: list[Point]
    baseline: int

    @property
    def comparisons(self) -> int:
        """m: the submissions compared with the baseline."""
        return len(self.points) - 1

    @property
    def interval_level(self) -> float:
        """The level of each simultaneous interval, 1 - 0.05/m."""
        return 1.0 - ALPHA / max(1, self.comparisons)

    @property
    def manifests(self) -> list[pb.ManifestSummary]:
        """The manifests, as the baseline lists them."""
        return list(self.points[self.baseline].summary.manifests)


def series(
    summaries: Sequence[pb.GetSummaryResponse], baseline: str | None = None, allow_incomplete: bool = False
) -> Series:
    """The learning curve of ``summaries`` (fetched with ``include_episodes``) and each one's
    paired difference from the baseline (default: the first), corrected for the comparisons."""
    ids = [s.submission_id for s in summaries]
    check_request(ids, baseline, None)
    base = ids.index(baseline) if baseline is not None else 0
    _refuse_sequential(summaries)
    _refuse_other_manifests(summaries, base)
    incomplete = [s.submission_id for s in summaries if not s.complete]
    if incomplete and not allow_incomplete:
        raise SeriesError(
            "complete",
            f"{' and '.join(incomplete)} incomplete; its rates cover only completed episodes"
            " (pass --allow-incomplete to include them anyway, marked)",
        )
    comparisons = [
        None if i == base else report.compare(summaries[base], s, allow_incomplete=True)
        for i, s in enumerate(summaries)
    ]
    pairs = [None if c is None else _paired_total(c) for c in comparisons]
    z = bonferroni_z(len(summaries) - 1)
    differences = [None if p is None else paired_difference(p, z) for p in pairs]
    others = [i for i in range(len(summaries)) if i != base]
    adjusted = dict(zip(others, holm([_p(differences[i]) for i in others]), strict=True))
    points = [
        Point(s, _counts(s.manifests), comparisons[i], pairs[i], differences[i], adjusted.get(i))
        for i, s in enumerate(summaries)
    ]
    return Series(points, base)


def _paired_total(comparison: Comparison) -> PairedCounts:
    """The episode pairs of every manifest, added up (episodes both sides completed)."""
    return sum((row.pairs or PairedCounts() for row in comparison.rows), PairedCounts())


def _p(difference: Difference | None) -> float | None:
    return None if difference is None else difference.p_value


def _counts(manifests: Iterable[pb.ManifestSummary]) -> Counts:
    return sum((Counts(m.episodes_planned, m.episodes_completed, m.episodes_succeeded) for m in manifests), Counts())


def _sequential_standing(summary: pb.GetSummaryResponse) -> str:
    """ "stopped early by its sequential rule (at_least)", or "sequential, still running"."""
    state = summary.sequential
    if state.stopped_at:
        return f"stopped early by its sequential rule ({state.verdict or 'with its comparison'})"
    return "sequential, still running"


def _refuse_sequential(summaries: Iterable[pb.GetSummaryResponse]) -> None:
    """Refuses sequential submissions whose completed episodes are not a fixed-size sample."""
    refused = [s for s in summaries if not sequential_report.fixed_n_valid(s)]
    if refused:
        names = " and ".join(f"{s.submission_id} ({_sequential_standing(s)})" for s in refused)
        raise SeriesError(
            "sequential",
            f"{names}: its completed episodes are not a fixed-size sample (a stop lets the results choose the"
            " sample size; past the prefix the quick episodes finish first), so no Wilson interval, McNemar"
            " test or rate compared with the others is valid; its anytime-valid result is in scheduler status",
        )


def _refuse_other_manifests(summaries: Sequence[pb.GetSummaryResponse], base: int) -> None:
    hashes = {m.manifest_hash for m in summaries[base].manifests}
    differing = []
    for s in summaries:
        own = {m.manifest_hash for m in s.manifests}
        if own != hashes:
            differing.append(f"{s.submission_id} (only there: {len(own - hashes)}, missing: {len(hashes - own)})")
    if differing:
        raise SeriesError(
            "manifests",
            f"{', '.join(differing)} evaluate different manifests from the baseline {summaries[base].submission_id};"
            " a series pairs episodes of the same manifests",
        )


@dataclass(frozen=True)
class Split:
    """The manifests split into those the choice is made on and those it is reported on."""

    seed: int
    fraction: float
    selection: list[pb.ManifestSummary]
    held_out: list[pb.ManifestSummary]


def split_rank(seed: int, manifest_hash: str) -> str:
    """A manifest's place in the seeded order: the sha256 of the seed and its hash, in hex."""
    return hashlib.sha256(f"{seed}\n{manifest_hash}".encode()).hexdigest()


def selection_size(manifests: int, fraction: float) -> int:
    """How many manifests the selection set takes: ``fraction`` of them, rounded half up."""
    return math.floor(fraction * manifests + 0.5)


def split(manifests: Sequence[pb.ManifestSummary], seed: int, fraction: float) -> Split:
    """The first ``selection_size`` manifests in the seeded order go to the selection set, the
    rest are held out; each side keeps the order given. It depends on the seed, the fraction and
    the manifests' hashes alone, never on a result or on the order the manifests came in."""
    if not 0.0 < fraction < 1.0:
        raise SeriesError("select_fraction", f"{fraction} is outside (0, 1)")
    if seed < 0:
        raise SeriesError("split_seed", f"{seed} must be >= 0")
    size = selection_size(len(manifests), fraction)
    if size == 0 or size == len(manifests):
        empty = "selection" if size == 0 else "held-out"
        raise SeriesError(
            "select_fraction",
            f"{fraction} of {len(manifests)} manifests leaves the {empty} set empty"
            f" ({size} to select on, {len(manifests) - size} held out); choose a fraction that leaves both"
            " at least one manifest",
        )
    ordered = sorted(manifests, key=lambda m: (split_rank(seed, m.manifest_hash), m.manifest_hash))
    chosen = {m.manifest_hash for m in ordered[:size]}
    return Split(
        seed,
        fraction,
        [m for m in manifests if m.manifest_hash in chosen],
        [m for m in manifests if m.manifest_hash not in chosen],
    )


@dataclass(frozen=True)
class Selection:
    """The best submission by its rate on the selection set, and its rate on the held-out set."""

    split: Split
    # Per point of the series: its counts on the selection set and on the held-out set.
    on_selection: list[Counts]
    on_held_out: list[Counts]
    chosen: int

    @property
    def held_out(self) -> Counts:
        """What is reported: the chosen submission on the manifests the choice never saw."""
        return self.on_held_out[self.chosen]

    @property
    def selected_on(self) -> Counts:
        """The chosen submission on the selection set: the maximum of the rates, biased upwards."""
        return self.on_selection[self.chosen]

    def words(self) -> str:
        """Why the two rates of the chosen submission differ in standing, in words."""
        return (
            f"the selection-set rate is optimistically biased: it is the highest of {len(self.on_selection)}"
            " rates measured on the same episodes, so it carries the luck that made it the highest; the"
            " held-out rate is measured on episodes the choice never saw, and its 95% interval holds as"
            " for a checkpoint fixed in advance (of the held-out manifests, not of all of them)"
        )


def select(chosen_from: Series, seed: int, fraction: float) -> Selection:
    """Splits the series' manifests, chooses the highest rate on the selection set (the first in
    the series' order among equal rates) and keeps each one's counts on both sides."""
    found = split(chosen_from.manifests, seed, fraction)
    on_selection = [_counts_on(point.summary, found.selection) for point in chosen_from.points]
    on_held_out = [_counts_on(point.summary, found.held_out) for point in chosen_from.points]
    rates = {
        i: rate for i, c in enumerate(on_selection) if (rate := success_rate(c.succeeded, c.completed)) is not None
    }
    if not rates:
        raise SeriesError("select_fraction", "no submission completed an episode of the selection set")
    best = max(rates, key=lambda i: (rates[i], -i))
    return Selection(found, on_selection, on_held_out, best)


def _counts_on(summary: pb.GetSummaryResponse, manifests: Iterable[pb.ManifestSummary]) -> Counts:
    hashes = {m.manifest_hash for m in manifests}
    return _counts(m for m in summary.manifests if m.manifest_hash in hashes)
