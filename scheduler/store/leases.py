"""The task lifecycle: what workers, and the scheduler's own timers, do to tasks under lease.

``TRANSITIONS`` lists every state change a task can make and the event that makes it; there is one
function per event, each a write on one connection inside a transaction the caller owns (see
``scheduler.writer``). The worker events and the scheduler's timers are written here; submission
and the operator events (cancel, requeue, set_priority) in ``scheduler.store.operations``.
``tests/test_store_transitions.py`` drives every event on a real database and checks the SQL of
both modules against the table. The lease rules:

- claim: the highest-priority, oldest pending task on the worker's routes becomes ``leased`` with
  attempt + 1, fencing token + 1 and a deadline;
- every write about a task carries its fencing token; a token that is not the current one, or a
  task no longer leased, is refused (``StaleLease``);
- an expired lease is reclaimed by ``reap_expired`` alone: the attempt counts as lost
  (``FAILURE_REASON_LEASE_EXPIRED``) and the task goes back to pending while attempts remain, else
  to failed;
- a scheduler restart first gives every held lease one lease period (``renew_held_leases``): the
  scheduler's own outage costs no worker its task;
- a policy failure is an episode *result*; only infrastructure failures spend attempts.

Every function returns plain values (a state name, task ids), except ``claim``, which grants the
lease as the wire's ``Lease`` message the worker receives.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf import json_format

from evalfleet.scheduler_api.errors import InvalidArgument, NotFound, PreconditionFailed, StaleLease
from evalfleet.scheduler_api.vocabulary import failure_text
from evalfleet.v1 import scheduler_pb2 as pb


@dataclass(frozen=True)
class Transition:
    """``event`` moves a task from ``source`` to ``target`` (``source`` None: the task is new).

    ``attempt`` is what the event does to the task's attempt record: ``running`` opens one, any
    other outcome ends the current one with it, None leaves it alone.
    """

    event: str
    source: str | None
    target: str
    attempt: str | None = None


TRANSITIONS: tuple[Transition, ...] = (
    Transition("submit", None, "pending"),
    # A worker's events.
    Transition("claim", "pending", "leased", attempt="running"),
    Transition("heartbeat", "leased", "leased"),
    Transition("report_episode", "leased", "leased"),
    Transition("complete", "leased", "succeeded", attempt="succeeded"),
    Transition("fail", "leased", "pending", attempt="failed"),  # retryable, and attempts remain
    Transition("fail", "leased", "failed", attempt="failed"),
    Transition("release", "leased", "pending", attempt="released"),  # the attempt is handed back
    # The scheduler's timers.
    Transition("reap_expired", "leased", "pending", attempt="lost"),  # attempts remain
    Transition("reap_expired", "leased", "failed", attempt="lost"),
    Transition("renew_held_leases", "leased", "leased"),
    # An operator's actions.
    Transition("cancel", "pending", "cancelled"),
    Transition("cancel", "leased", "cancelled", attempt="cancelled"),  # the worker learns at its heartbeat
    Transition("requeue", "failed", "pending"),  # with a fresh attempt budget
    Transition("requeue", "cancelled", "pending"),
    Transition("set_priority", "pending", "pending"),
    Transition("set_priority", "leased", "leased"),
)


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
    stacks: Sequence[str] = (),
) -> None:
    """Records a worker and what it serves (routes, simulator stacks); registering again updates it
    (a restarted worker)."""
    conn.execute(
        "INSERT INTO workers (id, host, gpu_uuid, routes, versions, registered_at, last_seen, stacks)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET host = excluded.host, gpu_uuid = excluded.gpu_uuid,"
        " routes = excluded.routes, versions = excluded.versions, last_seen = excluded.last_seen,"
        " stacks = excluded.stacks",
        (worker_id, host, gpu_uuid, json.dumps(list(routes)), versions, now, now, json.dumps(list(stacks))),
    )


def _claim_order(row: sqlite3.Row) -> tuple[int, int, int, int]:
    """The claim index's order, for comparing the heads of several of its ranges."""
    return (-row["priority"], row["dispatch_group"], row["dispatch_rank"], row["seq"])


