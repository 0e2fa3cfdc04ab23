"""The LIBERO adapter on the real simulator (MuJoCo, CPU rendering): scan, exact replay, bad input.

Every environment step renders two cameras (~0.3 s on 2 cores) and every reset rebuilds the scene
(~5 s), so the manifests here are small (64x64 cameras, 2 settle steps, 3 policy steps) and shared
by the tests of this module. The trial-stream facts being tested only show in tasks with fixtures
(libero_spatial); libero_object (no fixtures) is checked too.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import os
import random
from collections.abc import Callable, Iterable

import numpy as np
import pytest
from libero_guard import LIBERO_MISSING, REASON

from benchmarks import adapter_class
from benchmarks.base import BenchmarkError, EpisodeVerdict, Numbering, SimObservation, TraceDigest
from benchmarks.libero.manifest import episode_spec
from benchmarks.libero.runtime import installed_versions, read_init_states, resolve_task
from benchmarks.libero.sim import add_state, make_env, to_observation
from manifests.format import Manifest, ManifestError, build

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

from benchmarks.libero.adapter import LiberoBenchmark, add_build_arguments, build_manifests
from scripts.bench.raw_libero import reset_trial

pytestmark = [pytest.mark.slow, pytest.mark.libero]
SMALL = ["--camera-size", "64", "--wait-steps", "2", "--max-steps", "3"]
SPATIAL_TRIALS = 5


def _build(*argv: str) -> list[Manifest]:
    parser = argparse.ArgumentParser()
    add_build_arguments(parser)
    return build_manifests(parser.parse_args(list(argv)))


def _scene_objects(observation: SimObservation) -> list[str]:
    """The movable objects, named by robosuite's per-object ``<object>_to_robot0_eef_pos`` entries."""
    suffix = "_to_robot0_eef_pos"
    return sorted(k.removesuffix(suffix) for k in observation.state if k.endswith(suffix))


def _towards_first_object(observation: SimObservation) -> np.ndarray:
    """A deterministic policy whose actions depend on the observed object and gripper positions."""
    target = observation.state[f"{_scene_objects(observation)[0]}_pos"]
    action = np.zeros(7)
    action[:3] = np.clip((target - observation.state["robot0_eef_pos"]) * 10.0, -1.0, 1.0)
    action[6] = -1.0
    return action


def _run_groups(
    adapter: LiberoBenchmark,
    manifest: Manifest,
    groups: Iterable[Iterable[int]],
    policy: Callable[[SimObservation], np.ndarray] = _towards_first_object,
) -> dict[int, EpisodeVerdict]:
    """Runs each group's episodes interleaved, one step each in turn, as a worker with N in flight."""
    results = {}
    for group in groups:
        episodes = {i: adapter.open_episode(manifest, i) for i in group}
        observations = {i: episode.reset() for i, episode in episodes.items()}
        while not all(episode.done for episode in episodes.values()):
            for i, episode in episodes.items():
                if not episode.done:
                    observations[i] = episode.step(policy(observations[i]))
        for i, episode in episodes.items():
            results[i] = episode.result()
            episode.close()
    return results


def _with_changes(manifest: Manifest, change: Callable[[dict], None]) -> Manifest:
    data = json.loads(manifest.body)
    change(data)
    return build(**{k: data[k] for k in ("benchmark", "task", "setting", "episodes", "protocol", "versions", "source")})


@pytest.fixture(scope="module")
def spatial() -> Manifest:
    (manifest,) = _build(
        "--suite",
        "libero_spatial",
        "--tasks",
        "0",
        "--trials",
        str(SPATIAL_TRIALS),
        "--jobs",
        "1",
        "--observation-digest",
        *SMALL,
    )
    return manifest


@pytest.fixture(scope="module")
def adapter() -> LiberoBenchmark:
    adapter = LiberoBenchmark(max_idle_envs=1)
    yield adapter
    adapter.close()


@pytest.fixture(scope="module")
def reference(spatial: Manifest, adapter: LiberoBenchmark) -> dict[int, EpisodeVerdict]:
    """Every spatial trial, one at a time in manifest order on one reused environment (batch size 1)."""
    return _run_groups(adapter, spatial, ([i] for i in range(SPATIAL_TRIALS)))


