"""Open loop against lerobot 0.4.4's own MetaworldEnv: a trial is LeRobot's, byte for byte, up to its success.

scripts/proofs/lerobot_metaworld_env.py at CI size: LeRobot's env (in .venv-lerobot, with the
Meta-World overlay `make lerobot-metaworld` builds) runs reach-v3's first trial of lerobot-eval's
stream under Meta-World's scripted expert; evalfleet scans the same trial on its Meta-World stack
and its adapter replays the expert's actions. Every observation (the corner2 image's bytes and
`agent_pos`), every success flag and the step the episode ends at are compared. The script's full
run (every task) is in docs/reproducing.md.
"""

from __future__ import annotations

import argparse
import os

import pytest
from procs import require_built

from manifests.overlays import stacks_dir
from scripts.proofs.lerobot_metaworld_env import LEROBOT_OVERLAY, LEROBOT_PYTHON, STACK, drive

# `make test` sets EVALFLEET_LEROBOT_PYTHON, so there a missing virtualenv fails the test instead.
if not LEROBOT_PYTHON.exists() and "EVALFLEET_LEROBOT_PYTHON" not in os.environ:
    pytest.skip("the lerobot virtualenv is not built (make lerobot-venv)", allow_module_level=True)

pytestmark = [pytest.mark.proof, pytest.mark.slow]


@pytest.mark.timeout(600)
def test_a_metaworld_trial_is_lerobots_trial_byte_for_byte_up_to_its_success() -> None:
    require_built(stacks_dir() / STACK, "make stacks")
    require_built(LEROBOT_OVERLAY, "make lerobot-metaworld")
    rows = drive(argparse.Namespace(tasks="reach-v3", trials=1, max_steps=0, seed=1000))
    assert [(row["task"], row["difference"]) for row in rows] == [("reach-v3", None)]
    # The expert solves it, so the success step itself was compared.
    assert rows[0]["success"] is True
    assert 0 < rows[0]["steps"] < 500
