"""RoboTwin's own evaluation loop against evalfleet's episodes, on the same seeds and actions.

Run by .venv-robotwin's python on a RoboTwin checkout at c3ddfa8 (docs/benchmarks.md, RoboTwin on
the CPU). For each task, evalfleet scans a manifest (``--episodes`` accepted seeds from seed 0,
initial-observation digests recorded) and records the expert's joint rows for each entry
(``benchmarks.robotwin.expert.entry_rows``). Then both sides play those rows, one
``take_action`` each, holding the last row as the ``replay`` backend does:

- ``upstream``: ``script/eval_policy.py``'s own ``main``, unedited, in a fresh process, with a
  policy module that replays the rows. It scans its seeds itself (the expert check), draws the
  instruction itself and calls ``get_obs()`` before each action (all four cameras).
- ``evalfleet``: the adapter's episode, one ``execute`` per row, rendering no camera after the
  initial observation (its digest is checked against the manifest's at the reset).

Each side records per episode: the seed, the instruction, the digest of the first observation
(the policy cameras' images and the joint vector, as ``observation_digest``), the trace after every
action (the action, the joint state, every entity's pose and the latched success, as the episode's
trace digest chains them) and the step of success. The summary (``--out``) says per episode
whether all of those are equal and where they first differ; the exit status is 1 if any differs.
``--max-actions N`` compares only each episode's first N actions (upstream's episode is then ended
as its step limit ends one), which the real-code test does in a few minutes. ``--skip-episodes K``
compares only the episodes after the first K of the ``--episodes`` accepted seeds: upstream's loop
still scans those K seeds and sets their episodes up, and each ends at its first observation, as if
its step limit were reached (every episode starts from ``setup_demo`` of its own seed).

Outside patches on the upstream side, each needed to run upstream's code unedited here:
- the CPU stack's (``benchmarks.robotwin.cpu_stack``: a CuRobo stand-in, mplib planning, the
  raster shader), applied as the runtime applies them, before ``envs`` is imported;
- Python's ``random`` seeded before each instruction pool is generated, with the material a
  manifest uses (upstream leaves it unseeded, so its pool is not a function of the seed);
- ``ffmpeg`` (for ``eval_video_log: true``) is a stand-in that discards the frames: no ffmpeg here,
  and the video is no part of the episode;
- the process ends at the reset after the last requested episode (upstream runs 100).
Upstream writes its ``eval_result/<task>/evalfleet_expert_replay/...`` folder into the checkout.

    .venv-robotwin/bin/python -m scripts.proofs.robotwin_eval_policy --robotwin-root DIR \\
        --tasks stack_blocks_two --episodes 1 --out robotwin_proof.json
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.base import SimObservation, TraceDigest, observation_digest
from benchmarks.robotwin.adapter import RoboTwinBenchmark
from benchmarks.robotwin.build import instruction_material
from benchmarks.robotwin.config import POLICY_CAMERAS, SETTINGS
from benchmarks.robotwin.episode import STATE_KEY, joint_vector, scene_poses, trace_action
from benchmarks.robotwin.expert import entry_rows
from benchmarks.robotwin.root import open_root
from benchmarks.robotwin.runtime import RoboTwinRuntime

BLOCK_TASKS = ("stack_blocks_two", "stack_blocks_three", "handover_block", "blocks_ranking_rgb", "blocks_ranking_size")
REPLAY_MODULE = "evalfleet_expert_replay"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class EpisodeRecord:
    """What one side did in one episode."""

    seed: int
    instruction: str = ""
    initial_digest: str = ""
    step_digests: list[str] = field(default_factory=list)
    success: bool = False
    steps: int = 0


# --- evalfleet's side -------------------------------------------------------------------------


def evalfleet_episode(
    benchmark: RoboTwinBenchmark, manifest: Any, index: int, rows: Any, max_actions: int | None
) -> EpisodeRecord:
    """Entry ``index`` played with ``rows`` through the adapter's episode, one row per ``execute``."""
    entry = manifest.episodes[index]
    record = EpisodeRecord(seed=entry["seed"], instruction=entry["instruction"])
    episode = benchmark.open_episode(manifest, index, cameras=())
    try:
        episode.reset()  # renders every policy camera and checks the manifest's digest
        record.initial_digest = entry["initial_observation_digest"]
        step = 0
        while not episode.done and step != max_actions:
            episode.execute([rows[min(step, len(rows) - 1)]])
            record.step_digests.append(episode.result().trace_digest)
            step += 1
        verdict = episode.result()
        record.success, record.steps = verdict.success, verdict.steps
    finally:
        episode.close()
    return record


