"""The scheduler's state in SQLite: manifests, submissions, tasks, leases, attempts, results, workers.

Every state transition a task can make is written here and nowhere else, as a function of one
connection inside a transaction the caller owns (see ``scheduler.writer``). The lease rules:

- claim: the highest-priority, oldest pending task on the worker's routes becomes ``leased`` with
  attempt + 1, fencing token + 1 and a deadline;
- every write about a task carries its fencing token; a token that is not the current one, or a
  task no longer leased, is refused (``StaleLease``);
- an expired lease is reclaimed by ``reap_expired`` alone: the attempt counts as lost and the task
  goes back to pending while attempts remain, else to failed;
- a scheduler restart first gives every held lease one lease period (``renew_held_leases``): the
  scheduler's own outage costs no worker its task;
- a policy failure is an episode *result*; only infrastructure failures spend attempts.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalfleet.scheduler_api.errors import Conflict, InvalidArgument, NotFound, PreconditionFailed, StaleLease
from evalfleet.scheduler_api.limits import MAX_TEXT_BYTES
from evalfleet.scheduler_api.vocabulary import (
    TASK_STATE_NAMES,
    TASK_STATE_NAMES_BY_ENUM,
    TASK_STATES,
    failure_reason_name,
    failure_text,
)
from evalfleet.v1 import scheduler_pb2 as pb
from manifests import format as manifest_format
from manifests.partition import minibatches

SCHEMA_VERSION = 2

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS manifests (
    hash TEXT PRIMARY KEY,
    body BLOB NOT NULL,
    benchmark TEXT NOT NULL,
    task TEXT NOT NULL,
    setting TEXT NOT NULL,
    episodes INTEGER NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS submissions (
    id TEXT PRIMARY KEY,
    definition TEXT NOT NULL,
    route TEXT NOT NULL,
    checkpoint TEXT NOT NULL,
    priority INTEGER NOT NULL,
    labels TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    submission_id TEXT NOT NULL REFERENCES submissions(id),
    idx INTEGER NOT NULL,
    manifest_hash TEXT NOT NULL REFERENCES manifests(hash),
    episode_start INTEGER NOT NULL,
    episode_end INTEGER NOT NULL,
    route TEXT NOT NULL,
    checkpoint TEXT NOT NULL,
    priority INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    fencing_token INTEGER NOT NULL DEFAULT 0,
    lease_deadline REAL,
    worker_id TEXT NOT NULL DEFAULT '',
    last_error TEXT NOT NULL DEFAULT '',
    last_failure_reason INTEGER NOT NULL DEFAULT 0,
    result TEXT NOT NULL DEFAULT '',
    updated_at REAL NOT NULL
);
-- The claim order (priority DESC, seq) within one route and checkpoint, over pending rows only:
-- a claim is one index seek however large the backlog.
CREATE INDEX IF NOT EXISTS tasks_claim ON tasks (route, checkpoint, priority DESC, seq)
    WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS tasks_leases ON tasks (lease_deadline) WHERE state = 'leased';
CREATE INDEX IF NOT EXISTS tasks_submission ON tasks (submission_id, state);
CREATE TABLE IF NOT EXISTS attempts (
    task_id TEXT NOT NULL,
    fencing_token INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    worker_id TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    outcome TEXT NOT NULL DEFAULT 'running',
    error TEXT NOT NULL DEFAULT '',
    failure_reason INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, fencing_token)
);
CREATE TABLE IF NOT EXISTS episode_results (
    task_id TEXT NOT NULL,
    episode_index INTEGER NOT NULL,
    submission_id TEXT NOT NULL,
    manifest_hash TEXT NOT NULL,
    fencing_token INTEGER NOT NULL,
    worker_id TEXT NOT NULL,
    success INTEGER NOT NULL,
    steps INTEGER NOT NULL,
    wall_seconds REAL NOT NULL,
    trace_digest TEXT NOT NULL,
    info TEXT NOT NULL,
    reported_at REAL NOT NULL,
    PRIMARY KEY (task_id, episode_index)
);
CREATE INDEX IF NOT EXISTS results_submission ON episode_results (submission_id, manifest_hash);
CREATE TABLE IF NOT EXISTS workers (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL DEFAULT '',
    gpu_uuid TEXT NOT NULL DEFAULT '',
    routes TEXT NOT NULL DEFAULT '[]',
    versions TEXT NOT NULL DEFAULT '{}',
    registered_at REAL NOT NULL,
    last_seen REAL NOT NULL,
    current_task TEXT NOT NULL DEFAULT ''
);
"""

