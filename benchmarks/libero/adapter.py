"""The LIBERO adapter: rebuilds a trial from its manifest entry and steps it with 7-dim actions.

An episode runs the standard protocol: ``reset()`` (its RNG draws confined to a fixed seed), the
entry's fixture poses and solver warm start written, ``set_init_state(entry.init_state)``,
``num_steps_wait`` steps of ``[0,0,0,0,0,0,-1]``, then policy steps (delta EEF pose + gripper)
until ``check_success()`` or ``max_steps``. Creating an environment costs several seconds, so the
adapter keeps finished ones per task and camera size. ``reset()`` is LIBERO's hard reset, which
rebuilds the scene from the bddl, so an environment carries nothing from one trial into the next;
by default its most costly part, compiling the scene's XML into a new MjSim, is skipped when the
XML repeats (``benchmarks.libero.reset``), with the same simulator state, bit for bit.

Cameras render on demand (``benchmarks.libero.cameras``): only the cameras given at
``open_episode``, and only for an observation that is handed out (after ``step``, after the last
action of ``execute`` unless the episode is then done, after the wait steps); the simulator state
and those observations are bit-identical to rendering every camera on every step.

``scheduler manifest build libero`` calls :func:`add_build_arguments` and :func:`build_manifests`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
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
from benchmarks.libero.build import add_build_arguments, build_manifests
from benchmarks.libero.cameras import CameraGate
from benchmarks.libero.manifest import BENCHMARK, WAIT_ACTION, EpisodeSpec, episode_spec
from benchmarks.libero.reset import SceneReuse, close_env
from benchmarks.libero.sim import (
    ACTION_DIM,
    CAMERAS,
    add_scene,
    add_state,
    gl_renderer,
    global_numpy_rng,
    make_env,
    observe,
    write_fixture_poses,
    write_warmstart,
)
from manifests.format import Manifest

__all__ = ["LiberoBenchmark", "LiberoEpisode", "add_build_arguments", "build_manifests"]

_EnvKey = tuple[str, int, int]


class LiberoBenchmark(Benchmark):
    """Opens LIBERO episodes; keeps up to ``max_idle_envs`` finished environments for reuse.

    ``reuse_scene=False`` compiles the scene on every reset, as LIBERO's hard reset does (the
    reference the reuse is tested against).
    """

    name = BENCHMARK

    def __init__(self, *, max_idle_envs: int = 2, reuse_scene: bool = True) -> None:
        self._reuse_scene = reuse_scene
        self._idle: IdlePool[_EnvKey, _Kept] = IdlePool(max_idle_envs, close=lambda kept: close_env(kept.gate.env))

    def open_episode(self, manifest: Manifest, index: int, cameras: Collection[str] | None = None) -> LiberoEpisode:
        spec = episode_spec(manifest, index)
        numbering = _numbering(manifest, index, spec)
        key = (str(spec.task.bddl_path), spec.protocol.camera_height, spec.protocol.camera_width)
        rendered = CAMERAS if cameras is None else tuple(name for name in CAMERAS if name in cameras)
        kept = self._idle.take(key, lambda: self._build(spec))
        episode = LiberoEpisode(spec, kept, rendered, lambda done, healthy: self._idle.give(key, done, healthy=healthy))
        episode.numbering = numbering
        return episode

    def close(self) -> None:
        self._idle.close()

    def _build(self, spec: EpisodeSpec) -> _Kept:
        env = make_env(spec.task, spec.protocol.camera_height, spec.protocol.camera_width)
        return _Kept(CameraGate(env), SceneReuse(env) if self._reuse_scene else None)


@dataclass(frozen=True)
class _Kept:
    """An environment the adapter keeps: its camera gate and, unless reuse is off, its scene reuse."""

    gate: CameraGate
    scene: SceneReuse | None


class LiberoEpisode(Episode):
    """One trial on a borrowed environment, returned to the adapter on close()."""

    action_dim = ACTION_DIM

    def __init__(
        self,
        spec: EpisodeSpec,
        kept: _Kept,
        cameras: tuple[str, ...],
        release: Callable[[_Kept, bool], None],
    ) -> None:
        self.instruction = spec.instruction
        self.max_steps = spec.protocol.max_steps
        self.cameras = cameras
        self._spec = spec
        self._kept: _Kept | None = kept
        self._env = kept.gate.env
        self._release = release
        self._trace = TraceDigest()
        self._steps = 0
        self._success = False
        self._ready = False
        self._healthy = True
        # After reset(): whether it reused the kept compiled scene (None: reuse is off).
        self.scene_reused: bool | None = None

    def reset(self) -> SimObservation:
        """Rebuilds the trial; BenchmarkError if its initial observation is not the recorded one."""
        env, gate, spec = self._env, self._gate, self._spec
        self._ready = False
        self._healthy = False
        gate.skip()  # set_init_state's forced update below replaces every image reset() would render
        with global_numpy_rng(spec.protocol.seed):
            if self._scene is None:
                env.reset()
            else:
                self.scene_reused = self._scene.reset()
        write_fixture_poses(env, spec.fixture_poses, f"{spec.where}.fixture_poses")
        write_warmstart(env, spec.qacc_warmstart, f"{spec.where}.qacc_warmstart")
        expected = spec.initial_observation_digest
        gate.render_every_sample(CAMERAS if expected is not None else self.cameras)
        raw = env.set_init_state(spec.init_state)
        self._healthy = True
        if expected is not None and observation_digest(initial := observe(env, raw)) != expected:
            raise BenchmarkError(
                f"initial observation hashes to {observation_digest(initial)}, manifest says {expected}"
                f" (simulator, asset or renderer drift; this worker renders with {gl_renderer(env)})",
                field=f"{spec.where}.initial_observation_digest",
            )
        self._trace = TraceDigest()
        add_scene(self._trace, env)
        add_state(self._trace, env)
        wait = [np.array(WAIT_ACTION)] * spec.protocol.num_steps_wait
        if wait:
            gate.plan(self.cameras, len(wait))
            for action in wait:
                raw = self._advance(action)
        self._steps = 0
        self._success = False
        self._ready = True
        return self._observe(raw)

    def step(self, action: Action) -> SimObservation:
        self._check_can_step()
        self._gate.plan(self.cameras, 1)
        return self._observe(self._policy_step(action))

    def execute(self, actions: Actions) -> Executed:
        """Runs ``actions`` until done, rendering only for the observation after the last one."""
        if len(actions) == 0:
            raise ValueError("execute() needs at least one action")
        self._check_can_step()
        actions = [_checked(action) for action in actions[: self.max_steps - self._steps]]
        # The step limit ends the episode where no policy looks; only a success is not foreseen.
        observed = self._steps + len(actions) < self.max_steps
        self._gate.plan(self.cameras if observed else (), len(actions))
        executed = 0
        for action in actions:
            raw = self._policy_step(action)
            executed += 1
            if self.done:
                return Executed(executed, None)
        return Executed(executed, self._observe(raw))

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
        if self._kept is not None:
            kept, self._kept = self._kept, None
            self._release(kept, self._healthy)

    @property
    def _gate(self) -> CameraGate:
        return self._borrowed.gate

    @property
    def _scene(self) -> SceneReuse | None:
        return self._borrowed.scene

    @property
    def _borrowed(self) -> _Kept:
        if self._kept is None:
            raise RuntimeError(f"episode {self._spec.episode_id} is closed")
        return self._kept

    def _check_can_step(self) -> None:
        if not self._ready:
            raise RuntimeError("step() before reset()")
        if self.done:
            raise RuntimeError(f"episode {self._spec.episode_id} is done after {self._steps} steps")

    def _policy_step(self, action: Action) -> dict[str, Any]:
        raw = self._advance(_checked(action))
        self._steps += 1
        self._success = bool(self._env.check_success())
        return raw

    def _advance(self, action: npt.NDArray[np.float64]) -> dict[str, Any]:
        self._healthy = False
        raw: dict[str, Any] = self._env.step(action)[0]
        add_state(self._trace, self._env)
        self._healthy = True
        return raw

    def _observe(self, raw: dict[str, Any]) -> SimObservation:
        self._gate.check(self.cameras)
        return observe(self._env, raw, self.cameras)


def _numbering(manifest: Manifest, index: int, spec: EpisodeSpec) -> Numbering:
    """LIBERO's own numbering of the trial: the suite (the manifest's setting), the task's id in it
    and the trial's place in the task's stream (the entry's ``trial``; in vla-eval's protocol it
    is also the init-state row that its ``episode_idx`` selects)."""
    trial = manifest.episodes[index].get("trial")
    if trial is not None and (isinstance(trial, bool) or not isinstance(trial, int) or trial < 0):
        raise BenchmarkError(f"must be an integer >= 0, got {trial!r}", field=f"{spec.where}.trial")
    return Numbering(suite=manifest.setting, task_index=spec.protocol.task_id, episode_index=trial)


def _checked(action: Action) -> npt.NDArray[np.float64]:
    row = np.asarray(action, dtype=np.float64)
    if row.shape != (ACTION_DIM,) or not np.all(np.isfinite(row)):
        raise ValueError(f"action must be {ACTION_DIM} finite numbers, got shape {row.shape}")
    return row
