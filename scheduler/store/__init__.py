"""The scheduler's state in SQLite, one module per job.

- ``schema``: the tables, opening a connection (WAL mode), upgrading a database an older
  scheduler wrote (in one transaction) and refusing one of a newer or unknown version;
- ``backup``: a consistent copy of the database taken while the scheduler serves, and its check;
- ``leases``: the task lifecycle as a transition table, and the events workers and the scheduler's
  timers make (claim, heartbeat, report_episode, complete, fail, release, reap_expired,
  renew_held_leases); a claim returns the wire's ``Lease``;
- ``operations``: what an operator does (put_manifest, submit, cancel, requeue, set_priority);
- ``queries``: the reads, and their projection into the wire's messages.

The store trusts its callers on field shapes: requests are checked before they get here
(``scheduler.validation``).

Writes take one connection inside a transaction their caller owns (``scheduler.writer`` runs them,
the only writer); reads take a reader connection. Callers import the module they need, e.g.
``from scheduler.store import leases``.
"""
