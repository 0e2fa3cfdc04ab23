"""Open loop against lerobot 0.4.4's own ``MetaworldEnv``: evalfleet's Meta-World trials are LeRobot's, byte for byte.

The harness side is LeRobot's package itself, imported in .venv-lerobot with Meta-World on the path
(`make lerobot-metaworld`): ``lerobot.envs.metaworld.MetaworldEnv(task, obs_type="pixels_agent_pos")``,
one per trial as lerobot-eval's vector env at its default batch size holds them, all reset in order
after numpy's global RNG is seeded as lerobot-eval's ``set_seed(--seed)`` seeds it, then each
stepped as lerobot-eval's rollout steps it (one step per action, until ``terminated`` or
Meta-World's step limit). The actions are
Meta-World's own scripted expert for the task (``MetaworldEnv.expert_policy``, which reads
Meta-World's 39-D observation under LeRobot's env), cast to float32 as a LeRobot policy's actions
reach ``env.step``, so that episodes succeed and the success step is compared on a success.

evalfleet's side, on its Meta-World stack in .venv, scans the same tasks with the same seed
(``benchmarks.metaworld.build``) and runs each entry through the code its renderer worker runs for
an episode (``open_episode``, ``reset``, ``step``), replaying the harness's recorded actions.

Compared, trial by trial: the start vector, every observation (the corner2 image's bytes and
``agent_pos``'s float64 bytes) with the simulator state it shows (joint positions and velocities,
the hand's mocap target), every success flag, and the step the episode ended at.

    python -m scripts.proofs.lerobot_metaworld_env [--tasks reach-v3,easy|all] [--trials 1]
        [--max-steps 0] [--seed 1000] [--out PATH.json] [--records DIR]

runs both sides (each in its own virtualenv; LeRobot's one process per task, as one lerobot-eval
run per task), writes a JSON summary and exits 1 if any trial differs. ``--side lerobot|evalfleet``
runs one side and writes its record (what the driver runs); ``--records DIR`` keeps both sides'
records. ``tests/adapters/test_metaworld_openloop.py`` runs it small.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from scripts.common.command import REPO

LEROBOT_PYTHON = Path(os.environ.get("EVALFLEET_LEROBOT_PYTHON", REPO / ".venv-lerobot" / "bin" / "python"))
LEROBOT_OVERLAY = Path(os.environ.get("EVALFLEET_LEROBOT_METAWORLD", REPO / ".venv-lerobot-metaworld"))
STACK = "metaworld-3.0.0_mujoco-3.3.7"
ALL_GROUPS = "easy,medium,hard,very_hard"


class ProofError(Exception):
    """The proof cannot run here (a side failed, or the two sides did not run the same trials)."""


def digest(image: Any) -> str:
    return hashlib.sha256(np.ascontiguousarray(image).tobytes()).hexdigest()


def state_digest(env: Any) -> str:
    """The simulator state of Meta-World's env ``env``: joint positions and velocities, and the
    hand's mocap target."""
    return digest(np.concatenate([env.data.qpos, env.data.qvel, env.data.mocap_pos.ravel()]))


def observation_record(image: Any, agent_pos: Any, state: str) -> dict[str, str]:
    """One observation, and the digest of the simulator state it was made from."""
    return {
        "image": digest(image),
        "agent_pos": np.asarray(agent_pos, dtype=np.float64).tobytes().hex(),
        "state": state,
    }


# -- LeRobot's side (.venv-lerobot + the Meta-World overlay) -------------------------------------


