"""Helpers for inference-server tests: sealed checkpoints and real server processes on loopback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from evalfleet.local_fleet import policy_argv
from evalfleet.policy_api.client import PolicyClient
from evalfleet.processes import ServiceProcess, free_port
from evalfleet.v1 import policy_pb2
from inference_server.checkpoint import seal

CAMERAS = ("head", "left", "right")
# The lerobot virtualenv's python, which the lerobot backend's tests run LeRobot in.
LEROBOT_PYTHON = Path(os.environ.get("EVALFLEET_LEROBOT_PYTHON", ".venv-lerobot/bin/python")).absolute()
HEIGHT, WIDTH = 24, 32
CHUNK, ACTION_DIM = 8, 14


def reference_settings(**overrides: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "cameras": [{"name": n, "height": HEIGHT, "width": WIDTH} for n in CAMERAS],
        "state": [{"name": "qpos", "length": 14}],
        "action_dim": ACTION_DIM,
        "chunk_length": CHUNK,
    }
    settings.update(overrides)
    return settings


def make_checkpoint(root: Path, backend: str, epoch: str = "ep6", **overrides: Any) -> Path:
    folder = root / epoch
    folder.mkdir(parents=True, exist_ok=True)
    seal(folder, backend, reference_settings(**overrides))
    return folder


def images(value: int = 0) -> dict[str, np.ndarray]:
    return {n: np.full((HEIGHT, WIDTH, 3), value, dtype=np.uint8) for n in CAMERAS}


def state(value: float) -> dict[str, np.ndarray]:
    return {"qpos": np.full(14, value, dtype=np.float64)}


def episode(name: str = "0") -> policy_pb2.EpisodeMeta:
    return policy_pb2.EpisodeMeta(
        benchmark="robotwin", task="adjust_bottle", setting="clean", episode_id=name, instruction="adjust the bottle"
    )


def load_failure(run: subprocess.CompletedProcess[str]) -> str:
    """The one line a server that failed to load prints, after checking that it exited 1."""
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("inference-server: ")]
    return line


class ServerProcess(ServiceProcess):
    """A real `inference-server` process on a port chosen up front; `start` returns once health
    reports SERVING (`spawn` at once)."""

    def __init__(self, checkpoint_root: Path, epoch: str, *extra: str, port: int | None = None, log_path: Path) -> None:
        port = port or free_port()
        # This folder is importable in the server, so that tests can name plug-in backends from it.
        env = {"PYTHONPATH": os.pathsep.join(filter(None, (str(Path(__file__).parent), os.environ.get("PYTHONPATH"))))}
        super().__init__(policy_argv(epoch, checkpoint_root, *extra, port=port), log_path, env=env)
        self.address = f"127.0.0.1:{port}"

    def start(self, timeout_s: float = 60.0) -> ServerProcess:
        self.spawn()
        with PolicyClient(self.address) as client:
            try:
                client.wait_until_serving(timeout_s)
            except Exception as exc:
                self.stop()
                raise AssertionError(f"server did not become SERVING: {exc}\n{self.log()}") from exc
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self, token: str | None = None) -> PolicyClient:
        return PolicyClient(self.address, token=token)

    def stop(self, timeout: float = 10.0) -> None:
        super().stop(timeout)
