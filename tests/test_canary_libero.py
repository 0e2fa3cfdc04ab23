"""The broken-setup canary on real LIBERO episodes, through `scheduler run`: the scripted oracle
must never trip it; the same oracle with a deliberate setup mistake (actions scaled to nothing or
ten times too wide for the range it declares it was trained on, its images upside down, the
state's components shuffled) must, with the evidence in the run's output and `scheduler status`,
and a spec asking for it pauses the submission until it is cancelled.

All runs share one manifest set (libero_object tasks 0-1, one trial each), built by the first and
copied into the others' output folders. Its step limit, below the preset's 280, still lets the
oracle succeed; a broken setup's episodes run to it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from libero_guard import LIBERO_MISSING, REASON
from procs import cli, wait_until
from run_specs import oracle_document, write_spec

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.libero, pytest.mark.timeout(900)]

TESTS = Path(__file__).resolve().parent
# The oracle solves libero_object tasks 0 and 1 (trial 0) at steps 135 and 137; failing episodes run to the limit.
STEP_LIMIT = 180
# A range of actions like LIBERO's demonstrations (position and rotation commands of the OSC
# controller, then the gripper), declared as the checkpoint's trained range (settings.action_range).
LIBERO_ACTION_RANGE = {
    "low": [-0.9375] * 3 + [-0.375] * 3 + [-1.0],
    "high": [0.9375] * 3 + [0.375] * 3 + [1.0],
}
# The inference server `scheduler run` starts imports the broken oracle from here.
PLUGIN_ENV = {"PYTHONPATH": os.pathsep.join(filter(None, (str(TESTS), os.environ.get("PYTHONPATH"))))}


def canary_document(folder: Path, name: str, breakage: dict[str, Any] | None, pause: bool) -> dict[str, Any]:
    document = oracle_document(folder, name, folder / name, tasks="0-1", trials=1, max_steps=STEP_LIMIT)
    document["canary"] = {"tasks": 2, "pause": pause}
    document["video"] = "none"
    checkpoint = document["checkpoint"]
    checkpoint["path"] = str(folder / "checkpoints" / name)
    checkpoint["settings"] = {**checkpoint["settings"], "action_range": LIBERO_ACTION_RANGE}
    if breakage is not None:
        checkpoint["backend"] = "broken_oracle_backend:broken_oracle"
        checkpoint["settings"] = {**checkpoint["settings"], **breakage}
    return document


def status_line(output: Path, submission: str) -> str:
    address = re.findall(r"listening on (\S+)", (output / "logs" / "scheduler.log").read_text())[-1]
    return cli("status", submission, "--server", address).stdout


def canary_of(output: Path, submission: str) -> dict[str, Any]:
    with sqlite3.connect(f"file:{output / 'scheduler.sqlite'}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT canary, paused FROM submissions WHERE id = ?", (submission,)).fetchone()
    return {**json.loads(row[0]), "paused": bool(row[1])}


def test_the_oracle_never_trips_the_canary_and_broken_setups_do(tmp_path: Path) -> None:
    healthy = write_spec(tmp_path, canary_document(tmp_path, "healthy", None, pause=True))
    run = cli("run", str(healthy), timeout=600, env=PLUGIN_ENV)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "healthy: canary healthy over 2 episodes" in run.stdout, run.stdout
    verdict = canary_of(tmp_path / "healthy", "healthy")
    assert verdict["verdict"] == "healthy" and not verdict["paused"] and "findings" not in verdict

    # Actions scaled to nothing: the robot never moves. Without pause, the run goes on to the end.
    frozen_doc = canary_document(tmp_path, "frozen", {"breakage": "actions_scaled", "scale": 0.0}, pause=False)
    shutil.copytree(tmp_path / "healthy" / "manifests", tmp_path / "frozen" / "manifests")
    frozen = cli("run", str(write_spec(tmp_path, frozen_doc)), timeout=600, env=PLUGIN_ENV)
    assert frozen.returncode == 0, frozen.stderr[-3000:]
    verdict = canary_of(tmp_path / "frozen", "frozen")
    signatures = [finding["signature"] for finding in verdict["findings"]]
    assert verdict["verdict"] == "broken" and not verdict["paused"]
    assert signatures[:2] == ["no_success", "actions_constant"] and "state_frozen" in signatures, verdict
    assert "frozen: canary BROKEN over 2 episodes: no_success: none of the 2 canary episodes succeeded" in (
        frozen.stdout
    )

    # Actions unnormalized with statistics ten times too wide: the robot moves, but commands what
    # the checkpoint was never trained on (and is not mistaken for saturated).
    wide_doc = canary_document(tmp_path, "wide", {"breakage": "actions_scaled", "scale": 10.0}, pause=False)
    shutil.copytree(tmp_path / "healthy" / "manifests", tmp_path / "wide" / "manifests")
    wide = cli("run", str(write_spec(tmp_path, wide_doc)), timeout=600, env=PLUGIN_ENV)
    assert wide.returncode == 0, wide.stderr[-3000:]
    verdict = canary_of(tmp_path / "wide", "wide")
    signatures = [finding["signature"] for finding in verdict["findings"]]
    assert "actions_outside_statistics" in signatures and "actions_saturated" not in signatures, verdict
    assert "actions_outside_statistics: in each episode at least" in wide.stdout

    # Images turned upside down before the policy reads them: an image-reading stand-in (the oracle
    # perceiving up from its camera, tests/broken_oracle_backend.py) never solves the task.
    flipped_doc = canary_document(tmp_path, "flipped", {"breakage": "images_flipped"}, pause=False)
    shutil.copytree(tmp_path / "healthy" / "manifests", tmp_path / "flipped" / "manifests")
    flipped = cli("run", str(write_spec(tmp_path, flipped_doc)), timeout=600, env=PLUGIN_ENV)
    assert flipped.returncode == 0, flipped.stderr[-3000:]
    verdict = canary_of(tmp_path / "flipped", "flipped")
    assert verdict["verdict"] == "broken" and verdict["findings"][0]["signature"] == "no_success", verdict
    assert "flipped: canary BROKEN over 2 episodes: no_success: none of the 2 canary episodes succeeded" in (
        flipped.stdout
    )

    # The state's components shuffled, and the spec asks for a pause: the run waits, paused.
    shuffled_doc = canary_document(tmp_path, "shuffled", {"breakage": "state_shuffled"}, pause=True)
    shuffled_doc["benchmark"]["libero"]["trials"] = 2  # episodes beyond the canary's, held back
    output = tmp_path / "shuffled"
    spec_path = write_spec(tmp_path, shuffled_doc)
    with open(tmp_path / "shuffled.log", "w") as log:
        waiting = subprocess.Popen(
            [sys.executable, "-m", "scheduler.cli", "run", str(spec_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **PLUGIN_ENV},
        )
        try:

            def paused() -> bool:
                """Whether the run's database says so yet (it may not hold the submission yet)."""
                try:
                    return bool(canary_of(output, "shuffled")["paused"])
                except (sqlite3.OperationalError, TypeError):
                    return False

            wait_until(lambda: waiting.poll() is not None or paused(), 600, "the canary pauses the submission")
            assert waiting.poll() is None, (tmp_path / "shuffled.log").read_text()[-3000:]
            verdict = canary_of(output, "shuffled")
            # Measured: with its state rotated the oracle commands one direction at full speed throughout.
            assert [f["signature"] for f in verdict["findings"]] == ["no_success", "actions_constant"], verdict
            shown = status_line(output, "shuffled")
            assert "PAUSED: its pending tasks wait for `scheduler resume shuffled`" in shown, shown
            assert "no_success: none of the 2 canary episodes succeeded" in shown
            address = re.findall(r"listening on (\S+)", (output / "logs" / "scheduler.log").read_text())[-1]
            assert cli("cancel", "shuffled", "--server", address).returncode == 0
            assert waiting.wait(timeout=300) == 1, "cancelled episodes: the results are incomplete"
        finally:
            waiting.kill()
            waiting.wait()
    printed = (tmp_path / "shuffled.log").read_text()
    assert "shuffled: canary BROKEN over 2 episodes" in printed and "PAUSED" in printed
    results = json.loads((output / "RESULTS.json").read_text())
    assert results["overall"]["completed"] == 2 and not results["complete"]
