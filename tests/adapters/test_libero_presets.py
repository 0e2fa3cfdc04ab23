"""Protocol presets on the real simulator: a preset's trials are the harness's trials.

openpi's and OFT's stream (``env.seed(S)`` once per task, then ``reset()`` + ``set_init_state(row i)``
per trial) is driven through vla-eval 0.8.0's own ``LIBEROBenchmark``, which runs that stream
unsharded (``env_seed`` 7: openpi's, 0: OFT's); lerobot-eval's per-episode seeds cannot run here
(lerobot's virtualenv has no LIBERO), so its reset is restated line by line from
``lerobot/envs/libero.py`` 0.4.4. Each trial's fixture poses and initial observation must equal the
manifest entry's, and the adapter must rebuild the entry to that observation. Cameras render at
vla-eval's fixed 256 pixels, so the streams are kept to two or three trials.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from libero_guard import LIBERO_MISSING, REASON
from procs import cli

from benchmarks.base import observation_digest
from benchmarks.libero.protocols import resolve
from benchmarks.libero.runtime import import_libero, installed_versions, resolve_task
from benchmarks.libero.sim import observe, read_fixture_poses
from manifests.format import Manifest, write

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

from benchmarks.libero.adapter import LiberoBenchmark, add_build_arguments, build_manifests

pytestmark = [pytest.mark.proof, pytest.mark.slow, pytest.mark.libero]
SUITE = "libero_spatial"  # task 0 has fixtures (a stove and a cabinet), whose poses the stream decides


def _build(*argv: str) -> Manifest:
    parser = argparse.ArgumentParser()
    add_build_arguments(parser)
    (manifest,) = build_manifests(parser.parse_args(["--suite", SUITE, "--tasks", "0", "--jobs", "1", *argv]))
    return manifest


@contextlib.contextmanager
def _vla_eval_benchmark(env_seed: int) -> Iterator[Any]:
    """vla-eval's LIBEROBenchmark with no settle steps, so reset() returns the observation
    set_init_state gave; torch.load, which it patches for LIBERO's pickled init files, is restored."""
    import_libero()  # MUJOCO_GL first; vla-eval's module would pick EGL for PyOpenGL otherwise
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    import torch
    from vla_eval.benchmarks.libero.benchmark import LIBEROBenchmark
    from vla_eval.recording import NullEpisodeRecorder

    load = torch.load
    benchmark = LIBEROBenchmark(suite=SUITE, env_seed=env_seed, num_steps_wait=0)
    benchmark._recorder = NullEpisodeRecorder()  # what its start_episode() sets before reset()
    try:
        yield benchmark
    finally:
        benchmark.cleanup()
        torch.load = load


def _harness_matches(manifest: Manifest, trials: list[tuple[dict[str, Any], str]]) -> None:
    assert len(trials) == len(manifest.episodes)
    for entry, (fixture_poses, digest) in zip(manifest.episodes, trials, strict=True):
        assert entry["fixture_poses"] == fixture_poses, entry["episode_id"]
        assert entry["initial_observation_digest"] == digest, entry["episode_id"]


def _adapter_rebuilds_every_entry(manifest: Manifest) -> None:
    """reset() checks each entry's initial observation digest before its settle steps."""
    adapter = LiberoBenchmark(max_idle_envs=1)
    try:
        for index in reversed(range(len(manifest))):
            episode = adapter.open_episode(manifest, index, cameras=())
            episode.reset()
            episode.close()
    finally:
        adapter.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("preset", "seed", "trials"), [("openpi", 7, 3), ("oft", 0, 2)])
