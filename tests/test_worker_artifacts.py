"""Renderer workers upload the files their episodes produced: real scheduler, inference server and
worker processes, synthetic episodes that each write a stand-in artifact (``artifact_bytes``)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from procs import wait_until
from scheduler_proxy import HoldingProxy

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.policy_api.client import PolicyClient
from evalfleet.scheduler_api.client import SchedulerClient, selector
from evalfleet.v1 import scheduler_pb2 as pb

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _digest(address: str) -> str:
    with PolicyClient(address) as policy:
        return policy.identity().digest


def _artifact_options(folder: Path, size: int = 3000) -> tuple[str, ...]:
    return (
        "--adapter-option",
        "synthetic.time_scale=0.2",
        "--adapter-option",
        f"synthetic.artifact_bytes={size}",
        "--adapter-option",
        f"synthetic.artifact_dir={folder}",
    )


def _second_episode_stepping(folder: Path) -> bool:
    """The task's second episode log has a policy step: the worker is mid-episode."""
    second = sorted(folder.rglob("episode-*.jsonl"))[1:2]
    return bool(second) and '"event": "step"' in second[0].read_text()


def _artifacts_listed(client: SchedulerClient, submission: str) -> int:
    """How many stored episodes of the submission list an artifact (uploads go after the result)."""
    return sum(
        bool(episode.artifacts)
        for task in client.tasks(selector(submission)).tasks
        for episode in client.task(task.task_id).episodes
    )


def _download(client: SchedulerClient, sha256: str) -> bytes:
    out = io.BytesIO()
    client.download_artifact(sha256, out)
    return out.getvalue()


def test_a_killed_worker_s_retried_attempt_lists_its_own_artifacts(
    start_scheduler, start_policy, start_worker, tmp_path
):
    scheduler = start_scheduler("--lease-seconds", "2")
    client = scheduler.client()
    policy = start_policy("syn")
    manifest = build_synthetic(3, seed=5, mean_seconds=10.0, sigma=0.01)  # 2 s per episode at time_scale 0.2
    client.submit([manifest], "synthetic", batch_size=3, submission_id="killed", checkpoint=_digest(policy.address))
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    doomed = start_worker(scheduler.address, [policy.address], *_artifact_options(first_dir), worker_id="doomed")
    # One episode stored with its artifact, the next one under way: kill the worker mid-episode.
    wait_until(lambda: _artifacts_listed(client, "killed") >= 1, 60, "an episode stored with its artifact")
    wait_until(lambda: _second_episode_stepping(tmp_path / "episodes"), 60, "the next episode under way")
    doomed.kill()
    start_worker(scheduler.address, [policy.address], *_artifact_options(second_dir), worker_id="second")
    wait_until(lambda: client.status("killed").tasks.succeeded == 1, 120, "the task retried and done")

    (task,) = client.tasks(selector("killed")).tasks
    detail = client.task(task.task_id)
    assert task.attempts == 2 and len(detail.episodes) == 3
    first_files = {path.read_bytes() for path in first_dir.iterdir()}
    second_files = {path.read_bytes() for path in second_dir.iterdir()}
    by_attempt = {attempt.fencing_token: attempt.worker_id for attempt in detail.attempts}
    for stored in detail.episodes:
        (artifact,) = stored.artifacts  # exactly one: the scored attempt's
        assert artifact.fencing_token == stored.fencing_token and artifact.kind == "synthetic"
        data = _download(client, artifact.sha256)  # byte-identical to what that attempt's worker wrote
        assert data in (first_files if by_attempt[stored.fencing_token] == "doomed" else second_files)
        assert data.startswith(
            f"synthetic artifact {manifest.episodes[stored.result.episode_index]['episode_id']} ".encode()
        )
    assert {by_attempt[e.fencing_token] for e in detail.episodes} == {"doomed", "second"}


