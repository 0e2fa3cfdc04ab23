"""Real LIBERO episodes through a policy served by a real remote server, per dialect (openpi-server;
the double of StarVLA's server; vla-eval's model server): scheduler →
renderer worker → evalfleet inference server (`remote` backend) → the remote, every one a process.

The remote server is killed in the middle of an episode: that attempt fails as
`policy_unavailable` (an infrastructure failure, never a result), the task is retried, and every
episode completes once the server is back at the same URL.
"""

from __future__ import annotations

import sqlite3
import time
from functools import partial
from pathlib import Path

import pytest
from libero_guard import LIBERO_MISSING, REASON
from openpi_helpers import STARVLA_DOUBLE, OpenpiServer
from procs import build_libero_manifests, submit_libero, wait_settled, wait_until
from remote_checkpoints import EPOCHS, make_remote_checkpoint
from vlaeval_helpers import VlaEvalServer

from evalfleet.processes import free_port
from evalfleet.v1 import scheduler_pb2

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.libero, pytest.mark.timeout(600)]

CAMERA = 64
MAX_STEPS = 6


# The remote server each dialect is tested against.
SERVERS = {
    "openpi": OpenpiServer,
    "starvla": partial(OpenpiServer, script=STARVLA_DOUBLE),
    "vla-eval": VlaEvalServer,
}


@pytest.mark.parametrize("dialect", sorted(SERVERS))
def test_libero_episodes_through_a_remote_survive_its_kill(dialect, scheduler, tmp_path, start_policy, start_worker):
    out = tmp_path / "manifests"
    build_libero_manifests(out, "0-1", 1, CAMERA, MAX_STEPS)

    remote = SERVERS[dialect](free_port(), tmp_path / f"{dialect}.log").run()
    try:
        root = make_remote_checkpoint(
            tmp_path / "checkpoints",
            remote.url,
            dialect=dialect,
            cameras=[{"name": n, "height": CAMERA, "width": CAMERA} for n in ("agentview", "robot0_eye_in_hand")],
            chunk_length=2,
        )
        policy = start_policy(EPOCHS[dialect], root=root)
        submit_libero(scheduler.address, policy.address, out, "remote-e2e", "--max-attempts", "4")
        start_worker(scheduler.address, [policy.address], "--routes", "libero", worker_id="lw0")

        client = scheduler.client()
        # The first step of an episode is answered (the warm-up's prompt is "warm up"): kill it now.
        remote.wait_for_line(lambda line: "answered prompt=" in line and "warm up" not in line, timeout=300)
        remote.kill()
        deadline = time.monotonic() + 300
        failed_attempt = "SELECT 1 FROM attempts WHERE outcome = 'failed'"
        wait_until(lambda: _rows(scheduler.db, failed_attempt), 300, "an attempt failed while the remote was down")
        remote.run()

        wait_settled(client, "remote-e2e", max(1.0, deadline - time.monotonic()))
        summary = client.summary("remote-e2e")
        assert summary.complete and summary.tasks.succeeded == 2, summary
        assert (summary.episodes_planned, summary.episodes_completed) == (2, 2)
        failures = _rows(scheduler.db, "SELECT failure_reason FROM attempts WHERE outcome = 'failed'")
        unavailable = scheduler_pb2.FailureReason.FAILURE_REASON_POLICY_UNAVAILABLE
        assert failures and all(reason == unavailable for (reason,) in failures), failures
        steps = _rows(scheduler.db, "SELECT steps FROM episode_results")
        assert [s for (s,) in steps] == [MAX_STEPS] * 2
        if dialect == "vla-eval":  # each EPISODE_START numbers the trial as vla-eval's client does
            started = {
                (task["suite"], task["task_id"], task["episode_idx"])
                for task in remote.episode_tasks()
                if task["episode_id"] != "warm-up"
            }
            assert started == {("libero_object", 0, 0), ("libero_object", 1, 0)}
    finally:
        remote.stop()


def _rows(db: Path, query: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()
