"""The task lifecycle table (``scheduler.store.leases.TRANSITIONS``) against the SQL that moves tasks.

Every event is driven on a real SQLite database, from every situation a task can be in, in every
variant that changes its outcome (a retryable failure or not, attempts left or not). Each change an
event makes to the task (its row, its attempts, its stored results) is recorded as (event, state
before, state after, what happened to the attempt). Every recorded change must be a row of the
table, and every row must be recorded: the table allows nothing the SQL does not do, and the SQL
does nothing the table does not allow. A refused event must change nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import episode_result, selector
from evalfleet.scheduler_api.errors import SchedulerError
from evalfleet.scheduler_api.vocabulary import TASK_STATE_NAMES
from scheduler.store import leases, operations, schema
from scheduler.store.leases import TRANSITIONS, Transition

ROUTE = "synthetic"
WORKER = "w1"
SUBMISSION = "sub"
TASK = operations.task_id_for(SUBMISSION, 0)
EPISODES = 3  # one task: the batch holds every episode
LEASE_SECONDS = 60.0
SET_UP_AT = 1000.0
EVENT_AT = 1001.0
LATER = EVENT_AT + 10 * LEASE_SECONDS  # past every lease's deadline
MANIFEST = build_synthetic(EPISODES, seed=11)


@dataclass(frozen=True)
class Snapshot:
    """What an event can change about the task; None: there is no task."""

    task: dict[str, Any]
    attempts: tuple[dict[str, Any], ...]
    results: int


def snapshot(conn: sqlite3.Connection) -> Snapshot | None:
    row = conn.execute("SELECT * FROM tasks WHERE id = ?", (TASK,)).fetchone()
    if row is None:
        return None
    attempts = conn.execute("SELECT * FROM attempts WHERE task_id = ? ORDER BY fencing_token", (TASK,))
    results = conn.execute("SELECT COUNT(*) FROM episode_results WHERE task_id = ?", (TASK,)).fetchone()[0]
    return Snapshot(dict(row), tuple(dict(a) for a in attempts), results)


def attempt_change(before: Snapshot | None, after: Snapshot) -> str | None:
    """``running`` when the event opened an attempt, the outcome when it ended one, else None."""
    old = {a["fencing_token"]: a["outcome"] for a in (before.attempts if before else ())}
    changed = [a["outcome"] for a in after.attempts if old.get(a["fencing_token"]) != a["outcome"]]
    assert len(changed) <= 1, f"one event touched several attempts: {after.attempts}"
    return changed[0] if changed else None


# ---------------------------------------------------------------------------------------------
# Driving the store.


def submit(conn: sqlite3.Connection, max_attempts: int = 3) -> None:
    definition = operations.SubmissionDefinition((MANIFEST.hash,), ROUTE, EPISODES, max_attempts, "")
    operations.submit(conn, SUBMISSION, definition, 0, "{}", SET_UP_AT)


def token(conn: sqlite3.Connection) -> int:
    """The task's current fencing token: a lease event is then refused for its state alone."""
    row = conn.execute("SELECT fencing_token FROM tasks WHERE id = ?", (TASK,)).fetchone()
    return int(row[0]) if row is not None else 1


def report(conn: sqlite3.Connection, index: int, now: float = EVENT_AT) -> None:
    leases.report_episode(conn, TASK, token(conn), episode_result(index, True, steps=1), now)


def report_next(conn: sqlite3.Connection) -> None:
    """Reports the first episode without a result (the last one again when all are stored)."""
    stored = {r[0] for r in conn.execute("SELECT episode_index FROM episode_results WHERE task_id = ?", (TASK,))}
    report(conn, min(set(range(EPISODES)) - stored, default=EPISODES - 1))


def claim(conn: sqlite3.Connection, now: float = EVENT_AT) -> None:
    leases.claim(conn, WORKER, [ROUTE], [], LEASE_SECONDS, now)


def leased(conn: sqlite3.Connection, max_attempts: int = 3) -> None:
    submit(conn, max_attempts)
    claim(conn, SET_UP_AT)


def leased_with_every_episode_reported(conn: sqlite3.Connection) -> None:
    leased(conn)
    for index in range(EPISODES):
        report(conn, index, SET_UP_AT)


def released(conn: sqlite3.Connection) -> None:
    leased(conn)
    leases.release(conn, TASK, 1, "stopping", SET_UP_AT)


def lost(conn: sqlite3.Connection) -> None:
    leased(conn)
    leases.reap_expired(conn, SET_UP_AT + 2 * LEASE_SECONDS)


def succeeded(conn: sqlite3.Connection) -> None:
    leased_with_every_episode_reported(conn)
    leases.complete(conn, TASK, 1, "{}", SET_UP_AT)


def failed(conn: sqlite3.Connection) -> None:
    leased(conn)
    leases.fail(conn, TASK, 1, "broken", False, SET_UP_AT)


