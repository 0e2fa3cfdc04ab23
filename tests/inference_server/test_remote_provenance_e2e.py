"""Results served by a remote policy server are marked "remote, unsealed", end to end: scheduler →
renderer worker → evalfleet inference server (`remote` backend) → the real openpi server with the
test policy, every one a process, on the synthetic benchmark (the same path as LIBERO's, faster).

The remote checkpoint also declares its deployment protocol (`execute_steps`), which the worker
runs and every result records.
"""

from __future__ import annotations

import json
import math

import pytest
from openpi_helpers import OpenpiServer, handshake_sha256
from procs import cli, wait_until
from remote_checkpoints import make_remote_checkpoint

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.policy_api.client import PolicyClient
from evalfleet.processes import free_port
from evalfleet.v1 import scheduler_pb2 as pb
from manifests.format import write

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# openpi's LIBERO request keys, fed from the synthetic benchmark's one camera and two state entries.
SYNTHETIC_MAPPING = {
    "cameras": [{"name": "camera", "height": 8, "width": 8}],
    "state": [{"name": "progress", "length": 1}, {"name": "step", "length": 1}],
    "request": [
        {"key": "observation/image", "camera": "camera"},
        {"key": "observation/wrist_image", "camera": "camera"},
        {"key": "observation/state", "state": ["progress", "step"]},
        {"key": "prompt", "instruction": True},
    ],
}


def test_results_served_through_openpi_are_marked_remote_unsealed(scheduler, start_policy, start_worker, tmp_path):
    openpi = OpenpiServer(free_port(), tmp_path / "openpi.log").run()
    try:
        root = make_remote_checkpoint(
            tmp_path / "checkpoints", openpi.url, epoch="pi05-syn", chunk_length=4, execute_steps=2, **SYNTHETIC_MAPPING
        )
        policy = start_policy("pi05-syn", root=root)
        with PolicyClient(policy.address) as client:
            served = client.identity()
        assert served.identity.HasField("remote") and served.identity.remote.sealed is False
        assert served.remote_handshake_sha256 == handshake_sha256()

        manifest_path = write(build_synthetic(3, seed=21, mean_seconds=0.5), tmp_path)
        env = {"EVALFLEET_SCHEDULER": scheduler.address}
        submit = cli(
            "submit",
            "--route",
            "synthetic",
            "--batch-size",
            "3",
            "--policy-server",
            policy.address,
            "--submission-id",
            "remote-syn",
            "--manifest",
            str(manifest_path),
            env=env,
        )
        assert submit.returncode == 0, submit.stderr
        start_worker(scheduler.address, [policy.address], "--adapter-option", "synthetic.time_scale=0")
        client = scheduler.client()
        wait_until(lambda: client.status("remote-syn").tasks.succeeded == 1, 180, "the task ran through openpi")

        expected = pb.RemotePolicy(dialect="openpi", url=openpi.url, handshake_sha256=handshake_sha256(), sealed=False)
        summary = client.summary("remote-syn")
        assert summary.complete
        assert [(g.execute_steps, g.remote, g.episodes) for g in summary.provenance] == [(2, expected, 3)]
        (task,) = client.tasks(pb.TaskSelector(submission_id="remote-syn")).tasks
        for stored in client.task(task.task_id).episodes:
            assert stored.result.remote == expected and stored.result.execute_steps == 2
            assert json.loads(stored.result.info_json)["policy_steps"] == math.ceil(stored.result.steps / 2)

        human = cli("summary", "remote-syn", "--out", str(tmp_path / "RESULTS.json"), env=env)
        assert human.returncode == 0, human.stderr
        assert "REMOTE, UNSEALED" in human.stdout and "execute_steps: 2 actions per chunk" in human.stdout
        provenance = json.loads((tmp_path / "RESULTS.json").read_text())["provenance"]
        assert provenance["remote"]["unsealed"] is True and provenance["remote"]["mixed"] is False
        assert provenance["remote"]["servers"] == [
            {
                "dialect": "openpi",
                "url": openpi.url,
                "handshake_sha256": handshake_sha256(),
                "sealed": False,
                "episodes": 3,
            }
        ]
        (mark,) = provenance["marks"]
        assert mark.startswith("remote, unsealed: 3 of 3 episodes") and openpi.url in mark
        assert "answered prompt=" in openpi.log_path.read_text()  # the remote really answered
    finally:
        openpi.stop()
