"""Closed loop through the real transports: a harness's own LIBERO client and evalfleet, each
against the same policy server whose actions are a hash of the request it received, send the same
requests step for step and score the same success per episode.

- vla-eval: `vla-eval run` (its real CLI, a subprocess) against a vla-eval model server built on
  vla-eval's own `PredictModelServer` (`vlaeval_hash_policy.py`, chunked server-side as its
  ready-made servers are), then evalfleet's real scheduler, inference server (`remote` backend,
  vla-eval dialect, docs/remote.md's recipe) and renderer worker on the `--protocol openpi`
  manifest against a fresh one.
- openpi: openpi's `examples/libero/main.py` restated (`openpi_libero_client.py`, with
  openpi-client's image tools and client) against the real openpi-server
  (`openpi_hash_policy.py`, float64 actions), then evalfleet's openpi dialect on the same manifest.

Each runs twice: on evalfleet's own stack (MuJoCo 2.3.7, robosuite 1.4.0), and on the stack the
harness itself ran (vla-eval's MuJoCo 3.2.3 + robosuite 1.4.0, openpi's MuJoCo 3.2.3 + robosuite
1.4.1; the overlays `make stacks` builds): there the harness's process runs on the overlay, the
manifests are built on it and evalfleet's worker is started with `--stack`.

Hashed actions never solve a task; one more test per harness has the server replay the scripted
oracle's commands for one trial (`scripts/proofs/solved.py`), so that both clients score a success.

A request's digest covers every byte of it, and the actions are drawn from the digest, so one
differing bit in any observation (an image, the state, the prompt) moves every step after it: equal
request sequences mean both sides ran the same trials, bit for bit, through their transports.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import request_digest
from libero_guard import LIBERO_MISSING, REASON
from procs import cli, require_built, wait_settled

from evalfleet.processes import ServiceProcess, free_port
from inference_server.checkpoint import seal
from manifests import format as manifest_format
from manifests.overlays import python_path, stacks_dir
from scripts.proofs.solved import OracleEnd, oracle_replay

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

pytestmark = [pytest.mark.proof, pytest.mark.slow, pytest.mark.libero, pytest.mark.timeout(900)]

HERE = Path(__file__).parent
SUITE = "libero_object"
TASK = 0
TRIALS = 2  # trial 1 follows trial 0's reset in the harnesses' stream
MAX_STEPS = 8
CAMERA = 256  # vla-eval's LIBERO renders at 256 whatever it is told (benchmark.py:45)
# vla-eval's ready-made servers keep a chunk and answer one action a step (pi0.py: 10); 5 here,
# so that 8 steps infer twice.
VLAEVAL_CHUNK_SIZE = 5
STATE_ENTRIES = [
    {"name": "robot0_eef_pos", "length": 3},
    {"name": "robot0_eef_quat", "length": 4},
    {"name": "robot0_gripper_qpos", "length": 2},
]
# What vla-eval's LIBERO benchmark adds to every observation when asked `send_state`
# (benchmark.py:281-292), from the robot's controller, which evalfleet has no source for; only
# vla-eval's X-VLA server reads it (model_servers/xvla.py:219). The hash policy consumes only the
# keys of its observation spec, as every other vla-eval server does.
VLAEVAL_ONLY = {"controller_states"}


# The stacks the harnesses ran (their presets' records); None: evalfleet's own environment's.
OWN_STACK = "mujoco-2.3.7_robosuite-1.4.0"
VLAEVAL_STACK = "mujoco-3.2.3_robosuite-1.4.0"
OPENPI_STACK = "mujoco-3.2.3_robosuite-1.4.1"


def on_stack(stack: str | None) -> dict[str, str]:
    """The environment of a process on ``stack`` (its overlay first on the path), rendering on the CPU."""
    if stack is None:
        return {**os.environ, "MUJOCO_GL": "osmesa"}
    require_built(stacks_dir() / stack, "make stacks")
    return {**os.environ, "MUJOCO_GL": "osmesa", "PYTHONPATH": python_path(stack, os.environ)}


@pytest.fixture(scope="module")
def manifests_on(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str | None], Path]:
    """openpi's trials (seed 7 once per task, trials in order, 10 wait steps, 256 pixels): the
    stream vla-eval's LIBERO benchmark runs unsharded too; built on the stack given, once each."""
    built: dict[str | None, Path] = {}

    def build(stack: str | None) -> Path:
        if stack not in built:
            out = tmp_path_factory.mktemp("manifests")
            run = cli(
                "manifest", "build", "libero", "--protocol", "openpi", "--suite", SUITE, "--tasks", str(TASK),
                "--trials", str(TRIALS), "--max-steps", str(MAX_STEPS), "--out", str(out), "--jobs", "1",
                env=on_stack(stack), timeout=300,
            )  # fmt: skip
            assert run.returncode == 0, run.stderr
            # Built, as the harness then runs, on the stack named.
            versions = json.loads(next(out.glob("*.json")).read_text())["versions"]
            assert f"mujoco-{versions['mujoco']}_robosuite-{versions['robosuite']}" == (stack or OWN_STACK)
            built[stack] = out
        return built[stack]

    return build


