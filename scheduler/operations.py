"""Operator actions (cancel, requeue, set priority) for every front end of the scheduler.

The gRPC service (``Cancel``, ``Requeue``, ``SetPriority``) and the dashboard's JSON API
(``POST /api/cancel``, ``/api/requeue``, ``/api/priority``) both call these coroutines. Each front
end only turns its own request into a ``TaskSelector`` and the typed error into its own status;
the checks, and the write through the group-commit writer (the scheduler's single writer), are
written once, here.
"""

from __future__ import annotations

import time

from evalfleet.v1 import scheduler_pb2 as pb
from scheduler.store import operations as store_operations
from scheduler.validation import check_priority
from scheduler.writer import GroupCommitWriter


class Operations:
    """Each action returns how many selected tasks it changed, once that change is committed.

    A selector naming an unknown submission or task is refused (``NotFound``), an empty one
    (``InvalidArgument``, field ``selector``); nothing is changed then.
    """

    def __init__(self, writer: GroupCommitWriter) -> None:
        self._writer = writer

    async def cancel(self, selector: pb.TaskSelector) -> int:
        """Cancels the selected pending and leased tasks; a leased task's worker stops at its next heartbeat."""
        now = time.time()
        return await self._writer.run(lambda conn: store_operations.cancel(conn, selector, now))

    async def requeue(self, selector: pb.TaskSelector) -> int:
        """Puts the selected failed and cancelled tasks back to pending, with a fresh attempt budget."""
        now = time.time()
        return await self._writer.run(lambda conn: store_operations.requeue(conn, selector, now))

    async def set_priority(self, selector: pb.TaskSelector, priority: int) -> int:
        """Sets the selected unfinished tasks' priority (``InvalidArgument`` outside its range)."""
        check_priority(priority)
        now = time.time()
        return await self._writer.run(lambda conn: store_operations.set_priority(conn, selector, priority, now))
