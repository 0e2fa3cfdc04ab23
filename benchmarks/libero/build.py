"""The LIBERO scan: one manifest per task, replaying a harness's trial stream.

openvla and openpi call ``env.seed(S)`` once per task and then ``reset()`` +
``set_init_state(init_states[i])`` for trials i = 0, 1, ...; each reset draws fixture poses and
object placements from the RNG stream the earlier resets advanced. lerobot-eval seeds every reset
itself, trial i under ``S + i``. The scan runs the preset's stream (``--protocol``,
``benchmarks.libero.protocols``) once and records what each trial got (its fixture poses, and the
solver warm start its placements left), so any trial can later be rebuilt on its own, in any order,
on any worker. Tasks are independent, so they are scanned in parallel processes.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from benchmarks.base import BenchmarkError, observation_digest
from benchmarks.libero.manifest import BENCHMARK, Protocol
from benchmarks.libero.protocols import EPISODE_SEED, PRESETS, TASK_STREAM, Resolved, resolve
from benchmarks.libero.runtime import (
    SUITE_MAX_STEPS,
    check_suite,
    file_sha256,
    installed_versions,
    read_init_states,
    resolve_task,
    suite_size,
)
from benchmarks.libero.sim import (
    gl_renderer,
    global_numpy_rng,
    make_env,
    observe,
    read_fixture_poses,
    read_warmstart,
)
from manifests.format import Manifest, build, parse

BUILDER = "evalfleet.libero/v1"


@dataclass(frozen=True)
class TaskBuild:
    """What one scan process needs: picklable, so it crosses into a spawned process."""

    suite: str
    task_id: int
    trials: int
    protocol: Protocol
    observation_digest: bool


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the `manifest build libero` options (the caller adds --out).

    The protocol options default to None, the preset's value; given, they override it."""
    parser.add_argument("--suite", required=True, help=f"one of {', '.join(SUITE_MAX_STEPS)}")
    parser.add_argument("--tasks", default="all", help="task ids in suite order: 'all', '0-9', '0,3,5-7'")
    parser.add_argument(
        "--protocol",
        default="evalfleet",
        help=f"the harness whose trials to build: {', '.join(PRESETS)} (docs/benchmarks.md, Protocol presets)",
    )
    parser.add_argument("--trials", type=int, help="trials per task, from init state 0 on (preset: 50, lerobot 10)")
    parser.add_argument("--seed", type=int, help="the reset RNG's seed (preset: openpi 7, oft 0, lerobot 1000)")
    parser.add_argument("--jobs", type=int, default=0, help="parallel task scans (0: one per core)")
    parser.add_argument("--camera-size", type=int, help="camera height and width in pixels (preset: 256)")
    parser.add_argument("--max-steps", type=int, help="policy step limit (0: the preset's for the suite)")
    parser.add_argument("--wait-steps", type=int, help="settle steps before the policy acts (preset: 10)")
    parser.add_argument(
        "--observation-digest",
        action="store_true",
        help="record each trial's initial observation digest, checked by workers before a rollout",
    )


