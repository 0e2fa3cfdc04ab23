"""Servers on openpi's transport as harnessed processes: the real openpi policy server with the
test policy (`openpi_policy.py`), and the double of StarVLA's server (`starvla_double.py`, on
openpi-server's transport); and `remote` checkpoints that point at them with openpi's and
StarVLA's LIBERO mappings."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

from openpi_client import msgpack_numpy

from evalfleet.processes import ServiceProcess
from inference_server.checkpoint import seal

POLICY_SCRIPT = Path(__file__).parent / "openpi_policy.py"
STARVLA_DOUBLE = Path(__file__).parent / "starvla_double.py"
REMOTE_CHUNK, ACTION_DIM = 10, 7


class OpenpiServer(ServiceProcess):
    """openpi's websocket policy server with the test policy, on a port fixed up front so that it
    can come back at the same URL; ready once websockets logs "server listening on HOST:PORT"."""

    def __init__(self, port: int, log_path: Path, script: Path = POLICY_SCRIPT) -> None:
        super().__init__([], log_path)
        self.fixed_port = port
        self.script = script
        self.url = f"ws://127.0.0.1:{port}"

    def run(self, mode: str = "ok", version: str = "1") -> OpenpiServer:
        self.argv = [sys.executable, str(self.script), "--port", str(self.fixed_port), "--mode", mode]
        self.argv += ["--chunk", str(REMOTE_CHUNK), "--action-dim", str(ACTION_DIM), "--version", version]
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


def remote_settings(
    url: str, camera: tuple[int, int] = (48, 64), chunk_length: int = 5, **overrides: Any
) -> dict[str, Any]:
    """openpi's LIBERO mapping: two cameras resized with padding to 224, an 8-D state with the end
    effector's rotation as an axis-angle, the instruction as `prompt`."""
    settings: dict[str, Any] = {
        "url": url,
        "dialect": "openpi",
        "connections": 2,
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
            {"key": "observation/image", "camera": "agentview", "resize_with_pad": [224, 224]},
            {"key": "observation/wrist_image", "camera": "robot0_eye_in_hand", "resize_with_pad": [224, 224]},
            {
                "key": "observation/state",
                "state": ["robot0_eef_pos", {"name": "robot0_eef_quat", "as": "axisangle"}, "robot0_gripper_qpos"],
            },
            {"key": "prompt", "instruction": True},
        ],
    }
    settings.update(overrides)
    return settings


def starvla_settings(url: str, **overrides: Any) -> dict[str, Any]:
    """StarVLA's LIBERO mapping (its `eval_libero.py`): both cameras as the example's `image` list,
    the instruction as `lang`; here also the 8-D state, which StarVLA sends when a model uses it."""
    settings = remote_settings(url, dialect="starvla", examples_per_request=8, unnorm_key="libero_goal")
    settings["predict_kwargs"] = {"do_sample": False, "use_ddim": True, "num_ddim_steps": 10}
    settings["request"] = [
        {"key": "image", "cameras": ["agentview", "robot0_eye_in_hand"], "resize_with_pad": [224, 224]},
        {"key": "lang", "instruction": True},
        {
            "key": "state",
            "state": ["robot0_eef_pos", {"name": "robot0_eef_quat", "as": "axisangle"}, "robot0_gripper_qpos"],
        },
    ]
    settings.update(overrides)
    return settings


def make_remote_checkpoint(
    root: Path, url: str, epoch: str = "pi05", dialect: str = "openpi", **overrides: Any
) -> Path:
    (root / epoch).mkdir(parents=True, exist_ok=True)
    settings = starvla_settings(url) if dialect == "starvla" else remote_settings(url)
    seal(root / epoch, "remote", {**settings, **overrides})
    return root
