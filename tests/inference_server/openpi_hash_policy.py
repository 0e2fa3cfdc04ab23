"""A policy served by the real openpi policy server (PyPI `openpi-server`, openpi's own
`websocket_policy_server.py`) whose actions are a hash of the request it received, recording every
request, for the closed-loop test `test_libero_closed_loop.py`.

openpi's protocol has no episodes: each request is recorded in arrival order
(`request_digest.describe`: every key, every byte) and answered with `request_digest.actions_for`
its digest (with its prompt, which tells evalfleet's load-time warm-up apart), `--chunk`
rows of float64, as openpi's policies answer (their statistics unnormalize in float64).

With `--replay FILE` (JSON: one episode's actions, a list per step) it answers the n-th request
(evalfleet's warm-up aside) with the recorded actions from step n * `--stride` on (after the last,
still with the gripper as last commanded): the scripted oracle's commands, which solve the trial,
for a client that executes `--stride` actions of each chunk, as openpi's main.py executes 5. One
episode per server, since openpi's protocol cannot say where an episode starts.

    python openpi_hash_policy.py --port 8000 --record FILE [--chunk 10] [--replay FILE --stride 5]
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import request_digest
from openpi_server import WebsocketPolicyServer

ACTION_DIM = 7
WARM_UP = "warm up"  # the prompt of evalfleet's load-time request


class HashPolicy:
    """openpi's BasePolicy interface (`infer`, `reset`) by duck typing, as `openpi_policy.py`."""

    def __init__(self, record: Path, chunk: int, replay: list[list[float]] | None, stride: int) -> None:
        self.record, self.chunk, self.replay, self.stride = record, chunk, replay, stride
        self.requests = 0  # the episode's requests answered so far

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        described = request_digest.describe(obs)
        request_digest.record(self.record, {"event": "request", "prompt": obs.get("prompt"), **described})
        if self.replay is not None and obs.get("prompt") != WARM_UP:
            start, self.requests = self.requests * self.stride, self.requests + 1
            return {"actions": request_digest.replayed(self.replay, start, self.chunk)}
        return {"actions": request_digest.actions_for(described["digest"], self.chunk, ACTION_DIM)}

    def reset(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--chunk", type=int, default=10)
    parser.add_argument("--replay", type=Path, default=None, help="one episode's recorded actions (see the module)")
    parser.add_argument("--stride", type=int, default=5, help="actions the client executes per chunk")
    args = parser.parse_args()
    replay = json.loads(args.replay.read_text()) if args.replay else None
    # websockets logs "server listening on HOST:PORT", the line the harness waits for.
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    metadata = {"policy": "evalfleet hash policy", "action_chunk": args.chunk}
    WebsocketPolicyServer(
        HashPolicy(args.record, args.chunk, replay, args.stride), host="127.0.0.1", port=args.port, metadata=metadata
    ).serve_forever()


if __name__ == "__main__":
    main()
