"""Reading the scheduler's database while the scheduler may be down: what a chaos run waits on and
reconciles is read from the SQLite file itself, on read-only connections (WAL readers never block)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any


def read_db(db: Path, query: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    """A read-only query that works while the scheduler is down (WAL readers never block)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


def stored_episodes(db: Path) -> int:
    count: int = read_db(db, "SELECT COUNT(*) FROM episode_results")[0][0]
    return count


def all_tasks_done(db: Path) -> bool:
    """True once no task is pending or leased; a failed task is reported by the reconciliation."""
    states = dict(read_db(db, "SELECT state, COUNT(*) FROM tasks GROUP BY state"))
    return bool(states) and not states.get("pending") and not states.get("leased")
