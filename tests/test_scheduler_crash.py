"""`kill -9` of the scheduler in the middle of a claim/report storm loses no acknowledged write."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient
from evalfleet.scheduler_api.errors import StaleLease, Unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

T = TypeVar("T")
TASKS = 600
WORKERS = 6


class Storm:
    """Worker threads doing claim -> report -> complete, journaling every acknowledged write."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.running = threading.Event()
        self.running.set()
        self.finished = threading.Event()
        self.lock = threading.Condition()
        self.acked_reports: set[tuple[str, int]] = set()
        self.acked_completes: set[str] = set()
        self.errors: list[BaseException] = []

    def _retry(self, call: Callable[[], T]) -> T:
        """Retries through a scheduler outage; writes are idempotent or fenced, so retrying is safe."""
        while True:
            self.running.wait()
            try:
                return call()
            except Unavailable:
                time.sleep(0.05)

    def worker(self, n: int) -> None:
        client = SchedulerClient(self.address, timeout=5)
        try:
            while not self.finished.is_set():
                lease = self._retry(lambda: client.claim(f"w{n}", ["synthetic"]))
                if lease is None:
                    time.sleep(0.05)  # idle poll: leases lost with the crash are still expiring
                    continue
                try:
                    for index in lease.episodes:
                        self._retry(
                            lambda lease=lease, index=index: client.report_episode(
                                lease, index, index % 3 == 0, steps=index
                            )
                        )
                        with self.lock:
                            self.acked_reports.add((lease.task_id, index))
                    self._retry(lambda lease=lease: client.complete(lease))
                    with self.lock:
                        self.acked_completes.add(lease.task_id)
                        self.lock.notify_all()
                except StaleLease:
                    continue  # the lease was lost (expired while the scheduler was down)
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)
        finally:
            client.close()

    def wait_completes(self, count: int, timeout: float) -> None:
        with self.lock:
            assert self.lock.wait_for(lambda: len(self.acked_completes) >= count, timeout), "storm stalled"

    def snapshot(self) -> tuple[set[tuple[str, int]], set[str]]:
        with self.lock:
            return set(self.acked_reports), set(self.acked_completes)


def persisted(db_path) -> tuple[set[tuple[str, int]], set[str]]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    reports = {(row[0], row[1]) for row in conn.execute("SELECT task_id, episode_index FROM episode_results")}
    completes = {row[0] for row in conn.execute("SELECT id FROM tasks WHERE state = 'succeeded'")}
    conn.close()
    return reports, completes


def wait_all_succeeded(client: SchedulerClient, submission_id: str, timeout: float) -> None:
    """Polls status: a complete whose reply died with the server is not in any worker's journal."""
    deadline = time.monotonic() + timeout
    while (status := client.status(submission_id)).tasks.succeeded < status.tasks.total:
        assert time.monotonic() < deadline, f"not drained: {status.tasks}"
        time.sleep(0.1)


def test_kill_9_during_storm_loses_no_acknowledged_write(start_scheduler):
    scheduler = start_scheduler("--lease-seconds", "3")
    client = scheduler.client()
    client.submit([build_synthetic(TASKS, seed=9)], "synthetic", batch_size=1, submission_id="storm")

    storm = Storm(scheduler.address)
    threads = [threading.Thread(target=storm.worker, args=(n,), daemon=True) for n in range(WORKERS)]
    for thread in threads:
        thread.start()
    storm.wait_completes(TASKS // 4, timeout=120)

    scheduler.kill()
    storm.running.clear()
    acked_reports, acked_completes = storm.snapshot()
    stored_reports, stored_completes = persisted(scheduler.db)
    assert acked_reports <= stored_reports, f"lost reports: {sorted(acked_reports - stored_reports)[:5]}"
    assert acked_completes <= stored_completes, f"lost completes: {sorted(acked_completes - stored_completes)[:5]}"
    assert TASKS // 4 <= len(acked_completes) < TASKS, "the kill must land mid-storm"

    scheduler.restart()
    client.wait_ready(30)  # this channel saw the server die: let it reconnect before polling
    storm.running.set()
    wait_all_succeeded(client, "storm", timeout=150)
    storm.finished.set()
    for thread in threads:
        thread.join(timeout=30)
    assert not storm.errors, storm.errors

    summary = client.summary("storm")
    assert summary.complete and summary.tasks.succeeded == TASKS
    assert summary.episodes_completed == TASKS, "every episode exactly once"
    assert summary.episodes_succeeded == len(range(0, TASKS, 3))
