"""Results as people read them: CSV rows per benchmark task x setting, the success grid that the
charts draw (``success_grid``: per task x setting and per setting, manifests of one task x setting
merged; the PNG of ``scheduler summary --plot`` and the dashboard's chart), and comparing two
submissions.

A comparison is meant between the same episode populations, so by default the two submissions
must have the same manifests (by hash); they differ in checkpoint. Then every episode of A has its
twin in B (same manifest, same episode index: same seed and initial state) and the comparison is
paired, per task x setting, per setting and overall (``scheduler.differences``). Submissions of
different manifests are refused unless the caller asks for an unpaired comparison: rows then match
by benchmark, task and setting, are compared as independent samples, and say so. An incomplete
submission's rates cover only its completed episodes, so comparing one is refused unless the caller
asks for it, and then every row says which side is incomplete; a paired difference covers the
episodes both sides completed.

The pairing is by trial. Two manifests with the same hash are the same trials; two with different
hashes are too when their trial identities (``manifests.trials``: everything but the simulator
stack and what the simulator computed during the scan) are equal, which is how the same trials
built under two stacks pair: each such pair is a ``StackLink``, and the comparison says which
distributions differ. A manifest of one submission without such a twin in the other refuses the
paired comparison, as before. What else differs between the two submissions (checkpoint,
actions per chunk, policy server) is ``scheduler.factors``.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import stack_computed, stack_label, trial_identity
from evalfleet.scheduler_api.errors import PreconditionFailed
from evalfleet.scheduler_api.vocabulary import success_rate, wilson_interval
from evalfleet.v1 import scheduler_pb2 as pb
from manifests.format import Manifest, verify
from manifests.trials import computed_differences, stack_differences
from scheduler import sequential_report
from scheduler.differences import Difference, PairedCounts, paired_difference, unpaired_difference

CSV_COLUMNS = (
    "benchmark",
    "task",
    "setting",
    "planned",
    "completed",
    "succeeded",
    "success_rate",
    "success_rate_low",
    "success_rate_high",
    "attempts",
    "workers",
    "mean_episode_seconds",
    "manifest_hash",
)


def csv_rows(summary: pb.GetSummaryResponse) -> list[dict[str, Any]]:
    """One row per manifest; the interval's bounds are empty where a fixed-N interval is not valid
    (``scheduler.sequential_report``)."""
    valid = sequential_report.fixed_n_valid(summary)
    return [
        {
            "benchmark": m.benchmark,
            "task": m.task,
            "setting": m.setting,
            "planned": m.episodes_planned,
            "completed": m.episodes_completed,
            "succeeded": m.episodes_succeeded,
            "success_rate": _csv_rate(m),
            **_csv_interval(m, valid),
            "attempts": m.attempts,
            "workers": m.workers,
            "mean_episode_seconds": f"{m.episode_wall_seconds_mean:.3f}",
            "manifest_hash": m.manifest_hash,
        }
        for m in summary.manifests
    ]


def _csv_rate(m: pb.ManifestSummary) -> str:
    """Six decimals, or empty when no episode completed."""
    rate = success_rate(m.episodes_succeeded, m.episodes_completed)
    return "" if rate is None else f"{rate:.6f}"


def _csv_interval(m: pb.ManifestSummary, valid: bool) -> dict[str, str]:
    """The 95% Wilson interval's bounds, six decimals, or empty when no episode completed or the
    interval is not ``valid``."""
    interval = wilson_interval(m.episodes_succeeded, m.episodes_completed) if valid else None
    if interval is None:
        return {"success_rate_low": "", "success_rate_high": ""}
    return {"success_rate_low": f"{interval.low:.6f}", "success_rate_high": f"{interval.high:.6f}"}


def write_csv(path: Path, summary: pb.GetSummaryResponse) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(csv_rows(summary))


@dataclass(frozen=True)
class Counts:
    """Episodes of a task x setting (or of a setting): planned, completed and succeeded."""

    planned: int = 0
    completed: int = 0
    succeeded: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.planned + other.planned, self.completed + other.completed, self.succeeded + other.succeeded)


def manifest_counts(m: pb.ManifestSummary) -> Counts:
    return Counts(m.episodes_planned, m.episodes_completed, m.episodes_succeeded)


@dataclass(frozen=True)
class TaskRow:
    """One benchmark task's counts per setting; a setting the task was not evaluated in is absent."""

    benchmark: str
    task: str
    name: str
    cells: dict[str, Counts]