def lerobot_side(tasks: list[str], trials: int, max_steps: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Per task, lerobot-eval's episodes at its default batch size: one env per trial, all reset in
    order (the vector env's reset) after numpy's global RNG is seeded, then each run to its end."""
    from lerobot.envs.metaworld import MetaworldEnv

    record: dict[str, list[dict[str, Any]]] = {}
    for task in tasks:
        np.random.seed(seed)  # lerobot-eval's set_seed, once per run (one task per run here)
        envs = [MetaworldEnv(task=task, obs_type="pixels_agent_pos") for _ in range(trials)]
        raw: dict[int, Any] = {}
        states: dict[str, str] = {}
        for trial, env in enumerate(envs):
            _record_raw(env._env, raw, states, trial)
        firsts = [env.reset(seed=seed + trial)[0] for trial, env in enumerate(envs)]
        episodes = []
        for trial, (env, observation) in enumerate(zip(envs, firsts, strict=True)):
            start = np.array(env._env._last_rand_vec, dtype=np.float64).tolist()
            observations = [
                observation_record(observation["pixels"], observation["agent_pos"], states[f"reset {trial}"])
            ]
            actions: list[list[float]] = []
            successes: list[bool] = []
            for _ in range(max_steps or env._max_episode_steps):
                action = np.asarray(env.expert_policy.get_action(raw[trial]), dtype=np.float32)
                observation, _, terminated, truncated, info = env.step(action)
                actions.append([float(x) for x in action])
                observations.append(
                    observation_record(observation["pixels"], observation["agent_pos"], states[f"step {trial}"])
                )
                successes.append(bool(info["is_success"]))
                if terminated or truncated:
                    break
            episodes.append({"start": start, "actions": actions, "observations": observations, "successes": successes})
            env.close()
        record[task] = episodes
    return record


def _record_raw(inner: Any, raw: dict[int, Any], states: dict[str, str], trial: int) -> None:
    """Keeps Meta-World's 39-D observation of every reset and step of ``inner`` in ``raw[trial]``,
    and the simulator state after its last reset and last step in ``states["reset TRIAL"]`` and
    ``states["step TRIAL"]`` (LeRobot's env returns only the image and ``agent_pos``, the expert
    reads all of it, and after a success LeRobot's env resets itself before it returns the step's
    observation, so the state is read when the step returns)."""
    reset, step = inner.reset, inner.step

    def recorded_reset(*args: Any, **kwargs: Any) -> Any:
        result = reset(*args, **kwargs)
        raw[trial], states[f"reset {trial}"] = result[0], state_digest(inner)
        return result

    def recorded_step(*args: Any, **kwargs: Any) -> Any:
        result = step(*args, **kwargs)
        raw[trial], states[f"step {trial}"] = result[0], state_digest(inner)
        return result

    inner.reset, inner.step = recorded_reset, recorded_step


# -- evalfleet's side (.venv + the Meta-World stack) ---------------------------------------------


def evalfleet_side(harness: dict[str, list[dict[str, Any]]], trials: int, max_steps: int, seed: int) -> dict[str, Any]:
    from benchmarks.metaworld.adapter import MetaworldBenchmark
    from benchmarks.metaworld.build import build_manifests
    from benchmarks.metaworld.sim import CAMERA, CAMERA_SIZE, STATE

    args = argparse.Namespace(tasks=",".join(harness), trials=trials, seed=seed, max_steps=max_steps)
    args.camera_size, args.observation_digest = CAMERA_SIZE, False
    adapter = MetaworldBenchmark()
    record: dict[str, Any] = {}
    try:
        for manifest in build_manifests(args):
            episodes = []
            for index, theirs in enumerate(harness[manifest.task]):
                episode = adapter.open_episode(manifest, index)
                try:
                    first = episode.reset()
                    observations = [
                        observation_record(first.images[CAMERA], first.state[STATE], state_digest(episode._env))
                    ]
                    successes = []
                    for action in theirs["actions"]:
                        if episode.done:
                            break
                        seen = episode.step(np.array(action, dtype=np.float32))
                        state = state_digest(episode._env)
                        observations.append(observation_record(seen.images[CAMERA], seen.state[STATE], state))
                        successes.append(episode.result().success)
                    episodes.append(
                        {
                            "start": manifest.episodes[index]["starts"][-1],
                            "observations": observations,
                            "successes": successes,
                            "steps": episode.result().steps,
                        }
                    )
                finally:
                    episode.close()
            record[manifest.task] = episodes
    finally:
        adapter.close()
    return record


# -- the driver ----------------------------------------------------------------------------------


def compare(harness: dict[str, list[dict[str, Any]]], ours: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per trial: its steps, success and the first difference (None: identical)."""
    rows = []
    for task, episodes in harness.items():
        for trial, theirs in enumerate(episodes):
            mine = ours[task][trial]
            rows.append(
                {
                    "task": task,
                    "trial": trial,
                    "steps": len(theirs["actions"]),
                    "success": any(theirs["successes"]),
                    "difference": _first_difference(theirs, mine),
                }
            )
    return rows


def _first_difference(theirs: dict[str, Any], mine: dict[str, Any]) -> str | None:
    if theirs["start"] != mine["start"]:
        return f"start vector {theirs['start']} vs {mine['start']}"
    for step, (a, b) in enumerate(zip(theirs["observations"], mine["observations"], strict=False)):
        for key in ("state", "agent_pos", "image"):
            if a[key] != b[key]:
                return f"{key} after {step} actions"
    if theirs["successes"] != mine["successes"]:
        return f"success flags: LeRobot {theirs['successes'][-3:]}, evalfleet {mine['successes'][-3:]} (last three)"
    if len(theirs["observations"]) != len(mine["observations"]) or len(theirs["actions"]) != mine["steps"]:
        return f"LeRobot ran {len(theirs['actions'])} steps, evalfleet {mine['steps']}"
    return None


def run_side(side: str, args: argparse.Namespace, tasks: str, out: Path, harness: Path | None = None) -> dict[str, Any]:
    """One side's record of ``tasks``, run in a process of its own in that side's environment."""
    if side == "lerobot":
        python, overlay = LEROBOT_PYTHON, LEROBOT_OVERLAY
    else:
        python, overlay = Path(sys.executable), REPO / ".stacks" / STACK
    for needed in (python, overlay):
        if not needed.exists():
            raise ProofError(f"{needed} is missing (`make lerobot-venv lerobot-metaworld stacks`)")
    argv = [str(python), "-m", "scripts.proofs.lerobot_metaworld_env", "--side", side, "--tasks", tasks,
            "--trials", str(args.trials), "--max-steps", str(args.max_steps), "--seed", str(args.seed),
            "--out", str(out)]  # fmt: skip
    if harness is not None:
        argv += ["--harness", str(harness)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(overlay), str(REPO)]), "MUJOCO_GL": "osmesa"}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise ProofError(f"the {side} side failed: {done.stderr.strip()[-2000:]}")
    loaded: dict[str, Any] = json.loads(out.read_text())
    return loaded


