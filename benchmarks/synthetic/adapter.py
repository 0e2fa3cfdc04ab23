"""The `synthetic` benchmark adapter: known answers and controllable durations, no simulator.

Each manifest entry (see ``benchmarks.synthetic.manifest``) holds ``duration_s``, ``success`` and ``seed``.
An episode takes ``max(1, round(duration_s * steps_per_second))`` steps, each producing a small
observation that is a pure function of (seed, step), and reports the entry's success draw once it
has taken all its steps. ``time_scale`` paces the steps in wall time (1.0: the entry's duration,
0.0: as fast as possible), so the worker, load tests and a makespan benchmark can run the same
manifest at real or compressed speed and still predict the outcome exactly.

With ``artifact_bytes`` > 0 every episode also writes a file of that size (kind ``synthetic``) into
``artifact_dir`` and names it in its verdict, standing in for a video until the worker records
them: the worker uploads it like any artifact. Its bytes start with the episode id and a random
nonce, so the files of two attempts at one episode differ.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.base import (
    Action,
    ArtifactFile,
    Benchmark,
    BenchmarkError,
    Episode,
    EpisodeVerdict,
    Observation,
    TraceDigest,
    episode_entry,
)
from manifests.format import Manifest

NAME = "synthetic"
# Settings of a reference policy that serves this benchmark's observations with the default adapter
# settings (one 8x8 camera, `progress` and `step`, 7-dim actions): scripts and tests seal it into a
# checkpoint folder for a `deterministic` or `noop` backend.
REFERENCE_POLICY_SETTINGS = {
    "cameras": [{"name": "camera", "height": 8, "width": 8}],
    "state": [{"name": "progress", "length": 1}, {"name": "step", "length": 1}],
    "action_dim": 7,
    "chunk_length": 4,
}


class SyntheticBenchmark(Benchmark):
    """Rebuilds synthetic episodes; every knob is an adapter setting, never a manifest change."""

    name = NAME

    def __init__(
        self,
        *,
        time_scale: float = 1.0,
        steps_per_second: float = 10.0,
        image_size: int = 8,
        action_dim: int = 7,
        artifact_bytes: int = 0,
        artifact_dir: str = "",
    ) -> None:
        if not (math.isfinite(time_scale) and time_scale >= 0):
            raise ValueError(f"time_scale must be a finite number >= 0, got {time_scale}")
        if not (math.isfinite(steps_per_second) and steps_per_second > 0):
            raise ValueError(f"steps_per_second must be a finite number > 0, got {steps_per_second}")
        if image_size < 1 or action_dim < 1:
            raise ValueError(f"image_size and action_dim must be >= 1, got {image_size}, {action_dim}")
        if isinstance(artifact_bytes, bool) or not isinstance(artifact_bytes, int) or artifact_bytes < 0:
            raise ValueError(f"artifact_bytes must be an integer >= 0, got {artifact_bytes!r}")
        self.time_scale = time_scale
        self.steps_per_second = steps_per_second
        self.image_size = image_size
        self.action_dim = action_dim
        self.artifact_bytes = artifact_bytes
        self.artifact_dir = artifact_dir or (tempfile.mkdtemp(prefix="synthetic-artifacts-") if artifact_bytes else "")

    def open_episode(self, manifest: Manifest, index: int, cameras: Collection[str] | None = None) -> SyntheticEpisode:
        """``cameras`` is not used: every observation carries the one camera, observed on every step."""
        entry = episode_entry(manifest, NAME, index)
        spec = _EntrySpec.parse(entry, f"episodes[{index}]")
        total = max(1, round(spec.duration_s * self.steps_per_second))
        return SyntheticEpisode(
            spec,
            total_steps=total,
            step_wall_s=spec.duration_s * self.time_scale / total,
            image_size=self.image_size,
            action_dim=self.action_dim,
            artifact_bytes=self.artifact_bytes,
            artifact_dir=self.artifact_dir,
        )


@dataclass(frozen=True)
class _EntrySpec:
    """The validated fields of one synthetic manifest entry."""

    episode_id: str
    duration_s: float
    success: bool
    seed: int

    @classmethod
    def parse(cls, entry: dict[str, Any], where: str) -> _EntrySpec:
        duration = entry.get("duration_s")
        if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not duration >= 0:
            raise BenchmarkError(f"must be a number >= 0, got {duration!r}", field=f"{where}.duration_s")
        success = entry.get("success")
        if not isinstance(success, bool):
            raise BenchmarkError(f"must be true or false, got {success!r}", field=f"{where}.success")
        seed = entry.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise BenchmarkError(f"must be an integer >= 0, got {seed!r}", field=f"{where}.seed")
        return cls(entry["episode_id"], float(duration), success, seed)


class SyntheticEpisode(Episode):
    """Steps through a fixed number of deterministic observations, paced by a monotonic clock."""

    def __init__(
        self,
        spec: _EntrySpec,
        *,
        total_steps: int,
        step_wall_s: float,
        image_size: int,
        action_dim: int,
        artifact_bytes: int = 0,
        artifact_dir: str = "",
    ) -> None:
        self.instruction = f"synthetic episode {spec.episode_id}"
        self.action_dim = action_dim
        self.max_steps = total_steps
        self._spec = spec
        self._step_wall_s = step_wall_s
        self._image_size = image_size
        self._steps = 0
        self._started_at: float | None = None
        self._trace = TraceDigest()
        self._artifact_bytes = artifact_bytes
        self._artifact_dir = artifact_dir
        self._artifacts: tuple[ArtifactFile, ...] = ()

    def reset(self) -> Observation:
        self._steps = 0
        self._trace = TraceDigest()
        self._started_at = time.monotonic()
        return self._observe()

    def step(self, action: Action) -> Observation:
        if self._started_at is None:
            raise RuntimeError("step() before reset()")
        if self.done:
            raise RuntimeError(f"episode {self._spec.episode_id} is done after {self._steps} steps")
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (self.action_dim,) or not np.all(np.isfinite(action)):
            raise ValueError(f"action must be {self.action_dim} finite numbers, got shape {action.shape}")
        self._steps += 1
        # Pacing against the episode's start (not the previous step) keeps the total on time.
        delay = self._started_at + self._steps * self._step_wall_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        return self._observe()

    @property
    def done(self) -> bool:
        return self._steps >= self.max_steps

    def result(self) -> EpisodeVerdict:
        return EpisodeVerdict(
            success=self._spec.success and self.done,
            steps=self._steps,
            trace_digest=self._trace.hexdigest(),
            info={"duration_s": self._spec.duration_s, "planned_steps": self.max_steps},
            artifacts=self._write_artifact(),
        )

    def _write_artifact(self) -> tuple[ArtifactFile, ...]:
        """The episode's stand-in artifact, written once it is done (when asked for)."""
        if self._artifact_bytes and self.done and not self._artifacts:
            nonce = uuid.uuid4().hex
            head = f"synthetic artifact {self._spec.episode_id} {nonce}\n".encode()
            body = (head + os.urandom(max(0, self._artifact_bytes - len(head))))[: self._artifact_bytes]
            os.makedirs(self._artifact_dir, exist_ok=True)
            path = os.path.join(self._artifact_dir, f"{self._spec.episode_id}-{nonce}.bin")
            with open(path, "wb") as file:
                file.write(body)
            self._artifacts = (ArtifactFile(path, "synthetic", "application/octet-stream"),)
        return self._artifacts

    def _observe(self) -> Observation:
        rng = np.random.Generator(np.random.PCG64([self._spec.seed, self._steps]))
        size = self._image_size
        observation = Observation(
            images={"camera": rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)},
            state={
                "step": np.array([self._steps], dtype=np.int64),
                "progress": np.array([self._steps / self.max_steps], dtype=np.float64),
            },
        )
        self._trace.add_observation(observation)
        return observation