@dataclass(frozen=True)
class SuccessGrid:
    """A submission's results as its charts draw them: settings and tasks in the order they were
    submitted, the counts per task x setting and per setting over all tasks."""

    settings: list[str]
    overall: dict[str, Counts]
    tasks: list[TaskRow]


def task_names(manifests: Iterable[pb.ManifestSummary]) -> dict[tuple[str, str], str]:
    """Each (benchmark, task)'s name in first-seen order: the task's, or ``benchmark: task`` when the
    manifests span more than one benchmark."""
    keys = list(dict.fromkeys((m.benchmark, m.task) for m in manifests))
    several = len({benchmark for benchmark, _ in keys}) > 1
    return {key: f"{key[0]}: {key[1]}" if several else key[1] for key in keys}


def success_grid(manifests: Iterable[pb.ManifestSummary]) -> SuccessGrid:
    """The counts per task x setting (manifests of one benchmark task x setting added up) and per
    setting."""
    manifests = list(manifests)
    settings = list(dict.fromkeys(m.setting for m in manifests))
    cells: dict[tuple[str, str], dict[str, Counts]] = defaultdict(dict)
    overall = dict.fromkeys(settings, Counts())
    for m in manifests:
        row = cells[(m.benchmark, m.task)]
        row[m.setting] = row.get(m.setting, Counts()) + manifest_counts(m)
        overall[m.setting] += manifest_counts(m)
    tasks = [TaskRow(key[0], key[1], name, cells[key]) for key, name in task_names(manifests).items()]
    return SuccessGrid(settings, overall, tasks)


@dataclass(frozen=True)
class ComparedRow:
    """One benchmark task x setting of both submissions; ``pairs`` when compared episode by episode."""

    benchmark: str
    task: str
    setting: str
    a: pb.ManifestSummary
    b: pb.ManifestSummary
    pairs: PairedCounts | None = None
    # False when a fixed-N interval or test is not valid for how either side's episodes were
    # collected (``scheduler.sequential_report``): then there is no difference to report.
    fixed_n_valid: bool = True

    @property
    def delta(self) -> float | None:
        """B's success rate minus A's, or None when either has no completed episode."""
        ra = success_rate(self.a.episodes_succeeded, self.a.episodes_completed)
        rb = success_rate(self.b.episodes_succeeded, self.b.episodes_completed)
        return None if ra is None or rb is None else rb - ra

    @property
    def difference(self) -> Difference | None:
        """The paired difference over episodes both completed, or the unpaired one; None without data
        or where it would not be valid."""
        if not self.fixed_n_valid:
            return None
        if self.pairs is not None:
            return paired_difference(self.pairs)
        return _unpaired((self.a,), (self.b,))


@dataclass(frozen=True)
class GroupDifference:
    """A setting's (or, with setting "", every setting's) difference over the rows compared."""

    benchmark: str
    setting: str
    rows: list[ComparedRow]
    difference: Difference | None
    # Paired: the episodes both submissions completed; None when unpaired.
    pairs: int | None


@dataclass(frozen=True)
class StackLink:
    """A manifest of A and one of B with different hashes and the same trials: the same trials
    built under two simulator stacks, their episodes paired by index."""

    a: Manifest
    b: Manifest
    trial_identity: str

    @property
    def stack_a(self) -> str:
        return stack_label(self.a.benchmark, self.a.data["versions"])

    @property
    def stack_b(self) -> str:
        return stack_label(self.b.benchmark, self.b.data["versions"])

    @property
    def distributions(self) -> list[str]:
        """The recorded versions that differ, "mujoco 2.3.7 vs 3.1.6" (empty: only the manifests'
        stack-computed fields differ)."""
        return stack_differences(self.a.data["versions"], self.b.data["versions"])

    @property
    def computed(self) -> dict[str, int]:
        """Per field the simulator computed in the scan, the entries whose values differ."""
        return computed_differences(self.a, self.b, stack_computed(self.a.benchmark))


