"""What the scheduler reads back from the store, as the wire's messages.

Every read the gRPC service, the dashboard and ``/metrics`` make is a function here of one reader
connection, and every row-to-protobuf projection of a read is written here once (a ``TaskInfo``
looks the same in ``ListTasks``, ``GetTask`` and the dashboard). The reads change nothing.
``selection``, the rows a ``TaskSelector`` names, is shared with the operator writes in
``scheduler.store.operations``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format

from evalfleet.scheduler_api.errors import InvalidArgument, NotFound
from evalfleet.scheduler_api.vocabulary import TASK_STATE_NAMES_BY_ENUM, TASK_STATES
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler.store import artifacts
from scheduler.store import canary as store_canary
from scheduler.store import sequential as store_sequential


def selection(conn: sqlite3.Connection, selector: pb.TaskSelector, *, require: bool) -> tuple[str, list[Any]]:
    """The WHERE clause (and its parameters) for the tasks ``selector`` names.

    Unknown submissions or task ids are refused (``NotFound``), as is an empty selector when
    ``require`` is set: no write applies to every task by omission.
    """
    clauses: list[str] = []
    params: list[Any] = []
    if selector.submission_id:
        if conn.execute("SELECT 1 FROM submissions WHERE id = ?", (selector.submission_id,)).fetchone() is None:
            raise NotFound(f"no submission {selector.submission_id!r}", field="selector.submission_id")
        clauses.append("submission_id = ?")
        params.append(selector.submission_id)
    if selector.task_ids:
        ids = list(dict.fromkeys(selector.task_ids))
        marks = ",".join("?" * len(ids))
        known = {r[0] for r in conn.execute(f"SELECT id FROM tasks WHERE id IN ({marks})", ids)}
        missing = [task_id for task_id in ids if task_id not in known]
        if missing:
            raise NotFound(f"no task {missing[0]!r}", field="selector.task_ids")
        clauses.append(f"id IN ({marks})")
        params.extend(ids)
    if selector.route:
        clauses.append("route = ?")
        params.append(selector.route)
    if selector.states:
        names = []
        for value in selector.states:
            if value not in TASK_STATE_NAMES_BY_ENUM:
                raise InvalidArgument(f"unknown task state {value}", field="selector.states")
            names.append(TASK_STATE_NAMES_BY_ENUM[value])
        clauses.append(f"state IN ({','.join('?' * len(names))})")
        params.extend(names)
    if require and not clauses:
        raise InvalidArgument("select tasks by submission, task ids, route or state", field="selector")
    return (" AND ".join(clauses) or "1"), params


def get_manifest(conn: sqlite3.Connection, manifest_hash: str) -> bytes:
    """A stored manifest's canonical bytes, as uploaded."""
    row = conn.execute("SELECT body FROM manifests WHERE hash = ?", (manifest_hash,)).fetchone()
    if row is None:
        raise NotFound(f"no manifest {manifest_hash!r}", field="hash")
    return bytes(row["body"])


def _state_counts(rows: Iterable[sqlite3.Row]) -> pb.StateCounts:
    counts = pb.StateCounts()
    for row in rows:
        setattr(counts, row["state"], getattr(counts, row["state"]) + row["n"])
        counts.total += row["n"]
    return counts


def _require_submission(conn: sqlite3.Connection, submission_id: str) -> sqlite3.Row:
    row: sqlite3.Row | None = conn.execute("SELECT * FROM submissions WHERE id = ?", (submission_id,)).fetchone()
    if row is None:
        raise NotFound(f"no submission {submission_id!r}", field="submission_id")
    return row