@pytest.mark.timeout(240)
def test_scan_records_each_trials_place_in_the_stream(spatial: Manifest) -> None:
    task = resolve_task("libero_spatial", 0, "task")
    _, states = read_init_states(task.init_path)
    assert spatial.benchmark == "libero" and spatial.setting == "libero_spatial" and spatial.task == task.name
    assert spatial.data["protocol"]["max_steps"] == 3 and spatial.data["protocol"]["seed"] == 7
    # The default preset (evalfleet) records exactly what manifests recorded before presets, so
    # their bytes, and the hashes submissions and comparisons name, stay the same.
    assert sorted(spatial.data["protocol"]) == [
        "action_dim",
        "camera_height",
        "camera_width",
        "cameras",
        "control_freq",
        "controller",
        "hard_reset",
        "image_transform",
        "max_steps",
        "num_steps_wait",
        "seed",
        "success",
        "task_id",
        "task_order_index",
        "trial_stream",
        "wait_action",
    ]
    assert spatial.data["protocol"]["trial_stream"] == (
        "env.seed(seed) once per task, then reset() per trial; fixture poses recorded"
    )
    assert {k: spatial.data["versions"][k] for k in installed_versions()} == installed_versions()
    assert spatial.data["versions"]["mujoco_gl"] == os.environ["MUJOCO_GL"]
    assert " / " in spatial.data["versions"]["gl_renderer"]
    entries = spatial.episodes
    assert [e["episode_id"] for e in entries] == [f"libero_spatial-00-{i:03d}" for i in range(SPATIAL_TRIALS)]
    for i, entry in enumerate(entries):
        assert np.array_equal(entry["init_state"], states[i])
        assert entry["instruction"] == task.language
        assert set(entry["fixture_poses"]) == {"flat_stove_1", "wooden_cabinet_1"}
    cabinet_x = [e["fixture_poses"]["wooden_cabinet_1"]["pos"][0] for e in entries]
    assert len(set(cabinet_x)) == SPATIAL_TRIALS, "each reset must have drawn a new cabinet pose"
    assert len({e["initial_observation_digest"] for e in entries}) == SPATIAL_TRIALS


@pytest.mark.timeout(240)
def test_trial_alone_or_after_others_in_any_order_traces_the_same(
    spatial: Manifest, reference: dict[int, EpisodeVerdict]
) -> None:
    fresh = LiberoBenchmark(max_idle_envs=1)
    try:
        reverse = _run_groups(fresh, spatial, [[4], [2], [0]])
    finally:
        fresh.close()
    assert reverse == {i: reference[i] for i in (4, 2, 0)}
    assert len({r.trace_digest for r in reference.values()}) == SPATIAL_TRIALS
    assert all(r.steps == 3 and not r.success for r in reference.values())


@pytest.mark.timeout(300)
def test_batch_sizes_one_two_and_five_give_the_same_results(
    spatial: Manifest, reference: dict[int, EpisodeVerdict]
) -> None:
    wide = LiberoBenchmark(max_idle_envs=5)
    try:
        five = _run_groups(wide, spatial, [range(5)])
        two = _run_groups(wide, spatial, [[0, 1], [2, 3], [4]])
    finally:
        wide.close()
    assert five == reference
    assert two == reference


@pytest.mark.timeout(300)
def test_actions_reach_the_simulator_in_their_own_values_float64_and_float32_alike(
    spatial: Manifest, adapter: LiberoBenchmark
) -> None:
    """openpi's LIBERO client steps with its policy's float64 commands (`env.step(action.tolist())`),
    StarVLA's with float32 arrays. The adapter hands the simulator float64 rows: a float64 command
    keeps every bit (the trace is the raw environment's stepped with the list), and a float32 one
    is its exact widening, which robosuite steps exactly as the float32 array itself (its
    controllers promote the command to float64 before any arithmetic). Rounding the float64
    commands to float32 gives another trajectory."""
    spec = episode_spec(spatial, 1)
    wide = np.random.default_rng(23).uniform(-0.5, 0.5, (3, 7))
    wide[:, 6] = [-1.0, 1.0, -0.3]
    narrow = wide.astype(np.float32)

    env = make_env(spec.task, spec.protocol.camera_height, spec.protocol.camera_width)

    def raw(actions: Iterable[object]) -> str:
        trace = TraceDigest()
        reset_trial(env, spec, trace)  # LIBERO's hard reset: nothing carries over from the last run
        for action in actions:
            env.step(action)
            add_state(trace, env)
        return trace.hexdigest()

    def adapted(actions: np.ndarray) -> str:
        episode = adapter.open_episode(spatial, 1)
        try:
            episode.reset()
            assert episode.execute(actions).executed == len(actions)
            return episode.result().trace_digest
        finally:
            episode.close()

    try:
        openpi, starvla, widened = raw(row.tolist() for row in wide), raw(list(narrow)), raw(list(narrow.astype(float)))
    finally:
        env.close()
    assert adapted(wide) == openpi
    assert adapted(narrow) == starvla == widened
    assert openpi != starvla


