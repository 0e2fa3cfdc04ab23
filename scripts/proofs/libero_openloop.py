"""Open loop against vla-eval 0.8.0's own LIBERO code: the same trials, the same actions, the same bytes.

vla-eval runs a task's trials as its orchestrator does (``vla_eval/orchestrator.py``): one
``LIBEROBenchmark`` (``seed`` 7, 10 wait steps, the wrist image and the state sent, as pi0.py's
HELLO asks), whose one environment per task is built on the task's first trial with
``env.seed(7)``, the trials in order, each through its ``SyncEpisodeRunner``: ``start_episode``,
then one ``act`` per observation until ``is_done()`` or ``max_steps``. evalfleet runs the same
trials from a ``--protocol openpi`` manifest through the code a renderer worker runs for an
episode (``LiberoBenchmark.open_episode``, ``reset``, ``execute`` of each one-action chunk, and
``renderer_worker.episode.policy_view``), and turns each observation into what a vla-eval model
server receives with the ``remote`` backend's own mapping (``build_request``) of the recipe
docs/remote.md gives for pi0.py behind vla-eval (``pi05_libero_vlaeval.yaml``), whose ``reply``
steps also binarize the gripper as ``LIBEROBenchmark.step`` does. Both sides run in this process,
on this stack, one after the other.

The policy is one function of (suite, task, trial, step), ``policy_action``: it drives the gripper
down onto the scene, closes it, lifts, and repeats, so the arm touches the table and the objects.
``--solved`` replays the scripted oracle's commands instead (``scripts.proofs.solved``), which
solve most libero_object trials, so that episodes end in a success and both sides' success checks
are compared on one. On vla-eval's side the policy answers through ``HarnessPolicy``, a double of
vla-eval's websocket ``Connection`` (``start_episode``, ``act``, ``end_episode``) that keeps what
each ``act`` is handed.

Compared, trial by trial: every observation handed to the policy (each image, the ``states``
vector and the instruction: dtype, shape and bytes), every action ``env.step`` received (the wait
steps' too: dtype and bytes), the simulator's state and solver warm start after each step, whether
the robot touched anything after it, the number of
policy steps and the success. vla-eval's observation also carries ``controller_states``, which
pi0.py does not read and evalfleet's recipe does not send: it is left out of the comparison, by name.

    python -m scripts.proofs.libero_openloop [--suites ...] [--tasks all] [--trials 50] [--max-steps 0]
        [--solved] [--out PATH.json]

writes a JSON summary (per trial: steps, success, touched steps, the first difference) and exits 1
if any trial differs. ``tests/adapters/test_libero_openloop.py`` runs the same functions small.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml

from benchmarks.libero.definition import base_suite
from benchmarks.libero.runtime import SUITE_MAX_STEPS, import_libero, installed_versions, suite_size
from manifests.format import Manifest
from scripts.common.command import REPO, command_line
from scripts.common.progress import progress
from scripts.proofs.solved import SOLVED_SUITES, oracle_replay

SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
RECIPE = "pi05_libero_vlaeval.yaml"
SEED = 7  # openpi's, and the one the openpi preset builds with
WAIT_STEPS = 10
# What vla-eval's observation carries that the recipe does not send (pi0.py does not read it).
NOT_COMPARED = ("controller_states",)
# Bodies of the robot in robosuite's LIBERO scenes; a contact with any other body is a touch.
ROBOT_BODIES = ("robot0_", "gripper0_", "mount0_")
# The policy's cycle, in policy steps: down with the gripper open (the gripper starts some 0.2 m
# above the table and goes down about 13 mm a step), closing, then up.
DOWN, CLOSE, CYCLE = 20, 4, 40
# What both sides answer at a step: float64 actions as a function of (suite, task, trial, step).
ActionSource = Callable[[str, int, int, int], npt.NDArray[np.float64]]


def policy_action(suite: str, task_id: int, trial: int, step: int) -> npt.NDArray[np.float64]:
    """The 7-dim action both sides answer at ``step`` of a trial, float64: a delta pose (straight
    down for ``DOWN`` steps, still while the gripper closes, up for the rest of the ``CYCLE``,
    drifting sideways then) with a small rotation, from a hash of (suite, task, trial, step), and a
    gripper value that is never exactly +-1 (0 at the first closing step), so that both sides'
    binarization runs."""
    digest = hashlib.sha256(f"{suite}/{task_id}/{trial}/{step}".encode()).digest()
    noise = np.frombuffer(digest[:14], dtype="<u2").astype(np.float64) / 65535.0 - 0.5  # 7 in [-0.5, 0.5]
    phase = step % CYCLE
    action = np.empty(7, dtype=np.float64)
    action[0:2] = 0.0 if phase < DOWN else 0.5 * noise[0:2]
    action[2] = -1.0 if phase < DOWN else (0.1 * noise[2] if phase < DOWN + CLOSE else 0.7 + 0.2 * noise[2])
    action[3:6] = 0.2 * noise[3:6]
    grip = 0.3 + abs(noise[6])
    action[6] = -grip if phase < DOWN else (0.0 if phase == DOWN else grip)
    return action


@dataclass
class Trial:
    """What one trial showed the policy and what its environment was stepped with."""

    suite: str
    task_id: int
    trial: int
    # Per observation handed to the policy: key -> "dtype shape sha256" of its bytes (text: sha256).
    observations: list[dict[str, str]] = field(default_factory=list)
    states: list[list[float]] = field(default_factory=list)  # the `states` vector of each, for messages
    # Every action env.step received (wait steps first): "dtype shape sha256", and its float64 values.
    applied: list[str] = field(default_factory=list)
    actions: list[list[float]] = field(default_factory=list)
    touched: list[bool] = field(default_factory=list)  # per env.step: the robot touches another body
    # Per env.step: the simulator state after it (time, qpos, qvel) and the solver's warm start.
    physics: list[str] = field(default_factory=list)
    steps: int = -1
    success: bool = False
    seconds: float = 0.0  # wall time of the trial
    cpu_seconds: float = 0.0  # this process's CPU time over it (rendering threads included)

    def summary(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "task_id": self.task_id,
            "trial": self.trial,
            "steps": self.steps,
            "success": self.success,
            "observations": len(self.observations),
            "touched_steps": sum(self.touched[WAIT_STEPS:]),
            "seconds": round(self.seconds, 1),
            "cpu_seconds": round(self.cpu_seconds, 1),
        }


def fingerprint(value: Any) -> str:
    if isinstance(value, str):
        return "str " + hashlib.sha256(value.encode()).hexdigest()
    array = np.asarray(value)
    return f"{array.dtype} {list(array.shape)} {hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()}"


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        elif name not in NOT_COMPARED:
            flat[name] = value
    return flat


def _keep(trial: Trial, observation: dict[str, Any]) -> None:
    flat = _flatten(observation)
    trial.observations.append({key: fingerprint(value) for key, value in sorted(flat.items())})
    trial.states.append([float(x) for x in np.asarray(flat["states"], dtype=np.float64)])


def _touching(env: Any) -> bool:
    sim = env.sim
    model, data = sim.model, sim.data
    for i in range(data.ncon):
        contact = data.contact[i]
        names = [model.body_id2name(model.geom_bodyid[geom]) or "" for geom in (contact.geom1, contact.geom2)]
        robot = [name.startswith(ROBOT_BODIES) for name in names]
        if robot[0] != robot[1]:
            return True
    return False


@contextlib.contextmanager
def recording_steps(trial: Trial | Callable[[], Trial], widen: bool = False) -> Iterator[None]:
    """Keeps what every ``env.step`` of LIBERO's ControlEnv receives, and after it the simulator's
    state and whether the robot touches something, in ``trial`` (or in the one the callable
    returns at that step); the step itself is LIBERO's. ``widen`` keeps each action's float64 value
    instead of its own dtype and bytes."""
    from libero.libero.envs.env_wrapper import ControlEnv

    original = ControlEnv.step
    current = trial if callable(trial) else lambda: trial

    def step(env: Any, action: Any) -> Any:
        trial = current()
        trial.applied.append(fingerprint(np.asarray(action, dtype=np.float64) if widen else np.asarray(action)))
        trial.actions.append([float(x) for x in np.asarray(action, dtype=np.float64)])
        result = original(env, action)
        trial.touched.append(_touching(env))
        data = env.sim.data
        trial.physics.append(fingerprint(np.concatenate([env.sim.get_state().flatten(), data.qacc_warmstart])))
        return result

    ControlEnv.step = step
    try:
        yield
    finally:
        ControlEnv.step = original


@contextlib.contextmanager
def numpy_rng_kept() -> Iterator[None]:
    saved = np.random.get_state()
    try:
        yield
    finally:
        np.random.set_state(saved)


class HarnessPolicy:
    """A double of vla-eval's ``Connection`` (``vla_eval/connection.py``) for one episode: what the
    runner sends is kept, and ``act`` answers ``actions`` for the episode's next step, as a
    model server's reply payload (``{"actions": ...}``) in float64, the dtype it was computed in."""

    def __init__(self, trial: Trial, actions: ActionSource) -> None:
        self.trial = trial
        self.actions = actions
        self.episode_start: dict[str, Any] | None = None
        self.episode_end: dict[str, Any] | None = None

    async def start_episode(self, config: dict[str, Any]) -> None:
        self.episode_start = config

    async def act(self, observation: dict[str, Any]) -> dict[str, Any]:
        step = len(self.trial.observations)
        _keep(self.trial, observation)
        return {"actions": self.actions(self.trial.suite, self.trial.task_id, self.trial.trial, step)}

    async def end_episode(self, result: dict[str, Any]) -> None:
        self.episode_end = result


