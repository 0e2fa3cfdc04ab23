"""A trial rebuilt from its manifest entry is the trial the evaluators' own loop runs, bit for bit.

The evaluators (openvla, openpi, vla-eval) keep one environment per task: ``env.seed(7)`` once, then
for each trial in order ``reset()``, ``set_init_state``, the wait steps and the policy steps. The
adapter instead rebuilds trial i on its own (a reset under the fixed seed, then the entry's fixture
poses and solver warm start). Driving both with the same actions, the simulator's full state and
the solver's warm start after every step must be identical, for every trial, not only the first.

The adapter here compiles every trial's scene (``reuse_scene=False``, LIBERO's hard reset). Its
default, reusing the compiled scene, is held to this one by tests/adapters/test_libero_soft_reset.py,
and to vla-eval's own loop of these trials (the same stream, seed 7) by
tests/adapters/test_libero_openloop.py, which compares the same state after every step.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pytest
from libero_guard import LIBERO_MISSING, REASON

from manifests.format import Manifest

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

from benchmarks.libero.adapter import LiberoBenchmark, add_build_arguments, build_manifests
from benchmarks.libero.manifest import WAIT_ACTION
from benchmarks.libero.runtime import read_init_states, resolve_task
from benchmarks.libero.sim import make_env

pytestmark = [pytest.mark.proof, pytest.mark.slow, pytest.mark.libero]
TRIALS = 3
STEPS = 12
WAIT_STEPS = 3
SIZE = 64
# libero_spatial 0 has fixtures (a stove, a cabinet); libero_object 0 has none.
TASKS = [("libero_spatial", 0), ("libero_object", 0)]


def _manifest(suite: str, task: int) -> Manifest:
    parser = argparse.ArgumentParser()
    add_build_arguments(parser)
    argv = ["--suite", suite, "--tasks", str(task), "--trials", str(TRIALS), "--jobs", "1", "--seed", "7"]
    argv += ["--camera-size", str(SIZE), "--wait-steps", str(WAIT_STEPS), "--max-steps", str(STEPS)]
    (built,) = build_manifests(parser.parse_args(argv))
    return built


def _actions(trial: int) -> np.ndarray:
    rng = np.random.default_rng(20261202 + trial)
    actions = rng.uniform(-0.5, 0.5, size=(STEPS, 7))
    actions[:, 6] = np.where(np.arange(STEPS) % 4 < 2, 1.0, -1.0)
    return actions


def _state(env: Any) -> np.ndarray:
    data = env.sim.data
    return np.concatenate([env.sim.get_state().flatten(), data.qacc_warmstart])


def _stream(suite: str, task_id: int) -> list[list[np.ndarray]]:
    """The evaluators' loop: one environment, env.seed(7), the trials in order."""
    task = resolve_task(suite, task_id, "task")
    _, states = read_init_states(task.init_path)
    env = make_env(task, SIZE, SIZE)
    saved = np.random.get_state()
    try:
        env.seed(7)
        trials = []
        for trial in range(TRIALS):
            env.reset()
            env.set_init_state(states[trial])
            for _ in range(WAIT_STEPS):
                env.step(np.array(WAIT_ACTION))
            seen = [_state(env)]
            for action in _actions(trial):
                env.step(action)
                seen.append(_state(env))
            trials.append(seen)
        return trials
    finally:
        np.random.set_state(saved)
        env.close()


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("suite", "task"), TASKS, ids=[f"{suite}-{task}" for suite, task in TASKS])
def test_rebuilt_trials_are_the_evaluators_stream(suite: str, task: int) -> None:
    manifest = _manifest(suite, task)
    want = _stream(suite, task)
    adapter = LiberoBenchmark(max_idle_envs=1, reuse_scene=False)
    try:
        for trial in reversed(range(TRIALS)):  # any order: each trial is rebuilt on its own
            episode = adapter.open_episode(manifest, trial, cameras=())
            try:
                episode.reset()
                env = episode._env
                seen = [_state(env)]
                for action in _actions(trial):
                    episode.step(action)
                    seen.append(_state(env))
            finally:
                episode.close()
            for step, (expected, got) in enumerate(zip(want[trial], seen, strict=True)):
                assert np.array_equal(got, expected), f"trial {trial}, step {step}: max {np.abs(got - expected).max()}"
    finally:
        adapter.close()
