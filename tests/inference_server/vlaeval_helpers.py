"""vla-eval's real model server with the test policy (`vlaeval_policy.py`) as a harnessed process.
The checkpoints that point at it are in `remote_checkpoints.py`."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import msgpack
from remote_checkpoints import ACTION_DIM
from vla_eval.protocol.messages import make_hello_payload
from vla_eval.protocol.numpy_codec import encode_ndarray
from vlaeval_policy import action_spec, observation_spec

from evalfleet.processes import ServiceProcess

POLICY_SCRIPT = Path(__file__).parent / "vlaeval_policy.py"
REMOTE_CHUNK = 10


class VlaEvalServer(ServiceProcess):
    """vla-eval's model server with the test policy, on a port fixed up front so that it can come
    back at the same URL; ready once websockets logs "server listening on HOST:PORT"."""

    def __init__(
        self,
        port: int,
        log_path: Path,
        max_batch_size: int = 1,
        chunk_size: int | None = None,
        observation_params: dict[str, object] | None = None,
    ) -> None:
        super().__init__([], log_path)
        self.fixed_port = port
        self.max_batch_size = max_batch_size
        self.chunk_size = chunk_size
        self.observation_params = observation_params
        self.url = f"ws://127.0.0.1:{port}"

    def run(self, mode: str = "ok", version: str = "1") -> VlaEvalServer:
        self.argv = [sys.executable, str(POLICY_SCRIPT), "--port", str(self.fixed_port), "--mode", mode]
        self.argv += ["--max-batch-size", str(self.max_batch_size), "--chunk", str(REMOTE_CHUNK)]
        self.argv += ["--action-dim", str(ACTION_DIM), "--version", version]
        self.argv += ["--chunk-size", str(self.chunk_size)] if self.chunk_size is not None else []
        if self.observation_params is not None:
            self.argv += ["--observation-params", json.dumps(self.observation_params)]
        self.start(timeout=60)
        return self

    def log(self) -> str:
        return self.log_path.read_text()

    def connections_opened(self) -> int:
        return self.log().count("HELLO session=")

    def episode_tasks(self) -> list[dict[str, object]]:
        """The task of every EPISODE_START the server received, in order."""
        prefix = "episode_task "
        return [json.loads(line[len(prefix) :]) for line in self.log().splitlines() if line.startswith(prefix)]

    def batch_sizes(self) -> list[int]:
        return [int(line.split("=")[1]) for line in self.log().splitlines() if line.startswith("predict_batch size=")]


def handshake_sha256(version: str = "1") -> str:
    """The sha256 of the HELLO payload the test server answers, built and packed as vla-eval does."""
    payload = make_hello_payload(
        model_server="TestPolicy",
        capabilities={},
        action_spec={k: v.to_dict() for k, v in action_spec(ACTION_DIM, version).items()},
        observation_spec={k: v.to_dict() for k, v in observation_spec().items()},
    )
    return hashlib.sha256(msgpack.packb(payload, default=encode_ndarray, use_bin_type=True)).hexdigest()
