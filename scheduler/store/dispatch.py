"""The order a submission's tasks are claimed in: its dispatch group and each task's rank.

Claims take the pending task first in ``(priority DESC, dispatch_group, dispatch_rank, seq)``. A
submission's tasks share one group, the seq its first task was given, so equal priorities are
served first come, first served as before; a paired sequential submission (B, compared with A)
takes A's group, so that B's task of rank r is claimed right beside A's of the same rank and the
two advance together. Within a group the rank is the insertion order (the canary's tasks first),
or for a sequential submission a seeded random order: the sequential statistics read results in
rank order and are valid only if that order is a uniformly random one, fixed before any result.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence


def random_order(seed: int, count: int) -> list[int]:
    """Task indices 0..count-1 in the order the seed draws: sorted by sha256 of "seed:index", so
    the order depends on nothing but the seed and the layout (not on the Python release)."""
    return sorted(range(count), key=lambda index: hashlib.sha256(f"{seed}:{index}".encode()).digest())


def given_order(count: int, first: Sequence[int]) -> list[int]:
    """Task indices with ``first`` (the canary's, in index order) ahead of the rest, in index order."""
    ahead = sorted(set(first))
    chosen = set(ahead)
    return [*ahead, *(index for index in range(count) if index not in chosen)]


def group_for(conn: sqlite3.Connection, submission_id: str, partner: str = "") -> int:
    """The submission's dispatch group: the one its tasks already have, else its partner's (a
    paired sequential submission), else the seq the next task will be given."""
    for owner in (submission_id, partner):
        if owner:
            row = conn.execute("SELECT MIN(dispatch_group) FROM tasks WHERE submission_id = ?", (owner,)).fetchone()
            if row[0] is not None:
                return int(row[0])
    return int(conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM tasks").fetchone()[0])