def test_each_trial_is_numbered_as_liberos_harnesses_number_it(spatial: Manifest, adapter: LiberoBenchmark) -> None:
    """The suite, the task's id in it and the trial: what vla-eval's client sends its model server
    as suite, task_id and episode_idx, and the worker passes to the policy in EpisodeMeta."""
    for index in (0, 3):
        episode = adapter.open_episode(spatial, index)
        try:
            assert episode.numbering == Numbering(suite="libero_spatial", task_index=0, episode_index=index)
        finally:
            episode.close()
    broken = _with_changes(spatial, lambda data: data["episodes"][2].update(trial="2"))
    with pytest.raises(BenchmarkError) as refused:
        adapter.open_episode(broken, 2)
    assert refused.value.field == "episodes[2].trial"


@pytest.mark.timeout(240)
def test_policy_side_rng_changes_nothing_the_benchmark_owns(
    spatial: Manifest, adapter: LiberoBenchmark, reference: dict[int, EpisodeVerdict]
) -> None:
    torch = importlib.import_module("torch") if importlib.util.find_spec("torch") else None

    def scramble() -> None:
        seed = random.SystemRandom().randrange(2**32)
        np.random.seed(seed)
        np.random.random(seed % 97 + 1)
        random.seed(seed)
        if torch is not None:
            torch.manual_seed(seed)

    def noisy_policy(observation: SimObservation) -> np.ndarray:
        scramble()
        return _towards_first_object(observation)

    for index in (3, 0):
        scramble()
        episode = adapter.open_episode(spatial, index)
        policy_stream = np.random.get_state()
        observation = episode.reset()
        after = np.random.get_state()
        assert np.array_equal(after[1], policy_stream[1]) and after[2] == policy_stream[2], "reset moved np.random"
        while not episode.done:
            observation = episode.step(noisy_policy(observation))
        assert episode.result() == reference[index]
        episode.close()


@pytest.mark.timeout(240)
def test_the_end_effector_matrix_is_the_one_lerobots_libero_env_reads(
    spatial: Manifest, adapter: LiberoBenchmark
) -> None:
    """X-VLA's LIBERO state is built from the arm controller's ``ee_ori_mat``, which LeRobot's env
    reads (robosuite's observation has only a quaternion): the worker sends those 9 values
    row-major, after the reset's wait steps and after each step. They are the simulator's pose of
    the controller's end-effector site, and not the frame of ``robot0_eef_quat`` (the hand body),
    which is a quarter turn about z away: a matrix derived from the quaternion would be wrong."""
    transform = importlib.import_module("robosuite.utils.transform_utils")
    quarter_turn = np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    episode = adapter.open_episode(spatial, 2)
    try:
        observation = episode.reset()
        seen = []
        while True:
            env = episode._env
            controller = env.env.robots[0].controller  # what lerobot/envs/libero.py reads
            matrix = observation.state["robot0_eef_mat"]
            assert matrix.dtype == np.float64 and matrix.shape == (9,)
            assert np.array_equal(matrix, np.asarray(controller.ee_ori_mat).reshape(9))
            assert np.array_equal(matrix, env.sim.data.get_site_xmat(controller.eef_name).reshape(9))
            hand = transform.quat2mat(observation.state["robot0_eef_quat"])
            np.testing.assert_allclose(hand.T @ matrix.reshape(3, 3), quarter_turn, atol=1e-2)
            seen.append(matrix)
            if episode.done:
                break
            observation = episode.step(_towards_first_object(observation))
    finally:
        episode.close()
    assert len(seen) == 4 and not np.array_equal(seen[0], seen[-1])  # it follows the arm


@pytest.mark.timeout(240)
def test_initial_observation_drift_is_refused_before_the_rollout(spatial: Manifest, adapter: LiberoBenchmark) -> None:
    drifted = _with_changes(spatial, lambda d: d["episodes"][1].update(initial_observation_digest="0" * 64))
    episode = adapter.open_episode(drifted, 1)
    try:
        with pytest.raises(BenchmarkError) as raised:
            episode.reset()
        assert raised.value.field == "episodes[1].initial_observation_digest"
        assert spatial.data["versions"]["gl_renderer"] in str(raised.value)
        with pytest.raises(RuntimeError, match="before reset"):
            episode.step(np.zeros(7))
    finally:
        episode.close()