def status(
    conn: sqlite3.Connection, submission_id: str, lease_seconds: float | None = None, now: float = 0.0
) -> pb.GetStatusResponse:
    """Task counts by state and episode progress, of one submission or (``""``) of every one; with
    ``lease_seconds``, also the stacks their pending tasks need and the connected workers that run
    each (``stack_demand``)."""
    if submission_id:
        submissions = [_require_submission(conn, submission_id)]
    else:
        submissions = conn.execute("SELECT * FROM submissions ORDER BY created_at, id").fetchall()
    response = pb.GetStatusResponse()
    overall: list[sqlite3.Row] = []
    for sub in submissions:
        counts = conn.execute(
            "SELECT state, COUNT(*) AS n FROM tasks WHERE submission_id = ? GROUP BY state", (sub["id"],)
        ).fetchall()
        overall.extend(counts)
        planned = conn.execute(
            "SELECT COALESCE(SUM(episode_end - episode_start), 0) FROM tasks WHERE submission_id = ?", (sub["id"],)
        ).fetchone()[0]
        done = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(success), 0) FROM episode_results WHERE submission_id = ?", (sub["id"],)
        ).fetchone()
        response.submissions.append(
            pb.SubmissionStatus(
                submission_id=sub["id"],
                route=sub["route"],
                priority=sub["priority"],
                checkpoint=sub["checkpoint"],
                created_at=sub["created_at"],
                tasks=_state_counts(counts),
                episodes_planned=planned,
                episodes_completed=done[0],
                episodes_succeeded=done[1],
                spec_json=sub["spec"],
                canary=store_canary.read(sub["canary"]),
                paused=bool(sub["paused"]),
                sequential=store_sequential.read(sub["sequential"]),
                max_leased_tasks=sub["max_leased"],
            )
        )
    response.tasks.CopyFrom(_state_counts(overall))
    if lease_seconds is not None:
        response.stacks.extend(stack_demand(conn, submission_id, lease_seconds, now))
    return response


def stack_demand(
    conn: sqlite3.Connection, submission_id: str, lease_seconds: float, now: float
) -> list[pb.StackDemand]:
    """Each simulator stack pending tasks need (of one submission, or ``""``: of all), by id, with the
    workers seen within a lease period (active or idle, as ``list_workers`` says) that registered it:
    an empty list is a stack no connected worker can run, whose tasks wait."""
    where, args = ("AND submission_id = ?", [submission_id]) if submission_id else ("", [])
    demand = conn.execute(
        f"SELECT stack, COUNT(*) AS n FROM tasks WHERE state = 'pending' AND stack != '' {where}"
        " GROUP BY stack ORDER BY stack",
        args,
    ).fetchall()
    if not demand:
        return []
    serving: dict[str, list[str]] = {}
    for row in conn.execute("SELECT id, stacks FROM workers WHERE last_seen >= ? ORDER BY id", (now - lease_seconds,)):
        for stack in json.loads(row["stacks"]):
            serving.setdefault(stack, []).append(row["id"])
    return [
        pb.StackDemand(stack=row["stack"], pending_tasks=row["n"], workers=serving.get(row["stack"], []))
        for row in demand
    ]


