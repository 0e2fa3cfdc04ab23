"""The copyable plug-in of docs/backends.md (examples/backends/linear_policy.py), used as a user would:
sealed with `inference-server checkpoint seal`, served by a real `inference-server`, asked for actions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evalfleet.local_fleet import policy_argv
from evalfleet.policy_api.client import PolicyClient
from evalfleet.processes import ServiceProcess, free_port
from evalfleet.v1 import policy_pb2

pytestmark = pytest.mark.timeout(180)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "backends"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(EXAMPLES), os.environ.get("PYTHONPATH"))))}
EPISODE = policy_pb2.EpisodeMeta(benchmark="libero", task="t", setting="s", episode_id="0", instruction="go")


def _inference_server(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inference_server.cli", *args], capture_output=True, text=True, env=ENV, timeout=120
    )


def _checkpoint(root: Path, weights: np.ndarray, bias: np.ndarray) -> Path:
    folder = root / "ep1"
    folder.mkdir(parents=True)
    np.savez(folder / "linear.npz", weights=weights, bias=bias)
    sealed = _inference_server(
        "checkpoint", "seal", str(folder), "--backend", "linear_policy:build", "--set", "chunk_length=4",
        "--set", "image_size=16",
    )  # fmt: skip
    assert sealed.returncode == 0, sealed.stderr
    return folder


def test_the_example_plug_in_serves_its_linear_policy_and_its_weights_are_sealed(tmp_path):
    rng = np.random.default_rng(0)
    weights, bias = rng.normal(size=(7, 8)).astype(np.float32), rng.normal(size=7).astype(np.float32)
    folder = _checkpoint(tmp_path, weights, bias)

    port = free_port()
    server = ServiceProcess(policy_argv("ep1", tmp_path, port=port), tmp_path / "server.log", env=ENV)
    server.spawn()
    try:
        with PolicyClient(f"127.0.0.1:{port}") as client:
            client.wait_until_serving(60)
            served = client.identity()
            assert served.identity.backend == "linear_policy:build" and served.identity.chunk_length == 4
            state = rng.normal(size=8)
            with client.open_session(served.digest, EPISODE) as session:
                chunk = session.act(
                    {"agentview": np.zeros((16, 16, 3), np.uint8)}, {"joints": state}, step=0, executed=0
                )
        expected = weights @ state.astype(np.float32) + bias
        np.testing.assert_allclose(chunk, np.repeat(expected[None], 4, axis=0), rtol=1e-5)
    finally:
        server.stop()

    # The weights are part of the identity: a changed file is refused before the port opens.
    np.savez(folder / "linear.npz", weights=weights * 2, bias=bias)
    refused = _inference_server("--epoch", "ep1", "--checkpoint-root", str(tmp_path), "--port", "0")
    assert refused.returncode == 2 and "linear.npz" in refused.stderr and "Traceback" not in refused.stderr
