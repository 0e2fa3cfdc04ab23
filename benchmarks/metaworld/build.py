"""The Meta-World scan behind ``scheduler manifest build metaworld``: each task's trial stream.

lerobot-eval seeds numpy's global RNG once (``--seed``, 1000 by default) and every reset of its
Meta-World env draws the next start vector from it (Meta-World ignores ``reset(seed=)``). The scan
replays that stream per task, from a fresh ``--seed``: trial k gets the start vector of the k-th
reset, which is what ``lerobot-eval --env.type=metaworld --env.task=TASK --seed S`` runs as its
episode k at its default batch size (all episodes in one batch; at a smaller batch size, only until
an episode succeeds, since LeRobot's env then resets itself and draws again). Each trial is
recorded by the start vectors its reset drew, so any trial is later rebuilt on its own, on any
worker.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from benchmarks.base import BenchmarkError, observation_digest
from benchmarks.metaworld.definition import DEFAULT_SEED, DEFAULT_TRIALS
from benchmarks.metaworld.manifest import BENCHMARK, BUILDER, Protocol
from benchmarks.metaworld.sim import CAMERA, CAMERA_SIZE, draw_start, make_env, observe
from benchmarks.metaworld.stack import installed_versions
from benchmarks.metaworld.tasks import CONFIG_FILE, LEROBOT_VERSION, TaskTable, task_table
from manifests.format import Manifest, build


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """The `manifest build metaworld` options (the caller adds --out)."""
    parser.add_argument(
        "--tasks",
        required=True,
        help="Meta-World tasks and LeRobot's difficulty groups (easy, medium, hard, very_hard), "
        "comma-separated: 'reach-v3,easy'",
    )
    parser.add_argument("--trials", type=int, default=DEFAULT_TRIALS, help="trials per task (lerobot-eval: 50)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the start vectors' seed (lerobot-eval: 1000)")
    parser.add_argument("--max-steps", type=int, default=0, help="policy step limit (0: Meta-World's, 500)")
    parser.add_argument("--camera-size", type=int, default=CAMERA_SIZE, help="corner2's height and width (480)")
    parser.add_argument(
        "--observation-digest",
        action="store_true",
        help="record each trial's initial observation digest, checked by workers before a rollout",
    )


def build_manifests(args: argparse.Namespace) -> list[Manifest]:
    """One manifest per task, in the order the tasks are named (groups spelled out)."""
    for option, minimum in (("trials", 1), ("seed", 0), ("max_steps", 0), ("camera_size", 1)):
        value = getattr(args, option)
        if value < minimum:
            raise BenchmarkError(f"must be >= {minimum}, got {value}", field=f"--{option.replace('_', '-')}")
    versions = installed_versions()
    table = task_table()
    names = [name.strip() for name in args.tasks.split(",") if name.strip()]
    if not names:
        raise BenchmarkError("name at least one task or group", field="--tasks")
    tasks = table.select(names, "--tasks")
    return [scan_task(table, task, args, versions) for task in tasks]


def scan_task(table: TaskTable, task: str, args: argparse.Namespace, versions: dict[str, str]) -> Manifest:
    """The task's first ``args.trials`` trials of the stream seeded ``args.seed``."""
    env = make_env(task, args.camera_size)
    try:
        max_steps = args.max_steps or int(env.max_path_length)
        if max_steps > env.max_path_length:
            raise BenchmarkError(
                f"Meta-World ends every episode at {env.max_path_length} steps, got {max_steps}", field="--max-steps"
            )
        protocol = Protocol(camera_size=args.camera_size, max_steps=max_steps, seed=args.seed)
        entries = []
        with _global_numpy_seed(args.seed):
            for trial in range(args.trials):
                starts, observation = draw_start(env)
                entry: dict[str, Any] = {
                    "episode_id": f"{task}-{trial:04d}",
                    "trial": trial,
                    "starts": [start.tolist() for start in starts],
                    "instruction": table.instructions[task],
                }
                if args.observation_digest:
                    entry["initial_observation_digest"] = observation_digest(observe(env, observation, (CAMERA,)))
                entries.append(entry)
    finally:
        env.close()
    return build(
        benchmark=BENCHMARK,
        task=task,
        setting=table.group(task),
        episodes=entries,
        protocol=protocol.record(),
        versions=versions,
        source={"builder": BUILDER, "task_table": f"lerobot {LEROBOT_VERSION} {CONFIG_FILE}"},
    )


@contextlib.contextmanager
def _global_numpy_seed(seed: int) -> Iterator[None]:
    """numpy's global RNG seeded ``seed`` inside, as it was outside: Meta-World 3.0.0 draws start
    vectors from it, and nothing else in this process should see the scan's draws."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)