# Task-state names and their wire enum come from the one vocabulary (kept here under the store's names).
STATES = TASK_STATE_NAMES
STATE_TO_PB = TASK_STATES
PB_TO_STATE = TASK_STATE_NAMES_BY_ENUM

MAX_PRIORITY = 1_000_000
MAX_BATCH_SIZE = 100_000
MAX_ATTEMPTS = 100
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
WORKER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$")


class SchemaVersionError(Exception):
    """The database was written by a newer scheduler: opening it could lose what this one cannot read."""


def connect(path: str | Path, *, synchronous: str = "NORMAL") -> sqlite3.Connection:
    """Opens the database in WAL mode. NORMAL survives a process crash; FULL also survives power loss.

    The WAL is never checkpointed as a side effect of a commit (``wal_autocheckpoint=0``): that
    would stall the writer, and every write queued behind it, on an fsync. ``checkpoint`` does it
    from another connection instead.
    """
    if synchronous not in ("NORMAL", "FULL"):
        raise ValueError(f"synchronous must be NORMAL or FULL, got {synchronous!r}")
    conn = sqlite3.connect(Path(path).resolve(), isolation_level=None, check_same_thread=False, timeout=30)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def checkpoint(conn: sqlite3.Connection, mode: str = "PASSIVE") -> None:
    """Copies committed WAL pages into the database file without blocking the writer."""
    conn.execute(f"PRAGMA wal_checkpoint({mode})")


def initialize(conn: sqlite3.Connection) -> None:
    """Creates the schema (idempotent), upgrades an older database, refuses a newer one."""
    row = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
    version = None
    if row is not None:
        stored = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(stored["value"]) if stored is not None else None
    if version is not None and version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"database schema version {version} is newer than this scheduler's ({SCHEMA_VERSION}); "
            "run the scheduler release that wrote it"
        )
    if version == 1:
        _upgrade_from_1(conn)
    conn.executescript(SCHEMA)
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('schema_version', ?)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (str(SCHEMA_VERSION),),
    )


def _upgrade_from_1(conn: sqlite3.Connection) -> None:
    """Version 2 stores each failure's reason as a FailureReason number beside its text. Version 1
    kept it only as the text's "[reason]" prefix (a lost lease had none), so it is read from there."""
    # Each step may be repeated: an upgrade cut short by a crash runs again at the next start.
    for table, column in (("tasks", "last_failure_reason"), ("attempts", "failure_reason")):
        if column not in {row["name"] for row in conn.execute(f"PRAGMA table_info({table})")}:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
    conn.execute("UPDATE attempts SET failure_reason = ? WHERE outcome = 'lost'", (pb.FAILURE_REASON_LEASE_EXPIRED,))
    for value in pb.FailureReason.values():
        if name := failure_reason_name(value):
            prefix = f"[{name}] %"
            conn.execute(
                "UPDATE attempts SET failure_reason = ? WHERE outcome = 'failed' AND error LIKE ?", (value, prefix)
            )
            conn.execute("UPDATE tasks SET last_failure_reason = ? WHERE last_error LIKE ?", (value, prefix))
    conn.execute(
        "UPDATE tasks SET last_failure_reason = ? WHERE last_error LIKE 'lease expired (%'",
        (pb.FAILURE_REASON_LEASE_EXPIRED,),
    )


# ---------------------------------------------------------------------------------------------
# Validation shared by every write.


def check_id(value: str, field: str, pattern: re.Pattern[str] = _ID_RE) -> str:
    if not pattern.match(value or ""):
        raise InvalidArgument(f"{value!r} must match {pattern.pattern}", field=field)
    return value