def test_the_worker_keeps_going_when_the_scheduler_refuses_its_uploads(
    start_scheduler, start_policy, start_worker, tmp_path
):
    scheduler = start_scheduler("--max-artifact-bytes", "1K")
    client = scheduler.client()
    policy = start_policy("syn")
    manifest = build_synthetic(4, seed=9, mean_seconds=1.0)
    client.submit([manifest], "synthetic", batch_size=2, submission_id="refused", checkpoint=_digest(policy.address))
    worker = start_worker(scheduler.address, [policy.address], *_artifact_options(tmp_path / "files", size=4096))
    wait_until(lambda: client.status("refused").tasks.succeeded == 2, 120, "every task done")

    summary = client.summary("refused")
    assert summary.episodes_completed == 4
    assert summary.episodes_succeeded == sum(e["success"] for e in manifest.episodes)
    for task in client.tasks(selector("refused")).tasks:
        assert task.attempts == 1 and all(not e.artifacts for e in client.task(task.task_id).episodes)
    log = worker.log_path.read_text()
    assert log.count("synthetic artifact") >= 4 and log.count("not stored: header.size_bytes:") >= 4
    assert "--max-artifact-bytes" in log


def test_the_next_task_is_claimed_and_run_while_an_upload_is_pending(
    start_scheduler, start_policy, start_worker, tmp_path
):
    """An upload no longer holds up the worker's loop: with the first task's upload held by the
    proxy (a double of the network), the one-slot worker claims and runs the second task; the first
    task's Complete, which carries its result, waits for its upload, still under its lease."""
    scheduler = start_scheduler("--lease-seconds", "30")
    client = scheduler.client()
    policy = start_policy("syn")
    manifest = build_synthetic(2, seed=13, mean_seconds=0.5, sigma=0.01)
    client.submit([manifest], "synthetic", batch_size=1, submission_id="behind", checkpoint=_digest(policy.address))
    files = tmp_path / "files"
    with HoldingProxy(scheduler.address) as proxy:
        proxy.hold_uploads()
        start_worker(proxy.address, [policy.address], *_artifact_options(files), worker_id="w")
        assert proxy.upload_arrived.wait(60), "the first episode's upload reached the proxy"
        wait_until(lambda: len(list(files.iterdir())) == 2, 60, "the second task's episode run")
        status = client.status("behind").tasks
        assert (status.leased, status.succeeded) == (2, 0), "both held at once: the first waits for its upload"
        assert proxy.uploads_forwarded == 0
        proxy.release_uploads()
        wait_until(lambda: client.status("behind").tasks.succeeded == 2, 60, "both tasks done")
        assert proxy.uploads_forwarded == 2

    written = {path.read_bytes() for path in files.iterdir()}
    for task in client.tasks(selector("behind")).tasks:
        assert (task.state, task.attempts) == (pb.TASK_STATE_SUCCEEDED, 1)
        (stored,) = client.task(task.task_id).episodes
        (artifact,) = stored.artifacts  # uploaded under the lease whose result is stored
        assert artifact.fencing_token == stored.fencing_token and _download(client, artifact.sha256) in written


def test_tasks_waiting_for_uploads_bound_what_the_worker_claims(start_scheduler, start_policy, start_worker, tmp_path):
    """Tasks waiting for their uploads hold leases but no slot: with every upload held, a one-slot
    worker holds two tasks (one waiting, one run) and claims no third until one ends."""
    scheduler = start_scheduler("--lease-seconds", "30")
    client = scheduler.client()
    policy = start_policy("syn")
    manifest = build_synthetic(4, seed=17, mean_seconds=0.5, sigma=0.01)
    client.submit([manifest], "synthetic", batch_size=1, submission_id="bounded", checkpoint=_digest(policy.address))
    with HoldingProxy(scheduler.address) as proxy:
        proxy.hold_uploads()
        worker = start_worker(proxy.address, [policy.address], *_artifact_options(tmp_path / "files"), worker_id="w")
        worker.wait_for_line(lambda line: "holding 2 tasks for 1 slots" in line, 60)
        status = client.status("bounded").tasks
        assert (status.leased, status.pending, status.succeeded) == (2, 2, 0), status
        proxy.release_uploads()
        wait_until(lambda: client.status("bounded").tasks.succeeded == 4, 60, "every task done")
    assert all(task.attempts == 1 for task in client.tasks(selector("bounded")).tasks)
