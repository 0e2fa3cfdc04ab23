"""Meta-World's registry row: its spec section, plan, builder arguments and pinned stack.

Nothing here loads Meta-World: the scheduler reads it to parse a spec. The section's tasks are
checked against LeRobot's task table, which the plan reads from the Meta-World stack's overlay
before anything starts, and the builder again on the stack.
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import Field, field_validator

from benchmarks.definition import BenchmarkDefinition, Resolve, SpecSection
from benchmarks.metaworld.stack import PINS, STACK
from benchmarks.metaworld.tasks import TaskTable, task_table
from manifests import overlays
from manifests.format import Manifest

# lerobot-eval's defaults: --seed and --eval.n_episodes.
DEFAULT_SEED = 1000
DEFAULT_TRIALS = 50


class MetaworldSpec(SpecSection):
    """Meta-World episodes: the builder's options (`scheduler manifest build metaworld --help`).
    ``tasks`` names tasks (``reach-v3``) and LeRobot's difficulty groups (``easy``)."""

    tasks: list[str] = Field(min_length=1)
    trials: int = Field(default=DEFAULT_TRIALS, ge=1)
    seed: int = Field(default=DEFAULT_SEED, ge=0)
    max_steps: int = Field(default=0, ge=0)
    camera_size: int = Field(default=480, ge=1)
    observation_digest: bool = False

    @field_validator("tasks")
    @classmethod
    def _distinct_tasks(cls, tasks: list[str]) -> list[str]:
        if len(set(tasks)) != len(tasks):
            raise ValueError("a task is named twice")
        return tasks


def planned_episodes(section: MetaworldSpec) -> int:
    """Tasks (groups spelled out) times trials, by LeRobot's task table; BenchmarkError on
    ``--tasks`` for a name it does not have. 0 where the stack is not built (the plan says so first)."""
    table = _task_table()
    return 0 if table is None else len(table.select(section.tasks, "--tasks")) * section.trials


def task_number(manifest: Manifest) -> int | None:
    """The task's id in its difficulty group, as lerobot-eval numbers the tasks of a group it runs
    (``--env.task=easy``); None where the stack is not built."""
    table = _task_table()
    return None if table is None else table.number(manifest.task, manifest.setting)


def _task_table() -> TaskTable | None:
    """LeRobot's task table, read from the Meta-World stack's overlay (this process need not run on
    it: the scheduler reads it to plan and to number tasks); None where the overlay is not built."""
    try:
        overlay = overlays.overlay(STACK)
    except overlays.StackError:
        return None
    return task_table((str(overlay),))


def builder_arguments(section: MetaworldSpec, resolve: Resolve) -> list[argparse.Namespace]:
    """The one `manifest build metaworld` the section stands for."""
    options: dict[str, Any] = section.model_dump(exclude={"tasks"})
    return [argparse.Namespace(tasks=",".join(section.tasks), **options)]


def camera_size(manifest: Manifest) -> tuple[int, int] | None:
    size = manifest.data.get("protocol", {}).get("camera_size")
    return (size, size) if type(size) is int else None


DEFINITION = BenchmarkDefinition(
    name="metaworld",
    section=MetaworldSpec,
    adapter="benchmarks.metaworld.adapter:MetaworldBenchmark",
    builder="benchmarks.metaworld.build",
    planned_episodes=planned_episodes,
    builder_arguments=builder_arguments,
    # The digest of the rendered first observation; the start vectors are numpy's draws.
    stack_computed=("initial_observation_digest",),
    gpu_renderer="egl",
    build_duration="a scan takes about a second per task",
    reported_packages=("metaworld",),
    pins=PINS,
    stack=STACK,
    camera_size=camera_size,
    task_number=task_number,
)
