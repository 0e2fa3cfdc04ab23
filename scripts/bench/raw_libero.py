"""A LIBERO trial reset as harnesses reset it: the reference that evalfleet's adapter is compared with.

``scripts.bench.libero`` and ``scripts.bench.step_overhead`` step the raw environment from here, and
the render-on-demand test (tests/adapters/test_libero_render_on_demand.py) checks the adapter
against it, trace and observations bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.base import TraceDigest
from benchmarks.libero.manifest import WAIT_ACTION, EpisodeSpec
from benchmarks.libero.sim import add_scene, add_state, global_numpy_rng, write_fixture_poses, write_warmstart


def reset_trial(env: Any, spec: EpisodeSpec, trace: TraceDigest | None = None) -> dict[str, Any]:
    """A trial as harnesses reset it (LIBERO's hard reset, the manifest's fixture poses, the solver
    warm start the trial's reset left in the harness's stream, the initial state, the wait steps);
    returns the last raw observation. With ``trace``, adds to it what the adapter's trace digest
    holds up to the first policy step (the scene, then every state)."""
    with global_numpy_rng(spec.protocol.seed):
        env.reset()
    write_fixture_poses(env, spec.fixture_poses, "fixture_poses")
    write_warmstart(env, spec.qacc_warmstart, "qacc_warmstart")
    raw: dict[str, Any] = env.set_init_state(spec.init_state)
    if trace is not None:
        add_scene(trace, env)
        add_state(trace, env)
    for _ in range(spec.protocol.num_steps_wait):
        raw = env.step(np.array(WAIT_ACTION))[0]
        if trace is not None:
            add_state(trace, env)
    return raw