def harness_trials(
    suite: str, task_id: int, trials: int, max_steps: int, actions: ActionSource = policy_action
) -> list[Trial]:
    """Trials 0..trials-1 of ``task_id`` as vla-eval's orchestrator runs them (see the module)."""
    import_libero()  # MUJOCO_GL first: vla-eval's module would choose EGL for PyOpenGL otherwise
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    import torch
    from vla_eval.benchmarks.libero.benchmark import LIBEROBenchmark
    from vla_eval.benchmarks.libero_pro.benchmark import LIBEROProBenchmark
    from vla_eval.runners.sync_runner import SyncEpisodeRunner

    load = torch.load  # LIBEROBenchmark patches it for LIBERO's pickled init states
    # A LIBERO-PRO suite goes through vla-eval's own libero_pro benchmark, named in full.
    harness = LIBEROBenchmark if base_suite(suite) == suite else LIBEROProBenchmark
    benchmark = harness(suite=suite, seed=SEED, num_steps_wait=WAIT_STEPS, send_wrist_image=True, send_state=True)
    runner = SyncEpisodeRunner()
    done: list[Trial] = []
    try:
        with numpy_rng_kept():
            task = benchmark.get_tasks()[task_id]
            for index in range(trials):
                trial = Trial(suite, task_id, index)
                policy = HarnessPolicy(trial, actions)
                started, cpu = time.monotonic(), time.process_time()
                with recording_steps(trial):
                    result = asyncio.run(
                        runner.run_episode(benchmark, {**task, "episode_idx": index}, policy, max_steps=max_steps)
                    )
                trial.seconds, trial.cpu_seconds = time.monotonic() - started, time.process_time() - cpu
                trial.steps = int(result["steps"])
                trial.success = bool(result["metrics"]["success"])
                done.append(trial)
    finally:
        benchmark.cleanup()
        torch.load = load
    return done


