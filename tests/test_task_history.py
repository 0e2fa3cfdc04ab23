"""Attempt history: every lease of a task is kept and readable (GetTask, `scheduler task`)."""

from __future__ import annotations

import json

import pytest
from procs import cli

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import selector
from evalfleet.scheduler_api.errors import InvalidArgument, NotFound
from evalfleet.scheduler_api.limits import MAX_TEXT_BYTES

pytestmark = pytest.mark.timeout(120)


def test_every_attempt_is_kept_with_its_worker_outcome_and_error(scheduler):
    client = scheduler.client()
    client.submit([build_synthetic(3, seed=1)], "synthetic", batch_size=3, max_attempts=5, submission_id="hist")
    first = client.claim("w1", ["synthetic"])
    client.report_episode(first, 0, True, steps=4, wall_seconds=0.5)
    assert client.fail(first, "renderer crashed", retryable=True) == "pending"
    second = client.claim("w2", ["synthetic"])
    client.release(second, "worker draining")
    third = client.claim("w3", ["synthetic"])
    assert list(third.episodes) == [1, 2]
    client.cancel(selector(task_ids=[third.task_id]))
    client.requeue(selector(task_ids=[third.task_id]))
    fourth = client.claim("w1", ["synthetic"])
    for index in fourth.episodes:
        client.report_episode(fourth, index, index == 2, steps=9, wall_seconds=1.0)
    client.complete(fourth)

    detail = client.task(first.task_id)
    assert detail.task.task_id == "hist-00000" and detail.task.episodes_done == 3
    assert [(a.fencing_token, a.worker_id, a.outcome, a.error) for a in detail.attempts] == [
        (1, "w1", "failed", "renderer crashed"),
        (2, "w2", "released", "worker draining"),
        (3, "w3", "cancelled", ""),
        (4, "w1", "succeeded", ""),
    ]
    assert all(a.ended_at >= a.started_at > 0 for a in detail.attempts)
    assert [(e.result.episode_index, e.result.success, e.fencing_token, e.worker_id) for e in detail.episodes] == [
        (0, True, 1, "w1"),
        (1, False, 4, "w1"),
        (2, True, 4, "w1"),
    ]

    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    data = json.loads(cli("task", "hist-00000", "--json", env=env).stdout)
    assert [a["outcome"] for a in data["attempts"]] == ["failed", "released", "cancelled", "succeeded"]
    assert data["task"]["state"] == "succeeded" and data["attempts"][0]["fencing_token"] == 1
    human = cli("task", "hist-00000", env=env)
    assert human.returncode == 0 and "renderer crashed" in human.stdout and "worker draining" in human.stdout


def test_an_overlong_error_is_clipped_not_refused(scheduler):
    client = scheduler.client()
    client.submit([build_synthetic(1, seed=3)], "synthetic", batch_size=1, submission_id="long")
    lease = client.claim("w1", ["synthetic"])
    assert client.fail(lease, "Traceback " + "x" * 100_000, retryable=False) == "failed"
    (attempt,) = client.task(lease.task_id).attempts
    assert attempt.error.startswith("Traceback xxx") and attempt.error.endswith("; 100010 bytes in all]")
    assert len(attempt.error.encode()) <= MAX_TEXT_BYTES


def test_a_running_attempt_has_no_end(scheduler):
    client = scheduler.client()
    client.submit([build_synthetic(2, seed=2)], "synthetic", batch_size=2, submission_id="run")
    lease = client.claim("w1", ["synthetic"])
    (attempt,) = client.task(lease.task_id).attempts
    assert (attempt.outcome, attempt.ended_at, attempt.attempt) == ("running", 0.0, 1)


def test_unknown_or_missing_task_id_is_refused_naming_the_field(scheduler):
    client = scheduler.client()
    with pytest.raises(NotFound, match="task_id"):
        client.task("nope-00000")
    with pytest.raises(InvalidArgument, match="task_id: is required"):
        client.task("")
    run = cli("task", "nope-00000", env={"EVALFLEET_SCHEDULER": scheduler.address})
    assert run.returncode == 2 and "task_id" in run.stderr
