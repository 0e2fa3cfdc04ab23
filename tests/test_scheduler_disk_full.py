"""The scheduler's database on a disk that fills up while workers report to it.

A real scheduler serves from a small filesystem of its own (tests/small_disk.py) while four
clients claim, report and complete tasks as workers do; a ballast file then takes every free byte.
Writes must be refused with RESOURCE_EXHAUSTED naming the database file, reads must go on, every
acknowledged result must survive a kill -9 and restart, SQLite's integrity check must pass, and the
same scheduler process must take writes again once the ballast is deleted.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import grpc
import pytest
from procs import wait_until
from small_disk import fill, require_small_disk

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.errors import SchedulerError

pytestmark = pytest.mark.timeout(300)

T = TypeVar("T")
CLIENTS = 4
EPISODES = 240
PAD = "x" * 8000  # each result carries 8 kB, so the WAL must grow to take it


def test_a_full_disk_refuses_writes_loses_nothing_and_the_scheduler_resumes_by_itself(start_scheduler, tmp_path):
    with require_small_disk(tmp_path / "disk", 12) as disk:
        db = disk / "scheduler.sqlite"
        scheduler = start_scheduler("--lease-seconds", "60", db=db)
        client = scheduler.client()
        manifest = build_synthetic(EPISODES, seed=11)
        client.submit([manifest], "synthetic", batch_size=4, submission_id="full")
        pid = scheduler.pid

        lock = threading.Lock()
        acknowledged: set[tuple[str, int]] = set()
        refusals: list[SchedulerError] = []
        full, freed = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def retried(call: Callable[[], T]) -> T:
            """The call, sent again after each disk-full refusal once space is freed (as a worker would)."""
            for _ in range(600):
                try:
                    return call()
                except SchedulerError as exc:
                    if exc.code != grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise
                    with lock:
                        refusals.append(exc)
                    full.set()
                    assert freed.wait(120), "the test never freed the disk"
                    time.sleep(0.05)  # a worker's pause between retries, not a synchronization
            raise AssertionError("writes were still refused 600 tries after space was freed")

        def work(name: str) -> None:
            try:
                with scheduler.client() as mine:
                    while (lease := retried(lambda: mine.claim(name, ["synthetic"]))) is not None:
                        for index in lease.episodes:
                            retried(functools.partial(mine.report_episode, lease, index, True, info={"pad": PAD}))
                            with lock:
                                acknowledged.add((lease.task_id, index))
                        retried(functools.partial(mine.complete, lease))
            except BaseException as exc:
                errors.append(exc)
                full.set()

        threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        wait_until(lambda: len(acknowledged) >= 8, 60, "the clients reporting")
        ballast = fill(disk)
        assert full.wait(120), "no write was refused on a full disk"
        assert not errors, errors

        refusal = refusals[0]
        assert str(db) in str(refusal) and "out of disk space" in str(refusal)
        assert client.status("full").tasks.total == EPISODES // 4, "reads go on while writes are refused"
        before_free = len(acknowledged)
        # The WAL cannot be emptied into a database file that cannot grow: the checkpoint waits too.
        waits = f"the WAL checkpoint waits for room on the disk of {db}"
        wait_until(lambda: waits in scheduler.log_path.read_text(), 30, "a checkpoint tried on the full disk")

        ballast.unlink()
        freed.set()
        for thread in threads:
            thread.join(240)
        assert not errors, errors
        assert scheduler.pid == pid and scheduler.running, "the same scheduler process resumed"
        assert len(acknowledged) == EPISODES and before_free < EPISODES
        assert client.status("full").tasks.succeeded == EPISODES // 4

        log = scheduler.log_path.read_text()
        assert f"the database {db} refuses writes" in log
        assert f"the database {db} takes writes again" in log
        assert "Traceback" not in log

        scheduler.kill()
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            stored = set(conn.execute("SELECT task_id, episode_index FROM episode_results").fetchall())
        assert acknowledged <= stored
        scheduler.restart()
        (summary,) = scheduler.client().summary("full").manifests
        assert summary.episodes_completed == EPISODES
        scheduler.kill()
