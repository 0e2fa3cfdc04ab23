"""A policy served by the real openpi policy server (PyPI `openpi-server`, openpi's own
`websocket_policy_server.py`) whose actions are a hash of the request it received, recording every
request, for the closed-loop test `test_libero_closed_loop.py`.

openpi's protocol has no episodes: each request is recorded in arrival order
(`request_digest.describe`: every key, every byte) and answered with `request_digest.actions_for`
its digest (with its prompt, which tells evalfleet's load-time warm-up apart), `--chunk`
rows of float64, as openpi's policies answer (their statistics unnormalize in float64).

    python openpi_hash_policy.py --port 8000 --record FILE [--chunk 10]
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import request_digest
from openpi_server import WebsocketPolicyServer

ACTION_DIM = 7


class HashPolicy:
    """openpi's BasePolicy interface (`infer`, `reset`) by duck typing, as `openpi_policy.py`."""

    def __init__(self, record: Path, chunk: int) -> None:
        self.record, self.chunk = record, chunk

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        described = request_digest.describe(obs)
        request_digest.record(self.record, {"event": "request", "prompt": obs.get("prompt"), **described})
        return {"actions": request_digest.actions_for(described["digest"], self.chunk, ACTION_DIM)}

    def reset(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--chunk", type=int, default=10)
    args = parser.parse_args()
    # websockets logs "server listening on HOST:PORT", the line the harness waits for.
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    metadata = {"policy": "evalfleet hash policy", "action_chunk": args.chunk}
    WebsocketPolicyServer(
        HashPolicy(args.record, args.chunk), host="127.0.0.1", port=args.port, metadata=metadata
    ).serve_forever()


if __name__ == "__main__":
    main()
