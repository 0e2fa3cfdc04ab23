"""The LIBERO benchmarks' workload: libero_spatial manifests with two 256x256 cameras, the
``seeded-random`` reference policy (random arm moves, which never solve a task, so every episode runs
all its steps) answering chunks of ``CHUNK``, and the wait for a submission to settle.

``scripts.bench.libero``, ``scripts.bench.step_overhead``, ``scripts.bench.video`` and
``scripts.bench.libero_profile`` run these same episodes, so their figures compare.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.libero.adapter import add_build_arguments, build_manifests
from evalfleet.scheduler_api.client import SchedulerClient
from inference_server.checkpoint import seal
from manifests.format import Manifest

CHUNK = 10
CAMERA_SIZE = 256
SEED = 0
EPOCH = "random"


def libero_manifests(max_steps: int) -> list[Manifest]:
    """libero_spatial tasks 0-1, 2 trials each, two CAMERA_SIZE cameras, ``max_steps`` policy steps."""
    parser = argparse.ArgumentParser()
    add_build_arguments(parser)
    argv = ["--suite", "libero_spatial", "--tasks", "0-1", "--trials", "2", "--jobs", "2"]
    argv += ["--camera-size", str(CAMERA_SIZE), "--max-steps", str(max_steps)]
    return build_manifests(parser.parse_args(argv))


def seeded_random_checkpoint(root: Path, cameras: tuple[str, ...], execute: int) -> Path:
    """The ``seeded-random`` policy under ``root/EPOCH``, consuming ``cameras`` and declaring ``execute``
    actions run per chunk."""
    folder = root / EPOCH
    folder.mkdir(parents=True)
    settings = {
        "cameras": [{"name": name, "height": CAMERA_SIZE, "width": CAMERA_SIZE} for name in cameras],
        "state": [{"name": "robot0_eef_pos", "length": 3}, {"name": "robot0_gripper_qpos", "length": 2}],
        "action_dim": 7,
        "chunk_length": CHUNK,
        "execute_steps": execute,  # the policy's deployment protocol, declared by its checkpoint
        "seed": SEED,
        "scale": 1.0,
    }
    seal(folder, "seeded-random", settings)
    return root


def wait_settled(client: SchedulerClient, submission_id: str, timeout: float) -> None:
    """Polls until every task of the submission has ended; raises if one failed or was cancelled, or
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        counts = client.status(submission_id).tasks
        if counts.total and counts.succeeded + counts.failed + counts.cancelled == counts.total:
            if counts.failed or counts.cancelled:
                raise RuntimeError(f"{submission_id}: {counts.failed} tasks failed, {counts.cancelled} cancelled")
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{submission_id}: {counts.succeeded}/{counts.total} tasks done after {timeout:.0f}s")
        time.sleep(0.2)
