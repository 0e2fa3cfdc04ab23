"""Reusing the compiled scene on the real LIBERO simulator: every trial is what the hard reset gives.

The reference is LIBERO's hard reset (``LiberoBenchmark(reuse_scene=False)``: a new MjSim compiled
for every trial). The default adapter keeps the environment and, from its second trial of a task
on, reuses the compiled scene (``benchmarks.libero.reset``). For consecutive trials of one task on
one kept environment, with the same seeded actions, the simulator state after every step (qpos,
qvel, act, warm start, ctrl, time, mocap, userdata, sensordata), every array of the MjModel at the
start and the end of each trial, every observation the policy receives, the trace digest and the
outcome must be bit-identical. Between trials the episode leaves the scene dirty the way a policy
could: gripper commands (robosuite's gripper accumulates them), and every articulated fixture
(stove knobs, microwave and cabinet doors) moved to the far end of its range, which flips LIBERO's
Python-side stove state and the burner's site colour in the MjModel; and another environment of the
process is reset, which takes the current GL context. One task per suite, among them
scenes with a stove (libero_goal), a microwave (libero_10) and cabinets.
"""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from libero_guard import LIBERO_MISSING, REASON

from benchmarks.base import SimObservation
from manifests.format import Manifest

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

from benchmarks.libero.adapter import LiberoBenchmark, LiberoEpisode, add_build_arguments, build_manifests
from benchmarks.libero.sim import CAMERAS

pytestmark = [pytest.mark.slow, pytest.mark.libero]
TRIALS = 2
STEPS = 16
WAIT_STEPS = 3
# MjData's state and what a step leaves for the next one; its scratch and arena are left out,
# as they are between two hard resets (a new MjData's unused memory is whatever malloc returns).
DATA_FIELDS = (
    "time",
    "qpos",
    "qvel",
    "act",
    "qacc_warmstart",
    "ctrl",
    "mocap_pos",
    "mocap_quat",
    "userdata",
    "sensordata",
)
# With a stove (libero_goal 7: turn it on) and a microwave (libero_10 9), both with cabinets.
TASKS = [("libero_spatial", 0), ("libero_object", 0), ("libero_goal", 7), ("libero_10", 9)]
ARTICULATED = {"libero_goal", "libero_10"}


@dataclass
class Trial:
    """What one trial showed: the data after every step, model digests, observations, outcome."""

    data: list[dict[str, np.ndarray]]
    model_digests: list[str]
    observations: list[SimObservation]
    trace_digest: str
    success: bool
    scene_reused: bool | None
    dirtied_joints: int


def _manifest(suite: str, task: int) -> Manifest:
    parser = argparse.ArgumentParser()
    add_build_arguments(parser)
    argv = ["--suite", suite, "--tasks", str(task), "--trials", str(TRIALS), "--jobs", "1", "--camera-size", "128"]
    argv += ["--wait-steps", str(WAIT_STEPS), "--max-steps", str(STEPS)]
    (built,) = build_manifests(parser.parse_args(argv))
    return built


def _actions(trial: int) -> np.ndarray:
    """Seeded arm moves with the gripper opening and closing, different for every trial."""
    rng = np.random.default_rng(20261201 + trial)
    actions = rng.uniform(-0.8, 0.8, size=(STEPS, 7))
    actions[:, 6] = np.where(np.arange(STEPS) % 6 < 3, 1.0, -1.0)
    return actions


def _env(episode: LiberoEpisode) -> Any:
    return episode._env  # the test looks into the simulator the episode steps


def _data(env: Any) -> dict[str, np.ndarray]:
    data = env.sim.data._data
    return {name: np.array(getattr(data, name), copy=True) for name in DATA_FIELDS}


def _model_digest(env: Any) -> str:
    """Every array of the MjModel, and its options (timestep, solver, ...)."""
    model = env.sim.model._model
    digest = hashlib.sha256()
    for name in sorted(dir(model)):
        value = getattr(model, name) if not name.startswith("_") else None
        if isinstance(value, np.ndarray):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(value).tobytes())
    digest.update(repr(model.opt).encode())
    return digest.hexdigest()


