"""What the broken-setup canary's per-step measurement costs, against the LIBERO step it rides on.

Every episode process feeds ``renderer_worker.health.HealthTracker`` the observation the policy is
shown (both cameras, the state) and the actions executed. This times that against the simulator
step of the same episode in the same process: one LIBERO trial (libero_spatial task 0, two 256x256
cameras, the ``seeded-random`` policy function), and per step ``env.step`` with the observation
built as the worker builds it, then the tracker's ``shown`` and ``ran`` on it, each timed on its
own. The ratio is the tracker's time over the step's: the share of a policy step the measurement
adds. The tracker is timed twice, with and without a declared action range, and once with every
camera verdict forced to stay unsettled (its worst case: each frame hashed and measured).

    MUJOCO_GL=osmesa .venv/bin/python -m scripts.bench.health            # 220 steps, ~1 min
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Mapping
from typing import Any

os.environ.setdefault("MUJOCO_GL", "osmesa")

import numpy as np
import numpy.typing as npt

from benchmarks.base import TraceDigest
from benchmarks.libero.manifest import episode_spec
from benchmarks.libero.sim import make_env, observe
from inference_server.backends.reference import seeded_random_chunk
from renderer_worker.health import HealthTracker
from scripts.bench.libero_workload import CHUNK, SEED
from scripts.bench.raw_libero import reset_trial
from scripts.bench.step_overhead import one_episode_manifests
from scripts.common.tables import markdown

LIBERO_RANGE = ([-0.9375] * 3 + [-0.375] * 3 + [-1.0], [0.9375] * 3 + [0.375] * 3 + [1.0])


class Unsettled(HealthTracker):
    """The tracker as if no camera's verdict ever settled: every frame hashed and measured."""

    def shown(self, images: Mapping[str, npt.NDArray[Any]], state: Mapping[str, npt.NDArray[Any]]) -> None:
        self._frames.clear()
        self._varied.clear()
        super().shown(images, state)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-steps", type=int, default=220, help="policy steps of the trial (default 220)")
    args = parser.parse_args(argv)
    (manifest,) = one_episode_manifests(1, args.max_steps)
    spec = episode_spec(manifest, 0)
    env = make_env(spec.task, spec.protocol.camera_height, spec.protocol.camera_width)
    observation = observe(env, reset_trial(env, spec, TraceDigest()))
    trackers = {
        "health, no range": HealthTracker(),
        "health, with range": HealthTracker(*LIBERO_RANGE),
        "health, never settled": Unsettled(*LIBERO_RANGE),
    }
    seconds: dict[str, list[float]] = {"LIBERO step + observation": [], **{name: [] for name in trackers}}
    for step in range(spec.protocol.max_steps):
        action = seeded_random_chunk(SEED, spec.episode_id, step, CHUNK, 7, 1.0)[:1]
        for name, tracker in trackers.items():
            started = time.perf_counter()
            tracker.shown(observation.images, observation.state)
            tracker.ran(action)
            seconds[name].append(time.perf_counter() - started)
        started = time.perf_counter()
        raw, _, done, _ = env.step(action[0].astype(np.float64))
        observation = observe(env, raw)
        seconds["LIBERO step + observation"].append(time.perf_counter() - started)
        if done:
            break
    for tracker in trackers.values():
        tracker.summary(spec.protocol.max_steps)
    base = statistics.mean(seconds["LIBERO step + observation"])
    rows = [
        [name, f"{statistics.mean(values) * 1e3:.3f}", f"{statistics.mean(values) / base:.2%}"]
        for name, values in seconds.items()
    ]
    print(f"{len(seconds['LIBERO step + observation'])} steps, cameras {sorted(observation.images)} at 256x256")
    print(markdown(["per policy step", "mean ms", "share of the step"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