def build_manifests(args: argparse.Namespace) -> list[Manifest]:
    """Scans the selected tasks (in parallel) and returns their manifests in task order."""
    check_suite(args.suite, "--suite")
    for name in ("trials", "camera_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise BenchmarkError(f"must be >= 1, got {getattr(args, name)}", field=f"--{name.replace('_', '-')}")
    for name in ("seed", "jobs", "max_steps", "wait_steps"):
        if getattr(args, name) is not None and getattr(args, name) < 0:
            raise BenchmarkError(f"must be >= 0, got {getattr(args, name)}", field=f"--{name.replace('_', '-')}")
    chosen = resolve(
        args.protocol,
        args.suite,
        seed=args.seed,
        trials=args.trials,
        max_steps=args.max_steps,
        wait_steps=args.wait_steps,
        camera_size=args.camera_size,
    )
    _check_seed_range(chosen)
    task_ids = parse_task_ids(args.tasks, suite_size(args.suite, "--suite"))
    for task_id in task_ids:
        task = resolve_task(args.suite, task_id, "--tasks")
        available = len(read_init_states(task.init_path)[1])
        if chosen.trials > available:
            raise BenchmarkError(
                f"{task.name} has {available} init states, asked for {chosen.trials}", field="--trials"
            )
    builds = [
        TaskBuild(
            suite=args.suite,
            task_id=task_id,
            trials=chosen.trials,
            protocol=Protocol(
                task_id=task_id,
                seed=chosen.seed,
                num_steps_wait=chosen.wait_steps,
                max_steps=chosen.max_steps,
                camera_height=chosen.camera_size,
                camera_width=chosen.camera_size,
                trial_stream=chosen.preset.trial_stream,
                preset=chosen.record(),
            ),
            observation_digest=args.observation_digest,
        )
        for task_id in task_ids
    ]
    jobs = min(len(builds), args.jobs or os.cpu_count() or 1)
    if jobs == 1:
        bodies = [build_task_manifest(b) for b in builds]
    else:
        # A fresh interpreter per scan: no inherited GL context or RNG state from this process.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            bodies = list(pool.map(build_task_manifest, builds))
    return [parse(body) for body in bodies]


def _check_seed_range(chosen: Resolved) -> None:
    """numpy seeds lie in [0, 2**32); a per-episode stream uses seed .. seed + trials - 1."""
    last = chosen.seed + (chosen.trials - 1 if chosen.preset.trial_stream == EPISODE_SEED else 0)
    if last >= 2**32:
        uses = f"; the {chosen.preset.name} stream seeds up to {last}" if last != chosen.seed else ""
        raise BenchmarkError(f"must be below 2**32 (numpy's seed range), got {chosen.seed}{uses}", field="--seed")


def parse_task_ids(spec: str, count: int) -> list[int]:
    """'all', '3', '0-9' or '0,3,5-7' -> sorted unique task ids, each within 0..count-1."""
    if spec == "all":
        return list(range(count))
    ids: set[int] = set()
    try:
        for part in spec.split(","):
            first, _, last = part.partition("-")
            ids.update(range(int(first), int(last or first) + 1))
    except ValueError:
        raise BenchmarkError(f"expected 'all', '0-9' or '0,3,5-7', got {spec!r}", field="--tasks") from None
    if not ids or min(ids) < 0 or max(ids) >= count:
        raise BenchmarkError(f"task ids must lie within 0-{count - 1}, got {spec!r}", field="--tasks")
    return sorted(ids)


def build_task_manifest(job: TaskBuild) -> bytes:
    """Scans one task and returns its sealed manifest's bytes (bytes cross processes cheaply)."""
    task = resolve_task(job.suite, job.task_id, "--tasks")
    init_sha256, states = read_init_states(task.init_path)
    protocol = job.protocol
    env = make_env(task, protocol.camera_height, protocol.camera_width)
    try:

        def scan(trial: int) -> dict[str, Any]:
            env.reset()
            entry = {
                "episode_id": f"{job.suite}-{job.task_id:02d}-{trial:03d}",
                "trial": trial,
                "instruction": task.language,
                "init_state_index": trial,
                "init_state": states[trial].tolist(),
                "fixture_poses": read_fixture_poses(env),
                "qacc_warmstart": read_warmstart(env),
            }
            raw = env.set_init_state(states[trial])
            if job.observation_digest:
                entry["initial_observation_digest"] = observation_digest(observe(env, raw))
            return entry

        if protocol.trial_stream == TASK_STREAM:
            # env.seed(S) once per task (openpi main.py:195, OFT libero_utils.py:24).
            with global_numpy_rng(protocol.seed):
                episodes = [scan(trial) for trial in range(job.trials)]
        else:
            # env.seed(S + k) right before episode k's reset (lerobot envs/libero.py:298-299).
            episodes = []
            for trial in range(job.trials):
                with global_numpy_rng(protocol.seed + trial):
                    episodes.append(scan(trial))
        versions = {**installed_versions(), "python": platform.python_version()}
        if job.observation_digest:
            versions.update(mujoco_gl=os.environ["MUJOCO_GL"], gl_renderer=gl_renderer(env))
    finally:
        env.close()
    manifest = build(
        benchmark=BENCHMARK,
        task=task.name,
        setting=job.suite,
        episodes=episodes,
        protocol=protocol.record(),
        versions=versions,
        source={
            "builder": BUILDER,
            "bddl_file": task.bddl_file,
            "bddl_sha256": file_sha256(task.bddl_path),
            "init_file": task.init_file,
            "init_sha256": init_sha256,
        },
    )
    return manifest.body
