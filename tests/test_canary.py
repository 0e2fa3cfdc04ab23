"""The broken-setup canary: the signatures (scheduler/canary.py), the worker's measurements
(renderer_worker/health.py), and the scheduler's part over real gRPC: the canary's tasks are
claimed first and spread over the manifests, the verdict is drawn when they end, and a broken
setup pauses the submission until `scheduler resume`. Real LIBERO episodes, a healthy oracle and
deliberately broken ones, are in tests/test_canary_libero.py.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from procs import cli

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import episode_result
from evalfleet.v1 import scheduler_pb2 as pb
from renderer_worker.health import HealthTracker
from scheduler import canary

pytestmark = pytest.mark.timeout(120)


def health(**fields: Any) -> pb.EpisodeHealth:
    values: dict[str, Any] = {
        "max_steps": 100,
        "action_std_max": 0.2,
        "action_saturated_fraction": 0.3,
        "state_range_max": 0.1,
        "actions_executed": 100,
    }
    values.update(fields)
    return pb.EpisodeHealth(**values)


def signatures(episodes: list[canary.CanaryEpisode]) -> list[str]:
    return [finding.signature for finding in canary.findings(episodes)]


def test_a_sound_setup_shows_no_signature_even_with_failures() -> None:
    sound = [canary.CanaryEpisode(i == 2, 100 if i != 2 else 40, health()) for i in range(4)]
    assert signatures(sound) == []
    # One episode that looks broken is not a broken setup: every episode must show it.
    odd = [*sound[:3], canary.CanaryEpisode(False, 100, health(action_std_max=0.0, state_range_max=0.0))]
    assert signatures(odd) == []
    assert canary.findings([]) == []


def test_each_signature_with_its_evidence() -> None:
    def all_like(success: bool = False, steps: int = 100, **fields: Any) -> list[canary.CanaryEpisode]:
        return [canary.CanaryEpisode(success, steps, health(**fields)) for _ in range(3)]

    (no_success,) = canary.findings(all_like())
    assert no_success.signature == "no_success"
    assert no_success.evidence == "none of the 3 canary episodes succeeded; each ran to its step limit (100 steps)"
    assert signatures(all_like(steps=60)) == [], "ended early (not at the limit): not this signature"
    assert signatures(all_like(success=True, action_std_max=0.0)) == ["actions_constant"]
    assert signatures(all_like(success=True, action_saturated_fraction=0.97)) == ["actions_saturated"]
    assert signatures(all_like(success=True, frozen_cameras=["agentview"])) == ["images_frozen"]
    frozen = canary.findings(all_like(success=True, state_range_max=0.02))
    assert [f.signature for f in frozen] == ["state_frozen"] and "at most 0.02" in frozen[0].evidence
    stalled = all_like(action_std_max=0.0, state_range_max=0.0)
    assert signatures(stalled) == ["no_success", "actions_constant", "state_frozen"]
    outside = canary.findings(all_like(success=True, action_outside_range_fraction=0.4))
    assert [f.signature for f in outside] == ["actions_outside_statistics"]
    assert "at least 40% of action values" in outside[0].evidence
    assert signatures(all_like(success=True, action_outside_range_fraction=0.2)) == []
    # Without declared statistics (the field unset) nothing is judged against them.
    assert signatures(all_like(success=True)) == []
    # Results stored without health can only be judged by their outcome.
    bare = [canary.CanaryEpisode(False, 100, None)] * 2
    assert signatures(bare) == []


def test_the_worker_measures_what_the_policy_saw_and_did() -> None:
    rng = np.random.default_rng(0)
    moving = HealthTracker()
    for step in range(5):
        moving.shown({"cam": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)}, {"eef": np.full(3, 0.01 * step)})
        moving.ran(np.array([[0.5 * np.sin(step), -2.0, 1.0], [0.1, 3.0, -1.0]]))
    measured = moving.summary(max_steps=50)
    assert measured.max_steps == 50 and measured.actions_executed == 10
    assert measured.state_range_max == pytest.approx(0.04)
    assert measured.action_std_max == pytest.approx(2.5)  # column 1: -2 and 3, as often
    # Column 2 is a binary gripper (always +-1) and says nothing; column 1 is always beyond +-1.
    assert measured.action_saturated_fraction == pytest.approx(10 / 20)
    assert list(measured.frozen_cameras) == []

    still = HealthTracker()
    frame = np.zeros((8, 8, 3), dtype=np.uint8)
    for _ in range(3):
        still.shown({"cam": frame, "other": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)}, {"eef": np.ones(3)})
        still.ran(np.zeros((4, 7)))
    quiet = still.summary(max_steps=12)
    assert quiet.action_std_max == 0.0 and quiet.state_range_max == 0.0
    assert list(quiet.frozen_cameras) == ["cam"]
    assert not HealthTracker().summary(max_steps=1).HasField("state_range_max")
    assert not quiet.HasField("action_outside_range_fraction"), "no range declared: not measured"


def test_the_worker_measures_actions_against_the_trained_range() -> None:
    # Dimension 0 trained on [-1, 1] (far outside: beyond -2 or 2), dimension 1 on [0, 0.5]
    # (beyond -0.25 or 0.75); dimension 2 is constant in the data and says nothing.
    tracked = HealthTracker(action_low=(-1.0, 0.0, 0.3), action_high=(1.0, 0.5, 0.3))
    tracked.ran(np.array([[1.5, 0.7, 9.0], [2.5, 0.8, 9.0], [-2.1, -0.2, 9.0], [0.0, 0.1, 9.0]]))
    measured = tracked.summary(max_steps=10)
    # Outside: 2.5 and -2.1 of dimension 0, 0.8 of dimension 1: 3 of 8 values.
    assert measured.action_outside_range_fraction == pytest.approx(3 / 8)
    # A range of another length than the actions (a server answering for another embodiment) is not applied.
    mismatched = HealthTracker(action_low=(-1.0,), action_high=(1.0,))
    mismatched.ran(np.full((2, 3), 5.0))
    assert not mismatched.summary(max_steps=10).HasField("action_outside_range_fraction")


def run_canary_tasks(client: Any, worker: str, broken: bool, expect: int) -> list[str]:
    """Claims `expect` tasks as a worker would and ends each with results that look sound or
    broken; returns the manifests' tasks in the order they were claimed."""
    claimed = []
    for _ in range(expect):
        lease = client.claim(worker, ["synthetic"])
        assert lease is not None
        claimed.append(lease.task_id)
        episodes = [
            episode_result(index, success=not broken and index % 2 == 0, steps=100 if broken else 30)
            for index in lease.episodes
        ]
        for result in episodes:
            result.health.CopyFrom(health(action_std_max=0.0, state_range_max=0.0) if broken else health())
        client.complete(lease, episodes=episodes)
    return claimed


