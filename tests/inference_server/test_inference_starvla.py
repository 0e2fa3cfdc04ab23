"""The `remote` backend's starvla dialect in front of a double of StarVLA's policy server.

StarVLA cannot be installed here, so its server is a double (`starvla_double.py`) that restates
StarVLA's transport, idle timeout, routing, handshake and input checks. Every process is real: the
double, an `inference-server` with the `remote` backend forwarding to it, and a PolicyClient
driving sessions over gRPC. The double's actions are a function of each example StarVLA's LIBERO
client would send, so each answer is checked against what it computes from the same observation;
its log says how many examples each request carried, so batching across sessions is observed at
the remote, not inferred.
"""

from __future__ import annotations

import math
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import websockets.exceptions
import websockets.sync.client
from inference_helpers import ServerProcess, load_failure
from openpi_client import image_tools
from openpi_helpers import REMOTE_CHUNK, STARVLA_DOUBLE, OpenpiServer
from remote_checkpoints import ACTION_DIM, make_remote_checkpoint
from starvla_double import expected_actions

from evalfleet.local_fleet import policy_argv
from evalfleet.policy_api.errors import BackendFailed, RemoteUnavailable
from evalfleet.processes import free_port, wait_until
from evalfleet.v1 import policy_pb2, scheduler_pb2
from inference_server.backends.remote import mapping
from renderer_worker.episode import _policy_reason

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CHUNK = 5
HEIGHT, WIDTH = 48, 64  # not square, so the padding of resize_with_pad shows in the answers
INSTRUCTION = "put the bowl on the plate"
UNNORM_KEY = 0  # the settings' key, franka, is the first of the double's; its answers depend on it


class Step:
    """One observation with known content and what the double answers to it."""

    def __init__(self, seed: int, instruction: str = INSTRUCTION) -> None:
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
        example = {
            "image": [image_tools.resize_with_pad(self.images[name], 224, 224) for name in self.images],
            "lang": instruction,
            "state": np.concatenate([position, [0.0, 0.0, angle], gripper])[None, :],
        }
        self.expected = expected_actions(example, UNNORM_KEY, REMOTE_CHUNK, ACTION_DIM)[:CHUNK].astype(np.float32)


def episode(name: str = "0", instruction: str = INSTRUCTION) -> policy_pb2.EpisodeMeta:
    return policy_pb2.EpisodeMeta(
        benchmark="libero", task="libero_goal/0", setting="clean", episode_id=name, instruction=instruction
    )


def batch_sizes(double: OpenpiServer, examples: int) -> list[int]:
    """The number of examples of each request the double received, in order, once its log holds
    `examples` in all (the harness's reader thread writes the log, a moment after the double)."""

    def logged() -> list[int] | None:
        text = double.log_path.read_text()
        sizes = [int(n) for n in re.findall(r"^infer examples=(\d+)$", text, re.MULTILINE)]
        return sizes if sum(sizes) >= examples else None

    return wait_until(logged, 30, f"the double logged {examples} examples")


@pytest.fixture
def double(tmp_path: Path):
    server = OpenpiServer(free_port(), tmp_path / "starvla.log", script=STARVLA_DOUBLE)
    yield server
    server.stop()


@pytest.fixture
def fleet(tmp_path: Path, double: OpenpiServer, start_server) -> tuple[OpenpiServer, ServerProcess]:
    """The double, and an inference server forwarding to it over 2 connections, 8 examples a message."""
    double.run()
    make_remote_checkpoint(tmp_path / "ckpt", double.url, dialect="starvla")
    return double, start_server(tmp_path / "ckpt", "--batch-timeout-ms", "50", epoch="pi05")


def test_answers_are_what_the_policy_computes_from_the_same_examples(fleet) -> None:
    double, server = fleet
    with server.client() as client:
        reply = client.identity()
        assert reply.identity.remote.dialect == "starvla" and reply.identity.remote.url == double.url
        assert reply.identity.remote.sealed is False
        with client.open_session(reply.digest, episode()) as session:
            for step in range(3):
                observed = Step(seed=step)
                chunk = session.act(observed.images, observed.state, step=step, executed=0 if step == 0 else CHUNK)
                assert chunk.shape == (CHUNK, ACTION_DIM)
                np.testing.assert_allclose(chunk, observed.expected, rtol=0, atol=1e-4)
    # The settings' predict_kwargs reach StarVLA's predict_action with every request.
    batch_sizes(double, 1 + 3)  # the warm-up, then each step
    sent = "predict kwargs [('do_sample', False), ('num_ddim_steps', 10), ('use_ddim', True)]"
    assert double.log_path.read_text().count(sent) == 1 + 3, double.log_tail()