# --- upstream's side (a fresh process) ---------------------------------------------------------


class RecordingPolicy:
    """A deploy module's model for eval_policy.py that records what upstream's loop did: per
    episode the seed, the instruction, the first observation's digest and the trace after every
    action. Subclasses choose each action (``action``); the run ends at the reset after the last
    requested episode, an episode after ``max_actions`` actions, and each of the first ``skip``
    episodes at its first observation (none of them is written out)."""

    def __init__(self, episodes: int, max_actions: int | None, out: Path, skip: int = 0) -> None:
        self.episodes, self.max_actions, self.out, self.skip = episodes, max_actions, out, skip
        self.seeds: dict[str, int] = {}  # {"last": the seed of the last setup_demo}, kept by run_upstream
        self.records: list[EpisodeRecord] = []
        self.trace = TraceDigest()

    def reset(self, _model: Any) -> None:
        """``reset_model``: a new episode starts (after its setup_demo), or the run has done enough."""
        if len(self.records) == self.episodes:
            self.out.write_text(json.dumps([asdict(r) for r in self.records[self.skip :]]), encoding="utf-8")
            raise SystemExit(0)
        self.records.append(EpisodeRecord(seed=self.seeds["last"]))
        self.trace = TraceDigest()

    def action(self, env: Any, observation: dict[str, Any], record: EpisodeRecord) -> Any:
        raise NotImplementedError

    def eval(self, env: Any, _model: Any, observation: dict[str, Any]) -> None:
        """``eval``: one ``take_action`` per call, as RoboTwin's deploy scripts take one action."""
        if len(self.records) <= self.skip:
            env.take_action_cnt = env.step_lim  # a skipped episode: ended before its first action
            return
        record = self.records[-1]
        if not record.step_digests:
            record.instruction = str(env.get_instruction())
            state = np.asarray(observation["joint_action"]["vector"], dtype=np.float64)
            first = SimObservation(
                images={camera: observation["observation"][camera]["rgb"] for camera in POLICY_CAMERAS},
                state={STATE_KEY: state},
            )
            record.initial_digest = observation_digest(first)
            self.trace.add(f"state/{STATE_KEY}", state)
            self.trace.add("poses", scene_poses(env))
        command = self.action(env, observation, record)
        env.take_action(command)
        record.steps = env.take_action_cnt
        record.success = record.success or bool(env.eval_success)
        row = np.asarray(command, dtype=np.float64)  # the command's values, as an episode traces them
        trace_action(self.trace, env, row, joint_vector(env), record.success)
        record.step_digests.append(self.trace.hexdigest())
        if len(record.step_digests) == self.max_actions:
            env.take_action_cnt = env.step_lim  # ends the episode as its step limit would; nothing after is compared


class ReplayPolicy(RecordingPolicy):
    """Replays the rows of the episode's seed, holding the last row as the ``replay`` backend does."""

    def __init__(self, rows: dict[int, Any], episodes: int, max_actions: int | None, out: Path, skip: int) -> None:
        super().__init__(episodes, max_actions, out, skip)
        self.rows = rows

    def action(self, env: Any, observation: dict[str, Any], record: EpisodeRecord) -> Any:
        rows = self.rows[record.seed]
        return np.asarray(rows[min(len(record.step_digests), len(rows) - 1)], dtype=np.float64)


