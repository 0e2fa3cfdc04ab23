"""Run on the Meta-World stack by tests/adapters/test_metaworld_adapter.py: what the adapter does, as JSON.

The test process runs the `libero` extra's MuJoCo 2.3.7, under which Meta-World does not load, so
the facts are gathered here, in a process with the stack's overlay first on its path (the test
starts it), and printed as one JSON object on stdout for the test to check:

- ``scan``: a build's manifest hash, the same build's again, and one with another seed; the start
  vectors per entry and the instruction;
- ``rebuild``: trials opened in reverse order on one adapter (pooled environments), each checked
  against the initial observation digest the scan recorded, against a fresh adapter's trace;
- ``execute``: the same actions by ``step`` and by ``execute`` in chunks of 5: trace digests, the
  last image, and how many times the camera rendered;
- ``success``: Meta-World's scripted expert's actions (computed on a plain environment of the same
  trial) replayed through the adapter in chunks: the step the episode ended at, and what the last
  ``execute`` returned;
- ``refusals``: what a tampered initial-observation digest, a start-vector list of the wrong length
  and a malformed action give;
- ``interleaved``: every image and the trace of the task's first trial, run on one adapter before
  and after an episode of another task (two environments, two GL contexts in one process), and on
  a fresh adapter.

    python tests/adapters/metaworld_episodes.py TASK
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from typing import Any

import numpy as np

from benchmarks.base import BenchmarkError
from benchmarks.metaworld import sim
from benchmarks.metaworld.adapter import MetaworldBenchmark
from benchmarks.metaworld.build import build_manifests
from manifests.format import Manifest, build

TRIALS = 2
STEPS = 12
OTHER = "push-v3"  # another task, whose episode runs between two of TASK's on one adapter
CHUNK = 5
# Small images: the facts do not depend on the size, and 480x480 renders would take most of the time.
CAMERA_SIZE = 64


def scan(task: str, seed: int = 1000, digest: bool = True) -> Manifest:
    args = argparse.Namespace(
        tasks=task, trials=TRIALS, seed=seed, max_steps=0, camera_size=CAMERA_SIZE, observation_digest=digest
    )
    (manifest,) = build_manifests(args)
    return manifest


def actions(count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, sim.ACTION_DIM).astype(np.float32) for _ in range(count)]


def rollout(adapter: MetaworldBenchmark, manifest: Manifest, index: int) -> str:
    episode = adapter.open_episode(manifest, index)
    try:
        episode.reset()
        for action in actions(STEPS, index):
            episode.step(action)
        return episode.result().trace_digest
    finally:
        episode.close()


def counted_renders() -> list[int]:
    """Counts sim.render's calls from now on (the adapter observes through it)."""
    count = [0]
    render = sim.render

    def counting(env: Any) -> Any:
        count[0] += 1
        return render(env)

    sim.render = counting
    return count


