"""How a checkpoint's success holds up under perturbations: per axis, the success rate on the
perturbed settings, the drop from the settings they perturb with its 95% interval, and the tasks
that broke.

A submission that evaluates a setting and settings that perturb it (a benchmark's perturbation
suites beside the suite they perturb; ``benchmarks.perturbation`` says which setting perturbs
which) gets one row per benchmark x base setting x axis. The drop is the base's success
rate minus the perturbed one's: positive when the perturbation hurts.

The drop is paired where the episodes correspond. A perturbed manifest corresponds to a base
manifest of the same task when its entries hold the base's trial fields (``benchmarks.trial_fields``,
the init state's index for example) with the same values in the same order: it runs the same trials,
perturbed, and its episodes pair with the base's by index. When every perturbed manifest of an axis
corresponds, the interval is Newcombe's for paired proportions and the test the exact McNemar test,
over the episodes both sides completed (``scheduler.differences``, as ``scheduler compare`` pairs
two checkpoints). Otherwise the axis is compared as independent samples (Newcombe's hybrid score
interval, Fisher's exact test) and says why. Each interval is a 95% interval on its own, not
simultaneous over the axes. A sequential submission that has not finished gets no interval and no
test (``scheduler.sequential_report``).

A task broke under an axis when it succeeded in at least one of its base episodes and in none of
its completed perturbed ones.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks import perturbation, trial_fields
from evalfleet.scheduler_api.vocabulary import rate_fields, success_rate
from evalfleet.v1 import scheduler_pb2 as pb
from manifests.format import Manifest
from scheduler import sequential_report
from scheduler.differences import Difference, PairedCounts, paired_difference, unpaired_difference
from scheduler.report import Counts, episode_pairs, manifest_counts

PAIRED = "paired: the same trials, perturbed"


@dataclass(frozen=True)
class TaskChange:
    """One task's counts in the base setting and under the axis."""

    task: str
    base: Counts
    perturbed: Counts

    @property
    def broke(self) -> bool:
        return self.base.succeeded > 0 and self.perturbed.completed > 0 and self.perturbed.succeeded == 0


@dataclass(frozen=True)
class AxisRow:
    """One benchmark x base setting x axis: the counts on both sides, the drop, how it was paired."""

    benchmark: str
    base: str
    axis: str
    settings: tuple[str, ...]  # the perturbed settings of the axis
    base_counts: Counts
    perturbed_counts: Counts
    drop: Difference | None  # None: no data on a side, or not valid (a sequential submission)
    pairing: str  # PAIRED, or why the axis is compared unpaired
    pairs: int  # paired: the episodes both sides completed; 0 when unpaired
    tasks: tuple[TaskChange, ...]
    intervals_valid: bool  # False: no Wilson bound either (``scheduler.sequential_report``)

    @property
    def paired(self) -> bool:
        return self.pairing == PAIRED

    @property
    def broken(self) -> list[str]:
        return [change.task for change in self.tasks if change.broke]


def has_perturbations(summary: pb.GetSummaryResponse) -> bool:
    """Whether the submission evaluates a perturbed setting beside the setting it perturbs (read
    from the summary alone, before any episode or manifest is)."""
    return bool(_axes(summary))


def _axes(summary: pb.GetSummaryResponse) -> dict[tuple[str, str, str], list[str]]:
    """(benchmark, base setting, axis) -> the perturbed settings of that axis the submission holds
    beside its base."""
    settings = {(m.benchmark, m.setting) for m in summary.manifests}
    axes: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for benchmark, setting in sorted(settings):
        found = perturbation(benchmark, setting)
        if found is not None and (benchmark, found.base) in settings:
            axes[(benchmark, found.base, found.axis)].append(setting)
    return axes


def robustness(summary: pb.GetSummaryResponse, manifests: Mapping[str, Manifest]) -> list[AxisRow]:
    """The axis rows of a submission (none when it evaluates no perturbed setting beside its base).

    ``summary`` must carry its episodes (``include_episodes``); ``manifests`` maps the hash of each
    of its manifests to the manifest, for the trial fields.
    """
    by_key: dict[tuple[str, str, str], list[pb.ManifestSummary]] = defaultdict(list)
    for m in summary.manifests:
        by_key[(m.benchmark, m.setting, m.task)].append(m)
    valid = sequential_report.fixed_n_valid(summary)
    rows = []
    for (benchmark, base, axis), perturbed_settings in _axes(summary).items():
        perturbed = [m for m in summary.manifests if m.benchmark == benchmark and m.setting in perturbed_settings]
        rows.append(_axis_row(benchmark, base, axis, tuple(perturbed_settings), perturbed, by_key, manifests, valid))
    return rows


