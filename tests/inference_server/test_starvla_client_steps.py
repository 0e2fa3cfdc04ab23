"""StarVLA scored as StarVLA scores itself: evalfleet's `remote` path with docs/remote.md's StarVLA
recipes, and StarVLA's own LIBERO and RoboTwin clients (restated in `starvla_reference.py` from
the cited lines: the reference), against one double of StarVLA's server, on the same episode.

Every process is real: the double (its `hashed` model answers numbers drawn from the sha256 of
every byte it receives, so any difference in an image, the state or the prompt changes the
actions), an `inference-server` serving the recipe sealed as docs/remote.md prints it (only the
URL replaced), a PolicyClient session driving the episode as a worker does (one observation per
chunk, the whole chunk executed). The reference client connects to the same double and is driven
as StarVLA's evaluation loop drives it (one call per env step). Asserted: the env commands are
identical step by step, and the double received identical model inputs (each image's bytes,
shape and dtype, the state, the prompt, the unnorm key in effect).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from docs_recipes import recipe, robotwin_reply
from openpi_helpers import STARVLA_DOUBLE, OpenpiServer
from starvla_reference import LiberoModelClient, RobotwinModelClient, libero_policy_step, robotwin_eval

from evalfleet.processes import free_port
from evalfleet.v1 import policy_pb2
from inference_server.checkpoint import seal

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

INSTRUCTION = "put the bowl on the plate"
RNG = np.random.default_rng(27)


def double_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def serve(tmp_path: Path, start_server, settings: dict[str, Any], url: str, epoch: str):
    (tmp_path / "checkpoints" / epoch).mkdir(parents=True)
    seal(tmp_path / "checkpoints" / epoch, "remote", {**settings, "url": url})
    return start_server(tmp_path / "checkpoints", epoch=epoch)


def episode() -> policy_pb2.EpisodeMeta:
    return policy_pb2.EpisodeMeta(benchmark="x", task="t", setting="s", episode_id="0", instruction=INSTRUCTION)


@pytest.fixture
def double(tmp_path: Path):
    server = OpenpiServer(free_port(), tmp_path / "starvla.log", script=STARVLA_DOUBLE)
    yield server
    server.stop()


def test_libero_commands_and_model_inputs_are_starvla_clients(tmp_path: Path, double, start_server) -> None:
    settings = recipe("starvla_libero.yaml")
    chunk = settings["chunk_length"]
    record = tmp_path / "received.jsonl"
    double.run(args=["--embodiment", "libero", "--chunk", str(chunk), "--model", "hashed", "--record", str(record)])
    server = serve(tmp_path, start_server, settings, double.url, "starvla_libero")
    steps = 3 * chunk
    # What robosuite renders at 256 (upside down) at each env step, and the robot's state.
    raw = [
        {
            f"{name}_image": RNG.integers(0, 256, (256, 256, 3), dtype=np.uint8)
            for name in ("agentview", "robot0_eye_in_hand")
        }
        for _ in range(steps)
    ]
    state = {
        "robot0_eef_pos": np.zeros(3),
        "robot0_eef_quat": np.array([0.0, 0.0, 0.0, 1.0]),
        "robot0_gripper_qpos": np.zeros(2),
    }

    ours: list[np.ndarray] = []
    with server.client() as client, client.open_session(client.identity().digest, episode()) as session:
        for k, t in enumerate(range(0, steps, chunk)):
            # LIBERO's adapter rotates each frame 180 degrees (benchmarks/libero/sim.py:88).
            images = {
                name: np.ascontiguousarray(raw[t][f"{name}_image"][::-1, ::-1])
                for name in ("agentview", "robot0_eye_in_hand")
            }
            ours.extend(session.act(images, state, step=k, executed=chunk if k else 0))
    sent_by_us = double_records(record)

    reference = LiberoModelClient(double.url)
    try:
        theirs = [libero_policy_step(reference, raw[t], INSTRUCTION, t) for t in range(steps)]
    finally:
        reference.client.close()
    sent_by_them = double_records(record)[len(sent_by_us) :]

    assert sent_by_us[0]["lang"] == "warm up"
    assert sent_by_us[1:] == sent_by_them and len(sent_by_them) == 3
    assert all(image["shape"] == [224, 224, 3] for r in sent_by_them for image in r["images"])
    assert [r["state"] for r in sent_by_them] == [None] * 3 and {r["unnorm_key"] for r in sent_by_them} == {"franka"}
    assert all(command.dtype == np.float32 for command in theirs)
    np.testing.assert_array_equal(np.stack(ours), np.stack(theirs))
    assert set(np.stack(ours)[:, 6].tolist()) == {-1.0, 1.0}, "both gripper values occur"


@pytest.mark.parametrize("action_mode", ["abs", "delta", "rel"])
def test_robotwin_commands_and_model_inputs_are_starvla_clients(
    tmp_path: Path, double, start_server, action_mode: str
) -> None:
    settings = {**recipe("starvla_robotwin.yaml"), **robotwin_reply(action_mode)}
    chunk = settings["chunk_length"]
    record = tmp_path / "received.jsonl"
    double.run(
        args=["--embodiment", "robotwin", "--chunk", str(chunk), "--action-dim", "14", "--model", "hashed"]
        + ["--record", str(record)]
    )
    server = serve(tmp_path, start_server, settings, double.url, "starvla_robotwin")
    steps = 3 * chunk
    # What RoboTwin observes at each take_action: three 240 x 320 cameras and joint_action.vector.
    cameras = ("head_camera", "left_camera", "right_camera")
    raw = [
        {
            "observation": {c: {"rgb": RNG.integers(0, 256, (240, 320, 3), dtype=np.uint8)} for c in cameras},
            "joint_action": {"vector": RNG.uniform(-1.5, 1.5, 14)},
        }
        for _ in range(steps)
    ]

    ours: list[np.ndarray] = []
    with server.client() as client, client.open_session(client.identity().digest, episode()) as session:
        for k, t in enumerate(range(0, steps, chunk)):
            images = {c: raw[t]["observation"][c]["rgb"] for c in cameras}
            state = {"joint_action": raw[t]["joint_action"]["vector"]}
            ours.extend(session.act(images, state, step=k, executed=chunk if k else 0))
    sent_by_us = double_records(record)

    reference = RobotwinModelClient(double.url, unnorm_key=settings["unnorm_key"], action_mode=action_mode)
    try:
        reference.reset(
            task_description=""
        )  # reset_model at each episode's start (model2robotwin_interface.py:207-208)
        theirs = [robotwin_eval(reference, raw[t], INSTRUCTION, t) for t in range(steps)]
    finally:
        reference.client.close()
    sent_by_them = double_records(record)[len(sent_by_us) :]

    assert sent_by_us[1:] == sent_by_them and len(sent_by_them) == 3
    assert all(image["shape"] == [224, 224, 3] for r in sent_by_them for image in r["images"])
    # StarVLA's commands are float32 but for rel's (its float64 state added), which the rel recipe
    # declares (action_dtype: float64): the commands are StarVLA's, every bit and their dtype.
    assert all(command.dtype == (np.float64 if action_mode == "rel" else np.float32) for command in theirs)
    assert {command.dtype for command in ours} == {theirs[0].dtype}
    assert np.stack(ours).tobytes() == np.stack(theirs).tobytes()