def check_worker_id(value: str, field: str = "worker_id") -> str:
    return check_id(value, field, WORKER_ID_RE)


def check_json_object(text: str, field: str) -> str:
    """Free-form JSON fields must be objects and small; empty means ``{}``."""
    if not text:
        return "{}"
    if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
        raise InvalidArgument(f"larger than {MAX_TEXT_BYTES} bytes", field=field)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"not valid JSON ({exc.msg} at {exc.pos})", field=field) from None
    except (ValueError, RecursionError) as exc:
        # An integer past Python's digit limit, or nesting deeper than the decoder's stack.
        raise InvalidArgument(f"not valid JSON ({type(exc).__name__}: {exc})", field=field) from None
    if not isinstance(value, dict):
        raise InvalidArgument("must be a JSON object", field=field)
    return text


def check_priority(priority: int, field: str = "priority") -> int:
    if not 0 <= priority <= MAX_PRIORITY:
        raise InvalidArgument(f"{priority} is outside [0, {MAX_PRIORITY}]", field=field)
    return priority


# ---------------------------------------------------------------------------------------------
# Manifests and submissions.


def put_manifest(conn: sqlite3.Connection, body: bytes, expected_hash: str, now: float) -> tuple[str, bool]:
    try:
        manifest = manifest_format.parse(body, expected_hash=expected_hash or None)
    except manifest_format.ManifestError as exc:
        raise InvalidArgument(
            exc.message, field=f"body.{exc.field}" if exc.field != "hash" else "expected_hash"
        ) from None
    cursor = conn.execute(
        "INSERT OR IGNORE INTO manifests (hash, body, benchmark, task, setting, episodes, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (manifest.hash, body, manifest.benchmark, manifest.task, manifest.setting, len(manifest), now),
    )
    return manifest.hash, cursor.rowcount == 1


def get_manifest(conn: sqlite3.Connection, manifest_hash: str) -> bytes:
    row = conn.execute("SELECT body FROM manifests WHERE hash = ?", (manifest_hash,)).fetchone()
    if row is None:
        raise NotFound(f"no manifest {manifest_hash!r}", field="hash")
    return bytes(row["body"])


@dataclass(frozen=True)
class SubmissionDefinition:
    """What a submission id stands for. Priority and labels are not part of it: they may change."""

    manifest_hashes: tuple[str, ...]
    route: str
    batch_size: int
    max_attempts: int
    checkpoint: str

    def to_json(self) -> str:
        return json.dumps(
            {
                "manifest_hashes": list(self.manifest_hashes),
                "route": self.route,
                "batch_size": self.batch_size,
                "max_attempts": self.max_attempts,
                "checkpoint": self.checkpoint,
            },
            sort_keys=True,
        )

    def differences(self, stored_json: str) -> list[str]:
        stored = json.loads(stored_json)
        mine = json.loads(self.to_json())
        return sorted(key for key in mine if mine[key] != stored.get(key))


def submit(
    conn: sqlite3.Connection,
    submission_id: str,
    definition: SubmissionDefinition,
    priority: int,
    labels: str,
    now: float,
) -> tuple[int, int, int]:
    """Creates the submission's tasks that do not exist yet. Returns (created, total, episodes)."""
    row = conn.execute("SELECT definition FROM submissions WHERE id = ?", (submission_id,)).fetchone()
    if row is not None:
        differs = definition.differences(row["definition"])
        if differs:
            raise Conflict(
                f"submission {submission_id!r} exists with a different {', '.join(differs)}",
                field=differs[0],
            )
    counts = []
    for i, manifest_hash in enumerate(definition.manifest_hashes):
        found = conn.execute("SELECT episodes FROM manifests WHERE hash = ?", (manifest_hash,)).fetchone()
        if found is None:
            raise NotFound(f"no manifest {manifest_hash!r}; upload it first", field=f"manifest_hashes[{i}]")
        counts.append(found["episodes"])
    if row is None:
        conn.execute(
            "INSERT INTO submissions (id, definition, route, checkpoint, priority, labels, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (submission_id, definition.to_json(), definition.route, definition.checkpoint, priority, labels, now),
        )
    rows = []
    for manifest_hash, episodes in zip(definition.manifest_hashes, counts, strict=True):
        for start, end in minibatches(episodes, definition.batch_size):
            index = len(rows)
            rows.append(
                (
                    task_id_for(submission_id, index),
                    submission_id,
                    index,
                    manifest_hash,
                    start,
                    end,
                    definition.route,
                    definition.checkpoint,
                    priority,
                    definition.max_attempts,
                    now,
                )
            )
    before = conn.total_changes
    conn.executemany(
        "INSERT OR IGNORE INTO tasks (id, submission_id, idx, manifest_hash, episode_start, episode_end,"
        " route, checkpoint, priority, state, max_attempts, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
        rows,
    )
    return conn.total_changes - before, len(rows), sum(counts)