def recipe() -> dict[str, Any]:
    """The settings docs/remote.md writes to ``pi05_libero_vlaeval.yaml``, read from the document."""
    text = (REPO / "docs" / "remote.md").read_text(encoding="utf-8")
    match = re.search(rf"cat > {re.escape(RECIPE)} <<'EOF'\n(.*?)\nEOF\n", text, re.DOTALL)
    if match is None:
        raise RuntimeError(f"docs/remote.md writes no {RECIPE}")
    settings: dict[str, Any] = yaml.safe_load(match.group(1))
    return settings


def evalfleet_trials(manifest: Manifest, actions: ActionSource = policy_action) -> list[Trial]:
    """Every entry of ``manifest`` (one task) through the worker's episode code and the recipe's
    request and reply mapping (see the module), in reverse order: each is rebuilt on its own."""
    from benchmarks.base import SimObservation
    from benchmarks.libero.adapter import LiberoBenchmark
    from evalfleet.v1 import policy_pb2
    from inference_server.backends.contract import History, PolicyObservation
    from inference_server.backends.remote.client_steps import parse_reply, stateless
    from inference_server.backends.remote.mapping import build_request, parse_request
    from renderer_worker.episode import EpisodeJob, policy_view

    settings = recipe()
    cameras = tuple(camera["name"] for camera in settings["cameras"])
    state = {entry["name"]: int(entry["length"]) for entry in settings["state"]}
    entries = parse_request(settings["request"], cameras, state)
    reply = parse_reply(settings["reply"], int(settings["action_dim"]), state)
    suite, task_id = manifest.setting, int(manifest.data["protocol"]["task_id"])
    adapter = LiberoBenchmark(max_idle_envs=1)
    done: dict[int, Trial] = {}
    try:
        with numpy_rng_kept():
            for index in reversed(range(len(manifest))):
                job = EpisodeJob(
                    task_id="openloop",
                    manifest_hash="",
                    index=index,
                    policy_address="",
                    expected_digest="",
                    cameras=cameras,
                    state=tuple(state),
                    action_dtype=str(settings["action_dtype"]),
                )
                trial = Trial(suite, task_id, int(manifest.episodes[index]["trial"]))
                started, cpu = time.monotonic(), time.process_time()
                with recording_steps(trial):
                    episode = adapter.open_episode(manifest, index, cameras=job.cameras)
                    try:
                        observation: SimObservation | None = episode.reset()
                        meta = policy_pb2.EpisodeMeta(instruction=episode.instruction)
                        step = 0
                        while observation is not None and not episode.done:
                            images, vectors = policy_view(observation, job)
                            seen = PolicyObservation(step, dict(images), {k: np.asarray(v) for k, v in vectors.items()})
                            request = build_request(entries, seen, History("openloop", meta))
                            _keep(trial, request)
                            chunk = actions(suite, task_id, trial.trial, step)[None, :]
                            for reply_step in reply:
                                chunk = stateless(reply_step, chunk)
                            observation = episode.execute(chunk).observation
                            step += 1
                        verdict = episode.result()
                    finally:
                        episode.close()
                trial.seconds, trial.cpu_seconds = time.monotonic() - started, time.process_time() - cpu
                trial.steps, trial.success = verdict.steps, verdict.success
                done[index] = trial
    finally:
        adapter.close()
    return [done[index] for index in range(len(manifest))]


