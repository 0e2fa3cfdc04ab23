"""A Meta-World manifest: one task's trials, each by its start vectors, and the protocol they run under.

A manifest holds one task (``task``, Meta-World's name) under the difficulty group LeRobot puts it in
(``setting``). Each entry is one trial: its place in the task's stream (``trial``), the start vectors
Meta-World's reset drew for it (``starts``, one per ``reset_model`` call, the last placing the
objects and the goal: ``benchmarks.metaworld.sim.draw_start``; exact as JSON numbers), the
instruction, and optionally the digest of the rendered first observation. The protocol records the
camera, its size, the step limit and the seed of the stream, so nothing about how an episode runs
is left to the worker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.base import BenchmarkError, check_versions, episode_entry, recorded_observation_digest
from manifests.format import Manifest, verify

BENCHMARK = "metaworld"
BUILDER = "evalfleet.metaworld/v1"


@dataclass(frozen=True)
class Protocol:
    """How every episode of a manifest runs."""

    camera_size: int
    max_steps: int
    seed: int

    def record(self) -> dict[str, Any]:
        return {"camera_size": self.camera_size, "max_steps": self.max_steps, "seed": self.seed}

    @classmethod
    def parse(cls, record: Mapping[str, Any]) -> Protocol:
        return cls(
            camera_size=_int(record, "camera_size", "protocol", minimum=1),
            max_steps=_int(record, "max_steps", "protocol", minimum=1),
            seed=_int(record, "seed", "protocol"),
        )


@dataclass(frozen=True)
class EpisodeSpec:
    """One checked entry: everything needed to rebuild its trial exactly."""

    episode_id: str
    where: str
    task: str
    trial: int
    protocol: Protocol
    instruction: str
    starts: list[npt.NDArray[np.float64]]
    initial_observation_digest: str | None


def episode_spec(manifest: Manifest, index: int, installed: Mapping[str, str]) -> EpisodeSpec:
    """Entry ``index`` checked against what is installed (``installed``: the pinned distributions'
    versions); BenchmarkError names the first mismatch."""
    manifest = verify(manifest)
    entry = episode_entry(manifest, BENCHMARK, index)
    where = f"episodes[{index}]"
    check_versions(manifest, installed)
    instruction = entry.get("instruction")
    if not isinstance(instruction, str) or not instruction:
        raise BenchmarkError("must be a non-empty string", field=f"{where}.instruction")
    digest = recorded_observation_digest(entry, where)
    return EpisodeSpec(
        episode_id=entry["episode_id"],
        where=where,
        task=manifest.task,
        trial=_int(entry, "trial", where),
        protocol=Protocol.parse(manifest.data["protocol"]),
        instruction=instruction,
        starts=_starts(entry.get("starts"), f"{where}.starts"),
        initial_observation_digest=digest,
    )


def _int(record: Mapping[str, Any], name: str, where: str, minimum: int = 0) -> int:
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BenchmarkError(f"must be an integer >= {minimum}, got {value!r}", field=f"{where}.{name}")
    return value


def _starts(value: Any, field: str) -> list[npt.NDArray[np.float64]]:
    if not isinstance(value, list) or not value:
        raise BenchmarkError("must be a non-empty list of start vectors", field=field)
    return [_vector(vector, f"{field}[{i}]") for i, vector in enumerate(value)]


def _vector(value: Any, field: str) -> npt.NDArray[np.float64]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value)
    ):
        raise BenchmarkError("must be a non-empty list of finite numbers", field=field)
    return np.array(value, dtype=np.float64)