def task_id_for(submission_id: str, index: int) -> str:
    """Task ids derive from the submission and the task's position, so resubmission is idempotent."""
    return f"{submission_id}-{index:05d}"


# ---------------------------------------------------------------------------------------------
# Workers.


def register_worker(
    conn: sqlite3.Connection,
    worker_id: str,
    host: str,
    gpu_uuid: str,
    routes: Sequence[str],
    versions: str,
    now: float,
) -> None:
    conn.execute(
        "INSERT INTO workers (id, host, gpu_uuid, routes, versions, registered_at, last_seen)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET host = excluded.host, gpu_uuid = excluded.gpu_uuid,"
        " routes = excluded.routes, versions = excluded.versions, last_seen = excluded.last_seen",
        (worker_id, host, gpu_uuid, json.dumps(list(routes)), versions, now, now),
    )


def _touch_worker(conn: sqlite3.Connection, worker_id: str, now: float, current_task: str | None) -> None:
    """Records that a worker was seen; an unregistered worker gets a minimal row."""
    conn.execute(
        "INSERT INTO workers (id, registered_at, last_seen, current_task) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen"
        + (", current_task = excluded.current_task" if current_task is not None else ""),
        (worker_id, now, now, current_task or ""),
    )


def _release_worker(conn: sqlite3.Connection, worker_id: str, task_id: str) -> None:
    conn.execute("UPDATE workers SET current_task = '' WHERE id = ? AND current_task = ?", (worker_id, task_id))


# ---------------------------------------------------------------------------------------------
# Leases.


def claim(
    conn: sqlite3.Connection,
    worker_id: str,
    routes: Sequence[str],
    checkpoints: Sequence[str],
    lease_seconds: float,
    now: float,
) -> pb.Lease | None:
    """Leases the best pending task on ``routes`` that needs no checkpoint or one in ``checkpoints``."""
    best: sqlite3.Row | None = None
    for route in dict.fromkeys(routes):
        for checkpoint in dict.fromkeys(["", *checkpoints]):
            row = conn.execute(
                "SELECT seq, priority FROM tasks WHERE state = 'pending' AND route = ? AND checkpoint = ?"
                " ORDER BY priority DESC, seq LIMIT 1",
                (route, checkpoint),
            ).fetchone()
            if row is not None and (best is None or (-row["priority"], row["seq"]) < (-best["priority"], best["seq"])):
                best = row
    if best is None:
        _touch_worker(conn, worker_id, now, current_task=None)
        return None
    task = conn.execute(
        "UPDATE tasks SET state = 'leased', attempts = attempts + 1, fencing_token = fencing_token + 1,"
        " lease_deadline = ?, worker_id = ?, updated_at = ? WHERE seq = ? RETURNING *",
        (now + lease_seconds, worker_id, now, best["seq"]),
    ).fetchone()
    conn.execute(
        "INSERT INTO attempts (task_id, fencing_token, attempt, worker_id, started_at) VALUES (?, ?, ?, ?, ?)",
        (task["id"], task["fencing_token"], task["attempts"], worker_id, now),
    )
    _touch_worker(conn, worker_id, now, current_task=task["id"])
    # A task's first lease cannot have stored results yet; later ones skip what is stored.
    done = (
        set()
        if task["fencing_token"] == 1
        else {r[0] for r in conn.execute("SELECT episode_index FROM episode_results WHERE task_id = ?", (task["id"],))}
    )
    return pb.Lease(
        task_id=task["id"],
        submission_id=task["submission_id"],
        attempt=task["attempts"],
        fencing_token=task["fencing_token"],
        deadline=task["lease_deadline"],
        manifest_hash=task["manifest_hash"],
        episodes=[i for i in range(task["episode_start"], task["episode_end"]) if i not in done],
        route=task["route"],
        checkpoint=task["checkpoint"],
        lease_seconds=lease_seconds,
    )


