"""`scheduler run` of a LeRobot checkpoint, as a lab runs its own: the README's own spec (an unsealed
tiny ACT folder, its backend, no settings, the lerobot virtualenv's python) and its two commands as
written, with only sizes changed. The command seals it with the settings derived from its
config.json, serves it from that virtualenv and evaluates real LIBERO episodes on CPU workers; run
again it resumes, and given settings other than the sealed ones it refuses. docs/specs.md's example
spec and commands too (tests/doc_snippets.py lists which test runs which block)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from doc_snippets import run_in, snippet
from lerobot_helpers import CAMERA, LIBERO_STEPS, NEEDS_LEROBOT, LerobotMade, run_lerobot
from libero_guard import NEEDS_LIBERO

RUN_COMMANDS = ".venv/bin/scheduler run eval.yaml --dry-run   # the plan: processes, GPUs, manifests, episodes"

pytestmark = [NEEDS_LEROBOT, NEEDS_LIBERO, pytest.mark.slow, pytest.mark.libero, pytest.mark.timeout(600)]


def readme_spec() -> dict[str, Any]:
    """The spec of the README's "Evaluate your own checkpoint" section, as a user copies it."""
    return dict(yaml.safe_load(snippet("README.md", "# eval.yaml").text))


def run_as_written(command: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """A documented command line run by bash in ``folder``, ``.venv/bin/`` being this suite's."""
    assert command.startswith(".venv/bin/"), command
    return run_in(folder, command.replace(".venv/bin/", f"{Path(sys.executable).parent}/", 1), timeout=540)


def lerobot_venv_beside(folder: Path, lerobot_python: Path) -> None:
    """``folder/.venv-lerobot``, the path the documents' specs name, as the lerobot virtualenv."""
    (folder / ".venv-lerobot").symlink_to(lerobot_python.parents[1], target_is_directory=True)


def test_the_readmes_own_checkpoint_spec_runs_as_written_resumes_and_refuses_other_settings(
    lerobot_python: Path, lerobot_made: LerobotMade, tmp_path: Path
) -> None:
    document = readme_spec()
    assert document["checkpoint"]["backend"] == "lerobot" and document["checkpoint"]["settings"] == {}
    folder = lerobot_made.copy(tmp_path / document["checkpoint"]["path"], "--size", str(CAMERA))
    lerobot_venv_beside(tmp_path, lerobot_python)
    # Only sizes change: one task, two short trials, small cameras.
    document["benchmark"]["libero"].update(
        tasks="0", trials=2, camera_size=CAMERA, wait_steps=2, max_steps=LIBERO_STEPS
    )
    spec_path = tmp_path / "eval.yaml"
    spec_path.write_text(yaml.safe_dump(document))
    # The README's two commands, as written, from the spec's folder.
    dry_run, run_line = snippet("README.md", RUN_COMMANDS).commands()
    planned = run_as_written(dry_run, tmp_path)
    assert planned.returncode == 0 and "2 episodes" in planned.stdout, planned.stderr[-3000:]
    assert not (tmp_path / "runs" / "my-policy-object" / "scheduler.sqlite").exists(), "a dry run starts nothing"
    run = run_as_written(run_line, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    out = tmp_path / "runs" / "my-policy-object"  # where the README says the results are
    results = json.loads((out / "RESULTS.json").read_text())
    assert results["complete"] and results["overall"]["completed"] == 2
    # The closing lines say where to look; no library's log line is in the output.
    assert f"results: {out / 'RESULTS.json'}" in run.stderr and f"videos: 2 in {out / 'videos'}" in run.stderr
    assert f"dashboard: scheduler serve --db {out / 'scheduler.sqlite'} --http-port 8080" in run.stderr
    assert "Matplotlib" not in run.stderr + run.stdout

    shown = run_lerobot(lerobot_python, "-m", "inference_server.cli", "checkpoint", "show", str(folder))
    assert shown.returncode == 0, shown.stderr
    derived = "policy_type, lerobot_version, transformers_version, cameras, state"
    assert f"derived   {derived}" in shown.stdout
    # The cameras at the size the manifests were built with, fed as LeRobot's LIBERO processor feeds them.
    sealed = json.loads((folder / "evalfleet-checkpoint.json").read_text())["settings"]
    assert sealed == lerobot_made.settings(f"libero_settings('act', {CAMERA})")
    assert results["checkpoint_identity"]["backend"] == "lerobot"
    # A tiny random ACT solves nothing in a few steps: every episode ran to its step limit.
    assert results["overall"]["succeeded"] == 0

    # Sealed once: the same command again verifies the seal, submits nothing new and runs no episode.
    again = run_as_written(run_line, tmp_path)
    assert again.returncode == 0 and "(1 submitted before: resuming)" in again.stderr, again.stderr[-2000:]
    # Settings given that differ from the sealed ones: refused, naming the field.
    document["checkpoint"]["settings"] = {**sealed, "noise_seed": 9}
    spec_path.write_text(yaml.safe_dump(document))
    refused = run_as_written(run_line, tmp_path)
    assert refused.returncode == 2 and "checkpoint.settings: " in refused.stderr, refused.stderr
    assert "is sealed with other settings" in refused.stderr


SPECS_EXAMPLE = "id: my-policy-object                 # the submission id; [A-Za-z0-9._-], 1..64"
SPECS_COMMANDS = (
    "scheduler run eval.yaml                  # on this machine: starts a fleet, writes the results, stops it"
)


def test_the_specs_example_plans_and_submits_as_written(
    lerobot_python: Path, lerobot_made: LerobotMade, scheduler: Any, tmp_path: Path
) -> None:
    """docs/specs.md's example spec and its commands: planned as written (the example's 500
    episodes), submitted at a small size to a running scheduler. Its first command, `scheduler run
    eval.yaml`, is the README's, run by the test above."""
    example = snippet("docs/specs.md", SPECS_EXAMPLE)
    (tmp_path / "eval.yaml").write_text(example.text)
    lerobot_made.copy(tmp_path / "checkpoints" / "my-policy", "--size", str(CAMERA))
    lerobot_venv_beside(tmp_path, lerobot_python)
    _, dry_run, submit = snippet("docs/specs.md", SPECS_COMMANDS).commands()

    def bash(command: str) -> subprocess.CompletedProcess[str]:
        return run_in(tmp_path, command, timeout=400)

    planned = bash(dry_run)
    assert planned.returncode == 0 and "; 500 episodes" in planned.stdout, planned.stdout + planned.stderr[-2000:]
    # Small: one task, two trials; HOST:50051 is the running scheduler.
    document = yaml.safe_load(example.text)
    document["benchmark"]["libero"].update(tasks="0", trials=2)
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(document))
    assert "HOST:50051" in submit
    submitted = bash(submit.replace("HOST:50051", scheduler.address))
    assert submitted.returncode == 0 and submitted.stdout.strip() == "my-policy-object", submitted.stderr[-3000:]
    summary = scheduler.client().summary("my-policy-object")
    assert summary.episodes_planned == 2 and summary.checkpoint