def test_concurrent_sessions_steps_travel_in_one_examples_batch(fleet) -> None:
    double, server = fleet
    sessions, steps = 4, 4
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
    for index in range(sessions):
        for s, chunk in enumerate(answers[index]):
            np.testing.assert_allclose(chunk, Step(100 * index + s).expected, rtol=0, atol=1e-4)
    sizes = batch_sizes(double, 1 + sessions * steps)
    assert sum(sizes) == 1 + sessions * steps, sizes  # the warm-up, then every step once
    assert max(sizes) > 1, f"no request carried several sessions' steps: {sizes}"


def test_error_data_is_a_typed_failure_quoting_the_remote_and_the_connection_is_kept(fleet) -> None:
    double, server = fleet
    opened = wait_until(double.connections_opened, 30, "the double logged the pool's connections")
    with server.client() as client:
        digest = client.identity().digest
        with client.open_session(digest, episode("0", instruction="fail: on purpose")) as failing:
            with pytest.raises(BackendFailed) as failed:
                failing.act(Step(0).images, Step(0).state, step=0, executed=0)
        message = failed.value.message
        assert double.url in message and "test policy refuses the examples" in message, message
        assert _policy_reason(failed.value) == scheduler_pb2.FailureReason.FAILURE_REASON_POLICY_ERROR
        with client.open_session(digest, episode("1")) as session:
            for step in range(3):  # over both pooled connections, the one that carried the error included
                chunk = session.act(Step(step).images, Step(step).state, step=step, executed=CHUNK * (step > 0))
                np.testing.assert_allclose(chunk, Step(step).expected, rtol=0, atol=1e-4)
    batch_sizes(double, 1 + 1 + 3)  # the warm-up, the refused step, the three after it: all logged
    assert double.connections_opened() == opened == 2, "a connection was reopened after error data"


def test_a_killed_remote_fails_the_step_typed_and_is_used_again_once_back(fleet) -> None:
    double, server = fleet
    with server.client() as client:
        digest = client.identity().digest
        with client.open_session(digest, episode()) as session:
            session.act(Step(0).images, Step(0).state, step=0, executed=0)
            double.kill()
            with pytest.raises(RemoteUnavailable) as down:
                session.act(Step(1).images, Step(1).state, step=1, executed=CHUNK)
            assert double.url in down.value.message
            assert _policy_reason(down.value) == scheduler_pb2.FailureReason.FAILURE_REASON_POLICY_UNAVAILABLE

            double.run()
            chunk = session.act(Step(1).images, Step(1).state, step=1, executed=CHUNK)  # the same step, again
            np.testing.assert_allclose(chunk, Step(1).expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("error", "the server answered 'error': test policy refuses the examples"),
        ("wrong-batch", "the reply's actions have shape [2, 10, 7] for 1 examples"),
        ("wrong-shape", f"actions have shape [{REMOTE_CHUNK}, {ACTION_DIM - 1}]"),
        ("nan", "actions are not finite"),
        ("wrong-id", "the reply answers request_id 'not-"),
    ],
)
def test_a_misbehaving_remote_is_a_typed_backend_failure_naming_it(fleet, mode: str, said: str) -> None:
    double, server = fleet
    with server.client() as client:
        digest = client.identity().digest
        with client.open_session(digest, episode()) as session:
            double.kill()
            double.run(mode=mode)
            with pytest.raises(BackendFailed) as failed:
                session.act(Step(0).images, Step(0).state, step=0, executed=0)
            assert double.url in failed.value.message and said in failed.value.message, failed.value.message

            double.kill()
            double.run()
            chunk = session.act(Step(0).images, Step(0).state, step=0, executed=0)  # the step was not taken
            np.testing.assert_allclose(chunk, Step(0).expected, rtol=0, atol=1e-4)