def _current_task(conn: sqlite3.Connection, task_id: str, fencing_token: int) -> sqlite3.Row:
    """The fencing rule, in one place: the task exists, the token is its latest, and it is leased."""
    task = conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
    if task is None:
        raise NotFound(f"no task {task_id!r}", field="lease.task_id")
    if task["fencing_token"] != fencing_token:
        raise StaleLease(
            f"task {task_id} is at fencing token {task['fencing_token']}, this lease holds {fencing_token}",
            field="lease.fencing_token",
        )
    if task["state"] != "leased":
        raise StaleLease(f"task {task_id} is {task['state']}, no longer leased", field="lease")
    return task


def _end_attempt(
    conn: sqlite3.Connection,
    task: sqlite3.Row,
    outcome: str,
    error: str,
    now: float,
    reason: int = pb.FAILURE_REASON_UNSPECIFIED,
) -> None:
    conn.execute(
        "UPDATE attempts SET ended_at = ?, outcome = ?, error = ?, failure_reason = ?"
        " WHERE task_id = ? AND fencing_token = ?",
        (now, outcome, error, reason, task["id"], task["fencing_token"]),
    )
    _release_worker(conn, task["worker_id"], task["id"])


def heartbeat(
    conn: sqlite3.Connection, task_id: str, fencing_token: int, worker_id: str, lease_seconds: float, now: float
) -> tuple[float, bool]:
    """Extends the lease. Returns (deadline, cancelled); a cancelled task's worker must stop."""
    task = conn.execute("SELECT state, fencing_token FROM tasks WHERE id = ?", (task_id,)).fetchone()
    if task is not None and task["state"] == "cancelled" and task["fencing_token"] == fencing_token:
        return now, True
    _current_task(conn, task_id, fencing_token)
    deadline = now + lease_seconds
    conn.execute("UPDATE tasks SET lease_deadline = ? WHERE id = ?", (deadline, task_id))
    if worker_id:
        _touch_worker(conn, worker_id, now, current_task=task_id)
    return deadline, False


def report_episode(
    conn: sqlite3.Connection,
    task_id: str,
    fencing_token: int,
    result: pb.EpisodeResult,
    now: float,
    field: str = "result",
) -> bool:
    """Stores one episode result as it arrives. Returns True when it was already stored."""
    task = _current_task(conn, task_id, fencing_token)
    index = result.episode_index
    if not task["episode_start"] <= index < task["episode_end"]:
        raise InvalidArgument(
            f"{index} is outside this task's episodes [{task['episode_start']}, {task['episode_end']})",
            field=f"{field}.episode_index",
        )
    cursor = conn.execute(
        "INSERT OR IGNORE INTO episode_results (task_id, episode_index, submission_id, manifest_hash,"
        " fencing_token, worker_id, success, steps, wall_seconds, trace_digest, info, reported_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            task_id,
            index,
            task["submission_id"],
            task["manifest_hash"],
            fencing_token,
            task["worker_id"],
            int(result.success),
            result.steps,
            result.wall_seconds,
            result.trace_digest,
            result.info_json or "{}",
            now,
        ),
    )
    return cursor.rowcount == 0


