"""lerobot-eval 0.4.4, its real CLI, and evalfleet on Meta-World: the same episodes, bit for bit.

Both sides run the same tiny random-weight ACT (scripts/lerobot_tiny.py with Meta-World's features:
one 480x480 image, the 4-D hand state, 4-D actions) on the same Meta-World stack (metaworld 3.0.0,
MuJoCo 3.3.7): lerobot-eval in .venv-lerobot with the overlay `make lerobot-metaworld` builds
(scripts/proofs/lerobot_eval_metaworld.py runs its `main` and writes down each episode), evalfleet
as a user runs it, one `scheduler run` of a Meta-World spec, whose workers and manifest build run on
the benchmark's own stack, with the checkpoint served by the lerobot backend from .venv-lerobot and
its settings left for the seal to derive (`settings: {}`). The proof computes, on lerobot-eval's
side, the trace digest evalfleet's Meta-World adapter stores with every result (the start vectors,
then the simulator state and Meta-World's observation after the reset and after every step), so
equal digests mean the two simulators went through the same states at every step, which they can
only do on the same actions: the policy saw the same image and state and answered the same bits.

lerobot-eval runs the two episodes at batch size 1, one after the other on one env, as evalfleet's
policy answers them one at a time (a batch of two rows sums in another order, so the same policy
answers other low bits). Its second reset draws trial 1 of the stream, as it does at any batch size
while no episode has succeeded (a success makes LeRobot's env reset itself and draw again; a
random-weight policy never succeeds). The step limit is lowered to 16 on both sides (`--max-steps`, the
proof's one change to lerobot-eval's env), so the test takes CI's time, not a 500-step episode's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from lerobot_helpers import NEEDS_LEROBOT, PINNED_COMPUTE, build_tiny, episode_results, recorded_lerobot_eval
from procs import cli, require_built
from run_specs import write_spec

from manifests import format as manifest_format
from manifests.overlays import stacks_dir
from scripts.common.command import REPO

pytestmark = [pytest.mark.proof, NEEDS_LEROBOT, pytest.mark.slow]

OVERLAY = Path(os.environ.get("EVALFLEET_LEROBOT_METAWORLD", REPO / ".venv-lerobot-metaworld"))
STACK = "metaworld-3.0.0_mujoco-3.3.7"
TASK, EPISODES, STEPS = "reach-v3", 2, 16
EASY_ID = 23  # reach-v3's place in LeRobot's `easy` group (its metaworld_config.json)
SEED = 1000  # lerobot-eval's --seed default


@pytest.fixture(scope="module")
def overlay() -> Path:
    require_built(stacks_dir() / STACK, "make stacks")
    return require_built(OVERLAY, "make lerobot-metaworld")


def lerobot_eval(python: Path, overlay: Path, policy: Path, work: Path) -> list[dict[str, Any]]:
    """lerobot-eval's episodes of TASK at batch size 1, as its records say."""
    arguments = [
        "--max-steps", str(STEPS), f"--policy.path={policy}", "--policy.device=cpu", "--env.type=metaworld",
        f"--env.task={TASK}", "--eval.batch_size=1", f"--eval.n_episodes={EPISODES}", f"--seed={SEED}",
        f"--output_dir={work / 'lerobot-eval'}",
    ]  # fmt: skip
    return recorded_lerobot_eval(python, overlay, "lerobot_eval_metaworld", arguments, work)


def evalfleet_run(python: Path, policy: Path, work: Path) -> dict[int, tuple[bool, int, str]]:
    """One `scheduler run` of the same episodes: per episode index, success, steps, trace digest."""
    document = {
        "id": "lerobot-eval-metaworld-twin",
        "output": str(work / "run"),
        "checkpoint": {
            "path": str(policy),
            "backend": "lerobot",
            "python": str(python),
            "settings": {},  # derived by the seal: config.json's one image feature is fed corner2
        },
        "benchmark": {"metaworld": {"tasks": [TASK], "trials": EPISODES, "max_steps": STEPS, "seed": SEED}},
        "batch_size": 1,
        "canary": {"tasks": 0},
        "video": "none",
        "fleet": {"workers": 1},
    }
    run = cli("run", str(write_spec(work, document)), env=PINNED_COMPUTE, timeout=500)  # its servers inherit it
    assert run.returncode == 0, run.stderr[-4000:]
    # Built on the benchmark's own stack, which the spec does not name.
    (built,) = [
        manifest_format.read(path)
        for path in (work / "run" / "manifests").glob("*/*.json")
        if path.name != "BUILT.json"
    ]
    assert (built.data["versions"]["metaworld"], built.data["versions"]["mujoco"]) == ("3.0.0", "3.3.7")
    # eval_info.json numbers the task as lerobot-eval numbers it in a group run (`--env.task=easy`).
    (task,) = json.loads((work / "run" / "eval_info.json").read_text())["per_task"]
    assert (task["task_group"], task["task_id"]) == ("easy", EASY_ID)
    return episode_results(work / "run")


@pytest.mark.timeout(900)
def test_lerobot_eval_and_evalfleet_run_the_same_metaworld_episodes_bit_for_bit(
    lerobot_python: Path, overlay: Path, tmp_path: Path
) -> None:
    policy = build_tiny(lerobot_python, tmp_path / "checkpoints" / "act", "--benchmark", "metaworld", "--size", "480")
    harness = lerobot_eval(lerobot_python, overlay, policy, tmp_path)
    ours = evalfleet_run(lerobot_python, policy, tmp_path)

    # lerobot-eval's episode k is trial k of the stream: one reset each, two start vectors drawn by
    # each (Meta-World's two reset_model calls), none an automatic reset after a success.
    assert [(e["seed"], e["auto_reset"], len(e["starts"])) for e in harness] == [
        (SEED + k, False, 2) for k in range(EPISODES)
    ]
    assert sorted(ours) == list(range(EPISODES))
    for k, episode in enumerate(harness):
        assert episode["policy_steps"] == STEPS
        assert ours[k] == (episode["success"], episode["policy_steps"], episode["trace_digest"]), f"episode {k}"
    assert harness[0]["trace_digest"] != harness[1]["trace_digest"]
    # The random-weight policy moved the arm: its actions are not all alike.
    assert len({tuple(action) for action in harness[0]["actions"]}) > 1