@pytest.fixture(scope="module")
def solved_manifest(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, manifest_format.Manifest]:
    """The folder and manifest of libero_object 0's trial 0 at the openpi preset's step limit, which
    the scripted oracle solves (``scripts/proofs/solved.py``), on evalfleet's stack."""
    out = tmp_path_factory.mktemp("solved-manifest")
    run = cli(
        "manifest", "build", "libero", "--protocol", "openpi", "--suite", SUITE, "--tasks", str(TASK),
        "--trials", "1", "--out", str(out), "--jobs", "1", env=on_stack(None), timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    [manifest] = [manifest_format.read(path) for path in out.glob("*.json")]
    return out, manifest


def solved_commands(
    manifest: manifest_format.Manifest, dtype: type[np.floating[Any]]
) -> tuple[list[list[float]], OracleEnd]:
    """The oracle's commands for the manifest's one trial, rounded to ``dtype`` as it ran them, and
    how its own run ended (solved, necessarily)."""
    replay = oracle_replay(manifest, dtype)
    end = replay.ends[(SUITE, TASK, 0)]
    assert end.success, end
    return [command.tolist() for command in replay.commands[(SUITE, TASK, 0)]], end


def hash_server(script: str, log: Path, record: Path, *args: str) -> ServiceProcess:
    port = free_port()
    argv = [sys.executable, str(HERE / script), "--port", str(port), "--record", str(record), *args]
    server = ServiceProcess(
        argv, log, env={"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    )
    server.start(timeout=60)
    return server


def run_evalfleet(
    scheduler: Any,
    start_policy: Any,
    start_worker: Any,
    root: Path,
    epoch: str,
    manifests: Path,
    stack: str | None,
    episodes: int = TRIALS,
) -> dict[str, tuple[int, bool, int]]:
    """The manifests through evalfleet's real services, one episode at a time (one worker on
    ``stack``, one slot, in manifest order); each episode's (trial, success, steps) by its
    manifest episode id."""
    policy = start_policy(epoch, root=root)
    run = cli(
        "submit", "--server", scheduler.address, "--route", "libero", "--batch-size", "1", "--policy-server",
        policy.address, "--submission-id", "closed-loop", "--max-attempts", "1",
        "--manifest", *(str(p) for p in sorted(manifests.glob("*.json"))),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    on = ("--stack", stack) if stack else ()
    start_worker(scheduler.address, [policy.address], "--routes", "libero", *on, worker_id="cl0")
    wait_settled(scheduler.client(), "closed-loop", 600)
    summary = scheduler.client().summary("closed-loop")
    assert summary.complete and summary.episodes_completed == episodes, summary
    conn = sqlite3.connect(f"file:{scheduler.db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT manifest_hash, episode_index, success, steps FROM episode_results").fetchall()
    finally:
        conn.close()
    results = {}
    for manifest_hash, index, success, steps in rows:
        entry = json.loads((manifests / f"{manifest_hash}.json").read_text())["episodes"][index]
        results[entry["episode_id"]] = (entry["trial"], bool(success), steps)
    return results


# -- vla-eval ------------------------------------------------------------------------------------


def vlaeval_episodes(record: Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    """Each episode a vla-eval server received, by vla-eval's numbering (suite, task_id,
    episode_idx): its EPISODE_START task, its observations in order, its EPISODE_END result. A
    connection carries its episodes one after another (vla-eval's own client keeps one for the
    run), so an observation belongs to its connection's latest EPISODE_START."""
    episodes: dict[tuple[str, int, int], dict[str, Any]] = {}
    current: dict[str, dict[str, Any]] = {}
    for event in request_digest.read(record):
        if event["event"] == "start":
            task = event["task"]
            episode = {"task": task, "observations": [], "result": None}
            current[event["session"]] = episode
            if task.get("episode_id") != "warm-up":  # evalfleet's load-time episode of zeros
                episodes[(task["suite"], task["task_id"], task["episode_idx"])] = episode
        elif event["event"] == "observation":
            current[event["session"]]["observations"].append(event)
        else:
            current[event["session"]]["result"] = event["result"]
    return episodes


def assert_same_observations(harness: dict[str, Any], mine: dict[str, Any], where: str) -> None:
    """Every observation of one episode the same, leaf for leaf and step for step, on what both
    clients send (vla-eval's own also carries ``VLAEVAL_ONLY``)."""
    for step, (a, b) in enumerate(zip(harness["observations"], mine["observations"], strict=True)):
        assert set(a["leaves"]) - set(b["leaves"]) == VLAEVAL_ONLY and set(b["leaves"]) <= set(a["leaves"])
        differing = sorted(leaf for leaf in b["leaves"] if a["leaves"][leaf] != b["leaves"][leaf])
        assert not differing, f"{where} step {step}: {differing} differ"
        assert a["step"] == b["step"] == step


def assert_same_requests(theirs: list[dict[str, Any]], ours: list[dict[str, Any]]) -> None:
    """openpi requests the same, in order, every leaf of each."""
    for index, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        differing = sorted(
            leaf for leaf in a["leaves"].keys() | b["leaves"].keys() if a["leaves"].get(leaf) != b["leaves"].get(leaf)
        )
        assert not differing, f"request {index}: {differing} differ"


def vlaeval_config(path: Path, url: str, output: Path, episodes: int = TRIALS, max_steps: int = MAX_STEPS) -> Path:
    """vla-eval's eval config for the manifests' trials: LIBERO's first task of the suite,
    ``episodes`` episodes, seed 7, the step limit, CPU rendering."""
    config = {
        "server": {"url": url, "timeout": 60},
        "output_dir": str(output),
        "render": "cpu",
        "benchmarks": [
            {
                "benchmark": "vla_eval.benchmarks.libero.benchmark:LIBEROBenchmark",
                "subname": SUITE,
                "episodes_per_task": episodes,
                "max_tasks": TASK + 1,
                "max_steps": max_steps,
                "params": {"suite": SUITE, "seed": 7},
            }
        ],
    }
    path.write_text(json.dumps(config))  # YAML's superset: vla-eval's loader reads it
    return path


def vlaeval_settings(url: str) -> dict[str, Any]:
    """docs/remote.md's vla-eval recipe: one action a step (the server chunks), float64 actions,
    the antipodal float32 axis-angle vla-eval's LIBERO benchmark sends by default, its gripper
    step."""
    return {
        "url": url,
        "dialect": "vla-eval",
        "connections": 2,
        "reply_timeout_s": 60,
        "load_timeout_s": 60,
        "cameras": [{"name": n, "height": CAMERA, "width": CAMERA} for n in ("agentview", "robot0_eye_in_hand")],
        "state": STATE_ENTRIES,
        "action_dim": 7,
        "chunk_length": 1,
        "action_dtype": "float64",
        "request": [
            {"key": ["images", "agentview"], "camera": "agentview"},
            {"key": ["images", "wrist"], "camera": "robot0_eye_in_hand"},
            {
                "key": "states",
                "state": [
                    "robot0_eef_pos",
                    {"name": "robot0_eef_quat", "as": "axisangle_vlaeval"},
                    "robot0_gripper_qpos",
                ],
            },
            {"key": "task_description", "instruction": True},
        ],
        "reply": [{"op": "binarize", "dims": [6], "if_less_than": 0, "then": -1, "else": 1}],
    }


@pytest.mark.parametrize("stack", [None, VLAEVAL_STACK], ids=["evalfleet-stack", "vla-eval-stack"])
def test_vla_eval_run_and_evalfleet_send_the_same_requests_step_for_step(
    stack: str | None,
    manifests_on: Callable[[str | None], Path],
    scheduler: Any,
    tmp_path: Path,
    start_policy: Any,
    start_worker: Any,
) -> None:
    environment, manifests = on_stack(stack), manifests_on(stack)
    chunking = ("--chunk", "10", "--chunk-size", str(VLAEVAL_CHUNK_SIZE))
    theirs_record, ours_record = tmp_path / "vla-eval-run.jsonl", tmp_path / "evalfleet.jsonl"

    with hash_server("vlaeval_hash_policy.py", tmp_path / "vlaeval-theirs.log", theirs_record, *chunking) as server:
        config = vlaeval_config(tmp_path / "eval.yaml", f"ws://{server.address}", tmp_path / "results")
        run = subprocess.run(
            [str(Path(sys.executable).parent / "vla-eval"), "run", "--config", str(config), "--no-save"],
            capture_output=True, text=True, timeout=600, env=environment,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
    theirs = vlaeval_episodes(theirs_record)

    with hash_server("vlaeval_hash_policy.py", tmp_path / "vlaeval-ours.log", ours_record, *chunking) as server:
        root = tmp_path / "checkpoints"
        (root / "vlaeval").mkdir(parents=True)
        seal(root / "vlaeval", "remote", vlaeval_settings(f"ws://{server.address}"))
        results = run_evalfleet(scheduler, start_policy, start_worker, root, "vlaeval", manifests, stack)
    ours = vlaeval_episodes(ours_record)

    expected = {(SUITE, TASK, trial) for trial in range(TRIALS)}
    assert set(theirs) == expected and set(ours) == expected, (sorted(theirs), sorted(ours))
    for key in sorted(expected):
        mine, harness = ours[key], theirs[key]
        # EPISODE_START: vla-eval's four fields, the same; evalfleet adds its own names of the episode.
        assert {k: mine["task"][k] for k in harness["task"]} == harness["task"], key
        assert set(mine["task"]) - set(harness["task"]) == {"benchmark", "task", "setting", "episode_id"}
        assert len(harness["observations"]) == len(mine["observations"]) == MAX_STEPS, key
        assert_same_observations(harness, mine, f"episode {key}")
        # The same success: vla-eval's own EPISODE_END metrics, evalfleet's stored result.
        _, success, steps = results[mine["task"]["episode_id"]]
        assert harness["result"]["metrics"]["success"] is success, key
        assert harness["result"]["steps"] == steps == MAX_STEPS, key


@pytest.mark.timeout(900)
def test_a_solved_episode_is_a_success_for_vla_eval_run_and_evalfleet_alike(
    solved_manifest: tuple[Path, manifest_format.Manifest],
    scheduler: Any,
    tmp_path: Path,
    start_policy: Any,
    start_worker: Any,
) -> None:
    """libero_object 0's trial 0 at openpi's step limit, against a server that answers the
    scripted oracle's commands for that episode by step (``--replay``; rounded to float32 before
    the oracle ran them, as vla-eval's server casts its answers): both clients send the same
    requests up to the step the oracle solved the trial at, and both score it a success there."""
    out, manifest = solved_manifest
    commands, end = solved_commands(manifest, np.float32)
    replayed = tmp_path / "replay.json"
    replayed.write_text(json.dumps({f"{SUITE}/{TASK}/0": commands}))
    served = ("--chunk", "10", "--chunk-size", str(VLAEVAL_CHUNK_SIZE), "--replay", str(replayed))
    theirs_record, ours_record = tmp_path / "vla-eval-run.jsonl", tmp_path / "evalfleet.jsonl"

    with hash_server("vlaeval_hash_policy.py", tmp_path / "vlaeval-theirs.log", theirs_record, *served) as server:
        limit = int(manifest.data["protocol"]["max_steps"])
        config = vlaeval_config(tmp_path / "eval.yaml", f"ws://{server.address}", tmp_path / "results", 1, limit)
        run = subprocess.run(
            [str(Path(sys.executable).parent / "vla-eval"), "run", "--config", str(config), "--no-save"],
            capture_output=True, text=True, timeout=600, env=on_stack(None),
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
    with hash_server("vlaeval_hash_policy.py", tmp_path / "vlaeval-ours.log", ours_record, *served) as server:
        root = tmp_path / "checkpoints"
        (root / "vlaeval").mkdir(parents=True)
        seal(root / "vlaeval", "remote", vlaeval_settings(f"ws://{server.address}"))
        results = run_evalfleet(scheduler, start_policy, start_worker, root, "vlaeval", out, None, episodes=1)

    [harness] = vlaeval_episodes(theirs_record).values()
    [mine] = vlaeval_episodes(ours_record).values()
    assert len(harness["observations"]) == len(mine["observations"]) == end.steps
    assert_same_observations(harness, mine, "the solved episode")
    [(_, success, steps)] = results.values()
    assert harness["result"]["metrics"]["success"] is success is True
    assert harness["result"]["steps"] == steps == end.steps


# -- openpi --------------------------------------------------------------------------------------


def openpi_settings(url: str) -> dict[str, Any]:
    """docs/remote.md's openpi recipe as docs/reproducing.md seals it for openpi's LIBERO client:
    both cameras letterboxed to 224, robosuite's float64 axis-angle, float64 actions, 5 of the 10
    actions per chunk."""
    return {
        "url": url,
        "dialect": "openpi",
        "connections": 1,
        "reply_timeout_s": 60,
        "load_timeout_s": 60,
        "cameras": [{"name": n, "height": CAMERA, "width": CAMERA} for n in ("agentview", "robot0_eye_in_hand")],
        "state": STATE_ENTRIES,
        "action_dim": 7,
        "chunk_length": 10,
        "execute_steps": 5,
        "action_dtype": "float64",
        "request": [
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
        ],
    }


@pytest.mark.parametrize("stack", [None, OPENPI_STACK], ids=["evalfleet-stack", "openpi-stack"])
def test_openpis_libero_client_and_evalfleet_send_the_same_requests_step_for_step(
    stack: str | None,
    manifests_on: Callable[[str | None], Path],
    scheduler: Any,
    tmp_path: Path,
    start_policy: Any,
    start_worker: Any,
) -> None:
    environment, manifests = on_stack(stack), manifests_on(stack)
    theirs_record, ours_record = tmp_path / "openpi-main.jsonl", tmp_path / "evalfleet.jsonl"

    with hash_server("openpi_hash_policy.py", tmp_path / "openpi-theirs.log", theirs_record) as server:
        port = server.address.rsplit(":", 1)[1]
        client = [sys.executable, str(HERE / "openpi_libero_client.py"), "--port", port, "--suite", SUITE]
        client += ["--tasks", str(TASK), "--trials", str(TRIALS), "--max-steps", str(MAX_STEPS)]
        client += ["--results", str(tmp_path / "openpi-main-results.jsonl")]
        run = subprocess.run(client, capture_output=True, text=True, timeout=600, env=environment)
        assert run.returncode == 0, run.stdout + run.stderr
    harness = {entry["trial"]: entry for entry in request_digest.read(tmp_path / "openpi-main-results.jsonl")}
    theirs = request_digest.read(theirs_record)

    with hash_server("openpi_hash_policy.py", tmp_path / "openpi-ours.log", ours_record) as server:
        root = tmp_path / "checkpoints"
        (root / "pi05").mkdir(parents=True)
        seal(root / "pi05", "remote", openpi_settings(f"ws://{server.address}"))
        results = run_evalfleet(scheduler, start_policy, start_worker, root, "pi05", manifests, stack)
    ours = [request for request in request_digest.read(ours_record) if request["prompt"] != "warm up"]

    # Replanning every 5 of 8 steps: two requests per trial, in the trials' order on both sides.
    assert len(theirs) == len(ours) == 2 * TRIALS, (len(theirs), len(ours))
    assert_same_requests(theirs, ours)
    assert sorted(harness) == list(range(TRIALS))
    assert {trial: (success, steps) for trial, success, steps in results.values()} == {
        trial: (entry["success"], entry["steps"]) for trial, entry in harness.items()
    }


@pytest.mark.timeout(900)
def test_a_solved_episode_is_a_success_for_openpis_client_and_evalfleet_alike(
    solved_manifest: tuple[Path, manifest_format.Manifest],
    scheduler: Any,
    tmp_path: Path,
    start_policy: Any,
    start_worker: Any,
) -> None:
    """The same solved trial against openpi-server answering the oracle's float64 commands, 10 a
    request from step 5n for the n-th (``--replay``), which both clients execute 5 at a time: the
    same requests, and a success at the oracle's step on both sides."""
    out, manifest = solved_manifest
    commands, end = solved_commands(manifest, np.float64)
    replayed = tmp_path / "replay.json"
    replayed.write_text(json.dumps(commands))
    served = ("--replay", str(replayed), "--stride", "5")
    theirs_record, ours_record = tmp_path / "openpi-main.jsonl", tmp_path / "evalfleet.jsonl"
    limit = int(manifest.data["protocol"]["max_steps"])

    with hash_server("openpi_hash_policy.py", tmp_path / "openpi-theirs.log", theirs_record, *served) as server:
        port = server.address.rsplit(":", 1)[1]
        client = [sys.executable, str(HERE / "openpi_libero_client.py"), "--port", port, "--suite", SUITE]
        client += ["--tasks", str(TASK), "--trials", "1", "--max-steps", str(limit)]
        client += ["--results", str(tmp_path / "openpi-main-results.jsonl")]
        run = subprocess.run(client, capture_output=True, text=True, timeout=600, env=on_stack(None))
        assert run.returncode == 0, run.stdout + run.stderr
    [harness] = request_digest.read(tmp_path / "openpi-main-results.jsonl")
    theirs = request_digest.read(theirs_record)

    with hash_server("openpi_hash_policy.py", tmp_path / "openpi-ours.log", ours_record, *served) as server:
        root = tmp_path / "checkpoints"
        (root / "pi05").mkdir(parents=True)
        seal(root / "pi05", "remote", openpi_settings(f"ws://{server.address}"))
        results = run_evalfleet(scheduler, start_policy, start_worker, root, "pi05", out, None, episodes=1)
    ours = [request for request in request_digest.read(ours_record) if request["prompt"] != "warm up"]

    assert len(theirs) == len(ours) == -(-end.steps // 5), (len(theirs), len(ours))
    assert_same_requests(theirs, ours)
    [(_, success, steps)] = results.values()
    assert (harness["success"], harness["steps"]) == (success, steps) == (True, end.steps)