def drive(args: argparse.Namespace) -> list[dict[str, Any]]:
    """LeRobot's side one task per process, as one lerobot-eval run per task (measured: in one
    process running several tasks one after another, LeRobot's env returned the same image for
    steps whose states differ, depending on what the process had run before); then evalfleet's
    side, every task in one process, as a renderer worker's episode process runs them."""
    import tempfile

    from benchmarks.metaworld.tasks import task_table
    from manifests.overlays import stacks_dir

    tasks = task_table((str(stacks_dir() / STACK),)).select(args.tasks.split(","), "--tasks")
    with tempfile.TemporaryDirectory(prefix="metaworld-openloop-") as folder:
        work = getattr(args, "records", None) or Path(folder)
        work.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        harness = {}
        for task in tasks:
            harness.update(run_side("lerobot", args, task, work / f"lerobot-{task}.json"))
        (work / "lerobot.json").write_text(json.dumps(harness))
        lerobot_s = time.monotonic() - started
        started = time.monotonic()
        ours = run_side("evalfleet", args, ",".join(tasks), work / "evalfleet.json", harness=work / "lerobot.json")
        evalfleet_s = time.monotonic() - started
    rows = compare(harness, ours)
    print(f"LeRobot's side {lerobot_s:.0f} s, evalfleet's {evalfleet_s:.0f} s")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.proofs.lerobot_metaworld_env")
    parser.add_argument("--tasks", default="reach-v3", help="tasks and groups, comma-separated, or all")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=0, help="0: Meta-World's limit, 500")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--records", type=Path, help="keep each side's record (lerobot.json, evalfleet.json) here")
    parser.add_argument("--side", choices=("lerobot", "evalfleet"), help=argparse.SUPPRESS)
    parser.add_argument("--harness", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tasks == "all":
        args.tasks = ALL_GROUPS
    if args.side == "lerobot":
        from benchmarks.metaworld.tasks import task_table

        tasks = task_table().select(args.tasks.split(","), "--tasks")
        args.out.write_text(json.dumps(lerobot_side(tasks, args.trials, args.max_steps, args.seed)))
        return 0
    if args.side == "evalfleet":
        harness = json.loads(args.harness.read_text())
        args.out.write_text(json.dumps(evalfleet_side(harness, args.trials, args.max_steps, args.seed)))
        return 0
    try:
        rows = drive(args)
    except ProofError as exc:
        print(f"lerobot_metaworld_env: {exc}", file=sys.stderr)
        return 2
    for row in rows:
        verdict = "identical" if row["difference"] is None else f"DIFFERS: {row['difference']}"
        success = f"success {row['success']!s:<5}"
        print(f"{row['task']:<28} trial {row['trial']}  {row['steps']:>3} steps  {success}  {verdict}")
    same = sum(row["difference"] is None for row in rows)
    print(f"{same} of {len(rows)} trials identical, {sum(r['steps'] for r in rows)} actions")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if same == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