# The pending rows of one (route, checkpoint, stack) that the claim index holds, and its order.
_CLAIMABLE = (
    "SELECT seq, priority, dispatch_group, dispatch_rank FROM tasks WHERE state = 'pending' AND held = 0"
    " AND route = ? AND checkpoint = ? AND stack = ?"
)
_IN_GROUP_ORDER = "ORDER BY dispatch_group, dispatch_rank, seq LIMIT 1"


def full_groups(conn: sqlite3.Connection) -> set[int]:
    """The dispatch groups whose leased tasks reached their submission's cap (``max_leased``). Read
    from the leased tasks alone (as many as the fleet has slots), so it costs a claim little."""
    rows = conn.execute(
        "SELECT t.dispatch_group AS grp, COUNT(*) AS leased, MAX(s.max_leased) AS cap FROM tasks t"
        " JOIN submissions s ON s.id = t.submission_id WHERE t.state = 'leased' AND s.max_leased > 0"
        " GROUP BY t.dispatch_group"
    ).fetchall()
    return {row["grp"] for row in rows if row["leased"] >= row["cap"]}


def _head(conn: sqlite3.Connection, where: tuple[str, str, str], full: set[int]) -> sqlite3.Row | None:
    """The first pending row of one (route, checkpoint, stack) outside the ``full`` groups. A full
    group is stepped past with an index seek (the rest of its priority after it, else the next
    priority down), never row by row: a capped submission of 100,000 tasks costs a claim a few
    seeks, once per full group ahead of the row it finds."""
    row: sqlite3.Row | None = conn.execute(
        f"{_CLAIMABLE} ORDER BY priority DESC, dispatch_group, dispatch_rank, seq LIMIT 1", where
    ).fetchone()
    while row is not None and row["dispatch_group"] in full:
        priority, group = row["priority"], row["dispatch_group"]
        row = (
            conn.execute(
                f"{_CLAIMABLE} AND priority = ? AND dispatch_group > ? {_IN_GROUP_ORDER}",
                (*where, priority, group),
            ).fetchone()
            or conn.execute(
                f"{_CLAIMABLE} AND priority < ? ORDER BY priority DESC, dispatch_group, dispatch_rank, seq LIMIT 1",
                (*where, priority),
            ).fetchone()
        )
    return row


def hold(conn: sqlite3.Connection, submission_id: str, paused: bool) -> None:
    """Marks all of a submission's tasks held (or not) as its ``paused`` flag says: held pending
    tasks are outside the claim index, and a leased one that returns to pending stays held."""
    conn.execute(
        "UPDATE tasks SET held = ? WHERE submission_id = ? AND held != ?", (int(paused), submission_id, int(paused))
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
    stacks: Sequence[str] = (),
) -> pb.Lease | None:
    """Leases the best pending task on ``routes`` that needs no checkpoint or one in ``checkpoints``,
    and no simulator stack or one in ``stacks`` (exactly: a task is never handed to a worker whose
    adapter would refuse its manifest's versions, so it waits, pending, for one that would not).

    The best is the highest priority, then the oldest, of the submissions not paused, past the
    dispatch groups at their cap of tasks leased at once (``full_groups``). None when no task is
    pending there; either way the worker counts as seen. The lease's ``episodes`` are only
    the task's episodes without a stored result, so a retried task resumes; its ``execute_steps``
    is the submission's override of the actions executed per chunk, unset when the checkpoint's
    applies.
    """
    best: sqlite3.Row | None = None
    full = full_groups(conn)
    for route in dict.fromkeys(routes):
        for checkpoint in dict.fromkeys(["", *checkpoints]):
            for stack in dict.fromkeys(["", *stacks]):
                row = _head(conn, (route, checkpoint, stack), full)
                if row is not None and (best is None or _claim_order(row) < _claim_order(best)):
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
        episodes=tuple(i for i in range(task["episode_start"], task["episode_end"]) if i not in done),
        route=task["route"],
        checkpoint=task["checkpoint"],
        lease_seconds=lease_seconds,
        execute_steps=task["execute_steps"],
    )


