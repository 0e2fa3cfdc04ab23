"""A plug-in backend for the real-RoboTwin tests, loaded by `robotwin_history_backend:recording`:
the `replay` backend (its place in the rows read from the session's causal history) that also
appends, at every request, the history it was given to the JSON-lines file named by the setting
`history_log`: the episode id, and each past step's number and the commands of its chunk that were
executed, as float64 values. So a test can hold the history against what RoboTwin executed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from inference_server.backends import replay
from inference_server.backends.contract import History, PolicyObservation, RuntimeOptions
from inference_server.checkpoint import Checkpoint

derive_settings = replay.derive_settings  # the seal fills action_dim and the rest as for `replay`


class RecordingReplay(replay.ReplayBackend):
    def act(self, observations: Sequence[PolicyObservation], histories: Sequence[History]) -> npt.NDArray[np.float32]:
        with Path(self.settings["history_log"]).open("a", encoding="utf-8") as log:
            for history in histories:
                entries = [[entry.step, np.asarray(entry.executed, np.float64).tolist()] for entry in history.entries]
                log.write(json.dumps({"episode_id": history.episode.episode_id, "entries": entries}) + "\n")
        return super().act(observations, histories)


def recording(checkpoint: Checkpoint, options: RuntimeOptions) -> RecordingReplay:
    return RecordingReplay(checkpoint)
