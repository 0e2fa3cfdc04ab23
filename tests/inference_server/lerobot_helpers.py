"""What the lerobot backend's tests share: LeRobot's own code run in .venv-lerobot, and the servers.

LeRobot lives in its own virtualenv (.venv-lerobot, `make lerobot-venv`); the tests run in the main
one. Everything LeRobot does happens in subprocesses of that virtualenv: building a tiny policy
(scripts/lerobot_tiny.py, which scripts/bench/inference.py uses too), the inference server itself,
and the direct calls the server's answers are compared with. Arrays cross between them as .npy files.

`make test` sets EVALFLEET_LEROBOT_PYTHON, so these tests fail rather than skip without it.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from inference_helpers import LEROBOT_PYTHON, ServerProcess
from procs import ServiceProcess, build_libero_manifests, policy_argv, submit_libero, wait_serving, wait_settled

from evalfleet.policy_api import tensors
from evalfleet.policy_api.client import PolicyClient
from evalfleet.processes import free_port
from evalfleet.v1 import policy_pb2, scheduler_pb2
from scripts.common.command import REPO

# Without EVALFLEET_LEROBOT_PYTHON (a bare `pytest` before `make lerobot-venv`) these tests skip;
# `make test` sets it, and then a missing virtualenv fails them (conftest's `lerobot_python`).
NEEDS_LEROBOT = pytest.mark.skipif(
    not LEROBOT_PYTHON.exists() and "EVALFLEET_LEROBOT_PYTHON" not in os.environ,
    reason="the lerobot virtualenv is not built (make lerobot-venv)",
)

# What makes the two sides compute the same bits on any machine, whatever else it runs. Torch: one
# thread each, and no library that picks its thread count by the load it sees (OpenMP's and MKL's
# dynamic adjustment): a chunked reduction on another thread count sums in another order, so the
# same checkpoint answers other low bits. The simulator's numpy: each side's numpy bundles its own
# OpenBLAS (0.3.23 in .venv, 0.3.29 in .venv-lerobot), which picks its kernels by the CPU; on an
# AVX-512 CPU the two take different ones and robosuite's controller's matrix products, so the
# simulator states, differ in the last bits with the very same actions. Both run Haswell's kernels on any CPU
# with AVX2, and those are the same in both (docs/reproducing.md).
PINNED_COMPUTE = {
    "OPENBLAS_CORETYPE": "Haswell",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_DYNAMIC": "FALSE",
    "MKL_DYNAMIC": "FALSE",
}

TINY = Path(__file__).resolve().parents[2] / "scripts" / "lerobot_tiny.py"
CAMERA = 64
LIBERO_STEPS = 6


def run_lerobot(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), *args], capture_output=True, text=True, timeout=240)


def backend_settings(python: Path, call: str) -> dict[str, Any]:
    """What `inference_server.backends.lerobot.<call>` returns, evaluated in the lerobot virtualenv."""
    code = f"import json; from inference_server.backends import lerobot; print(json.dumps(lerobot.{call}))"
    done = run_lerobot(python, "-c", code)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def build_tiny(python: Path, folder: Path, *args: str) -> Path:
    """scripts/lerobot_tiny.py `build` into `folder` (its options after the folder)."""
    done = run_lerobot(python, str(TINY), "build", str(folder), *args)
    assert done.returncode == 0, done.stderr
    return folder


def recorded_lerobot_eval(
    python: Path, overlay: Path, proof: str, arguments: list[str], work: Path
) -> list[dict[str, Any]]:
    """lerobot-eval's `main` with ``arguments``, run by ``proof`` (a scripts.proofs module that writes
    down each episode) in .venv-lerobot with the simulator ``overlay`` first on its path, its
    computation pinned; the episodes as the proof recorded them."""
    record = work / "lerobot-eval.json"
    argv = [str(python), "-m", f"scripts.proofs.{proof}", str(record), *arguments]
    env = {
        **os.environ,
        **PINNED_COMPUTE,
        "PYTHONPATH": os.pathsep.join([str(overlay), str(REPO)]),
        "MUJOCO_GL": "osmesa",
    }
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-4000:]
    episodes: list[dict[str, Any]] = json.loads(record.read_text())
    return episodes


def episode_results(output: Path) -> dict[int, tuple[bool, int, str]]:
    """Per episode index of a `scheduler run`'s output: success, steps and trace digest, as stored."""
    with sqlite3.connect(f"file:{output / 'scheduler.sqlite'}?mode=ro", uri=True) as store:
        rows = store.execute("SELECT episode_index, success, steps, trace_digest FROM episode_results").fetchall()
    return {int(index): (bool(success), int(steps), str(digest)) for index, success, steps, digest in rows}


class LerobotMade:
    """What LeRobot's subprocesses make, made once per pytest process and shared by every test file:
    each tiny policy (one `scripts/lerobot_tiny.py build` per set of options, about 12 s) and each
    backend call's settings (one lerobot import, about 8 s). Tests copy a policy before changing it."""

    def __init__(self, python: Path, root: Path) -> None:
        self.python = python
        self._root = root
        self._policies: dict[tuple[str, ...], Path] = {}
        self._settings: dict[str, dict[str, Any]] = {}

    def policy(self, *args: str) -> Path:
        """The shared tiny policy built with `args` (read it, or `copy` it to change it)."""
        if args not in self._policies:
            self._policies[args] = build_tiny(self.python, self._root / f"policy-{len(self._policies)}", *args)
        return self._policies[args]

    def copy(self, folder: Path, *args: str) -> Path:
        """A copy of the tiny policy built with `args`, at `folder`, for a test to seal or change."""
        shutil.copytree(self.policy(*args), folder)
        return folder

    def settings(self, call: str) -> dict[str, Any]:
        """`backend_settings(call)`, evaluated once."""
        if call not in self._settings:
            self._settings[call] = backend_settings(self.python, call)
        return dict(self._settings[call])