def test_a_task_stream_presets_trials_are_the_harness_trials(tmp_path, preset: str, seed: int, trials: int) -> None:
    manifest = _build("--protocol", preset, "--trials", str(trials), "--observation-digest")
    protocol = manifest.data["protocol"]
    chosen = resolve(preset, SUITE, seed=None, trials=trials, max_steps=None, wait_steps=None, camera_size=None)
    assert protocol["preset"] == chosen.record()
    assert (protocol["seed"], protocol["max_steps"], protocol["num_steps_wait"]) == (seed, 220, 10)
    assert protocol["camera_height"] == protocol["camera_width"] == 256
    assert protocol["trial_stream"] == "env.seed(seed) once per task, then reset() per trial; fixture poses recorded"

    with _vla_eval_benchmark(env_seed=seed) as harness:
        task = harness.get_tasks()[0]
        assert task["name"] == resolve_task(SUITE, 0, "task").language
        observed = []
        for trial in range(trials):
            raw = harness.reset({**task, "episode_idx": trial})
            observed.append((read_fixture_poses(harness._env), observation_digest(observe(harness._env, raw))))
    _harness_matches(manifest, observed)
    assert len({json.dumps(poses) for poses, _ in observed}) == trials, "each reset drew other fixture poses"
    _adapter_rebuilds_every_entry(manifest)

    shown = cli("manifest", "show", str(write(manifest, tmp_path)))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    label = f"{preset}+trials={trials}"
    assert any(line.startswith(f"preset     {label}: ") for line in lines)
    assert any(line.split()[:2] == ["seed", str(seed)] for line in lines)
    assert any(line.split()[:4] == ["trials", "50", "->", str(trials)] for line in lines)
    assert "           built under another stack than the harness's:" in lines
    assert any(line.split()[:1] == ["mujoco:"] and f"{installed_versions()['mujoco']} here" in line for line in lines)


def _lerobot_trials(seed: int, camera_size: int, trials: int) -> list[tuple[dict[str, Any], str]]:
    """lerobot 0.4.4's LiberoEnv for task 0, batch 1, restated: the env is built and reset once
    (envs/libero.py:236-242), and episode k's reset is env.seed(seed + k), reset(),
    set_init_state(init_states[k]) (envs/libero.py:296-302; seeds from scripts/lerobot_eval.py:333-338)."""
    benchmark, offscreen_render_env = import_libero()
    suite = benchmark.get_benchmark_dict()[SUITE]()
    task = suite.get_task(0)
    init_states = suite.get_task_init_states(0)
    env = offscreen_render_env(
        bddl_file_name=str(resolve_task(SUITE, 0, "task").bddl_path),
        camera_heights=camera_size,
        camera_widths=camera_size,
    )
    assert task.name == resolve_task(SUITE, 0, "task").name
    try:
        env.reset()
        observed = []
        for k in range(trials):
            env.seed(seed + k)
            env.reset()
            raw = env.set_init_state(init_states[k])
            observed.append((read_fixture_poses(env), observation_digest(observe(env, raw))))
        return observed
    finally:
        env.close()


@pytest.mark.timeout(300)
def test_the_lerobot_preset_seeds_every_reset_and_its_trials_are_lerobots() -> None:
    saved = np.random.get_state()
    manifest = _build("--protocol", "lerobot", "--trials", "2", "--camera-size", "64", "--observation-digest")
    protocol = manifest.data["protocol"]
    assert protocol["trial_stream"] == "env.seed(seed + trial) before each trial's reset(); fixture poses recorded"
    assert (protocol["seed"], protocol["max_steps"], protocol["num_steps_wait"]) == (1000, 280, 10)
    assert protocol["camera_height"] == protocol["camera_width"] == 64
    preset = protocol["preset"]
    assert preset["label"] == "lerobot+trials=2+camera-size=64"
    assert preset["overridden"] == {"trials": 2, "camera_size": 64}
    assert preset["constants"]["camera_size"] == 256 and preset["constants"]["trial_stream"] == "episode"
    assert [entry["init_state_index"] for entry in manifest.episodes] == [0, 1]
    try:
        _harness_matches(manifest, _lerobot_trials(seed=1000, camera_size=64, trials=2))
    finally:
        np.random.set_state(saved)
    _adapter_rebuilds_every_entry(manifest)