def _set(path: str, value: object) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        *parents, last = path.split(".")
        node = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value

    return change


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("change", "field"),
    [
        (_set("source.bddl_sha256", "0" * 64), "source.bddl_sha256"),
        (_set("source.init_sha256", "1" * 64), "source.init_sha256"),
        (_set("setting", "libero_100"), "setting"),
        (_set("task", "put_the_bowl_on_the_moon"), "task"),
        (_set("protocol.task_id", 10), "protocol.task_id"),
        (_set("versions.mujoco", "3.2.3"), "versions.mujoco"),
        (_set("protocol.trial_stream", "np.random.seed(seed) per trial"), "protocol.trial_stream"),
        (_set("protocol.preset", "openpi"), "protocol.preset"),
        (_set("episodes.2.init_state_index", 3), "episodes[2].init_state"),
        (_set("episodes.2.fixture_poses.flat_stove_1.pos", [0.0]), "episodes[2].fixture_poses.flat_stove_1.pos"),
    ],
)
def test_mismatched_manifest_is_refused_naming_the_field(
    spatial: Manifest, change: Callable[[dict], None], field: str
) -> None:
    with pytest.raises(BenchmarkError) as raised:
        LiberoBenchmark().open_episode(_with_changes(spatial, change), 2)
    assert raised.value.field == field


@pytest.mark.timeout(240)
def test_manifest_whose_bytes_do_not_match_its_hash_is_refused(spatial: Manifest) -> None:
    tampered = dataclasses.replace(spatial, hash="f" * 64)
    with pytest.raises(ManifestError) as raised:
        adapter_class("libero")().open_episode(tampered, 0)
    assert raised.value.field == "hash"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--suite", "libero_100"], "--suite"),
        (["--suite", "libero_goal", "--tasks", "10"], "--tasks"),
        (["--suite", "libero_goal", "--tasks", "2-x"], "--tasks"),
        (["--suite", "libero_goal", "--tasks", "0-1", "--trials", "51"], "--trials"),
        (["--suite", "libero_goal", "--camera-size", "0"], "--camera-size"),
        (["--suite", "libero_goal", "--seed", str(2**32)], "--seed"),
        (["--suite", "libero_goal", "--protocol", "openpi-0.5"], "--protocol"),
        (["--suite", "libero_goal", "--protocol", "lerobot", "--seed", str(2**32 - 5)], "--seed"),
        (["--suite", "libero_goal", "--protocol", "oft", "--trials", "0"], "--trials"),
    ],
)
def test_bad_build_options_are_refused_naming_the_option(argv: list[str], field: str) -> None:
    with pytest.raises(BenchmarkError) as raised:
        _build(*argv, "--jobs", "2")
    assert raised.value.field == field


def test_images_are_rotated_half_a_turn_and_state_is_public_float64() -> None:
    raw_image = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    raw = {
        "agentview_image": raw_image,
        "robot0_eye_in_hand_image": raw_image + 1,
        "robot0_eef_pos": np.array([0.1, 0.2, 0.3], dtype=np.float32),
        "bowl_1_quat": np.array([0.0, 0.0, 0.0, 1.0]),
        "object-state": np.zeros(14),
    }
    observation = to_observation(raw)
    assert np.array_equal(observation.images["agentview"], np.rot90(raw_image, 2))
    assert observation.images["robot0_eye_in_hand"].flags["C_CONTIGUOUS"]
    assert set(observation.state) == {"robot0_eef_pos", "bowl_1_quat"}
    assert observation.state["robot0_eef_pos"].dtype == np.float64


@pytest.mark.timeout(300)
def test_libero_object_scans_in_parallel_and_replays_with_object_poses() -> None:
    manifests = _build(
        "--suite", "libero_object", "--tasks", "0-1", "--trials", "2", "--jobs", "2", "--observation-digest", *SMALL
    )
    assert [m.data["protocol"]["task_id"] for m in manifests] == [0, 1]
    assert manifests[0].task != manifests[1].task
    manifest = manifests[0]
    assert all(entry["fixture_poses"] == {} for entry in manifest.episodes)
    adapter = LiberoBenchmark()
    try:
        episode = adapter.open_episode(manifest, 1)
        observation = episode.reset()
        objects = _scene_objects(observation)
        assert len(objects) >= 2
        assert all(f"{name}_pos" in observation.state and f"{name}_quat" in observation.state for name in objects)
        assert observation.images["agentview"].shape == (64, 64, 3)
        while not episode.done:
            observation = episode.step(_towards_first_object(observation))
        first = episode.result()
        episode.close()
        np.random.seed(12345)
        again = _run_groups(adapter, manifest, [[1]])[1]
    finally:
        adapter.close()
    assert again == first and first.steps == 3