def server(python: Path, root: Path, tmp_path: Path, *extra: str, epoch: str = "act") -> ServerProcess:
    """A real inference server started from the lerobot virtualenv."""
    process = ServerProcess(root, epoch, *extra, log_path=tmp_path / f"server-{epoch}.log")
    process.argv[0] = str(python)
    return process


def run_server(python: Path, root: Path, *extra: str, epoch: str = "act") -> subprocess.CompletedProcess[str]:
    argv = ["-m", "inference_server.cli", "--epoch", epoch, "--checkpoint-root", str(root), *extra]
    return run_lerobot(python, *argv)


def observation(rng: np.random.Generator) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Upright camera images and the robot state LIBERO's worker sends (unit quaternion, x y z w)."""
    images = {
        name: rng.integers(0, 256, (CAMERA, CAMERA, 3), dtype=np.uint8) for name in ("agentview", "robot0_eye_in_hand")
    }
    quat = rng.normal(size=4)
    state = {
        "robot0_eef_pos": rng.normal(size=3),
        "robot0_eef_quat": quat / np.linalg.norm(quat),
        "robot0_gripper_qpos": rng.normal(size=2) * 0.04,
    }
    return images, state


def direct_chunks(
    python: Path,
    folder: Path,
    work: Path,
    observations: list[Any],
    tasks: list[str],
    benchmark: str = "libero",
) -> np.ndarray:
    """What the LeRobot policy with its processors answers for each observation, one call each."""
    inputs = work / "inputs"
    inputs.mkdir()
    for i, (images, state) in enumerate(observations):
        for name, array in {**images, **state}.items():
            np.save(inputs / f"{i}.{name}.npy", array, allow_pickle=False)
    (inputs / "tasks.json").write_text(json.dumps(tasks))
    out = work / "direct.npy"
    done = run_lerobot(python, str(TINY), "direct", str(folder), str(inputs), str(out), "--benchmark", benchmark)
    assert done.returncode == 0, done.stderr
    return np.load(out, allow_pickle=False)


def first_steps_together(
    client: PolicyClient, digest: str, benchmark: str, observations: list[Any], tasks: list[str]
) -> list[policy_pb2.SessionResponse]:
    """One session per observation, each sending its first step once all are open."""
    barrier = threading.Barrier(len(observations))

    def step(index: int) -> policy_pb2.SessionResponse:
        meta = policy_pb2.EpisodeMeta(benchmark=benchmark, episode_id=str(index), instruction=tasks[index])
        session = client.open_session(digest, meta)
        images, state = observations[index]
        request = tensors.observation_request(0, 0, images, state)
        barrier.wait()
        response = session._exchange(request)
        session.close()
        return response

    with ThreadPoolExecutor(len(observations)) as pool:
        return list(pool.map(step, range(len(observations))))


@dataclass(frozen=True)
class LiberoRun:
    """What a real LIBERO evaluation of a sealed LeRobot checkpoint left behind."""

    summary: scheduler_pb2.GetSummaryResponse
    tasks: list[scheduler_pb2.TaskInfo]
    steps_served: int

    def assert_every_episode_ran_once(self, episodes: int = 2) -> None:
        """Every task completed, every planned episode has a result, no attempt was retried, and
        each episode asked the policy."""
        summary = self.summary
        assert summary.complete and summary.tasks.succeeded == summary.tasks.total == episodes, summary
        assert (summary.episodes_planned, summary.episodes_completed) == (episodes, episodes)
        assert all(t.attempts == 1 for t in self.tasks), "no infrastructure retries"
        assert self.steps_served >= episodes


def serve_libero_episodes(
    python: Path,
    checkpoints: Path,
    epoch: str,
    scheduler: Any,
    start_worker: Any,
    work: Path,
    *,
    workers: int = 1,
    episodes: int = 2,
    serve_timeout: float = 180,
) -> LiberoRun:
    """Scheduler -> renderer workers (main virtualenv, real LIBERO) -> the sealed checkpoint `epoch`
    under `checkpoints`, served from the lerobot virtualenv: `episodes` libero_object trials of task 0
    at a short step limit, as a user would run them."""
    manifests = work / "manifests"
    build_libero_manifests(manifests, "0", episodes, CAMERA, LIBERO_STEPS)
    argv = policy_argv(epoch, checkpoints, port=free_port())
    policy = ServiceProcess([str(python), *argv[1:]], work / f"policy-{epoch}.log")
    submission = f"{epoch}-e2e"
    with policy:
        policy.start()
        wait_serving(policy.address, timeout=serve_timeout)
        submit_libero(scheduler.address, policy.address, manifests, submission)
        for index in range(workers):
            start_worker(scheduler.address, [policy.address], "--routes", "libero", worker_id=f"{epoch}-w{index}")
        client = scheduler.client()
        wait_settled(client, submission, 480)
        with PolicyClient(policy.address) as policy_client:
            load = policy_client.identity().load
    return LiberoRun(client.summary(submission), list(client.tasks().tasks), load.steps_served)
