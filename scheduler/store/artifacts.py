"""Episode artifacts in the database: which upload belongs to which episode, and collecting them.

The bytes live in the artifact store beside the database (``scheduler.artifacts``); here are the
rows that name them. An upload is a write a worker makes about a task, so it is fenced like a
report: its lease must be the task's current one (``leases.current_task``). Each upload is kept
under the lease that made it, and an episode lists only the uploads of the lease whose result is
stored for it. Which order the worker uses does not matter: uploaded before the report, the files
show once the report is stored under the same lease; a superseded attempt cannot upload at all
(its token is stale), and what it uploaded before it was superseded never shows, since the stored
result is another lease's.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from evalfleet.scheduler_api.errors import Conflict, InvalidArgument, NotFound, PreconditionFailed
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler.store import leases


@dataclass(frozen=True)
class Upload:
    """One verified file, as the lease that uploaded it names it."""

    task_id: str
    episode_index: int
    fencing_token: int
    kind: str
    media_type: str
    sha256: str
    size: int


def store_id(conn: sqlite3.Connection) -> str:
    """This database's artifact store id (``meta.artifact_store_id``), made at its first start."""
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('artifact_store_id', ?) ON CONFLICT (key) DO NOTHING",
        (uuid.uuid4().hex,),
    )
    return str(conn.execute("SELECT value FROM meta WHERE key = 'artifact_store_id'").fetchone()[0])


def check_upload(conn: sqlite3.Connection, task_id: str, fencing_token: int, episode_index: int) -> None:
    """Refuses an upload that its lease may not make: a stale lease (as every fenced write), an
    episode outside the task, or one whose stored result another attempt reported."""
    task = leases.current_task(conn, task_id, fencing_token, field="header.lease")
    if not task["episode_start"] <= episode_index < task["episode_end"]:
        raise InvalidArgument(
            f"{episode_index} is outside this task's episodes [{task['episode_start']}, {task['episode_end']})",
            field="header.episode_index",
        )
    stored = conn.execute(
        "SELECT fencing_token FROM episode_results WHERE task_id = ? AND episode_index = ?", (task_id, episode_index)
    ).fetchone()
    if stored is not None and stored["fencing_token"] != fencing_token:
        raise PreconditionFailed(
            f"episode {episode_index}'s result was stored by fencing token {stored['fencing_token']}:"
            " only that attempt's artifacts belong to it",
            field="header.episode_index",
        )


def record_upload(conn: sqlite3.Connection, upload: Upload, now: float) -> tuple[pb.Artifact, bool]:
    """Links a stored file to its episode under its lease. Returns (the artifact, created).

    The same bytes uploaded again by the same lease for the same kind are a duplicate (a resent
    upload); other bytes are refused: the first upload stands, like the first result.
    """
    check_upload(conn, upload.task_id, upload.fencing_token, upload.episode_index)
    key = (upload.task_id, upload.episode_index, upload.fencing_token, upload.kind)
    existing = conn.execute(
        "SELECT * FROM artifacts WHERE task_id = ? AND episode_index = ? AND fencing_token = ? AND kind = ?", key
    ).fetchone()
    if existing is not None:
        if existing["sha256"] != upload.sha256:
            raise Conflict(
                f"this lease already uploaded a {upload.kind!r} artifact for episode {upload.episode_index}"
                f" ({existing['sha256']})",
                field="header.sha256",
            )
        return artifact_message(existing), False
    conn.execute(
        "INSERT OR IGNORE INTO artifact_files (sha256, size, media_type, stored_at) VALUES (?, ?, ?, ?)",
        (upload.sha256, upload.size, upload.media_type, now),
    )
    row = conn.execute(
        "INSERT INTO artifacts (task_id, episode_index, fencing_token, kind, submission_id, sha256, size,"
        " media_type, uploaded_at) SELECT ?, ?, ?, ?, submission_id, ?, ?, ?, ? FROM tasks WHERE id = ? RETURNING *",
        (*key, upload.sha256, upload.size, upload.media_type, now, upload.task_id),
    ).fetchone()
    return artifact_message(row), True