def current_task(conn: sqlite3.Connection, task_id: str, fencing_token: int, field: str = "lease") -> sqlite3.Row:
    """The fencing rule, in one place: the task exists, the token is its latest, and it is leased.

    ``field`` names the request's ``LeaseRef`` in refusals (an artifact upload's is ``header.lease``).
    """
    task: sqlite3.Row | None = conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
    if task is None:
        raise NotFound(f"no task {task_id!r}", field=f"{field}.task_id")
    if task["fencing_token"] != fencing_token:
        raise StaleLease(
            f"task {task_id} is at fencing token {task['fencing_token']}, this lease holds {fencing_token}",
            field=f"{field}.fencing_token",
        )
    if task["state"] != "leased":
        raise StaleLease(f"task {task_id} is {task['state']}, no longer leased", field=field)
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


def end_cancelled_attempt(conn: sqlite3.Connection, task: sqlite3.Row, now: float) -> None:
    """Ends the running attempt of a task just cancelled (``task``: its row), freeing its worker.

    The worker goes on until its next heartbeat answers ``cancelled``; whatever it writes after is
    refused, since the task is no longer leased.
    """
    conn.execute(
        "UPDATE attempts SET ended_at = ?, outcome = 'cancelled' WHERE task_id = ? AND fencing_token = ?"
        " AND outcome = 'running'",
        (now, task["id"], task["fencing_token"]),
    )
    _release_worker(conn, task["worker_id"], task["id"])


def heartbeat(
    conn: sqlite3.Connection, task_id: str, fencing_token: int, worker_id: str, lease_seconds: float, now: float
) -> tuple[float, bool]:
    """Extends the lease. Returns (deadline, cancelled); a cancelled task's worker must stop."""
    task = conn.execute("SELECT state, fencing_token FROM tasks WHERE id = ?", (task_id,)).fetchone()
    if task is not None and task["state"] == "cancelled" and task["fencing_token"] == fencing_token:
        return now, True
    current_task(conn, task_id, fencing_token)
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
    """Stores one episode result as it arrives. Returns True when it was already stored.

    The first result stored for an episode stands: a duplicate (a retried report) changes nothing.
    An index outside the task's episodes is refused naming ``field``. How the episode was run
    (``execute_steps``, ``remote``) is stored with it.
    """
    task = current_task(conn, task_id, fencing_token)
    index = result.episode_index
    if not task["episode_start"] <= index < task["episode_end"]:
        raise InvalidArgument(
            f"{index} is outside this task's episodes [{task['episode_start']}, {task['episode_end']})",
            field=f"{field}.episode_index",
        )
    cursor = conn.execute(
        "INSERT OR IGNORE INTO episode_results (task_id, episode_index, submission_id, manifest_hash,"
        " fencing_token, worker_id, success, steps, wall_seconds, trace_digest, info, reported_at,"
        " execute_steps, remote, health)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            result.execute_steps if result.HasField("execute_steps") else None,
            remote_json(result.remote) if result.HasField("remote") else "",
            health_json(result.health) if result.HasField("health") else "",
        ),
    )
    return cursor.rowcount == 0


def health_json(health: pb.EpisodeHealth) -> str:
    """How a result's episode health is stored (read back by the canary)."""
    return json.dumps(json_format.MessageToDict(health, preserving_proto_field_name=True), sort_keys=True)


def remote_json(remote: pb.RemotePolicy) -> str:
    """How a result's remote policy server is stored (and grouped by): canonical JSON."""
    return json.dumps(
        json_format.MessageToDict(remote, preserving_proto_field_name=True, always_print_fields_with_no_presence=True),
        sort_keys=True,
        separators=(",", ":"),
    )


def complete(conn: sqlite3.Connection, task_id: str, fencing_token: int, result_json: str, now: float) -> None:
    """Marks the task succeeded; refused while any of its episodes has no stored result."""
    task = current_task(conn, task_id, fencing_token)
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

    The task goes back to pending when the failure is retryable and attempts remain, else it fails.
    The text kept for people is "[reason] error"; the reason is also kept as its number.
    """
    task = current_task(conn, task_id, fencing_token)
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
    task = current_task(conn, task_id, fencing_token)
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
