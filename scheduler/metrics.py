"""Prometheus metrics of the scheduler, served at ``/metrics`` on its HTTP port.

Events (RPCs by method, claims, expiries, retries, stored episodes) are counted where they happen,
in the servicer. Levels (tasks by state, workers by state) are read from the database at scrape
time with the store's own read functions, so they are never out of step with what ``scheduler
status`` shows and survive a restart. Each server owns its registry: two schedulers in one process do not collide.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from evalfleet.scheduler_api.vocabulary import TASK_STATE_NAMES
from scheduler.store import queries

T = TypeVar("T")


class Read(Protocol):
    """Runs a query on one of the scheduler's reader connections (``Readers.read_blocking``)."""

    def __call__(self, query: Callable[[sqlite3.Connection], T], /) -> T: ...


WORKER_STATES = ("active", "idle", "lost")
# Claims are one group commit: sub-millisecond idle, tens of milliseconds under a storm.
CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class _LevelCollector(Collector):
    """Tasks and workers by state, read at scrape time."""

    def __init__(self, read: Read, lease_seconds: float) -> None:
        self._read = read
        self._lease_seconds = lease_seconds

    def collect(self) -> Iterator[GaugeMetricFamily]:
        status, workers = self._read(
            lambda conn: (queries.status(conn, ""), queries.list_workers(conn, self._lease_seconds, time.time()))
        )
        tasks = GaugeMetricFamily("evalfleet_scheduler_tasks", "Tasks by state", labels=["state"])
        for state in TASK_STATE_NAMES:
            tasks.add_metric([state], getattr(status.tasks, state))
        yield tasks
        by_state = GaugeMetricFamily("evalfleet_scheduler_workers", "Workers by state", labels=["state"])
        for state in WORKER_STATES:
            by_state.add_metric([state], sum(1 for worker in workers.workers if worker.state == state))
        yield by_state
        planned = GaugeMetricFamily("evalfleet_scheduler_episodes_planned", "Episodes planned, all submissions")
        planned.add_metric([], sum(sub.episodes_planned for sub in status.submissions))
        yield planned


class SchedulerMetrics:
    def __init__(self, read: Read, lease_seconds: float) -> None:
        self.registry = CollectorRegistry()
        self.claim_seconds = Histogram(
            "evalfleet_scheduler_claim_seconds",
            "Time from a claim's arrival to its committed answer",
            buckets=CLAIM_BUCKETS,
            registry=self.registry,
        )
        self.claims = Counter(
            "evalfleet_scheduler_claims", "Claims by outcome (leased or empty)", ["outcome"], registry=self.registry
        )
        self.lease_expiries = Counter(
            "evalfleet_scheduler_lease_expiries", "Leases reclaimed past their deadline", registry=self.registry
        )
        self.retries = Counter(
            "evalfleet_scheduler_retries", "Failed attempts whose task went back to pending", registry=self.registry
        )
        self.episodes = Counter(
            "evalfleet_scheduler_episodes", "Episode results stored (rate() gives episodes/s)", registry=self.registry
        )
        self.requests = Counter(
            "evalfleet_scheduler_requests",
            "RPCs received, by method (refused ones included)",
            ["method"],
            registry=self.registry,
        )
        self.registry.register(_LevelCollector(read, lease_seconds))

    def claimed(self, started: float, leased: bool) -> None:
        self.claim_seconds.observe(time.perf_counter() - started)
        self.claims.labels("leased" if leased else "empty").inc()

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
