"""The LIBERO adapter: rebuilds a trial from its manifest entry and steps it with 7-dim actions.

An episode runs the standard protocol: ``reset()`` (its RNG draws confined to a fixed seed), the
entry's fixture poses written, ``set_init_state(entry.init_state)``, ``num_steps_wait`` steps of
``[0,0,0,0,0,0,-1]``, then policy steps (delta EEF pose + gripper) until ``check_success()`` or
``max_steps``. Creating an environment costs several seconds, so the adapter keeps finished ones
per task and camera size; ``reset()`` is a hard reset that rebuilds the scene from the bddl, so
an environment carries nothing from one trial into the next.

``scheduler manifest build libero`` calls :func:`add_build_arguments` and :func:`build_manifests`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.base import (
    Action,
    Benchmark,
    BenchmarkError,
    Episode,
    EpisodeVerdict,
    Observation,
    TraceDigest,
    observation_digest,
)
from benchmarks.libero.build import add_build_arguments, build_manifests
from benchmarks.libero.manifest import BENCHMARK, WAIT_ACTION, EpisodeSpec, episode_spec
from benchmarks.libero.sim import (
    ACTION_DIM,
    add_frame,
    add_scene,
    gl_renderer,
    global_numpy_rng,
    make_env,
    observe,
    write_fixture_poses,
)
from manifests.format import Manifest

__all__ = ["LiberoBenchmark", "LiberoEpisode", "add_build_arguments", "build_manifests"]

_EnvKey = tuple[str, int, int]


class LiberoBenchmark(Benchmark):
    """Opens LIBERO episodes; keeps up to ``max_idle_envs`` finished environments for reuse.

    Episodes may run in different threads; the pool of idle environments is guarded by a lock.
    """

    name = BENCHMARK

    def __init__(self, *, max_idle_envs: int = 2) -> None:
        self._max_idle = max_idle_envs
        self._idle: OrderedDict[int, tuple[_EnvKey, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def open_episode(self, manifest: Manifest, index: int) -> LiberoEpisode:
        spec = episode_spec(manifest, index)
        key = (str(spec.task.bddl_path), spec.protocol.camera_height, spec.protocol.camera_width)
        return LiberoEpisode(spec, self._acquire(key, spec), lambda env, healthy: self._release(key, env, healthy))

    def close(self) -> None:
        with self._lock:
            envs = [env for _, env in self._idle.values()]
            self._idle.clear()
        for env in envs:
            env.close()

    def _acquire(self, key: _EnvKey, spec: EpisodeSpec) -> Any:
        with self._lock:
            for env_id, (idle_key, env) in self._idle.items():
                if idle_key == key:
                    del self._idle[env_id]
                    return env
        return make_env(spec.task, spec.protocol.camera_height, spec.protocol.camera_width)

    def _release(self, key: _EnvKey, env: Any, healthy: bool) -> None:
        evicted = [env] if not healthy or self._max_idle == 0 else []
        with self._lock:
            if not evicted:
                self._idle[id(env)] = (key, env)
            while len(self._idle) > self._max_idle:
                evicted.append(self._idle.popitem(last=False)[1][1])
        for stale in evicted:
            stale.close()


class LiberoEpisode(Episode):
    """One trial on a borrowed environment, returned to the adapter on close()."""

    action_dim = ACTION_DIM

    def __init__(self, spec: EpisodeSpec, env: Any, release: Callable[[Any, bool], None]) -> None:
        self.instruction = spec.instruction
        self.max_steps = spec.protocol.max_steps
        self._spec = spec
        self._env = env
        self._release = release
        self._trace = TraceDigest()
        self._steps = 0
        self._success = False
        self._ready = False
        self._healthy = True

    def reset(self) -> Observation:
        """Rebuilds the trial; BenchmarkError if its initial observation is not the recorded one."""
        env, spec = self._env, self._spec
        self._ready = False
        self._healthy = False
        with global_numpy_rng(spec.protocol.seed):
            env.reset()
        write_fixture_poses(env, spec.fixture_poses, f"{spec.where}.fixture_poses")
        observation = observe(env, env.set_init_state(spec.init_state))
        self._healthy = True
        expected = spec.initial_observation_digest
        if expected is not None and observation_digest(observation) != expected:
            raise BenchmarkError(
                f"initial observation hashes to {observation_digest(observation)}, manifest says {expected}"
                f" (simulator, asset or renderer drift; this worker renders with {gl_renderer(env)})",
                field=f"{spec.where}.initial_observation_digest",
            )
        self._trace = TraceDigest()
        add_scene(self._trace, env)
        add_frame(self._trace, env, observation)
        for _ in range(spec.protocol.num_steps_wait):
            observation = self._advance(np.array(WAIT_ACTION))
        self._steps = 0
        self._success = False
        self._ready = True
        return observation

    def step(self, action: Action) -> Observation:
        if not self._ready:
            raise RuntimeError("step() before reset()")
        if self.done:
            raise RuntimeError(f"episode {self._spec.episode_id} is done after {self._steps} steps")
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (ACTION_DIM,) or not np.all(np.isfinite(action)):
            raise ValueError(f"action must be {ACTION_DIM} finite numbers, got shape {action.shape}")
        observation = self._advance(action)
        self._steps += 1
        self._success = bool(self._env.check_success())
        return observation

    @property
    def done(self) -> bool:
        return self._success or self._steps >= self.max_steps

    def result(self) -> EpisodeVerdict:
        return EpisodeVerdict(
            success=self._success,
            steps=self._steps,
            trace_digest=self._trace.hexdigest(),
            info={"episode_id": self._spec.episode_id, "wait_steps": self._spec.protocol.num_steps_wait},
        )

    def close(self) -> None:
        if self._env is not None:
            env, self._env = self._env, None
            self._release(env, self._healthy)

    def _advance(self, action: npt.NDArray[np.float64]) -> Observation:
        self._healthy = False
        raw, _, _, _ = self._env.step(action)
        observation = observe(self._env, raw)
        add_frame(self._trace, self._env, observation)
        self._healthy = True
        return observation
