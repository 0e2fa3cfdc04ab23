"""Open loop against vla-eval 0.8.0's own LIBERO code: a ``--protocol openpi`` trial is vla-eval's trial, byte for byte.

vla-eval's ``LIBEROBenchmark`` runs as its orchestrator runs it (one environment per task with
``env.seed(7)``, the trials in order, its ``SyncEpisodeRunner`` stepping each); evalfleet runs the
manifest's entries in reverse order through the code its renderer worker runs for an episode, and
maps each observation with the ``remote`` backend's vla-eval recipe (docs/remote.md). The same
policy, a function of (suite, task, trial, step) that drives the gripper onto the scene, answers
both (``scripts.proofs.libero_openloop``, which runs the same comparison at full size). Every
observation the policy is handed (both images, the state vector, the instruction), every action
``env.step`` receives, the contacts after each step and the step the episode ends at must be the
same bytes. A short step limit ends every trial here, so where each ends is compared too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from libero_guard import LIBERO_MISSING, REASON

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)
if importlib.util.find_spec("vla_eval") is None:
    pytest.skip("vla-eval is not installed (the `remote` extra)", allow_module_level=True)

from procs import require_built

from manifests.overlays import overlay, stacks_dir
from scripts.common.command import REPO
from scripts.proofs.libero_openloop import (
    WAIT_STEPS,
    build_manifest,
    compare_task,
    differences,
    evalfleet_trials,
    harness_trials,
    main,
    policy_action,
)
from scripts.proofs.solved import oracle_replay

pytestmark = [pytest.mark.proof, pytest.mark.slow, pytest.mark.libero]
STEPS = 22  # the step limit; in libero_spatial 0 the gripper, going straight down, touches the stove at step 18
# One task of each standard suite. libero_spatial 0 has fixtures (a stove, a cabinet) whose poses
# the task's stream draws, libero_object 0 none; they run two trials each, so that the later trial
# starts where the earlier one left the stream, and evalfleet runs them in reverse order on its
# reused scene (which tests/adapters/test_libero_stream_replay.py leaves to this test).
CASES = [("libero_spatial", 0, 2), ("libero_object", 0, 2), ("libero_goal", 0, 1), ("libero_10", 0, 1)]


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("suite", "task", "trials"), CASES, ids=[suite for suite, _, _ in CASES])
def test_an_openpi_trial_is_vla_evals_trial_byte_for_byte(suite: str, task: int, trials: int) -> None:
    harness, ours = compare_task(suite, task, trials, STEPS)
    assert [t.trial for t in harness] == [t.trial for t in ours] == list(range(trials))
    for theirs, mine in zip(harness, ours, strict=True):
        assert differences(theirs, mine) == []
        # The comparison saw the whole episode: the wait steps, every policy step, an observation
        # before each, and the episode ended where the step limit (or a success) ends it.
        assert len(theirs.applied) == len(theirs.physics) == WAIT_STEPS + theirs.steps
        assert len(theirs.observations) == theirs.steps
        assert theirs.steps == STEPS or theirs.success
        assert sorted(theirs.observations[0]) == ["images.agentview", "images.wrist", "states", "task_description"]
        # Each side binarized the gripper the same way before env.step: the policy's value is never +-1.
        assert abs(policy_action(suite, task, theirs.trial, 0)[6]) != 1.0
    if suite == "libero_spatial":
        assert any(any(t.touched[WAIT_STEPS:]) for t in harness), "the gripper touched the stove"
    assert len({t.observations[-1]["images.agentview"] for t in harness}) == trials, "each trial is its own"


# One task of each LIBERO-PRO perturbation axis the installed package ships (one trial each), against
# vla-eval's own libero_pro benchmark: object positions swapped, objects replaced, the instruction
# paraphrased, a new task in the scene.
PRO_CASES = ["libero_object_swap", "libero_spatial_object", "libero_goal_lan", "libero_10_task"]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("suite", PRO_CASES)
def test_a_libero_pro_trial_is_vla_evals_libero_pro_trial_byte_for_byte(suite: str) -> None:
    harness, ours = compare_task(suite, 0, 1, STEPS)
    (theirs,), (mine,) = harness, ours
    assert differences(theirs, mine) == []
    assert len(theirs.applied) == len(theirs.physics) == WAIT_STEPS + theirs.steps == WAIT_STEPS + STEPS
    assert sorted(theirs.observations[0]) == ["images.agentview", "images.wrist", "states", "task_description"]


@pytest.mark.timeout(600)
def test_a_solved_trial_is_solved_at_the_same_step_on_both_sides() -> None:
    """The scripted oracle's commands on libero_object 0's trial 0 (it puts the soup in the basket),
    replayed on both sides at the preset's step limit: the same bytes throughout, and both success
    checks see the success at the step the oracle's own run saw it."""
    manifest = build_manifest("libero_object", 0, 1, 0)
    limit = int(manifest.data["protocol"]["max_steps"])
    replay = oracle_replay(manifest)
    end = replay.ends[("libero_object", 0, 0)]
    assert end.success and end.steps < limit, end
    [theirs] = harness_trials("libero_object", 0, 1, limit, replay)
    [mine] = evalfleet_trials(manifest, replay)
    assert differences(theirs, mine) == []
    assert (theirs.success, theirs.steps) == (mine.success, mine.steps) == (True, end.steps)
    assert len(theirs.observations) == end.steps and len(theirs.applied) == WAIT_STEPS + end.steps
    assert any(theirs.touched[WAIT_STEPS:]), "the gripper held the soup"


