"""Meta-World's environment as LeRobot 0.4.4's ``MetaworldEnv`` builds and observes it.

LeRobot builds each task's environment once: ``metaworld.MT1(task, seed=42)``, the task's class with
the `corner2` camera, its first training task set, that camera moved to (0.75, 0.075, 0.7), one
reset, and from then on a start vector (object and goal positions) drawn by every reset. Its
observation is the `corner2` image, which MuJoCo renders upside down and mirrored, flipped back on
both axes, and ``agent_pos``, the first four values of Meta-World's 39-D observation (hand position
and gripper opening). Its actions are Meta-World's 4-D action space, float32 in [-1, 1]: hand
motion in x, y, z and gripper effort.

An episode here is built the same way, then the start vectors its reset drew are replayed in it
(``reset_to``): Meta-World ignores ``reset(seed=)``, so a trial is its start vectors.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.base import BenchmarkError, SimObservation, TraceDigest

CAMERA = "corner2"
# Where LeRobot puts the corner2 camera (lerobot/envs/metaworld.py, _make_envs_task).
CAMERA_POSITION = (0.75, 0.075, 0.7)
CAMERA_SIZE = 480  # Meta-World's own render size, which LeRobot keeps
STATE = "agent_pos"
STATE_LENGTH = 4
ACTION_DIM = 4
# The seed of the benchmark that hands out each task's class and training tasks (LeRobot's).
MT1_SEED = 42


def make_env(task: str, camera_size: int) -> Any:
    """The task's environment as LeRobot builds it (one reset under the task's own start vector)."""
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    import metaworld

    try:
        benchmark = metaworld.MT1(task, seed=MT1_SEED)
    except (KeyError, ValueError) as exc:
        raise BenchmarkError(f"Meta-World has no task {task!r} ({exc})", field="task") from None
    env = benchmark.train_classes[task](
        render_mode="rgb_array", camera_name=CAMERA, width=camera_size, height=camera_size
    )
    env.set_task(benchmark.train_tasks[0])
    env.model.cam_pos[env.model.camera(CAMERA).id] = CAMERA_POSITION
    env.reset()
    return env


def draw_start(env: Any) -> tuple[list[npt.NDArray[np.float64]], npt.NDArray[np.float64]]:
    """Resets ``env`` drawing new start vectors, as every reset of LeRobot's env does (from numpy's
    global RNG: Meta-World 3.0.0's unseeded draw); what each ``reset_model`` call of the reset drew,
    in order, and the 39-D observation.

    A reset calls ``reset_model`` twice (``SawyerXYZEnv.reset``, then ``MujocoEnv.reset``), each
    drawing. The second call's vector places the objects and the goal; the first one's still shows
    in the first image, since some tasks move a site in the model after the second call's last
    forward pass (reach-v3's goal marker is drawn where the first call put it). Both are recorded.
    """
    drawn: list[npt.NDArray[np.float64]] = []
    reset_model = env.reset_model

    def recording() -> Any:
        result = reset_model()
        drawn.append(np.array(env._last_rand_vec, dtype=np.float64))
        return result

    env.reset_model, env._freeze_rand_vec = recording, False
    try:
        observation, _ = env.reset()
    finally:
        del env.reset_model
        env._freeze_rand_vec = True
    return drawn, np.asarray(observation, dtype=np.float64)


def reset_to(env: Any, starts: list[npt.NDArray[np.float64]], field: str) -> npt.NDArray[np.float64]:
    """Resets ``env`` with the recorded start vectors, one per ``reset_model`` call; Meta-World's
    39-D observation. BenchmarkError on ``field`` when the reset asks for another number of them."""
    queue = [np.array(start, dtype=np.float64) for start in starts]
    calls = 0
    reset_model = env.reset_model

    def replaying() -> Any:
        nonlocal calls
        calls += 1
        if calls > len(queue):
            raise BenchmarkError(f"{len(queue)} start vector(s) recorded, the reset asked for more", field=field)
        env._last_rand_vec = queue[calls - 1].copy()
        return reset_model()

    env.reset_model, env._freeze_rand_vec = replaying, True
    try:
        observation, _ = env.reset()
    finally:
        del env.reset_model
    if calls != len(queue):
        raise BenchmarkError(f"{len(queue)} start vector(s) recorded, the reset used {calls}", field=field)
    return np.asarray(observation, dtype=np.float64)


def start_length(env: Any) -> int:
    """How many numbers a start vector of this task has."""
    return int(env._random_reset_space.low.size)


def step(env: Any, action: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.float64], bool]:
    """One Meta-World step: the 39-D observation and whether the task is solved now."""
    observation, _, _, _, info = env.step(action)
    return np.asarray(observation, dtype=np.float64), bool(info.get("success", 0))


def render(env: Any) -> npt.NDArray[np.uint8]:
    """The corner2 image upright, as LeRobot's env hands it to a policy.

    Gymnasium's offscreen viewer makes its GL context current when it is created and never again,
    so in a process holding several environments (the adapter keeps finished ones) it would draw
    with whichever context was made current last; this makes the environment's own current first.
    """
    env.mujoco_renderer._get_viewer(render_mode="rgb_array").make_context_current()
    image: npt.NDArray[np.uint8] = np.ascontiguousarray(np.flip(env.render(), (0, 1)))
    return image


def observe(env: Any, observation: npt.NDArray[np.float64], cameras: tuple[str, ...]) -> SimObservation:
    """What a policy sees: the named cameras (only corner2 exists) and ``agent_pos``."""
    images = {CAMERA: render(env)} if CAMERA in cameras else {}
    return SimObservation(images=images, state={STATE: observation[:STATE_LENGTH].copy()})


def add_state(trace: TraceDigest, env: Any, observation: npt.NDArray[np.float64]) -> None:
    """The simulator's state after a reset or step, and Meta-World's observation, into ``trace``."""
    data = env.data
    trace.add("qpos", data.qpos)
    trace.add("qvel", data.qvel)
    trace.add("mocap_pos", data.mocap_pos)
    trace.add("mocap_quat", data.mocap_quat)
    trace.add("observation", observation)
