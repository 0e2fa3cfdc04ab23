"""The LIBERO oracle with a deliberate setup mistake, for the broken-setup canary's tests.

Loaded by `--backend broken_oracle_backend:broken_oracle` (the tests put this folder on the
inference server's path). The checkpoint setting `breakage` says which mistake it makes, of those
that cost labs whole runs: `actions_scaled` multiplies every command by `scale` (a wrong action
normalization; 0 freezes the robot), `state_shuffled` rotates the components of every state entry
(a wrong state layout). Anything else is the oracle as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from inference_server.backends.contract import History, Observation, RuntimeOptions
from inference_server.backends.oracle import OracleBackend
from inference_server.checkpoint import Checkpoint


class BrokenOracle(OracleBackend):
    def act(self, observations: Sequence[Observation], histories: Sequence[History]) -> npt.NDArray[np.float32]:
        breakage = self.settings.get("breakage")
        if breakage == "state_shuffled":
            observations = [
                dataclasses.replace(o, state={name: np.roll(value, 1) for name, value in o.state.items()})
                for o in observations
            ]
        chunks = super().act(observations, histories)
        if breakage == "actions_scaled":
            chunks = (chunks * float(self.settings["scale"])).astype(np.float32)
        return chunks


def broken_oracle(checkpoint: Checkpoint, options: RuntimeOptions) -> BrokenOracle:
    return BrokenOracle(checkpoint)
