"""`scheduler run` of a LeRobot checkpoint: a spec naming an unsealed tiny ACT folder, its backend
and settings, and the lerobot virtualenv's python; the command seals it, serves it from that
virtualenv and evaluates real LIBERO episodes with two CPU workers, as a lab would its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from lerobot_helpers import CAMERA, LIBERO_STEPS, NEEDS_LEROBOT, NEEDS_LIBERO, backend_settings, build_tiny
from procs import cli

pytestmark = [NEEDS_LEROBOT, NEEDS_LIBERO, pytest.mark.slow, pytest.mark.libero, pytest.mark.timeout(600)]


def test_run_seals_and_evaluates_a_tiny_act_from_its_spec(lerobot_python: Path, tmp_path: Path) -> None:
    folder = build_tiny(lerobot_python, tmp_path / "act", "--size", str(CAMERA))
    settings = backend_settings(lerobot_python, f"libero_settings('act', {CAMERA})")
    document: dict[str, Any] = {
        "id": "act-spec",
        "output": "out",  # relative to the spec's folder
        "checkpoint": {"path": "act", "backend": "lerobot", "settings": settings, "python": str(lerobot_python)},
        "benchmark": {
            "libero": {
                "suites": ["libero_object"],
                "tasks": "0",
                "trials": 2,
                "camera_size": CAMERA,
                "wait_steps": 2,
                "max_steps": LIBERO_STEPS,
            }
        },
        "batch_size": 1,
        "fleet": {"workers": 2},
    }
    spec_path = tmp_path / "act.yaml"
    spec_path.write_text(yaml.safe_dump(document))
    run = cli("run", str(spec_path), timeout=540)
    assert run.returncode == 0, run.stderr[-3000:]
    sealed = json.loads((folder / "evalfleet-checkpoint.json").read_text())
    assert sealed["backend"] == "lerobot" and sealed["settings"] == settings
    results = json.loads((tmp_path / "out" / "RESULTS.json").read_text())
    assert results["complete"] and results["overall"]["completed"] == 2
    assert results["checkpoint_identity"]["backend"] == "lerobot"
    # A tiny random ACT solves nothing in 6 steps: every episode ran to its step limit.
    assert results["overall"]["succeeded"] == 0
    # Sealed once: the second run verifies the seal, submits nothing new and runs no episode.
    again = cli("run", str(spec_path), timeout=300)
    assert again.returncode == 0 and "(2 submitted before: resuming)" in again.stderr, again.stderr[-2000:]
    changed = {**document, "checkpoint": {**document["checkpoint"], "settings": {**settings, "noise_seed": 9}}}
    spec_path.write_text(yaml.safe_dump(changed))
    refused = cli("run", str(spec_path), timeout=300)
    assert refused.returncode == 2 and "checkpoint.settings: " in refused.stderr, refused.stderr
    assert "is sealed with other settings" in refused.stderr