def complete(conn: sqlite3.Connection, task_id: str, fencing_token: int, result_json: str, now: float) -> None:
    """Marks the task succeeded; refused while any of its episodes has no stored result."""
    task = _current_task(conn, task_id, fencing_token)
    stored = conn.execute("SELECT COUNT(*) FROM episode_results WHERE task_id = ?", (task_id,)).fetchone()[0]
    planned = task["episode_end"] - task["episode_start"]
    if stored != planned:
        raise PreconditionFailed(
            f"task {task_id} has {stored} of {planned} episode results; report every episode first",
            field="lease.task_id",
        )
    conn.execute(
        "UPDATE tasks SET state = 'succeeded', lease_deadline = NULL, result = ?, updated_at = ? WHERE id = ?",
        (result_json, now, task_id),
    )
    _end_attempt(conn, task, "succeeded", "", now)


def fail(
    conn: sqlite3.Connection,
    task_id: str,
    fencing_token: int,
    error: str,
    retryable: bool,
    now: float,
    reason: int = pb.FAILURE_REASON_UNSPECIFIED,
) -> str:
    """Ends an attempt as an infrastructure failure for ``reason``. Returns the task's new state.

    The text kept for people is "[reason] error"; the reason is also kept as its number.
    """
    task = _current_task(conn, task_id, fencing_token)
    state = "pending" if retryable and task["attempts"] < task["max_attempts"] else "failed"
    text = failure_text(reason, error)
    conn.execute(
        "UPDATE tasks SET state = ?, lease_deadline = NULL, last_error = ?, last_failure_reason = ?, updated_at = ?"
        " WHERE id = ?",
        (state, text, reason, now, task_id),
    )
    _end_attempt(conn, task, "failed", text, now, reason)
    return state


def release(conn: sqlite3.Connection, task_id: str, fencing_token: int, reason: str, now: float) -> None:
    """Hands a lease back without spending its attempt (a worker shutting down cleanly)."""
    task = _current_task(conn, task_id, fencing_token)
    conn.execute(
        "UPDATE tasks SET state = 'pending', attempts = attempts - 1, lease_deadline = NULL, updated_at = ?"
        " WHERE id = ?",
        (now, task_id),
    )
    _end_attempt(conn, task, "released", reason, now)


def reap_expired(conn: sqlite3.Connection, now: float) -> list[str]:
    """Reclaims every lease past its deadline, without any worker's help. Returns the task ids."""
    expired = conn.execute("SELECT * FROM tasks WHERE state = 'leased' AND lease_deadline < ?", (now,)).fetchall()
    for task in expired:
        error = f"lease expired (worker {task['worker_id']}, attempt {task['attempts']})"
        state = "pending" if task["attempts"] < task["max_attempts"] else "failed"
        conn.execute(
            "UPDATE tasks SET state = ?, lease_deadline = NULL, last_error = ?, last_failure_reason = ?,"
            " updated_at = ? WHERE seq = ?",
            (state, error, pb.FAILURE_REASON_LEASE_EXPIRED, now, task["seq"]),
        )
        _end_attempt(conn, task, "lost", error, now, pb.FAILURE_REASON_LEASE_EXPIRED)
    return [task["id"] for task in expired]


def renew_held_leases(conn: sqlite3.Connection, deadline: float) -> list[str]:
    """Moves every lease that would expire before ``deadline`` to it. Returns the task ids.

    Run once at start-up, before the reaper: while the scheduler was down its workers went on
    running episodes but could not heartbeat. Reaping those leases at restart would throw their work
    away and spend an attempt per task on the scheduler's outage (enough outages would fail tasks
    for good); instead each holder has one lease period to heartbeat again, and only a worker that
    died meanwhile loses its lease, one period later.
    """
    rows = conn.execute(
        "UPDATE tasks SET lease_deadline = ? WHERE state = 'leased' AND lease_deadline < ? RETURNING id",
        (deadline, deadline),
    ).fetchall()
    return [row["id"] for row in rows]


# ---------------------------------------------------------------------------------------------
# Operations on selections of tasks.


