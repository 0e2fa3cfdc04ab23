"""Failure reasons and error kinds are wire enums: typed on Fail, kept per attempt, counted in the
summary, and upgraded from the "[reason] text" a version-1 database kept."""

from __future__ import annotations

import json
import sqlite3
import time

import grpc
import pytest
from procs import cli, db_fingerprint

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.errors import InvalidArgument, StaleLease
from evalfleet.v1 import scheduler_pb2 as pb
from evalfleet.v1 import scheduler_pb2_grpc as pb_grpc
from scheduler.store.schema import SCHEMA_VERSION, VERSION_3_COLUMNS

pytestmark = pytest.mark.timeout(120)


def test_a_failure_keeps_its_reason_on_the_attempt_the_task_and_the_summary(scheduler, tmp_path):
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

    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    shown = json.loads(cli("task", first.task_id, "--json", env=env).stdout)
    assert [a["failure_reason"] for a in shown["attempts"]] == ["timeout", "simulator_crash", ""]
    table = cli("task", first.task_id, env={**env, "COLUMNS": "200"}).stdout
    assert "simulator_crash" in table and "episode process exited with code -9" in table
    assert "[simulator_crash]" not in table, "the reason has a column of its own"

    summary = json.loads(cli("summary", "why", "--json", env=env).stdout)
    assert summary["manifests"][0]["failures"] == [
        {"reason": "", "attempts": 1},
        {"reason": "simulator_crash", "attempts": 1},
        {"reason": "timeout", "attempts": 1},
    ]
    assert "unspecified 1, simulator_crash 1, timeout 1" in cli("summary", "why", env={**env, "COLUMNS": "250"}).stdout
    cli("summary", "why", "--out", str(tmp_path / "RESULTS.json"), env=env)
    results = json.loads((tmp_path / "RESULTS.json").read_text())
    assert results["by_task"][0]["failed_attempts"] == {"unspecified": 1, "simulator_crash": 1, "timeout": 1}


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
    before = db_fingerprint(scheduler.db)
    with pytest.raises(InvalidArgument) as refused:
        client.fail(lease, "no", reason=reason)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert str(refused.value).startswith("reason: ") and why in str(refused.value)
    assert db_fingerprint(scheduler.db) == before


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

    # What version 1 wrote: the same text, no reason columns (nor version 3's).
    with sqlite3.connect(scheduler.db) as conn:
        for table, column, _ in VERSION_3_COLUMNS:
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
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
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    assert cli("status", env={"EVALFLEET_SCHEDULER": scheduler.address}).returncode == 0


def test_a_database_from_a_newer_scheduler_is_refused(start_scheduler, tmp_path):
    scheduler = start_scheduler()
    scheduler.kill()
    with sqlite3.connect(scheduler.db) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(RuntimeError, match="exited with 2"):
        scheduler.restart()
    log = scheduler.log_path.read_text()
    assert f"database schema version {SCHEMA_VERSION + 1} is newer than this scheduler's ({SCHEMA_VERSION})" in log
    assert "Traceback" not in log
