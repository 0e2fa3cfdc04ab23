"""What a RoboTwin manifest holds, and reading one episode's entry back.

An entry carries everything that fixes an episode (the accepted seed, the instruction text, its
pool, the task config and the step limit), because none of it can be recomputed from an index:
seeds come from an expert-check scan and upstream draws instructions from an unseeded RNG. The
protocol block states how the episode is run (absolute joint targets, the policy's cameras and, for
a scanned manifest, the height and width the checkout's camera config gave each of them); a
worker that runs any other protocol refuses the manifest instead of evaluating something else.
``versions`` records the commit and, for a manifest scanned on a real stack, that stack's identity
(``benchmarks.robotwin.cpu_stack.prepare``): its planner decided which seeds were accepted and its
shader what the policy sees, so such a manifest runs only on the same stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.base import BenchmarkError, episode_entry, recorded_observation_digest
from benchmarks.robotwin.config import POLICY_CAMERAS, SETTINGS
from benchmarks.robotwin.root import EXPECTED_COMMIT
from manifests.format import Manifest, build, verify

BENCHMARK = "robotwin"
PROTOCOL: Mapping[str, Any] = {
    "action": "take_action(action, 'qpos'): [left 6 joints, left gripper, right 6 joints, right gripper]",
    "action_dim": 14,
    "cameras": list(POLICY_CAMERAS),
    "state": ["joint_action"],
    "step": "one take_action call",
    "success": "eval_success, latched by check_success after every physics sub-step",
}
# The protocol key a scan adds: {camera: [height, width]} from the checkout's _camera_config.yml.
CAMERA_SIZES = "camera_sizes"
# What a stack's identity adds to ``versions`` beside ``robotwin`` (the commit).
STACK_KEYS = ("robotwin_stack", "sapien", "robotwin_shader", "robotwin_planner", "robotwin_assets")


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode as its manifest entry fixes it."""

    task: str
    setting: str
    index: int
    episode_id: str
    seed: int
    instruction: str
    instruction_type: str
    task_config: str
    step_limit: int
    initial_observation_digest: str | None = None
    # Upstream's instruction draw after setup_demo, (pool size, index) (None: the entry has none).
    instruction_draw: tuple[int, int] | None = None
    # The [height, width] of each policy camera the manifest records (None: it records none).
    camera_sizes: Mapping[str, tuple[int, int]] | None = None


def episode_id(task: str, setting: str, index: int) -> str:
    return f"{task}-{setting}-{index:04d}"


