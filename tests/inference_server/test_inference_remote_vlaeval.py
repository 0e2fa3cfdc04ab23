"""The `remote` backend's vla-eval dialect in front of vla-eval's real model server (PyPI `vla-eval`).

Every process is real: vla-eval's `PredictModelServer` serving a small numpy policy
(`vlaeval_policy.py`) through vla-eval's own `serve`, an `inference-server` with the `remote`
backend forwarding to it, and a PolicyClient driving sessions over gRPC. The policy's actions are a
function of the observation and of the remote episode's own step counter, so each answer shows
both that the observation arrived as vla-eval's LIBERO keys and that the session's steps reached
its own remote episode.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from inference_helpers import ServerProcess
from remote_checkpoints import ACTION_DIM, make_remote_checkpoint
from vla_eval.connection import Connection
from vla_eval.runners.sync_runner import SyncEpisodeRunner
from vlaeval_helpers import REMOTE_CHUNK, VlaEvalServer, handshake_sha256
from vlaeval_policy import REFUSE, expected_actions

from evalfleet.policy_api.errors import BackendFailed, RemoteRestarted, RemoteUnavailable
from evalfleet.processes import free_port
from evalfleet.v1 import policy_pb2, scheduler_pb2
from renderer_worker.episode import _policy_reason

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CHUNK = 5
HEIGHT, WIDTH = 48, 64
INSTRUCTION = "put the bowl on the plate"


class Step:
    """One observation with known content, and what the policy answers to it as its episode's
    `remote_step`-th observation."""

    def __init__(self, seed: int, remote_step: int = 0, refuse: bool = False) -> None:
        rng = np.random.default_rng(seed)
        self.images = {
            name: rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
            for name in ("agentview", "robot0_eye_in_hand")
        }
        angle = 0.1 + 0.2 * (seed % 7)
        position, gripper = rng.uniform(-0.5, 0.5, 3), rng.uniform(0, 0.04, 2)
        if refuse:
            position[0] = REFUSE
        self.state = {
            "robot0_eef_pos": position.tolist(),
            "robot0_eef_quat": [0.0, 0.0, math.sin(angle / 2), math.cos(angle / 2)],
            "robot0_gripper_qpos": gripper.tolist(),
        }
        observation = {
            "images": {"agentview": self.images["agentview"], "wrist": self.images["robot0_eye_in_hand"]},
            "states": np.concatenate([position, [0.0, 0.0, angle], gripper]).astype(np.float32),
            "task_description": INSTRUCTION,
        }
        self.observation = observation
        self.expected = expected_actions(observation, remote_step, REMOTE_CHUNK, ACTION_DIM)[:CHUNK]

    def act(self, session: Any, step: int) -> np.ndarray:
        return session.act(self.images, self.state, step=step, executed=CHUNK * (step > 0))


def episode(name: str = "0") -> policy_pb2.EpisodeMeta:
    return policy_pb2.EpisodeMeta(
        benchmark="libero", task="libero_object/0", setting="clean", episode_id=name, instruction=INSTRUCTION
    )


def assert_answer(chunk: np.ndarray, step: Step) -> None:
    assert chunk.shape == (CHUNK, ACTION_DIM)
    np.testing.assert_allclose(chunk, step.expected, rtol=0, atol=1e-4)


def ended(remote: VlaEvalServer, *episodes: tuple[str, int]) -> None:
    """Waits until the remote has logged EPISODE_END for each (episode id, steps answered), sent by
    evalfleet (vla-eval's own clean-up when a connection drops passes no result), in any order."""
    pending = {f"episode_end episode={episode_id} result={{'steps': {steps}}}" for episode_id, steps in episodes}

    def seen(line: str) -> bool:
        pending.discard(line.strip())
        return not pending

    remote.wait_for_line(seen, 30)


@pytest.fixture
def remote(tmp_path: Path):
    server = VlaEvalServer(free_port(), tmp_path / "vlaeval.log", max_batch_size=4)
    yield server
    server.stop()


@pytest.fixture
def fleet(tmp_path: Path, remote: VlaEvalServer, start_server) -> tuple[VlaEvalServer, ServerProcess]:
    """vla-eval serving the test policy (max_batch_size 4), and an inference server forwarding to it."""
    remote.run()
    make_remote_checkpoint(tmp_path / "ckpt", remote.url, dialect="vla-eval")
    return remote, start_server(tmp_path / "ckpt", "--batch-timeout-ms", "50", epoch="vlaeval")


def test_answers_are_what_the_policy_computes_in_the_sessions_own_remote_episode(fleet) -> None:
    remote, server = fleet
    with server.client() as client:
        reply = client.identity()
        assert reply.identity.remote.dialect == "vla-eval" and reply.identity.remote.url == remote.url
        assert reply.identity.remote.sealed is False
        assert reply.remote_handshake_sha256 == handshake_sha256()
        with client.open_session(reply.digest, episode("first")) as session:
            ended(remote, ("warm-up", 1))  # load's own episode, ended before the server reported SERVING
            for step in range(3):
                assert_answer(Step(step, remote_step=step).act(session, step), Step(step, remote_step=step))
    ended(remote, ("first", 3))
    assert remote.log().count(f"episode_start episode=first name={INSTRUCTION!r}") == 1


class OneStepBenchmark:
    """A double of a vla-eval benchmark, just enough for vla-eval's own SyncEpisodeRunner to run
    one episode of one step: it hands out `observation` and is done after the first action."""

    def __init__(self, observation: dict[str, Any]) -> None:
        self.observation = observation

    async def start_episode(self, task: dict[str, Any], recorder: Any = None) -> None:
        pass

    async def get_observation(self) -> dict[str, Any]:
        return self.observation

    async def apply_action(self, action: dict[str, Any]) -> None:
        pass

    async def is_done(self) -> bool:
        return True

    async def get_time(self) -> float:
        return 0.0

    async def get_result(self) -> dict[str, Any]:
        return {"success": False}


def test_episode_start_carries_suite_task_id_and_episode_idx_as_vla_evals_own_client_does(fleet) -> None:
    """vla-eval's SyncEpisodeRunner, over vla-eval's own Connection, starts an episode of LIBERO's
    task as vla-eval builds it (`LIBEROBenchmark.get_tasks`, with the orchestrator's episode_idx);
    evalfleet's session of the same episode sends the same values under the same keys, and its own
    names of the episode beside them."""
    remote, server = fleet
    meta = policy_pb2.EpisodeMeta(
        benchmark="libero",
        task="pick_up_the_black_bowl",
        setting="libero_spatial",
        episode_id="libero_spatial-03-007",
        instruction=INSTRUCTION,
        suite="libero_spatial",
        task_index=3,
        episode_index=7,
    )
    step = Step(5)
    with server.client() as client, client.open_session(client.identity().digest, meta) as session:
        step.act(session, 0)
    ended(remote, ("libero_spatial-03-007", 1))

    async def vla_evals_own() -> None:
        connection = Connection(remote.url, timeout=30)
        await connection.connect()
        try:
            # vla_eval/benchmarks/libero/benchmark.py:162-175 and orchestrator.py:430-434.
            task = {
                "name": INSTRUCTION,
                "suite": "libero_spatial",
                "task_id": 3,
                "task_obj": object(),
                "episode_idx": 7,
            }
            await SyncEpisodeRunner().run_episode(OneStepBenchmark(step.observation), task, connection, max_steps=1)
        finally:
            await connection.close()

    anyio.run(vla_evals_own)
    *_, ours, theirs = remote.episode_tasks()
    assert theirs == {"name": INSTRUCTION, "suite": "libero_spatial", "task_id": 3, "episode_idx": 7}
    assert {key: ours[key] for key in theirs} == theirs
    assert {key: ours[key] for key in set(ours) - set(theirs)} == {
        "benchmark": "libero",
        "task": "pick_up_the_black_bowl",
        "setting": "libero_spatial",
        "episode_id": "libero_spatial-03-007",
    }


def test_an_episode_without_a_numbering_sends_none_of_its_keys(fleet) -> None:
    remote, server = fleet
    with server.client() as client, client.open_session(client.identity().digest, episode("plain")) as session:
        Step(1).act(session, 0)
    ended(remote, ("plain", 1))
    assert not {"suite", "task_id", "episode_idx"} & set(remote.episode_tasks()[-1])


def test_four_concurrent_sessions_are_batched_by_the_remote(fleet) -> None:
    remote, server = fleet
    sessions, steps = 4, 4
    barrier = threading.Barrier(sessions)
    answers: dict[int, list[np.ndarray]] = {}
    with server.client() as client:
        digest = client.identity().digest

        def run(index: int) -> None:
            with client.open_session(digest, episode(f"s{index}")) as session:
                barrier.wait()
                answers[index] = [Step(100 * index + s, remote_step=s).act(session, s) for s in range(steps)]

        threads = [threading.Thread(target=run, args=(i,)) for i in range(sessions)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    for index in range(sessions):
        assert len(answers[index]) == steps
        for s, chunk in enumerate(answers[index]):
            assert_answer(chunk, Step(100 * index + s, remote_step=s))
    ended(remote, *((f"s{index}", steps) for index in range(sessions)))
    assert max(remote.batch_sizes()) > 1, f"the remote never batched: {remote.batch_sizes()}"
    assert remote.connections_opened() == 1 + sessions  # the one pinned at load (and warm-up), one per session


def test_an_error_message_is_a_typed_failure_and_the_session_goes_on(fleet) -> None:
    remote, server = fleet
    with server.client() as client, client.open_session(client.identity().digest, episode()) as session:
        assert_answer(Step(0).act(session, 0), Step(0))
        with pytest.raises(BackendFailed) as failed:
            Step(1, refuse=True).act(session, 1)
        assert remote.url in failed.value.message
        assert "ERROR: observation_failed: ValueError: test policy refuses the observation" in failed.value.message
        assert _policy_reason(failed.value) == scheduler_pb2.FailureReason.FAILURE_REASON_POLICY_ERROR
        # The connection and its remote episode stayed: the refused observation was not counted.
        assert_answer(Step(1, remote_step=1).act(session, 1), Step(1, remote_step=1))
    assert remote.connections_opened() == 2


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("wrong-shape", f"actions have shape [{REMOTE_CHUNK}, {ACTION_DIM - 1}]"),
        ("raise", "ValueError: test policy refuses the observation"),
    ],
)
def test_a_misbehaving_remote_is_a_typed_backend_failure_naming_it(fleet, mode: str, said: str) -> None:
    remote, server = fleet
    with server.client() as client:
        digest = client.identity().digest
        remote.kill()
        remote.run(mode=mode)
        with client.open_session(digest, episode()) as session, pytest.raises(BackendFailed) as failed:
            Step(0).act(session, 0)
        assert remote.url in failed.value.message and said in failed.value.message


