"""The results document of a submission (RESULTS.json), built from the scheduler's database alone.

Per benchmark task x setting: successes / completed / planned, success rate, attempts, workers and
episode wall times; per setting and overall totals; the manifest hashes that define the evaluated
population; the checkpoint identity; and the versions every contributing worker registered with.
An incomplete submission says so: its rates cover only the completed episodes.
"""

from __future__ import annotations

import datetime
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from evalfleet.scheduler_api.client import SchedulerClient
from evalfleet.scheduler_api.vocabulary import success_rate
from evalfleet.v1 import scheduler_pb2 as pb

FORMAT = "evalfleet.results/v1"


def _counts(planned: int, completed: int, succeeded: int) -> dict[str, Any]:
    return {
        "planned": planned,
        "completed": completed,
        "succeeded": succeeded,
        "success_rate": None if (rate := success_rate(succeeded, completed)) is None else round(rate, 6),
    }


def _by_task(manifest: pb.ManifestSummary) -> dict[str, Any]:
    return {
        "benchmark": manifest.benchmark,
        "task": manifest.task,
        "setting": manifest.setting,
        "manifest_hash": manifest.manifest_hash,
        **_counts(manifest.episodes_planned, manifest.episodes_completed, manifest.episodes_succeeded),
        "attempts": manifest.attempts,
        "workers": manifest.workers,
        "episode_wall_seconds": {
            "mean": round(manifest.episode_wall_seconds_mean, 3),
            "max": round(manifest.episode_wall_seconds_max, 3),
            "total": round(manifest.episode_wall_seconds_total, 3),
        },
    }


def _by_setting(summary: pb.GetSummaryResponse) -> list[dict[str, Any]]:
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for m in summary.manifests:
        entry = totals[(m.benchmark, m.setting)]
        entry[0] += m.episodes_planned
        entry[1] += m.episodes_completed
        entry[2] += m.episodes_succeeded
    return [
        {"benchmark": benchmark, "setting": setting, **_counts(*values)}
        for (benchmark, setting), values in sorted(totals.items())
    ]


def results_document(
    client: SchedulerClient, submission_id: str, checkpoint_identity: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Everything a reader needs to trust and compare one submission's numbers."""
    summary = client.summary(submission_id)
    contributors = set(summary.workers)
    workers = [
        {
            "worker_id": w.worker_id,
            "host": w.host,
            "gpu_uuid": w.gpu_uuid,
            "versions": json.loads(w.versions_json or "{}"),
        }
        for w in client.workers()
        if w.worker_id in contributors
    ]
    return {
        "format": FORMAT,
        "submission_id": submission_id,
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "complete": summary.complete,
        "checkpoint": summary.checkpoint,
        "checkpoint_identity": checkpoint_identity,
        "overall": _counts(summary.episodes_planned, summary.episodes_completed, summary.episodes_succeeded),
        "by_setting": _by_setting(summary),
        "by_task": [_by_task(m) for m in summary.manifests],
        "manifest_hashes": [m.manifest_hash for m in summary.manifests],
        "workers": workers,
        "note": "infrastructure retries are excluded; policy failures are included as results",
    }


def write_results(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
