"""Resetting a kept LIBERO environment without recompiling its scene, to what a hard reset builds.

A hard ``reset()`` (what LIBERO's evaluators use) runs robosuite's ``_load_model`` (rebuilds every
Python-side model: robot, gripper, objects, object states, placement samplers) and then
``_initialize_sim``, which compiles that model's XML into a new MjSim (~4 s) whose offscreen render
context ``_reset_internal`` then creates anew (~1.5 s). Between two trials of one task the XML is
the same (the reset's RNG is seeded with the task's seed), so compiling it again yields the same
MjModel. robosuite's own soft reset (``hard_reset=False``) is not that: it skips ``_load_model`` and
so keeps Python-side state a hard reset rebuilds (the gripper's ``current_action`` accumulator,
LIBERO's object states), keeps every runtime write to the MjModel (fixture poses, site colours a
stove's burner toggles) and keeps MjData's scratch memory; its trajectories differ from step 1.

:class:`SceneReuse` runs the hard reset's own code and replaces only the compile: when the XML
``_load_model`` just produced is byte-identical to the one the kept MjSim was compiled from, it
writes back every array of the MjModel as the compile left it, gives the MjSim a freshly allocated
MjData (what a new MjSim gets: all state, warm start and scratch memory new), and runs the same
``forward`` and ``initialize_time`` as ``_initialize_sim``, plus what creating the new render
context would do to the simulation (make its GL context current, ``forward``). Otherwise it compiles
as a hard reset does. The render context (GL textures and meshes uploaded from the unchanged model)
is kept.
tests/adapters/test_libero_soft_reset.py holds this bit-identical to the hard reset.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


class SceneReuse:
    """Makes ``env.reset()`` reuse the compiled scene when the task's XML repeats (kept across resets).

    ``reused`` and ``compiled`` count the resets that took each path; ``last_reused`` tells the last one's.
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.reused = 0
        self.compiled = 0
        self.last_reused = False
        self._xml: str | None = None
        self._pristine: dict[str, npt.NDArray[Any]] = {}

    def reset(self) -> bool:
        """``env.reset()`` (a hard reset, RandomizationError retries included) with the compile
        reused where the XML repeats; True if the scene was reused."""
        suite = self.env.env
        # Instance attributes shadow the class's methods for this call only.
        suite._destroy_sim = _keep
        suite._initialize_sim = self._initialize_sim
        try:
            self.env.reset()
        finally:
            del suite._destroy_sim, suite._initialize_sim
        return self.last_reused

    def _initialize_sim(self, xml_string: str | None = None) -> None:
        suite = self.env.env
        xml = xml_string if xml_string else suite.model.get_xml()
        if suite._xml_processor is not None:
            xml = suite._xml_processor(xml)
        if suite.sim is None or xml != self._xml:
            # What robosuite's hard reset does: destroy the old MjSim, compile a new one.
            _make_render_context_current(suite)
            type(suite)._destroy_sim(suite)
            type(suite)._initialize_sim(suite, xml_string)
            self._xml = xml
            self._pristine = {name: array.copy() for name, array in _model_arrays(suite.sim.model._model).items()}
            self.compiled += 1
            self.last_reused = False
            return
        import mujoco  # only here: MuJoCo binds its GL backend at import (benchmarks.libero.runtime)

        sim = suite.sim
        model = sim.model._model
        for name, array in _model_arrays(model).items():
            array[...] = self._pristine[name]
        sim.data._data = mujoco.MjData(model)
        sim.forward()
        suite.initialize_time(suite.control_freq)
        if suite.has_offscreen_renderer:
            # The hard reset's _reset_internal creates a render context for the new MjSim, whose
            # constructor makes its GL context current and runs forward() once more; the kept
            # context stays, so do both here. robosuite renders into whichever GL context is
            # current, which another environment of the process may have taken since. And forward()
            # is not idempotent: MuJoCo's constraint solver starts from the previous call's result
            # (without it, a libero_object scene's object poses differ by ~1e-18 after the wait steps).
            sim._render_context_offscreen.gl_ctx.make_current()
            sim.forward()
        self.reused += 1
        self.last_reused = True


def close_env(env: Any) -> None:
    """``env.close()`` with the environment's own GL context current (see below)."""
    _make_render_context_current(env.env)
    env.close()


def _make_render_context_current(suite: Any) -> None:
    """Makes the MjSim's render context the current GL context, before it is freed: MuJoCo frees a
    render context's GL objects (framebuffers, textures) in whichever GL context is current, and
    their ids repeat from one context to the next, so freeing one while a kept environment's context
    is current would delete that environment's objects (a hard reset never noticed: it makes a new
    context every time)."""
    context = None if suite.sim is None else suite.sim._render_context_offscreen
    if context is not None:
        context.gl_ctx.make_current()


def _keep() -> None:
    """``_destroy_sim`` during a reset: :meth:`SceneReuse._initialize_sim` decides whether to destroy."""


def _model_arrays(model: Any) -> dict[str, npt.NDArray[Any]]:
    """Every array an MjModel exposes (views into its buffer)."""
    arrays = {}
    for name in dir(model):
        if name.startswith("_"):
            continue
        value = getattr(model, name)
        if isinstance(value, np.ndarray):
            arrays[name] = value
    return arrays
