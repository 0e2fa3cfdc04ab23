"""Reads of the scheduler's database on their own connections, beside the one writer.

In WAL mode a reader sees the last committed state and never waits for the writer, so reads (the
gRPC service's Get*/List* calls, the dashboard, ``/metrics``) run on per-thread connections in a
small thread pool: off the event loop, and never queued behind writes in ``scheduler.writer``.
WAL checkpoints run here too, so the writer never stalls on one.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from scheduler.store import schema

T = TypeVar("T")
log = logging.getLogger(__name__)


class Readers:
    """Runs ``read(conn)`` on a reader connection, from the event loop or from any other thread."""

    def __init__(self, db_path: Path, threads: int = 4) -> None:
        self._db_path = db_path
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sqlite-reader")

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = schema.connect(self._db_path)
        return conn

    async def run(self, read: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: read(self._connection()))

    def run_blocking(self, read: Callable[[sqlite3.Connection], T]) -> T:
        """For threads outside the event loop (the dashboard's, a metrics scrape)."""
        return self._pool.submit(lambda: read(self._connection())).result()

    async def checkpoint_wal(self) -> None:
        """Copies committed WAL pages into the database file, without blocking the writer."""
        await self.run(schema.checkpoint)

    def close(self) -> None:
        """Empties the WAL into the database file (after the writer stopped), then stops the threads."""
        try:
            self.run_blocking(lambda conn: schema.checkpoint(conn, "TRUNCATE"))
        except sqlite3.Error as exc:  # e.g. a full disk: the WAL stays, and the next start reads it
            log.warning("the WAL was not emptied at shutdown: %s", exc)
        self._pool.shutdown(wait=True)