def test_a_killed_remote_is_unavailable_and_new_sessions_work_once_it_is_back(fleet) -> None:
    remote, server = fleet
    with server.client() as client:
        digest = client.identity().digest
        session = client.open_session(digest, episode("cut"))
        assert_answer(Step(0).act(session, 0), Step(0))
        remote.kill()
        with pytest.raises(RemoteUnavailable) as down:
            Step(1).act(session, 1)
        assert remote.url in down.value.message
        assert _policy_reason(down.value) == scheduler_pb2.FailureReason.FAILURE_REASON_POLICY_UNAVAILABLE

        remote.run()
        # The remote's episode state went with the connection: this session cannot go on.
        with pytest.raises(RemoteUnavailable) as lost:
            Step(1).act(session, 1)
        assert "retry the episode in a new session" in lost.value.message
        session.close()
        with client.open_session(digest, episode("fresh")) as fresh:
            assert_answer(Step(2).act(fresh, 0), Step(2))
        ended(remote, ("fresh", 1))


def test_a_remote_back_with_another_hello_is_a_restart(fleet) -> None:
    remote, server = fleet
    with server.client() as client:
        digest = client.identity().digest
        remote.kill()
        remote.run(version="2")
        with client.open_session(digest, episode()) as session, pytest.raises(RemoteRestarted) as restarted:
            Step(0).act(session, 0)
        assert handshake_sha256("2") in restarted.value.message and handshake_sha256("1") in restarted.value.message
        assert _policy_reason(restarted.value) == scheduler_pb2.FailureReason.FAILURE_REASON_POLICY_RESTARTED


