"""One writer connection with group commit.

SQLite allows one writer at a time. Rather than have every gRPC handler contend for the write lock,
handlers hand their write to a single thread that owns the write connection. That thread drains
whatever writes are queued, runs each in its own SAVEPOINT inside one ``BEGIN IMMEDIATE``
transaction, commits once, and only then answers the callers. Under load many writes share one
commit (the lever that multiplies throughput); a refused write rolls back to its savepoint alone and
changes nothing; and no caller is answered before its write is durable.

When the disk under the database is full (SQLITE_FULL: the WAL or the database file cannot grow),
the whole group is rolled back and each of its callers gets ``StorageFull`` (RESOURCE_EXHAUSTED,
naming the database file); nothing of it was committed, so nothing acknowledged is lost. The thread
goes on taking writes, and they succeed again as soon as there is room: no restart is needed.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from evalfleet.scheduler_api.errors import Kind, SchedulerError

log = logging.getLogger(__name__)

T = TypeVar("T")
Write = Callable[[sqlite3.Connection], T]

MAX_GROUP = 512
# SQLite's result code for "database or disk is full" (``sqlite3.SQLITE_FULL`` from Python 3.11 on).
SQLITE_FULL = 13


class StorageFull(SchedulerError):
    """The disk under the database is full: the write was not made. It may be sent again once there
    is room (the scheduler needs no restart).

    RESOURCE_EXHAUSTED is gRPC's code for a full file system; the error kind is UNAVAILABLE, so that
    clients (``evalfleet.scheduler_api.errors.from_rpc_error``) raise ``Unavailable`` and retry the
    write as through any outage of the scheduler, rather than give up as on a refusal.
    """

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    kind = Kind.ERROR_KIND_UNAVAILABLE


def is_disk_full(exc: BaseException) -> bool:
    """SQLite's SQLITE_FULL ("database or disk is full"), from any statement or the commit."""
    return isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL


@dataclass
class _Pending:
    write: Write[Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


class GroupCommitWriter:
    """Runs writes on one connection in a dedicated thread, committing queued writes together."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._db_path = next((row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"), "")
        self._full = False
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="sqlite-writer", daemon=True)
        self.commits = 0
        self.writes = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finishes queued writes, then stops the thread and closes the connection."""
        self._queue.put(None)
        self._thread.join()
        self._conn.close()

    async def run(self, write: Write[T]) -> T:
        """Runs ``write(conn)`` in the next group; returns once it is committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Pending(write, loop, future))
        return await future

    def _run(self) -> None:
        stopping = False
        while not stopping:
            group: list[_Pending] = []
            item = self._queue.get()
            while item is not None:
                group.append(item)
                if len(group) >= MAX_GROUP:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            stopping = item is None
            if group:
                self._commit(group)

    def _commit(self, group: list[_Pending]) -> None:
        outcomes: list[tuple[bool, object]] = []
        changes = self._conn.total_changes
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            if len(group) == 1:
                outcomes.append(self._apply_alone(group[0].write))
            else:
                outcomes.extend(self._apply(pending.write) for pending in group)
            if self._conn.in_transaction:
                self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            outcomes = [(False, self._failed(exc, len(group)))] * len(group)
        else:
            # A commit that changed nothing wrote nothing, so it says nothing about the disk.
            if self._full and self._conn.total_changes > changes:
                self._full = False
                log.warning("the database %s takes writes again: the disk has room", self._db_path)
        self.commits += 1
        self.writes += len(group)
        # One wake-up of each event loop per group, not one per write.
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
        for pending, (ok, value) in zip(group, outcomes, strict=True):
            by_loop.setdefault(pending.loop, []).append((pending.future, ok, value))
        for loop, settled in by_loop.items():
            loop.call_soon_threadsafe(_settle, settled)

    def _rollback(self) -> None:
        """Ends a failed group's transaction, if SQLite has not ended it already (it may on SQLITE_FULL)."""
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                # The thread must go on serving: SQLite undoes an unfinished transaction itself.
                log.exception("rolling back a failed group failed")

    def _failed(self, exc: sqlite3.Error, writes: int) -> Exception:
        """What each caller of a failed group gets: ``StorageFull`` for a full disk, else the error."""
        if not is_disk_full(exc):
            log.error("group commit of %d writes failed", writes, exc_info=exc)
            return exc
        if not self._full:
            self._full = True
            log.warning("the database %s refuses writes: %s (free space on its disk)", self._db_path, exc)
        return StorageFull(
            f"the scheduler's database {self._db_path} is out of disk space ({exc}); nothing was written"
        )

    def _apply(self, write: Write[Any]) -> tuple[bool, Any]:
        """One write in its own savepoint: a refused or failing write changes nothing, alone."""
        self._conn.execute("SAVEPOINT write")
        try:
            result = write(self._conn)
        except Exception as exc:
            if is_disk_full(exc):
                raise  # the whole group fails: SQLite may have ended the transaction already
            if not isinstance(exc, SchedulerError):
                log.exception("write failed")
            self._conn.execute("ROLLBACK TO write")
            self._conn.execute("RELEASE write")
            return False, exc
        self._conn.execute("RELEASE write")
        return True, result

    def _apply_alone(self, write: Write[Any]) -> tuple[bool, Any]:
        """A write alone in its transaction needs no savepoint: a refusal rolls back the whole."""
        try:
            return True, write(self._conn)
        except Exception as exc:
            if is_disk_full(exc):
                raise
            if not isinstance(exc, SchedulerError):
                log.exception("write failed")
            self._conn.execute("ROLLBACK")
            return False, exc


def _settle(settled: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    """Answers each write: its result, or the exception it raised (an outcome is (ok, value))."""
    for future, ok, value in settled:
        if future.cancelled():
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