def entry(
    *,
    episode_id: str,
    seed: int,
    instruction: str,
    setting: str,
    step_limit: int,
    initial_observation_digest: str | None = None,
    instruction_draw: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """One manifest entry; the setting's task config and instruction pool are spelled out in it.

    ``initial_observation_digest``, when recorded, lets a worker detect simulator or asset drift
    from the first observation instead of after a whole rollout. ``instruction_draw`` (pool size,
    index) is upstream's ``np.random.choice`` of the instruction after ``setup_demo``: an episode
    repeats it, so NumPy's RNG is where upstream's loop leaves it when the policy starts.
    """
    data = {
        "episode_id": episode_id,
        "seed": seed,
        "instruction": instruction,
        "instruction_type": SETTINGS[setting].instruction_type,
        "task_config": SETTINGS[setting].task_config,
        "step_limit": step_limit,
    }
    if initial_observation_digest is not None:
        data["initial_observation_digest"] = initial_observation_digest
    if instruction_draw is not None:
        data["instruction_draw"] = {"pool": instruction_draw[0], "index": instruction_draw[1]}
    return data


def seal(
    *,
    task: str,
    setting: str,
    entries: list[dict[str, Any]],
    source: Mapping[str, Any],
    stack: Mapping[str, str] | None = None,
    camera_sizes: Mapping[str, tuple[int, int]] | None = None,
) -> Manifest:
    """Seals one task x setting population under the RoboTwin protocol and commit, the identity of
    the ``stack`` it was scanned on and the ``camera_sizes`` it was scanned with (neither for an
    imported subset)."""
    unknown = sorted(set(stack or {}) - set(STACK_KEYS))
    if unknown:
        raise BenchmarkError(f"not part of a RoboTwin stack's identity: {unknown}", field="versions")
    manifest = build(
        benchmark=BENCHMARK,
        task=task,
        setting=setting,
        episodes=entries,
        protocol={
            **PROTOCOL,
            **({CAMERA_SIZES: {c: list(camera_sizes[c]) for c in POLICY_CAMERAS}} if camera_sizes else {}),
        },
        versions={"robotwin": EXPECTED_COMMIT, **(stack or {})},
        source=source,
    )
    for index in range(len(manifest)):
        episode_spec(manifest, index, EXPECTED_COMMIT)
    return manifest


def episode_spec(manifest: Manifest, index: int, commit: str) -> EpisodeSpec:
    """Entry ``index`` of a RoboTwin manifest, after checking it is intact and runnable at ``commit``.

    A manifest ``parse`` did not build is parsed again from its bytes: a Manifest is a plain
    dataclass, and only data that hashes to the manifest's name may decide what runs.
    """
    manifest = verify(manifest)
    data = episode_entry(manifest, BENCHMARK, index)
    protocol = dict(manifest.data["protocol"])
    sizes = protocol.pop(CAMERA_SIZES, None)
    if protocol != dict(PROTOCOL):
        raise BenchmarkError(f"is {protocol!r}, this adapter runs {dict(PROTOCOL)!r}", field="protocol")
    built_for = manifest.data["versions"].get("robotwin")
    if built_for != commit:
        raise BenchmarkError(
            f"manifest is for RoboTwin {built_for!r}, this root is at {commit}", field="versions.robotwin"
        )
    if manifest.setting not in SETTINGS:
        raise BenchmarkError(f"{manifest.setting!r} is not one of {', '.join(SETTINGS)}", field="setting")
    spec = entry_spec(manifest.task, manifest.setting, index, data)
    return spec if sizes is None else replace(spec, camera_sizes=_camera_sizes(sizes))


def camera_sizes(manifest: Manifest) -> Mapping[str, tuple[int, int]] | None:
    """The [height, width] of each policy camera a scanned manifest records; None for one that
    records none (an imported subset)."""
    sizes = manifest.data["protocol"].get(CAMERA_SIZES)
    return None if sizes is None else _camera_sizes(sizes)


def _camera_sizes(sizes: Any) -> dict[str, tuple[int, int]]:
    where = f"protocol.{CAMERA_SIZES}"
    if not isinstance(sizes, dict) or sorted(sizes) != sorted(POLICY_CAMERAS):
        raise BenchmarkError(f"must give [height, width] for each of {', '.join(POLICY_CAMERAS)}", field=where)
    for name, size in sizes.items():
        if not (isinstance(size, list) and len(size) == 2 and all(type(v) is int and v > 0 for v in size)):
            raise BenchmarkError(f"must be [height, width], positive integers; got {size!r}", field=f"{where}.{name}")
    return {name: (size[0], size[1]) for name, size in sizes.items()}


def check_stack(manifest: Manifest, stack: Mapping[str, str]) -> None:
    """Refuses a manifest scanned on another stack than ``stack``, the one this process runs.

    A manifest that records no stack (an imported subset, or one built before stacks were
    recorded) is not refused: it says nothing to compare.
    """
    versions = manifest.data["versions"]
    recorded = {key: versions[key] for key in STACK_KEYS if key in versions}
    if not recorded:
        return
    for key in STACK_KEYS:
        if recorded.get(key) != stack.get(key):
            raise BenchmarkError(
                f"manifest was scanned on RoboTwin stack {recorded.get(key)!r}, this worker runs {stack.get(key)!r}"
                f" ({', '.join(f'{k}={v}' for k, v in stack.items()) or 'no simulator stack'})",
                field=f"versions.{key}",
            )


def entry_spec(task: str, setting_name: str, index: int, data: Mapping[str, Any]) -> EpisodeSpec:
    """Validates one entry of a ``task`` x ``setting_name`` manifest and returns what it fixes."""
    setting = SETTINGS[setting_name]
    where = f"episodes[{index}]"
    expected = {"instruction_type": setting.instruction_type, "task_config": setting.task_config}
    for key, value in expected.items():
        if data.get(key) != value:
            raise BenchmarkError(
                f"is {data.get(key)!r}, setting {setting.name} needs {value!r}", field=f"{where}.{key}"
            )
    for key, least in (("seed", 0), ("step_limit", 1)):
        if type(data.get(key)) is not int or data[key] < least:
            raise BenchmarkError(f"must be an integer >= {least}, got {data.get(key)!r}", field=f"{where}.{key}")
    if not isinstance(data.get("instruction"), str) or not data["instruction"].strip():
        raise BenchmarkError("must be a non-empty string", field=f"{where}.instruction")
    digest = recorded_observation_digest(data, where)
    return EpisodeSpec(
        task=task,
        setting=setting_name,
        index=index,
        episode_id=data["episode_id"],
        seed=data["seed"],
        instruction=data["instruction"],
        instruction_type=data["instruction_type"],
        task_config=data["task_config"],
        step_limit=data["step_limit"],
        initial_observation_digest=digest,
        instruction_draw=parse_instruction_draw(data.get("instruction_draw"), f"{where}.instruction_draw"),
    )


def parse_instruction_draw(value: Any, field: str) -> tuple[int, int] | None:
    """An entry's ``{"pool": N, "index": i}`` as (N, i), refused unless 0 <= i < N."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"pool", "index"}:
        raise BenchmarkError('must be {"pool": N, "index": i}', field=field)
    pool, index = value["pool"], value["index"]
    if type(pool) is not int or type(index) is not int or not 0 <= index < pool:
        raise BenchmarkError(f"needs integers 0 <= index < pool, got {value!r}", field=field)
    return pool, index