def _where(conn: sqlite3.Connection, selector: pb.TaskSelector, *, require: bool) -> tuple[str, list[Any]]:
    """Builds the WHERE clause for a selector; unknown submissions or task ids are refused."""
    clauses, params = [], []
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
            if value not in PB_TO_STATE:
                raise InvalidArgument(f"unknown task state {value}", field="selector.states")
            names.append(PB_TO_STATE[value])
        clauses.append(f"state IN ({','.join('?' * len(names))})")
        params.extend(names)
    if require and not clauses:
        raise InvalidArgument("select tasks by submission, task ids, route or state", field="selector")
    return (" AND ".join(clauses) or "1"), params


def cancel(conn: sqlite3.Connection, selector: pb.TaskSelector, now: float) -> int:
    where, params = _where(conn, selector, require=True)
    tasks = conn.execute(
        f"UPDATE tasks SET state = 'cancelled', lease_deadline = NULL, updated_at = ?"
        f" WHERE {where} AND state IN ('pending', 'leased') RETURNING *",
        [now, *params],
    ).fetchall()
    for task in tasks:
        if task["worker_id"]:
            conn.execute(
                "UPDATE attempts SET ended_at = ?, outcome = 'cancelled' WHERE task_id = ? AND fencing_token = ?"
                " AND outcome = 'running'",
                (now, task["id"], task["fencing_token"]),
            )
            _release_worker(conn, task["worker_id"], task["id"])
    return len(tasks)


def requeue(conn: sqlite3.Connection, selector: pb.TaskSelector, now: float) -> int:
    """Failed or cancelled tasks go back to pending with a fresh attempt budget."""
    where, params = _where(conn, selector, require=True)
    cursor = conn.execute(
        f"UPDATE tasks SET state = 'pending', attempts = 0, updated_at = ?"
        f" WHERE {where} AND state IN ('failed', 'cancelled')",
        [now, *params],
    )
    return cursor.rowcount


def set_priority(conn: sqlite3.Connection, selector: pb.TaskSelector, priority: int, now: float) -> int:
    where, params = _where(conn, selector, require=True)
    cursor = conn.execute(
        f"UPDATE tasks SET priority = ?, updated_at = ? WHERE {where} AND state IN ('pending', 'leased')",
        [priority, now, *params],
    )
    if selector.submission_id and not selector.task_ids and not selector.route and not selector.states:
        conn.execute("UPDATE submissions SET priority = ? WHERE id = ?", (priority, selector.submission_id))
    return cursor.rowcount


# ---------------------------------------------------------------------------------------------
# Reads.


def _state_counts(rows: Iterable[sqlite3.Row]) -> pb.StateCounts:
    counts = pb.StateCounts()
    for row in rows:
        setattr(counts, row["state"], getattr(counts, row["state"]) + row["n"])
        counts.total += row["n"]
    return counts


def _require_submission(conn: sqlite3.Connection, submission_id: str) -> sqlite3.Row:
    row = conn.execute("SELECT * FROM submissions WHERE id = ?", (submission_id,)).fetchone()
    if row is None:
        raise NotFound(f"no submission {submission_id!r}", field="submission_id")
    return row


def status(conn: sqlite3.Connection, submission_id: str) -> pb.GetStatusResponse:
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
            )
        )
    response.tasks.CopyFrom(_state_counts(overall))
    return response


def summary(conn: sqlite3.Connection, submission_id: str) -> pb.GetSummaryResponse:
    """Aggregates results per manifest (benchmark task x setting) from the database alone."""
    sub = _require_submission(conn, submission_id)
    response = pb.GetSummaryResponse(submission_id=submission_id, checkpoint=sub["checkpoint"])
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


def list_tasks(conn: sqlite3.Connection, selector: pb.TaskSelector, limit: int) -> pb.ListTasksResponse:
    where, params = _where(conn, selector, require=False)
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
        state=STATE_TO_PB[row["state"]],
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
    )


def get_task(conn: sqlite3.Connection, task_id: str) -> pb.GetTaskResponse:
    """One task with its whole attempt history (every lease, kept after it ends) and its results."""
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
                ),
                fencing_token=result["fencing_token"],
                worker_id=result["worker_id"],
                reported_at=result["reported_at"],
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
            )
        )
    return response
