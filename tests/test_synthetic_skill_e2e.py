"""Policy-decided synthetic outcomes through real processes: a scheduler, two `synthetic-skill`
inference servers (A and B, different skill and own draws) and a renderer worker running the real
synthetic adapter. Each stored result must be the one the entry's draws and the checkpoint's
declared skill decide, two checkpoints must agree on every episode whose seed decides it, and a
success must end after its fraction of the steps while a failure takes them all."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from procs import wait_settled

from benchmarks.synthetic.adapter import REFERENCE_POLICY_SETTINGS
from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.policy_api.client import PolicyClient
from evalfleet.scheduler_api.client import SchedulerClient
from inference_server.backends.reference import skill_draw
from inference_server.checkpoint import seal

pytestmark = pytest.mark.timeout(180)

BASE_RATE, STEPS_PER_SECOND = 0.4, 10.0
SKILLS = {"A": (0.0, 1), "B": (0.3, 2)}  # name -> (success_shift, seed)


def stored(client: SchedulerClient, submission_id: str) -> dict[int, tuple[bool, int]]:
    """(success, steps) of each stored episode, by episode index (one manifest)."""
    found = {}
    for task in client.tasks().tasks:
        if task.submission_id == submission_id:
            for episode in client.task(task.task_id).episodes:
                found[episode.result.episode_index] = (episode.result.success, episode.result.steps)
    return found


def test_stored_outcomes_are_the_ones_the_draws_and_the_declared_skill_decide(
    scheduler, start_policy, start_worker, tmp_path: Path
) -> None:
    root = tmp_path / "checkpoints"
    for name, (shift, seed) in SKILLS.items():
        (root / name).mkdir(parents=True)
        seal(root / name, "synthetic-skill", {**REFERENCE_POLICY_SETTINGS, "success_shift": shift, "seed": seed})
    servers = {name: start_policy(name, root=root) for name in SKILLS}
    digests = {}
    for name, server in servers.items():
        with PolicyClient(server.address) as policy:
            digests[name] = policy.identity().digest
    start_worker(
        scheduler.address,
        [s.address for s in servers.values()],
        "--routes",
        "synthetic",
        "--concurrency",
        "2",
        "--adapter-option",
        "synthetic.time_scale=0",
    )
    manifest = build_synthetic(24, seed=9, success_rate=BASE_RATE, outcomes="policy", shared_fraction=0.5)
    client = scheduler.client()
    for name in SKILLS:
        client.submit([manifest], "synthetic", batch_size=4, submission_id=name, checkpoint=digests[name])
    for name in SKILLS:
        wait_settled(client, name, 120)
    results = {name: stored(client, name) for name in SKILLS}
    for name, (shift, seed) in SKILLS.items():
        assert sorted(results[name]) == list(range(24))
        declared = float(np.float32(shift))  # the checkpoint answers float32 actions
        for index, entry in enumerate(manifest.episodes):
            deciding = entry["draw"] if entry["draw_shared"] else skill_draw(seed, entry["episode_id"])
            success, steps = results[name][index]
            assert success is (deciding < min(1.0, BASE_RATE + declared)), (name, entry)
            total = max(1, round(entry["duration_s"] * STEPS_PER_SECOND))
            assert steps == (max(1, round(total * entry["success_at"])) if success else total), (name, entry)
    shared = [i for i, e in enumerate(manifest.episodes) if e["draw_shared"]]
    own = [i for i, e in enumerate(manifest.episodes) if not e["draw_shared"]]
    assert shared and own
    # B's skill is higher: on a shared episode it succeeds wherever A does.
    assert all(results["B"][i][0] for i in shared if results["A"][i][0])
    assert sum(results["B"][i][0] for i in range(24)) > sum(results["A"][i][0] for i in range(24))