def execute_facts(manifest: Manifest) -> dict[str, Any]:
    adapter = MetaworldBenchmark()
    count = counted_renders()
    by_step = adapter.open_episode(manifest, 0)
    by_step.reset()
    for action in actions(STEPS, 0):
        last = by_step.step(action)
    step_renders, count[0] = count[0], 0
    by_chunk = adapter.open_episode(manifest, 0)
    by_chunk.reset()
    rows = actions(STEPS, 0)
    for start in range(0, STEPS, CHUNK):
        ran = by_chunk.execute(rows[start : start + CHUNK])
    assert ran.observation is not None
    chunk_renders = count[0]
    facts = {
        "step_trace": by_step.result().trace_digest,
        "chunk_trace": by_chunk.result().trace_digest,
        "step_image": hashlib.sha256(last.images[sim.CAMERA].tobytes()).hexdigest(),
        "chunk_image": hashlib.sha256(ran.observation.images[sim.CAMERA].tobytes()).hexdigest(),
        "step_renders": step_renders,
        "chunk_renders": chunk_renders,
        "steps": STEPS,
        "chunks": -(-STEPS // CHUNK),
    }
    by_step.close()
    by_chunk.close()
    adapter.close()
    return facts


def expert_actions(task: str, manifest: Manifest, index: int) -> list[list[float]]:
    """Meta-World's scripted expert on a plain environment of the trial, until it succeeds."""
    import metaworld.policies as policies

    env = sim.make_env(task, CAMERA_SIZE)
    expert = getattr(policies, "Sawyer" + "".join(part.capitalize() for part in task.split("-")) + "Policy")()
    raw = sim.reset_to(env, [np.array(v) for v in manifest.episodes[index]["starts"]], "starts")
    done: list[list[float]] = []
    for _ in range(manifest.data["protocol"]["max_steps"]):
        action = np.asarray(expert.get_action(raw), dtype=np.float32)
        done.append([float(x) for x in action])
        raw, solved = sim.step(env, action)
        if solved:
            break
    env.close()
    return done


def success_facts(task: str, manifest: Manifest) -> dict[str, Any]:
    rows = [np.array(a, dtype=np.float32) for a in expert_actions(task, manifest, 0)]
    # Extra actions after the expert's last, so the episode ends inside a chunk.
    rows += actions(CHUNK, 99)
    adapter = MetaworldBenchmark()
    episode = adapter.open_episode(manifest, 0, cameras=())
    first = episode.reset()
    executed, last = 0, None
    while not episode.done:
        last = episode.execute(rows[executed : executed + CHUNK])
        executed += last.executed
    result = episode.result()
    episode.close()
    adapter.close()
    return {
        "expert_steps": len(rows) - CHUNK,
        "success": result.success,
        "steps": result.steps,
        "executed": executed,
        "last_observation": None if last is None or last.observation is None else "given",
        "images_without_cameras": sorted(first.images),
    }


def refusal(call: Any) -> dict[str, Any]:
    try:
        call()
    except BenchmarkError as exc:
        return {"type": "BenchmarkError", "field": exc.field, "message": exc.message}
    except ValueError as exc:
        return {"type": "ValueError", "message": str(exc)}
    return {"type": None}


def changed(manifest: Manifest, **entry: Any) -> Manifest:
    episodes = [{**manifest.episodes[0], **entry}, *manifest.episodes[1:]]
    data = manifest.data
    return build(
        benchmark=manifest.benchmark,
        task=manifest.task,
        setting=manifest.setting,
        episodes=episodes,
        protocol=data["protocol"],
        versions=data["versions"],
        source=data["source"],
    )


def refusal_facts(manifest: Manifest) -> dict[str, Any]:
    adapter = MetaworldBenchmark()

    def reset(bad: Manifest) -> Any:
        episode = adapter.open_episode(bad, 0)
        try:
            return episode.reset()
        finally:
            episode.close()

    def bad_action() -> Any:
        episode = adapter.open_episode(manifest, 0)
        try:
            episode.reset()
            return episode.step(np.zeros(3))
        finally:
            episode.close()

    facts = {
        "digest": refusal(lambda: reset(changed(manifest, initial_observation_digest="0" * 64))),
        "starts": refusal(lambda: reset(changed(manifest, starts=manifest.episodes[0]["starts"][:1]))),
        "start_length": refusal(lambda: reset(changed(manifest, starts=[[0.0, 0.1], [0.0, 0.1]]))),
        "action": refusal(bad_action),
    }
    adapter.close()
    return facts


def interleaved_facts(manifest: Manifest) -> dict[str, Any]:
    """The task's first trial on a pooled adapter that ran another task's episode in between (two
    environments, two GL contexts in one process), against a fresh adapter's."""
    (other,) = build_manifests(
        argparse.Namespace(
            tasks=OTHER, trials=1, seed=1000, max_steps=0, camera_size=CAMERA_SIZE, observation_digest=False
        )
    )
    pooled = MetaworldBenchmark()
    runs = [imaged_rollout(pooled, m) for m in (manifest, other, manifest)]
    pooled.close()
    fresh = MetaworldBenchmark(max_idle_envs=0)
    alone = imaged_rollout(fresh, manifest)
    fresh.close()
    return {"first": runs[0], "again": runs[2], "alone": alone, "other": runs[1]}


def imaged_rollout(adapter: MetaworldBenchmark, manifest: Manifest) -> list[str]:
    """Digests of every image of trial 0 under a few actions, and of its trace."""
    episode = adapter.open_episode(manifest, 0)
    try:
        seen = [episode.reset()]
        seen += [episode.step(action) for action in actions(STEPS, 0)]
        images = [hashlib.sha256(o.images[sim.CAMERA].tobytes()).hexdigest() for o in seen]
        return [*images, episode.result().trace_digest]
    finally:
        episode.close()


def main(task: str) -> dict[str, Any]:
    manifest = scan(task)
    pooled = MetaworldBenchmark()
    pooled_traces = [rollout(pooled, manifest, index) for index in reversed(range(TRIALS))][::-1]
    pooled.close()
    fresh_traces = []
    for index in range(TRIALS):
        fresh = MetaworldBenchmark(max_idle_envs=0)
        fresh_traces.append(rollout(fresh, manifest, index))
        fresh.close()
    return {
        "scan": {
            "hash": manifest.hash,
            "again": scan(task).hash,
            "other_seed": scan(task, seed=7, digest=False).hash,
            "setting": manifest.setting,
            "starts": [len(entry["starts"]) for entry in manifest.episodes],
            "instruction": manifest.episodes[0]["instruction"],
            "digests": [entry.get("initial_observation_digest") is not None for entry in manifest.episodes],
        },
        "rebuild": {"pooled": pooled_traces, "fresh": fresh_traces},
        "execute": execute_facts(manifest),
        "success": success_facts(task, manifest),
        "refusals": refusal_facts(manifest),
        "interleaved": interleaved_facts(manifest),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
