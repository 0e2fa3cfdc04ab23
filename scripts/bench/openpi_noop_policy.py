"""A trivial numpy policy served by the real openpi policy server (PyPI `openpi-server`, openpi's own
`websocket_policy_server.py`): the baseline and the far end of the inference benchmarks.

It answers every request with the same zero chunk and reads nothing of it, so what a benchmark
measures is the transport (websockets, openpi's msgpack numpy codec) and whatever sits in front of
the server, not a model. `READY` matches the line websockets logs once the server listens, with the
bound host and port (`--port 0`, the default, binds a free one); `openpi_server` runs this module
as a harnessed process.

    python -m scripts.bench.openpi_noop_policy --port 0 --chunk 50 --action-dim 14
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from evalfleet.processes import ServiceProcess

# websockets logs "server listening on HOST:PORT" at INFO; a pattern of its own (not the harness's
# ADDRESS_LINE), so `LocalFleet.start` does not wait for a gRPC health service on it.
READY = re.compile(r"server listening on (\S+):(\d+)")
# This module as a command line, run from the repository root.
OPENPI_NOOP_POLICY = [sys.executable, "-m", "scripts.bench.openpi_noop_policy"]


class NoopPolicy:
    """openpi's BasePolicy interface (`infer`, `reset`) by duck typing, as the server needs."""

    def __init__(self, chunk: int, action_dim: int) -> None:
        self.actions = np.zeros((chunk, action_dim), dtype=np.float32)

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        return {"actions": self.actions}

    def reset(self) -> None:
        pass


@contextmanager
def openpi_server(log_path: Path, chunk: int, action_dim: int) -> Iterator[str]:
    """This script as a harnessed process on a free port; yields its ws:// URL once it listens."""
    argv = [*OPENPI_NOOP_POLICY, "--port", "0", "--chunk", str(chunk), "--action-dim", str(action_dim)]
    with ServiceProcess(argv, log_path, ready=READY) as server:
        server.start(timeout=60)
        yield f"ws://{server.address}"


def main() -> None:
    from openpi_server import WebsocketPolicyServer  # the bench extra; not needed to import READY

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=10)
    parser.add_argument("--action-dim", type=int, default=7)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    metadata = {"policy": "evalfleet benchmark no-op policy", "action_chunk": args.chunk}
    server = WebsocketPolicyServer(NoopPolicy(args.chunk, args.action_dim), "127.0.0.1", args.port, metadata)
    server.serve_forever()


if __name__ == "__main__":
    main()