def _dirty(env: Any) -> int:
    """Leaves the scene as a policy could: articulated fixtures at the far end of their range (a
    stove turned on, doors open), a few gripper commands; steps so that LIBERO updates its state.
    Returns how many fixture joints it moved."""
    model, data = env.sim.model, env.sim.data
    moved = 0
    for fixture in env.env.fixtures_dict.values():
        for joint in fixture.joints:
            joint_id = model.joint_name2id(joint)
            if model.jnt_type[joint_id] in (2, 3):  # slide or hinge
                low, high = model.jnt_range[joint_id]
                data.qpos[model.jnt_qposadr[joint_id]] = high if high > low else 1.0
                moved += 1
    for gripper in (1.0, 1.0, -1.0):
        env.step(np.array([0.3, -0.3, 0.2, 0.0, 0.0, 0.1, gripper]))
    return moved


def _run(adapter: LiberoBenchmark, manifest: Manifest, trial: int) -> Trial:
    episode = adapter.open_episode(manifest, trial, cameras=CAMERAS)
    try:
        observations = [episode.reset()]
        env = _env(episode)
        digests = [_model_digest(env)]
        data = [_data(env)]
        for action in _actions(trial):
            observations.append(episode.step(action))
            data.append(_data(env))
            if episode.done:
                break
        result = episode.result()
        digests.append(_model_digest(env))
        moved = _dirty(env)
        return Trial(data, digests, observations, result.trace_digest, result.success, episode.scene_reused, moved)
    finally:
        episode.close()


def _assert_same_observation(seen: SimObservation, expected: SimObservation, where: str) -> None:
    assert sorted(seen.images) == sorted(expected.images) == sorted(CAMERAS), where
    for name, image in expected.images.items():
        assert np.array_equal(seen.images[name], image), f"{where}: camera {name}"
    assert sorted(seen.state) == sorted(expected.state), where
    for name, value in expected.state.items():
        assert np.array_equal(seen.state[name], value), f"{where}: state {name}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("suite", "task"), TASKS, ids=[f"{suite}-{task}" for suite, task in TASKS])
def test_reusing_the_scene_gives_what_the_hard_reset_gives(suite: str, task: int) -> None:
    manifest = _manifest(suite, task)
    hard_adapter = LiberoBenchmark(max_idle_envs=1, reuse_scene=False)
    try:
        hard = [_run(hard_adapter, manifest, trial) for trial in range(TRIALS)]
    finally:
        hard_adapter.close()
    soft_adapter = LiberoBenchmark(max_idle_envs=1)
    # Another environment in the process, reset between the trials, as a worker's episode process
    # keeps two: its GL context becomes the current one, and robosuite renders into the current one.
    other_adapter = LiberoBenchmark(max_idle_envs=1)
    try:
        soft = []
        for trial in range(TRIALS):
            soft.append(_run(soft_adapter, manifest, trial))
            other = other_adapter.open_episode(manifest, 0, cameras=CAMERAS)
            other.reset()
            other.close()
    finally:
        soft_adapter.close()
        other_adapter.close()

    assert [t.scene_reused for t in hard] == [None] * TRIALS
    assert [t.scene_reused for t in soft] == [False] + [True] * (TRIALS - 1), "the kept scene was not reused"
    for trial, (want, got) in enumerate(zip(hard, soft, strict=True)):
        assert got.model_digests == want.model_digests, f"trial {trial}: the MjModel differs"
        assert len(got.data) == len(want.data), f"trial {trial}: step count"
        for step, (expected, seen) in enumerate(zip(want.data, got.data, strict=True)):
            for name in DATA_FIELDS:
                assert np.array_equal(seen[name], expected[name]), f"trial {trial}, step {step}: {name}"
        for step, (expected, seen) in enumerate(zip(want.observations, got.observations, strict=True)):
            _assert_same_observation(seen, expected, f"trial {trial}, observation {step}")
        assert (got.trace_digest, got.success) == (want.trace_digest, want.success), f"trial {trial}"
    if suite in ARTICULATED:
        assert all(t.dirtied_joints > 0 for t in soft), "no articulated fixture was moved between trials"
