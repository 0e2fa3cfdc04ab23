"""The LIBERO manifest schema: what a manifest fixes, and checking it against the installed LIBERO.

Manifest-level: ``setting`` is the suite, ``task`` the task name; ``protocol`` holds the task id,
the evaluation constants and, when built from a harness's preset, ``preset`` (its name, label,
constants with their sources, overrides and the harness's simulator stack:
``benchmarks.libero.protocols``); ``source`` the bddl and init files with their sha256;
``versions`` the pinned simulator stack it was built under. Each entry holds the trial index,
instruction, init state vector, fixture poses, the solver warm start its reset left
(``qacc_warmstart``; absent in older manifests) and optionally the digest of the observation right
after ``set_init_state``.

An entry is rebuilt the same way whatever trial stream scanned it (one seed per task, or one per
episode): the fixture poses and the solver warm start are the only things the reset's RNG decides
that ``set_init_state`` does not restore, and the entry records them, so the adapter needs nothing
of the preset.

Every check here runs before a simulator is created, so a wrong manifest costs nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.base import BenchmarkError, check_versions, episode_entry, recorded_observation_digest
from benchmarks.libero.protocols import TASK_STREAM, TRIAL_STREAMS
from benchmarks.libero.runtime import (
    TaskFiles,
    check_suite,
    file_sha256,
    installed_versions,
    read_init_states,
    resolve_task,
)
from benchmarks.libero.sim import ACTION_DIM, CAMERAS, FixturePoses
from manifests.format import Manifest, verify

BENCHMARK = "libero"
WAIT_ACTION = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)


@dataclass(frozen=True)
class Protocol:
    """The evaluation constants of one manifest (a preset's, or the options' where they override it).

    ``trial_stream`` is how the scan seeded each trial's reset (``benchmarks.libero.protocols``);
    ``preset`` the record of the preset built from, None for ``evalfleet`` (manifests without one).
    """

    task_id: int
    seed: int
    num_steps_wait: int
    max_steps: int
    camera_height: int
    camera_width: int
    trial_stream: str = TASK_STREAM
    preset: Mapping[str, Any] | None = None

    def record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "task_id": self.task_id,
            "task_order_index": 0,
            "seed": self.seed,
            "trial_stream": TRIAL_STREAMS[self.trial_stream],
            "num_steps_wait": self.num_steps_wait,
            "wait_action": list(WAIT_ACTION),
            "max_steps": self.max_steps,
            "action_dim": ACTION_DIM,
            "controller": "OSC_POSE",
            "control_freq": 20,
            "hard_reset": True,
            "cameras": list(CAMERAS),
            "camera_height": self.camera_height,
            "camera_width": self.camera_width,
            "image_transform": "rot180",
            "success": "check_success",
        }
        if self.preset is not None:
            record["preset"] = dict(self.preset)
        return record

    @classmethod
    def parse(cls, record: Mapping[str, Any]) -> Protocol:
        values = {name: _int(record, name, "protocol") for name in _PROTOCOL_INTS}
        for name in ("max_steps", "camera_height", "camera_width"):
            if values[name] < 1:
                raise BenchmarkError(f"must be >= 1, got {values[name]}", field=f"protocol.{name}")
        if record.get("wait_action") != list(WAIT_ACTION):
            raise BenchmarkError(f"must be {list(WAIT_ACTION)}", field="protocol.wait_action")
        if record.get("cameras") != list(CAMERAS):
            raise BenchmarkError(f"must be {list(CAMERAS)}", field="protocol.cameras")
        streams = {words: kind for kind, words in TRIAL_STREAMS.items()}
        words = record.get("trial_stream")
        stream = streams.get(words) if isinstance(words, str) else None
        if stream is None:
            raise BenchmarkError(f"must be one of {sorted(streams)}", field="protocol.trial_stream")
        preset = record.get("preset")
        if preset is not None and not isinstance(preset, dict):
            raise BenchmarkError("must be an object (the preset record)", field="protocol.preset")
        return cls(**values, trial_stream=stream, preset=preset)


_PROTOCOL_INTS = ("task_id", "seed", "num_steps_wait", "max_steps", "camera_height", "camera_width")


@dataclass(frozen=True)
class EpisodeSpec:
    """One checked entry: everything needed to rebuild its trial exactly."""

    episode_id: str
    where: str
    task: TaskFiles
    protocol: Protocol
    instruction: str
    init_state: npt.NDArray[np.float64]
    fixture_poses: FixturePoses
    # The solver warm start reset() left in the trial stream (None: a manifest built without it).
    qacc_warmstart: npt.NDArray[np.float64] | None
    initial_observation_digest: str | None


def episode_spec(manifest: Manifest, index: int) -> EpisodeSpec:
    """Checks entry ``index`` against the installed LIBERO; BenchmarkError names the first mismatch."""
    manifest = verify(manifest)  # what follows reads the data its bytes are, as episode_entry does
    entry = episode_entry(manifest, BENCHMARK, index)
    where = f"episodes[{index}]"
    check_suite(manifest.setting, "setting")
    protocol = Protocol.parse(manifest.data["protocol"])
    task = resolve_task(manifest.setting, protocol.task_id, "protocol.task_id")
    if task.name != manifest.task:
        raise BenchmarkError(f"is {manifest.task!r}, but task {protocol.task_id} is {task.name!r}", field="task")
    check_versions(manifest, installed_versions())
    source = manifest.data["source"]
    _check_equal(file_sha256(task.bddl_path), source.get("bddl_sha256"), "source.bddl_sha256")
    init_sha256, states = read_init_states(task.init_path)
    _check_equal(init_sha256, source.get("init_sha256"), "source.init_sha256")
    row = _int(entry, "init_state_index", where)
    if not 0 <= row < len(states):
        raise BenchmarkError(f"must be within 0-{len(states) - 1}, got {row}", field=f"{where}.init_state_index")
    init_state = _float_array(entry.get("init_state"), f"{where}.init_state")
    if not np.array_equal(init_state, states[row]):
        raise BenchmarkError(f"differs from row {row} of {task.init_file}", field=f"{where}.init_state")
    instruction = entry.get("instruction")
    if not isinstance(instruction, str) or not instruction:
        raise BenchmarkError("must be a non-empty string", field=f"{where}.instruction")
    digest = recorded_observation_digest(entry, where)
    return EpisodeSpec(
        episode_id=entry["episode_id"],
        where=where,
        task=task,
        protocol=protocol,
        instruction=instruction,
        init_state=init_state,
        fixture_poses=_fixture_poses(entry.get("fixture_poses"), f"{where}.fixture_poses"),
        qacc_warmstart=(
            None
            if entry.get("qacc_warmstart") is None
            else _float_array(entry["qacc_warmstart"], f"{where}.qacc_warmstart")
        ),
        initial_observation_digest=digest,
    )


def _check_equal(actual: str, expected: Any, field: str) -> None:
    if actual != expected:
        raise BenchmarkError(f"installed file hashes to {actual}, manifest says {expected!r}", field=field)


def _int(record: Mapping[str, Any], name: str, where: str) -> int:
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BenchmarkError(f"must be an integer >= 0, got {value!r}", field=f"{where}.{name}")
    return value


def _float_array(value: Any, field: str, length: int | None = None) -> npt.NDArray[np.float64]:
    if not isinstance(value, list) or not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value
    ):
        raise BenchmarkError("must be a list of finite numbers", field=field)
    if length is not None and len(value) != length:
        raise BenchmarkError(f"must hold {length} numbers, got {len(value)}", field=field)
    return np.array(value, dtype=np.float64)


def _fixture_poses(value: Any, field: str) -> FixturePoses:
    if not isinstance(value, dict):
        raise BenchmarkError("must be an object of fixture name -> {pos, quat}", field=field)
    poses: FixturePoses = {}
    for name, pose in value.items():
        if not isinstance(pose, dict):
            raise BenchmarkError("must be an object with pos and quat", field=f"{field}.{name}")
        poses[name] = {
            "pos": _float_array(pose.get("pos"), f"{field}.{name}.pos", 3).tolist(),
            "quat": _float_array(pose.get("quat"), f"{field}.{name}.quat", 4).tolist(),
        }
    return poses