@dataclass(frozen=True)
class Comparison:
    """Two submissions row by row, and the differences per setting and overall."""

    a: pb.GetSummaryResponse
    b: pb.GetSummaryResponse
    paired: bool
    rows: list[ComparedRow]
    # Unpaired only: task x setting rows one submission has and the other lacks (not compared).
    only_a: list[pb.ManifestSummary] = field(default_factory=list)
    only_b: list[pb.ManifestSummary] = field(default_factory=list)
    # Paired only: the manifest pairs matched by trial identity across two stacks, by A's hash.
    links: dict[str, StackLink] = field(default_factory=dict)

    @property
    def fixed_n_valid(self) -> bool:
        """Whether fixed-N differences are valid for both sides (``scheduler.sequential_report``)."""
        return sequential_report.fixed_n_valid(self.a) and sequential_report.fixed_n_valid(self.b)

    def by_setting(self) -> list[GroupDifference]:
        groups: dict[tuple[str, str], list[ComparedRow]] = defaultdict(list)
        for row in self.rows:
            groups[(row.benchmark, row.setting)].append(row)
        return [self._group(benchmark, setting, rows) for (benchmark, setting), rows in sorted(groups.items())]

    def overall(self) -> GroupDifference:
        return self._group("", "", self.rows)

    def _group(self, benchmark: str, setting: str, rows: list[ComparedRow]) -> GroupDifference:
        valid = self.fixed_n_valid
        if self.paired:
            total = sum((row.pairs or PairedCounts() for row in rows), PairedCounts())
            return GroupDifference(benchmark, setting, rows, paired_difference(total) if valid else None, total.pairs)
        difference = _unpaired([r.a for r in rows], [r.b for r in rows]) if valid else None
        return GroupDifference(benchmark, setting, rows, difference, None)


def _unpaired(a: Iterable[pb.ManifestSummary], b: Iterable[pb.ManifestSummary]) -> Difference | None:
    a, b = list(a), list(b)
    return unpaired_difference(
        sum(m.episodes_succeeded for m in a),
        sum(m.episodes_completed for m in a),
        sum(m.episodes_succeeded for m in b),
        sum(m.episodes_completed for m in b),
    )


def unmatched_hashes(a: pb.GetSummaryResponse, b: pb.GetSummaryResponse) -> list[str]:
    """The manifests one submission evaluates and the other does not: those ``compare`` needs to
    read to pair them by trial identity."""
    hashes_a = {m.manifest_hash for m in a.manifests}
    hashes_b = {m.manifest_hash for m in b.manifests}
    return sorted(hashes_a ^ hashes_b)


def compare(
    a: pb.GetSummaryResponse,
    b: pb.GetSummaryResponse,
    allow_incomplete: bool,
    unpaired: bool = False,
    manifests: Mapping[str, Manifest] | None = None,
) -> Comparison:
    """Pairs the two submissions' results trial by trial; refuses what would mislead.

    The summaries must list their episodes (``GetSummaryRequest.include_episodes``) for a paired
    comparison. Manifests of one submission that the other lacks pair with a twin of the same
    trial identity; ``manifests`` holds them by hash (``unmatched_hashes``). ``unpaired`` compares
    rows matched by benchmark, task and setting as independent samples, whatever their manifests.
    """
    links = {} if unpaired else _stack_links(a, b, manifests or {})
    valid = sequential_report.fixed_n_valid(a) and sequential_report.fixed_n_valid(b)
    incomplete = [s.submission_id for s in (a, b) if not s.complete]
    if incomplete and not allow_incomplete:
        raise PreconditionFailed(
            f"{' and '.join(incomplete)} incomplete; its rates cover only completed episodes"
            " (pass --allow-incomplete to compare anyway, marked)",
            field="complete",
        )
    if unpaired:
        return _compare_unpaired(a, b)
    for summary in (a, b):
        for m in summary.manifests:
            if len(m.succeeded_episodes) + len(m.failed_episodes) != m.episodes_completed:
                raise ValueError(
                    f"the summary of {summary.submission_id} does not list its episodes;"
                    " fetch it with include_episodes=True to pair them"
                )
    by_hash = {m.manifest_hash: m for m in b.manifests}
    rows = []
    for m in a.manifests:
        twin = by_hash[links[m.manifest_hash].b.hash if m.manifest_hash in links else m.manifest_hash]
        rows.append(ComparedRow(m.benchmark, m.task, m.setting, m, twin, episode_pairs(m, twin), valid))
    return Comparison(a, b, paired=True, rows=rows, links=links)