@pytest.mark.parametrize("broken", [False, True])
def test_the_scheduler_claims_the_canary_first_settles_it_and_pauses_a_broken_setup(
    scheduler: Any, broken: bool
) -> None:
    client = scheduler.client()
    client.register_worker("cw", ["synthetic"])
    manifests = [build_synthetic(4, seed=seed, task=f"t{seed}") for seed in range(6)]
    settings = pb.CanarySettings(tasks=3, pause=True)
    submitted = client.submit(manifests, "synthetic", batch_size=2, submission_id="canary", canary=settings)
    assert submitted.tasks_total == 12
    (status,) = client.status("canary").submissions
    assert status.canary.verdict == "running" and not status.paused

    claimed = run_canary_tasks(client, "cw", broken, 3)
    # The first task of manifests 0, 2 and 4 (spread over six), before any other task.
    assert claimed == ["canary-00000", "canary-00004", "canary-00008"]
    (status,) = client.status("canary").submissions
    assert status.canary.episodes == 6
    if not broken:
        assert status.canary.verdict == "healthy" and not status.paused
        assert client.claim("cw", ["synthetic"]).task_id == "canary-00001"
        return
    assert status.canary.verdict == "broken" and status.paused
    assert [f.signature for f in status.canary.findings] == ["no_success", "actions_constant", "state_frozen"]
    assert client.claim("cw", ["synthetic"]) is None, "a paused submission's tasks are not claimed"
    shown = cli("status", "canary", "--server", scheduler.address)
    assert "canary: canary BROKEN over 6 episodes: no_success: none of the 6" in shown.stdout, shown.stdout
    assert "PAUSED: its pending tasks wait for `scheduler resume canary`" in shown.stdout
    assert json.loads(cli("status", "canary", "--json", "--server", scheduler.address).stdout)["submissions"][0][
        "paused"
    ]
    resumed = cli("resume", "canary", "--server", scheduler.address)
    assert resumed.returncode == 0 and resumed.stdout == "canary: resumed\n", resumed
    assert cli("resume", "canary", "--server", scheduler.address).stdout == "canary: already resumed\n"
    assert client.claim("cw", ["synthetic"]).task_id == "canary-00001"
    assert cli("pause", "nope", "--server", scheduler.address).returncode == 2