def test_a_remote_that_does_not_answer_in_time_is_unavailable(tmp_path: Path, double, start_server) -> None:
    double.run()
    make_remote_checkpoint(tmp_path, double.url, dialect="starvla", reply_timeout_s=0.5)
    server = start_server(tmp_path, epoch="pi05")
    with server.client() as client, client.open_session(client.identity().digest, episode()) as session:
        double.kill()
        double.run(mode="hang")
        with pytest.raises(RemoteUnavailable) as slow:
            session.act(Step(0).images, Step(0).state, step=0, executed=0)
        assert double.url in slow.value.message and "no reply within 0.5 s" in slow.value.message


@pytest.mark.parametrize(
    ("embodiment", "unnorm_key", "said"),
    [
        ("libero", "libero_goal", "settings.unnorm_key 'libero_goal' is not one of the server's available_unnorm_keys"),
        ("multi", "bridge_orig", "settings.unnorm_key 'bridge_orig' is not one of the server's available_unnorm_keys"),
        ("multi", "", "the server has several available_unnorm_keys"),
    ],
)
def test_an_unnorm_key_the_server_lacks_is_refused_at_load(
    tmp_path: Path, double, embodiment: str, unnorm_key: str, said: str
) -> None:
    double.run(args=["--embodiment", embodiment])
    make_remote_checkpoint(tmp_path, double.url, dialect="starvla", unnorm_key=unnorm_key)
    run = subprocess.run(policy_argv("pi05", tmp_path), capture_output=True, text=True, timeout=120, check=False)
    line = load_failure(run)
    keys = "['franka']" if embodiment == "libero" else "['oxe_bridge', 'oxe_rt1']"
    assert double.url in line and said in line and keys in line, line


def test_a_libero_server_needs_no_key_its_single_key_is_the_default(tmp_path: Path, double, start_server) -> None:
    """LIBERO checkpoints expose one key, `franka`, as the default (policy_wrapper.py:99-101): no
    `unnorm_key` setting is needed, and the server answers with that key's statistics."""
    double.run()
    make_remote_checkpoint(tmp_path, double.url, dialect="starvla", unnorm_key="")
    server = start_server(tmp_path, epoch="pi05")
    with server.client() as client, client.open_session(client.identity().digest, episode()) as session:
        chunk = session.act(Step(0).images, Step(0).state, step=0, executed=0)
    np.testing.assert_allclose(chunk, Step(0).expected, rtol=0, atol=1e-4)


CAMERAS = ("agentview", "robot0_eye_in_hand")


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"key": "image", "cameras": []}, "settings.request[0].cameras must be a non-empty list"),
        ({"key": "image", "cameras": ["agentview", 3]}, "settings.request[0].cameras must be a non-empty list"),
        ({"key": "image", "cameras": ["agentview", "agentview"]}, "settings.request[0].cameras names a camera twice"),
        ({"key": "image", "camera": "agentview", "cameras": ["agentview"]}, "needs exactly one of camera, cameras"),
        ({"key": "image", "cameras": ["agentview"], "resize_with_pad": [224]}, "settings.request[0].resize_with_pad"),
    ],
)
def test_a_bad_cameras_entry_is_refused_by_name(entry: dict[str, Any], named: str) -> None:
    with pytest.raises(mapping.MappingError, match=re.escape(named)):
        mapping.parse_request([entry], CAMERAS, {})


