"""Compares the adapter's on-demand observations with RoboTwin's own ``get_obs()``; run by
.venv-robotwin's python.

Usage: python robotwin_observe_check.py ROOT MANIFEST. Opens entry 0 with every policy camera,
steps 6 actions, and after the reset and the last step compares each image and the joint vector
with what ``get_obs()`` returns at the same state; then runs the same actions as two chunks of 3
with the head camera alone. Prints one JSON line.
"""

import json
import sys

import numpy as np

from benchmarks.robotwin.adapter import RoboTwinBenchmark
from manifests.format import read


def same_as_get_obs(episode, observation) -> bool:
    with benchmark.runtime.running(episode._stream):
        raw = episode._env.get_obs()
    images = all(np.array_equal(observation.images[c], raw["observation"][c]["rgb"]) for c in observation.images)
    return images and np.array_equal(observation.state["joint_action"], raw["joint_action"]["vector"])


benchmark = RoboTwinBenchmark(sys.argv[1])
manifest = read(sys.argv[2])
stepped = benchmark.open_episode(manifest, 0)
first = stepped.reset()
report = {"cameras": sorted(first.images), "reset_is_get_obs": same_as_get_obs(stepped, first)}
actions = np.array([first.state["joint_action"] + 0.02 * k for k in range(1, 7)])
last = [stepped.step(action) for action in actions][-1]
report["step_is_get_obs"] = same_as_get_obs(stepped, last)
chunked = benchmark.open_episode(manifest, 0, cameras=["head_camera"])
chunked.reset()
chunked.execute(actions[:3])
executed = chunked.execute(actions[3:])
report["chunk_cameras"] = sorted(executed.observation.images)
report["chunk_is_step"] = bool(np.array_equal(executed.observation.images["head_camera"], last.images["head_camera"]))
report["same_trace"] = chunked.result() == stepped.result()
print(json.dumps(report))
