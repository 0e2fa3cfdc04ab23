"""The results document of a submission (RESULTS.json), built from the scheduler's database alone.

Per benchmark task x setting: successes / completed / planned, success rate with its 95% Wilson
interval (``success_rate_low``, ``success_rate_high``), attempts, workers and
episode wall times; per setting and overall totals; the manifest hashes that define the evaluated
population; the checkpoint identity; the versions every contributing worker registered with; and
how the episodes were run (actions executed per chunk, "remote, unsealed" policies, and whether
the episodes differ in either: ``scheduler.provenance``). An incomplete submission says so: its
rates cover only the completed episodes. A sequential submission carries its running statistic,
verdict and stop (``sequential``); until every planned episode has a result its Wilson bounds are
null, because they are not valid for how its episodes were collected (``scheduler.sequential_report``).
A submission of perturbed settings beside their base carries a row per axis (``robustness``,
``scheduler.robustness``; the caller computes the rows from the summary and the manifests).

The document is a pure function of messages (the submission's summary, the registered workers, the
checkpoint's identity record): the caller fetches them, so formatting makes no RPC and a test or a
script builds the same document from messages it already holds.
"""

from __future__ import annotations

import datetime
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from evalfleet.scheduler_api.vocabulary import failure_counts, rate_fields
from evalfleet.v1 import policy_pb2
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler import provenance, robustness, sequential_report
from scheduler.robustness import AxisRow

FORMAT = "evalfleet.results/v1"


def _counts(planned: int, completed: int, succeeded: int, interval_valid: bool) -> dict[str, Any]:
    return {
        "planned": planned,
        "completed": completed,
        "succeeded": succeeded,
        **rate_fields(succeeded, completed, digits=6, interval_valid=interval_valid),
    }


def _by_task(manifest: pb.ManifestSummary, interval_valid: bool) -> dict[str, Any]:
    return {
        "benchmark": manifest.benchmark,
        "task": manifest.task,
        "setting": manifest.setting,
        "manifest_hash": manifest.manifest_hash,
        **_counts(manifest.episodes_planned, manifest.episodes_completed, manifest.episodes_succeeded, interval_valid),
        "attempts": manifest.attempts,
        "failed_attempts": failure_counts(manifest.failures),
        "workers": manifest.workers,
        "episode_wall_seconds": {
            "mean": round(manifest.episode_wall_seconds_mean, 3),
            "max": round(manifest.episode_wall_seconds_max, 3),
            "total": round(manifest.episode_wall_seconds_total, 3),
        },
    }


def _by_setting(summary: pb.GetSummaryResponse, interval_valid: bool) -> list[dict[str, Any]]:
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for m in summary.manifests:
        entry = totals[(m.benchmark, m.setting)]
        entry[0] += m.episodes_planned
        entry[1] += m.episodes_completed
        entry[2] += m.episodes_succeeded
    return [
        {"benchmark": benchmark, "setting": setting, **_counts(planned, completed, succeeded, interval_valid)}
        for (benchmark, setting), (planned, completed, succeeded) in sorted(totals.items())
    ]


def results_document(
    summary: pb.GetSummaryResponse,
    workers: Iterable[pb.WorkerInfo],
    generated_at: datetime.datetime,
    checkpoint_identity: policy_pb2.IdentityRecord | None = None,
    robustness_rows: Sequence[AxisRow] = (),
) -> dict[str, Any]:
    """Everything a reader needs to trust and compare one submission's numbers.

    A function of the messages alone: the caller fetches the submission's summary, the registered
    workers (those that contributed to the summary are kept) and, when it has one, the identity
    record of the checkpoint that served it; ``generated_at`` should be timezone-aware (UTC).
    """
    contributors = set(summary.workers)
    valid = sequential_report.fixed_n_valid(summary)
    return {
        "format": FORMAT,
        "submission_id": summary.submission_id,
        "generated_at": generated_at.isoformat(timespec="seconds"),
        "complete": summary.complete,
        "checkpoint": summary.checkpoint,
        "checkpoint_identity": None if checkpoint_identity is None else json_format.MessageToDict(checkpoint_identity),
        "overall": _counts(summary.episodes_planned, summary.episodes_completed, summary.episodes_succeeded, valid),
        "by_setting": _by_setting(summary, valid),
        "by_task": [_by_task(m, valid) for m in summary.manifests],
        "manifest_hashes": [m.manifest_hash for m in summary.manifests],
        "workers": [_worker(w) for w in workers if w.worker_id in contributors],
        "provenance": provenance.document(summary),
        "sequential": sequential_report.document(summary.sequential) if summary.HasField("sequential") else None,
        # Per perturbation axis, where the submission evaluates perturbed settings beside their base.
        "robustness": robustness.document(robustness_rows),
        "note": "infrastructure retries are excluded; policy failures are included as results",
        "intervals": "success_rate_low and success_rate_high bound the 95% Wilson score interval of success_rate"
        + ("" if valid else f"; null: {sequential_report.FIXED_N_NOT_VALID} (read sequential)"),
    }


def _worker(worker: pb.WorkerInfo) -> dict[str, Any]:
    return {
        "worker_id": worker.worker_id,
        "host": worker.host,
        "gpu_uuid": worker.gpu_uuid,
        "versions": json.loads(worker.versions_json or "{}"),
    }


def write_results(path: Path, document: dict[str, Any]) -> None:
    write_text_atomically(path, json.dumps(document, indent=2, sort_keys=True) + "\n")


def write_text_atomically(path: Path, text: str) -> None:
    """``text`` as the whole of ``path`` (its folder made if need be): written beside it, then
    renamed over it, so a reader never sees half a results file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
