"""The canary's record: its settings and verdict on the submission, settled when its tasks end.

``settle`` runs in the write that ends a task (Complete, Fail, a reaped lease): when that task was
the canary's last one still pending or leased, the verdict is drawn (``scheduler.canary``) from the
episode results of the canary's tasks and stored, and a broken setup pauses the submission when its
settings ask. A submission's ``canary`` column holds a ``Canary`` message as canonical JSON.
"""

from __future__ import annotations

import json
import sqlite3

from google.protobuf import json_format

from evalfleet.v1 import scheduler_pb2 as pb
from scheduler import canary as canary_rules
from scheduler.store import leases


def initial(settings: pb.CanarySettings | None) -> str:
    """What a new submission stores: '' without a canary, else its settings, verdict running."""
    if settings is None or settings.tasks == 0:
        return ""
    return to_json(pb.Canary(settings=settings, verdict=canary_rules.RUNNING))


def to_json(message: pb.Canary) -> str:
    return json.dumps(json_format.MessageToDict(message, preserving_proto_field_name=True), sort_keys=True)


def read(text: str) -> pb.Canary:
    """The stored canary ('' reads as verdict "off")."""
    if not text:
        return pb.Canary(verdict=canary_rules.OFF)
    return json_format.ParseDict(json.loads(text), pb.Canary())


def settle(conn: sqlite3.Connection, task_id: str) -> None:
    """Draws the verdict once the canary's last task has ended (a no-op for any other task)."""
    task = conn.execute("SELECT submission_id, canary FROM tasks WHERE id = ?", (task_id,)).fetchone()
    if task is None or not task["canary"]:
        return
    submission = task["submission_id"]
    stored = read(conn.execute("SELECT canary FROM submissions WHERE id = ?", (submission,)).fetchone()["canary"])
    if stored.verdict != canary_rules.RUNNING:
        return
    still_open = conn.execute(
        "SELECT COUNT(*) FROM tasks WHERE submission_id = ? AND canary = 1 AND state IN ('pending', 'leased')",
        (submission,),
    ).fetchone()[0]
    if still_open:
        return
    rows = conn.execute(
        "SELECT r.success, r.steps, r.health FROM episode_results r JOIN tasks t ON t.id = r.task_id"
        " WHERE t.submission_id = ? AND t.canary = 1 ORDER BY t.seq, r.episode_index",
        (submission,),
    ).fetchall()
    episodes = [
        canary_rules.CanaryEpisode(
            bool(row["success"]),
            row["steps"],
            json_format.ParseDict(json.loads(row["health"]), pb.EpisodeHealth()) if row["health"] else None,
        )
        for row in rows
    ]
    found = canary_rules.findings(episodes)
    verdict = canary_rules.BROKEN if found else canary_rules.HEALTHY
    settled = pb.Canary(settings=stored.settings, verdict=verdict, findings=found, episodes=len(episodes))
    pause = verdict == canary_rules.BROKEN and stored.settings.pause
    conn.execute(
        "UPDATE submissions SET canary = ?, paused = CASE WHEN ? THEN 1 ELSE paused END WHERE id = ?",
        (to_json(settled), int(pause), submission),
    )
    if pause:
        leases.hold(conn, submission, True)
