"""The `replay` backend: the rows of each session's episode, continued from what it executed.

Through the whole fleet (scheduler, workers, server) on RoboTwin episodes: tests/test_robotwin_run.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evalfleet.policy_api.errors import InvalidField
from evalfleet.v1 import policy_pb2
from inference_server.backends import resolve, settings_deriver
from inference_server.backends.contract import History, HistoryEntry, PolicyObservation, RuntimeOptions, SealContext
from inference_server.checkpoint import CheckpointError, load, seal

pytestmark = pytest.mark.timeout(30)

ROWS = {"a": np.arange(12, dtype=np.float64).reshape(4, 3), "b": np.full((1, 3), 7.0)}


def _backend(folder: Path, **settings: object):
    np.savez(folder / "rows.npz", **ROWS)
    deriver = settings_deriver("replay")
    assert deriver is not None
    derived = deriver(folder, dict(settings), SealContext())
    seal(folder, "replay", derived.settings, derived=derived.derived)
    return resolve("replay")(load(folder), RuntimeOptions()), derived


def _history(episode: str, executed: list[int]) -> History:
    entries = tuple(
        HistoryEntry(step=i, state={}, executed=np.zeros((n, 3), dtype=np.float32)) for i, n in enumerate(executed)
    )
    return History(session_id=episode, episode=policy_pb2.EpisodeMeta(episode_id=episode), entries=entries)


def _act(backend, *histories: History) -> np.ndarray:
    observations = [PolicyObservation(step=len(h.entries), images={}, state={}) for h in histories]
    return backend.act(observations, list(histories))


def test_settings_left_out_are_derived_from_the_rows(tmp_path: Path) -> None:
    backend, derived = _backend(tmp_path)
    assert derived.derived == ("cameras", "state", "action_dim", "chunk_length", "action_dtype")
    assert (list(backend.cameras), list(backend.state), backend.action_dim, backend.chunk_length) == ([], [], 3, 1)
    assert backend.action_dtype == "float64", "the rows are answered as recorded"


def test_each_session_continues_from_what_it_executed_and_holds_the_last_row(tmp_path: Path) -> None:
    backend, _ = _backend(tmp_path, chunk_length=3)
    chunks = _act(backend, _history("a", []), _history("a", [2]), _history("a", [2, 1]), _history("b", [3]))
    assert chunks.dtype == np.float64
    np.testing.assert_array_equal(chunks[0], ROWS["a"][[0, 1, 2]])
    np.testing.assert_array_equal(chunks[1], ROWS["a"][[2, 3, 3]])
    np.testing.assert_array_equal(chunks[2], ROWS["a"][[3, 3, 3]])
    np.testing.assert_array_equal(chunks[3], ROWS["b"][[0, 0, 0]])


def test_an_episode_without_rows_is_refused_naming_it(tmp_path: Path) -> None:
    backend, _ = _backend(tmp_path)
    with pytest.raises(InvalidField, match="no rows for episode 'c'") as caught:
        _act(backend, _history("c", []))
    assert caught.value.field == "episode.episode_id"


@pytest.mark.parametrize(
    "rows",
    [
        {"a": np.zeros((2, 3)), "b": np.zeros((2, 4))},
        {"a": np.zeros((0, 3))},
        {"a": np.zeros(3)},
        {"a": np.zeros((2, 3), dtype=np.float32)},
        {"a": np.array([[object()]], dtype=object)},
        {},
    ],
)
def test_rows_that_are_not_one_float64_matrix_per_episode_are_refused(tmp_path: Path, rows) -> None:
    np.savez(tmp_path / "rows.npz", **rows)
    deriver = settings_deriver("replay")
    assert deriver is not None
    with pytest.raises(CheckpointError, match="rows.npz"):
        deriver(tmp_path, {}, SealContext())


def test_declared_width_must_be_the_rows_width(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="action_dim is 5, the rows are 3 wide"):
        _backend(tmp_path, action_dim=5)
