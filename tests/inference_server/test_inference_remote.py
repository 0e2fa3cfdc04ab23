"""The `remote` backend in front of the real openpi policy server (PyPI `openpi-server`).

Every process is real: openpi's websocket server serving a small numpy policy
(`openpi_policy.py`), an `inference-server` with the `remote` backend forwarding to it, and a
PolicyClient driving sessions over gRPC. The policy's actions are a function of the request
openpi's LIBERO client sends, so each answer is checked against what the policy computes from
the same observation, mapped as openpi's example maps it.
"""

from __future__ import annotations

import json
import math
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from inference_helpers import ServerProcess, load_failure
from openpi_client import image_tools
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from openpi_helpers import REMOTE_CHUNK, OpenpiServer, handshake_sha256
from openpi_policy import expected_actions
from remote_checkpoints import ACTION_DIM, make_remote_checkpoint

from evalfleet.local_fleet import policy_argv
from evalfleet.policy_api import identity
from evalfleet.policy_api.errors import (
    BackendFailed,
    NotServing,
    RemoteRestarted,
    RemoteUnavailable,
    ServerRestarted,
)
from evalfleet.processes import free_port
from evalfleet.v1 import policy_pb2, scheduler_pb2
from inference_server.backends.remote.mapping import robosuite_axisangle
from renderer_worker.episode import _policy_reason

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CHUNK = 5  # like openpi's LIBERO example: 10 actions answered, 5 executed
HEIGHT, WIDTH = 48, 64  # not square, so the padding of resize_with_pad shows in the answers
INSTRUCTION = "put the bowl on the plate"


