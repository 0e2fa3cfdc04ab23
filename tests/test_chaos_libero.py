"""The chaos run on real LIBERO episodes (scripts.chaos.libero) at CI size.

One libero_spatial task x 3 trials (128x128 camera, 8 policy steps, the demo's scripted oracle),
run calm and then with a worker, an episode process and the inference server each killed (kill -9)
mid-rollout, the scheduler killed, each brought back as an operator would, and, where root and
iproute2 allow, a worker's host unplugged past its lease and plugged back in: every episode stored
once, with the calm run's success, steps and trace digest.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from libero_guard import LIBERO_MISSING, REASON

from scripts.chaos.libero import (
    LIBERO_TARGETS,
    PARTITION,
    LiberoConfig,
    libero_chaos_run,
    libero_fault_plan,
    libero_report,
)
from scripts.common.netns import netns_unavailable

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.libero, pytest.mark.timeout(600)]

_NETNS_UNAVAILABLE = netns_unavailable()
if _NETNS_UNAVAILABLE and os.environ.get("EVALFLEET_REQUIRE_NETNS"):
    raise RuntimeError(f"EVALFLEET_REQUIRE_NETNS is set but {_NETNS_UNAVAILABLE}")


def test_real_libero_episodes_survive_kill_9_of_every_service(tmp_path: Path) -> None:
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    config = LiberoConfig(
        suite="libero_spatial", tasks="0", trials=3, max_steps=8, lease_seconds=6.0, faults_per_target=1, timeout=500
    )
    chaotic, calm, problems, layout = libero_chaos_run(tmp_path, config)
    print(libero_report(chaotic, calm, problems, layout))

    assert not problems, problems
    assert len(calm.results) == 3 and chaotic.results == calm.results
    assert all(steps == 8 for _, steps, _ in calm.results.values()), calm.results
    assert len({digest for _, _, digest in calm.results.values()}) == 3, "every trial has its own trace"
    partitions = 0 if _NETNS_UNAVAILABLE else 1
    assert chaotic.kills == {"worker": 1, "episode": 1, "policy": 1, "scheduler": 1, "partition": partitions}
    assert calm.attempts == calm.tasks == 3 and not calm.fault_log
    # The worker, episode-process and inference-server kills each cost the episode they hit a retry.
    assert chaotic.attempts >= chaotic.tasks + 3, chaotic.fault_log


def test_libero_fault_plan_is_seeded_and_covers_every_fault() -> None:
    plan = libero_fault_plan(7, 2, 1)
    assert plan == libero_fault_plan(7, 2, 1) != libero_fault_plan(8, 2, 1)
    assert sorted(f.target for f in plan) == sorted((*LIBERO_TARGETS * 2, PARTITION))
    assert [f.at for f in plan] == sorted(f.at for f in plan)