def build_manifest(suite: str, task_id: int, trials: int, max_steps: int) -> Manifest:
    """The ``--protocol openpi`` manifest of one task (``max_steps`` 0: the preset's limit)."""
    from benchmarks.libero.build import add_build_arguments, build_manifests

    parser = argparse.ArgumentParser()
    add_build_arguments(parser)
    argv = ["--protocol", "openpi", "--suite", suite, "--tasks", str(task_id), "--trials", str(trials)]
    argv += ["--max-steps", str(max_steps), "--jobs", "1"]
    (manifest,) = build_manifests(parser.parse_args(argv))
    return manifest


def differences(harness: Trial, ours: Trial, harness_name: str = "vla-eval") -> list[str]:
    """Where evalfleet's trial differs from the harness's, first difference of each kind; empty: none."""
    where = f"{harness.suite} task {harness.task_id} trial {harness.trial}"
    found = []
    if (harness.steps, harness.success) != (ours.steps, ours.success):
        found.append(
            f"{where}: {harness_name} ended after {harness.steps} steps (success {harness.success}), "
            f"evalfleet after {ours.steps} (success {ours.success})"
        )
    pairs = (
        ("action", harness.applied, ours.applied),
        ("simulator state", harness.physics, ours.physics),
        ("touch", harness.touched, ours.touched),
    )
    for name, theirs, mine in pairs:
        first = next((i for i, (a, b) in enumerate(zip(theirs, mine, strict=False)) if a != b), None)
        if first is not None or len(theirs) != len(mine):
            at = first if first is not None else min(len(theirs), len(mine))
            found.append(f"{where}: env.step {at} ({len(theirs)} vs {len(mine)} steps): {name} differs")
    if len(harness.observations) != len(ours.observations):
        found.append(f"{where}: {len(harness.observations)} observations vs {len(ours.observations)}")
    for i, (theirs_seen, mine_seen) in enumerate(zip(harness.observations, ours.observations, strict=False)):
        if theirs_seen != mine_seen:
            keys = sorted(k for k in theirs_seen.keys() | mine_seen.keys() if theirs_seen.get(k) != mine_seen.get(k))
            detail = ""
            if "states" in keys:
                delta = np.abs(np.array(harness.states[i]) - np.array(ours.states[i])).max()
                detail = f" (states max |delta| {delta:.3g})"
            found.append(f"{where}: observation {i} differs in {', '.join(keys)}{detail}")
            break
    return found


