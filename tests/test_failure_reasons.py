"""Failure reasons and error kinds are wire enums: typed on Fail, kept per attempt, counted in the
summary, and upgraded from the "[reason] text" a version-1 database kept."""

from __future__ import annotations

import sqlite3
import time

import grpc
import pytest
from procs import cli

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.errors import InvalidArgument, StaleLease
from evalfleet.v1 import scheduler_pb2 as pb
from evalfleet.v1 import scheduler_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(120)


def _db_fingerprint(path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return [
            *conn.execute("SELECT id, state, attempts, last_error, last_failure_reason FROM tasks ORDER BY id"),
            *conn.execute("SELECT task_id, fencing_token, outcome, error, failure_reason FROM attempts ORDER BY 1, 2"),
        ]


def test_a_failure_keeps_its_reason_on_the_attempt_the_task_and_the_summary(scheduler):
    client = scheduler.client()
    client.submit([build_synthetic(2, seed=1)], "synthetic", batch_size=2, max_attempts=3, submission_id="why")
    first = client.claim("w1", ["synthetic"])
    assert client.fail(first, "episode 0 ran past 1.0s", reason=pb.FAILURE_REASON_TIMEOUT) == "pending"
    second = client.claim("w2", ["synthetic"])
    client.fail(second, "episode process exited with code -9", reason=pb.FAILURE_REASON_SIMULATOR_CRASH)
    third = client.claim("w3", ["synthetic"])
    client.fail(third, "a text-only failure from an older client")

    detail = client.task(first.task_id)
    assert [(a.outcome, a.failure_reason, a.error) for a in detail.attempts] == [
        ("failed", pb.FAILURE_REASON_TIMEOUT, "[timeout] episode 0 ran past 1.0s"),
        ("failed", pb.FAILURE_REASON_SIMULATOR_CRASH, "[simulator_crash] episode process exited with code -9"),
        ("failed", pb.FAILURE_REASON_UNSPECIFIED, "a text-only failure from an older client"),
    ]
    assert detail.task.state == pb.TASK_STATE_FAILED
    assert detail.task.last_failure_reason == pb.FAILURE_REASON_UNSPECIFIED

    (manifest,) = client.summary("why").manifests
    assert [(f.reason, f.attempts) for f in manifest.failures] == [
        (pb.FAILURE_REASON_UNSPECIFIED, 1),
        (pb.FAILURE_REASON_SIMULATOR_CRASH, 1),
        (pb.FAILURE_REASON_TIMEOUT, 1),
    ]


def test_an_expired_lease_is_lost_for_the_scheduler_s_own_reason(start_scheduler):
    scheduler = start_scheduler("--lease-seconds", "1")
    client = scheduler.client()
    client.submit([build_synthetic(1, seed=2)], "synthetic", batch_size=1, submission_id="lost")
    lease = client.claim("gone", ["synthetic"])
    deadline = time.monotonic() + 30
    while client.task(lease.task_id).task.state != pb.TASK_STATE_PENDING:
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.1)
    detail = client.task(lease.task_id)
    assert [(a.outcome, a.failure_reason) for a in detail.attempts] == [("lost", pb.FAILURE_REASON_LEASE_EXPIRED)]
    assert detail.task.last_failure_reason == pb.FAILURE_REASON_LEASE_EXPIRED
    (manifest,) = client.summary("lost").manifests
    assert [(f.reason, f.attempts) for f in manifest.failures] == [(pb.FAILURE_REASON_LEASE_EXPIRED, 1)]


@pytest.mark.parametrize(
    ("reason", "why"),
    [(99, "99 is not a FailureReason"), (pb.FAILURE_REASON_LEASE_EXPIRED, "set by the scheduler only")],
)
def test_a_reason_a_worker_may_not_give_is_refused_and_changes_nothing(scheduler, reason, why):
    client = scheduler.client()
    client.submit([build_synthetic(1, seed=3)], "synthetic", batch_size=1, submission_id="bad")
    lease = client.claim("w1", ["synthetic"])
    before = _db_fingerprint(scheduler.db)
    with pytest.raises(InvalidArgument) as refused:
        client.fail(lease, "no", reason=reason)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert str(refused.value).startswith("reason: ") and why in str(refused.value)
    assert _db_fingerprint(scheduler.db) == before


def test_the_error_kind_travels_as_its_enum_name(scheduler):
    client = scheduler.client()
    client.submit([build_synthetic(1, seed=4)], "synthetic", batch_size=1, submission_id="kind")
    lease = client.claim("w1", ["synthetic"])
    stale = pb.LeaseRef(task_id=lease.task_id, fencing_token=lease.fencing_token + 1)
    with grpc.insecure_channel(scheduler.address) as channel:
        with pytest.raises(grpc.RpcError) as raw:
            pb_grpc.SchedulerStub(channel).Heartbeat(pb.HeartbeatRequest(lease=stale), timeout=10)
    assert raw.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert ("evalfleet-error", "ERROR_KIND_STALE_LEASE") in tuple(raw.value.trailing_metadata())
    with pytest.raises(StaleLease):
        client.fail(pb.Lease(task_id=lease.task_id, fencing_token=lease.fencing_token + 1), "late")


def test_a_version_1_database_is_upgraded_with_reasons_read_from_its_text(start_scheduler):
    scheduler = start_scheduler("--lease-seconds", "30")
    client = scheduler.client()
    client.submit([build_synthetic(2, seed=5)], "synthetic", batch_size=1, max_attempts=3, submission_id="old")
    first = client.claim("w1", ["synthetic"])
    client.fail(first, "episode 0 ran past 1.0s", reason=pb.FAILURE_REASON_TIMEOUT)
    second = client.claim("w1", ["synthetic"])
    assert second.task_id == first.task_id
    client.fail(second, "renderer crashed")
    scheduler.kill()

    # What version 1 wrote: the same text, no reason columns.
    with sqlite3.connect(scheduler.db) as conn:
        conn.execute("ALTER TABLE tasks DROP COLUMN last_failure_reason")
        conn.execute("ALTER TABLE attempts DROP COLUMN failure_reason")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        conn.execute("UPDATE tasks SET state = 'pending', lease_deadline = NULL")
        conn.execute(
            "UPDATE attempts SET outcome = 'lost', error = 'lease expired (worker w1, attempt 1)'"
            " WHERE error = 'renderer crashed'"
        )
    scheduler.restart()

    attempts = client.task(first.task_id).attempts
    assert [(a.outcome, a.failure_reason) for a in attempts] == [
        ("failed", pb.FAILURE_REASON_TIMEOUT),
        ("lost", pb.FAILURE_REASON_LEASE_EXPIRED),
    ]
    assert client.task(first.task_id).task.last_failure_reason == pb.FAILURE_REASON_UNSPECIFIED
    with sqlite3.connect(scheduler.db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("2",)
    assert cli("status", env={"EVALFLEET_SCHEDULER": scheduler.address}).returncode == 0


def test_a_database_from_a_newer_scheduler_is_refused(start_scheduler, tmp_path):
    scheduler = start_scheduler()
    scheduler.kill()
    with sqlite3.connect(scheduler.db) as conn:
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    with pytest.raises(RuntimeError, match="exited with 2"):
        scheduler.restart()
    log = scheduler.log_path.read_text()
    assert "database schema version 3 is newer than this scheduler's (2)" in log
    assert "Traceback" not in log
