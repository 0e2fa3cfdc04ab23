"""`replay`: answers each session with recorded action rows, the ones its episode's id names.

A scripted policy for benchmarks whose own expert leaves a trajectory rather than a rule (RoboTwin's
expert plans every motion on the live scene, so there is no LIBERO-oracle-like function of the
observation): the expert is run once per episode beforehand and its rows are what this backend
serves. It shows that scheduler, workers, sessions and the benchmark's own success check carry a
real success end to end, not that anything learned.

The checkpoint folder holds ``rows.npz`` (read without pickles): one float64 array
``[T, action_dim]`` per episode id. A session's place in its rows is the number of commands it has
executed so far, read from its causal history, so a chunk of any length, executed in part or in
whole, continues where the episode is; past the last row the last row is held, as a robot holds
its final pose. The backend consumes no camera and no state: a worker renders nothing for it.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from evalfleet.policy_api.errors import InvalidField
from inference_server.backends.contract import (
    DerivedSettings,
    History,
    NumpyBackend,
    PolicyObservation,
    RuntimeOptions,
    SealContext,
)
from inference_server.checkpoint import Checkpoint, CheckpointError

ROWS_FILE = "rows.npz"


def read_rows(folder: Path) -> dict[str, npt.NDArray[np.float64]]:
    """The folder's ``rows.npz``: episode id -> [T, action_dim] float64, all of one width, T >= 1."""
    path = folder / ROWS_FILE
    try:
        with np.load(path, allow_pickle=False) as archive:
            rows = {name: np.asarray(archive[name]) for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{path}: not a readable .npz of action rows ({exc})", path=path) from exc
    widths = {array.shape[1] for array in rows.values() if array.ndim == 2}
    bad = [name for name, array in rows.items() if array.ndim != 2 or len(array) == 0 or array.dtype != np.float64]
    if not rows or bad or len(widths) != 1:
        raise CheckpointError(
            f"{path}: needs one non-empty float64 [T, action_dim] array per episode id, all of one width "
            f"(first bad: {bad[0] if bad else 'widths ' + str(sorted(widths))})",
            path=path,
        )
    return rows


def derive_settings(root: Path, settings: dict[str, Any], context: SealContext) -> DerivedSettings:
    """``action_dim`` from the rows; no cameras, no state, one action per chunk, answered in float64
    (the rows' own dtype, so nothing is rounded on the way), unless given."""
    rows = read_rows(root)
    derived = {
        "cameras": [],
        "state": [],
        "action_dim": next(iter(rows.values())).shape[1],
        "chunk_length": 1,
        "action_dtype": "float64",
    }
    filled = tuple(key for key in derived if key not in settings)
    return DerivedSettings({**settings, **{key: derived[key] for key in filled}}, filled)


class ReplayBackend(NumpyBackend):
    """Sessions are independent: each chunk is the next ``chunk_length`` rows of its episode."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        super().__init__(checkpoint)
        self.rows = read_rows(checkpoint.root)
        width = next(iter(self.rows.values())).shape[1]
        if width != self.action_dim:
            raise CheckpointError(
                f"{checkpoint.root}: settings.action_dim is {self.action_dim}, the rows are {width} wide",
                path=checkpoint.root,
            )

    def act(self, observations: Sequence[PolicyObservation], histories: Sequence[History]) -> npt.NDArray[np.float32]:
        return np.stack([self.chunk(history) for history in histories]).astype(self.action_dtype)

    def chunk(self, history: History) -> npt.NDArray[np.float64]:
        """The rows from the session's executed count on, the last one held past the end."""
        episode_id = history.episode.episode_id
        rows = self.rows.get(episode_id)
        if rows is None:
            raise InvalidField(
                f"this replay checkpoint's {ROWS_FILE} has no rows for episode {episode_id!r} "
                f"({len(self.rows)} episodes recorded)",
                field="episode.episode_id",
            )
        executed = sum(len(entry.executed) for entry in history.entries)
        index = np.minimum(np.arange(executed, executed + self.chunk_length), len(rows) - 1)
        chunk: npt.NDArray[np.float64] = rows[index]
        return chunk


def replay(checkpoint: Checkpoint, options: RuntimeOptions) -> ReplayBackend:
    return ReplayBackend(checkpoint)