def run_upstream(root: Path, task: str, setting: str, policy: RecordingPolicy) -> None:
    """eval_policy.py's ``main`` for ``task``, as its command line would run it, with ``policy`` as
    the deploy module; ends the process when the policy has recorded its episodes."""
    RoboTwinRuntime(open_root(root))  # the CPU stack's patches, before envs is imported
    os.chdir(root)
    task_config, instruction_type = SETTINGS[setting].task_config, SETTINGS[setting].instruction_type
    seeds = policy.seeds
    task_class = getattr(importlib.import_module(f"envs.{task}"), task)
    setup_demo = task_class.setup_demo

    def remembering_setup_demo(self: Any, **kwargs: Any) -> Any:
        seeds["last"] = kwargs["seed"]
        return setup_demo(self, **kwargs)

    task_class.setup_demo = remembering_setup_demo
    spec = importlib.util.spec_from_file_location("eval_policy", root / "script" / "eval_policy.py")
    assert spec is not None and spec.loader is not None
    eval_policy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(eval_policy)
    generate = eval_policy.generate_episode_descriptions

    def seeded_generate(task_name: str, episode_info: Any, test_num: int) -> Any:
        random.seed(instruction_material(task_name, task_config, seeds["last"], instruction_type))
        return generate(task_name, episode_info, test_num)

    setattr(eval_policy, "generate_episode_descriptions", seeded_generate)  # noqa: B010 (upstream's module)
    module = types.ModuleType(REPLAY_MODULE)  # what eval_policy.py imports by --policy_name
    for name, function in (
        ("get_model", lambda _usr_args: policy),
        ("eval", policy.eval),
        ("reset_model", policy.reset),
    ):
        setattr(module, name, function)
    sys.modules[REPLAY_MODULE] = module
    usr_args = {
        "task_name": task,
        "task_config": task_config,
        "ckpt_setting": "evalfleet-proof",
        "policy_name": REPLAY_MODULE,
        "instruction_type": instruction_type,
        "seed": 0,
    }
    eval_policy.main(usr_args)
    raise SystemExit(f"upstream ran out of episodes before {policy.episodes}")


def upstream_environment() -> tuple[dict[str, str], Path]:
    """The environment an upstream process runs in (the repository importable, ``ffmpeg`` a stand-in
    that discards the frames), and the folder holding the stand-in, to delete afterwards."""
    work = Path(tempfile.mkdtemp(prefix="robotwin-upstream-"))
    stand_in = work / "bin" / "ffmpeg"
    stand_in.parent.mkdir()
    stand_in.write_text("#!/bin/sh\nexec cat >/dev/null\n")
    stand_in.chmod(0o755)
    env = {**os.environ, "PATH": f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env, work


def upstream_episodes(
    root: Path, task: str, setting: str, episodes: int, skip: int, max_actions: int | None, rows: dict[int, Any]
) -> list[EpisodeRecord]:
    """Upstream's records of its first ``episodes`` episodes less the first ``skip``, from a fresh process."""
    env, work = upstream_environment()
    try:
        np.savez(work / "rows.npz", **{str(seed): r for seed, r in rows.items()})
        argv = [
            sys.executable, "-m", "scripts.proofs.robotwin_eval_policy", "--upstream", "--robotwin-root", str(root),
            "--tasks", task, "--setting", setting, "--episodes", str(episodes), "--skip-episodes", str(skip),
            "--rows", str(work / "rows.npz"), "--out", str(work / "upstream.json"),
        ]  # fmt: skip
        if max_actions is not None:
            argv += ["--max-actions", str(max_actions)]
        run = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"upstream's eval_policy.py exited {run.returncode}: {run.stderr[-3000:]}")
        return [EpisodeRecord(**r) for r in json.loads((work / "upstream.json").read_text(encoding="utf-8"))]
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- comparing ---------------------------------------------------------------------------------


def differences(theirs: EpisodeRecord, ours: EpisodeRecord) -> list[str]:
    """What differs between the two sides' records of one episode (empty: identical)."""
    found = [
        f"{name}: upstream {getattr(theirs, name)!r}, evalfleet {getattr(ours, name)!r}"
        for name in ("seed", "instruction", "initial_digest", "success", "steps")
        if getattr(theirs, name) != getattr(ours, name)
    ]
    for step, (a, b) in enumerate(zip(theirs.step_digests, ours.step_digests, strict=False), start=1):
        if a != b:
            found.append(f"trace differs from action {step}")
            break
    if len(theirs.step_digests) != len(ours.step_digests):
        found.append(f"actions: upstream {len(theirs.step_digests)}, evalfleet {len(ours.step_digests)}")
    return found