def _stack_links(
    a: pb.GetSummaryResponse, b: pb.GetSummaryResponse, manifests: Mapping[str, Manifest]
) -> dict[str, StackLink]:
    """A's manifests that B lacks, each linked to B's manifest of the same trials; refused unless
    every manifest either side lacks has exactly one twin."""
    hashes_a = {m.manifest_hash for m in a.manifests}
    hashes_b = {m.manifest_hash for m in b.manifests}
    only_a, only_b = sorted(hashes_a - hashes_b), sorted(hashes_b - hashes_a)
    if not only_a and not only_b:
        return {}
    missing = [h for h in (*only_a, *only_b) if h not in manifests]
    if missing:
        raise ValueError(f"compare needs manifest {missing[0]} to pair it by trial identity (see unmatched_hashes)")
    trials_a = _by_trials(only_a, manifests)
    trials_b = _by_trials(only_b, manifests)
    if trials_a is None or trials_b is None or set(trials_a) != set(trials_b):
        unmatched_a = len(only_a) if trials_a is None else len(set(trials_a) - set(trials_b or {}))
        unmatched_b = len(only_b) if trials_b is None else len(set(trials_b) - set(trials_a or {}))
        raise PreconditionFailed(
            f"{a.submission_id} and {b.submission_id} evaluate different manifests"
            f" (only in the first: {len(only_a)}, only in the second: {len(only_b)}) and not the same trials"
            f" (without a twin of the same trial identity: {unmatched_a} and {unmatched_b}); their episodes do not"
            " pair (pass --unpaired to compare them as independent samples, marked)",
            field="manifests",
        )
    return {
        trials_a[identity].hash: StackLink(trials_a[identity], trials_b[identity], identity) for identity in trials_a
    }


def _by_trials(hashes: Iterable[str], manifests: Mapping[str, Manifest]) -> dict[str, Manifest] | None:
    """The manifests by trial identity; None when two of them fix the same trials (no twin would
    be the one)."""
    found: dict[str, Manifest] = {}
    for manifest_hash in hashes:
        manifest = verify(manifests[manifest_hash])
        if manifest.hash != manifest_hash:
            raise ValueError(f"the manifest given for {manifest_hash} is {manifest.hash}")
        identity = trial_identity(manifest)
        if identity in found:
            return None
        found[identity] = manifest
    return found


def episode_pairs(a: pb.ManifestSummary, b: pb.ManifestSummary) -> PairedCounts:
    """Episodes (by index) that both manifest summaries completed, by the two outcomes; A is ``a``,
    B ``b``: one manifest in two submissions, or a perturbed manifest and its base."""
    a_won, a_lost = set(a.succeeded_episodes), set(a.failed_episodes)
    b_won, b_lost = set(b.succeeded_episodes), set(b.failed_episodes)
    return PairedCounts(
        both=len(a_won & b_won), a_only=len(a_won & b_lost), b_only=len(a_lost & b_won), neither=len(a_lost & b_lost)
    )


def _compare_unpaired(a: pb.GetSummaryResponse, b: pb.GetSummaryResponse) -> Comparison:
    """Rows matched by benchmark, task and setting (manifests of one such key merged)."""
    merged_a, merged_b = _by_key(a), _by_key(b)
    valid = sequential_report.fixed_n_valid(a) and sequential_report.fixed_n_valid(b)
    rows = [
        ComparedRow(key[0], key[1], key[2], merged_a[key], merged_b[key], fixed_n_valid=valid)
        for key in merged_a
        if key in merged_b
    ]
    only_a = [m for key, m in merged_a.items() if key not in merged_b]
    only_b = [m for key, m in merged_b.items() if key not in merged_a]
    return Comparison(a, b, paired=False, rows=rows, only_a=only_a, only_b=only_b)


def _by_key(summary: pb.GetSummaryResponse) -> dict[tuple[str, str, str], pb.ManifestSummary]:
    merged: dict[tuple[str, str, str], pb.ManifestSummary] = {}
    for m in summary.manifests:
        key = (m.benchmark, m.task, m.setting)
        if key not in merged:
            merged[key] = pb.ManifestSummary(
                manifest_hash=m.manifest_hash, benchmark=m.benchmark, task=m.task, setting=m.setting
            )
        else:  # more than one manifest of this task x setting: no single hash names the row
            merged[key].manifest_hash = ""
        merged[key].episodes_planned += m.episodes_planned
        merged[key].episodes_completed += m.episodes_completed
        merged[key].episodes_succeeded += m.episodes_succeeded
    return merged