def summary(conn: sqlite3.Connection, submission_id: str, include_episodes: bool = False) -> pb.GetSummaryResponse:
    """Aggregates results per manifest (benchmark task x setting) from the database alone.

    ``include_episodes`` also lists each manifest's succeeded and failed episode indices.
    """
    sub = _require_submission(conn, submission_id)
    response = pb.GetSummaryResponse(
        submission_id=submission_id,
        checkpoint=sub["checkpoint"],
        execute_steps=sub["execute_steps"],
        provenance=_provenance(conn, submission_id),
        sequential=store_sequential.read(sub["sequential"]),
    )
    # Attempts come from the attempt history, so a requeue (which resets a task's budget) does not
    # hide the attempts already spent; a released attempt was handed back unspent.
    manifest_rows = conn.execute(
        "SELECT t.manifest_hash, m.benchmark, m.task, m.setting, MIN(t.seq) AS first,"
        " SUM(t.episode_end - t.episode_start) AS planned,"
        " (SELECT COUNT(*) FROM attempts a JOIN tasks u ON u.id = a.task_id"
        "   WHERE u.submission_id = t.submission_id AND u.manifest_hash = t.manifest_hash"
        "   AND a.outcome != 'released') AS attempts"
        " FROM tasks t JOIN manifests m ON m.hash = t.manifest_hash WHERE t.submission_id = ?"
        " GROUP BY t.manifest_hash ORDER BY first",
        (submission_id,),
    ).fetchall()
    all_counts: list[sqlite3.Row] = []
    for row in manifest_rows:
        results = conn.execute(
            "SELECT COUNT(*) AS n, COALESCE(SUM(success), 0) AS ok, COALESCE(SUM(wall_seconds), 0) AS wall,"
            " COALESCE(MAX(wall_seconds), 0) AS wall_max, COUNT(DISTINCT worker_id) AS workers"
            " FROM episode_results WHERE submission_id = ? AND manifest_hash = ?",
            (submission_id, row["manifest_hash"]),
        ).fetchone()
        counts = conn.execute(
            "SELECT state, COUNT(*) AS n FROM tasks WHERE submission_id = ? AND manifest_hash = ? GROUP BY state",
            (submission_id, row["manifest_hash"]),
        ).fetchall()
        all_counts.extend(counts)
        failures = conn.execute(
            "SELECT a.failure_reason AS reason, COUNT(*) AS n FROM attempts a JOIN tasks u ON u.id = a.task_id"
            " WHERE u.submission_id = ? AND u.manifest_hash = ? AND a.outcome IN ('failed', 'lost')"
            " GROUP BY a.failure_reason ORDER BY a.failure_reason",
            (submission_id, row["manifest_hash"]),
        ).fetchall()
        response.manifests.append(
            pb.ManifestSummary(
                manifest_hash=row["manifest_hash"],
                benchmark=row["benchmark"],
                task=row["task"],
                setting=row["setting"],
                episodes_planned=row["planned"],
                episodes_completed=results["n"],
                episodes_succeeded=results["ok"],
                attempts=row["attempts"],
                workers=results["workers"],
                episode_wall_seconds_total=results["wall"],
                episode_wall_seconds_mean=results["wall"] / results["n"] if results["n"] else 0.0,
                episode_wall_seconds_max=results["wall_max"],
                tasks=_state_counts(counts),
                failures=[pb.FailureCount(reason=failure["reason"], attempts=failure["n"]) for failure in failures],
            )
        )
        if include_episodes:
            _episode_outcomes(conn, submission_id, response.manifests[-1])
    response.episodes_planned = sum(m.episodes_planned for m in response.manifests)
    response.episodes_completed = sum(m.episodes_completed for m in response.manifests)
    response.episodes_succeeded = sum(m.episodes_succeeded for m in response.manifests)
    response.complete = response.episodes_completed == response.episodes_planned
    response.tasks.CopyFrom(_state_counts(all_counts))
    response.workers.extend(
        row[0]
        for row in conn.execute(
            "SELECT DISTINCT worker_id FROM episode_results WHERE submission_id = ? ORDER BY 1", (submission_id,)
        )
    )
    return response


def _episode_outcomes(conn: sqlite3.Connection, submission_id: str, manifest: pb.ManifestSummary) -> None:
    """Fills the manifest's succeeded and failed episode indices, ascending."""
    for row in conn.execute(
        "SELECT episode_index, success FROM episode_results WHERE submission_id = ? AND manifest_hash = ?"
        " ORDER BY episode_index",
        (submission_id, manifest.manifest_hash),
    ):
        (manifest.succeeded_episodes if row["success"] else manifest.failed_episodes).append(row["episode_index"])


def _remote(stored: str) -> pb.RemotePolicy | None:
    """A result's stored remote policy server (``leases.remote_json``), or None."""
    return json_format.ParseDict(json.loads(stored), pb.RemotePolicy()) if stored else None


def _provenance(conn: sqlite3.Connection, submission_id: str) -> list[pb.EpisodeProvenance]:
    """The submission's stored episodes grouped by how they were run, most episodes first."""
    rows = conn.execute(
        "SELECT execute_steps, remote, COUNT(*) AS n FROM episode_results WHERE submission_id = ?"
        " GROUP BY execute_steps, remote ORDER BY n DESC, execute_steps, remote",
        (submission_id,),
    ).fetchall()
    return [
        pb.EpisodeProvenance(execute_steps=row["execute_steps"], remote=_remote(row["remote"]), episodes=row["n"])
        for row in rows
    ]