def prove_task(
    root: Path, task: str, setting: str, episodes: int, skip: int, max_actions: int | None
) -> list[dict[str, Any]]:
    """Both sides on ``task``'s first ``episodes`` accepted seeds less the first ``skip``; one summary
    row per episode compared."""
    benchmark = RoboTwinBenchmark(root)
    (manifest,) = benchmark.build([task], [setting], episodes=episodes, seed=0, max_candidates=50, record_digests=True)
    compared = range(skip, len(manifest.episodes))
    seeds = {i: manifest.episodes[i]["seed"] for i in compared}
    rows = {seeds[i]: entry_rows(benchmark.runtime, manifest, i)[1] for i in compared}
    started = time.perf_counter()
    ours = [evalfleet_episode(benchmark, manifest, i, rows[seeds[i]], max_actions) for i in compared]
    ours_seconds = time.perf_counter() - started
    started = time.perf_counter()
    theirs = upstream_episodes(root, task, setting, episodes, skip, max_actions, rows)
    theirs_seconds = time.perf_counter() - started
    summary = []
    for index, a, b in zip(compared, theirs, ours, strict=True):
        summary.append(
            {
                "task": task,
                "episode": index,
                "seed": b.seed,
                "instruction": b.instruction,
                "expert_rows": len(rows[b.seed]),
                "actions": len(b.step_digests),
                "success_step": b.steps if b.success else None,
                "upstream_success_step": a.steps if a.success else None,
                "differences": differences(a, b),
            }
        )
    for row in summary:
        row["seconds"] = {"evalfleet": round(ours_seconds, 1), "upstream": round(theirs_seconds, 1)}
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.proofs.robotwin_eval_policy", description=__doc__)
    parser.add_argument("--robotwin-root", type=Path, required=True, help="RoboTwin checkout at commit c3ddfa8")
    parser.add_argument("--tasks", nargs="+", default=list(BLOCK_TASKS), help="default: the five block tasks")
    parser.add_argument("--setting", default="clean-seen", choices=sorted(SETTINGS))
    parser.add_argument("--episodes", type=int, default=1, help="accepted seeds per task, from seed 0")
    parser.add_argument("--skip-episodes", type=int, default=0, help="compare only the episodes after the first K")
    parser.add_argument("--max-actions", type=int, help="compare only each episode's first N actions (default: all)")
    parser.add_argument("--out", type=Path, required=True, help="the JSON summary to write")
    parser.add_argument("--upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error("--episodes must be at least 1")
    if not 0 <= args.skip_episodes < args.episodes:
        parser.error("--skip-episodes must be at least 0 and less than --episodes")
    if args.max_actions is not None and args.max_actions < 1:
        parser.error("--max-actions must be at least 1")
    root = args.robotwin_root.resolve()
    if args.upstream:
        with np.load(args.rows) as loaded:
            recorded = {int(seed): loaded[seed] for seed in loaded.files}
        run_upstream(
            root,
            args.tasks[0],
            args.setting,
            ReplayPolicy(recorded, args.episodes, args.max_actions, args.out, args.skip_episodes),
        )
    started = time.perf_counter()
    rows = [
        row
        for task in args.tasks
        for row in prove_task(root, task, args.setting, args.episodes, args.skip_episodes, args.max_actions)
    ]
    identical = sum(not row["differences"] for row in rows)
    summary = {
        "episodes": len(rows),
        "identical": identical,
        "actions": sum(row["actions"] for row in rows),
        "seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
    }
    args.out.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(f"{identical}/{len(rows)} episodes identical ({summary['actions']} actions); {summary['seconds']} s")
    for row in rows:
        print(f"  {row['task']} seed {row['seed']}: success at {row['success_step']}, {row['differences'] or 'same'}")
    return 0 if identical == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
