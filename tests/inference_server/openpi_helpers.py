"""Servers on openpi's transport as harnessed processes: the real openpi policy server with the
test policy (`openpi_policy.py`), and the double of StarVLA's server (`starvla_double.py`, which
restates StarVLA's copy of openpi's transport with openpi-client's codec). The checkpoints that
point at them are in `remote_checkpoints.py`."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from openpi_client import msgpack_numpy
from remote_checkpoints import ACTION_DIM

from evalfleet.processes import ServiceProcess

POLICY_SCRIPT = Path(__file__).parent / "openpi_policy.py"
STARVLA_DOUBLE = Path(__file__).parent / "starvla_double.py"
REMOTE_CHUNK = 10


class OpenpiServer(ServiceProcess):
    """openpi's websocket policy server with the test policy, on a port fixed up front so that it
    can come back at the same URL; ready once websockets logs "server listening on HOST:PORT"."""

    def __init__(self, port: int, log_path: Path, script: Path = POLICY_SCRIPT) -> None:
        super().__init__([], log_path)
        self.fixed_port = port
        self.script = script
        self.url = f"ws://127.0.0.1:{port}"

    def run(self, mode: str = "ok", version: str = "1", args: Sequence[str] = ()) -> OpenpiServer:
        """Starts the server; `args` are further flags of its script (the StarVLA double's)."""
        self.argv = [sys.executable, str(self.script), "--port", str(self.fixed_port), "--mode", mode]
        self.argv += ["--chunk", str(REMOTE_CHUNK), "--action-dim", str(ACTION_DIM), "--version", version, *args]
        self.start(timeout=60)
        return self

    def connections_opened(self) -> int:
        lines = self.log_path.read_text().splitlines()
        return sum(1 for line in lines if "websocket_policy_server INFO Connection from" in line and "opened" in line)


def metadata(version: str = "1") -> dict[str, Any]:
    return {"policy": "evalfleet test policy", "version": version, "action_chunk": REMOTE_CHUNK}


def handshake_sha256(version: str = "1") -> str:
    """The sha256 of the metadata frame the test server sends, packed as openpi packs it."""
    return hashlib.sha256(msgpack_numpy.Packer().pack(metadata(version))).hexdigest()