VLA_EVAL_STACK = "mujoco-3.2.3_robosuite-1.4.0"  # vla-eval's LIBERO docker stack


@pytest.mark.timeout(900)
def test_an_openpi_trial_is_vla_evals_trial_on_vla_evals_own_stack_too(tmp_path: Path) -> None:
    """The same comparison, both sides on vla-eval's MuJoCo 3.2.3 + robosuite 1.4.0 (the overlay a
    worker's ``--stack`` puts first on the path), in a process of its own: libero_spatial 0, whose
    gripper reaches the stove, two trials."""
    require_built(stacks_dir() / VLA_EVAL_STACK, "make stacks")
    out = tmp_path / "openloop.json"
    argv = ["--suites", "libero_spatial", "--tasks", "0", "--trials", "2", "--max-steps", str(STEPS), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(overlay(VLA_EVAL_STACK)), str(REPO)])}
    done = subprocess.run(
        [sys.executable, "-m", "scripts.proofs.libero_openloop", *argv],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=800,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads(out.read_text())
    assert (summary["stack"]["mujoco"], summary["stack"]["robosuite"]) == ("3.2.3", "1.4.0")
    assert summary["identical"] == 2 and summary["policy_steps"] == 2 * STEPS
    assert summary["trials_that_touched"] >= 1


def test_the_policy_is_a_function_of_task_trial_and_step() -> None:
    first = policy_action("libero_goal", 3, 1, 5)
    assert first.dtype == np.float64 and first.shape == (7,)
    assert np.array_equal(first, policy_action("libero_goal", 3, 1, 5))
    others = [
        policy_action("libero_goal", 3, 2, 5),
        policy_action("libero_goal", 4, 1, 5),
        policy_action("libero_10", 3, 1, 5),
    ]
    assert not any(np.array_equal(first, other) for other in others)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--trials", "0"], "--trials must be 1..50"),
        (["--max-steps", "-1"], "--max-steps must be >= 0"),
        (["--suites", "libero_goal", "--tasks", "10"], "--tasks: libero_goal has tasks 0-9, not 10"),
        (["--tasks", "one"], "--tasks: invalid literal"),
        (["--out", "/nonexistent/summary.json"], "--out: /nonexistent is not a folder"),
        (["--solved", "--suites", "libero_10"], "--solved: the oracle solves libero_object only, not libero_10"),
    ],
)
def test_the_full_size_script_refuses_bad_options_in_one_line(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err.splitlines()[-1]