def test_a_remote_that_does_not_answer_in_time_is_unavailable(tmp_path: Path, remote, start_server) -> None:
    remote.run()
    make_remote_checkpoint(tmp_path, remote.url, dialect="vla-eval", reply_timeout_s=0.5)
    server = start_server(tmp_path, epoch="vlaeval")
    with server.client() as client, client.open_session(client.identity().digest, episode()) as session:
        remote.kill()
        remote.run(mode="hang")
        with pytest.raises(RemoteUnavailable) as slow:
            Step(0).act(session, 0)
        assert remote.url in slow.value.message and "no reply within 0.5 s" in slow.value.message


def test_connections_cap_the_concurrent_sessions(tmp_path: Path, remote, start_server) -> None:
    remote.run()
    make_remote_checkpoint(tmp_path, remote.url, dialect="vla-eval", connections=1)
    server = start_server(tmp_path, epoch="vlaeval")
    with server.client() as client:
        digest = client.identity().digest
        first, second = client.open_session(digest, episode("a")), client.open_session(digest, episode("b"))
        assert_answer(Step(0).act(first, 0), Step(0))
        with pytest.raises(RemoteUnavailable) as full:
            Step(1).act(second, 0)
        assert "all 1 connections (settings.connections)" in full.value.message
        first.close()
        ended(remote, ("a", 1))
        assert_answer(Step(1).act(second, 0), Step(1))
        second.close()


def test_a_remote_with_a_chunk_size_answers_one_action_a_step_from_its_own_buffer(tmp_path, start_server) -> None:
    remote = VlaEvalServer(free_port(), tmp_path / "vlaeval.log", chunk_size=3).run()
    try:
        make_remote_checkpoint(tmp_path, remote.url, dialect="vla-eval", chunk_length=1)
        server = start_server(tmp_path, epoch="vlaeval")
        with server.client() as client, client.open_session(client.identity().digest, episode()) as session:
            for step in range(4):
                chunk = session.act(Step(step).images, Step(step).state, step=step, executed=int(step > 0))
                # Steps 1 and 2 come from the chunk the remote computed at step 0 and kept for the episode.
                first = 3 * (step // 3)
                np.testing.assert_allclose(
                    chunk, Step(first, remote_step=first).expected[step % 3 : step % 3 + 1], rtol=0, atol=1e-4
                )
        assert remote.batch_sizes() == [1, 1, 1]  # the warm-up's step, then steps 0 and 3
    finally:
        remote.stop()
