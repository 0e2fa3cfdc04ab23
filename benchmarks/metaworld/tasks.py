"""Meta-World's tasks as LeRobot names them: the task list, difficulty groups and instructions.

Meta-World itself has no language. The instruction a policy is given for each task, the 50 task
names and LeRobot's difficulty groups (`easy`, `medium`, `hard`, `very_hard`) are LeRobot's, in
``lerobot/envs/metaworld_config.json`` of the installed lerobot distribution; the Meta-World stack
installs lerobot 0.4.4 for that file alone. It is read as JSON through the distribution's file list,
never by importing lerobot (which would import torch), and the builder records each trial's
instruction in its manifest, so a worker never reads it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
from dataclasses import dataclass
from typing import Any

from benchmarks.base import BenchmarkError

CONFIG_FILE = "lerobot/envs/metaworld_config.json"
LEROBOT_VERSION = "0.4.4"


@dataclass(frozen=True)
class TaskTable:
    """LeRobot's Meta-World tables: each task's instruction, and the tasks of each difficulty group."""

    instructions: dict[str, str]
    groups: dict[str, list[str]]

    def select(self, names: list[str], field: str) -> list[str]:
        """Task names and group names, each group spelled out in LeRobot's order, without repeats;
        BenchmarkError on ``field`` for a name that is neither."""
        chosen: list[str] = []
        for name in names:
            if name in self.groups:
                chosen.extend(self.groups[name])
            elif name in self.instructions:
                chosen.append(name)
            else:
                raise BenchmarkError(
                    f"unknown Meta-World task or group {name!r}; groups: {', '.join(self.groups)}, "
                    f"or one of the {len(self.instructions)} tasks (e.g. {next(iter(self.instructions))})",
                    field=field,
                )
        return list(dict.fromkeys(chosen))

    def group(self, task: str) -> str:
        """The difficulty group LeRobot puts ``task`` in (a task of the table is in exactly one)."""
        return next(group for group, tasks in self.groups.items() if task in tasks)

    def number(self, task: str, group: str) -> int | None:
        """The task's id in its group, as lerobot-eval numbers the tasks of a group it runs
        (``--env.task=easy``); None where the group does not hold it."""
        tasks = self.groups.get(group, [])
        return tasks.index(task) if task in tasks else None


@functools.cache
def task_table(path: tuple[str, ...] | None = None) -> TaskTable:
    """LeRobot's tables from the lerobot distribution installed here, or found on ``path`` (a stack
    overlay, for a process not on it); BenchmarkError when it is not the pinned one."""
    found = list(importlib.metadata.distributions(name="lerobot", path=list(path))) if path else []
    try:
        distribution = found[0] if path else importlib.metadata.distribution("lerobot")
    except (IndexError, importlib.metadata.PackageNotFoundError):
        raise BenchmarkError(
            "lerobot is not installed here; Meta-World runs on its stack (.stacks/metaworld-*, `make stacks`)",
            field="stack",
        ) from None
    if distribution.version != LEROBOT_VERSION:
        raise BenchmarkError(
            f"lerobot {distribution.version} is installed; Meta-World's task table is lerobot {LEROBOT_VERSION}'s",
            field="stack",
        )
    files = [file for file in distribution.files or () if str(file) == CONFIG_FILE]
    if not files:
        raise BenchmarkError(f"lerobot {distribution.version} holds no {CONFIG_FILE}", field="stack")
    data: dict[str, Any] = json.loads(files[0].read_text(encoding="utf-8"))
    return TaskTable(instructions=dict(data["TASK_DESCRIPTIONS"]), groups=dict(data["DIFFICULTY_TO_TASKS"]))
