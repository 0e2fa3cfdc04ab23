"""The scripted oracle solves a real libero_object trial through the LIBERO adapter.

This is the demo's claim in one test: the adapter's objects-of-interest aliases name the right
objects, and the oracle backend (built from a sealed checkpoint, fed the session history the
server would keep) puts the soup in the basket. One trial with 32x32 cameras: about a minute.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from libero_guard import LIBERO_MISSING, REASON

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

from benchmarks.libero.adapter import LiberoBenchmark, add_build_arguments, build_manifests
from evalfleet.v1 import policy_pb2
from inference_server.backends import resolve
from inference_server.backends.contract import History, HistoryEntry, PolicyObservation, RuntimeOptions
from inference_server.backends.oracle import ORACLE_SETTINGS
from inference_server.checkpoint import load, seal

pytestmark = [pytest.mark.slow, pytest.mark.libero]
CAMERA = 32


@pytest.mark.timeout(240)
def test_the_oracle_puts_the_alphabet_soup_in_the_basket(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_build_arguments(parser)
    args = parser.parse_args(
        ["--suite", "libero_object", "--tasks", "0", "--trials", "1", "--camera-size", str(CAMERA), "--jobs", "1"]
    )
    [manifest] = build_manifests(args)
    settings = {**ORACLE_SETTINGS, "cameras": [{"name": "agentview", "height": CAMERA, "width": CAMERA}]}
    seal(tmp_path, "libero-oracle", settings)
    backend = resolve("libero-oracle")(load(tmp_path), RuntimeOptions())
    adapter = LiberoBenchmark(max_idle_envs=0)
    episode = adapter.open_episode(manifest, 0)
    try:
        observation = episode.reset()
        state = observation.state
        assert np.array_equal(state["target_pos"], state["alphabet_soup_1_pos"])
        assert np.array_equal(state["target_quat"], state["alphabet_soup_1_quat"])
        assert np.array_equal(state["goal_pos"], state["basket_1_pos"])
        entries: list[HistoryEntry] = []
        while not episode.done:
            history = History(session_id="s", episode=policy_pb2.EpisodeMeta(), entries=tuple(entries))
            sent = PolicyObservation(step=len(entries), images=observation.images, state=observation.state)
            command = backend.act([sent], [history])[0, 0]
            entries.append(HistoryEntry(step=len(entries), state=observation.state, executed=command[None, :]))
            observation = episode.step(command)
        result = episode.result()
    finally:
        episode.close()
        adapter.close()
    assert result.success, f"not solved in {result.steps} steps"