def compare_task(
    suite: str, task_id: int, trials: int, max_steps: int, solved: bool = False
) -> tuple[list[Trial], list[Trial]]:
    """vla-eval's and evalfleet's trials of one task (``max_steps`` 0: the suite's limit), under
    ``policy_action``, or with ``solved`` the oracle's replayed commands (``scripts.proofs.solved``)."""
    manifest = build_manifest(suite, task_id, trials, max_steps)
    limit = int(manifest.data["protocol"]["max_steps"])
    actions = oracle_replay(manifest) if solved else policy_action
    return harness_trials(suite, task_id, trials, limit, actions), evalfleet_trials(manifest, actions)


def suite_tasks(raw: str, suite: str) -> list[int]:
    """The task ids ``--tasks`` names in ``suite``; ValueError names a bad one."""
    count = suite_size(suite, "--suites")
    if raw == "all":
        return list(range(count))
    ids = [int(part) for part in raw.split(",")]
    for task in ids:
        if not 0 <= task < count:
            raise ValueError(f"{suite} has tasks 0-{count - 1}, not {task}")
    return ids


def add_plan_arguments(parser: argparse.ArgumentParser, trials: int, harness: str, out: str) -> None:
    """The options every open-loop proof takes: which suites, tasks and trials, the step limit, the summary."""
    parser.add_argument("--suites", nargs="+", default=list(SUITES), choices=sorted(SUITE_MAX_STEPS))
    parser.add_argument("--tasks", default="all", help="'all' or comma-separated task ids, in every suite")
    trials_help = f"trials per task, from trial 0 ({harness}: {trials})"
    parser.add_argument("--trials", type=int, default=trials, help=trials_help)
    parser.add_argument("--max-steps", type=int, default=0, help=f"policy step limit (0: {harness}'s, per suite)")
    parser.add_argument("--out", type=Path, default=Path(out))
    parser.add_argument(
        "--solved",
        action="store_true",
        help="replay the scripted oracle's commands (scripts/proofs/solved.py; libero_object only, where it "
        "solves most trials) instead of the hashed policy, so that successes are compared too",
    )


