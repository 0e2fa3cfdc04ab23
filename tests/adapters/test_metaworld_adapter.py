"""The Meta-World adapter on its stack: rebuilt trials, rendering on demand, success, refusals.

Meta-World does not load under the test process's MuJoCo 2.3.7, so ``metaworld_episodes.py`` runs
the adapter in a process on the Meta-World stack (the overlay `make stacks` builds) and reports what
it did; the tests check those facts. Real Meta-World throughout: reach-v3, trials of
lerobot-eval's stream, and Meta-World's own scripted expert for a success.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from procs import require_built

from manifests.overlays import stacks_dir
from scripts.common.command import REPO

pytestmark = [pytest.mark.slow]

STACK = "metaworld-3.0.0_mujoco-3.3.7"
HELPER = Path(__file__).with_name("metaworld_episodes.py")
TASK = "reach-v3"


@pytest.fixture(scope="module")
def facts() -> dict[str, Any]:
    overlay = require_built(stacks_dir() / STACK, "make stacks")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(overlay), str(REPO)]), "MUJOCO_GL": "osmesa"}
    done = subprocess.run(
        [sys.executable, str(HELPER), TASK], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found: dict[str, Any] = json.loads(done.stdout)
    return found


@pytest.mark.timeout(360)
def test_a_scan_is_reproducible_and_its_seed_chooses_the_trials(facts: dict[str, Any]) -> None:
    scan = facts["scan"]
    assert scan["hash"] == scan["again"] != scan["other_seed"]
    assert scan["setting"] == "easy"  # LeRobot's difficulty group of reach-v3
    assert scan["instruction"] == "Reach a goal position"  # LeRobot's instruction for it
    # Both reset_model calls' start vectors, and the initial observation digest, per trial.
    assert scan["starts"] == [2, 2]
    assert scan["digests"] == [True, True]


@pytest.mark.timeout(360)
def test_trials_rebuilt_on_pooled_environments_are_the_trials_on_fresh_ones(facts: dict[str, Any]) -> None:
    rebuild = facts["rebuild"]
    assert rebuild["pooled"] == rebuild["fresh"]
    assert len(set(rebuild["fresh"])) == len(rebuild["fresh"])  # each trial its own trajectory


@pytest.mark.timeout(360)
def test_execute_renders_only_the_observation_it_hands_out_and_changes_nothing(facts: dict[str, Any]) -> None:
    execute = facts["execute"]
    assert execute["chunk_trace"] == execute["step_trace"]
    assert execute["chunk_image"] == execute["step_image"]
    # The reset renders once (for the digest check and the policy alike), then once per step or
    # once per chunk.
    assert execute["step_renders"] == 1 + execute["steps"]
    assert execute["chunk_renders"] == 1 + execute["chunks"]


@pytest.mark.timeout(360)
def test_the_experts_trial_succeeds_where_it_did_and_nothing_is_observed_after(facts: dict[str, Any]) -> None:
    success = facts["success"]
    assert success["success"] is True
    assert success["steps"] == success["executed"] == success["expert_steps"]
    assert success["last_observation"] is None
    assert success["images_without_cameras"] == []


@pytest.mark.timeout(360)
def test_drift_and_bad_entries_are_refused_by_field(facts: dict[str, Any]) -> None:
    refusals = facts["refusals"]
    assert refusals["digest"]["field"] == "episodes[0].initial_observation_digest"
    assert "manifest says 0000" in refusals["digest"]["message"]
    assert refusals["starts"]["field"] == "episodes[0].starts"
    assert refusals["start_length"] == {
        "type": "BenchmarkError",
        "field": "episodes[0].starts[0]",
        "message": "holds 2 numbers, reach-v3's start vector has 6",
    }
    assert refusals["action"] == {"type": "ValueError", "message": "action must be 4 finite numbers, got shape (3,)"}


@pytest.mark.timeout(360)
def test_an_environment_kept_beside_another_tasks_renders_and_steps_as_a_fresh_one(facts: dict[str, Any]) -> None:
    interleaved = facts["interleaved"]
    assert interleaved["first"] == interleaved["again"] == interleaved["alone"]
    assert interleaved["other"][0] != interleaved["alone"][0]  # the other task's scene is another image
    assert len(set(interleaved["alone"][:-1])) > 1  # the arm moved in view