def _axis_row(
    benchmark: str,
    base: str,
    axis: str,
    settings: tuple[str, ...],
    perturbed: Sequence[pb.ManifestSummary],
    by_key: Mapping[tuple[str, str, str], list[pb.ManifestSummary]],
    manifests: Mapping[str, Manifest],
    valid: bool,
) -> AxisRow:
    base_manifests = [m for (b, s, _), ms in by_key.items() if (b, s) == (benchmark, base) for m in ms]
    tasks, pairs, why = [], PairedCounts(), ""
    for task in dict.fromkeys(m.task for m in perturbed):
        theirs = by_key.get((benchmark, base, task), [])
        ours = [m for m in perturbed if m.task == task]
        tasks.append(TaskChange(task, _counts(theirs), _counts(ours)))
        for m in ours:
            partner, reason = _partner(m, theirs, manifests)
            why = why or reason
            if partner is not None:
                pairs += episode_pairs(m, partner)  # A perturbed, B base: B - A is the drop
    base_counts, perturbed_counts = _counts(base_manifests), _counts(perturbed)
    drop = None
    if valid and not why:
        drop = paired_difference(pairs)
    elif valid:
        drop = unpaired_difference(
            perturbed_counts.succeeded, perturbed_counts.completed, base_counts.succeeded, base_counts.completed
        )
    return AxisRow(
        benchmark, base, axis, settings, base_counts, perturbed_counts, drop,
        PAIRED if not why else why, pairs.pairs if not why else 0, tuple(tasks), valid,
    )  # fmt: skip


def _partner(
    perturbed: pb.ManifestSummary, bases: Sequence[pb.ManifestSummary], manifests: Mapping[str, Manifest]
) -> tuple[pb.ManifestSummary | None, str]:
    """The base manifest whose trials ``perturbed`` runs perturbed, or why there is none."""
    fields = trial_fields(perturbed.benchmark)
    if not fields:
        return None, f"unpaired: {perturbed.benchmark} names no trial fields that pair across a perturbation"
    if len(bases) != 1:
        return None, f"unpaired: task {perturbed.task} has {len(bases)} manifests in the base setting, not one"
    ours, theirs = manifests.get(perturbed.manifest_hash), manifests.get(bases[0].manifest_hash)
    if ours is None or theirs is None:
        return None, "unpaired: a manifest was not available to read its trials"
    if _trials(ours, fields) != _trials(theirs, fields):
        return None, f"unpaired: task {perturbed.task} runs other trials ({', '.join(fields)}) than its base"
    return bases[0], ""


def _trials(manifest: Manifest, fields: tuple[str, ...]) -> list[tuple[Any, ...]]:
    return [tuple(entry.get(name) for name in fields) for entry in manifest.episodes]


def _counts(manifests: Sequence[pb.ManifestSummary]) -> Counts:
    return sum((manifest_counts(m) for m in manifests), Counts())


def document(rows: Sequence[AxisRow]) -> list[dict[str, Any]]:
    """The rows as RESULTS.json's ``robustness`` holds them (rates and drops as fractions)."""
    return [
        {
            "benchmark": row.benchmark,
            "base": row.base,
            "axis": row.axis,
            "settings": list(row.settings),
            "base_counts": _counts_document(row.base_counts, row.intervals_valid),
            "perturbed_counts": _counts_document(row.perturbed_counts, row.intervals_valid),
            "drop": None if row.drop is None else row.drop.estimate,
            "drop_low": None if row.drop is None else row.drop.interval.low,
            "drop_high": None if row.drop is None else row.drop.interval.high,
            "test": None if row.drop is None else row.drop.test,
            "p_value": None if row.drop is None else row.drop.p_value,
            "paired": row.paired,
            "pairing": row.pairing,
            "pairs": row.pairs,
            "broken_tasks": row.broken,
            "tasks": [
                {
                    "task": t.task,
                    "base": _counts_document(t.base, row.intervals_valid),
                    "perturbed": _counts_document(t.perturbed, row.intervals_valid),
                }
                for t in row.tasks
            ],
        }
        for row in rows
    ]


def _counts_document(counts: Counts, interval_valid: bool) -> dict[str, Any]:
    return {
        "planned": counts.planned,
        "completed": counts.completed,
        "succeeded": counts.succeeded,
        **rate_fields(counts.succeeded, counts.completed, interval_valid=interval_valid),
    }


def lines(rows: Sequence[AxisRow]) -> list[str]:
    """The rows in words, one line per axis and one per axis with broken tasks."""
    out = []
    for row in rows:
        drop = "no drop computed" if row.drop is None else f"drop {row.drop.verdict()}"
        out.append(
            f"{row.benchmark} {row.base} under {row.axis}: {_rate(row.perturbed_counts)} against "
            f"{_rate(row.base_counts)}; {drop}; {row.pairing}" + (f" ({row.pairs} pairs)" if row.paired else "")
        )
        if row.broken:
            out.append(f"  broke under {row.axis}: {', '.join(row.broken)}")
    return out


def _rate(counts: Counts) -> str:
    rate = success_rate(counts.succeeded, counts.completed, scale=100.0)
    return f"{counts.succeeded}/{counts.completed}" + ("" if rate is None else f" ({rate:.1f}%)")