def stored_bytes(conn: sqlite3.Connection) -> int:
    """The bytes the artifact store holds (each file once, however many episodes name it)."""
    return int(conn.execute("SELECT COALESCE(SUM(size), 0) FROM artifact_files").fetchone()[0])


def stored_files(conn: sqlite3.Connection) -> set[str]:
    """The sha256 of every file the store should hold."""
    return {row[0] for row in conn.execute("SELECT sha256 FROM artifact_files")}


def has_file(conn: sqlite3.Connection, sha256: str) -> bool:
    """Whether the store holds ``sha256`` for some artifact already."""
    return conn.execute("SELECT 1 FROM artifact_files WHERE sha256 = ?", (sha256,)).fetchone() is not None


def stored_file(conn: sqlite3.Connection, sha256: str) -> sqlite3.Row:
    """The stored file ``sha256`` (size, media type); NotFound when absent or collected."""
    row: sqlite3.Row | None = conn.execute("SELECT * FROM artifact_files WHERE sha256 = ?", (sha256,)).fetchone()
    if row is not None:
        return row
    if conn.execute("SELECT 1 FROM artifacts WHERE sha256 = ?", (sha256,)).fetchone() is not None:
        raise NotFound(f"artifact {sha256} was collected (scheduler gc): its bytes are gone", field="sha256")
    raise NotFound(f"no artifact {sha256}", field="sha256")


@dataclass(frozen=True)
class Collected:
    artifacts: int
    # The files no uncollected artifact names any more, with their sizes: delete them.
    files: tuple[tuple[str, int], ...]


def collect(conn: sqlite3.Connection, submission_id: str, force: bool, now: float) -> Collected:
    """Marks a submission's artifacts collected and forgets the files nothing else names.

    Refused while the submission has pending or leased tasks, unless ``force``: their uploads are
    still to come. The caller deletes the returned files once this write is committed.
    """
    if conn.execute("SELECT 1 FROM submissions WHERE id = ?", (submission_id,)).fetchone() is None:
        raise NotFound(f"no submission {submission_id!r}", field="submission_id")
    if not force:
        running = conn.execute(
            "SELECT COUNT(*) FROM tasks WHERE submission_id = ? AND state IN ('pending', 'leased')", (submission_id,)
        ).fetchone()[0]
        if running:
            raise PreconditionFailed(
                f"submission {submission_id} has {running} task(s) pending or leased; wait for them, or force",
                field="submission_id",
            )
    rows = conn.execute(
        "UPDATE artifacts SET collected_at = ? WHERE submission_id = ? AND collected_at IS NULL RETURNING sha256",
        (now, submission_id),
    ).fetchall()
    files: list[tuple[str, int]] = []
    for sha256 in sorted({row[0] for row in rows}):
        named = conn.execute("SELECT 1 FROM artifacts WHERE sha256 = ? AND collected_at IS NULL", (sha256,)).fetchone()
        if named is None:
            deleted = conn.execute("DELETE FROM artifact_files WHERE sha256 = ? RETURNING size", (sha256,)).fetchone()
            if deleted is not None:
                files.append((sha256, deleted[0]))
    return Collected(len(rows), tuple(files))


def artifact_message(row: sqlite3.Row) -> pb.Artifact:
    return pb.Artifact(
        sha256=row["sha256"],
        kind=row["kind"],
        media_type=row["media_type"],
        size_bytes=row["size"],
        task_id=row["task_id"],
        episode_index=row["episode_index"],
        fencing_token=row["fencing_token"],
        uploaded_at=row["uploaded_at"],
        collected_at=row["collected_at"] or 0.0,
    )


def by_episode(rows: Iterable[sqlite3.Row]) -> dict[tuple[int, int], list[pb.Artifact]]:
    """Artifact rows grouped by (episode index, fencing token), for listing them on episodes."""
    grouped: dict[tuple[int, int], list[pb.Artifact]] = {}
    for row in rows:
        grouped.setdefault((row["episode_index"], row["fencing_token"]), []).append(artifact_message(row))
    return grouped
