"""The Meta-World adapter: rebuilds a trial from its start vectors and steps it with 4-D actions.

An episode is LeRobot's ``MetaworldEnv`` episode (``benchmarks.metaworld.sim``): the reset that
starts it replays the trial's recorded start vectors, each action is cast to Meta-World's
action space (float32, as lerobot-eval hands it over) and stepped, and the episode ends at the first
step Meta-World reports success, or at the step limit. The corner2 camera renders only for an
observation a policy is handed (after the reset, after ``step``, after the last action of
``execute`` unless the episode is then done); rendering reads the simulator and changes nothing in
it, so the states are those of rendering after every step.

Building an environment costs most of a second (``metaworld.MT1``), so the adapter keeps finished
ones per task and camera size; every reset starts from ``mj_resetData`` and the recorded vectors, so
an environment carries nothing from one trial into the next.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.base import (
    Action,
    Actions,
    Benchmark,
    BenchmarkError,
    Episode,
    EpisodeVerdict,
    Executed,
    Numbering,
    SimObservation,
    TraceDigest,
    observation_digest,
)
from benchmarks.idle_pool import IdlePool
from benchmarks.metaworld.build import add_build_arguments, build_manifests
from benchmarks.metaworld.manifest import BENCHMARK, EpisodeSpec, episode_spec
from benchmarks.metaworld.sim import ACTION_DIM, CAMERA, add_state, make_env, observe, reset_to, start_length, step
from benchmarks.metaworld.stack import installed_versions
from benchmarks.metaworld.tasks import task_table
from manifests.format import Manifest

__all__ = ["MetaworldBenchmark", "MetaworldEpisode", "add_build_arguments", "build_manifests"]

_EnvKey = tuple[str, int]


class MetaworldBenchmark(Benchmark):
    """Opens Meta-World episodes; keeps up to ``max_idle_envs`` finished environments for reuse."""

    name = BENCHMARK

    def __init__(self, *, max_idle_envs: int = 2) -> None:
        self._idle: IdlePool[_EnvKey, Any] = IdlePool(max_idle_envs, close=lambda env: env.close())

    def open_episode(self, manifest: Manifest, index: int, cameras: Collection[str] | None = None) -> MetaworldEpisode:
        spec = episode_spec(manifest, index, installed_versions())
        task_index = task_table().number(manifest.task, manifest.setting)
        key = (spec.task, spec.protocol.camera_size)
        rendered = (CAMERA,) if cameras is None or CAMERA in cameras else ()
        env = self._idle.take(key, lambda: make_env(*key))
        episode = MetaworldEpisode(spec, env, rendered, lambda done: self._idle.give(key, done))
        episode.numbering = Numbering(suite=manifest.setting, task_index=task_index, episode_index=spec.trial)
        return episode

    def close(self) -> None:
        self._idle.close()


class MetaworldEpisode(Episode):
    """One trial on a borrowed environment, handed back to the adapter on close()."""

    action_dim = ACTION_DIM

    def __init__(self, spec: EpisodeSpec, env: Any, cameras: tuple[str, ...], release: Callable[[Any], None]) -> None:
        self.instruction = spec.instruction
        self.max_steps = spec.protocol.max_steps
        self.cameras = cameras
        self._spec = spec
        self._env: Any = env
        self._release = release
        self._trace = TraceDigest()
        self._steps = 0
        self._success = False
        self._ready = False

    def reset(self) -> SimObservation:
        """Rebuilds the trial; BenchmarkError if its initial observation is not the recorded one."""
        env, spec = self._borrowed, self._spec
        self._ready = False
        for i, start in enumerate(spec.starts):
            if start.size != start_length(env):
                raise BenchmarkError(
                    f"holds {start.size} numbers, {spec.task}'s start vector has {start_length(env)}",
                    field=f"{spec.where}.starts[{i}]",
                )
        raw = reset_to(env, spec.starts, f"{spec.where}.starts")
        expected = spec.initial_observation_digest
        first = observe(env, raw, (CAMERA,) if expected is not None else self.cameras)
        if expected is not None and observation_digest(first) != expected:
            raise BenchmarkError(
                f"initial observation hashes to {observation_digest(first)}, manifest says {expected}"
                " (simulator, asset or renderer drift)",
                field=f"{spec.where}.initial_observation_digest",
            )
        self._trace = TraceDigest()
        for start in spec.starts:
            self._trace.add("start", start)
        add_state(self._trace, env, raw)
        self._steps = 0
        self._success = False
        self._ready = True
        return SimObservation({name: first.images[name] for name in self.cameras}, first.state)

    def step(self, action: Action) -> SimObservation:
        self._check_can_step()
        return observe(self._borrowed, self._policy_step(action), self.cameras)

    def execute(self, actions: Actions) -> Executed:
        """Runs ``actions`` until done, rendering only for the observation after the last one."""
        if len(actions) == 0:
            raise ValueError("execute() needs at least one action")
        self._check_can_step()
        executed = 0
        raw = None
        for action in actions[: self.max_steps - self._steps]:
            raw = self._policy_step(action)
            executed += 1
            if self.done:
                return Executed(executed, None)
        assert raw is not None
        return Executed(executed, observe(self._borrowed, raw, self.cameras))

    @property
    def done(self) -> bool:
        return self._success or self._steps >= self.max_steps

    def result(self) -> EpisodeVerdict:
        return EpisodeVerdict(
            success=self._success,
            steps=self._steps,
            trace_digest=self._trace.hexdigest(),
            info={"episode_id": self._spec.episode_id},
        )

    def close(self) -> None:
        if self._env is not None:
            env, self._env = self._env, None
            self._release(env)

    @property
    def _borrowed(self) -> Any:
        if self._env is None:
            raise RuntimeError(f"episode {self._spec.episode_id} is closed")
        return self._env

    def _check_can_step(self) -> None:
        if not self._ready:
            raise RuntimeError("step() before reset()")
        if self.done:
            raise RuntimeError(f"episode {self._spec.episode_id} is done after {self._steps} steps")

    def _policy_step(self, action: Action) -> npt.NDArray[np.float64]:
        raw, solved = step(self._borrowed, _checked(action))
        add_state(self._trace, self._borrowed, raw)
        self._steps += 1
        self._success = solved
        return raw


def _checked(action: Action) -> npt.NDArray[np.float32]:
    """The action in Meta-World's action space's dtype, float32, as lerobot-eval hands it over."""
    row = np.asarray(action)
    if row.shape != (ACTION_DIM,) or not np.all(np.isfinite(row)):
        raise ValueError(f"action must be {ACTION_DIM} finite numbers, got shape {row.shape}")
    return row.astype(np.float32)
