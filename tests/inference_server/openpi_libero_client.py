"""openpi's LIBERO evaluation client, restated step by step from openpi's
`examples/libero/main.py` at 15a9616 (not on PyPI), as the reference the closed-loop test
compares evalfleet's `--protocol openpi` run with. It uses what main.py uses: LIBERO's own
`OffScreenRenderEnv`, openpi-client's `image_tools` and `WebsocketClientPolicy`, and robosuite's
`quat2axisangle` (main.py's `_quat2axisangle`, :199-214, is a copy of it). Line numbers are
main.py's:

- `np.random.seed(seed)` (:50); per task one env of 256 x 256 cameras (:18, :85, :189-196) seeded
  with `env.seed(seed)` (:195), seed 7 (:45); trials 0, 1, ... in order (:89), each `env.reset()`
  (:93) then `set_init_state(initial_states[episode_idx])` (:82, :97);
- `t < max_steps + num_steps_wait` (:104): the first 10 (:37) steps are `LIBERO_DUMMY_ACTION`
  (:17, :108-111); then both images rotated 180 degrees (:115-116), `resize_with_pad` to 224
  (:28, :117-122) and `convert_to_uint8`; when the plan is empty (:127) the request (:130-141):
  the images, the state `eef_pos ‖ axis-angle(eef_quat) ‖ gripper_qpos` (:133-139), the prompt
  (:140); the first `replan_steps` 5 (:29, :148) actions of the reply are the plan; each is
  stepped as `action.tolist()` (:153), and `done` ends the episode as a success (:154-157).

`--max-steps` replaces the suite's limit (:60-69), as a manifest's `--max-steps` does. Writes one
JSON line per episode to `--results` (LIBERO prints to stdout): task id, trial, success, policy
steps.

    python openpi_libero_client.py --port 8000 --suite libero_object --tasks 0 --trials 2 --max-steps 8 \
        --results FILE
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
from typing import Any

import numpy as np
from libero.libero import benchmark, get_libero_path
from libero.libero.envs import OffScreenRenderEnv
from openpi_client import image_tools
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from robosuite.utils.transform_utils import quat2axisangle

LIBERO_DUMMY_ACTION = [0.0] * 6 + [-1.0]
LIBERO_ENV_RESOLUTION = 256
RESIZE_SIZE = 224
REPLAN_STEPS = 5
NUM_STEPS_WAIT = 10
SEED = 7


def image(obs: dict[str, Any], key: str) -> np.ndarray:
    rotated = np.ascontiguousarray(obs[key][::-1, ::-1])
    return image_tools.convert_to_uint8(image_tools.resize_with_pad(rotated, RESIZE_SIZE, RESIZE_SIZE))


def episode(env: Any, init_state: Any, prompt: str, port: int, max_steps: int) -> tuple[bool, int]:
    """One trial as main.py's inner loop runs it (:93-158); (done, policy steps)."""
    env.reset()
    plan: collections.deque[np.ndarray] = collections.deque()
    obs = env.set_init_state(init_state)
    # main.py keeps one client for the run (:73). Here each trial connects after its reset: LIBERO's
    # reset recompiles the scene holding the GIL, on a loaded CI machine for longer than the
    # server's keepalive ping waits (20 s), and openpi's protocol keeps nothing per connection.
    client = WebsocketClientPolicy("127.0.0.1", port)
    t, steps, done = 0, 0, False
    while t < max_steps + NUM_STEPS_WAIT:
        if t < NUM_STEPS_WAIT:
            obs, _, done, _ = env.step(LIBERO_DUMMY_ACTION)
            t += 1
            continue
        img, wrist = image(obs, "agentview_image"), image(obs, "robot0_eye_in_hand_image")
        if not plan:
            state = np.concatenate(
                (obs["robot0_eef_pos"], quat2axisangle(obs["robot0_eef_quat"]), obs["robot0_gripper_qpos"])
            )
            element = {"observation/image": img, "observation/wrist_image": wrist, "observation/state": state}
            chunk = client.infer({**element, "prompt": str(prompt)})["actions"]
            assert len(chunk) >= REPLAN_STEPS
            plan.extend(chunk[:REPLAN_STEPS])
        obs, _, done, _ = env.step(plan.popleft().tolist())
        steps += 1
        if done:
            break
        t += 1
    client._ws.close()  # openpi-client has no close(); the connection ends with the trial
    return bool(done), steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--suite", required=True)
    parser.add_argument("--tasks", type=int, nargs="+", required=True)
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--results", type=pathlib.Path, required=True)
    args = parser.parse_args()
    np.random.seed(SEED)
    suite = benchmark.get_benchmark_dict()[args.suite]()
    for task_id in args.tasks:
        task = suite.get_task(task_id)
        initial_states = suite.get_task_init_states(task_id)
        bddl = pathlib.Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
        env = OffScreenRenderEnv(
            bddl_file_name=bddl, camera_heights=LIBERO_ENV_RESOLUTION, camera_widths=LIBERO_ENV_RESOLUTION
        )
        env.seed(SEED)
        for trial in range(args.trials):
            done, steps = episode(env, initial_states[trial], task.language, args.port, args.max_steps)
            with args.results.open("a") as out:
                out.write(json.dumps({"task_id": task_id, "trial": trial, "success": done, "steps": steps}) + "\n")
        env.close()


if __name__ == "__main__":
    main()