def list_tasks(conn: sqlite3.Connection, selector: pb.TaskSelector, limit: int) -> pb.ListTasksResponse:
    """The selected tasks (an empty selector: every task) in submission order, at most ``limit``."""
    where, params = selection(conn, selector, require=False)
    rows = conn.execute(
        f"SELECT t.*, (SELECT COUNT(*) FROM episode_results r WHERE r.task_id = t.id) AS done"
        f" FROM tasks t WHERE {where} ORDER BY seq LIMIT ?",
        [*params, limit + 1],
    ).fetchall()
    response = pb.ListTasksResponse(truncated=len(rows) > limit)
    response.tasks.extend(_task_info(row) for row in rows[:limit])
    return response


def _task_info(row: sqlite3.Row) -> pb.TaskInfo:
    """A task row (with its ``done`` episode count) as the wire type."""
    return pb.TaskInfo(
        task_id=row["id"],
        submission_id=row["submission_id"],
        index=row["idx"],
        manifest_hash=row["manifest_hash"],
        episode_start=row["episode_start"],
        episode_end=row["episode_end"],
        route=row["route"],
        priority=row["priority"],
        state=TASK_STATES[row["state"]],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        fencing_token=row["fencing_token"],
        worker_id=row["worker_id"],
        lease_deadline=row["lease_deadline"] or 0.0,
        last_error=row["last_error"],
        last_failure_reason=row["last_failure_reason"],
        episodes_done=row["done"],
        updated_at=row["updated_at"],
        checkpoint=row["checkpoint"],
        stack=row["stack"],
    )


def get_task(conn: sqlite3.Connection, task_id: str) -> pb.GetTaskResponse:
    """One task with its whole attempt history (every lease, kept after it ends) and its results,
    each with the artifacts the attempt that stored it uploaded."""
    row = conn.execute(
        "SELECT t.*, (SELECT COUNT(*) FROM episode_results r WHERE r.task_id = t.id) AS done FROM tasks t WHERE id = ?",
        (task_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"no task {task_id!r}", field="task_id")
    response = pb.GetTaskResponse(task=_task_info(row))
    for attempt in conn.execute("SELECT * FROM attempts WHERE task_id = ? ORDER BY fencing_token", (task_id,)):
        response.attempts.append(
            pb.Attempt(
                attempt=attempt["attempt"],
                fencing_token=attempt["fencing_token"],
                worker_id=attempt["worker_id"],
                started_at=attempt["started_at"],
                ended_at=attempt["ended_at"] or 0.0,
                outcome=attempt["outcome"],
                error=attempt["error"],
                failure_reason=attempt["failure_reason"],
            )
        )
    uploaded = artifacts.by_episode(conn.execute("SELECT * FROM artifacts WHERE task_id = ? ORDER BY kind", (task_id,)))
    for result in conn.execute("SELECT * FROM episode_results WHERE task_id = ? ORDER BY episode_index", (task_id,)):
        response.episodes.append(
            pb.StoredEpisode(
                result=pb.EpisodeResult(
                    episode_index=result["episode_index"],
                    success=bool(result["success"]),
                    steps=result["steps"],
                    wall_seconds=result["wall_seconds"],
                    trace_digest=result["trace_digest"],
                    info_json=result["info"],
                    execute_steps=result["execute_steps"],
                    remote=_remote(result["remote"]),
                ),
                fencing_token=result["fencing_token"],
                worker_id=result["worker_id"],
                reported_at=result["reported_at"],
                # Only the scored attempt's files: those its lease uploaded.
                artifacts=uploaded.get((result["episode_index"], result["fencing_token"]), []),
            )
        )
    return response


def list_workers(conn: sqlite3.Connection, lease_seconds: float, now: float) -> pb.ListWorkersResponse:
    """A worker holding a lease is active; one seen within a lease period idle; others lost."""
    response = pb.ListWorkersResponse()
    for row in conn.execute("SELECT * FROM workers ORDER BY id"):
        if now - row["last_seen"] > lease_seconds:
            state = "lost"
        elif row["current_task"]:
            state = "active"
        else:
            state = "idle"
        response.workers.append(
            pb.WorkerInfo(
                worker_id=row["id"],
                host=row["host"],
                gpu_uuid=row["gpu_uuid"],
                routes=json.loads(row["routes"]),
                versions_json=row["versions"],
                registered_at=row["registered_at"],
                last_seen=row["last_seen"],
                state=state,
                current_task=row["current_task"],
                stacks=json.loads(row["stacks"]),
            )
        )
    return response
