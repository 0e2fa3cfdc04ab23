"""RoboTwin seconds per action: upstream's evaluation loop against evalfleet's episode, in one run.

Run by .venv-robotwin's python on a RoboTwin checkout (docs/benchmarks.md, RoboTwin on the CPU) and
a RoboTwin manifest; the actions are the expert's own rows for the manifest's first episode
(``RoboTwinRuntime.expert_rows``), so the arms move as they do in a solved episode. A policy
answering chunks of 10 of which 5 are executed, as both loops run it:

- ``upstream``: ``script/eval_policy.py``'s loop with a deploy script like RoboTwin's ACT and DP
  ones: ``get_obs()`` before each policy call, then ``take_action`` and ``get_obs()`` for each
  executed action. Every ``get_obs()`` renders all four cameras.
- ``evalfleet``: the adapter's episode, ``execute`` of each 5 actions, observing the policy's
  cameras (``--cameras``, default RoboTwin's three policy cameras) once after the last.

Both start from a fresh ``setup_demo`` of the same seed and alternate ``--repeats`` times; the
figure is seconds per executed action over ``--actions`` actions (resets left out), and the ratio
``upstream / evalfleet`` from the same run.

    .venv-robotwin/bin/python -m scripts.bench.robotwin --robotwin-root DIR MANIFEST
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.robotwin.adapter import RoboTwinBenchmark
from benchmarks.robotwin.config import POLICY_CAMERAS, eval_setup
from benchmarks.robotwin.expert import entry_rows
from benchmarks.robotwin.rng import NumpyStream
from manifests.format import Manifest, read

EXECUTED = 5


def upstream_loop(benchmark: RoboTwinBenchmark, manifest: Manifest, rows: Any) -> float:
    """Seconds per action of upstream's loop over ``rows`` (after ``setup_demo``)."""
    entry = manifest.episodes[0]
    setup = eval_setup(benchmark.root, manifest.task, entry["task_config"])
    runtime = benchmark.runtime
    env = runtime.acquire(manifest.task)
    try:
        with runtime.running(NumpyStream()):
            env.setup_demo(**setup.setup_kwargs(seed=entry["seed"], episode_index=0))
            env.set_instruction(instruction=entry["instruction"])
            started = time.perf_counter()
            for start in range(0, len(rows), EXECUTED):
                env.get_obs()  # eval_policy.py, before each policy call
                for row in rows[start : start + EXECUTED]:
                    env.take_action(row, action_type="qpos")
                    env.get_obs()  # the deploy script, after each action
            seconds = time.perf_counter() - started
        runtime.close_env(env, setup.clear_cache_freq)
    finally:
        runtime.release(manifest.task, env)
    return seconds / len(rows)


def evalfleet_loop(benchmark: RoboTwinBenchmark, manifest: Manifest, rows: Any, cameras: list[str]) -> float:
    """Seconds per action of the adapter's episode over ``rows`` (after ``reset``)."""
    episode = benchmark.open_episode(manifest, 0, cameras=cameras)
    try:
        episode.reset()
        started = time.perf_counter()
        for start in range(0, len(rows), EXECUTED):
            episode.execute(rows[start : start + EXECUTED])
        seconds = time.perf_counter() - started
    finally:
        episode.close()
    return seconds / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--robotwin-root", type=Path, required=True)
    parser.add_argument("--actions", type=int, default=60, help="executed actions per loop (a multiple of 5)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cameras", nargs="+", default=list(POLICY_CAMERAS))
    args = parser.parse_args()
    manifest = read(args.manifest)
    benchmark = RoboTwinBenchmark(args.robotwin_root)
    entry = manifest.episodes[0]
    check, expert = entry_rows(benchmark.runtime, manifest, 0)
    assert check.accepted and len(expert) >= args.actions, (check, len(expert))
    rows = np.asarray(expert[: args.actions])
    loops: dict[str, Callable[[], float]] = {
        "upstream": lambda: upstream_loop(benchmark, manifest, rows),
        "evalfleet": lambda: evalfleet_loop(benchmark, manifest, rows, args.cameras),
    }
    loops["upstream"]()  # the renderer's first pictures compile its shaders: not part of either figure
    times: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(args.repeats):
        for name, loop in loops.items():
            times[name].append(loop())
    print(f"{platform.node()} {manifest.task} seed {entry['seed']}: {args.actions} actions, {EXECUTED} per chunk")
    print(f"evalfleet observes {', '.join(args.cameras)}; upstream renders all four cameras per get_obs()")
    for name, values in times.items():
        print(f"{name:10s} s/action median {np.median(values):.4f}  runs {', '.join(f'{v:.4f}' for v in values)}")
    ratio = np.median(times["upstream"]) / np.median(times["evalfleet"])
    print(f"upstream / evalfleet: {ratio:.2f}x")


if __name__ == "__main__":
    main()
