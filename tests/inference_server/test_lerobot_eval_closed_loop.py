"""lerobot-eval 0.4.4, its real CLI, and evalfleet on the `lerobot` preset: the same episodes, bit for bit.

Both sides run the same tiny random-weight ACT (scripts/lerobot_tiny.py, 256 pixels as the preset)
on the same simulator stack, MuJoCo 3.2.3 + robosuite 1.4.0: lerobot-eval in .venv-lerobot with
the LIBERO overlay `make lerobot-libero` builds (scripts/proofs/lerobot_eval_recorded.py runs its
`main` and writes down each episode), evalfleet as a user runs it, one `scheduler run` of a spec
whose `fleet.stack` puts the renderer worker and the manifest build on that stack, with the
checkpoint served by the lerobot backend from .venv-lerobot. The proof computes, on lerobot-eval's
side, the trace digest evalfleet's LIBERO adapter stores with every result (the scene and the full
simulator state after `set_init_state` and after every step, wait steps included), so equal
digests mean the two simulators went through the same states at every step, which they can only
do on the same actions: the policy saw the same images and state and answered the same bits.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from lerobot_helpers import (
    NEEDS_LEROBOT,
    PINNED_COMPUTE,
    backend_settings,
    build_tiny,
    episode_results,
    recorded_lerobot_eval,
)
from libero_guard import NEEDS_LIBERO
from procs import cli, require_built
from run_specs import write_spec

from manifests.overlays import stacks_dir
from scripts.common.command import REPO

pytestmark = [pytest.mark.proof, NEEDS_LEROBOT, NEEDS_LIBERO, pytest.mark.libero, pytest.mark.slow]

OVERLAY = Path(os.environ.get("EVALFLEET_LEROBOT_LIBERO", REPO / ".venv-lerobot-libero"))
STACK = "mujoco-3.2.3_robosuite-1.4.0"  # the `lerobot` preset's robosuite, a MuJoCo its range admits
CAMERA = 256  # the preset's (lerobot 0.4.4's LiberoEnv default)
SUITE, TASK, EPISODES, STEPS = "libero_object", 0, 2, 12
SEED = 1000  # lerobot-eval's --seed default, the preset's
WAIT_STEPS = 10  # LiberoEnv's num_steps_wait, the preset's


@pytest.fixture(scope="module")
def overlay() -> Path:
    require_built(stacks_dir() / STACK, "make stacks")
    return require_built(OVERLAY, "make lerobot-libero")


def lerobot_eval(python: Path, overlay: Path, policy: Path, work: Path) -> list[dict[str, Any]]:
    """lerobot-eval's episodes of libero_object task 0 at batch size 1, as its records say."""
    arguments = [
        f"--policy.path={policy}", "--policy.device=cpu", "--env.type=libero", f"--env.task={SUITE}",
        f"--env.task_ids=[{TASK}]", f"--env.episode_length={STEPS}", "--eval.batch_size=1",
        f"--eval.n_episodes={EPISODES}", f"--seed={SEED}", f"--output_dir={work / 'lerobot-eval'}",
    ]  # fmt: skip
    return recorded_lerobot_eval(python, overlay, "lerobot_eval_recorded", arguments, work)


def evalfleet_run(python: Path, policy: Path, work: Path) -> dict[int, tuple[bool, int, str]]:
    """One `scheduler run` of the same episodes: per episode index, success, steps, trace digest."""
    settings = backend_settings(python, f"libero_settings('act', {CAMERA})")
    document = {
        "id": "lerobot-eval-twin",
        "output": str(work / "run"),
        "checkpoint": {"path": str(policy), "backend": "lerobot", "python": str(python), "settings": settings},
        "benchmark": {
            "libero": {
                "suites": [SUITE],
                "tasks": str(TASK),
                "protocol": "lerobot",
                "trials": EPISODES,
                "max_steps": STEPS,
            }
        },
        "batch_size": 1,
        "canary": {"tasks": 0},
        "video": "none",
        "fleet": {"workers": 1, "stack": STACK},
    }
    run = cli("run", str(write_spec(work, document)), env=PINNED_COMPUTE, timeout=500)  # its servers inherit it
    assert run.returncode == 0, run.stderr[-4000:]
    return episode_results(work / "run")


@pytest.mark.timeout(900)
def test_lerobot_eval_and_evalfleet_run_the_same_episodes_bit_for_bit(
    lerobot_python: Path, overlay: Path, tmp_path: Path
) -> None:
    policy = build_tiny(lerobot_python, tmp_path / "checkpoints" / "act", "--size", str(CAMERA))
    harness = lerobot_eval(lerobot_python, overlay, policy, tmp_path)
    ours = evalfleet_run(lerobot_python, policy, tmp_path)

    # lerobot-eval's episode k is the preset's trial k: seed 1000 + k and init-state row k (at batch
    # size 1 only while no earlier episode succeeded, which a random-weight ACT never does).
    assert [(e["seed"], e["init_row"], e["auto_reset"]) for e in harness] == [
        (SEED + k, k, False) for k in range(EPISODES)
    ]
    assert sorted(ours) == list(range(EPISODES))
    for k, episode in enumerate(harness):
        assert len(episode["actions"]) == WAIT_STEPS + STEPS  # the wait steps, then the policy's
        assert ours[k] == (episode["success"], episode["policy_steps"], episode["trace_digest"]), f"episode {k}"
    assert harness[0]["trace_digest"] != harness[1]["trace_digest"]