def test_an_idle_server_closes_its_connections_with_1001_and_exits_and_the_step_is_unavailable(
    tmp_path: Path, double, start_server
) -> None:
    """StarVLA's server stops itself once no message came for `--idle_timeout` seconds (checked
    every 5 s; websocket_policy_server.py:50-63): the double does it in a second."""
    double.run(args=["--idle-timeout", "1"])
    make_remote_checkpoint(tmp_path, double.url, dialect="starvla")
    server = start_server(tmp_path, epoch="pi05")
    with server.client() as client, client.open_session(client.identity().digest, episode()) as session:
        session.act(Step(0).images, Step(0).state, step=0, executed=0)
        with websockets.sync.client.connect(double.url, compression=None, max_size=None) as watcher:
            watcher.recv(timeout=10)  # the metadata frame; a connection alone is no activity
            with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
                watcher.recv(timeout=30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001, closed.value
        assert double.proc is not None and double.proc.wait(timeout=30) == 0, double.log_tail()  # exits by itself
        assert "Idle timeout (1s) reached, shutting down server." in double.log_path.read_text()
        with pytest.raises(RemoteUnavailable) as down:
            session.act(Step(1).images, Step(1).state, step=1, executed=CHUNK)
        assert double.url in down.value.message


@pytest.mark.parametrize(
    ("override", "said"),
    [
        # A CHW image fails StarVLA's to_pil_preserve (tools/image_tools.py:100-103).
        (
            {
                "request": [
                    {"key": "image", "cameras": list(CAMERAS), "channels_first": True},
                    {"key": "lang", "instruction": True},
                ]
            },
            "Channel count must be 1/3/4, got 64",
        ),
        # A (D,) state fails the GR00T head, which takes [B, 1, D].
        (
            {
                "request": [
                    {"key": "image", "cameras": list(CAMERAS)},
                    {"key": "lang", "instruction": True},
                    {"key": "state", "state": ["robot0_eef_pos"]},
                ]
            },
            "state must be (1, state_dim) per example, not (3,)",
        ),
    ],
)
def test_examples_starvla_refuses_fail_the_warm_up_quoting_it(tmp_path: Path, double, override, said: str) -> None:
    double.run()
    make_remote_checkpoint(tmp_path, double.url, dialect="starvla", **override)
    run = subprocess.run(policy_argv("pi05", tmp_path), capture_output=True, text=True, timeout=120, check=False)
    line = load_failure(run)
    assert "warm-up step failed" in line and double.url in line and said in line, line


LIBERO_ACTION_KEYS = [f"action.{k}" for k in ("x", "y", "z", "roll", "pitch", "yaw", "gripper")]


@pytest.mark.parametrize(
    ("embodiment", "override", "said"),
    [
        # StarVLA's clients run the whole chunk (model2libero_interface.py:131, model2robotwin_interface.py:129).
        ("libero", {"chunk_length_differs": None}, "settings.chunk_length 5 is not the server's action_chunk_size 10"),
        ("libero", {"chunk_length": 10}, "settings.chunk_length_differs says why chunk_length differs"),
        (
            "libero",
            {"action_dim": 6},
            f"the server declares 7 action_keys {LIBERO_ACTION_KEYS} for settings.action_dim 6",
        ),
        (
            "libero",
            {"expected_action_keys": ["action.left_joints"]},
            f"expected_action_keys ['action.left_joints'] are not the server's action_keys {LIBERO_ACTION_KEYS}",
        ),
        (
            "multi",
            {"unnorm_key": "oxe_bridge", "expected_state_keys": ["state.x"]},
            "settings.expected_state_keys is set but the server declares no state_keys",
        ),
    ],
)
def test_settings_the_handshake_contradicts_are_refused_at_load(
    tmp_path: Path, double, embodiment: str, override: dict[str, Any], said: str
) -> None:
    double.run(args=["--embodiment", embodiment])
    make_remote_checkpoint(tmp_path, double.url, dialect="starvla", **override)
    run = subprocess.run(policy_argv("pi05", tmp_path), capture_output=True, text=True, timeout=120, check=False)
    line = load_failure(run)
    assert double.url in line and said in line, line


def test_the_handshake_keys_the_settings_expect_are_accepted(tmp_path: Path, double, start_server) -> None:
    double.run()
    state_keys = [f"state.{k}" for k in ("x", "y", "z", "roll", "pitch", "yaw", "pad", "gripper")]
    make_remote_checkpoint(
        tmp_path,
        double.url,
        dialect="starvla",
        expected_action_keys=LIBERO_ACTION_KEYS,
        expected_state_keys=state_keys,
        chunk_length=REMOTE_CHUNK,
        chunk_length_differs=None,
    )
    server = start_server(tmp_path, epoch="pi05")
    with server.client() as client, client.open_session(client.identity().digest, episode()) as session:
        chunk = session.act(Step(0).images, Step(0).state, step=0, executed=0)
    assert chunk.shape == (REMOTE_CHUNK, ACTION_DIM)
