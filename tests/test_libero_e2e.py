"""A real LIBERO evaluation end to end: scheduler, inference server and two CPU workers as processes.

The episodes are short (64x64 cameras, 2 settle steps, 6 policy steps) so that the whole
pipeline — manifest scan, submission with the policy's identity, claims, episode processes
rendering with MuJoCo, policy sessions, per-episode reports, summary — runs in CI in a minute or two.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from libero_guard import LIBERO_MISSING, REASON
from procs import build_libero_manifests, submit_libero, wait_settled

from inference_server.checkpoint import seal
from manifests import format as manifest_format

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.libero, pytest.mark.timeout(600)]

CAMERA = 64
MAX_STEPS = 6


def libero_checkpoint(root: Path) -> Path:
    """A `deterministic` reference policy reading what LIBERO observes: one camera and the gripper."""
    (root / "lib").mkdir(parents=True)
    seal(
        root / "lib",
        "deterministic",
        {
            "cameras": [{"name": "agentview", "height": CAMERA, "width": CAMERA}],
            "state": [{"name": "robot0_eef_pos", "length": 3}, {"name": "robot0_gripper_qpos", "length": 2}],
            "action_dim": 7,
            "chunk_length": 4,
        },
    )
    return root


def test_two_workers_evaluate_real_libero_episodes(scheduler, tmp_path, start_policy, start_worker):
    out = tmp_path / "manifests"
    build_libero_manifests(out, "0-1", 2, CAMERA, MAX_STEPS)
    manifests = [manifest_format.read(path) for path in sorted(out.glob("*.json"))]
    assert sorted(len(m) for m in manifests) == [2, 2]

    policy = start_policy("lib", root=libero_checkpoint(tmp_path / "checkpoints"))
    submit_libero(scheduler.address, policy.address, out, "libero-e2e")
    for name in ("lw0", "lw1"):
        start_worker(scheduler.address, [policy.address], "--routes", "libero", worker_id=name)

    client = scheduler.client()
    wait_settled(client, "libero-e2e", 420)

    summary = client.summary("libero-e2e")
    assert summary.complete and summary.tasks.succeeded == 4, summary
    assert (summary.episodes_planned, summary.episodes_completed) == (4, 4)
    assert sorted(m.task for m in summary.manifests) == sorted(m.task for m in manifests)
    assert set(summary.workers) == {"lw0", "lw1"}, "both workers ran episodes"
    tasks = client.tasks().tasks
    assert all(t.attempts == 1 for t in tasks), "no infrastructure retries"
    rows = _rows(scheduler.db, "SELECT steps, success, trace_digest FROM episode_results")
    assert [steps for steps, _, _ in rows] == [MAX_STEPS] * 4
    assert len({digest for _, _, digest in rows}) == 4, "every trial has its own trace"


def _rows(db: Path, query: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()
