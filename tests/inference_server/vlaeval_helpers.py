"""vla-eval's real model server with the test policy (`vlaeval_policy.py`) as a harnessed process,
and `remote` checkpoints that point at it with vla-eval's LIBERO observation keys."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import msgpack
from vla_eval.protocol.messages import make_hello_payload
from vla_eval.protocol.numpy_codec import encode_ndarray
from vlaeval_policy import action_spec, observation_spec

from evalfleet.processes import ServiceProcess
from inference_server.checkpoint import seal

POLICY_SCRIPT = Path(__file__).parent / "vlaeval_policy.py"
REMOTE_CHUNK, ACTION_DIM = 10, 7


class VlaEvalServer(ServiceProcess):
    """vla-eval's model server with the test policy, on a port fixed up front so that it can come
    back at the same URL; ready once websockets logs "server listening on HOST:PORT"."""

    def __init__(self, port: int, log_path: Path, max_batch_size: int = 1, chunk_size: int | None = None) -> None:
        super().__init__([], log_path)
        self.fixed_port = port
        self.max_batch_size = max_batch_size
        self.chunk_size = chunk_size
        self.url = f"ws://127.0.0.1:{port}"

    def run(self, mode: str = "ok", version: str = "1") -> VlaEvalServer:
        self.argv = [sys.executable, str(POLICY_SCRIPT), "--port", str(self.fixed_port), "--mode", mode]
        self.argv += ["--max-batch-size", str(self.max_batch_size), "--chunk", str(REMOTE_CHUNK)]
        self.argv += ["--action-dim", str(ACTION_DIM), "--version", version]
        self.argv += ["--chunk-size", str(self.chunk_size)] if self.chunk_size is not None else []
        self.start(timeout=60)
        return self

    def log(self) -> str:
        return self.log_path.read_text()

    def connections_opened(self) -> int:
        return self.log().count("HELLO session=")

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


def vlaeval_settings(
    url: str, camera: tuple[int, int] = (48, 64), chunk_length: int = 5, **overrides: Any
) -> dict[str, Any]:
    """vla-eval's LIBERO observation: `images` by camera, an 8-D float32 `states` with the end
    effector's rotation as an axis-angle, the instruction as `task_description`."""
    settings: dict[str, Any] = {
        "url": url,
        "dialect": "vla-eval",
        "connections": 4,
        "reply_timeout_s": 20,
        "load_timeout_s": 30,
        "cameras": [{"name": n, "height": camera[0], "width": camera[1]} for n in ("agentview", "robot0_eye_in_hand")],
        "state": [
            {"name": "robot0_eef_pos", "length": 3},
            {"name": "robot0_eef_quat", "length": 4},
            {"name": "robot0_gripper_qpos", "length": 2},
        ],
        "action_dim": ACTION_DIM,
        "chunk_length": chunk_length,
        "request": [
            {"key": ["images", "agentview"], "camera": "agentview"},
            {"key": ["images", "wrist"], "camera": "robot0_eye_in_hand"},
            {
                "key": "states",
                "state": ["robot0_eef_pos", {"name": "robot0_eef_quat", "as": "axisangle"}, "robot0_gripper_qpos"],
                "dtype": "float32",
            },
            {"key": "task_description", "instruction": True},
        ],
    }
    settings.update(overrides)
    return settings


def make_vlaeval_checkpoint(root: Path, url: str, epoch: str = "vlaeval", **overrides: Any) -> Path:
    (root / epoch).mkdir(parents=True, exist_ok=True)
    seal(root / epoch, "remote", {**vlaeval_settings(url), **overrides})
    return root