def cancel(conn: sqlite3.Connection, now: float = EVENT_AT) -> None:
    operations.cancel(conn, selector(task_ids=[TASK]), now)


def cancelled_while_pending(conn: sqlite3.Connection) -> None:
    submit(conn)
    cancel(conn, SET_UP_AT)


def cancelled_while_leased(conn: sqlite3.Connection) -> None:
    leased(conn)
    cancel(conn, SET_UP_AT)


# Each situation builds the task from an empty database (with the manifest stored) at SET_UP_AT.
SITUATIONS: dict[str, Callable[[sqlite3.Connection], None]] = {
    "not submitted": lambda conn: None,
    "pending": submit,
    "pending after a released lease": released,
    "pending after a lost lease": lost,
    "leased": leased,
    "leased on its last attempt": lambda conn: leased(conn, max_attempts=1),
    "leased with every episode reported": leased_with_every_episode_reported,
    "succeeded": succeeded,
    "failed": failed,
    "cancelled while pending": cancelled_while_pending,
    "cancelled while leased": cancelled_while_leased,
}

# Each event by its name in the table, in every variant that can lead elsewhere.
EVENTS: dict[str, list[Callable[[sqlite3.Connection], object]]] = {
    "submit": [submit],
    "claim": [claim],
    "heartbeat": [lambda conn: leases.heartbeat(conn, TASK, token(conn), WORKER, LEASE_SECONDS, EVENT_AT)],
    "report_episode": [report_next],
    "complete": [lambda conn: leases.complete(conn, TASK, token(conn), "{}", EVENT_AT)],
    "fail": [
        lambda conn: leases.fail(conn, TASK, token(conn), "flaky", True, EVENT_AT),
        lambda conn: leases.fail(conn, TASK, token(conn), "broken", False, EVENT_AT),
    ],
    "release": [lambda conn: leases.release(conn, TASK, token(conn), "stopping", EVENT_AT)],
    "reap_expired": [lambda conn: leases.reap_expired(conn, LATER)],
    "renew_held_leases": [lambda conn: leases.renew_held_leases(conn, LATER)],
    "cancel": [cancel],
    "requeue": [lambda conn: operations.requeue(conn, selector(task_ids=[TASK]), EVENT_AT)],
    "set_priority": [lambda conn: operations.set_priority(conn, selector(task_ids=[TASK]), 7, EVENT_AT)],
}


def database(path: Path) -> sqlite3.Connection:
    conn = schema.connect(path)
    schema.initialize(conn)
    operations.put_manifest(conn, MANIFEST.body, MANIFEST.hash, SET_UP_AT)
    return conn


def run_event(conn: sqlite3.Connection, event: Callable[[sqlite3.Connection], object]) -> bool:
    """Runs one event as the writer does, in a savepoint; False when the store refused it."""
    conn.execute("SAVEPOINT event")
    try:
        event(conn)
    except SchedulerError:
        conn.execute("ROLLBACK TO event")
        return False
    finally:
        conn.execute("RELEASE event")
    return True


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> set[Transition]:
    """Every change each event made from each situation, as transitions."""
    seen: set[Transition] = set()
    folder = tmp_path_factory.mktemp("transitions")
    for situation, set_up in SITUATIONS.items():
        for name, variants in EVENTS.items():
            for i, event in enumerate(variants):
                conn = database(folder / f"{situation}-{name}-{i}.db".replace(" ", "_"))
                set_up(conn)
                before = snapshot(conn)
                applied = run_event(conn, event)
                after = snapshot(conn)
                conn.close()
                if after == before:
                    continue
                assert applied, f"{name} from {situation!r} was refused yet changed the task"
                assert after is not None, f"{name} from {situation!r} deleted the task"
                source = before.task["state"] if before is not None else None
                seen.add(Transition(name, source, after.task["state"], attempt_change(before, after)))
    return seen


def test_every_change_the_sql_makes_is_in_the_table(observed: set[Transition]) -> None:
    assert observed - set(TRANSITIONS) == set()


def test_every_transition_in_the_table_happens(observed: set[Transition]) -> None:
    assert set(TRANSITIONS) - observed == set()


def test_the_table_names_every_event_states_and_outcomes_of_the_schema() -> None:
    assert {t.event for t in TRANSITIONS} == set(EVENTS)
    assert len(set(TRANSITIONS)) == len(TRANSITIONS)
    assert {t.source for t in TRANSITIONS} - {None} <= set(TASK_STATE_NAMES)
    assert {t.target for t in TRANSITIONS} <= set(TASK_STATE_NAMES)
    assert {t.attempt for t in TRANSITIONS} - {None} <= set(schema.ATTEMPT_OUTCOMES)
    # Every state is reachable, and every state but the finished ones can be left.
    assert {t.target for t in TRANSITIONS} == set(TASK_STATE_NAMES)
    assert {t.source for t in TRANSITIONS if t.source != t.target} >= {"pending", "leased", "failed", "cancelled"}