class Step:
    """One observation with known content: random images, an end effector rotated by `angle`
    about z (so its axis-angle is [0, 0, angle]), and what the policy answers to it."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.images = {
            name: rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
            for name in ("agentview", "robot0_eye_in_hand")
        }
        angle = 0.1 + 0.2 * (seed % 7)
        position, gripper = rng.uniform(-0.5, 0.5, 3), rng.uniform(0, 0.04, 2)
        self.state = {
            "robot0_eef_pos": position.tolist(),
            "robot0_eef_quat": [0.0, 0.0, math.sin(angle / 2), math.cos(angle / 2)],
            "robot0_gripper_qpos": gripper.tolist(),
        }
        request = {
            "observation/image": image_tools.resize_with_pad(self.images["agentview"], 224, 224),
            "observation/wrist_image": image_tools.resize_with_pad(self.images["robot0_eye_in_hand"], 224, 224),
            "observation/state": np.concatenate([position, [0.0, 0.0, angle], gripper]),
            "prompt": INSTRUCTION,
        }
        self.expected = expected_actions(request, REMOTE_CHUNK, ACTION_DIM)[:CHUNK].astype(np.float32)


def episode(name: str = "0") -> policy_pb2.EpisodeMeta:
    return policy_pb2.EpisodeMeta(
        benchmark="libero", task="libero_object/0", setting="clean", episode_id=name, instruction=INSTRUCTION
    )


@pytest.fixture
def openpi(tmp_path: Path):
    server = OpenpiServer(free_port(), tmp_path / "openpi.log")
    yield server
    server.stop()


@pytest.fixture
def fleet(tmp_path: Path, openpi: OpenpiServer, start_server) -> tuple[OpenpiServer, ServerProcess]:
    """openpi serving the test policy, and an inference server forwarding to it over 2 connections."""
    openpi.run()
    make_remote_checkpoint(tmp_path / "ckpt", openpi.url)
    return openpi, start_server(tmp_path / "ckpt", "--batch-timeout-ms", "50", epoch="pi05")


def test_dry_run_describes_the_remote_without_reaching_it(tmp_path: Path) -> None:
    url = f"ws://127.0.0.1:{free_port()}"  # nothing listens there
    make_remote_checkpoint(tmp_path, url)
    run = subprocess.run(
        [*policy_argv("pi05", tmp_path), "--dry-run"], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stderr
    described = json.loads(run.stdout)["identity"]
    assert described["backend"] == "remote"
    assert described["remote"] == {
        "dialect": "openpi",
        "url": url,
        "handshake_sha256": "",
        "declared_sha256": {},
        "sealed": False,
    }
    # Other backends' records leave the field out, so their digests are what they were.
    assert "remote" not in identity.as_dict(policy_pb2.IdentityRecord(epoch="ep6", backend="noop"))


def test_answers_are_what_the_policy_computes_from_the_same_observation(fleet) -> None:
    openpi, server = fleet
    with server.client() as client:
        reply = client.identity()
        assert reply.identity.remote.dialect == "openpi" and reply.identity.remote.url == openpi.url
        assert reply.identity.remote.sealed is False
        assert reply.remote_handshake_sha256 == handshake_sha256()
        assert reply.digest == identity.digest(reply.identity)
        with client.open_session(reply.digest, episode()) as session:
            for step in range(4):
                observed = Step(seed=step)
                chunk = session.act(observed.images, observed.state, step=step, executed=0 if step == 0 else CHUNK)
                assert chunk.shape == (CHUNK, ACTION_DIM)
                np.testing.assert_allclose(chunk, observed.expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("action_dtype", ["float64", "float32"])
def test_actions_are_what_openpis_own_client_receives_bit_for_bit_in_float64(
    tmp_path: Path, openpi: OpenpiServer, start_server, action_dtype: str
) -> None:
    """openpi's policies answer float64 (their statistics unnormalize in float64) and openpi's
    msgpack codec carries the dtype, so openpi's LIBERO client executes float64 commands. Declared
    `action_dtype: float64`, evalfleet's chunk is what openpi-client's own WebsocketClientPolicy
    receives from the same server for the same request (the state built as openpi's main.py builds
    it, robosuite's axis-angle), every bit; the default float32 rounds it."""
    openpi.run()
    request = [
        {"key": "observation/image", "camera": "agentview", "resize_with_pad": [224, 224]},
        {"key": "observation/wrist_image", "camera": "robot0_eye_in_hand", "resize_with_pad": [224, 224]},
        {
            "key": "observation/state",
            "state": [
                "robot0_eef_pos",
                {"name": "robot0_eef_quat", "as": "axisangle_robosuite"},
                "robot0_gripper_qpos",
            ],
        },
        {"key": "prompt", "instruction": True},
    ]
    make_remote_checkpoint(tmp_path / "ckpt", openpi.url, action_dtype=action_dtype, request=request)
    server = start_server(tmp_path / "ckpt", epoch="pi05")
    steps = [Step(seed) for seed in (3, 4)]
    with server.client() as client:
        assert client.identity().identity.action_dtype == ("" if action_dtype == "float32" else action_dtype)
        with client.open_session(client.identity().digest, episode()) as session:
            ours = [session.act(s.images, s.state, step=k, executed=CHUNK if k else 0) for k, s in enumerate(steps)]
    theirs_client = WebsocketClientPolicy(openpi.url)
    theirs = []
    for s in steps:
        state = {name: np.asarray(value) for name, value in s.state.items()}
        reply = theirs_client.infer(
            {
                "observation/image": image_tools.resize_with_pad(s.images["agentview"], 224, 224),
                "observation/wrist_image": image_tools.resize_with_pad(s.images["robot0_eye_in_hand"], 224, 224),
                "observation/state": np.concatenate(
                    (
                        state["robot0_eef_pos"],
                        robosuite_axisangle(state["robot0_eef_quat"]),
                        state["robot0_gripper_qpos"],
                    )
                ),
                "prompt": INSTRUCTION,
            }
        )
        theirs.append(reply["actions"])
    assert all(actions.dtype == np.float64 for actions in theirs), "openpi-server answers float64 as float64"
    for mine, actions in zip(ours, theirs, strict=True):
        expected = actions[:CHUNK].astype(action_dtype)
        assert mine.dtype == np.dtype(action_dtype) and mine.tobytes() == expected.tobytes()
    assert (ours[0].tobytes() == theirs[0][:CHUNK].tobytes()) is (action_dtype == "float64")


def test_four_concurrent_sessions_share_batches_over_the_pool(fleet) -> None:
    openpi, server = fleet
    sessions, steps = 4, 5
    barrier = threading.Barrier(sessions)
    answers: dict[int, list[np.ndarray]] = {}
    with server.client() as client:
        digest = client.identity().digest

        def run(index: int) -> None:
            with client.open_session(digest, episode(str(index))) as session:
                barrier.wait()
                answers[index] = [
                    session.act(
                        Step(100 * index + s).images, Step(100 * index + s).state, step=s, executed=CHUNK * (s > 0)
                    )
                    for s in range(steps)
                ]

        threads = [threading.Thread(target=run, args=(i,)) for i in range(sessions)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        load = client.identity().load
    for index in range(sessions):
        for s, chunk in enumerate(answers[index]):
            np.testing.assert_allclose(chunk, Step(100 * index + s).expected, rtol=0, atol=1e-4)
    assert load.steps_served == sessions * steps
    assert load.batches_served < load.steps_served, "the sessions' steps never shared a batch"
    assert openpi.connections_opened() == 2, "the pool of 2 connections was reopened or not used whole"


def test_a_killed_remote_fails_the_step_typed_and_is_used_again_once_back(fleet) -> None:
    openpi, server = fleet
    with server.client() as client:
        digest = client.identity().digest
        session = client.open_session(digest, episode())
        session.act(Step(0).images, Step(0).state, step=0, executed=0)
        openpi.kill()
        with pytest.raises(RemoteUnavailable) as down:
            session.act(Step(1).images, Step(1).state, step=1, executed=CHUNK)
        assert openpi.url in down.value.message
        assert isinstance(down.value, NotServing)
        assert _policy_reason(down.value) == scheduler_pb2.FailureReason.FAILURE_REASON_POLICY_UNAVAILABLE
        assert client.identity().digest == digest  # the inference server kept serving

        openpi.run()
        chunk = session.act(Step(1).images, Step(1).state, step=1, executed=CHUNK)  # the same step, again
        np.testing.assert_allclose(chunk, Step(1).expected, rtol=0, atol=1e-4)
        with client.open_session(digest, episode("1")) as fresh:
            np.testing.assert_allclose(
                fresh.act(Step(2).images, Step(2).state, step=0, executed=0), Step(2).expected, rtol=0, atol=1e-4
            )
        session.close()


def test_a_remote_back_with_another_handshake_is_a_restart(fleet) -> None:
    openpi, server = fleet
    with server.client() as client:
        digest = client.identity().digest
        with client.open_session(digest, episode()) as session:
            session.act(Step(0).images, Step(0).state, step=0, executed=0)
            openpi.kill()
            openpi.run(version="2")
            with pytest.raises(RemoteRestarted) as restarted:
                session.act(Step(1).images, Step(1).state, step=1, executed=CHUNK)
            assert handshake_sha256("2") in restarted.value.message
            assert handshake_sha256("1") in restarted.value.message
            assert isinstance(restarted.value, ServerRestarted)
            assert _policy_reason(restarted.value) == scheduler_pb2.FailureReason.FAILURE_REASON_POLICY_RESTARTED

            openpi.kill()
            openpi.run(version="1")
            chunk = session.act(Step(1).images, Step(1).state, step=1, executed=CHUNK)
            np.testing.assert_allclose(chunk, Step(1).expected, rtol=0, atol=1e-4)


def test_a_remote_that_does_not_answer_in_time_is_unavailable(tmp_path: Path, openpi, start_server) -> None:
    openpi.run()
    make_remote_checkpoint(tmp_path, openpi.url, reply_timeout_s=0.5)
    server = start_server(tmp_path, epoch="pi05")
    with server.client() as client, client.open_session(client.identity().digest, episode()) as session:
        openpi.kill()
        openpi.run(mode="hang")
        with pytest.raises(RemoteUnavailable) as slow:
            session.act(Step(0).images, Step(0).state, step=0, executed=0)
        assert openpi.url in slow.value.message and "no reply within 0.5 s" in slow.value.message


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("wrong-shape", f"actions have shape [{REMOTE_CHUNK}, {ACTION_DIM - 1}]"),
        ("raise", "ValueError: test policy refuses the observation"),
        ("nan", "actions are not finite"),
    ],
)
def test_a_misbehaving_remote_is_a_typed_backend_failure_naming_it(fleet, mode: str, said: str) -> None:
    openpi, server = fleet
    with server.client() as client:
        digest = client.identity().digest
        with client.open_session(digest, episode()) as session:
            openpi.kill()
            openpi.run(mode=mode)
            with pytest.raises(BackendFailed) as failed:
                session.act(Step(0).images, Step(0).state, step=0, executed=0)
            assert openpi.url in failed.value.message and said in failed.value.message
            assert _policy_reason(failed.value) == scheduler_pb2.FailureReason.FAILURE_REASON_POLICY_ERROR

            openpi.kill()
            openpi.run()
            chunk = session.act(Step(0).images, Step(0).state, step=0, executed=0)  # the step was not taken
            np.testing.assert_allclose(chunk, Step(0).expected, rtol=0, atol=1e-4)


def test_a_remote_that_answers_wrongly_at_load_stops_the_server_with_one_line(tmp_path: Path, openpi) -> None:
    openpi.run(mode="wrong-shape")
    make_remote_checkpoint(tmp_path, openpi.url)
    run = subprocess.run(policy_argv("pi05", tmp_path), capture_output=True, text=True, timeout=120, check=False)
    line = load_failure(run)
    assert "warm-up step failed" in line and openpi.url in line
    assert f"actions have shape [{REMOTE_CHUNK}, {ACTION_DIM - 1}]" in line


def test_a_declared_handshake_that_differs_is_refused_at_load(tmp_path: Path, openpi) -> None:
    openpi.run()
    make_remote_checkpoint(tmp_path, openpi.url, handshake_sha256=handshake_sha256("2"))
    run = subprocess.run(policy_argv("pi05", tmp_path), capture_output=True, text=True, timeout=120, check=False)
    line = load_failure(run)
    assert f"answered handshake sha256 {handshake_sha256('1')}, expected {handshake_sha256('2')}" in line
