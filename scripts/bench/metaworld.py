"""Meta-World seconds per action: LeRobot's ``MetaworldEnv`` loop against evalfleet's episode, in one run.

Both loops run in one process, .venv-lerobot with the Meta-World overlay on the path (`make
lerobot-metaworld`), on the same Meta-World stack (metaworld 3.0.0, MuJoCo 3.3.7, OSMesa), the same
trial and the same actions (seeded uniform actions in [-1, 1], float32, so no episode ends early):

- ``lerobot``: lerobot-eval's rollout on LeRobot's own env: one ``env.step`` per action, each one
  rendering the 480x480 corner2 image into the observation (LeRobot's env renders every step,
  whether or not a policy reads it);
- ``evalfleet``: the adapter's episode, ``execute`` of each ``--executed`` actions (5 of a 10-action
  chunk by default), rendering the image once after the last, as a renderer worker runs a chunk.

Each starts from a fresh reset of the trial and the two alternate ``--repeats`` times; the figure is
seconds per executed action over ``--actions`` actions (resets left out), and the ratio
``lerobot / evalfleet`` from the same run.

    PYTHONPATH=.venv-lerobot-metaworld:. MUJOCO_GL=osmesa .venv-lerobot/bin/python -m scripts.bench.metaworld
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from benchmarks.metaworld.adapter import MetaworldBenchmark
from benchmarks.metaworld.build import build_manifests
from benchmarks.metaworld.sim import ACTION_DIM, CAMERA, CAMERA_SIZE
from manifests.format import Manifest


def lerobot_loop(task: str, seed: int, actions: Sequence[npt.NDArray[np.float32]]) -> float:
    """Seconds per action of LeRobot's env stepped once per action (the reset left out)."""
    from lerobot.envs.metaworld import MetaworldEnv

    np.random.seed(seed)
    env = MetaworldEnv(task=task, obs_type="pixels_agent_pos")
    env.reset(seed=seed)
    started = time.perf_counter()
    for action in actions:
        env.step(action)
    elapsed = time.perf_counter() - started
    env.close()
    return elapsed / len(actions)


def evalfleet_loop(manifest: Manifest, executed: int, actions: Sequence[npt.NDArray[np.float32]]) -> float:
    """Seconds per action of evalfleet's episode run ``executed`` actions per chunk (the reset left out)."""
    adapter = MetaworldBenchmark(max_idle_envs=0)
    episode = adapter.open_episode(manifest, 0, cameras=(CAMERA,))
    episode.reset()
    started = time.perf_counter()
    for start in range(0, len(actions), executed):
        episode.execute(actions[start : start + executed])
    elapsed = time.perf_counter() - started
    episode.close()
    adapter.close()
    return elapsed / len(actions)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench.metaworld")
    parser.add_argument("--tasks", default="reach-v3,assembly-v3")
    parser.add_argument("--actions", type=int, default=100)
    parser.add_argument("--executed", type=int, default=5, help="actions executed per chunk")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1000)
    args = parser.parse_args()
    # LeRobot (torch, torchvision) first: imported after Meta-World had built an environment,
    # torchvision's import crashed the process (SIGSEGV).
    import lerobot.envs.metaworld  # noqa: F401

    rng = np.random.default_rng(0)
    actions = [rng.uniform(-1, 1, ACTION_DIM).astype(np.float32) for _ in range(args.actions)]
    build = argparse.Namespace(
        tasks=args.tasks, trials=1, seed=args.seed, max_steps=0, camera_size=CAMERA_SIZE, observation_digest=False
    )
    print(f"# {platform.node()} {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print("| task | loop | s/action (median) | runs | x lerobot |")
    print("|---|---|---|---|---|")
    for manifest in build_manifests(build):
        loops: dict[str, Callable[[], float]] = {
            "lerobot": functools.partial(lerobot_loop, manifest.task, args.seed, actions),
            "evalfleet": functools.partial(evalfleet_loop, manifest, args.executed, actions),
        }
        runs: dict[str, list[float]] = {name: [] for name in loops}
        for _ in range(args.repeats):
            for name, loop in loops.items():
                runs[name].append(loop())
        base = statistics.median(runs["lerobot"])
        for name, seconds in runs.items():
            median = statistics.median(seconds)
            listed = ", ".join(f"{s:.4f}" for s in seconds)
            print(f"| {manifest.task} | {name} | {median:.4f} | {listed} | {base / median:.2f} |")


if __name__ == "__main__":
    main()
