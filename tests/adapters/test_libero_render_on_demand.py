"""Render on demand on the real LIBERO simulator: what the policy sees is what rendering every step shows.

The reference is what harnesses do today: the raw environment, both cameras rendered on every
step. The adapter renders only the cameras it is opened with, and only for the observation after
the last action of each ``execute``. For the same manifest entry and the same actions, at execute
1, 5 and the whole chunk (10), with wait steps, and for every camera subset, the simulator state
after every step (the trace digest hashes it after every step) and every observation handed out
must be bit-identical to the reference. Small cameras and short episodes keep it quick: the
sampling-timer logic that makes this subtle does not depend on the image size.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import pytest
from libero_guard import LIBERO_MISSING, REASON

from benchmarks.base import SimObservation, TraceDigest
from manifests.format import Manifest

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

from benchmarks.libero.adapter import LiberoBenchmark, add_build_arguments, build_manifests
from benchmarks.libero.manifest import episode_spec
from benchmarks.libero.sim import CAMERAS, add_state, make_env, observe
from scripts.bench.raw_libero import reset_trial

pytestmark = [pytest.mark.slow, pytest.mark.libero]
MAX_STEPS = 12
WAIT_STEPS = 3
CHUNK = 10


@dataclass
class Reference:
    """The render-every-step run: the trace digest, and the observation after every step
    (index 0: after the wait steps, i: after policy step i)."""

    trace_digest: str
    observations: list[SimObservation]


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    parser = argparse.ArgumentParser()
    add_build_arguments(parser)
    argv = ["--suite", "libero_spatial", "--tasks", "0", "--trials", "1", "--jobs", "1", "--camera-size", "64"]
    argv += ["--wait-steps", str(WAIT_STEPS), "--max-steps", str(MAX_STEPS)]
    (built,) = build_manifests(parser.parse_args(argv))
    return built


@pytest.fixture(scope="module")
def actions() -> np.ndarray:
    """A fixed action sequence (small random arm moves, gripper alternating), the same for every run."""
    rng = np.random.default_rng(20261201)
    actions = rng.uniform(-0.5, 0.5, size=(MAX_STEPS, 7))
    actions[:, 6] = np.where(np.arange(MAX_STEPS) % 4 < 2, -1.0, 1.0)
    return actions


@pytest.fixture(scope="module")
def reference(manifest: Manifest, actions: np.ndarray) -> Reference:
    """The raw LIBERO environment stepped as harnesses do: every camera rendered on every step."""
    spec = episode_spec(manifest, 0)
    env = make_env(spec.task, spec.protocol.camera_height, spec.protocol.camera_width)
    try:
        trace = TraceDigest()
        raw = reset_trial(env, spec, trace)  # the scene, the initial state, then WAIT_STEPS wait steps
        observations = [observe(env, raw)]
        for action in actions:
            raw = env.step(action)[0]
            add_state(trace, env)
            observations.append(observe(env, raw))
        return Reference(trace.hexdigest(), observations)
    finally:
        env.close()


@pytest.fixture(scope="module")
def adapter() -> LiberoBenchmark:
    adapter = LiberoBenchmark(max_idle_envs=1)
    yield adapter
    adapter.close()


def _assert_same(seen: SimObservation, expected: SimObservation, cameras: tuple[str, ...], where: str) -> None:
    assert sorted(seen.images) == sorted(cameras), where
    for name in cameras:
        assert np.array_equal(seen.images[name], expected.images[name]), f"{where}: camera {name}"
    assert sorted(seen.state) == sorted(expected.state), where
    for name, value in expected.state.items():
        assert np.array_equal(seen.state[name], value), f"{where}: state {name}"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("execute", [1, 5, 0], ids=["execute-1", "execute-5", "whole-chunk"])
@pytest.mark.parametrize(
    "cameras", [("agentview",), ("robot0_eye_in_hand",), CAMERAS], ids=["agentview", "eye-in-hand", "both"]
)
def test_observations_and_states_match_rendering_every_step(
    manifest: Manifest,
    actions: np.ndarray,
    reference: Reference,
    adapter: LiberoBenchmark,
    execute: int,
    cameras: tuple[str, ...],
) -> None:
    episode = adapter.open_episode(manifest, 0, cameras=cameras)
    try:
        observation = episode.reset()
        _assert_same(observation, reference.observations[0], cameras, "after the wait steps")
        done_at, observed = 0, 0
        while not episode.done:
            assert observation is not None
            chunk = actions[done_at : done_at + CHUNK]
            ran = episode.execute(chunk[: execute or None])
            assert ran.executed == min(execute or CHUNK, MAX_STEPS - done_at)
            done_at += ran.executed
            observation = ran.observation
            if observation is not None:
                _assert_same(observation, reference.observations[done_at], cameras, f"after step {done_at}")
                observed += 1
        assert observation is None, "no observation once the step limit ends the episode"
        result = episode.result()
    finally:
        episode.close()
    assert result.steps == MAX_STEPS and not result.success
    assert result.trace_digest == reference.trace_digest, "the simulator state after some step differs"
    assert observed == -(-MAX_STEPS // (execute or CHUNK)) - 1


@pytest.mark.timeout(300)
def test_a_policy_without_cameras_renders_none_and_traces_the_same(
    manifest: Manifest, actions: np.ndarray, reference: Reference, adapter: LiberoBenchmark
) -> None:
    episode = adapter.open_episode(manifest, 0, cameras=("wrist_left",))
    try:
        observation = episode.reset()
        assert observation.images == {}
        _assert_same(observation, reference.observations[0], (), "after the wait steps")
        for step, action in enumerate(actions, start=1):
            observation = episode.step(action)
            _assert_same(observation, reference.observations[step], (), f"after step {step}")
        assert episode.result().trace_digest == reference.trace_digest
    finally:
        episode.close()
