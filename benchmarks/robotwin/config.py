"""RoboTwin's evaluation settings and the arguments its ``setup_demo`` receives.

``script/eval_policy.py`` (``main``) at c3ddfa8 loads ``task_config/<config>.yml``, adds the task
name, the camera size and the resolved embodiment, sets ``eval_mode`` and passes the lot to
``setup_demo(**args)``. This module assembles the same arguments so that an episode rebuilt here
is the episode upstream evaluates; it leaves out what only serves upstream's own outputs (video
directories, checkpoint labels), because a ``eval_video_save_dir`` would make ``take_action`` write
frames to an ffmpeg pipe the worker never opens.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.base import BenchmarkError
from benchmarks.robotwin.root import RoboTwinRoot

TASK_CONFIGS = ("demo_clean", "demo_randomized")
INSTRUCTION_TYPES = ("seen", "unseen")
POLICY_CAMERAS = ("head_camera", "left_camera", "right_camera")


class ConfigError(BenchmarkError):
    """A RoboTwin config file is missing, unreadable, or does not describe a supported setup."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message, field=str(path))
        self.path = path


@dataclass(frozen=True)
class Setting:
    """An evaluated condition: a task config (visual conditions) and an instruction pool."""

    name: str
    task_config: str
    instruction_type: str


SETTINGS = {
    f"{config.removeprefix('demo_')}-{pool}": Setting(f"{config.removeprefix('demo_')}-{pool}", config, pool)
    for config in TASK_CONFIGS
    for pool in INSTRUCTION_TYPES
}
DEFAULT_SETTINGS = ("clean-seen", "randomized-unseen")


def setting_for(task_config: str, instruction_type: str) -> Setting:
    """The setting named by its parts; raises BenchmarkError naming what is not supported."""
    for setting in SETTINGS.values():
        if (setting.task_config, setting.instruction_type) == (task_config, instruction_type):
            return setting
    raise BenchmarkError(
        f"unsupported setting task_config={task_config!r} instruction_type={instruction_type!r}; "
        f"supported: {', '.join(TASK_CONFIGS)} x {', '.join(INSTRUCTION_TYPES)}",
        field="setting",
    )


@dataclass(frozen=True)
class EvalSetup:
    """Everything needed to build one task's scenes under one task config."""

    task: str
    task_config: str
    args: Mapping[str, Any]
    step_limit: int
    image_shapes: Mapping[str, tuple[int, int, int]]
    action_dim: int
    clear_cache_freq: int

    def setup_kwargs(self, *, seed: int, episode_index: int) -> dict[str, Any]:
        """Fresh ``setup_demo`` keyword arguments; a deep copy, because RoboTwin edits nested configs."""
        kwargs = copy.deepcopy(dict(self.args))
        kwargs.update(now_ep_num=episode_index, seed=seed, is_test=True)
        return kwargs


def step_limits(root: RoboTwinRoot) -> dict[str, int]:
    """Per-task step limits (counted in ``take_action`` calls) from ``_eval_step_limit.yml``."""
    path = root.path / "task_config" / "_eval_step_limit.yml"
    data = load_yaml(path)
    if not isinstance(data, dict) or not all(isinstance(v, int) and v > 0 for v in data.values()):
        raise ConfigError(path, "must map task names to positive step counts")
    return dict(data)


def tasks(root: RoboTwinRoot) -> list[str]:
    """The evaluated tasks: those with a step limit and a task module, in the step-limit file's order."""
    return [task for task in step_limits(root) if (root.path / "envs" / f"{task}.py").is_file()]


def eval_setup(root: RoboTwinRoot, task: str, task_config: str) -> EvalSetup:
    """Assembles ``setup_demo``'s arguments for ``task`` as upstream's ``main()`` does in eval mode."""
    if task not in tasks(root):
        raise BenchmarkError(f"unknown RoboTwin task {task!r} (no step limit or no envs/{task}.py)", field="task")
    if task_config not in TASK_CONFIGS:
        raise BenchmarkError(
            f"unsupported task config {task_config!r}; supported: {', '.join(TASK_CONFIGS)}", field="task_config"
        )
    configs = root.path / "task_config"
    config_path = configs / f"{task_config}.yml"
    args = load_yaml(config_path)
    embodiments = load_yaml(configs / "_embodiment_config.yml")
    cameras = load_yaml(configs / "_camera_config.yml")
    try:
        (embodiment,) = args["embodiment"]
        robot_file = embodiments[embodiment]["file_path"]
        head, wrist = cameras[args["camera"]["head_camera_type"]], cameras[args["camera"]["wrist_camera_type"]]
        clear_cache_freq = int(args["clear_cache_freq"])
        embodiment_config = load_yaml(root.path / robot_file / "config.yml")
        left_joints, right_joints = embodiment_config["arm_joints_name"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            config_path, f"needs one embodiment with two arms, known camera types and clear_cache_freq ({exc!r})"
        ) from exc
    args.update(
        task_name=task,
        task_config=task_config,
        head_camera_h=head["h"],
        head_camera_w=head["w"],
        left_robot_file=robot_file,
        right_robot_file=robot_file,
        dual_arm_embodied=True,
        left_embodiment_config=embodiment_config,
        right_embodiment_config=copy.deepcopy(embodiment_config),
        eval_mode=True,
        render_freq=0,
    )
    return EvalSetup(
        task=task,
        task_config=task_config,
        args=args,
        step_limit=step_limits(root)[task],
        image_shapes={
            "head_camera": (head["h"], head["w"], 3),
            "left_camera": (wrist["h"], wrist["w"], 3),
            "right_camera": (wrist["h"], wrist["w"], 3),
        },
        action_dim=len(left_joints) + 1 + len(right_joints) + 1,
        clear_cache_freq=clear_cache_freq,
    )


def load_yaml(path: Path) -> Any:
    """Reads a YAML config; pyyaml is imported here so that importing the adapter never needs it."""
    try:
        import yaml
    except ImportError as exc:
        raise ConfigError(path, "reading RoboTwin configs needs pyyaml (pip install pyyaml)") from exc
    try:
        with path.open("r", encoding="utf-8") as f:
            return yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(path, f"cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(path, f"not valid YAML ({exc})") from exc
