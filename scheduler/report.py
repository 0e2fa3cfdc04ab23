"""Results as people read them: CSV rows per benchmark task x setting, and comparing two submissions.

A comparison is only meaningful between the same episode populations, so the two submissions must
have the same manifests (by hash); they differ in checkpoint. An incomplete submission's rates cover
only its completed episodes, so comparing one is refused unless the caller asks for it, and then
every row says which side is incomplete.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalfleet.scheduler_api.errors import PreconditionFailed
from evalfleet.scheduler_api.vocabulary import success_rate
from evalfleet.v1 import scheduler_pb2 as pb

CSV_COLUMNS = (
    "benchmark",
    "task",
    "setting",
    "planned",
    "completed",
    "succeeded",
    "success_rate",
    "attempts",
    "workers",
    "mean_episode_seconds",
    "manifest_hash",
)


def csv_rows(summary: pb.GetSummaryResponse) -> list[dict[str, Any]]:
    return [
        {
            "benchmark": m.benchmark,
            "task": m.task,
            "setting": m.setting,
            "planned": m.episodes_planned,
            "completed": m.episodes_completed,
            "succeeded": m.episodes_succeeded,
            "success_rate": _csv_rate(m),
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


def write_csv(path: Path, summary: pb.GetSummaryResponse) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(csv_rows(summary))


@dataclass(frozen=True)
class ComparedRow:
    benchmark: str
    task: str
    setting: str
    a: pb.ManifestSummary
    b: pb.ManifestSummary

    @property
    def delta(self) -> float | None:
        """B's success rate minus A's, or None when either has no completed episode."""
        ra = success_rate(self.a.episodes_succeeded, self.a.episodes_completed)
        rb = success_rate(self.b.episodes_succeeded, self.b.episodes_completed)
        return None if ra is None or rb is None else rb - ra


def compare(a: pb.GetSummaryResponse, b: pb.GetSummaryResponse, allow_incomplete: bool) -> list[ComparedRow]:
    """Pairs the two submissions' results manifest by manifest; refuses what would mislead."""
    hashes_a = [m.manifest_hash for m in a.manifests]
    hashes_b = [m.manifest_hash for m in b.manifests]
    if sorted(hashes_a) != sorted(hashes_b):
        only_a = sorted(set(hashes_a) - set(hashes_b))
        only_b = sorted(set(hashes_b) - set(hashes_a))
        raise PreconditionFailed(
            f"{a.submission_id} and {b.submission_id} evaluate different manifests"
            f" (only in the first: {len(only_a)}, only in the second: {len(only_b)})",
            field="manifests",
        )
    incomplete = [s.submission_id for s in (a, b) if not s.complete]
    if incomplete and not allow_incomplete:
        raise PreconditionFailed(
            f"{' and '.join(incomplete)} incomplete; its rates cover only completed episodes"
            " (pass --allow-incomplete to compare anyway, marked)",
            field="complete",
        )
    by_hash = {m.manifest_hash: m for m in b.manifests}
    return [ComparedRow(m.benchmark, m.task, m.setting, m, by_hash[m.manifest_hash]) for m in a.manifests]
