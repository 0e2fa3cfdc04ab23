"""A small numpy policy served by the real openpi policy server (PyPI `openpi-server`, openpi's
own `websocket_policy_server.py`), for the `remote` backend's tests.

Its actions are a function of the LIBERO-style request openpi's example client sends, so a test
can compute them from the same observation: `actions[t, d] = base + 0.01 t + 0.001 d` with
`base = mean(image) / 255 + mean(wrist_image) / 510 + sum(state) + len(prompt)`.
`--mode` makes it misbehave: `wrong-shape` answers [T, D - 1], `raise` raises (openpi sends the
traceback as a text frame and closes with 1011), `nan` answers non-finite actions, `hang` never
answers (it blocks the server's event loop, as a stuck model would). `--version`
goes into the metadata frame, so a restart with another version is another handshake.

    python openpi_policy.py --port 8000 [--mode ok] [--chunk 10] [--action-dim 7] [--version 1]
"""

from __future__ import annotations

import argparse
import logging
import threading
from typing import Any

import numpy as np
import numpy.typing as npt
from openpi_server import WebsocketPolicyServer


def expected_actions(request: dict[str, Any], chunk: int, action_dim: int) -> npt.NDArray[np.float64]:
    """What the policy answers to `request` (the same formula the tests check against)."""
    base = (
        float(np.asarray(request["observation/image"], dtype=np.float64).mean()) / 255.0
        + float(np.asarray(request["observation/wrist_image"], dtype=np.float64).mean()) / 510.0
        + float(np.asarray(request["observation/state"], dtype=np.float64).sum())
        + len(request["prompt"])
    )
    t = np.arange(chunk, dtype=np.float64)[:, None] * 0.01
    d = np.arange(action_dim, dtype=np.float64)[None, :] * 0.001
    return base + t + d


class TestPolicy:
    """openpi's BasePolicy interface (`infer`, `reset`) without importing it: duck typing is all
    the server needs."""

    def __init__(self, mode: str, chunk: int, action_dim: int) -> None:
        self.mode, self.chunk, self.action_dim = mode, chunk, action_dim

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        if self.mode == "hang":
            threading.Event().wait()
        if self.mode == "raise":
            raise ValueError(f"test policy refuses the observation with keys {sorted(obs)}")
        actions = expected_actions(obs, self.chunk, self.action_dim)
        print(f"answered prompt={obs['prompt']!r}", flush=True)  # a line harnesses can wait for
        if self.mode == "wrong-shape":
            actions = actions[:, :-1]
        if self.mode == "nan":
            actions[0, 0] = np.nan
        return {"actions": actions}

    def reset(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", default="ok", choices=("ok", "wrong-shape", "raise", "nan", "hang"))
    parser.add_argument("--chunk", type=int, default=10)
    parser.add_argument("--action-dim", type=int, default=7)
    parser.add_argument("--version", default="1")
    args = parser.parse_args()
    # websockets logs "server listening on HOST:PORT", the line the harness waits for; openpi logs
    # each connection it opens.
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    policy = TestPolicy(args.mode, args.chunk, args.action_dim)
    metadata = {"policy": "evalfleet test policy", "version": args.version, "action_chunk": args.chunk}
    WebsocketPolicyServer(policy, host="127.0.0.1", port=args.port, metadata=metadata).serve_forever()


if __name__ == "__main__":
    main()