def checked_plan(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[tuple[str, int]]:
    """The (suite, task) pairs ``add_plan_arguments``' options name; a bad option exits 2 in one line."""
    if args.trials < 1 or args.trials > 50:
        parser.error("--trials must be 1..50")
    if args.max_steps < 0:
        parser.error("--max-steps must be >= 0")
    if not args.out.parent.is_dir():
        parser.error(f"--out: {args.out.parent} is not a folder")
    if args.solved and set(args.suites) - set(SOLVED_SUITES):
        parser.error(f"--solved: the oracle solves {', '.join(SOLVED_SUITES)} only, not {' '.join(args.suites)}")
    try:
        return [(suite, task) for suite in args.suites for task in suite_tasks(args.tasks, suite)]
    except ValueError as exc:
        parser.error(f"--tasks: {exc}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.proofs.libero_openloop", description=__doc__.split("\n")[0]
    )
    add_plan_arguments(parser, trials=50, harness="vla-eval", out="libero_openloop.json")
    args = parser.parse_args(argv)
    plan = checked_plan(parser, args)
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    found: list[str] = []
    for n, (suite, task) in enumerate(plan, start=1):
        harness, ours = compare_task(suite, task, args.trials, args.max_steps, args.solved)
        for theirs, mine in zip(harness, ours, strict=True):
            diff = differences(theirs, mine)
            found += diff
            rows.append(
                {
                    **theirs.summary(),
                    "evalfleet_seconds": round(mine.seconds, 1),
                    "evalfleet_cpu_seconds": round(mine.cpu_seconds, 1),
                    "differences": diff,
                }
            )
        elapsed = time.monotonic() - started
        progress(
            f"{n}/{len(plan)} {suite} task {task}: {len(harness)} trials, "
            f"{sum(not differences(a, b) for a, b in zip(harness, ours, strict=True))} identical; "
            f"{elapsed:.0f} s, about {elapsed / n * (len(plan) - n):.0f} s to go"
        )
    summary = {
        "command": command_line(),
        "stack": _stack(),
        "policy": "oracle replay" if args.solved else "policy_action",
        "trials": len(rows),
        "identical": sum(not row["differences"] for row in rows),
        "policy_steps": sum(row["steps"] for row in rows),
        "successes": sum(row["success"] for row in rows),
        "trials_that_touched": sum(row["touched_steps"] > 0 for row in rows),
        "seconds": round(time.monotonic() - started, 1),
        "cpu_seconds": round(time.process_time(), 1),
        "vlaeval_seconds": round(sum(row["seconds"] for row in rows), 1),
        "evalfleet_seconds": round(sum(row["evalfleet_seconds"] for row in rows), 1),
        "vlaeval_cpu_seconds": round(sum(row["cpu_seconds"] for row in rows), 1),
        "evalfleet_cpu_seconds": round(sum(row["evalfleet_cpu_seconds"] for row in rows), 1),
        "rows": rows,
    }
    args.out.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(
        f"{summary['identical']}/{summary['trials']} trials identical ({summary['policy_steps']} policy steps, "
        f"{summary['successes']} successes, {summary['trials_that_touched']} touched); "
        f"{summary['seconds']} s, {summary['cpu_seconds']} s CPU (trials: vla-eval {summary['vlaeval_seconds']} s, "
        f"{summary['vlaeval_cpu_seconds']} s CPU; evalfleet {summary['evalfleet_seconds']} s, "
        f"{summary['evalfleet_cpu_seconds']} s CPU); "
        f"summary in {args.out}"
    )
    for line in found:
        print(line)
    return 1 if found else 0


def _stack() -> dict[str, str]:
    from importlib.metadata import version

    return {**installed_versions(), "vla-eval": version("vla-eval")}


if __name__ == "__main__":
    sys.exit(main())
